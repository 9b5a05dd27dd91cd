"""The anchor, gradient-accumulator 0.5.2 (installed beside ga_tfx): only called, never copied.

Imported after ga_tfx, so its ``tf.keras`` is tf-keras (Keras 2) as well. An import failure is
kept in ``IMPORT_ERROR`` and reported, not hidden.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2 before TensorFlow is imported)

try:
    from gradient_accumulator import (
        AccumBatchNormalization,
        GradientAccumulateModel,
        GradientAccumulateOptimizer,
    )
    from gradient_accumulator.utils import replace_batchnorm_layers

    IMPORT_ERROR = None
except Exception as error:  # reported, not hidden
    AccumBatchNormalization = GradientAccumulateModel = GradientAccumulateOptimizer = None
    replace_batchnorm_layers = None
    IMPORT_ERROR = f"{type(error).__name__}: {error}"


def require(name: str):
    """The anchor's public object ``name``; ``ImportError`` with the import failure if absent."""
    value = globals()[name]
    if value is None:
        raise ImportError(f"gradient-accumulator is not importable: {IMPORT_ERROR}")
    return value
