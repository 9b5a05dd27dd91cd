"""Which Keras a benchmark process runs: Keras 2 (tf-keras, through ga_tfx) or Keras 3.

A process holds one Keras for its whole life (``tf.keras`` is resolved once), so Keras 3
configurations run in their own subprocess, started with :func:`subprocess_env`.
"""

import os
import sys

KERAS2 = "keras2"
KERAS3 = "keras3"
FRAMEWORKS = (KERAS2, KERAS3)
_LEGACY_ENV = "TF_USE_LEGACY_KERAS"


def load(framework: str):
    """Import and return ``(keras, tf)`` for ``framework`` (``"keras2"`` or ``"keras3"``).

    Keras 2 comes through ``ga_tfx`` (its first import selects tf-keras). Keras 3 needs a
    process in which ``TF_USE_LEGACY_KERAS`` is unset and ga_tfx was never imported; anything
    else raises ``RuntimeError`` naming the problem.
    """
    if framework == KERAS2:
        import ga_tfx  # noqa: F401  (first import: selects Keras 2 before TensorFlow)
        from ga_tfx import keras, tf

        return keras, tf
    if framework == KERAS3:
        if os.environ.get(_LEGACY_ENV) or "ga_tfx" in sys.modules:
            raise RuntimeError(
                f"Keras 3 needs its own process without {_LEGACY_ENV} (now "
                f"{os.environ.get(_LEGACY_ENV)!r}) and without ga_tfx imported; start it with "
                "benchmarks.frameworks.subprocess_env('keras3')"
            )
        import keras
        import tensorflow as tf

        if not keras.__version__.startswith("3."):
            raise RuntimeError(f"expected Keras 3, got keras {keras.__version__}")
        return keras, tf
    raise ValueError(f"framework {framework!r} is not one of {FRAMEWORKS}")


def subprocess_env(framework: str) -> dict:
    """Environment for a child process running ``framework``: quiet TensorFlow logs, and for
    Keras 3 no ``TF_USE_LEGACY_KERAS`` (importing ga_tfx sets it in this process's environment,
    which children would inherit)."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework {framework!r} is not one of {FRAMEWORKS}")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONWARNINGS="ignore")
    if framework == KERAS3:
        env.pop(_LEGACY_ENV, None)
    return env


def version(framework: str) -> str:
    """The installed version of ``framework``'s Keras package, without importing it."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("tf-keras" if framework == KERAS2 else "keras")
    except PackageNotFoundError:
        return "not installed"
