"""Optimizer-level gradient accumulation for custom training loops.

``GradientAccumulateOptimizer`` wraps any tf-keras optimizer. Call :meth:`apply_gradients`
once per micro-batch, as with a plain optimizer; the wrapped optimizer steps once per
``accum_steps`` calls with the (sample-weighted) mean of the window's gradients. On the other
micro-steps nothing of the wrapped optimizer runs: its ``iterations``, moments and learning-rate
schedule do not move. Use :meth:`flush` to apply a partial window (end of data).

For ``compile``/``fit`` use :class:`ga_tfx.GradientAccumulateModel` or :func:`ga_tfx.wrap_model`,
which also works under ``tf.distribute``. This wrapper supports the default (single-replica)
strategy: a conditional update inside a replica context would need a ``merge_call`` inside a
``tf.cond``, which ``MirroredStrategy`` does not support.
"""

from ga_tfx import _validation
from ga_tfx._keras import keras, tf
from ga_tfx.accumulator import GradientAccumulator
from ga_tfx.agc import make_agc
from ga_tfx.engine import _as_dependencies, apply_aggregated_gradients

_OPTIMIZER_TYPES = (keras.optimizers.Optimizer, keras.optimizers.legacy.Optimizer)


class GradientAccumulateOptimizer(tf.Module):
    """Accumulates gradients over ``accum_steps`` micro-steps, then applies them once.

    Args:
      optimizer: a tf-keras optimizer instance (``tf.keras.optimizers.*`` or ``.legacy.*``,
        a ``LossScaleOptimizer`` included).
      accum_steps: ``K``, micro-steps per update (int >= 1).
      agc_clip_factor, agc_eps, agc_exclude: adaptive gradient clipping of the accumulated
        gradient (off when ``agc_clip_factor`` is ``None``).

    State (checkpointed with the wrapper): the wrapped optimizer and a
    :class:`~ga_tfx.accumulator.GradientAccumulator`, created on the first call.
    """

    def __init__(self, optimizer, accum_steps, agc_clip_factor=None, agc_eps=1e-3,
                 agc_exclude=(), name="gradient_accumulate_optimizer"):
        super().__init__(name=name)
        if not isinstance(optimizer, _OPTIMIZER_TYPES):
            raise TypeError(
                f"optimizer must be a tf-keras optimizer instance (tf.keras.optimizers.*), got "
                f"{optimizer!r} of type {type(optimizer).__module__}.{type(optimizer).__name__}.")
        self.optimizer = optimizer
        self.accum_steps = _validation.check_accum_steps(accum_steps)
        self._agc = make_agc(agc_clip_factor, agc_eps, agc_exclude)
        self.accumulator = None

    @property
    def iterations(self):
        """Optimizer updates done (not micro-steps)."""
        return self.optimizer.iterations

    @property
    def learning_rate(self):
        return self.optimizer.learning_rate

    @property
    def micro_steps(self):
        """Micro-steps accumulated in the current window (``0 .. K-1`` between calls)."""
        return self.accumulator.micro_steps if self.accumulator is not None else 0

    def apply_gradients(self, grads_and_vars, sample_count=None):
        """Adds one micro-batch's gradients; applies the window when it holds ``K`` of them.

        Args:
          grads_and_vars: ``[(gradient, variable), ...]`` of one micro-batch, gradients of its
            mean loss. The same variables, in the same order, on every call.
          sample_count: the micro-batch's number of samples (its weight in the window mean);
            defaults to 1, i.e. equal weights, right when all micro-batches have one size.

        Returns:
          A bool tensor: whether this call updated the variables.
        """
        self._check_replica_count()
        grads_and_vars = list(grads_and_vars)
        grads = [g for g, _ in grads_and_vars]
        variables = [v for _, v in grads_and_vars]
        acc = self._accumulator_for(variables)
        acc.record_connected(variables, grads)
        weight = 1.0 if sample_count is None else sample_count
        with tf.control_dependencies([acc.add(grads, weight)]):
            steps = acc.micro_steps.assign_add(1)
        return tf.cond(steps >= self.accum_steps,
                       lambda: self._apply_window(variables), lambda: tf.constant(False))

    def flush(self):
        """Applies a partial window now (e.g. at the end of the data); no-op when it is empty.

        Returns a bool tensor: whether an update happened.
        """
        if self.accumulator is None:
            return tf.constant(False)
        variables = self.accumulator.accumulated_variables
        return tf.cond(self.accumulator.micro_steps > 0,
                       lambda: self._apply_window(variables), lambda: tf.constant(False))

    def _apply_window(self, variables):
        acc = self.accumulator
        sums, count = acc.reduce_window()
        grads_and_vars = [(tf.cast(s / tf.cast(count, s.dtype), v.dtype), v)
                          for s, v in zip(sums, variables)]
        grads_and_vars = acc.connected_only(grads_and_vars)
        if self._agc is not None:
            grads_and_vars = self._agc(grads_and_vars)
        applied = apply_aggregated_gradients(self.optimizer, grads_and_vars)
        with tf.control_dependencies(_as_dependencies(applied)):
            with tf.control_dependencies([acc.reset(), acc.micro_steps.assign(0)]):
                return tf.constant(True)

    def _accumulator_for(self, variables):
        if self.accumulator is None:
            if self._agc is not None:
                self._agc.check_variables(variables)
            self.accumulator = GradientAccumulator(variables)
        elif not self.accumulator.matches(variables):
            raise ValueError(
                "GradientAccumulateOptimizer.apply_gradients must receive the same variables in "
                "the same order on every call of a window.")
        return self.accumulator

    @staticmethod
    def _check_replica_count():
        ctx = tf.distribute.get_replica_context()
        replicas = ctx.num_replicas_in_sync if ctx is not None else (
            tf.distribute.get_strategy().num_replicas_in_sync)
        if replicas > 1:
            raise NotImplementedError(
                f"GradientAccumulateOptimizer runs on a single replica, got {replicas} replicas. "
                "Under tf.distribute use ga_tfx.GradientAccumulateModel / ga_tfx.wrap_model, "
                "whose windowed engine applies one all-reduced update per window.")
