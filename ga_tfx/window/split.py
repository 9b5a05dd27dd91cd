"""The out-of-memory split: a micro-batch processed as consecutive slices (``oom_recovery``),
as functions of the core (a :class:`~ga_tfx.window.WindowCore`, duck-typed: this module does
not import it; its ``accumulation`` config and ``state`` are read) or of its state."""

from ga_tfx._tf_internals import tf
from ga_tfx.window.state import WindowState

from typing import Any, Callable

# The most slices out-of-memory recovery splits a micro-batch into when its size is unknown.
MAX_SPLIT = 2**16


def track_rows(state: WindowState, samples: Any) -> Any:
    """Replica context: keeps the largest micro-batch yet, per replica (recovery's limit), from
    the ``samples`` of one slice."""
    rows = tf.cast(tf.math.ceil(tf.cast(samples, tf.float32)), tf.int64)
    rows = rows * state.micro_batch_split.read_value()
    return state.micro_batch_rows.assign(tf.maximum(state.micro_batch_rows, rows))


def run_micro_batch(core: Any, strategy: Any, step: Callable[[Any], Any], data: Any) -> Any:
    """Cross-replica context: ``strategy.run(step)`` on the micro-batch ``data``, as
    ``micro_batch_split`` consecutive slices of each replica's part; returns the last
    call's outputs. The window runner traces it only under ``oom_recovery`` and once the
    split is above 1 (after a recovery it traces its step again): otherwise it runs ``step``
    on the whole micro-batch, with no loop.

    Slices of a micro-batch of ``b`` samples have ``ceil(b / split)`` samples (the last
    fewer): the same sub-micro-batches, in the same order, as a run at that micro-batch.
    The loop over slices runs in cross-replica context: ``step`` (Keras' metrics, a
    ``merge_call``) never runs inside a replica-context loop.
    """
    split = core.state.micro_batch_split.read_value()

    def sliced(part: Any, i: Any) -> Any:
        samples = tf.cast(batch_size(part), tf.int64)
        size = (samples + split - 1) // split
        start = tf.minimum(i * size, samples)
        stop = tf.minimum(start + size, samples)
        return step(tf.nest.map_structure(lambda t: _rows(t, start, stop), part))

    first = tf.constant(0, tf.int64)
    outputs = strategy.run(sliced, args=(data, first))
    local = strategy.experimental_local_results(outputs) if outputs is not None else [None]
    if all(o is None or isinstance(o, tf.Operation) for o in local):  # no outputs
        for i in tf.range(tf.constant(1, tf.int64), split):
            tf.autograph.experimental.set_loop_options(parallel_iterations=1)
            strategy.run(sliced, args=(data, i))
        return outputs
    for i in tf.range(tf.constant(1, tf.int64), split):
        tf.autograph.experimental.set_loop_options(parallel_iterations=1)
        outputs = strategy.run(sliced, args=(data, i))
    return outputs


def split_to_double(core: Any, error: BaseException) -> int:
    """Host side, after ``error`` (out of memory): ``core``'s split in force, when it can
    double.

    Raises ``RuntimeError`` (from ``error``) when the micro-batch cannot be split further
    (a slice of one sample) or ``oom_recovery`` is off.
    """
    config, state = core.accumulation, core.state
    split = int(state.micro_batch_split.numpy())
    # The largest micro-batch trained so far; before the first one (an error in the very
    # first step) it is unknown: then the split doubles up to MAX_SPLIT.
    largest = int(state.micro_batch_rows.numpy()) or MAX_SPLIT
    if not config.oom_recovery or largest <= split:
        reason = (
            "oom_recovery is off"
            if not config.oom_recovery
            else f"the micro-batch is already split into {split} slices of "
            f"{-(-largest // split)} sample(s) per replica"
        )
        way_out = "" if config.oom_recovery else ", or set oom_recovery=True"
        raise RuntimeError(
            f"Out of memory in a training step and {reason}: nothing smaller to try. Lower "
            f"the model's memory (or use a device with more){way_out}."
        ) from error
    return split


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
