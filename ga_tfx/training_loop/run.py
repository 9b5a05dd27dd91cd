"""One call of :meth:`TrainingLoop.run <ga_tfx.TrainingLoop.run>`: the host loop.

Epochs of windows from the data position on: each window is one call of the window runner's
traced window (:meth:`ga_tfx.window.runner.WindowRunner.window`) for the rest of the pending
window (or of the ``max_micro_batches`` budget); a window that runs out of memory is trained
again from its first micro-batch at the split micro-batch (:func:`ga_tfx.window.replay.replay`);
the data's end is the window clock's (``partial_window``); a stop signal is acted on between
windows; each finished window's event is logged, checkpointed (every N updates) and handed to
the callbacks. It talks to the loop through its public surface, and to the pieces the loop
hands it (its runner, its data, its log, the stop request) through theirs.
"""

from ga_tfx import _tf_keras_internals as internals
from ga_tfx import preemption
from ga_tfx._keras import tf
from ga_tfx.training_loop.data import EpochData
from ga_tfx.training_loop.logs import LoopLog
from ga_tfx.window import WindowEnd
from ga_tfx.window.replay import refuse_carried_window, replay
from ga_tfx.window.runner import WindowRunner

from typing import TYPE_CHECKING, Any, Optional, Tuple, cast

if TYPE_CHECKING:
    from ga_tfx.training_loop import TrainingLoop


