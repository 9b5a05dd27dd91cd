"""The shim's layer, tracking, functional-config and TensorFlow (autograph, inlining)
internals: part of :mod:`ga_tfx._tf_keras_internals`, which re-exports every name here and
checks every internal they use at import (its ``_REQUIRED`` lists).
"""

from __future__ import annotations

from ga_tfx._tf_keras_internals import (
    _autograph_config,
    _base_layer_utils,
    _control_flow_util,
    _distribute_values,
    _functional,
)

from typing import Any, Callable, List, Optional, Sequence, Tuple

import tensorflow as tf
import tf_keras


# --------------------------------------------------------------------------- layers, tracking
def flatten_layers(
    layer: tf_keras.layers.Layer, include_self: bool = False
) -> List[tf_keras.layers.Layer]:
    """Every layer nested in ``layer`` (models included), depth first, each once."""
    return list(layer._flatten_layers(include_self=include_self))


def track_trackable(owner: Any, trackable: Any, name: str) -> None:
    """Makes ``trackable`` a checkpoint dependency of ``owner`` under ``name`` (overwriting),
    without making it a Keras attribute (so its variables are not layer weights)."""
    owner._track_trackable(trackable, name=name, overwrite=True)


def is_graph_network(model: Any) -> bool:
    """True for a Functional (or built Sequential) model: a graph of layers Keras can rebuild."""
    return bool(getattr(model, "_is_graph_network", False))


# --------------------------------------------------------------------------- functional config
def get_network_config(model: tf_keras.Model, config: dict) -> dict:
    """The functional graph's config (layers, inbound nodes, inputs, outputs) merged into
    ``config``."""
    return _functional.get_network_config(model, config=config)


def reconstruct_from_config(
    config: dict, custom_objects: Optional[dict] = None
) -> Tuple[list, list, dict]:
    """``(inputs, outputs, created_layers)`` rebuilt from :func:`get_network_config`'s output."""
    return _functional.reconstruct_from_config(config, custom_objects)


def connect_ancillary_layers(model: tf_keras.Model, created_layers: dict) -> None:
    """Adds layers of the config not on the input-output path (e.g. ``add_loss`` layers)."""
    _functional.connect_ancillary_layers(model, created_layers)


# --------------------------------------------------------------------------- layers' training
def constant_value(pred: Any) -> Optional[bool]:
    """The Python bool of a ``training`` argument if known at trace time, else ``None``."""
    return _control_flow_util.constant_value(pred)


def smart_cond(pred: Any, true_fn: Callable[[], Any], false_fn: Callable[[], Any]) -> Any:
    """``tf.cond`` that runs one branch directly when ``pred`` is known at trace time."""
    return _control_flow_util.smart_cond(pred, true_fn, false_fn)


def traced_for_saving() -> bool:
    """True while Keras traces a layer's call to export it (``model.save``,
    ``tf.saved_model.save``): the call's training-only checks have no place in the export."""
    return bool(_base_layer_utils.call_context().saving)


def bn_param_shape(layer: tf_keras.layers.BatchNormalization) -> Sequence[int]:
    """The shape of a built BatchNormalization layer's gamma/beta/moving statistics."""
    return layer._param_shape


def bn_param_dtype(layer: tf_keras.layers.BatchNormalization) -> tf.DType:
    """The dtype of a BatchNormalization layer's parameters (float32 under mixed precision)."""
    return layer._param_dtype


def bn_training_value(layer: tf_keras.layers.BatchNormalization, training: Any) -> Any:
    """The ``training`` value Keras' BatchNormalization would use (``trainable=False`` and the
    learning phase included)."""
    return layer._get_training_value(training)


def bn_assign_moving_average(
    layer: tf_keras.layers.BatchNormalization,
    variable: tf.Variable,
    value: Any,
    momentum: float,
    count: Any,
) -> Any:
    """Keras' moving-average update of one BatchNormalization statistic."""
    return layer._assign_moving_average(variable, value, momentum, count)


# --------------------------------------------------------------------------- TensorFlow
def autotrackable_children(obj: Any, save_type: str = "checkpoint", **kwargs: Any) -> dict:
    """``obj``'s checkpoint children by plain attribute tracking (``AutoTrackable``'s rule),
    bypassing a base class that caches its children (tf-keras' optimizer does)."""
    return tf.__internal__.tracking.AutoTrackable._trackable_children(obj, save_type, **kwargs)


def learning_rate_schedule(optimizer: Any) -> Any:
    """The optimizer's ``LearningRateSchedule`` (``None`` for a constant learning rate): tf-keras'
    ``learning_rate`` property returns a variable in both cases (``_learning_rate`` keeps the
    schedule). A ``LossScaleOptimizer`` answers for its inner optimizer."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    rate = getattr(inner, "_learning_rate", None)
    schedules = tf_keras.optimizers.schedules.LearningRateSchedule
    return rate if isinstance(rate, schedules) else None


def leave_tf_keras_unconverted_by_autograph() -> None:
    """Adds ``DoNotConvert("tf_keras")`` to autograph's rules (once).

    TensorFlow's rules leave the ``keras`` package unconverted, as Keras 2 was written to be
    traced as it is (it converts a layer's ``call`` itself). Under its new name ``tf_keras``
    the same code is converted, which measured here costs tens of seconds per traced train
    function (a small ga_tfx ``fit``: 42 s -> 2.6 s with the rule). Code outside tf_keras
    (ga_tfx's windowed loop, users' layers) is converted as before.
    """
    rules = _autograph_config.CONVERSION_RULES
    if not any(
        isinstance(rule, _autograph_config.DoNotConvert) and rule.matches("tf_keras")
        for rule in rules
    ):
        _autograph_config.CONVERSION_RULES = rules + (_autograph_config.DoNotConvert("tf_keras"),)
