"""ga-tfx: exact, distribution-safe gradient accumulation for Keras 2 and TFX.

Importing ``ga_tfx`` selects Keras 2 (tf-keras) for this process: it sets
``TF_USE_LEGACY_KERAS=1`` before TensorFlow is imported (see :mod:`ga_tfx._keras`). Make it the
first import of scripts and TFX module files. ``import ga_tfx`` itself is cheap: TensorFlow is
loaded when a public name is first used (``ga_tfx.wrap_model``, ``ga_tfx.keras``, ...), so that
``ga-tfx --help`` and the settings declaration stay instant. If TensorFlow is already imported,
the Keras 2 check runs at once. The library never imports TFX.

Public names: see ``__all__``; ``ga_tfx.keras`` and ``ga_tfx.tf`` are the documented way to get
Keras 2 and TensorFlow.
"""

import importlib
import importlib.util
import os as _os
import sys as _sys
from typing import TYPE_CHECKING, Any, List

# name -> module defining it (loaded on first access, PEP 562).
_PUBLIC = {
    "AccumBatchNormalization": "ga_tfx.batchnorm",
    "AccumulationConfig": "ga_tfx.config",
    "AccumulatingModel": "ga_tfx.models",
    "AdaptiveClipping": "ga_tfx.transforms",
    "DivisorError": "ga_tfx.divisor_rule",
    "GradientAccumulateModel": "ga_tfx.models",
    "GradientAccumulateOptimizer": "ga_tfx.optimizer",
    "GradientAccumulator": "ga_tfx.window.accumulator",
    "KerasVersionError": "ga_tfx._keras",
    "NonFiniteGradientError": "ga_tfx.window",
    "TrainingLoop": "ga_tfx.training_loop",
    "UpdateCallback": "ga_tfx.training_loop",
    "adaptive_clip_gradients": "ga_tfx.transforms.agc",
    "replace_batchnorm_layers": "ga_tfx.batchnorm.conversion",
    "unwrap_model": "ga_tfx.models",
    "WindowEnd": "ga_tfx.window",
    "fit_micro_batch": "ga_tfx.sizing.memory",
    "loss_divisor": "ga_tfx.loss_divisors",
    "wrap_model": "ga_tfx.models",
    "keras": "ga_tfx._keras",
    "tf": "ga_tfx._keras",
}

__all__ = sorted(_PUBLIC)

# Whether this import set TF_USE_LEGACY_KERAS (and what it was before): the Keras 3 front-end
# (ga_tfx.keras3), imported before TensorFlow, takes it back, so that tf.keras stays Keras 3.
_LEGACY_FLAG_BEFORE: Any = None
_SET_LEGACY_FLAG = False

# Public names that need no Keras (usable with ga_tfx.keras3 too).
_KERAS_FREE = {"AccumulationConfig", "DivisorError", "KerasVersionError"}
_HAS_TF_KERAS = importlib.util.find_spec("tf_keras") is not None

if not _HAS_TF_KERAS:
    # No tf-keras installed: there is no Keras 2 to select (a Keras 3 environment, which uses
    # ga_tfx.keras3); a Keras 2 name raises KerasVersionError when first used.
    pass
elif "tensorflow" not in _sys.modules:
    # Before TensorFlow is first imported: tf.keras will resolve to tf-keras (Keras 2).
    _LEGACY_FLAG_BEFORE = _os.environ.get("TF_USE_LEGACY_KERAS")
    _SET_LEGACY_FLAG = True
    _os.environ["TF_USE_LEGACY_KERAS"] = "1"
else:  # TensorFlow is loaded already: decide (and check) now, not at first use.
    importlib.import_module("ga_tfx._keras")


def __getattr__(name: str) -> Any:
    if name == "__version__":  # declared once, in setup.py: the installed distribution's
        from importlib import metadata

        try:
            return metadata.version("ga-tfx")
        except metadata.PackageNotFoundError:  # imported from a source tree, not installed
            return "unknown (not installed)"
    if name in _PUBLIC:
        if not _HAS_TF_KERAS and name not in _KERAS_FREE:
            importlib.import_module("ga_tfx._keras")  # raises KerasVersionError: no tf-keras
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ga_tfx' has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_PUBLIC) | {"__version__"})


if TYPE_CHECKING:  # static checkers see the eager imports
    __version__: str
    from ga_tfx._keras import KerasVersionError, keras, tf  # noqa: F401
    from ga_tfx.batchnorm import AccumBatchNormalization  # noqa: F401
    from ga_tfx.batchnorm.conversion import replace_batchnorm_layers  # noqa: F401
    from ga_tfx.config import AccumulationConfig  # noqa: F401
    from ga_tfx.models import AccumulatingModel, GradientAccumulateModel, unwrap_model, wrap_model  # noqa: F401
    from ga_tfx.optimizer import GradientAccumulateOptimizer  # noqa: F401
    from ga_tfx.sizing.memory import fit_micro_batch  # noqa: F401
    from ga_tfx.training_loop import TrainingLoop, UpdateCallback  # noqa: F401
    from ga_tfx.transforms import AdaptiveClipping  # noqa: F401
    from ga_tfx.transforms.agc import adaptive_clip_gradients  # noqa: F401
    from ga_tfx.window import NonFiniteGradientError, WindowEnd  # noqa: F401
    from ga_tfx.window.accumulator import GradientAccumulator  # noqa: F401
