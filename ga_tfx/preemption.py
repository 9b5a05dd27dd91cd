"""Stopping on SIGTERM/SIGINT at the next window end, with a checkpoint (standard library only).

Kubernetes sends SIGTERM before it evicts a pod; a user presses Ctrl-C (SIGINT). While
:func:`stop_on_signals` is active, either signal only *requests* a stop: the front-end (the
TFX Trainer, :class:`ga_tfx.TrainingLoop`) finishes the window (optimizer update) that is
running -- a signal that arrives while a step runs is handled when it returns --, writes a
checkpoint, and raises :class:`TrainingInterrupted`, whose message is the one line a user
needs::

    interrupted at window N of M; checkpoint saved; re-run the same command to resume

N counts windows from every front-end (finished windows, applied as updates or skipped as
non-finite: what the checkpoint holds and a resume continues from), M the training's length in
windows where the front-end has one (the Trainer's ``train_args.num_steps``).

A second signal while the first is being handled is not held back (the previous handler runs:
SIGINT raises ``KeyboardInterrupt``, SIGTERM ends the process), so a stuck run can still be
stopped. tf.distribute's ``PreemptionCheckpointHandler`` does the same for its own training
loops, but only under ``MultiWorkerMirroredStrategy``/``TPUStrategy`` and around a custom step
function, not around ``Model.fit``; Keras' ``BackupAndRestore`` saves on a schedule but not on a
signal.
"""

import contextlib
import os
import signal
import threading
from typing import Any, Iterator, Optional

SIGNALS = (signal.SIGTERM, signal.SIGINT)
LINE = "interrupted at window {done}{of_total}; checkpoint saved; re-run the same command to resume"


class TrainingInterrupted(RuntimeError):
    """Training stopped on a signal after saving a checkpoint; the re-run resumes.

    Attributes: ``windows_done`` (windows in the saved checkpoint, a skipped one included:
    every front-end gives this unit), ``total_windows`` (the training's length in windows, e.g.
    the Trainer's ``train_args.num_steps``; ``None`` where the front-end's limit is in other
    units, as ``TrainingLoop.run``'s ``max_updates``), ``signum`` (the signal), ``exit_code``
    (``128 + signum``, the shell's convention).
    """

    def __init__(self, windows_done: int, total_windows: Optional[int], signum: int):
        of_total = "" if total_windows is None else f" of {total_windows}"
        super().__init__(LINE.format(done=windows_done, of_total=of_total))
        self.windows_done, self.total_windows, self.signum = windows_done, total_windows, signum
        self.exit_code = 128 + int(signum)


class StopRequest:
    """Which stop signal arrived (``signum``, ``None`` until one does)."""

    def __init__(self) -> None:
        self.signum: Optional[int] = None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def request(self, signum: int) -> None:
        """What a signal does (tests call it to stop a run at a chosen point)."""
        self.signum = int(signum)


@contextlib.contextmanager
def stop_on_signals(enabled: bool = True) -> Iterator[StopRequest]:
    """Inside the block SIGTERM and SIGINT set the returned :class:`StopRequest` instead of
    ending the process; the previous handlers are restored on exit.

    Handlers can only be installed from the main thread: elsewhere (or with ``enabled=False``)
    signals keep their usual effect and the request is only set by :meth:`StopRequest.request`.
    """
    stop = StopRequest()
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous: dict = {signum: signal.getsignal(signum) for signum in SIGNALS}

    def handle(signum: int, frame: Any) -> None:
        if not stop.requested:
            stop.request(signum)
            return
        old = previous[signum]  # second signal: do what it did before
        signal.signal(signum, old if old is not None else signal.SIG_DFL)
        if callable(old):
            old(signum, frame)
        else:
            os.kill(os.getpid(), signum)

    for signum in SIGNALS:
        signal.signal(signum, handle)
    try:
        yield stop
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old if old is not None else signal.SIG_DFL)


def interruption(error: Optional[BaseException]) -> Optional[TrainingInterrupted]:
    """The :class:`TrainingInterrupted` that caused ``error`` (itself, or in its
    ``__cause__``/``__context__`` chain, as TFX's launcher may wrap it), else ``None``.

    See ``ga_tfx.components.trainer.preemption.report_interruption``.
    """
    return next((e for e in causes(error) if isinstance(e, TrainingInterrupted)), None)


def causes(error: Optional[BaseException]) -> Iterator[BaseException]:
    """``error``, then what caused it (``__cause__``, else ``__context__``), each once."""
    seen: set = set()
    while error is not None and id(error) not in seen:
        yield error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
