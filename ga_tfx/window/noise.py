"""The gradient noise scale's arithmetic (``log_noise_scale``; see :mod:`ga_tfx.window`)."""

from ga_tfx._keras import tf

import math
from typing import Any, Dict, Sequence


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
