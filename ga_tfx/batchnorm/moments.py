"""The statistics of one window of :class:`~ga_tfx.AccumBatchNormalization`: per-channel count,
sum and sum of squared deviations (:class:`WindowMoments`), merged with Chan et al.'s parallel
formula across micro-batches and across replicas."""

from ga_tfx._keras import tf

from typing import Any, Sequence, Tuple

_ON_READ = tf.VariableSynchronization.ON_READ
_SUM = tf.VariableAggregation.SUM


class WindowMoments(tf.Module):
    """Per-channel ``count``, ``total = Σx`` and ``m2 = Σ(x - x̄)²`` of one window, plus the
    number of micro-batches added (``micro_steps``).

    ``count``, ``total`` and ``m2`` are additive across replicas (replica-local ``ON_READ``
    variables with ``SUM`` aggregation, as :class:`ga_tfx.GradientAccumulator`'s buffers);
    :meth:`add` merges a micro-batch with Chan's parallel formula.

    Args:
      shape: the shape of the statistics (the layer's parameter shape).
      dtype: float32 (float64 for float64 layers).
      name: module name.
    """

    def __init__(self, shape: Sequence[int], dtype: tf.DType, name: str = "window_moments") -> None:
        super().__init__(name=name)
        with tf.init_scope(), tf.name_scope(name):
            self.count = _replica_local_zeros(shape, dtype, "count")
            self.total = _replica_local_zeros(shape, dtype, "total")
            self.m2 = _replica_local_zeros(shape, dtype, "m2")
            self.micro_steps = tf.Variable(
                0,
                dtype=tf.int64,
                trainable=False,
                synchronization=_ON_READ,
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
                name="micro_steps",
            )

    def read(self) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """This replica's ``(count, total, m2)``."""
        return self.count.read_value(), self.total.read_value(), self.m2.read_value()

    def add(self, count: tf.Tensor, total: tf.Tensor, m2: tf.Tensor) -> tf.Operation:
        """Merges a micro-batch's ``(count, total, m2)`` into the window (replica context)."""
        merged = _merge_moments(self.read(), (count, total, m2))
        return tf.group(
            [v.assign(value) for v, value in zip((self.count, self.total, self.m2), merged)]
        )

    def reset(self) -> tf.Operation:
        """Empties the window (replica context)."""
        return tf.group(
            [v.assign(tf.zeros_like(v)) for v in (self.count, self.total, self.m2)]
            + [self.micro_steps.assign(0)]
        )


def _replica_local_zeros(shape: Sequence[int], dtype: tf.DType, name: str) -> tf.Variable:
    return tf.Variable(
        tf.zeros(shape, dtype),
        trainable=False,
        synchronization=_ON_READ,
        aggregation=_SUM,
        name=name,
    )


def _merge_moments(a: Tuple[Any, Any, Any], b: Tuple[Any, Any, Any]) -> Tuple[Any, Any, Any]:
    """Chan et al.'s merge of two ``(count, total, m2)`` triples (either may be empty)."""
    count_a, total_a, m2_a = a
    count_b, total_b, m2_b = b
    count = count_a + count_b
    delta = tf.math.divide_no_nan(total_b, count_b) - tf.math.divide_no_nan(total_a, count_a)
    between = tf.square(delta) * count_a * tf.math.divide_no_nan(count_b, count)
    return count, total_a + total_b, m2_a + m2_b + between


def all_reduce_moments(count: Any, total: Any, m2: Any) -> Tuple[Any, Any, Any]:
    """``(count, total, m2)`` over all replicas (replica context); as is on one replica."""
    ctx = tf.distribute.get_replica_context()
    if ctx is None or ctx.num_replicas_in_sync == 1:
        return count, total, m2
    sum_ = tf.distribute.ReduceOp.SUM
    global_count, global_total = ctx.all_reduce(sum_, [count, total])
    deviation = tf.math.divide_no_nan(total, count) - tf.math.divide_no_nan(
        global_total, global_count
    )
    global_m2 = ctx.all_reduce(sum_, m2 + count * tf.square(deviation))
    return global_count, global_total, global_m2
