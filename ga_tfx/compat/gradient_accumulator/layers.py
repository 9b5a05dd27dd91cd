"""``gradient_accumulator.layers`` on ga-tfx: :class:`AccumBatchNormalization`."""

import ga_tfx
from ga_tfx._keras import keras

from typing import Any


@keras.saving.register_keras_serializable(package="ga_tfx_compat")
class AccumBatchNormalization(ga_tfx.AccumBatchNormalization):
    """``gradient_accumulator.layers.AccumBatchNormalization`` with ga-tfx's window statistics.

    Training normalises each micro-batch with its own mean and variance (as the package and
    Keras do); the moving statistics advance once per window with the mean and variance of all
    the window's samples (the package averages the micro-batch variances, which leaves out the
    spread between micro-batch means). Trained by a ga-tfx accumulation model (this module's
    ``GradientAccumulateModel`` included) the windows are the model's; otherwise the layer
    counts ``accum_steps`` training calls. See :class:`ga_tfx.AccumBatchNormalization`.

    Args:
      accum_steps: int >= 1 (default 1: ``keras.layers.BatchNormalization``).
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
        super().__init__(
            accum_steps=accum_steps,
            momentum=momentum,
            epsilon=epsilon,
            trainable=trainable,
            **kwargs,
        )
