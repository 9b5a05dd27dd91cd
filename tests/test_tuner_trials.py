"""Tuner trials are seeded from the search's seed and the trial id, and recorded (failed ones
too): a repeated search scores and ranks its trials the same."""

from ga_tfx import keras, tf
from ga_tfx.components.tuner import trials

import json
import os
import random
import types

import numpy as np
import pytest

from tests import taxi
from tests.test_tuner_component import _config, _tune

pytestmark = [pytest.mark.tfx]

# The taxi model without its own set_random_seed (initialisation is then the trial seed's),
# failing for accum_steps=4 (a trial that fails must be recorded, and not stop the search).
UNSEEDED_MODULE = (
    taxi.MODEL_MODULE.replace("keras.utils.set_random_seed(7)", "pass")
    + """

_build = build_model


def build_model(hparams):
    if hparams.get("accum_steps") == 4:
        raise ValueError("this trial fails on purpose")
    return _build(hparams)
"""
)


def _search(tmp_path, name, module):
    trials_file = str(tmp_path / name / "trials.jsonl")
    _tune(
        str(tmp_path / name),
        _config(module, tuner={"max_trials": 3, "seed": 6, "trials_file": trials_file}),
    )
    with open(trials_file) as f:
        return {r["trial_id"]: r for r in map(json.loads, f)}, trials_file


@pytest.mark.slow  # two complete tuner_fn searches
def test_a_repeated_search_scores_its_trials_the_same(tmp_path, model_module):
    assert "set_random_seed(7)" in taxi.MODEL_MODULE  # the replacement above took effect
    module = model_module(UNSEEDED_MODULE)
    first, trials_file = _search(tmp_path, "first", module)
    second, _ = _search(tmp_path, "second", module)
    assert sorted(first) == sorted(second) and len(first) == 3
    statuses = sorted(r["status"] for r in first.values())
    assert statuses == ["completed", "completed", "failed"], statuses
    for trial_id, record in first.items():
        assert record["values"] == second[trial_id]["values"]
        # Same seed, same data order, deterministic ops: the same score, to the last bit.
        assert record["score"] == second[trial_id]["score"], trial_id
        if record["status"] == "completed":
            assert record["metrics"]["effective_batch_size"] == (
                record["values"]["accum_steps"] * 8
            )
    hparams = os.path.join(os.path.dirname(trials_file), "hparams")
    assert sum(len(files) for _, _, files in os.walk(hparams)) >= 3  # one event file a trial


def test_trial_seeds_depend_on_the_search_seed_and_the_trial_id_only():
    assert trials.trial_seed(6, "00") == trials.trial_seed(6, "00")
    assert (
        len({trials.trial_seed(6, "00"), trials.trial_seed(6, "01"), trials.trial_seed(7, "00")})
        == 3
    )


def test_each_trial_is_seeded_before_it_runs_from_the_search_seed_and_its_id():
    # A Tuner base whose trial only draws from Python's, NumPy's and TensorFlow's generators:
    # what a trial's model initialisation and dropout draw from.
    class Draws:
        def __init__(self, *args, **kwargs):
            pass

        def run_trial(self, trial, *args, **kwargs):
            return random.random(), float(np.random.random()), float(tf.random.uniform([]))

    tuner = trials.recording_tuner(Draws)(search_seed=6)

    def run(trial_id):
        values = {"accum_steps": 2, "micro_batch_size": 4}
        trial = types.SimpleNamespace(
            trial_id=trial_id, hyperparameters=types.SimpleNamespace(values=values)
        )
        return tuner.run_trial(trial)

    keras.utils.set_random_seed(123)  # whatever ran before in the process
    first = run("01")
    other = run("00")
    # The reference: each generator seeded with the trial's seed, independently.
    seed = trials.trial_seed(6, "01")
    tf.random.set_seed(seed)
    expected = (
        random.Random(seed).random(),
        float(np.random.RandomState(seed).random_sample()),
        float(tf.random.uniform([])),
    )
    assert first == expected
    assert run("01") == first  # after another trial: the same draws again
    assert all(a != b for a, b in zip(first, other))  # another trial id, other draws
