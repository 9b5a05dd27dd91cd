"""An optional listener of training progress, by windows (stdlib only).

The ``ga-tfx`` console installs one (:func:`set_listener`) to draw its progress line; under
Kubeflow or in a user's own pipeline there is none and :func:`report` does nothing. Events are
dicts: ``label`` (``"Trainer"``, ``"Tuner trial 2/3"``), ``window`` (the latest window
finished, 1-based; applied or skipped), ``total`` (windows of the run), ``loss`` (mean loss of
that window, or None) and ``samples_per_second``. The Trainer and the Tuner report after each
call of the train function (one window, or several). A listener must not raise: progress
never stops training.
"""

from typing import Any, Callable, Dict, Optional

Listener = Callable[[Dict[str, Any]], None]
_listener: Optional[Listener] = None


def set_listener(listener: Optional[Listener]) -> None:
    """Installs ``listener`` (None removes it); one listener per process."""
    global _listener
    _listener = listener


def report(**event: Any) -> None:
    """Hands one event to the listener, if any (its errors are swallowed and logged)."""
    if _listener is None:
        return
    try:
        _listener(event)
    except Exception:  # noqa: BLE001  (progress display must never stop training)
        import logging

        logging.getLogger(__name__).exception("progress listener failed")
