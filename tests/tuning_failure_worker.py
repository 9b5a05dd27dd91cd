"""One process of a distributed ga-tfx Tuner search in which trials fail.

Run by ``tests/test_tuner_failures.py`` as ``python -m tests.tuning_failure_worker --directory D
--out summary.json --trials-file T --marker-dir M [--victim]`` with Keras Tuner's
``KERASTUNER_TUNER_ID`` (``chief`` or ``tuner<i>``), ``KERASTUNER_ORACLE_IP`` and
``KERASTUNER_ORACLE_PORT``. Every process runs the ga-tfx recording tuner
(``ga_tfx.components.tuner.trials.recording_tuner(RandomSearch)``) over
:class:`AccumulationHyperModel`, 10 trials (seed 1). Trial values ``accum_steps=4`` with an AGC
factor below 0.05 (trial 07 of seed 1) raise ``tf.errors.ResourceExhaustedError`` when the
model is built (an OOM-like failure); ``accum_steps=2`` with a factor above 0.06 (trial 02)
takes 2.5 x ``STALE_TRIAL_SECONDS`` to build (a slow trial of a live worker). A ``--victim``
worker writes ``<marker-dir>/<id>-in-trial`` when it builds its first trial's model and then
waits there, for the test to SIGKILL it. The chief writes what its oracle holds and the best
trial; a worker the ids of the trials it ran.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx import keras, tf
from ga_tfx.components.tuner import trials
from ga_tfx.tuning import AccumulationHyperModel

import argparse
import json
import os
import time

import keras_tuner as kt

from tests.helpers import classification_data

SPACE = {
    "accum_steps": [1, 2, 4],
    "micro_batch_size": 8,
    "agc_clip_factor": [0.01, 0.1],
    "agc_optional": False,
}
MAX_TRIALS = 10
SEED = 1
SAMPLES = 32
STALE_TRIAL_SECONDS = 3.0
_state = {"searching": False, "victim_marker": None}


def oom(values) -> bool:
    """The hyperparameter values whose model "runs out of memory"."""
    return values.get("accum_steps") == 4 and values.get("agc_clip_factor", 1.0) < 0.05


def slow(values) -> bool:
    """The values whose trial takes longer than ``STALE_TRIAL_SECONDS`` (its worker lives)."""
    return values.get("accum_steps") == 2 and values.get("agc_clip_factor", 0.0) > 0.06


def build_model(hp):
    if _state["searching"] and _state["victim_marker"]:
        open(_state["victim_marker"], "w").close()
        time.sleep(600)  # killed here by the test
    if _state["searching"] and slow(hp.values):
        time.sleep(2.5 * STALE_TRIAL_SECONDS)
    if _state["searching"] and oom(hp.values):
        raise tf.errors.ResourceExhaustedError(
            None, None, "OOM when allocating tensor (injected by the test)"
        )
    inputs = keras.Input((8,))
    h = keras.layers.Dense(8, activation="relu")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(3)(h))
    model.compile(
        keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    return model


def data():
    return classification_data(n=SAMPLES, seed=0)


def make_tuner(directory, trials_file):
    tuner_class = trials.recording_tuner(kt.RandomSearch)

    class Remembering(tuner_class):
        ran = []

        def on_trial_begin(self, trial):
            self.ran.append(trial.trial_id)
            super().on_trial_begin(trial)

    return Remembering(
        AccumulationHyperModel(build_model, SPACE),
        objective="loss",
        max_trials=MAX_TRIALS,
        seed=SEED,
        directory=directory,
        project_name="failures",
        overwrite=True,
        search_seed=SEED,
        trials_file=trials_file,
        run_id="distributed",
        stale_trial_seconds=STALE_TRIAL_SECONDS,
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--directory", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--trials-file", required=True)
    parser.add_argument("--marker-dir", required=True)
    parser.add_argument("--victim", action="store_true")
    args = parser.parse_args()
    tuner_id = os.environ["KERASTUNER_TUNER_ID"]
    tuner = make_tuner(args.directory, args.trials_file)
    x, y = data()
    if args.victim:
        _state["victim_marker"] = os.path.join(args.marker_dir, f"{tuner_id}-in-trial")
    else:  # the others wait until the victim runs its trial (so that it gets one)
        victim = os.path.join(args.marker_dir, "tuner1-in-trial")
        deadline = time.monotonic() + 180
        while tuner_id != "chief" and not os.path.exists(victim) and time.monotonic() < deadline:
            time.sleep(0.2)
    open(os.path.join(args.marker_dir, f"{tuner_id}-searching"), "w").close()
    _state["searching"] = True
    tuner.search(x, y, epochs=1, verbose=0)  # the chief serves the oracle until the end
    if tuner_id == "chief":
        best = tuner.oracle.get_best_trials(1)[0]
        result = {
            "trials": {
                t.trial_id: {
                    "status": t.status,
                    "message": t.message,
                    "values": dict(t.hyperparameters.values),
                    "score": t.score,
                }
                for t in tuner.oracle.trials.values()
            },
            "best": {
                "trial_id": best.trial_id,
                "score": best.score,
                "values": dict(tuner.get_best_hyperparameters(1)[0].values),
            },
        }
    else:
        result = {"tuner_id": tuner_id, "ran": tuner.ran}
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
