"""The loop: how the step functions run, one window per call of the train function.

The engine's counterpart of Keras' ``make_train_function``. :class:`WindowLoop` is the train
function of an accumulation model: Keras' data handler calls it once per execution of
``steps_per_execution = K`` micro-batches, i.e. once per window. It

* takes up to ``K`` micro-batches from the iterator in a ``tf.while_loop`` (the first with
  ``next``, so an exhausted iterator ends the epoch as in Keras; the rest with
  ``get_next_as_optional``, so a short last window is kept), running
  :meth:`~ga_tfx.engine.step.WindowStep._accumulate_micro_batch` on each under
  ``strategy.run``;
* decides what to do with the window (``partial_window``): ``"apply"`` always applies, in the
  same traced function; ``"drop"`` and ``"carry"`` read the window's size on the host and apply
  a full window, discard a short one (drop) or keep it pending (carry);
* counts the update in Keras' train counter after it is applied.

:class:`CarryAlignment` is the callback that makes ``"carry"`` complete a pending window with
the first micro-batches of the next epoch.
"""

from ga_tfx._keras import keras, tf

from tf_keras.src.engine.training import reduce_per_replica  # pinned tf-keras 2.16 internals


class WindowLoop:
    """The train function of an accumulation model (``model.train_function``).

    Args:
      model: a built, compiled :class:`~ga_tfx.engine.AccumulationEngine` model whose
        gradient accumulator exists.

    Calling it with the data iterator runs one window and returns the logs of its last
    micro-batch (Keras' ``train_function`` contract). :meth:`flush` applies a pending window.
    """

    def __init__(self, model):
        self._model = model
        self._policy = model.partial_window
        if self._policy == "apply":
            self._run_window = self._compile(self._train_window_and_apply)
        else:
            self._run_window = self._compile(self._train_window)
        self._finish = self._compile(self._finish_window)
        self._discard = self._compile(self._discard_window)
        model.train_tf_function = self._run_window

    def _compile(self, function):
        return tf.function(function, reduce_retracing=True)

    def __call__(self, iterator):
        model = self._model
        logs = self._run_window(iterator)
        if self._policy == "apply":
            return logs
        # drop / carry: the decision needs the window's size, read on the host.
        pending = self.pending()
        if pending >= model.accum_steps:
            self._finish()
            if model._steps_per_execution.numpy() != model.accum_steps:
                model._steps_per_execution.assign(model.accum_steps)
        elif self._policy == "drop":
            self._discard()
        # carry: keep the partial window; CarryAlignment realigns the next epoch.
        return logs

    def pending(self):
        """Micro-batches accumulated and not yet applied (host integer)."""
        return int(self._model.gradient_accumulator.micro_steps.numpy())

    def flush(self):
        """Applies the pending window now (no-op when there is none)."""
        if self.pending() > 0:
            self._finish()

    # ------------------------------------------------------------------ traced pieces
    def _run_micro_batch(self, data):
        model = self._model
        strategy = model.distribute_strategy
        outputs = strategy.run(model._accumulate_micro_batch, args=(data,))
        return reduce_per_replica(outputs, strategy, reduction=model.distribute_reduction_method)

    def _train_window(self, iterator):
        """Cross-replica: accumulates up to ``steps_per_execution`` micro-batches.

        Returns the logs of the last micro-batch.
        """
        model = self._model
        logs = self._run_micro_batch(next(iterator))
        count = tf.constant(1, tf.int64)
        window = tf.cast(model._steps_per_execution, tf.int64)
        while count < window:
            tf.autograph.experimental.set_loop_options(parallel_iterations=1)
            optional = iterator.get_next_as_optional()
            if not optional.has_value():
                break
            logs = self._run_micro_batch(optional.get_value())
            count += 1
        with tf.control_dependencies(tf.nest.flatten(logs)):
            model.gradient_accumulator.micro_steps.assign_add(count)
        return logs

    def _finish_window(self):
        """Cross-replica: apply, then count the update."""
        model = self._model
        model.distribute_strategy.run(model._apply_window)
        model.gradient_accumulator.micro_steps.assign(0)
        model._train_counter.assign_add(1)

    def _train_window_and_apply(self, iterator):
        logs = self._train_window(iterator)
        with tf.control_dependencies(tf.nest.flatten(logs)):
            self._finish_window()
        return logs

    def _discard_window(self):
        model = self._model
        model.distribute_strategy.run(model._discard_window)
        model.gradient_accumulator.micro_steps.assign(0)


class CarryAlignment(keras.callbacks.Callback):
    """``partial_window="carry"``: the first execution of an epoch completes the pending window.

    At ``on_epoch_begin`` it sets ``steps_per_execution`` to ``K - pending`` (Keras' data handler
    reads it for the next execution); the train function sets it back to ``K`` once the window
    is applied. A window still pending when ``fit`` ends is applied then.
    """

    def __init__(self, model):
        super().__init__()
        self._ga_model = model

    def _pending(self):
        acc = self._ga_model.gradient_accumulator
        return 0 if acc is None else int(acc.micro_steps.numpy())

    def on_epoch_begin(self, epoch, logs=None):
        model = self._ga_model
        model._steps_per_execution.assign(model.accum_steps - self._pending())

    def on_train_end(self, logs=None):
        model = self._ga_model
        if isinstance(model.train_function, WindowLoop):
            model.train_function.flush()
        model._steps_per_execution.assign(model.accum_steps)
