"""The Keras Tuner plugin: search over the effective batch (``accum_steps``) and AGC, or measure it.

* :class:`AccumulationHyperModel` (:mod:`ga_tfx.tuning.hypermodel`, where its hyperparameters,
  budgets, learning-rate scaling and failed trials are described) wraps a user's Keras Tuner
  build function: per trial an accumulation model, fitted on micro-batches, for any Keras Tuner
  search; :class:`AccumulationSearchSpace` (:mod:`ga_tfx.tuning.search_space`, standard library
  only) is what it searches.
* :class:`NoiseScaleProbe` and :class:`StopAtLoss` (:mod:`ga_tfx.tuning.probe`) replace a search
  by one short run that measures the gradient noise scale and recommends ``accum_steps``.

The names load on first use (PEP 562), so that ``ga_tfx.tuning.search_space`` (the CLI's and the
Trainer's settings) imports neither TensorFlow nor ``keras_tuner``; the other modules import
``keras_tuner``.
"""

import importlib
from typing import TYPE_CHECKING, Any, List

# name -> module defining it (loaded on first access).
_PUBLIC = {
    "AccumulationHyperModel": "ga_tfx.tuning.hypermodel",
    "AccumulationSearchSpace": "ga_tfx.tuning.search_space",
    "NoiseScaleProbe": "ga_tfx.tuning.probe",
    "StopAtLoss": "ga_tfx.tuning.probe",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ga_tfx.tuning' has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_PUBLIC))


if TYPE_CHECKING:  # static checkers see the eager imports
    from ga_tfx.tuning.hypermodel import AccumulationHyperModel  # noqa: F401
    from ga_tfx.tuning.probe import NoiseScaleProbe, StopAtLoss  # noqa: F401
    from ga_tfx.tuning.search_space import AccumulationSearchSpace  # noqa: F401
