"""The noise-scale probe's rules, whatever the Keras: one implementation for both plugins.

The Keras 2 probe (:mod:`ga_tfx.tuning.probe`, keras-tuner 1.4.5) and the Keras 3 one
(:mod:`ga_tfx.keras3.probe`, keras-tuner 1.4.8) are this module's classes, subclassed or mixed
with their Keras' classes: :class:`ProbeTuner` (a ``keras_tuner.Tuner``: the settings it
checks, the one trial, the curve file :data:`PROBE_FILE`, ``B_path`` and the recommendation,
the report), :class:`StopRule` and :class:`CurveRule` (mixed with their Keras' ``Callback``:
the probe's stop at a target loss, one curve row per window from the window core's
:class:`~ga_tfx.window.WindowEnd` events), and :class:`NoiseScaleOracle`. A plugin's module
names its hypermodel, stop and curve classes (``_hypermodel_class``, ``_stop_class``,
``_curve_class``) and adds what is its Keras' own.

It imports ``keras_tuner`` and TensorFlow (its files go through ``tf.io.gfile``), never Keras.
"""

from ga_tfx import _validation
from ga_tfx._tf_internals import tf
from ga_tfx.sizing.batch_choice import Recommendation, path_noise_scale, recommend_accum_steps
from ga_tfx.tuning import _keras_tuner_hooks  # noqa: F401  (checks _build_and_fit_model)

import json
import math
import os
from typing import Any, Dict, List, Optional

import keras_tuner

PROBE_FILE = "noise_scale_probe.json"  # in the probe trial's directory: the measured curve
CURVE_FIELDS = (
    "window",
    "update",
    "samples",
    "loss",
    "noise_scale",
    "noise_trace",
    "noise_grad_sq",
    "window_samples",
    "noise_trace_window",
    "noise_grad_sq_window",
)
_COMPLETED = keras_tuner.engine.trial.TrialStatus.COMPLETED


class NoiseScaleOracle(keras_tuner.Oracle):
    """The oracle of the noise-scale probe: one trial, every hyperparameter at its default
    and ``accum_steps`` at ``probe_accum_steps``."""

    def __init__(
        self, probe_accum_steps: int, objective: Any = None, seed: Any = None, **kw: Any
    ) -> None:
        super().__init__(objective=objective, max_trials=1, seed=seed, **kw)
        self.probe_accum_steps = probe_accum_steps

    def populate_space(self, trial_id: str) -> Dict[str, Any]:
        hps = keras_tuner.HyperParameters()
        for hp in self.hyperparameters.space:  # defaults, conditional ones when active
            hps.merge([hp])
            if hps.is_active(hp):
                hps.values[hp.name] = hp.default
        values = dict(hps.values, accum_steps=self.probe_accum_steps)
        return {"status": keras_tuner.engine.trial.TrialStatus.RUNNING, "values": values}

    def get_state(self) -> Dict[str, Any]:
        return dict(super().get_state(), probe_accum_steps=self.probe_accum_steps)

    def set_state(self, state: Dict[str, Any]) -> None:
        super().set_state(state)
        self.probe_accum_steps = state["probe_accum_steps"]


