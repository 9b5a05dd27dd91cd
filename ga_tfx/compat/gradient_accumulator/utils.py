"""``gradient_accumulator.utils`` on ga-tfx: :func:`replace_batchnorm_layers`."""

import ga_tfx
from ga_tfx._keras import keras

POSITIONS = ("replace",)


def replace_batchnorm_layers(
    model: keras.Model, accum_steps: int, position: str = "replace"
) -> keras.Model:
    """A copy of ``model`` whose BatchNormalization layers accumulate window statistics.

    As :func:`ga_tfx.replace_batchnorm_layers`: every ``keras.layers.BatchNormalization`` (also
    in nested Functional/Sequential models) becomes an ``AccumBatchNormalization`` with the same
    configuration, its gamma, beta and moving statistics copied (the package resets them and
    handles only single-output models); the copy keeps the model's inputs, outputs and layer
    names.

    Args:
      model: a Functional or Sequential ``keras.Model``.
      accum_steps: int >= 1, the layers' window when trained outside a ga-tfx model.
      position: ``"replace"`` (the only value, as in the package).

    Raises:
      ValueError: for another ``position`` or a bad ``accum_steps``.
    """
    if position not in POSITIONS:
        raise ValueError(f"position must be one of {list(POSITIONS)}, got {position!r}.")
    return ga_tfx.replace_batchnorm_layers(model, accum_steps)
