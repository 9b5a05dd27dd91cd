"""The layers that keep window state in what a user hands a front-end (``window_layers=``).

A window layer implements ``ga_window_end(apply)`` (:class:`ga_tfx.AccumBatchNormalization`
does), which the window core calls once per window. The optimizer wrapper sees variables, not
layers: it is told the model (or layers) whose window layers it ends, and finds them here.
"""

from ga_tfx import _tf_keras_internals
from ga_tfx._keras import keras

from typing import Any, List


def window_layers_of(layers: Any) -> List[Any]:
    """The layers that keep window state (``ga_window_end``) in a model, a layer or a list of
    them; ``TypeError`` naming what was given otherwise."""
    if layers is None:
        return []
    found: List[Any] = []
    for item in layers if isinstance(layers, (list, tuple)) else [layers]:
        if not isinstance(item, keras.layers.Layer):
            raise TypeError(
                "window_layers must be the Keras model being trained, a layer, or a list of "
                f"layers; got {item!r} of type {type(item).__name__}."
            )
        for layer in _tf_keras_internals.flatten_layers(item, include_self=True):
            if hasattr(layer, "ga_window_end") and layer not in found:
                found.append(layer)
    return found