class ProbeTuner(keras_tuner.Tuner):
    """The noise-scale probe: a ``keras_tuner.Tuner`` (the installed keras-tuner's, 1.4.5 or
    1.4.8) whose subclass in each plugin names its Keras' classes (see the module docstring;
    what it does is the plugins' ``NoiseScaleProbe`` docstrings')."""

    _hypermodel_class: Any  # the plugin's AccumulationHyperModel
    _stop_class: Any  # the plugin's StopAtLoss
    _curve_class: Any  # a callback of the plugin's Keras with CurveRule

    def __init__(
        self,
        hypermodel: Any,
        objective: Any = None,
        probe_accum_steps: Optional[int] = None,
        seed: Optional[int] = None,
        target_loss: Optional[float] = None,
        **kwargs: Any,
    ) -> None:
        # Checked now (StopAtLoss's own rule), before any trial.
        self.target_loss = None if target_loss is None else check_target(target_loss)
        if not isinstance(hypermodel, self._hypermodel_class):
            raise TypeError(f"NoiseScaleProbe needs an AccumulationHyperModel, got {hypermodel!r}.")
        space = hypermodel.search_space
        searched = [
            name
            for name, on in (
                ("micro_batch_size (several values)", len(space.micro_batch_size) > 1),
                ("agc_clip_factor", space.searches_agc()),
                ("learning_rate", space.learning_rate is not None),
            )
            if on
        ]
        if searched:
            raise ValueError(
                f"NoiseScaleProbe recommends accum_steps only; its search space also searches "
                f"{', '.join(searched)}. Give one micro_batch_size, a fixed agc_clip_factor to "
                "the hypermodel and the learning rate in the model."
            )
        probe = (
            max(space.accum_steps)
            if probe_accum_steps is None
            else _validation.check_accum_steps(probe_accum_steps, "probe_accum_steps")
        )
        strategy = kwargs.get("distribution_strategy")
        replicas = strategy.num_replicas_in_sync if strategy is not None else 1
        if probe * replicas < 2:
            raise ValueError(
                f"probe_accum_steps={probe} on {replicas} replica: the noise scale needs at "
                "least 2 micro-batch gradients per window; probe with accum_steps >= 2."
            )
        hypermodel.log_noise_scale = True
        oracle = NoiseScaleOracle(probe, objective=objective, seed=seed)
        super().__init__(oracle=oracle, hypermodel=hypermodel, **kwargs)

    @property
    def probe_accum_steps(self) -> int:
        return self.oracle.probe_accum_steps

    def _build_and_fit_model(self, trial: Any, *args: Any, **kwargs: Any) -> Any:
        curve = self._curve_class()
        stop = None if self.target_loss is None else self._stop_class(self.target_loss)
        kwargs["callbacks"] = list(kwargs.get("callbacks") or []) + [curve]
        kwargs["callbacks"] += [stop] if stop is not None else []
        results = super()._build_and_fit_model(trial, *args, **kwargs)
        record: Dict[str, Any] = {"curve": curve.rows}
        if stop is not None:
            record.update(target_loss=stop.target, reached_target=stop.stopped_epoch is not None)
        path = os.path.join(self.get_trial_dir(trial.trial_id), PROBE_FILE)
        with tf.io.gfile.GFile(path, "w") as f:
            f.write(json.dumps(record))
        return results

    def _probe_trial(self) -> Any:
        trials = list(self.oracle.trials.values())
        done = [t for t in trials if t.status == _COMPLETED]
        if not done:
            why = next((t.message for t in trials if t.message), None)
            raise ValueError(
                "The noise-scale probe has no completed run"
                + (f": {why.strip().splitlines()[-1]}" if why else " (call search first).")
            )
        return done[0]

    def _probe_file(self) -> Dict[str, Any]:
        path = os.path.join(self.get_trial_dir(self._probe_trial().trial_id), PROBE_FILE)
        if not tf.io.gfile.exists(path):
            return {"curve": []}
        with tf.io.gfile.GFile(path) as f:
            return json.loads(f.read())

    def recommendation(self) -> Recommendation:
        """``accum_steps`` from the probe's ``B_path`` (see the class docstring)."""
        return self._recommend(self._probe_file()["curve"])

    def _recommend(self, curve: List[Dict[str, Any]]) -> Recommendation:
        value = path_noise_scale(
            [
                (
                    row.get("window_samples", 0),
                    row.get("noise_trace_window"),
                    row.get("noise_grad_sq_window"),
                )
                for row in curve
            ]
        )
        space = self.hypermodel.search_space
        try:
            return recommend_accum_steps(
                value, space.micro_batch_size[0], space.accum_steps, measure="B_path"
            )
        except ValueError as error:
            raise ValueError(
                f"The noise-scale probe (accum_steps={self.probe_accum_steps}, micro-batch "
                f"{space.micro_batch_size[0]}) measured no usable noise scale: {error}"
            ) from error

    def get_best_hyperparameters(self, num_trials: int = 1) -> List[Any]:
        hp = self._probe_trial().hyperparameters.copy()
        hp.values["accum_steps"] = self.recommendation().accum_steps
        return [hp]

    def probe_report(self) -> Dict[str, Any]:
        """The evidence: the probe's settings, its curve (one row per window, fields
        :data:`CURVE_FIELDS`; None where no estimate existed yet) and the recommendation.
        With a ``target_loss``: it, and ``reached_target`` (True: the probe stopped at the
        first evaluation at or below it; False: it ran to the cap without reaching it)."""
        measured = self._probe_file()
        curve = measured["curve"]
        report = {
            "probe_accum_steps": self.probe_accum_steps,
            "micro_batch_size": self.hypermodel.search_space.micro_batch_size[0],
            "curve": curve,
            "recommendation": self._recommend(curve).to_dict(),
        }
        report.update({k: measured[k] for k in ("target_loss", "reached_target") if k in measured})
        return report

    def ga_extra_record(self, trial: Any) -> Dict[str, Any]:
        """What a trial record (the TFX Tuner's ``trials_file``) adds for the probe:
        ``{"probe": probe_report()}``, or the reason there is no recommendation."""
        if trial.status != _COMPLETED:
            return {}
        try:
            return {"probe": self.probe_report()}
        except ValueError as error:
            return {"probe": {"error": str(error)}}


