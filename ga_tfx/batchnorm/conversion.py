"""Model conversion: BatchNormalization -> AccumBatchNormalization in an existing model.

:func:`replace_batchnorm_layers` rebuilds a Functional or Sequential model (nested models
included) layer by layer with :func:`keras.models.clone_model`, turning every
``keras.layers.BatchNormalization`` into a :class:`ga_tfx.AccumBatchNormalization` with the same
configuration, then copies every layer's weights (gamma, beta and the moving statistics
included) to its clone. The layer itself lives in :mod:`ga_tfx.batchnorm`.
"""

from ga_tfx import _tf_keras_internals as internals
from ga_tfx._keras import keras
from ga_tfx.batchnorm import AccumBatchNormalization
from ga_tfx.batchnorm.layer import own_windows_refused
from ga_tfx.engine import AccumulationEngine
from ga_tfx.models import unwrap_model, wrap_model

from typing import Any, Callable, Dict, Tuple


def replace_batchnorm_layers(model: keras.Model, accum_steps: None = None) -> keras.Model:
    """Returns a copy of ``model`` whose BatchNormalization layers are AccumBatchNormalization.

    Every ``keras.layers.BatchNormalization`` (also inside nested Functional and Sequential
    models, e.g. a ``keras.applications`` backbone used as a layer) becomes an
    :class:`AccumBatchNormalization` with the same configuration; its gamma,
    beta, moving mean and moving variance are copied, as are the weights of all other layers.
    The copy has the same inputs, outputs and output names; ``model`` is not modified. A model
    without BatchNormalization comes back as an equivalent copy. A ga-tfx accumulation model
    comes back as an accumulation model with the same :class:`~ga_tfx.AccumulationConfig` (a
    callable ``accum_steps`` schedule included) and ``transforms``. The new layers carry no K:
    the ga-tfx front-end that trains the model (:func:`ga_tfx.wrap_model`, ``TrainingLoop``,
    the optimizer wrapper) ends their windows, whatever its K or schedule.

    Args:
      model: a Functional or Sequential ``keras.Model``.
      accum_steps: not taken: any value but ``None`` is a ``TypeError`` (layers that count
        their own windows of K training calls:
        ``ga_tfx.compat.gradient_accumulator.utils.replace_batchnorm_layers(model, K)``).

    Raises:
      TypeError: for a subclassed model, or for a layer that is not a model but holds
        BatchNormalization layers (neither can be rebuilt layer by layer): build those with
        :class:`AccumBatchNormalization` directly.
    """
    if accum_steps is not None:
        raise own_windows_refused(
            "replace_batchnorm_layers",
            accum_steps,
            "ga_tfx.compat.gradient_accumulator.utils.replace_batchnorm_layers(model, K)",
        )
    return replace_batchnorm_layers_with(model, AccumBatchNormalization.from_config)


def replace_batchnorm_layers_with(
    model: keras.Model, from_config: Callable[[Dict[str, Any]], AccumBatchNormalization]
) -> keras.Model:
    """As :func:`replace_batchnorm_layers`, with the new layers made by ``from_config(config)``
    from the BatchNormalization's config (``synchronized`` and ``fused`` included): how
    ``ga_tfx.compat`` puts in its own layer class."""
    if not isinstance(model, keras.Model):
        raise TypeError(f"Expected a tf.keras (Keras 2) Model, got {model!r}.")
    if isinstance(model, AccumulationEngine):
        replaced = replace_batchnorm_layers_with(unwrap_model(model), from_config)
        # The config object itself (a callable schedule included) and the user's transforms.
        return wrap_model(replaced, config=model.accumulation, transforms=model.transforms)
    return _BatchNormReplacer(from_config).replace(model)


class _BatchNormReplacer:
    """Clones a model graph layer by layer (BatchNormalization -> AccumBatchNormalization),
    then copies every layer's weights to its clone."""

    def __init__(self, from_config: Callable[[Dict[str, Any]], AccumBatchNormalization]) -> None:
        self._from_config = from_config
        self._clones: Dict[int, Tuple[Any, Any]] = {}  # id(original) -> (original, clone)

    def replace(self, model: keras.Model) -> keras.Model:
        clone = self._clone_model(model)
        for original, copy in self._clones.values():
            _copy_weights(original, copy)
        return clone

    def _clone_model(self, model: keras.Model) -> keras.Model:
        if not _is_graph_model(model):
            raise TypeError(
                f"replace_batchnorm_layers cannot rebuild model {model.name!r} of type "
                f"{type(model).__name__}: only Functional and Sequential models can be rebuilt "
                "layer by layer. Build the model with ga_tfx.AccumBatchNormalization layers "
                "directly instead of keras.layers.BatchNormalization."
            )
        clone = keras.models.clone_model(model, clone_function=self._clone_layer)
        if model.built and not clone.built and model.inputs:
            clone.build(model.input_shape)
        return clone

    def _clone_layer(self, layer: Any) -> Any:
        known = self._clones.get(id(layer))
        if known is not None:
            return known[1]  # a layer shared between nested models stays shared
        if isinstance(layer, keras.Model) and _is_graph_model(layer):
            return self._clone_model(layer)
        if isinstance(layer, keras.layers.BatchNormalization):
            clone = _to_accum_batchnorm(layer, self._from_config)
        else:
            _check_holds_no_batchnorm(layer)
            clone = layer.__class__.from_config(layer.get_config())
        self._clones[id(layer)] = (layer, clone)
        return clone


def _is_graph_model(model: Any) -> bool:
    return isinstance(model, keras.Sequential) or (
        isinstance(model, keras.Model) and internals.is_graph_network(model)
    )


def _to_accum_batchnorm(
    layer: Any, from_config: Callable[[Dict[str, Any]], AccumBatchNormalization]
) -> AccumBatchNormalization:
    config = layer.get_config()
    # Not part of Keras' config, but they decide the numerics: keep them.
    config["synchronized"] = layer.synchronized
    config["fused"] = layer.fused
    try:
        return from_config(config)
    except (TypeError, ValueError) as error:
        raise type(error)(
            f"Cannot turn layer {layer.name!r} ({type(layer).__name__}) into an "
            f"AccumBatchNormalization: {error}"
        ) from error


def _check_holds_no_batchnorm(layer: Any) -> None:
    nested = [
        inner.name
        for inner in internals.flatten_layers(layer)
        if isinstance(inner, keras.layers.BatchNormalization)
    ]
    if nested:
        raise TypeError(
            f"Layer {layer.name!r} of type {type(layer).__name__} holds BatchNormalization "
            f"layers {nested} that replace_batchnorm_layers cannot reach (it is neither a "
            "Functional nor a Sequential model). Build it with ga_tfx.AccumBatchNormalization "
            "directly."
        )


def _copy_weights(original: Any, clone: Any) -> None:
    values = original.get_weights()
    if not values:
        return
    targets = clone.weights
    if len(targets) != len(values):
        raise ValueError(
            f"Cannot copy the weights of layer {original.name!r}: it has {len(values)} "
            f"weights, its copy {len(targets)}."
        )
    for value, target in zip(values, targets):
        if tuple(target.shape) != value.shape:
            raise ValueError(
                f"Cannot copy weight {target.name!r} of layer {original.name!r}: shape "
                f"{value.shape} vs {tuple(target.shape)} in the copy."
            )
    clone.set_weights(values)
