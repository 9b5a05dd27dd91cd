"""The software stack a run used: ga-tfx, TFX, TensorFlow, Keras 2 (tf-keras) and Python.

Read from the installed distributions' metadata (standard library only: nothing is imported, so
``ga-tfx --version`` answers at once), for ``ga-tfx --version``, the Trainer's run record and the
pipeline summary. A package that is not installed reads ``"not installed"`` (the library alone
has no TFX).
"""

import platform
from importlib import metadata
from typing import Dict, Optional

# (what the user reads, the distribution's name). Keras is tf-keras: ga-tfx runs on Keras 2.
PACKAGES = (
    ("ga-tfx", "ga-tfx"),
    ("TFX", "tfx"),
    ("TensorFlow", "tensorflow"),
    ("Keras", "tf-keras"),
)
NOT_INSTALLED = "not installed"


def versions() -> Dict[str, str]:
    """``{"ga-tfx": ..., "TFX": ..., "TensorFlow": ..., "Keras": ..., "Python": ...}``."""
    found = {}
    for label, distribution in PACKAGES:
        try:
            found[label] = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            found[label] = NOT_INSTALLED
    found["Python"] = platform.python_version()
    return found


def line(found: Optional[Dict[str, str]] = None) -> str:
    """One line, e.g. ``ga-tfx 0.1.0, TFX 1.21.0, TensorFlow 2.21.0, Keras 2.21.0 (tf-keras),
    Python 3.13.5``, always in that order (a run record's JSON keeps its keys sorted);
    ``found`` defaults to this process's :func:`versions`."""
    found = versions() if found is None else found
    labels = [label for label, _ in PACKAGES] + ["Python"]
    return ", ".join(
        f"{label} {found.get(label, '?')}"
        + (" (tf-keras)" if label == "Keras" and found.get(label) != NOT_INSTALLED else "")
        for label in labels
    )
