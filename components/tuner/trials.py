"""Per-trial bookkeeping of the ga-tfx Tuner: seeds, progress, the trial record, HParams.

:func:`recording_tuner` gives a Keras Tuner class (RandomSearch, BayesianOptimization,
Hyperband) three extra duties, none of which changes what a trial computes beyond its seed:

* **seed**: the oracle samples the hyperparameters from the search's seed (:func:`oracle_seed`:
  seed 0 too, which keras-tuner would replace by a random one), and before a trial builds its
  model the global seed is set from the search's seed and the trial id
  (``crc32("<seed>:<trial_id>")``), so a repeated search tries the same hyperparameters,
  initialises each trial's model the same way and ranks its trials the same (the data order is
  fixed by ``shuffle_seed``);
* **progress**: one :mod:`ga_tfx.components.trainer.progress` event per call of the train
  function, by windows, labelled ``Tuner trial i/N`` (the ``ga-tfx`` console draws it);
* **record**: when ``trials_file`` is given, one JSON line per finished trial (failed ones
  included): ``trial_id``, ``status``, ``score``, the trial's hyperparameter ``values`` and its
  last ``metrics`` (``effective_batch_size``, ``updates``, ``noise_scale``: the gradient noise
  scale B_simple at the trial's end, in samples, when it was measured), ``message`` (a failed
  trial's error: the traceback's last ``SomeError: ...`` line; else None), plus ``run`` (an id
  of this search, so that a file shared by several runs can be read per run). With ``trials_file``,
  TensorBoard HParams summaries (hyperparameters, effective batch, updates, score) go to
  ``<trials_file directory>/hparams/<run>/<trial_id>``. The record is the oracle's view of
  the trial (in a distributed search, the chief's: its final status and score);
* **dead workers** (distributed search): a worker sends a heartbeat while it runs a trial and
  the chief ends as failed (and records) a trial whose worker went silent for
  ``stale_trial_seconds``, so the search ends and exports its best trial even when a worker
  is killed (:mod:`ga_tfx.components.tuner.heartbeat`).
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx import keras, tf
from ga_tfx.components.trainer import progress
from ga_tfx.components.tuner import heartbeat
from ga_tfx.components.tuner.options import DEFAULT_STALE_TRIAL_SECONDS
from ga_tfx.tuning import _keras_tuner_hooks  # noqa: F401  (checks keras_tuner.src's names)

import json
import math
import os
import re
import zlib
from typing import Any, Dict, Optional

from keras_tuner.src.distribute import utils as dist_utils

RECORDED_METRICS = ("effective_batch_size", "updates", "samples_seen", "noise_scale")
# The "SomeError: what" line of a traceback (TF errors add lines after it).
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)(: |$)")


def trial_seed(search_seed: Optional[int], trial_id: str) -> int:
    """The global seed of a trial: a function of the search's seed and the trial id only."""
    return zlib.crc32(f"{search_seed}:{trial_id}".encode()) % (2**31)


class _OracleSeed(int):
    """An ``int`` that is true when it is 0: keras-tuner's ``Oracle`` keeps ``seed or
    random.randint(1, 10000)``, so a search seeded 0 would sample different hyperparameters on
    every run (keras-tuner 1.4.5, ``keras_tuner/src/engine/oracle.py``)."""

    def __bool__(self) -> bool:
        return True


def oracle_seed(search_seed: Optional[int]) -> Optional[int]:
    """The seed to give a keras-tuner oracle for the search seed ``search_seed``: the same
    number, kept even when it is 0 (None: keras-tuner picks a random one)."""
    return None if search_seed is None else _OracleSeed(search_seed)


class _WindowProgress(keras.callbacks.Callback):
    """Reports a trial's progress after each call of the train function (one window, or
    several where the model's ``steps_per_execution`` says so), by windows: the window core's
    events (``on_window_end``) count them and give each window's mean loss."""

    # Its batch hook acts on the window events of a call, however many: fit paces with it
    # (ga_tfx.engine.pacing).
    follows_pacing = True

    def __init__(self, label: str, total_windows: int):
        super().__init__()
        self._label, self._total = label, total_windows
        self._last = None

    def on_window_end(self, event):
        self._last = event

    def on_train_batch_end(self, batch, logs=None):
        if self._last is None:
            return
        progress.report(
            label=self._label, window=self._last.window, total=self._total, loss=self._last.loss
        )


