"""The Keras Tuner hypermodel: per trial, an accumulation model and its fit.

``AccumulationHyperModel`` wraps a user's Keras Tuner build function. Per trial it declares the
accumulation hyperparameters, builds the user's (compiled) model, replaces its BatchNormalization
layers, wraps it for gradient accumulation, re-compiles it with the same loss, metrics and
optimizer (learning rate optionally searched and/or scaled with the effective batch size), and
fits it on micro-batches.

Hyperparameters it adds (all visible in ``tuner.search_space_summary()`` before the search):

========================  ==============================================================
``accum_steps``           ``Choice`` of integers >= 1
``agc``                   ``Boolean``, only when AGC may be off (``agc_optional=True``)
``agc_clip_factor``       ``Float`` with log sampling (conditional on ``agc`` when optional)
``micro_batch_size``      ``Choice``, only when several micro-batch sizes are given
``learning_rate``         ``Float`` with log sampling, only when a range is given
========================  ==============================================================

Budgets are counted in samples: ``fit`` runs the given epochs (or ``steps_per_epoch``
micro-batches, or ``samples_per_epoch`` samples) whatever ``accum_steps`` is, so a trial with
``accum_steps=4`` sees as many samples as one with ``accum_steps=1`` (and makes 4 times fewer
updates). Every epoch's logs, and so the trial's metrics, carry ``effective_batch_size``,
``samples_seen`` and ``updates`` (optimizer updates so far). Hyperband's epoch budget keeps its
meaning.

Learning-rate scaling with the effective batch ``B`` (relative to ``base_batch_size``):
``"none"`` (default) keeps the rate, ``"linear"`` multiplies it by ``B / base_batch_size``
(Goyal et al. 2017), ``"sqrt"`` by ``sqrt(B / base_batch_size)`` (Krizhevsky 2014, Adam-type
optimizers).

A trial whose loss becomes NaN or that runs out of memory fails (``FailedTrialError``, the
error reported) without stopping the search.

``log_noise_scale=True`` makes every trial log the gradient noise scale (``noise_scale``,
``B_simple`` in samples, :mod:`ga_tfx.window`) in its metrics, beside its score (NaN for a
trial with ``accum_steps=1`` on one device: one small gradient per window measures nothing).

Public as :class:`ga_tfx.tuning.AccumulationHyperModel`. This module imports ``keras_tuner``;
``import ga_tfx`` does not import it.
"""

from ga_tfx import _validation
from ga_tfx._keras import keras, tf
from ga_tfx._schema import spec_of
from ga_tfx.batchnorm.conversion import replace_batchnorm_layers
from ga_tfx.config import AccumulationConfig
from ga_tfx.models import wrap_model
from ga_tfx.tuning import search_space as search_space_lib
from ga_tfx.tuning.search_space import AccumulationSearchSpace, declare
from ga_tfx.window.replay import OutOfMemoryRecovered, out_of_memory, replay

import math
from typing import Any, Callable, Dict, List, Optional, Union, cast

import keras_tuner


