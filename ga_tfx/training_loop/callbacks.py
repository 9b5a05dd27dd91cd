"""``TrainingLoop``'s callbacks: called on optimizer updates, never on micro-steps."""

from ga_tfx import _validation

from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:
    from ga_tfx.training_loop import TrainingLoop


class UpdateCallback:
    """Calls ``fn(loop, logs)`` on optimizer updates, never on micro-steps.

    Exactly one trigger:
      every_n_updates: after updates N, 2N, 3N, ... (``loop.window_core.updates % N == 0``).
      at_update: once, after update ``N``.
      at_end: once, when :meth:`TrainingLoop.run` returns (also when it stops early through
        ``max_updates``, ``max_micro_batches`` or ``stop_training``; not when it raises).

    ``logs`` is the window's dict (keys :data:`~ga_tfx.training_loop.logs.LOG_KEYS` plus
    ``update``, ``window``, ``samples``). Subclasses may override :meth:`on_update_end` /
    :meth:`on_train_end` instead. A callback may change ``loop.learning_rate`` or set
    ``loop.stop_training = True``. A skipped window is not an update: no callback runs for it.
    """

    def __init__(
        self,
        fn: Optional[Callable[["TrainingLoop", dict], Any]] = None,
        *,
        every_n_updates: Optional[int] = None,
        at_update: Optional[int] = None,
        at_end: bool = False,
    ):
        triggers = [every_n_updates is not None, at_update is not None, bool(at_end)]
        if fn is not None and sum(triggers) != 1:
            raise ValueError(
                "UpdateCallback needs exactly one trigger: every_n_updates=N, at_update=N or "
                f"at_end=True; got every_n_updates={every_n_updates!r}, "
                f"at_update={at_update!r}, at_end={at_end!r}."
            )
        self.fn = fn
        self.every_n_updates = _validation.UPDATES.check("every_n_updates", every_n_updates)
        self.at_update = _validation.UPDATES.check("at_update", at_update)
        self.at_end = bool(at_end)

    def on_update_end(self, loop: "TrainingLoop", logs: dict) -> None:
        if self.fn is None:
            return
        update = loop.window_core.updates
        if (self.every_n_updates is not None and update % self.every_n_updates == 0) or (
            self.at_update is not None and update == self.at_update
        ):
            self.fn(loop, logs)

    def on_train_end(self, loop: "TrainingLoop", logs: dict) -> None:
        if self.fn is not None and self.at_end:
            self.fn(loop, logs)
