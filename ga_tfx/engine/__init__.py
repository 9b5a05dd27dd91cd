"""The windowed accumulation engine for ``Model.fit``.

How it works
------------
``fit`` sees micro-batches (``batch_size`` is the micro-batch size, a ``tf.data`` dataset
yields micro-batches). The engine compiles the model with ``steps_per_execution=accum_steps``,
so Keras' data handler hands each call of the train function one *window* of up to ``K``
micro-batches. Inside one ``tf.function`` the window is a ``tf.while_loop``
(``parallel_iterations=1``: one micro-batch's activations are alive at a time) that, per
micro-batch ``i`` of ``n_i`` samples, computes the gradient ``g_i`` of the compiled loss and
adds ``n_i · g_i`` to replica-local float32 buffers. After the loop the buffers are all-reduced
once, divided by ``N = Σ n_i`` (all replicas), optionally clipped with AGC, and applied with
one unconditional ``optimizer.apply_gradients``. So:

* the update is the gradient of the mean loss over all ``N`` samples of the window (sample and
  class weights included, regularisation counted once): big-batch training, also for uneven
  micro-batches;
* ``optimizer.iterations``, learning-rate schedules, ``clipnorm``/``global_clipnorm``, weight
  decay and loss scaling see one step per window;
* under ``tf.distribute.MirroredStrategy`` gradients are all-reduced once per update, and no
  ``merge_call`` ever runs inside a conditional.

Between two calls the buffers are empty (except with ``partial_window="carry"``), so a
checkpoint taken by a callback never contains a half window.

The last window of an epoch may hold fewer than ``K`` micro-batches. ``partial_window``:

* ``"apply"`` (default): apply it as a smaller batch (its mean gradient, weights ``n_i/N``).
* ``"drop"``: discard it (no update), like ``drop_remainder``.
* ``"carry"``: keep it and complete the window with the first micro-batches of the next epoch;
  what is still pending when ``fit`` returns is applied then, so no data is lost.

``accum_steps=1`` without AGC is plain Keras training (the engine steps aside).

BatchNormalization layers normalise each micro-batch with its own statistics (ghost batch
norm); use :class:`ga_tfx.AccumBatchNormalization` for moving statistics of whole windows.
"""

from ga_tfx import _validation
from ga_tfx._keras import keras, tf
from ga_tfx._state import Untracked, attach_state
from ga_tfx.accumulator import GradientAccumulator
from ga_tfx.agc import make_agc

from tf_keras.src.engine import data_adapter  # pinned tf-keras 2.16 internals
from tf_keras.src.engine.training import reduce_per_replica

_LossScaleOptimizers = (keras.mixed_precision.LossScaleOptimizer,)


def _is_loss_scale_optimizer(optimizer):
    return isinstance(optimizer, _LossScaleOptimizers) or hasattr(optimizer, "get_scaled_loss")


def apply_aggregated_gradients(optimizer, grads_and_vars):
    """``optimizer.apply_gradients`` for gradients that are already summed over replicas.

    Under a dynamic ``LossScaleOptimizer`` a non-finite window is skipped as one unit (no weight
    or slot changes, the loss scale decreases once) and, unlike Keras' own skipped steps, does
    not count in ``optimizer.iterations``: iterations (and learning-rate schedules) count
    applied updates only.
    """
    if isinstance(optimizer, keras.optimizers.Optimizer):
        result = optimizer.apply_gradients(grads_and_vars, skip_gradients_aggregation=True)
    else:
        result = optimizer.apply_gradients(grads_and_vars, experimental_aggregate_gradients=False)
    if _is_loss_scale_optimizer(optimizer) and getattr(optimizer, "dynamic", False):
        # The same decision the LossScaleOptimizer takes: all gradients finite.
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g, _ in grads_and_vars])
        with tf.control_dependencies(_as_dependencies(result)):
            result = optimizer.iterations.assign_sub(1 - tf.cast(finite, tf.int64))
    return result


def _as_dependencies(result):
    # apply_gradients returns the iterations variable, an op, or None (LossScaleOptimizer).
    return [] if result is None else [result]


def _batch_size(x):
    """Number of samples in a (nested) input batch, as float32."""
    first = tf.nest.flatten(x)[0]
    if isinstance(first, tf.SparseTensor):
        return tf.cast(first.dense_shape[0], tf.float32)
    if isinstance(first, tf.RaggedTensor):
        return tf.cast(first.nrows(), tf.float32)
    return tf.cast(tf.shape(first)[0], tf.float32)


