"""Accumulation-wrapped Keras models.

* :class:`GradientAccumulateModel`: built like a functional model
  (``GradientAccumulateModel(accum_steps=4, inputs=x, outputs=y)``), the name users of the
  ``gradient-accumulator`` package know.
* :func:`wrap_model`: turns an existing Functional, Sequential or subclassed model into an
  accumulation model without rebuilding it: the result shares the original's layers and
  variables.
* :func:`unwrap_model`: the plain Keras model to export for serving.
"""

from ga_tfx import _tf_keras_internals as internals
from ga_tfx._keras import keras
from ga_tfx.config import FIELDS, MIGRATION_HINTS, NOT_GIVEN, AccumulationConfig, resolve
from ga_tfx.engine import AccumulationEngine
from ga_tfx.engine.step import overridden_step_hooks
from ga_tfx.transforms import Member

import copy
from typing import Any, Dict, Optional, Sequence, Tuple, Union


def _split_settings(kwargs: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """``(accumulation settings, the rest)`` of a model constructor's keyword arguments (a
    gradient-accumulator argument counts as a setting: :func:`~ga_tfx.config.resolve` answers
    it with the ga-tfx way)."""
    settings = {k: v for k, v in kwargs.items() if k in FIELDS or k in MIGRATION_HINTS}
    return settings, {k: v for k, v in kwargs.items() if k not in settings}


@keras.saving.register_keras_serializable(package="ga_tfx")
class GradientAccumulateModel(AccumulationEngine, keras.Model):
    """A functional Keras model whose ``fit`` updates once per ``accum_steps`` micro-batches.

    Args:
      accum_steps: ``K``, micro-batches per optimizer update (int >= 1). The effective batch
        size is ``K`` times the micro-batch size that ``fit`` receives (``batch_size=`` or the
        batches of a dataset). It and the other settings of :class:`~ga_tfx.AccumulationConfig`
        (``partial_window``, ``agc_clip_factor``, ``agc_eps``, ``agc_exclude``,
        ``clip_global_norm``, ``nonfinite_policy``, ``max_consecutive_skips``,
        ``log_grad_norm``, ``log_noise_scale``, ``noise_scale_decay``) are keyword arguments,
        or one ``config=AccumulationConfig(...)`` (not both).
      config: an :class:`~ga_tfx.AccumulationConfig` instead of the keyword settings.
      transforms: gradient transforms run once per update after the config's
        (:class:`ga_tfx.transforms.GradientTransform` or ``(name, callable)`` pairs); not part
        of ``get_config``.
      inputs, outputs, name, ...: as ``keras.Model``.
    """

    def __init__(
        self,
        *args: Any,
        config: Optional[AccumulationConfig] = None,
        transforms: Sequence[Member] = (),
        **kwargs: Any,
    ) -> None:
        settings, kwargs = _split_settings(kwargs)
        self._configure_accumulation(
            resolve("ga_tfx.GradientAccumulateModel", config, settings), transforms
        )
        super().__init__(*args, **kwargs)

    def get_config(self) -> dict:
        # The functional graph (layers, inputs, outputs) plus the accumulation settings;
        # Functional.get_config would drop the graph because __init__ is not Functional's.
        config = internals.get_network_config(
            self, {"name": self.name, "trainable": self.trainable}
        )
        config = copy.deepcopy(config)
        config.update(self.accumulation_config())
        return config

    @classmethod
    def from_config(cls, config: dict, custom_objects: Optional[dict] = None) -> keras.Model:
        config = dict(config)
        accumulation = {k: config.pop(k) for k in FIELDS if k in config}
        inputs, outputs, layers = internals.reconstruct_from_config(config, custom_objects)
        model = cls(inputs=inputs, outputs=outputs, name=config.get("name"), **accumulation)
        internals.connect_ancillary_layers(model, layers)
        return model


@keras.saving.register_keras_serializable(package="ga_tfx")
class AccumulatingModel(AccumulationEngine, keras.Model):
    """Wraps any Keras model (typically a subclassed one) for gradient accumulation.

    The wrapper's forward pass is the wrapped model's; its variables are the wrapped model's.
    Prefer :func:`wrap_model`, which keeps functional models functional (output names, loss
    dicts keyed by output layer).

    Args:
      model: the ``keras.Model`` to train with accumulation (``.model`` afterwards).
      accum_steps, ..., config, transforms: as :class:`GradientAccumulateModel`.
    """

    def __init__(
        self,
        model: keras.Model,
        *,
        config: Optional[AccumulationConfig] = None,
        transforms: Sequence[Member] = (),
        **kwargs: Any,
    ) -> None:
        settings, kwargs = _split_settings(kwargs)
        _check_is_model(model)
        self._configure_accumulation(
            resolve("ga_tfx.AccumulatingModel", config, settings), transforms
        )
        kwargs.setdefault("name", f"{model.name}_accumulating")
        super().__init__(**kwargs)
        self.model = model

    def call(self, inputs: Any, training: Optional[bool] = None) -> Any:
        return self.model(inputs, training=training)

    # Where the wrapped model's class defines its batch (its own train_step, compute_loss or
    # compute_metrics: engine.step.STEP_HOOKS), its train_step (Keras' calls the other two),
    # test_step and metrics are used, and it is compiled with the wrapper (see compile).
    def _train_step_model(self) -> Optional[keras.Model]:
        if type(self).train_step is not AccumulatingModel.train_step:
            return self  # a subclass of this wrapper with its own train_step
        return self.model if overridden_step_hooks(self.model) else None

    def _delegates_steps(self) -> bool:
        return self._train_step_model() is self.model

    def train_step(self, data: Any) -> Any:
        """The wrapped model's ``train_step`` if it overrides it, else Keras'. Runs as is (one
        update per batch) only with ``accum_steps=1`` and no AGC; otherwise the engine runs it
        once per micro-batch, accumulating its update."""
        if self._delegates_steps():
            return self.model.train_step(data)
        return super().train_step(data)

    def test_step(self, data: Any) -> Any:
        if self._delegates_steps():
            return self.model.test_step(data)
        return super().test_step(data)

    @property
    def metrics(self) -> list:
        if self._delegates_steps() and self.model.compiled_loss is not None:
            return self.model.metrics
        return super().metrics

    def get_config(self) -> dict:
        config = {"model": keras.saving.serialize_keras_object(self.model), "name": self.name}
        config.update(self.accumulation_config())
        return config

    @classmethod
    def from_config(cls, config: dict, custom_objects: Optional[dict] = None) -> keras.Model:
        config = dict(config)
        model = keras.saving.deserialize_keras_object(
            config.pop("model"), custom_objects=custom_objects
        )
        return cls(model, **config)


def _check_is_model(model: Any) -> None:
    if not isinstance(model, keras.Model):
        raise TypeError(
            f"Expected a tf.keras (Keras 2) Model, got {model!r} of type "
            f"{type(model).__module__}.{type(model).__name__}. Build the model with tf.keras "
            "after importing ga_tfx (a Keras 3 `keras.Model` is not supported)."
        )


def _is_functional(model: Any) -> bool:
    return internals.is_graph_network(model) and bool(model.inputs)


def wrap_model(
    model: keras.Model,
    accum_steps: int = NOT_GIVEN,
    *,
    config: Optional[AccumulationConfig] = None,
    transforms: Sequence[Member] = (),
    **settings: Any,
) -> Union["GradientAccumulateModel", "AccumulatingModel"]:
    """Returns an accumulation model training ``model``'s own variables (no copy, no rebuild).

    ``accum_steps`` and the other settings of :class:`~ga_tfx.AccumulationConfig` are keyword
    arguments (``wrap_model(model, 8, agc_clip_factor=0.01)``), or one
    ``config=AccumulationConfig(...)``; ``transforms`` as :class:`GradientAccumulateModel`.

    Functional and built Sequential models become a :class:`GradientAccumulateModel` over the
    same graph of layers (inputs, outputs and output names preserved); other models
    (subclassed, unbuilt Sequential, or any model whose class overrides ``train_step``,
    ``compute_loss`` or ``compute_metrics``) are wrapped in an :class:`AccumulatingModel`. A
    model that overrides one of those is trained through its ``train_step`` (Keras' own where
    it overrides only the loss or the metrics): it runs once per micro-batch, its
    ``self.optimizer.apply_gradients`` (or ``minimize``) adds to the window, and the window
    is applied once; its weights then follow its own big-batch training. A ``train_step``
    that updates otherwise (several ``apply_gradients`` calls per batch, its own optimizers)
    raises ``ValueError`` naming ``train_step`` and the alternatives, at ``compile`` when the
    model overrides ``compile``, else when ``fit`` first traces it.
    Compile the returned model, not the original. ``gradient-accumulator`` arguments
    (``agc=True``, ``mixed_precision=True``, ...) raise ``TypeError`` naming the ga-tfx way
    (see :mod:`ga_tfx.compat`).
    """
    resolved = resolve("ga_tfx.wrap_model", config, dict(settings, accum_steps=accum_steps))
    _check_is_model(model)
    if isinstance(model, AccumulationEngine):
        raise ValueError(
            f"Model {model.name!r} is already a gradient accumulation model "
            f"(accum_steps={model.accum_steps}); wrap the plain model instead."
        )
    if _is_functional(model) and not overridden_step_hooks(model):
        return GradientAccumulateModel(
            inputs=model.inputs,
            outputs=model.outputs,
            name=model.name,
            config=resolved,
            transforms=transforms,
        )
    return AccumulatingModel(model, config=resolved, transforms=transforms)


def unwrap_model(model: keras.Model) -> keras.Model:
    """The plain Keras model behind an accumulation model (shares its variables).

    Export this one for serving: it has no accumulation state and costs what the plain model
    costs. A model that is not an accumulation model is returned as is.
    """
    if isinstance(model, AccumulatingModel):
        return model.model
    if isinstance(model, GradientAccumulateModel):
        return keras.Model(inputs=model.inputs, outputs=model.outputs, name=model.name)
    return model