class AccumulationHyperModel(keras_tuner.HyperModel):
    """A ``keras_tuner.HyperModel`` searching accumulation settings around a build function.

    Args:
      build_model: ``build_model(hp) -> keras.Model``, compiled (loss, metrics, optimizer), as
        for any Keras Tuner search. It may declare its own hyperparameters.
      search_space: an :class:`AccumulationSearchSpace` or a dict of its arguments.
      replace_batchnorm: replace BatchNormalization layers by AccumBatchNormalization (default).
      partial_window: the accumulation models' partial-window policy.
      agc_clip_factor: a fixed AGC clip factor for every trial, only when ``search_space``
        does not search one (default ``None``: no AGC).
      log_noise_scale: log the gradient noise scale ``noise_scale`` (and ``noise_trace``,
        ``noise_grad_sq``) in every trial's metrics (default off).

    ``fit`` takes NumPy inputs (batched here at the trial's micro-batch size), an *unbatched*
    ``tf.data.Dataset`` (batched here), or a callable ``micro_batch_size -> dataset`` returning
    micro-batches of that size (e.g. a TFX ``data_accessor`` dataset), plus the usual ``fit``
    arguments and ``samples_per_epoch=`` (an epoch of that many samples:
    ``samples_per_epoch / micro_batch_size`` micro-batches, which must be an integer).
    """

    def __init__(
        self,
        build_model: Callable[[Any], Any],
        search_space: Union[AccumulationSearchSpace, Dict[str, Any], None] = None,
        replace_batchnorm: bool = True,
        partial_window: str = "apply",
        name: Optional[str] = None,
        tunable: bool = True,
        agc_clip_factor: Optional[float] = None,
        log_noise_scale: bool = False,
    ) -> None:
        super().__init__(name=name, tunable=tunable)
        self.search_space = search_space_lib.hypermodel_arguments(build_model, search_space)
        self.build_model = build_model
        self.replace_batchnorm = replace_batchnorm
        self.partial_window = _validation.check_partial_window(partial_window)
        if agc_clip_factor is not None:
            agc_clip_factor = _validation.check_positive_float(agc_clip_factor, "agc_clip_factor")
            if self.search_space.searches_agc():
                raise ValueError(
                    "agc_clip_factor (a fixed factor) and a search space that "
                    "searches agc_clip_factor exclude each other."
                )
        self.agc_clip_factor = agc_clip_factor
        self.log_noise_scale = spec_of(AccumulationConfig, "log_noise_scale").check(
            "log_noise_scale", log_noise_scale
        )

    def build(self, hp: Any) -> Any:
        values = declare(self.search_space, hp)
        if not self.search_space.searches_agc():
            values["agc_clip_factor"] = self.agc_clip_factor
        model = self.build_model(hp)
        if not isinstance(model, keras.Model) or getattr(model, "optimizer", None) is None:
            raise TypeError(
                f"build_model(hp) must return a compiled tf.keras Model, got {model!r}."
            )
        compile_config = model.get_compile_config()
        learning_rate = float(keras.backend.get_value(model.optimizer.learning_rate))
        if self.replace_batchnorm:
            model = replace_batchnorm_layers(model)  # windows of the wrapped model
        wrapped = wrap_model(
            model,
            accum_steps=values["accum_steps"],
            partial_window=self.partial_window,
            agc_clip_factor=values["agc_clip_factor"],
            log_noise_scale=self.log_noise_scale,
        )
        wrapped.use_engine_always()  # every trial counts its samples the same way
        wrapped.compile_from_config(compile_config)
        if values["learning_rate"] is not None:
            learning_rate = values["learning_rate"]
        effective = values["accum_steps"] * values["micro_batch_size"]
        wrapped.optimizer.learning_rate = self.search_space.scaled_learning_rate(
            learning_rate, effective
        )
        wrapped.ga_trial_values = dict(values, effective_batch_size=effective)
        return wrapped

    def fit(
        self,
        hp: Any,
        model: Any,
        x: Any = None,
        y: Any = None,
        callbacks: Optional[List[Any]] = None,
        samples_per_epoch: Optional[int] = None,
        **kwargs: Any,
    ) -> Any:
        values = model.ga_trial_values
        micro = values["micro_batch_size"]
        if samples_per_epoch is not None:
            if kwargs.get("steps_per_epoch") is not None:
                raise ValueError("Give steps_per_epoch or samples_per_epoch, not both.")
            samples_per_epoch = _validation.SAMPLES.check("samples_per_epoch", samples_per_epoch)
            if samples_per_epoch % micro:
                raise ValueError(
                    f"samples_per_epoch={samples_per_epoch} is not a whole number "
                    f"of micro-batches of {micro}."
                )
            kwargs["steps_per_epoch"] = samples_per_epoch // micro
        if isinstance(x, tf.data.Dataset):
            x = x.batch(micro)
        elif callable(x):
            x = x(micro)  # already micro-batches
        else:
            kwargs["batch_size"] = micro
        callbacks = [_TrialRecorder(values["effective_batch_size"])] + list(callbacks or [])
        try:
            # An out-of-memory error is first retried by the engine at half the micro-batch
            # and twice K (the same effective batch; ga_tfx.engine.recovery), down to one
            # sample; only then does the trial fail.
            return replay(lambda: model.fit(x, y, callbacks=callbacks, **kwargs), _start_over)
        except (tf.errors.ResourceExhaustedError, RuntimeError) as error:
            oom = out_of_memory(error)
            if oom is None:
                raise
            core = getattr(model, "window_core", None)
            split = core.micro_batch_split if core is not None else 1
            smallest = -(-micro // split)  # the last slice size tried, ceil(micro / split)
            retried = (
                f"; retried at micro-batch {smallest} and K "
                f"{values['effective_batch_size'] // smallest} (the same effective batch) "
                "before failing"
                if split > 1
                else ""
            )
            raise keras_tuner.errors.FailedTrialError(
                f"Trial ran out of memory at effective batch size "
                f"{values['effective_batch_size']} (micro-batch {micro}){retried}: {oom.message}"
            ) from error


def _start_over(error: BaseException) -> None:
    """A trial's fit that recovered from an out-of-memory error but cannot read the window's
    data again: in the trial's first window nothing was trained, so the trial starts over at
    the smaller micro-batch (the engine's split stays); later, the error stands."""
    recovered = cast(OutOfMemoryRecovered, error)  # (the one error replayed here)
    if (recovered.epoch, recovered.position) != (0, 0):
        raise error


class _TrialRecorder(keras.callbacks.Callback):
    """Adds ``effective_batch_size`` and ``samples_seen`` to each epoch's logs (so to the
    trial's metrics) and fails the trial when the loss stops being finite."""

    # Its batch hook reads the loss after a call, however many windows it ran: fit paces
    # with it (ga_tfx.engine.pacing).
    follows_pacing = True

    def __init__(self, effective_batch_size: int) -> None:
        super().__init__()
        self.effective_batch_size = effective_batch_size

    def on_train_batch_end(self, batch: int, logs: Optional[Dict[str, Any]] = None) -> None:
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            raise keras_tuner.errors.FailedTrialError(
                f"Loss became {float(loss)} at micro-batch {batch} (effective batch size "
                f"{self.effective_batch_size})."
            )

    def on_epoch_end(self, epoch: int, logs: Optional[Dict[str, Any]] = None) -> None:
        if logs is not None:
            logs["effective_batch_size"] = float(self.effective_batch_size)
            logs["samples_seen"] = float(self.model.samples_seen)
            logs["updates"] = float(keras.backend.get_value(self.model.optimizer.iterations))
            core = getattr(self.model, "window_core", None)
            if core is not None and core.micro_batch_split > 1:  # out-of-memory recoveries
                logs["micro_batch_split"] = float(core.micro_batch_split)
