"""The window core's state: counters, noise-scale averages and records (:class:`WindowState`)."""

from ga_tfx._state import Untracked
from ga_tfx._tf_internals import tf
from ga_tfx.window.events import RECORD_CAPACITY, RECORD_FIELDS

from typing import Any, Sequence

_FIRST = tf.VariableAggregation.ONLY_FIRST_REPLICA
_ON_READ = tf.VariableSynchronization.ON_READ


class WindowState(tf.Module):
    """The core's counters and noise-scale averages, checkpointed with the front-end.

    Attributes (int64 unless stated; ``ONLY_FIRST_REPLICA``: the same on every replica):
      windows: windows finished (applied or skipped).
      updates: windows applied as an optimizer update.
      noise_trace_ema, noise_grad_sq_ema: float64, the moving averages of the noise-scale
        estimates ``S`` and ``G²`` (without bias correction; their ratio needs none).
      noise_windows: windows that gave a noise-scale estimate.
      current_accum_steps: the current K, of the window under way (or next): the schedule's
        (:mod:`ga_tfx.schedules`) choice at the last window end, or the config's
        ``accum_steps`` (K0) before the first; read as ``WindowCore.current_accum_steps``.
      adaptive_streak: windows in a row whose adaptive target K differed from the current K.
      base_learning_rate: float64, the learning rate at K0 (``lr_scaling``), or 0.
      micro_batch_split: each micro-batch the front-end gives is processed as this many
        consecutive slices (1; doubled by :meth:`WindowCore.recover_from_oom`): the micro-batch
        halves and K doubles, the window's samples stay.
      micro_batches_done: micro-batches of finished or discarded windows (the data they
        consumed), counted as the front-end gives them (an out-of-memory split's slices are
        not counted; a window discarded to be read again is taken back). The one record of the
        data consumed: the front-ends' data positions are derived from it (``fit``'s, the
        Trainer checkpoint's, ``TrainingLoop``'s with the pending window's micro-steps).
      micro_batch_rows: the largest micro-batch seen, per replica (of the data, before the
        split): the limit of splitting.

    The records of the last windows (:data:`RECORD_CAPACITY` rows of :data:`RECORD_FIELDS`)
    and the count of records written are process-local: not in checkpoints.

    Front-ends may derive from it to checkpoint state of their own beside these
    (``TrainingLoop``: the epoch, and the data consumed when it began).
    """

    def __init__(self, name: str = "window_state") -> None:
        super().__init__(name=name)
        with tf.init_scope(), tf.name_scope(name):
            self.windows = _scalar(0, tf.int64, "windows")
            self.updates = _scalar(0, tf.int64, "updates")
            self.noise_trace_ema = _scalar(0.0, tf.float64, "noise_trace_ema")
            self.noise_grad_sq_ema = _scalar(0.0, tf.float64, "noise_grad_sq_ema")
            self.noise_windows = _scalar(0, tf.int64, "noise_windows")
            self.current_accum_steps = _scalar(0, tf.int64, "current_accum_steps")  # 0: not set yet
            self.adaptive_streak = _scalar(0, tf.int64, "adaptive_streak")
            self.base_learning_rate = _scalar(0.0, tf.float64, "base_learning_rate")
            self.micro_batch_split = _scalar(1, tf.int64, "micro_batch_split")
            self.micro_batches_done = _scalar(0, tf.int64, "micro_batches_done")
            # Replica-local (assigned per micro-batch slice, inside the split's loop).
            self.micro_batch_rows = tf.Variable(
                0,
                dtype=tf.int64,
                trainable=False,
                synchronization=_ON_READ,
                aggregation=_FIRST,
                name="micro_batch_rows",
            )
            self._log = Untracked(
                (
                    tf.Variable(
                        tf.zeros([RECORD_CAPACITY, len(RECORD_FIELDS)], tf.float64),
                        trainable=False,
                        aggregation=_FIRST,
                        name="records",
                    ),
                    _scalar(0, tf.int64, "records_written"),
                )
            )

    @property
    def records(self) -> tf.Variable:
        return self._log.value[0]

    @property
    def records_written(self) -> tf.Variable:
        return self._log.value[1]


def _scalar(value: Any, dtype: Any, name: str) -> tf.Variable:
    return tf.Variable(value, dtype=dtype, trainable=False, aggregation=_FIRST, name=name)


def write_record(state: WindowState, row: Sequence[Any]) -> None:
    """Writes one finished window's figures (:data:`RECORD_FIELDS`, in order) to the records."""
    values = tf.stack([tf.cast(v, tf.float64) for v in row])
    written = state.records_written
    index = tf.math.floormod(written.read_value(), RECORD_CAPACITY)
    state.records.assign(tf.tensor_scatter_nd_update(state.records, [[index]], values[tf.newaxis]))
    written.assign_add(1)
