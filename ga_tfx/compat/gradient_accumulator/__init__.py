"""The public API of ``gradient-accumulator`` 0.5.2, running on the exact ga-tfx engine.

Replace ``import gradient_accumulator`` with::

    import ga_tfx.compat.gradient_accumulator as gradient_accumulator

and ``from gradient_accumulator[.submodule] import X`` with
``from ga_tfx.compat.gradient_accumulator[.submodule] import X``. Names (as in the package):
``GradientAccumulateModel``, ``GradientAccumulateOptimizer`` (``accumulators``),
``AccumBatchNormalization`` (``layers``), ``adaptive_clip_grad``, ``unitwise_norm``,
``compute_norm`` (``agc``), ``replace_batchnorm_layers`` (``utils``; also importable from here).
Importing this module selects Keras 2 (tf-keras), as ``import ga_tfx`` does.
"""

from ga_tfx.compat.gradient_accumulator import accumulators, agc, layers, utils  # noqa: F401
from ga_tfx.compat.gradient_accumulator.accumulators import (
    GradientAccumulateModel,
    GradientAccumulateOptimizer,
)
from ga_tfx.compat.gradient_accumulator.agc import adaptive_clip_grad, compute_norm, unitwise_norm
from ga_tfx.compat.gradient_accumulator.layers import AccumBatchNormalization
from ga_tfx.compat.gradient_accumulator.utils import replace_batchnorm_layers

__all__ = [
    "AccumBatchNormalization",
    "GradientAccumulateModel",
    "GradientAccumulateOptimizer",
    "adaptive_clip_grad",
    "compute_norm",
    "replace_batchnorm_layers",
    "unitwise_norm",
]
