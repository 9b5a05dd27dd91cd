"""The out-of-memory split: a micro-batch processed as consecutive slices (``oom_recovery``)."""

from ga_tfx._keras import tf

from typing import Any

# The most slices out-of-memory recovery splits a micro-batch into when its size is unknown.
MAX_SPLIT = 2**16


def batch_size(x: Any) -> tf.Tensor:
    """Number of samples in a (nested) batch, as float32: the leading axis of its first leaf."""
    first = tf.nest.flatten(x)[0]
    if isinstance(first, tf.SparseTensor):
        return tf.cast(first.dense_shape[0], tf.float32)
    if isinstance(first, tf.RaggedTensor):
        return tf.cast(first.nrows(), tf.float32)
    return tf.cast(tf.shape(first)[0], tf.float32)


def _rows(t: Any, start: Any, stop: Any) -> Any:
    """Rows ``start:stop`` of a batch leaf (dense, ragged or sparse)."""
    if isinstance(t, tf.SparseTensor):
        return tf.sparse.slice(
            t,
            tf.concat([[start], tf.zeros_like(t.dense_shape[1:])], 0),
            tf.concat([[stop - start], t.dense_shape[1:]], 0),
        )
    if not tf.is_tensor(t) and not isinstance(t, tf.RaggedTensor):
        return t
    return t[start:stop]
