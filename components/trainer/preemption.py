"""Stopping on SIGTERM/SIGINT, for the Trainer and the ``ga-tfx`` command.

The mechanism is the library's (:mod:`ga_tfx.preemption`: :func:`stop_on_signals`,
:class:`StopRequest`, :class:`TrainingInterrupted`); this module adds what a command-line entry
point does with an interruption (:func:`report_interruption`).
"""

from ga_tfx.preemption import (  # noqa: F401  (re-exported)
    LINE,
    SIGNALS,
    StopRequest,
    TrainingInterrupted,
    interruption,
    stop_on_signals,
)


def report_interruption(error: BaseException) -> int:
    """For a command-line entry point's ``except``: prints the interruption's one line (the
    last line of the output) and returns its exit code; re-raises any other ``error``."""
    found = interruption(error)
    if found is None:
        raise error
    print(found, flush=True)
    return found.exit_code
