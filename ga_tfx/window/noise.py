"""The gradient noise scale's arithmetic (``log_noise_scale``; see :mod:`ga_tfx.window`), as
functions of the config and the core's state."""

from ga_tfx._tf_internals import tf
from ga_tfx.config import AccumulationConfig
from ga_tfx.window.state import WindowState

import math
from typing import Any, Dict, List, Sequence

_ON_READ = tf.VariableSynchronization.ON_READ
_SUM = tf.VariableAggregation.SUM
# The figures of one window's estimates, as the replica step returns them (NaN: none).
WINDOW_FIGURES = ("noise_trace", "noise_grad_sq", "noise_small_batch")


def noise_sums(name: str) -> List[tf.Variable]:
    """Replica-local window sums of the noise scale's micro-batch terms: Σ b·|ĝ|², Σ b."""
    with tf.init_scope(), tf.name_scope(name):
        return [
            tf.Variable(0.0, trainable=False, synchronization=_ON_READ, aggregation=_SUM, name=n)
            for n in ("noise_sq_sum", "noise_samples")
        ]


def add_noise_terms(sums: Sequence[tf.Variable], grads: Sequence[Any], samples: Any) -> Any:
    """Adds ``b · |ĝ|²`` and ``b``: ``ĝ = R · g`` is the replica's mean-loss gradient."""
    ctx = tf.distribute.get_replica_context()
    replicas = float(ctx.num_replicas_in_sync if ctx is not None else 1)
    squares = [_squared_norm(g) for g in grads if g is not None]
    sq = tf.add_n(squares) * replicas * replicas
    b = tf.cast(samples, tf.float32)
    sq_sum, count = sums
    added = sq_sum.assign_add(b * sq)
    # The count after the gradient, as the accumulator's: where the micro-batch's size is
    # static, b is a constant, and a step whose input ran out (the data's end inside a
    # window, under MirroredStrategy) counted its samples with no gradient.
    with tf.control_dependencies([added]):
        return tf.group(added, count.assign_add(b))


def window_estimates(
    config: AccumulationConfig, sums: Sequence[Any], big_norm: Any, micro_steps: Any
) -> Dict[str, Any]:
    """Replica context, after the all-reduce: :data:`WINDOW_FIGURES` of this window (NaN with
    ``log_noise_scale`` off)."""
    noise = _noise_estimates(sums, big_norm, micro_steps) if config.log_noise_scale else {}
    nan = tf.constant(math.nan, tf.float64)
    return {key: noise.get(key, nan) for key in WINDOW_FIGURES}


def update_noise_averages(
    config: AccumulationConfig, state: WindowState, trace: Any, grad_sq: Any
) -> List[tf.Tensor]:
    """Cross-replica: folds this window's estimates ``S`` and ``G²`` (if it has them) into
    the moving averages; returns ``[EMA(S) / EMA(G²), EMA(S), EMA(G²)]`` (the averages
    bias-corrected as Adam's moments are; NaN before the first estimate)."""
    nan = tf.constant(math.nan, tf.float64)
    if not config.log_noise_scale:
        return [nan, nan, nan]
    decay = tf.constant(config.noise_scale_decay, tf.float64)
    have = tf.math.is_finite(trace) & tf.math.is_finite(grad_sq)
    averages = []
    for average, value in ((state.noise_trace_ema, trace), (state.noise_grad_sq_ema, grad_sq)):
        folded = decay * average + (1 - decay) * tf.where(have, value, 0.0)
        averages.append(average.assign(tf.where(have, folded, average)))
    count = state.noise_windows.assign_add(tf.cast(have, tf.int64))
    correction = 1 - tf.pow(decay, tf.cast(count, tf.float64))
    trace_ema, grad_ema = (tf.where(count > 0, a / correction, nan) for a in averages)
    return [trace_ema / grad_ema, trace_ema, grad_ema]


def _squared_norm(gradient: Any) -> tf.Tensor:
    """``|g|²`` in float32; an ``IndexedSlices`` gradient's duplicate rows are summed first."""
    if isinstance(gradient, tf.IndexedSlices):
        unique, positions = tf.unique(gradient.indices)
        rows = tf.math.unsorted_segment_sum(gradient.values, positions, tf.shape(unique)[0])
        return tf.reduce_sum(tf.square(tf.cast(rows, tf.float32)))
    return tf.reduce_sum(tf.square(tf.cast(gradient, tf.float32)))


def _noise_estimates(sums: Sequence[Any], big_norm: Any, micro_steps: Any) -> Dict[str, Any]:
    # micro_steps: the micro-batches (slices, with an out-of-memory split) of each replica.
    """Replica context, after the all-reduce: this window's ``S``, ``G²`` and ``B_small``
    (NaN when the window has fewer than two small gradients)."""
    sq_sum, samples = (tf.cast(s, tf.float64) for s in sums)
    ctx = tf.distribute.get_replica_context()
    replicas = tf.constant(ctx.num_replicas_in_sync if ctx is not None else 1, tf.float64)
    m = tf.cast(micro_steps, tf.float64) * replicas
    small_sq = sq_sum / samples
    big_sq = tf.square(tf.cast(big_norm, tf.float64))
    nan = tf.constant(math.nan, tf.float64)
    enough = m >= 2
    safe = tf.maximum(m - 1, 1.0)
    return {
        "noise_trace": tf.where(enough, samples * (small_sq - big_sq) / safe, nan),
        "noise_grad_sq": tf.where(enough, (m * big_sq - small_sq) / safe, nan),
        "noise_small_batch": samples / m,
    }
