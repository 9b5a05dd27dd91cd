"""``TrainingLoop``'s counters: the window core's state plus the epoch and its data position.

:class:`LoopState` is checkpointed with the model and optimizer under the loop's
``ga_window_core`` key (its state adds ``epoch`` and ``epoch_start``); the data position is
derived from the core's one count of the micro-batches consumed, never counted beside it.
"""

from ga_tfx._keras import tf
from ga_tfx._state import Untracked
from ga_tfx.window import WindowState

_FIRST = tf.VariableAggregation.ONLY_FIRST_REPLICA


class LoopState(WindowState):
    """The loop's counters, checkpointed with the model and optimizer: the window core's
    (``windows``, ``updates``, ``micro_batches_done``, the noise-scale averages) and

    Attributes (int64):
      epoch: the current epoch (0-based).
      epoch_start: the micro-batches consumed (:meth:`consumed`) when the current epoch began.
      position: micro-batches of the current epoch consumed so far (the data position), read
        only: ``consumed - epoch_start``.

    One count of the data consumed, the core's: ``micro_batches_done`` (finished or discarded
    windows, in the data's micro-batches, also after an out-of-memory split) plus the pending
    window's micro-steps (the accumulator's ``micro_steps``, checkpointed with it). The epoch's
    data position is derived from it, so that a discarded window (``partial_window="drop"``, an
    out-of-memory recovery, which takes its micro-batches back) moves it without a second
    counter to keep in step.
    """

    def __init__(self, name: str = "training_loop_state") -> None:
        super().__init__(name=name)
        with tf.init_scope(), tf.name_scope(name):
            self.epoch = tf.Variable(
                0, dtype=tf.int64, trainable=False, aggregation=_FIRST, name="epoch"
            )
            self.epoch_start = tf.Variable(
                0, dtype=tf.int64, trainable=False, aggregation=_FIRST, name="epoch_start"
            )
        self._pending = Untracked()  # the core's micro_steps (bind_pending)

    def bind_pending(self, micro_steps: tf.Variable) -> None:
        """The window core's count of the pending window's micro-batches (its accumulator's
        ``micro_steps``), part of :meth:`consumed`."""
        self._pending.value = micro_steps

    def consumed(self) -> tf.Tensor:
        """Micro-batches consumed since training began (int64 tensor): the finished or
        discarded windows' and the pending window's (none before :meth:`bind_pending`)."""
        pending = self._pending.value
        done = self.micro_batches_done.read_value()
        return done if pending is None else done + pending.read_value()

    @property
    def position(self) -> tf.Tensor:
        """Micro-batches of the current epoch consumed so far (int64 tensor), derived."""
        return self.consumed() - self.epoch_start.read_value()

    def begin_epoch(self) -> None:
        """The next epoch: ``epoch`` + 1, its data position 0 (a carried window's micro-batches
        belong to the epoch before)."""
        self.epoch.assign_add(1)
        self.epoch_start.assign(self.consumed())
