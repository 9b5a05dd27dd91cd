"""Pacing: how many whole windows one call of the train function runs when nothing watches.

Every call of the train function costs a host round trip: a step of Keras' ``fit`` loop and a
``tf.function`` call (about 0.4 ms on the benchmark's 2-core machine, 2-3 % of an epoch of its
conv net at one window per call). One window per call is what batch-level callbacks need:
checkpoints, preemption handlers and TensorBoard then see every window. Where no callback
watches batches, nothing can tell how many windows a call runs (the same windows, in the same
order, give the same weights, bit for bit), so ``fit`` runs as many whole windows per call as
take about :data:`CALL_SECONDS`, measured on the previous call. ``Ctrl-C`` and
``model.stop_training`` take effect within about that long; the progress bar updates as often.

When ``fit`` paces (decided once per ``fit`` by :func:`should_pace`), by ``compile``'s
``steps_per_execution`` (:func:`mode_of`):

* unset (or 1): where no callback implements batch hooks, train or test (Keras' progress bar
  and ``History`` aside: the bar is for people, who cannot tell 5 windows a second from 500;
  and a callback with ``follows_pacing = True`` aside: one that acts on the window events of a
  call, whatever their number -- the Trainer's checkpoints, logs and progress line, the
  Tuner's trial callbacks);
* ``"auto"``: always, as Keras' own ``"auto"`` does (batch-level callbacks then run after a
  call's last window, every few windows);
* an explicit ``m·K``: never, it is honoured exactly;

and only on one worker: under ``MultiWorkerMirroredStrategy`` every worker must run the same
windows per call (their collectives pair up), and a timing each measures alone need not agree.
"""

from ga_tfx import _tf_keras_internals as internals
from ga_tfx._keras import keras

from typing import Any, Iterable, Optional

# Target duration of one call of the train function. The round trip per call (~0.4 ms) is then
# below 0.5 % of the work, and an interrupt waits for at most about this long.
CALL_SECONDS = 0.2
# Upper limit on windows per call, whatever a (mis)measured tiny duration suggests.
MAX_WINDOWS = 4096

# When fit paces (mode_of): where no callback watches batches; always ("auto"); never: None.
UNWATCHED = "unwatched"
ALWAYS = "auto"

# Callbacks that watch batches only to show progress to a person.
_DISPLAY_ONLY = (keras.callbacks.ProgbarLogger, keras.callbacks.History)
# The attribute by which a callback says that its batch hooks act on whole calls (the window
# events since the last call, however many), so fit may pace with it.
FOLLOWS_PACING = "follows_pacing"


class CallPacer:
    """Chooses the windows of the next call from the duration of the last one.

    Args:
      call_seconds: the target duration of one call (default :data:`CALL_SECONDS`).
      max_windows: at most this many windows per call (default :data:`MAX_WINDOWS`).
    """

    def __init__(self, call_seconds: float = CALL_SECONDS, max_windows: int = MAX_WINDOWS):
        self._call_seconds = call_seconds
        self._max_windows = max_windows

    def next_windows(self, seconds: float, windows: float) -> int:
        """Windows for the next call: as many as take ``call_seconds`` at the last call's rate
        (``windows`` in ``seconds``; a short last window counts as its fraction), between 1 and
        ``max_windows``."""
        if windows <= 0 or seconds <= 0:
            return 1
        fitting = int(self._call_seconds * windows / seconds)
        return max(1, min(self._max_windows, fitting))


def mode_of(steps_per_execution: Any) -> Optional[str]:
    """When ``fit`` paces, from ``compile``'s (valid) ``steps_per_execution``: ``ALWAYS`` for
    ``"auto"``, ``UNWATCHED`` for unset or 1, ``None`` (never) for an explicit ``m·K``."""
    if isinstance(steps_per_execution, str) and steps_per_execution == ALWAYS:
        return ALWAYS
    return UNWATCHED if steps_per_execution in (None, 1) else None


def should_pace(model: Any, callbacks: Optional[Iterable[Any]]) -> bool:
    """Whether this ``fit`` of ``model`` (a compiled accumulation model) paces its calls, by
    its mode (:func:`mode_of`), its strategy and ``callbacks``: see the module docstring."""
    if model._pacing is None or internals.in_multi_worker_mode(model.distribute_strategy):
        return False
    return model._pacing == ALWAYS or not any(
        internals.watches_batches(callback)
        for callback in (callbacks or [])
        if not isinstance(callback, _DISPLAY_ONLY) and not getattr(callback, FOLLOWS_PACING, False)
    )
