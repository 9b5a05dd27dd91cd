"""K and learning-rate schedule arithmetic at a window end (``accum_steps`` schedules,
``lr_scaling``)."""

from ga_tfx._keras import tf

from typing import Any

# The adaptive schedule's hysteresis: it changes K only after this many noise-scale estimates,
# only when B_simple / b is outside [K/2, 2K], and only when that has held for this many
# windows in a row; the new K is the power of two next to B_simple / b on the side of K.
ADAPTIVE_WARMUP = 10
ADAPTIVE_PATIENCE = 10


def _learning_rate_value(optimizer: Any) -> tf.Tensor:
    """The optimizer's current learning rate as a tensor (a schedule evaluated)."""
    rate = optimizer.learning_rate
    return rate(optimizer.iterations) if callable(rate) else tf.convert_to_tensor(rate)
