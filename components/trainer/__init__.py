"""ga-tfx Trainer: ``GradientAccumulationTrainer``, its executor and its ``run_fn``.

Names load on first use (PEP 562), so that ``ga_tfx.components.trainer.settings`` (standard
library only) can be imported without TFX, e.g. by ``ga-tfx --help``.
"""

import importlib
from typing import Any

_PUBLIC = {
    "AccumulationSettings": "ga_tfx.components.trainer.settings",
    "Executor": "ga_tfx.components.trainer.executor",
    "GradientAccumulationTrainer": "ga_tfx.components.trainer.component",
    "GradientAccumulationTrainerSpec": "ga_tfx.components.trainer.component",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
