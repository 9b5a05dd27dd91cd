"""The out-of-memory replay of every front-end: the window again, at half the micro-batch.

When a training step runs out of memory (``tf.errors.ResourceExhaustedError``) the window core
discards the window in progress and doubles its micro-batch split
(:meth:`ga_tfx.window.WindowCore.recover_from_oom`): weights, optimizer and AccumBN statistics
are those of the window's start. :func:`replay` is that path, once for every front-end: it
runs a step (``fit``, a ``TrainingLoop`` window, a Tuner trial, the Trainer's fits), recovers
the core after the error, has the front-end read the window's data again and runs the step
again (the window runner, :mod:`ga_tfx.window.runner`, then traces the split micro-batch).
How each front-end reads the data again is its own: ``fit``'s is
:func:`ga_tfx.engine.recovery.fit_replayed`, ``TrainingLoop``'s its data position.
"""

from ga_tfx._tf_internals import tf

from typing import Any, Callable, Optional, TypeVar

T = TypeVar("T")


class OutOfMemoryRecovered(RuntimeError):
    """The window in progress was discarded and the micro-batch halved after an out-of-memory
    error, but ``fit`` cannot read the window's data again; continue from ``epoch`` with the
    data from micro-batch ``position`` of that epoch on (the model is ready for it)."""

    def __init__(self, message: str, epoch: int, position: int) -> None:
        super().__init__(message)
        self.epoch, self.position = epoch, position


def replay(
    run: Callable[[], T],
    rewind: Callable[[BaseException], None],
    core: Optional[Callable[[BaseException], Any]] = None,
    strategy: Any = None,
) -> T:
    """Runs ``run()`` until it returns, training a window that ran out of memory again.

    * ``tf.errors.ResourceExhaustedError`` from ``run()``, for a front-end that gives ``core``
      (``core(error)``: its window core, or it raises when it cannot replay): the core
      discards the window and halves the micro-batch (``recover_from_oom`` in ``strategy``;
      its ``RuntimeError`` when it cannot ends the replay), then ``rewind(error)`` puts the
      front-end's data back to the window's first micro-batch. Without ``core`` the error is
      raised.
    * :class:`OutOfMemoryRecovered` from ``run()`` (a ``fit`` whose core recovered but that
      cannot read the window's data again): ``rewind(error)`` re-plans the data, or raises.

    Then ``run()`` runs again."""
    while True:
        try:
            return run()
        except OutOfMemoryRecovered as error:
            rewind(error)
        except tf.errors.ResourceExhaustedError as error:
            if core is None:
                raise
            core(error).recover_from_oom(strategy, error)
            rewind(error)


def out_of_memory(error: BaseException) -> Optional[tf.errors.ResourceExhaustedError]:
    """The out-of-memory error ``error`` is, or that it wraps (a recovery that could not split
    the micro-batch further, :class:`OutOfMemoryRecovered`: their ``__cause__``); ``None``
    for any other error."""
    for candidate in (error, error.__cause__):
        if isinstance(candidate, tf.errors.ResourceExhaustedError):
            return candidate
    return None


def refuse_carried_window(error: BaseException, spans_epochs: bool, front_end: str) -> None:
    """The rule of out-of-memory recovery under ``partial_window="carry"``, for every
    front-end: a window that spans epochs (``spans_epochs``: its first micro-batches were the
    previous epoch's last, carried over) cannot be trained again, since the previous epoch's
    data cannot be read again; raises a ``RuntimeError`` from ``error`` naming the way out
    (``front_end``: who cannot read it, e.g. ``"fit"``). A window inside one epoch passes."""
    if spans_epochs:
        raise RuntimeError(
            "Out of memory in a training step with partial_window='carry': a carried window "
            "spans epochs (its first micro-batches belong to the previous epoch's data, which "
            f"cannot be read again), so {front_end} cannot train it again; use "
            "partial_window='apply' or 'drop' for out-of-memory recovery, or a smaller "
            "micro-batch."
        ) from error