def check_target(target: Any) -> float:
    """``StopAtLoss``'s target as a float, or ``TypeError``/``ValueError`` naming it."""
    if isinstance(target, bool) or not isinstance(target, (int, float)):
        raise TypeError(f"StopAtLoss: target must be a number, got {target!r}.")
    if not math.isfinite(target):
        raise ValueError(f"StopAtLoss: target must be finite, got {target!r}.")
    return float(target)


class StopRule:
    """``StopAtLoss``'s behaviour, mixed before its Keras' ``Callback`` (the plugins'
    ``StopAtLoss`` docstrings say what it does)."""

    model: Any  # the Callback's

    def __init__(self, target: float, monitor: str = "val_loss") -> None:
        super().__init__()
        self.target, self.monitor = check_target(target), monitor
        self.stopped_epoch: Optional[int] = None

    def on_train_begin(self, logs: Optional[Dict[str, Any]] = None) -> None:
        self.stopped_epoch = None

    def on_epoch_end(self, epoch: int, logs: Optional[Dict[str, Any]] = None) -> None:
        value = (logs or {}).get(self.monitor)
        if value is None:
            raise ValueError(
                f"StopAtLoss: no {self.monitor!r} in the epoch's logs "
                f"(logged: {sorted(logs or {})}); give validation_data for val_loss."
            )
        if float(value) <= self.target:
            self.stopped_epoch = epoch
            self.model.stop_training = True


class CurveRule:
    """Collects one curve row per window (fields :data:`CURVE_FIELDS`) from the window core's
    events (``on_window_end``); mixed before its Keras' ``Callback``."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: List[Dict[str, Any]] = []
        self._samples = 0.0

    def on_window_end(self, event: Any) -> None:
        self._samples += event.samples
        row: Dict[str, Any] = {"window": event.window, "update": event.update}
        row["samples"] = int(self._samples)
        row["window_samples"] = int(event.samples)
        measured = ("loss", "noise_scale", "noise_trace", "noise_grad_sq")
        for name in measured + ("noise_trace_window", "noise_grad_sq_window"):
            value = float(getattr(event, name))
            row[name] = value if math.isfinite(value) else None
        self.rows.append(row)
