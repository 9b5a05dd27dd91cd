"""``TrainingLoop``'s traced steps: one micro-batch's math (inputs, targets, the mean loss,
regularisation) and one window (micro-batches in, the window core ends it); the host loop
that calls them is ``TrainingLoop.run`` (:mod:`ga_tfx.training_loop.run`)."""

from ga_tfx._keras import tf
from ga_tfx.window import batch_size, clock

from typing import Any, Callable, Optional, Union


def default_inputs(batch: Any) -> Any:
    return batch[0] if isinstance(batch, (tuple, list)) else batch


def default_targets(batch: Any) -> Any:
    if not isinstance(batch, (tuple, list)) or len(batch) < 2:
        raise ValueError(
            "The default targets_fn takes the second element of an (inputs, targets) batch, got "
            f"a batch of type {type(batch).__name__}. Pass targets_fn=... (e.g. "
            "targets_fn=lambda batch: batch to give loss_fn the whole batch)."
        )
    return batch[1]


def mean_loss(loss: Any, samples: Any) -> Any:
    """The batch's mean loss: ``loss`` itself when scalar, else per-example losses (leading axis
    = samples, other axes averaged) summed and divided by ``samples`` (0 for an empty batch)."""
    loss = tf.cast(loss, tf.float32)
    if loss.shape.rank == 0:
        return tf.where(samples > 0, loss, 0.0)
    if loss.shape.rank is None:
        raise ValueError("loss_fn must return a scalar or per-example losses of known rank.")
    if loss.shape.rank > 1:
        loss = tf.reduce_mean(loss, axis=list(range(1, loss.shape.rank)))
    return tf.math.divide_no_nan(tf.reduce_sum(loss), samples)


def regularization_gradients(
    model: Any, variables: Any, regularization: Union[bool, Callable]
) -> Any:
    """Replica context: ``(R, ∇R)`` of the regularisation (``sum(model.losses)``, a callable
    ``model -> scalar``, or none: ``False``), or ``(None, None)`` when there is none."""
    if regularization is False:
        return None, None
    with tf.GradientTape() as tape:
        if callable(regularization):
            reg = regularization(model)
        else:
            terms = model.losses
            if not terms:
                return None, None
            reg = tf.add_n([tf.cast(t, tf.float32) for t in terms])
    return tf.cast(reg, tf.float32), tape.gradient(reg, variables)


class LoopSteps:
    """Mixin of :class:`~ga_tfx.TrainingLoop`: the traced functions of one window and one
    micro-batch. Expects the loop's ``window_core``, ``strategy``, ``state``, ``model``,
    ``optimizer``, ``variables`` and its user functions."""

    window_core: Any
    strategy: Any
    state: Any
    model: Any
    optimizer: Any
    variables: Any
    jit_compile: bool
    inputs_fn: Callable
    targets_fn: Callable
    loss_fn: Callable
    sample_count_fn: Any
    _regularization: Any
    _split: bool
    _micro_step_fn: Callable

    def _window(self, iterator: Any, take: Any, finish: bool) -> Any:
        """Cross-replica, traced: accumulates up to ``take`` micro-batches; with ``finish``
        (a Python bool) the window core ends the window when the clock finds it complete (a
        short one, the data ended, is :meth:`_end_of_data`'s). Returns the number of
        micro-batches taken."""
        count = tf.constant(0, tf.int64)
        while count < take:
            tf.autograph.experimental.set_loop_options(parallel_iterations=1)
            optional = iterator.get_next_as_optional()
            if not optional.has_value():
                break
            if not self._split:  # (read when traced: see _trace_window)
                self.strategy.run(self._micro_step_fn, args=(optional.get_value(),))
            else:  # micro_batch_split slices of it, after an out-of-memory recovery (not XLA)
                self.window_core.run_micro_batch(
                    self.strategy, self._micro_step, optional.get_value()
                )
            count += 1
        pending = clock.count(self.window_core, count)  # the data position follows it
        if finish:
            complete = clock.is_complete(self.window_core, pending)
            tf.cond(complete, self._finish_window, lambda: tf.constant(False))
        return count

    def _end_of_data(self, policy: Optional[str] = None) -> None:
        """Cross-replica, traced: the data ended; the clock ends the pending window by
        ``policy`` (``None``: ``partial_window``; the run's last window: ``"apply"``)."""
        clock.end_of_data(self.window_core, self.strategy, self._finish_window, policy)

    def _finish_window(self) -> tf.Tensor:
        return self.window_core.finish(
            self.strategy,
            self.optimizer,
            jit_compile=self.jit_compile,
            extra_gradient=self._regularization_gradients,
        )

    def _micro_step(self, batch: Any) -> Any:
        """Replica context: forward, loss, backward; adds ``n · g`` and ``n · loss`` to the
        window (the replica's mean loss over the number of replicas, as Keras scales it)."""
        x = self.inputs_fn(batch)
        samples = (
            batch_size(x)
            if self.sample_count_fn is None
            else tf.cast(self.sample_count_fn(batch), tf.float32)
        )
        replicas = float(tf.distribute.get_replica_context().num_replicas_in_sync)
        with tf.GradientTape() as tape:
            outputs = self.model(x, training=True)
            loss = mean_loss(self.loss_fn(self.targets_fn(batch), outputs), samples) / replicas
        grads = tape.gradient(loss, self.variables)
        return self.window_core.add(grads, samples, loss)

    def _regularization_gradients(self) -> Any:
        """Replica context: ``(R, ∇R)`` of the regularisation, or ``(None, None)``."""
        return regularization_gradients(self.model, self.variables, self._regularization)