class AccumulationEngine:
    """Mixin for ``keras.Model`` subclasses: ``fit`` updates once per ``accum_steps`` micro-batches.

    Subclasses call :meth:`_configure_accumulation` in ``__init__``. See the module docstring for
    the semantics.
    """

    def _configure_accumulation(self, accum_steps, partial_window="apply",
                                agc_clip_factor=None, agc_eps=1e-3, agc_exclude=()):
        self._accum_steps = _validation.check_accum_steps(accum_steps)
        self._partial_window = _validation.check_partial_window(partial_window)
        self._agc = make_agc(agc_clip_factor, agc_eps, agc_exclude)
        # Held outside Keras' attribute tracking, so the buffers never appear in
        # `model.weights` / `get_weights()`; checkpoints still see them (see _set_accumulator).
        self._accumulator_holder = Untracked()

    # ------------------------------------------------------------------ public properties
    @property
    def accum_steps(self):
        """Micro-batches per optimizer update (``K``)."""
        return self._accum_steps

    @property
    def partial_window(self):
        """What happens to a window of fewer than ``K`` micro-batches: apply, drop or carry."""
        return self._partial_window

    @property
    def agc(self):
        """The :class:`~ga_tfx.agc.AdaptiveGradientClipping` in use, or ``None``."""
        return self._agc

    @property
    def gradient_accumulator(self):
        """The :class:`~ga_tfx.accumulator.GradientAccumulator` (``None`` until ``fit``)."""
        return self._accumulator_holder.value

    @property
    def samples_seen(self):
        """Training samples this model has accumulated so far (all replicas, all fits)."""
        acc = self.gradient_accumulator
        return 0 if acc is None else int(acc.samples_seen.numpy())

    def _set_accumulator(self, accumulator):
        attach_state(self, self._accumulator_holder, accumulator, "ga_gradient_accumulator")

    def accumulation_config(self):
        config = {"accum_steps": self._accum_steps, "partial_window": self._partial_window,
                  "agc_clip_factor": None, "agc_eps": 1e-3, "agc_exclude": []}
        if self._agc is not None:
            config.update(self._agc.get_config())
        return config

    # ------------------------------------------------------------------ Keras overrides
    def compile(self, *args, **kwargs):
        """``keras.Model.compile``; ``steps_per_execution`` is owned by the engine (= ``K``)."""
        steps_per_execution = kwargs.pop("steps_per_execution", None)
        if steps_per_execution not in (None, 1, self._accum_steps):
            raise ValueError(
                f"steps_per_execution={steps_per_execution!r} is not supported on a gradient "
                f"accumulation model: the engine runs one window of accum_steps="
                f"{self._accum_steps} micro-batches per execution. Leave it unset."
            )
        super().compile(*args, steps_per_execution=self._accum_steps, **kwargs)

    def compile_from_config(self, config):
        """Re-compiles a model loaded from the Keras format (optimizer state is then restored)."""
        config = keras.saving.deserialize_keras_object(config)
        self.compile(**config)
        if isinstance(self.optimizer, keras.optimizers.Optimizer) and self.built:
            self.optimizer.build(self.trainable_variables)  # so saved optimizer state loads

    def fit(self, *args, **kwargs):
        """``keras.Model.fit`` on micro-batches; ``steps_per_epoch`` counts micro-batches."""
        if self._engine_active() and self._partial_window == "carry":
            callbacks = list(kwargs.pop("callbacks", None) or [])
            kwargs["callbacks"] = [_CarryAlignment(self)] + callbacks
        try:
            return super().fit(*args, **kwargs)
        except ValueError as error:
            if "Could not infer the size of the data" not in str(error):
                raise
            raise ValueError(
                f"The training data has no known length, so Keras cannot form windows of "
                f"accum_steps={self._accum_steps} micro-batches over it. Pass steps_per_epoch "
                "(counted in micro-batches), e.g. with a repeated dataset, or give the dataset a "
                "length with tf.data.experimental.assert_cardinality.") from error

    def make_train_function(self, force=False):
        if self.train_function is not None and not force:
            return self.train_function
        if not self._engine_active():
            return super().make_train_function(force=force)
        if getattr(self, "_cluster_coordinator", None):
            raise NotImplementedError(
                "ParameterServerStrategy is not supported by ga_tfx; use MirroredStrategy or "
                "MultiWorkerMirroredStrategy.")
        self._build_gradient_accumulator()
        if self._partial_window == "apply":
            fused = tf.function(self._train_window_and_apply, reduce_retracing=True)
            self.train_tf_function = fused
            self.train_function = fused
        else:
            self.train_function = self._make_policy_train_function()
        return self.train_function

    # ------------------------------------------------------------------ the engine
    def _engine_active(self):
        # accum_steps=1 without AGC is plain Keras training, unless a caller inside ga_tfx
        # (the tuner plugin, which counts samples through the engine) asks for the engine.
        return (self._accum_steps > 1 or self._agc is not None
                or getattr(self, "_ga_always_use_engine", False))

    def _build_gradient_accumulator(self):
        variables = self.trainable_variables
        if not variables:
            raise ValueError("The model has no trainable variables to accumulate gradients for.")
        acc = self.gradient_accumulator
        if acc is None or not acc.matches(variables):
            if self._agc is not None:
                self._agc.check_variables(variables)
            with self.distribute_strategy.scope():
                self._set_accumulator(GradientAccumulator(variables))
        for layer in self._window_layers():
            if hasattr(layer, "ga_attach_to_engine"):
                layer.ga_attach_to_engine(self._accum_steps)

    def _accumulate_micro_batch(self, data):
        """Replica context: forward, loss, backward; adds ``n · g`` to the buffers."""
        x, y, sample_weight = data_adapter.unpack_x_y_sample_weight(data)
        variables = self.trainable_variables
        optimizer = self.optimizer
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x, y, y_pred, sample_weight)
            if _is_loss_scale_optimizer(optimizer):
                loss_to_differentiate = optimizer.get_scaled_loss(loss)
            else:
                loss_to_differentiate = loss
        if hasattr(self, "_validate_target_and_loss"):
            self._validate_target_and_loss(y, loss)
        grads = tape.gradient(loss_to_differentiate, variables)
        self.gradient_accumulator.record_connected(variables, grads)
        if _is_loss_scale_optimizer(optimizer):
            grads = optimizer.get_unscaled_gradients(grads)
        with tf.control_dependencies([self.gradient_accumulator.add(grads, _batch_size(x))]):
            return self.compute_metrics(x, y, y_pred, sample_weight)

    def _run_micro_batch(self, data):
        strategy = self.distribute_strategy
        outputs = strategy.run(self._accumulate_micro_batch, args=(data,))
        return reduce_per_replica(outputs, strategy, reduction=self.distribute_reduction_method)

    def _train_window(self, iterator):
        """Cross-replica: accumulates up to ``steps_per_execution`` micro-batches.

        The first micro-batch is taken with ``next`` (an exhausted iterator ends the epoch as in
        Keras); the rest with ``get_next_as_optional`` so that a short last window is kept.
        Returns the logs of the last micro-batch.
        """
        logs = self._run_micro_batch(next(iterator))
        count = tf.constant(1, tf.int64)
        window = tf.cast(self._steps_per_execution, tf.int64)
        while count < window:
            tf.autograph.experimental.set_loop_options(parallel_iterations=1)
            optional = iterator.get_next_as_optional()
            if not optional.has_value():
                break
            logs = self._run_micro_batch(optional.get_value())
            count += 1
        with tf.control_dependencies(tf.nest.flatten(logs)):
            self.gradient_accumulator.micro_steps.assign_add(count)
        return logs

    def _apply_window(self):
        """Replica context: one optimizer update with the window-mean gradient; resets."""
        acc = self.gradient_accumulator
        sums, count = acc.reduce_window()
        ctx = tf.distribute.get_replica_context()
        # Keras divides each replica's loss by the number of replicas; undo that factor.
        replicas = ctx.num_replicas_in_sync if ctx is not None else 1
        grads_and_vars = []
        for grad_sum, variable in zip(sums, self.trainable_variables):
            scale = tf.cast(replicas, grad_sum.dtype) / tf.cast(count, grad_sum.dtype)
            grads_and_vars.append((tf.cast(grad_sum * scale, variable.dtype), variable))
        grads_and_vars = acc.connected_only(grads_and_vars)
        if self._agc is not None:
            grads_and_vars = self._agc(grads_and_vars)
        applied = apply_aggregated_gradients(self.optimizer, grads_and_vars)
        with tf.control_dependencies(_as_dependencies(applied)):
            ends = [layer.ga_window_end(apply=True) for layer in self._window_layers()]
            with tf.control_dependencies(ends):
                return acc.reset()

    def _window_layers(self):
        """Layers that keep per-window state (``AccumBatchNormalization``): they implement
        ``ga_window_end(apply)``, called in replica context once per window."""
        return [layer for layer in self._flatten_layers(include_self=False)
                if hasattr(layer, "ga_window_end")]

    def _finish_window(self):
        """Cross-replica: apply, then count the update."""
        self.distribute_strategy.run(self._apply_window)
        self.gradient_accumulator.micro_steps.assign(0)
        self._train_counter.assign_add(1)

    def _train_window_and_apply(self, iterator):
        logs = self._train_window(iterator)
        with tf.control_dependencies(tf.nest.flatten(logs)):
            self._finish_window()
        return logs

    def _discard_window(self):
        def discard():
            ends = [layer.ga_window_end(apply=False) for layer in self._window_layers()]
            with tf.control_dependencies(ends):
                return self.gradient_accumulator.reset()

        self.distribute_strategy.run(discard)
        self.gradient_accumulator.micro_steps.assign(0)

    def _make_policy_train_function(self):
        """``drop``/``carry``: the decision needs the window's size, read on the host."""
        train_window = tf.function(self._train_window, reduce_retracing=True)
        finish = tf.function(self._finish_window)
        discard = tf.function(self._discard_window)
        self.train_tf_function = train_window
        model = self

        def train_function(iterator):
            logs = train_window(iterator)
            pending = int(model.gradient_accumulator.micro_steps.numpy())
            if pending >= model._accum_steps:
                finish()
                if model._steps_per_execution.numpy() != model._accum_steps:
                    model._steps_per_execution.assign(model._accum_steps)
            elif model._partial_window == "drop":
                discard()
            # carry: keep the partial window; _CarryAlignment realigns the next epoch.
            return logs

        train_function._flush = finish  # used by _CarryAlignment at the end of fit
        return train_function


class _CarryAlignment(keras.callbacks.Callback):
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
        if self._pending() > 0:
            model.train_function._flush()
        model._steps_per_execution.assign(model.accum_steps)
