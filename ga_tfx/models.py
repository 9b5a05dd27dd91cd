"""Accumulation-wrapped Keras models.

* :class:`GradientAccumulateModel`: built like a functional model
  (``GradientAccumulateModel(accum_steps=4, inputs=x, outputs=y)``), the name users of the
  ``gradient-accumulator`` package know.
* :func:`wrap_model`: turns an existing Functional, Sequential or subclassed model into an
  accumulation model without rebuilding it: the result shares the original's layers and
  variables.
* :func:`unwrap_model`: the plain Keras model to export for serving.
"""

import copy

from ga_tfx._keras import keras
from ga_tfx.compat._arguments import reject_package_arguments
from ga_tfx.engine import AccumulationEngine

from tf_keras.src.engine import functional  # pinned tf-keras 2.16 internals

_ACCUMULATION_KEYS = ("accum_steps", "partial_window", "agc_clip_factor", "agc_eps",
                      "agc_exclude")


@keras.saving.register_keras_serializable(package="ga_tfx")
class GradientAccumulateModel(AccumulationEngine, keras.Model):
    """A functional Keras model whose ``fit`` updates once per ``accum_steps`` micro-batches.

    Args:
      accum_steps: ``K``, micro-batches per optimizer update (int >= 1). The effective batch
        size is ``K`` times the micro-batch size that ``fit`` receives (``batch_size=`` or the
        batches of a dataset).
      partial_window: ``"apply"`` (default), ``"drop"`` or ``"carry"``: what happens to an
        epoch's last window when it has fewer than ``K`` micro-batches (see ``ga_tfx.engine``).
      agc_clip_factor: adaptive gradient clipping factor ``λ`` (> 0), applied once per update to
        the accumulated gradient; ``None`` (default) turns AGC off.
      agc_eps: AGC's lower bound on parameter norms (default 1e-3).
      agc_exclude: glob patterns of variable names AGC leaves alone (e.g. the classifier).
      inputs, outputs, name, ...: as ``keras.Model``.
    """

    def __init__(self, *args, accum_steps, partial_window="apply", agc_clip_factor=None,
                 agc_eps=1e-3, agc_exclude=(), **kwargs):
        reject_package_arguments(kwargs, "ga_tfx.GradientAccumulateModel")
        self._configure_accumulation(accum_steps, partial_window, agc_clip_factor, agc_eps,
                                     agc_exclude)
        super().__init__(*args, **kwargs)

    def get_config(self):
        # The functional graph (layers, inputs, outputs) plus the accumulation settings;
        # Functional.get_config would drop the graph because __init__ is not Functional's.
        config = functional.get_network_config(
            self, config={"name": self.name, "trainable": self.trainable})
        config = copy.deepcopy(config)
        config.update(self.accumulation_config())
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        accumulation = {k: config.pop(k) for k in _ACCUMULATION_KEYS if k in config}
        inputs, outputs, layers = functional.reconstruct_from_config(config, custom_objects)
        model = cls(inputs=inputs, outputs=outputs, name=config.get("name"), **accumulation)
        functional.connect_ancillary_layers(model, layers)
        return model


@keras.saving.register_keras_serializable(package="ga_tfx")
class AccumulatingModel(AccumulationEngine, keras.Model):
    """Wraps any Keras model (typically a subclassed one) for gradient accumulation.

    The wrapper's forward pass is the wrapped model's; its variables are the wrapped model's.
    Prefer :func:`wrap_model`, which keeps functional models functional (output names, loss
    dicts keyed by output layer).

    Args:
      model: the ``keras.Model`` to train with accumulation (``.model`` afterwards).
      accum_steps, partial_window, agc_clip_factor, agc_eps, agc_exclude: as
        :class:`GradientAccumulateModel`.
    """

    def __init__(self, model, *, accum_steps, partial_window="apply", agc_clip_factor=None,
                 agc_eps=1e-3, agc_exclude=(), **kwargs):
        reject_package_arguments(kwargs, "ga_tfx.AccumulatingModel")
        _check_is_model(model)
        self._configure_accumulation(accum_steps, partial_window, agc_clip_factor, agc_eps,
                                     agc_exclude)
        kwargs.setdefault("name", f"{model.name}_accumulating")
        super().__init__(**kwargs)
        self.model = model

    def call(self, inputs, training=None):
        return self.model(inputs, training=training)

    def get_config(self):
        config = {"model": keras.saving.serialize_keras_object(self.model), "name": self.name}
        config.update(self.accumulation_config())
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        model = keras.saving.deserialize_keras_object(config.pop("model"),
                                                      custom_objects=custom_objects)
        return cls(model, **config)


def _check_is_model(model):
    if not isinstance(model, keras.Model):
        raise TypeError(
            f"Expected a tf.keras (Keras 2) Model, got {model!r} of type "
            f"{type(model).__module__}.{type(model).__name__}. Build the model with tf.keras "
            "after importing ga_tfx (a Keras 3 `keras.Model` is not supported).")


def _is_functional(model):
    return getattr(model, "_is_graph_network", False) and bool(model.inputs)


def wrap_model(model, accum_steps, partial_window="apply", agc_clip_factor=None,
               agc_eps=1e-3, agc_exclude=(), **unsupported):
    """Returns an accumulation model training ``model``'s own variables (no copy, no rebuild).

    Functional and built Sequential models become a :class:`GradientAccumulateModel` over the
    same graph of layers (inputs, outputs and output names preserved); other models
    (subclassed, unbuilt Sequential) are wrapped in an :class:`AccumulatingModel`.
    Compile the returned model, not the original. ``gradient-accumulator`` arguments
    (``agc=True``, ``mixed_precision=True``, ...) raise ``TypeError`` naming the ga-tfx way
    (see :mod:`ga_tfx.compat`).
    """
    reject_package_arguments(unsupported, "ga_tfx.wrap_model")
    if unsupported:
        raise TypeError(f"wrap_model() got unexpected keyword arguments {sorted(unsupported)}.")
    _check_is_model(model)
    if isinstance(model, AccumulationEngine):
        raise ValueError(
            f"Model {model.name!r} is already a gradient accumulation model "
            f"(accum_steps={model.accum_steps}); wrap the plain model instead.")
    settings = dict(accum_steps=accum_steps, partial_window=partial_window,
                    agc_clip_factor=agc_clip_factor, agc_eps=agc_eps, agc_exclude=agc_exclude)
    if _is_functional(model):
        return GradientAccumulateModel(inputs=model.inputs, outputs=model.outputs,
                                       name=model.name, **settings)
    return AccumulatingModel(model, **settings)


def unwrap_model(model):
    """The plain Keras model behind an accumulation model (shares its variables).

    Export this one for serving: it has no accumulation state and costs what the plain model
    costs. A model that is not an accumulation model is returned as is.
    """
    if isinstance(model, AccumulatingModel):
        return model.model
    if isinstance(model, GradientAccumulateModel):
        return keras.Model(inputs=model.inputs, outputs=model.outputs, name=model.name)
    return model
