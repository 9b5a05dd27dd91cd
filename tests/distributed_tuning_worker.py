"""One process of a distributed Keras Tuner search over ``AccumulationHyperModel``.

Run by ``tests/test_distributed_tuning.py`` as ``python -m tests.distributed_tuning_worker
--directory D --out summary.json [--barrier DIR --workers N]`` with Keras Tuner's
``KERASTUNER_TUNER_ID`` (``chief`` or ``tuner<i>``), ``KERASTUNER_ORACLE_IP`` and
``KERASTUNER_ORACLE_PORT``. The chief serves the oracle until the search ends and then writes
what its oracle holds; a worker runs trials and writes the ids of the trials it ran. The test
also imports :func:`make_tuner` and :func:`data` for the single-process search it compares to.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx._keras import keras
from ga_tfx.tuning import AccumulationHyperModel

import argparse
import json
import os
import time
import types

import keras_tuner as kt

from tests.helpers import classification_data

SPACE = {"accum_steps": [1, 2, 4], "micro_batch_size": 8}
MAX_TRIALS = 3
SAMPLES = 64  # 8 micro-batches of 8: whole windows for accum_steps 1, 2, 4


def build_model(hp):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8,))
    h = keras.layers.Dense(8, activation="relu")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(3)(h))
    model.compile(
        keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    return model


def data():
    return classification_data(n=SAMPLES, seed=0)


class RecordingRandomSearch(kt.RandomSearch):
    """RandomSearch that remembers the ids of the trials this process ran."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ran = []

    def on_trial_end(self, trial):
        self.ran.append(trial.trial_id)
        super().on_trial_end(trial)


def make_tuner(directory):
    return RecordingRandomSearch(
        AccumulationHyperModel(build_model, SPACE),
        objective="loss",
        max_trials=MAX_TRIALS,
        seed=1,
        directory=directory,
        project_name="distributed",
        overwrite=True,
    )


def summary(tuner):
    """What the (chief's) oracle holds, JSON-ready."""
    trials = []
    for trial in tuner.oracle.trials.values():
        trials.append(
            {
                "trial_id": trial.trial_id,
                "status": trial.status,
                "values": dict(trial.hyperparameters.values),
                "metrics": {
                    name: trial.metrics.get_last_value(name) for name in trial.metrics.metrics
                },
            }
        )
    best = tuner.oracle.get_best_trials(1)[0]
    return {
        "trials": trials,
        "space": sorted(hp.name for hp in tuner.oracle.hyperparameters.space),
        "best_values": dict(best.hyperparameters.values),
        "best_metrics": {name: best.metrics.get_last_value(name) for name in best.metrics.metrics},
    }


def _barrier(directory, tuner_id, workers, timeout=120):
    """Waits until every worker is ready to search (so that each gets a trial)."""
    open(os.path.join(directory, f"ready-{tuner_id}"), "w").close()
    deadline = time.monotonic() + timeout
    while (
        len([f for f in os.listdir(directory) if f.startswith("ready-")]) < workers
        and time.monotonic() < deadline
    ):
        time.sleep(0.2)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--directory", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--barrier")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    tuner_id = os.environ["KERASTUNER_TUNER_ID"]
    tuner = make_tuner(args.directory)
    x, y = data()
    if tuner_id == "chief":
        # Keras Tuner's chief checks every 30 s whether the search has ended; poll faster here
        # so the test does not idle (nothing else changes).
        from keras_tuner.src.distribute import oracle_chief

        oracle_chief.time = types.SimpleNamespace(sleep=lambda s: time.sleep(min(s, 0.5)))
        tuner.search(x, y, epochs=1, verbose=0)  # serves the oracle until the search ends
        result = summary(tuner)
    else:
        if args.barrier:
            _barrier(args.barrier, tuner_id, args.workers)
        tuner.search(x, y, epochs=1, verbose=0)
        result = {"tuner_id": tuner_id, "ran": tuner.ran}
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
