"""``gradient_accumulator.utils`` on ga-tfx: :func:`replace_batchnorm_layers`."""

from ga_tfx import _validation
from ga_tfx._keras import keras
from ga_tfx.batchnorm.conversion import replace_batchnorm_layers_with
from ga_tfx.compat.gradient_accumulator.layers import AccumBatchNormalization

from typing import Any, Dict

POSITIONS = ("replace",)


def replace_batchnorm_layers(
    model: keras.Model, accum_steps: int, position: str = "replace"
) -> keras.Model:
    """A copy of ``model`` whose BatchNormalization layers accumulate window statistics.

    As :func:`ga_tfx.replace_batchnorm_layers`: every ``keras.layers.BatchNormalization`` (also
    in nested Functional/Sequential models) becomes an ``AccumBatchNormalization`` of
    :mod:`ga_tfx.compat.gradient_accumulator.layers` (counting ``accum_steps`` training calls
    per window when no ga-tfx front-end drives it) with the same configuration, its gamma, beta
    and moving statistics copied (the package resets them and handles only single-output
    models); the copy keeps the model's inputs, outputs and layer names.

    Args:
      model: a Functional or Sequential ``keras.Model``.
      accum_steps: int >= 1, the layers' window when trained outside a ga-tfx front-end.
      position: ``"replace"`` (the only value, as in the package).

    Raises:
      ValueError: for another ``position`` or a bad ``accum_steps``.
    """
    if position not in POSITIONS:
        raise ValueError(f"position must be one of {list(POSITIONS)}, got {position!r}.")
    accum_steps = _validation.check_accum_steps(accum_steps)

    def from_config(config: Dict[str, Any]) -> AccumBatchNormalization:
        return AccumBatchNormalization(accum_steps=accum_steps, **config)

    return replace_batchnorm_layers_with(model, from_config)