class _Recording:
    """The duties of :func:`recording_tuner` (module docstring), mixed in before a Keras
    Tuner class: every method hands on to the Tuner's own (``super()``)."""

    def __init__(
        self,
        *args,
        search_seed=None,
        samples_per_trial=None,
        trials_file=None,
        run_id="",
        stale_trial_seconds=DEFAULT_STALE_TRIAL_SECONDS,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self._ga_stale_seconds = stale_trial_seconds
        self._ga_heartbeat = None
        self._ga_seed = search_seed
        self._ga_samples = samples_per_trial
        self._ga_trials_file = trials_file
        self._ga_run = run_id
        self._ga_count = 0

    def search(self, *fit_args, **fit_kwargs):
        if not dist_utils.is_chief_oracle():
            return super().search(*fit_args, **fit_kwargs)
        # The chief serves the oracle, ending the trials of dead workers (heartbeat).
        if "verbose" in fit_kwargs:
            self.oracle.verbose = fit_kwargs["verbose"]
        heartbeat.serve_oracle(self.oracle, self._ga_stale_seconds, on_failed=self._ga_record)

    def on_trial_begin(self, trial):
        super().on_trial_begin(trial)
        if dist_utils.has_chief_oracle():  # a worker (the chief runs no trial)
            self._ga_heartbeat = heartbeat.Heartbeat(
                self.oracle, trial.trial_id, heartbeat.heartbeat_seconds(self._ga_stale_seconds)
            )

    def run_trial(self, trial, *args, **kwargs):
        keras.utils.set_random_seed(trial_seed(self._ga_seed, trial.trial_id))
        self._ga_count += 1
        values = trial.hyperparameters.values
        effective = values.get("accum_steps", 1) * self._ga_micro_batch(values)
        if self._ga_samples:
            label = f"Tuner trial {self._ga_count}/{self.oracle.max_trials or '?'}"
            windows = -(-self._ga_samples // effective) * int(kwargs.get("epochs", 1))
            kwargs["callbacks"] = list(kwargs.get("callbacks") or []) + [
                _WindowProgress(label, windows)
            ]
        return super().run_trial(trial, *args, **kwargs)

    def _ga_micro_batch(self, values):
        """The trial's micro-batch: its hyperparameter, or the one size searched."""
        if "micro_batch_size" in values:
            return values["micro_batch_size"]
        return self.hypermodel.search_space.micro_batch_size[0]

    def on_trial_end(self, trial):
        if self._ga_heartbeat is not None:
            self._ga_heartbeat.stop()
            self._ga_heartbeat = None
        super().on_trial_end(trial)
        if self._ga_trials_file:  # the oracle's view: distributed, the chief's status/score
            view = self.oracle.get_trial(trial.trial_id)
            view.message = view.message or trial.message  # gRPC does not carry it
            self._ga_record(view)

    def _ga_record(self, trial):
        """Appends ``trial`` to the trials file and writes its HParams (if recording)."""
        if self._ga_trials_file:
            record = trial_record(trial, self._ga_run)
            extra = getattr(self, "ga_extra_record", None)  # e.g. the noise-scale probe's
            if extra is not None:
                record.update(extra(trial))
            record["values"].setdefault(
                "micro_batch_size", self._ga_micro_batch(trial.hyperparameters.values)
            )
            # Its folder exists where TFX lays outputs under <root>/<component>/ (local
            # runs), not under a Kubeflow job's <root>/<project>/<job id>/<task>_<uuid>/.
            tf.io.gfile.makedirs(os.path.dirname(self._ga_trials_file))
            with tf.io.gfile.GFile(self._ga_trials_file, "a") as f:
                f.write(json.dumps(record) + "\n")
            _write_hparams(
                os.path.join(
                    os.path.dirname(self._ga_trials_file),
                    "hparams",
                    self._ga_run or "run",
                    trial.trial_id,
                ),
                record,
            )


def recording_tuner(base: type) -> type:
    """``base`` (a ``keras_tuner`` Tuner class) with the duties in the module docstring: the
    class ``Recording<base name>``, a subclass of ``base``.

    Extra constructor arguments: ``search_seed`` (the seed trials derive theirs from),
    ``samples_per_trial`` (samples of one trial's epoch, for the progress total),
    ``trials_file`` (where finished trials are appended, or None), ``run_id`` and
    ``stale_trial_seconds`` (distributed search: a trial whose worker is silent this long is
    ended as failed).
    """
    return type(f"Recording{base.__name__}", (_Recording, base), {})


def trial_record(trial: Any, run_id: str = "") -> Dict[str, Any]:
    """A finished trial as a JSON-able dict (see the module docstring)."""
    metrics = {}
    for name in RECORDED_METRICS:
        try:
            value = trial.metrics.get_last_value(name)
        except (KeyError, ValueError, AttributeError):
            value = None
        if value is not None and math.isfinite(float(value)):
            metrics[name] = float(value)
    status = getattr(trial.status, "value", trial.status)
    lines = [line.strip() for line in (trial.message or "").splitlines() if line.strip()]
    lines = [line for line in lines if _EXCEPTION_LINE.match(line)] or lines
    return {
        "run": run_id,
        "trial_id": trial.trial_id,
        "status": str(status).lower(),
        "score": None if trial.score is None else float(trial.score),
        "values": dict(trial.hyperparameters.values),
        "metrics": metrics,
        "message": lines[-1] if lines else None,
    }


def _write_hparams(log_dir: str, record: Dict[str, Any]) -> None:
    """The trial in TensorBoard's HParams plugin: its values, effective batch, updates, score."""
    from tensorboard.plugins.hparams import api as hparams_api

    hparams = {k: v for k, v in record["values"].items() if isinstance(v, (bool, int, float, str))}
    for name in ("effective_batch_size", "updates"):
        if name in record["metrics"]:
            hparams[name] = record["metrics"][name]
    writer = tf.summary.create_file_writer(log_dir)
    with writer.as_default():
        hparams_api.hparams(hparams, trial_id=record["trial_id"])
        if record["score"] is not None:
            tf.summary.scalar("score", record["score"], step=0)
    writer.close()
