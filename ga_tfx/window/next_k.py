"""The next window's K and learning rate, decided at a window end: the schedule's rule
(``config.schedule``, the value in :mod:`ga_tfx.schedules`) and ``lr_scaling``, as functions of
the config and the core's state."""

from ga_tfx._tf_internals import tf
from ga_tfx.config import AccumulationConfig
from ga_tfx.schedules import AdaptiveSchedule, CallableSchedule, PiecewiseSchedule
from ga_tfx.window import shims
from ga_tfx.window.state import WindowState

from typing import Any, cast

# The adaptive schedule's hysteresis: it changes K only after this many noise-scale estimates,
# only when B_simple / b is outside [K/2, 2K], and only when that has held for this many
# windows in a row; the new K is the power of two next to B_simple / b on the side of K.
ADAPTIVE_WARMUP = 10
ADAPTIVE_PATIENCE = 10


def next_accum_steps(
    config: AccumulationConfig,
    state: WindowState,
    windows: Any,
    micro_batch: Any,
    noise_scale: Any,
) -> tf.Tensor:
    """Cross-replica, at a window end: the schedule's (``config.schedule``, a
    :class:`~ga_tfx.schedules.Schedule`) K for the next window (window index ``windows``,
    0-based), stored in ``state.current_accum_steps``."""
    schedule = config.schedule
    current = state.current_accum_steps.read_value()
    if not schedule.varies:
        return current
    if isinstance(schedule, PiecewiseSchedule):
        starts = tf.constant([w for w, _ in schedule.pieces], tf.int64)
        values = tf.constant([k for _, k in schedule.pieces], tf.int64)
        index = tf.searchsorted(starts, tf.reshape(windows, [1]), side="right")[0] - 1
        chosen = tf.gather(values, index)
    elif isinstance(schedule, CallableSchedule):
        chosen = tf.cast(schedule.fn(windows), tf.int64)
        tf.debugging.assert_greater_equal(
            chosen, tf.constant(1, tf.int64), message="accum_steps(window) must be >= 1"
        )
    else:  # adaptive
        schedule = cast(AdaptiveSchedule, schedule)
        k_min, k_max = schedule.k_min, schedule.k_max
        # Hysteresis band [K/2, 2K]: a target only outside it, the power of two next to the
        # measured ratio B_simple / b on the side of K; within it K stays.
        ratio = noise_scale / micro_batch
        two = tf.constant(2.0, tf.float64)
        log2 = tf.math.log(ratio) / tf.math.log(two)
        k = tf.cast(current, tf.float64)
        target = tf.where(
            ratio >= 2 * k,
            tf.pow(two, tf.floor(log2)),
            tf.where(ratio <= k / 2, tf.pow(two, tf.math.ceil(log2)), k),
        )
        target = tf.clip_by_value(target, float(k_min), float(k_max))
        target = tf.where(tf.math.is_finite(target), target, k)
        ready = state.noise_windows >= ADAPTIVE_WARMUP
        differs = ready & tf.not_equal(tf.cast(target, tf.int64), current)
        streak = tf.where(differs, state.adaptive_streak + 1, 0)
        switch = streak >= ADAPTIVE_PATIENCE
        state.adaptive_streak.assign(tf.where(switch, tf.constant(0, tf.int64), streak))
        chosen = tf.where(switch, tf.cast(target, tf.int64), current)
    return state.current_accum_steps.assign(chosen)


def scale_learning_rate(
    config: AccumulationConfig, state: WindowState, optimizer: Any, k: Any
) -> tf.Tensor:
    """Cross-replica, at a window end: with ``lr_scaling``, sets the learning rate for the next
    window, of ``k`` micro-batches (``base · k/K0``, or its square root). Returns the learning
    rate of the update just applied (this window's; for a skipped window, with a schedule,
    that of the last update applied), whatever the optimizer's kind: see
    :func:`_applied_learning_rate`."""
    applied = _applied_learning_rate(optimizer)  # read before the assignment below
    if config.lr_scaling == "none":
        return applied
    variable = optimizer.learning_rate
    if shims.learning_rate_schedule(optimizer) is not None or not isinstance(variable, tf.Variable):
        raise ValueError(
            f"lr_scaling={config.lr_scaling!r} sets the optimizer's learning rate when K "
            "changes, so it must be a constant learning rate (a variable), not a "
            f"LearningRateSchedule; got {shims.learning_rate_schedule(optimizer)!r}. Use "
            "lr_scaling='none' with a schedule."
        )
    base = tf.where(
        state.base_learning_rate > 0,
        state.base_learning_rate,
        tf.cast(variable.read_value(), tf.float64),
    )
    state.base_learning_rate.assign(base)
    ratio = tf.cast(k, tf.float64) / float(config.accum_steps)
    factor = ratio if config.lr_scaling == "linear" else tf.sqrt(ratio)
    variable.assign(tf.cast(base * factor, variable.dtype))
    return applied


def _applied_learning_rate(optimizer: Any) -> tf.Tensor:
    """The learning rate the optimizer's last update used, as float64 (called after it).

    With a ``LearningRateSchedule`` it is the schedule at the update just counted,
    ``iterations - 1``: tf-keras' optimizer sets its ``learning_rate`` variable to that value
    before counting (tf_keras/src/optimizers/optimizer.py, ``_compute_current_learning_rate``),
    a legacy one (``keras.optimizers.legacy``) evaluates its schedule at ``iterations`` before
    the increment, and Keras 3's ``learning_rate`` property evaluates the schedule at the
    current ``iterations`` (keras/src/optimizers/base_optimizer.py), the next update's: so the
    schedule itself is asked, for every kind. A legacy optimizer also divides the rate by
    ``1 + decay · iterations`` (legacy/optimizer_v2.py, ``_decayed_lr``): at the same step here
    (:func:`ga_tfx.window.shims.legacy_decay`). A ``LossScaleOptimizer`` answers for its inner
    optimizer."""
    step = tf.maximum(tf.cast(optimizer.iterations, tf.float64) - 1.0, 0.0)
    schedule = shims.learning_rate_schedule(optimizer)
    rate = schedule if schedule is not None else optimizer.learning_rate
    value = tf.cast(rate(step) if callable(rate) else tf.convert_to_tensor(rate), tf.float64)
    decay = shims.legacy_decay(optimizer)
    return value / (1.0 + decay * step) if decay > 0 else value
