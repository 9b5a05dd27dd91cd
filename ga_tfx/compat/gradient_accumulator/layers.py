"""``gradient_accumulator.layers`` on ga-tfx: :class:`AccumBatchNormalization`, whose windows are
its own when no ga-tfx front-end drives it (the self-counting mode lives here only)."""

import ga_tfx
from ga_tfx import _validation
from ga_tfx._keras import keras, tf
from ga_tfx.batchnorm.moments import all_reduce_moments

from typing import Any


@keras.saving.register_keras_serializable(package="ga_tfx_compat")
class AccumBatchNormalization(ga_tfx.AccumBatchNormalization):
    """``gradient_accumulator.layers.AccumBatchNormalization`` with ga-tfx's window statistics.

    Training normalises each micro-batch with its own mean and variance (as the package and
    Keras do); the moving statistics advance once per window with the mean and variance of all
    the window's samples, on all replicas (the package averages the micro-batch variances,
    which leaves out the spread between micro-batch means). Trained by a ga-tfx front-end (this
    module's ``GradientAccumulateModel`` included) the windows are the front-end's, as for
    :class:`ga_tfx.AccumBatchNormalization`; otherwise (plain ``fit``, a custom loop) the layer
    counts its own: every ``accum_steps`` training calls it folds the window's statistics into
    the moving ones, one Keras momentum update. On its own clock each training call all-reduces
    its micro-batch statistics (small per-channel vectors) under a multi-replica strategy, so
    that the update, taken conditionally, needs no collective inside a conditional. A front-end
    that takes the layer over after a step was traced on the layer's own clock makes that step
    refuse to run (an error naming ``window_layers``).

    Args:
      accum_steps: training calls per window when no front-end drives the layer; int >= 1
        (default 1: ``keras.layers.BatchNormalization``).
      momentum: moving-average momentum (default 0.99).
      epsilon: added to the variance (default 1e-3).
      trainable: whether gamma and beta train (default True).
      **kwargs: ``keras.layers.BatchNormalization`` arguments (``axis``, ``center``,
        ``scale``, initializers, ``name``...).

    Input shape: rank >= 2, samples on axis 0. Output shape: the input's.
    """

    def __init__(
        self,
        accum_steps: int = 1,
        momentum: float = 0.99,
        epsilon: float = 1e-3,
        trainable: bool = True,
        **kwargs: Any,
    ) -> None:
        accum_steps = _validation.check_accum_steps(accum_steps)
        super().__init__(momentum=momentum, epsilon=epsilon, trainable=trainable, **kwargs)
        self.accum_steps = accum_steps

    def _accumulates(self) -> bool:
        return self._driven or self.accum_steps > 1

    def _record_micro_batch(self, inputs: tf.Tensor, mask: Any) -> tf.Tensor:
        """Adds one micro-batch to the window (replica context); on the layer's own clock,
        ends the window at its ``accum_steps``-th call. Returns whether it ended one."""
        if self._driven:
            return super()._record_micro_batch(inputs, mask)
        # The update below is conditional, so the collective has to happen here.
        batch = all_reduce_moments(*self._micro_batch_moments(inputs, mask))
        steps = self._add_to_window(batch, checks=[self._refuse_if_driven()])
        return tf.cond(
            steps >= self.accum_steps, self._apply_own_window, lambda: tf.constant(False)
        )

    def _apply_own_window(self) -> tf.Tensor:
        # The moments already cover all replicas: no collective in this branch.
        with tf.control_dependencies([self._fold_window(*self._built_window_moments.read())]):
            return tf.constant(True)

    def get_config(self) -> dict:
        config = super().get_config()
        config["accum_steps"] = self.accum_steps
        return config
