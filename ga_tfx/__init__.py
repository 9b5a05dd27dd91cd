"""ga-tfx: exact, distribution-safe gradient accumulation for Keras 2 and TFX.

Importing ``ga_tfx`` selects Keras 2 (tf-keras) for this process (see ``ga_tfx._keras``); make it
the first import of scripts and TFX module files. The library never imports TFX.
"""

from ga_tfx._keras import KerasVersionError  # noqa: F401  (first: decides Keras 2)
from ga_tfx.accumulator import GradientAccumulator
from ga_tfx.agc import AdaptiveGradientClipping, adaptive_clip_gradients
from ga_tfx.batchnorm import AccumBatchNormalization, replace_batchnorm_layers
from ga_tfx.models import (AccumulatingModel, GradientAccumulateModel, unwrap_model,
                           wrap_model)
from ga_tfx.optimizer import GradientAccumulateOptimizer

__version__ = "0.1.0"

__all__ = [
    "AccumBatchNormalization",
    "AccumulatingModel",
    "AdaptiveGradientClipping",
    "GradientAccumulateModel",
    "GradientAccumulateOptimizer",
    "GradientAccumulator",
    "KerasVersionError",
    "adaptive_clip_gradients",
    "replace_batchnorm_layers",
    "unwrap_model",
    "wrap_model",
]
