"""One call of :meth:`TrainingLoop.run <ga_tfx.TrainingLoop.run>`: the host loop.

Epochs of windows from the data position on: each window is one call of the loop's traced
window function (:mod:`~ga_tfx.training_loop.step`) for the rest of the pending window (or of
the ``max_micro_batches`` budget); a window that runs out of memory is trained again from its
first micro-batch at the split micro-batch (:func:`ga_tfx.engine.recovery.replay`); the data's
end is the window clock's (``partial_window``); a stop signal is acted on between windows; each
finished window's event is logged, checkpointed (every N updates) and handed to the callbacks.
"""

from ga_tfx import _tf_keras_internals as internals
from ga_tfx import preemption
from ga_tfx._keras import tf
from ga_tfx.engine import recovery
from ga_tfx.window import WindowEnd

from typing import TYPE_CHECKING, Any, Optional, Tuple, cast

if TYPE_CHECKING:
    from ga_tfx.training_loop import TrainingLoop


class LoopRun:
    """The host loop of one ``run``: ``loop`` trained until ``epochs`` epochs (counted from the
    start of training) or ``max_updates`` updates, or ``budget`` micro-batches of this call
    (``None``: no limit)."""

    def __init__(
        self, loop: "TrainingLoop", max_updates: Optional[int], budget: Optional[int]
    ) -> None:
        self.loop = loop
        self.max_updates = max_updates
        self.budget = budget
        self.iterator: Any = None  # the current epoch's data

    def __call__(self, epochs: int) -> dict:
        """Trains; returns the logs of the last finished window (``{}`` if none)."""
        loop, max_updates = self.loop, self.max_updates
        if not loop._restored:
            loop.restore()
            loop._trace_window()  # a restored out-of-memory split
        loop.window_core.start_events()
        loop.stop_training = False
        loop._log.start()
        logs: dict = {}
        while loop.epoch < epochs and not loop.stop_training:
            if max_updates is not None and loop.window_core.updates >= max_updates:
                break
            self.iterator = self._epoch_data()
            while not loop.stop_training:
                if max_updates is not None and loop.window_core.updates >= max_updates:
                    break
                # An out-of-memory error: the window again from its first micro-batch, at
                # half the micro-batch (recovery.replay).
                count, take = recovery.replay(
                    self._next_window,
                    self._read_window_again,
                    self._core_to_recover,
                    loop.strategy,
                )
                if self.budget is not None:
                    self.budget -= count
                epoch_ended = count < take
                if epoch_ended and loop._pending():  # the data ended inside a window
                    loop._end_of_data_fn()  # by partial_window (the window's clock)
                logs = self._window_ends() or logs
                if epoch_ended:
                    loop.state.begin_epoch()
                    break
                if self.budget == 0:
                    loop.stop_training = True
        if loop.epoch >= epochs and loop._pending():  # carry: the last window of the run
            loop._end_of_data_fn("apply")
            logs = self._window_ends() or logs
        loop.save()
        for callback in loop.callbacks:
            if hasattr(callback, "on_train_end"):
                callback.on_train_end(loop, logs)
        return logs

    def _epoch_data(self) -> Any:
        """An iterator over the current epoch's micro-batches from the data position on."""
        loop = self.loop
        return iter(loop._data.epoch(loop.epoch, int(loop.state.position.numpy())))

    def _next_window(self) -> Tuple[int, int]:
        """One call of the traced window: the rest of the pending window, or of the budget.
        Returns the micro-batches taken and those asked for."""
        loop = self.loop
        self._stop_if_requested()
        wanted = loop.window_core.current_accum_steps - loop._pending()
        finish = self.budget is None or self.budget >= wanted
        take = wanted if finish else cast(int, self.budget)  # not finish: budget is an int
        return int(loop._window_fn(self.iterator, tf.constant(take, tf.int64), finish)), take

    def _core_to_recover(self, error: BaseException) -> Any:
        """The window core to recover after the out-of-memory ``error``; under
        ``partial_window="carry"`` a ``RuntimeError`` when the window spans epochs (more
        pending micro-batches than this epoch's data position: some are the previous epoch's,
        carried over), which cannot be read again. A window inside one epoch is recovered."""
        loop = self.loop
        carry = loop.accumulation.partial_window == "carry"
        spans_epochs = carry and loop._pending() > int(loop.state.position.numpy())
        recovery.refuse_carried_window(error, spans_epochs, "TrainingLoop")
        return loop.window_core

    def _read_window_again(self, error: BaseException, pending: int) -> None:
        """After an out-of-memory recovery, which discarded the window (``pending`` of its
        micro-batches were consumed before the failed call): the data from its first
        micro-batch, the window traced with the split micro-batch. (The data position, derived
        from the core's count, is back already: the core took the window's micro-batches back.)
        """
        loop = self.loop
        loop._trace_window()
        self.budget = None if self.budget is None else self.budget + pending
        self.iterator = self._epoch_data()

    def _stop_if_requested(self) -> None:
        """Between windows: on a stop signal (agreed by every worker), save and raise
        :class:`~ga_tfx.preemption.TrainingInterrupted`."""
        loop = self.loop
        requested = loop._stop.requested
        if internals.in_multi_worker_mode(loop.strategy):  # any worker's signal stops all
            flag = loop.strategy.run(lambda: tf.constant(int(requested), tf.int32))
            requested = bool(loop.strategy.reduce(tf.distribute.ReduceOp.SUM, flag, axis=None))
        if requested:
            loop.save()
            signum = loop._stop.signum or 0
            # Windows, as from every front-end (its limit, max_updates, counts updates).
            raise preemption.TrainingInterrupted(loop.window_core.windows, None, signum)

    def _window_ends(self) -> dict:
        """Host side: logs, checkpoints and callbacks for each window finished since the last
        call (the window core's events); returns the last one's logs (``{}``: none)."""
        logs: dict = {}
        for event in self.loop.window_core.poll():
            logs = self._window_ended(event)
        return logs

    def _window_ended(self, event: WindowEnd) -> dict:
        loop = self.loop
        guard = loop.window_core.guard
        logs = loop._log.window_ended(
            event,
            learning_rate=loop.learning_rate,
            skipped_windows=loop.window_core.skipped_windows,
            nonfinite_windows=0 if guard is None else int(guard.nonfinite_windows.numpy()),
        )
        loop.window_core.check_skips()
        if event.applied:
            every = loop.checkpoint_every_n_updates
            if every is not None and event.update % every == 0:
                loop.save()
            for callback in loop.callbacks:
                if hasattr(callback, "on_update_end"):
                    callback.on_update_end(loop, logs)
        return logs
