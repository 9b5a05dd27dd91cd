"""The Keras Tuner plugin for Keras 3 (keras-tuner 1.4.8, TensorFlow backend): per trial an
accumulation model of :func:`ga_tfx.keras3.wrap_model`, fitted on micro-batches.

The Keras 2 plugin (:mod:`ga_tfx.tuning`) stays on keras-tuner 1.4.5 for TFX (1.4.6-1.4.8
reject tf-keras models, keras-tuner issue 1039); this one takes the Keras 3 models 1.4.8 expects.
The hyperparameters are declared once for both (:func:`ga_tfx.tuning.search_space.declare`):
``accum_steps``, ``micro_batch_size``, the AGC clip factor and the learning rate, from an
:class:`~ga_tfx.tuning.AccumulationSearchSpace`. Every trial's metrics carry
``effective_batch_size`` (``accum_steps × micro_batch_size``, the batch it trains at) and
``updates`` (optimizer updates so far), so what a trial says it trained at can be checked.
The noise-scale probe, ``NoiseScaleProbe`` and ``StopAtLoss``, is :mod:`ga_tfx.keras3.probe`
(loaded from here on first use).
"""

from ga_tfx._schema import spec_of
from ga_tfx.config import AccumulationConfig
from ga_tfx.keras3 import wrap_model
from ga_tfx.keras3.batchnorm import replace_batchnorm_layers
from ga_tfx.tuning import search_space as search_space_lib
from ga_tfx.tuning.search_space import AccumulationSearchSpace, declare

import math
from typing import Any, Callable, Dict, List, Optional, Union

import keras
import keras_tuner


class AccumulationHyperModel(keras_tuner.HyperModel):
    """A ``keras_tuner.HyperModel`` searching accumulation settings around a build function.

    Args:
      build_model: ``build_model(hp) -> keras.Model``, compiled (loss, metrics, optimizer).
      search_space: an :class:`~ga_tfx.tuning.AccumulationSearchSpace` or a dict of its
        arguments (default: its defaults).
      replace_batchnorm: replace BatchNormalization by AccumBatchNormalization (default True).
      log_noise_scale: measure the gradient noise scale in every trial's windows (the window
        core's records, which ``fit``'s callbacks with ``on_window_end`` get; default off;
        TensorFlow backend).

    Example::

        tuner = keras_tuner.RandomSearch(
            AccumulationHyperModel(build_model, {"accum_steps": [1, 2, 4]}),
            objective="loss", max_trials=3, seed=1)
        tuner.search(x, y, epochs=2)
    """

    def __init__(
        self,
        build_model: Callable[[Any], Any],
        search_space: Union[AccumulationSearchSpace, Dict[str, Any], None] = None,
        replace_batchnorm: bool = True,
        name: Optional[str] = None,
        tunable: bool = True,
        log_noise_scale: bool = False,
    ) -> None:
        super().__init__(name=name, tunable=tunable)
        self.search_space = search_space_lib.hypermodel_arguments(build_model, search_space)
        self.build_model = build_model
        self.replace_batchnorm = replace_batchnorm
        self.log_noise_scale = spec_of(AccumulationConfig, "log_noise_scale").check(
            "log_noise_scale", log_noise_scale
        )

    def build(self, hp: Any) -> Any:
        values = declare(self.search_space, hp)
        model = self.build_model(hp)
        if not isinstance(model, keras.Model) or getattr(model, "optimizer", None) is None:
            raise TypeError(f"build_model(hp) must return a compiled Keras 3 Model, got {model!r}")
        compile_config = model.get_compile_config()
        learning_rate = float(keras.ops.convert_to_numpy(model.optimizer.learning_rate))
        if self.replace_batchnorm:
            model = replace_batchnorm_layers(model)
        wrapped = wrap_model(
            model,
            accum_steps=values["accum_steps"],
            agc_clip_factor=values["agc_clip_factor"],
            log_noise_scale=self.log_noise_scale,
        )
        wrapped.compile_from_config(compile_config)
        if values["learning_rate"] is not None:
            learning_rate = values["learning_rate"]
        effective = values["accum_steps"] * values["micro_batch_size"]
        wrapped.optimizer.learning_rate = self.search_space.scaled_learning_rate(
            learning_rate, effective
        )
        object.__setattr__(wrapped, "ga_trial_values", dict(values, effective_batch_size=effective))
        return wrapped

    def fit(
        self, hp: Any, model: Any, *args: Any, callbacks: Optional[List[Any]] = None, **kwargs: Any
    ) -> Any:
        values = model.ga_trial_values
        kwargs["batch_size"] = values["micro_batch_size"]
        callbacks = [_TrialRecorder(values["effective_batch_size"])] + list(callbacks or [])
        return model.fit(*args, callbacks=callbacks, **kwargs)


class _TrialRecorder(keras.callbacks.Callback):
    """Adds ``effective_batch_size`` and ``updates`` to each epoch's logs (the trial's
    metrics); fails the trial when the loss stops being finite."""

    def __init__(self, effective_batch_size: int) -> None:
        super().__init__()
        self.effective_batch_size = effective_batch_size

    def on_epoch_end(self, epoch: int, logs: Optional[Dict[str, Any]] = None) -> None:
        if logs is None:
            return
        loss = logs.get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            raise keras_tuner.errors.FailedTrialError(
                f"loss became {float(loss)} (effective batch size {self.effective_batch_size})"
            )
        logs["effective_batch_size"] = float(self.effective_batch_size)
        logs["updates"] = float(keras.ops.convert_to_numpy(self.model.optimizer.iterations))


def __getattr__(name: str) -> Any:
    if name in ("NoiseScaleProbe", "StopAtLoss"):
        from ga_tfx.keras3 import probe

        return getattr(probe, name)
    raise AttributeError(f"module 'ga_tfx.keras3.tuning' has no attribute {name!r}")
