"""keras-tuner 1.4.8 searches accum_steps and the AGC clip factor on a Keras 3 model (TF
backend): each trial trains at the effective batch it reports, and the search is reproducible
by its seed."""

import ga_tfx.keras3.tuning as tuning

import keras
import pytest

from tests.keras3_helpers import data

pytestmark = [pytest.mark.keras3, pytest.mark.keras3_backend("tensorflow")]

SPACE = {
    "accum_steps": [1, 2, 4],
    "micro_batch_size": [8],
    "agc_clip_factor": [0.01, 0.1],
    "agc_optional": False,
}


def _build(hp):
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(8, activation="tanh"),
            keras.layers.BatchNormalization(),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    return model


def _search(directory, seed):
    import keras_tuner

    assert keras_tuner.__version__ == "1.4.8"
    tuner = keras_tuner.RandomSearch(
        tuning.AccumulationHyperModel(_build, SPACE),
        objective="loss",
        max_trials=3,
        seed=seed,
        directory=str(directory),
        overwrite=True,
    )
    x, y = data(64)
    tuner.search(x, y, epochs=2, shuffle=False, verbose=0)
    return tuner


def test_a_search_over_accum_steps_and_agc_reports_what_each_trial_trained_at(tmp_path):
    tuner = _search(tmp_path / "a", seed=3)
    trials = list(tuner.oracle.trials.values())
    assert len(trials) == 3
    for trial in trials:
        k = trial.hyperparameters.get("accum_steps")
        assert 0.01 <= trial.hyperparameters.get("agc_clip_factor") <= 0.1
        metrics = trial.metrics
        assert metrics.get_last_value("effective_batch_size") == 8 * k
        # 64 samples per epoch, 2 epochs, one update per window of 8*k samples.
        assert metrics.get_last_value("updates") == 2 * 64 // (8 * k)
    again = _search(tmp_path / "b", seed=3)
    first = [t.hyperparameters.values for t in tuner.oracle.trials.values()]
    second = [t.hyperparameters.values for t in again.oracle.trials.values()]
    assert first == second  # reproducible by the seed