class LoopRun:
    """The host loop of one ``run`` of ``loop``: its window ``runner``, its epochs' ``data``,
    its ``log`` and the ``stop`` request of the signals (a
    :class:`~ga_tfx.preemption.StopRequest`)."""

    def __init__(
        self,
        loop: "TrainingLoop",
        runner: WindowRunner,
        data: EpochData,
        log: LoopLog,
        stop: Any,
    ) -> None:
        self.loop = loop
        self.runner = runner
        self.data = data
        self.log = log
        self.stop = stop
        self.budget: Optional[int] = None  # micro-batches left to this call (None: no limit)
        self.iterator: Any = None  # the current epoch's data
        self._window_start = 0  # micro-batches pending before the current window's call
        # Host copies of the core's counters, kept from the window events (read once a run):
        # updates applied, and K of the next window.
        self.updates = 0
        self.current_accum_steps = 0

    def __call__(self, epochs: int, max_updates: Optional[int], budget: Optional[int]) -> dict:
        """Trains until ``epochs`` epochs (counted from the start of training) or
        ``max_updates`` updates, or ``budget`` micro-batches of this call (``None``: no
        limit); returns the logs of the last finished window (``{}`` if none)."""
        loop, runner = self.loop, self.runner
        core = loop.window_core
        self.budget = budget
        core.start_events()
        self.updates, self.current_accum_steps = core.updates, core.current_accum_steps
        loop.stop_training = False
        self.log.start()
        logs: dict = {}
        while loop.epoch < epochs and not loop.stop_training:
            if max_updates is not None and self.updates >= max_updates:
                break
            self.iterator = self._epoch_data()
            while not loop.stop_training:
                if max_updates is not None and self.updates >= max_updates:
                    break
                # An out-of-memory error: the window again from its first micro-batch, at
                # half the micro-batch (replay).
                count, take = replay(
                    self._next_window, self._read_window_again, self._core_to_recover, loop.strategy
                )
                if self.budget is not None:
                    self.budget -= count
                epoch_ended = count < take
                if epoch_ended:  # the data ended, maybe inside a window: by partial_window
                    runner.end_pending_window()
                logs = self._dispatch_window_ends() or logs
                if epoch_ended:
                    loop.state.begin_epoch()
                    break
                if self.budget == 0:
                    loop.stop_training = True
        if loop.epoch >= epochs:  # carry: the last window of the run is finished
            runner.end_pending_window("apply")
            logs = self._dispatch_window_ends() or logs
        loop.save()
        for callback in loop.callbacks:
            if hasattr(callback, "on_train_end"):
                callback.on_train_end(loop, logs)
        return logs

    def _epoch_data(self) -> Any:
        """An iterator over the current epoch's micro-batches from the data position on."""
        loop = self.loop
        return iter(self.data.epoch(loop.epoch, int(loop.state.position.numpy())))

    def _next_window(self) -> Tuple[int, int]:
        """One call of the traced window: the rest of the pending window, or of the budget.
        Returns the micro-batches taken and those asked for."""
        self._stop_if_requested()
        self._window_start = self.runner.pending()
        wanted = self.current_accum_steps - self._window_start
        if wanted <= 0:  # the window should have ended: nothing left to take, for ever
            self._window_not_ended()
        finish = self.budget is None or self.budget >= wanted
        take = wanted if finish else cast(int, self.budget)  # not finish: budget is an int
        taken = self.runner.window(self.iterator, tf.constant(take, tf.int64), finish)
        return int(taken), take

    def _window_not_ended(self) -> None:
        """Raises ``RuntimeError``: the pending window holds this loop's K micro-batches or
        more and did not end (the loop's K is not the window core's: a bug), where the loop
        would take none and never end."""
        raise RuntimeError(
            f"TrainingLoop: a window did not end within its K micro-steps: it holds "
            f"{self._window_start} micro-batch(es), the loop's K is {self.current_accum_steps} "
            f"and the window core's {self.loop.window_core.current_accum_steps}; the loop would "
            "take no more and never end (a bug in ga-tfx: please report it)."
        )

    def _core_to_recover(self, error: BaseException) -> Any:
        """The window core to recover after the out-of-memory ``error``; under
        ``partial_window="carry"`` a ``RuntimeError`` when the window spans epochs (more
        pending micro-batches than this epoch's data position: some are the previous epoch's,
        carried over), which cannot be read again. A window inside one epoch is recovered."""
        loop = self.loop
        carry = loop.accumulation.partial_window == "carry"
        position = int(loop.state.position.numpy())
        spans_epochs = carry and self.runner.pending() > position
        refuse_carried_window(error, spans_epochs, "TrainingLoop")
        return loop.window_core

    def _read_window_again(self, _: BaseException) -> None:
        """After an out-of-memory recovery, which discarded the window: the data from its
        first micro-batch, the window traced with the split micro-batch, and the budget given
        back the micro-batches of the window's earlier calls (the failed call's were not
        counted against it). (The data position, derived from the core's count, is back
        already: the core took the window's micro-batches back.)"""
        self.runner.follow_split()
        if self.budget is not None:
            self.budget += self._window_start
        self.iterator = self._epoch_data()

    def _stop_if_requested(self) -> None:
        """Between windows: on a stop signal (agreed by every worker), save and raise
        :class:`~ga_tfx.preemption.TrainingInterrupted`."""
        loop = self.loop
        requested = self.stop.requested
        if internals.in_multi_worker_mode(loop.strategy):  # any worker's signal stops all
            flag = loop.strategy.run(lambda: tf.constant(int(requested), tf.int32))
            requested = bool(loop.strategy.reduce(tf.distribute.ReduceOp.SUM, flag, axis=None))
        if requested:
            loop.save()
            signum = self.stop.signum or 0
            # Windows, as from every front-end (its limit, max_updates, counts updates).
            raise preemption.TrainingInterrupted(loop.window_core.windows, None, signum)

    def _dispatch_window_ends(self) -> dict:
        """Host side: logs, checkpoints and callbacks for each window finished since the last
        call (the window core's events); returns the last one's logs (``{}``: none)."""
        logs: dict = {}
        for event in self.loop.window_core.poll():
            self.updates, self.current_accum_steps = event.update, event.next_accum_steps
            logs = self._dispatch_window_end(event)
        return logs

    def _dispatch_window_end(self, event: WindowEnd) -> dict:
        """One window end: its logs (the figures of the event, which holds the learning rate
        of its update and the counters; the guard's non-finite count read here), the skip check,
        a checkpoint every ``checkpoint_every_n_updates`` and the update callbacks."""
        loop = self.loop
        guard = loop.window_core.guard
        logs = self.log.window_ended(
            event,
            learning_rate=event.learning_rate,
            skipped_windows=event.window - event.update,
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
