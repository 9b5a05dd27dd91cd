"""Keras Tuner plugin: accumulation hyperparameters, equal-samples budgets, failures, errors."""

from ga_tfx._keras import keras, tf
from ga_tfx.tuning import AccumulationHyperModel, AccumulationSearchSpace

import math

import keras_tuner as kt
import pytest

from tests.helpers import classification_data

N = 48  # samples: 6 micro-batches of 8


def build_model(hp, units=None):
    """A Dense-BN model; ``units`` searched by the user's own hyperparameter unless given."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8,))
    units = hp.Int("units", 4, 8, step=4) if units is None else units
    h = keras.layers.Dense(units, activation="relu")(inputs)
    h = keras.layers.BatchNormalization()(h)
    model = keras.Model(inputs, keras.layers.Dense(3)(h))
    model.compile(
        keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    return model


def build_fixed_model(hp):
    """``build_model`` without a hyperparameter of its own: a space of 3 ``accum_steps`` values
    is 3 trials (each trial builds, traces and trains a model: the searches' cost)."""
    return build_model(hp, units=8)


def _tuner(tmp_path, hypermodel, tuner_class=kt.RandomSearch, **kwargs):
    if tuner_class is not kt.Hyperband:
        kwargs.setdefault("max_trials", 3)
    return tuner_class(
        hypermodel,
        objective="loss",
        directory=str(tmp_path),
        project_name="search",
        overwrite=True,
        seed=1,
        **kwargs,
    )


def test_search_space_is_declared_before_the_search(tmp_path):
    space = AccumulationSearchSpace(
        accum_steps=[1, 2, 4],
        agc_clip_factor=(0.01, 0.1),
        micro_batch_size=[8, 16],
        learning_rate=(1e-3, 1e-1),
    )
    tuner = _tuner(tmp_path, AccumulationHyperModel(build_model, space))
    names = {hp.name for hp in tuner.oracle.hyperparameters.space}
    assert {
        "accum_steps",
        "agc",
        "agc_clip_factor",
        "micro_batch_size",
        "learning_rate",
        "units",
    } <= names
    accum = tuner.oracle.hyperparameters.space[0]
    assert accum.name == "accum_steps" and list(accum.values) == [1, 2, 4]


def test_search_over_accum_steps_records_effective_batch_and_equal_samples(tmp_path):
    x, y = classification_data(n=N)
    space = {"accum_steps": [1, 2, 4], "micro_batch_size": 8}
    tuner = _tuner(tmp_path, AccumulationHyperModel(build_fixed_model, space), max_trials=3)
    tuner.search(x, y, epochs=2, verbose=0)
    trials = [t for t in tuner.oracle.trials.values() if t.status == "COMPLETED"]
    seen_accum = {t.hyperparameters.get("accum_steps") for t in trials}
    assert seen_accum == {1, 2, 4}
    for trial in trials:
        k = trial.hyperparameters.get("accum_steps")
        assert trial.metrics.get_last_value("effective_batch_size") == 8 * k
        # Equal budget in samples: every trial saw the 48 samples twice, whatever K.
        assert trial.metrics.get_last_value("samples_seen") == 2 * N
    best = tuner.get_best_hyperparameters()[0]
    assert best.get("accum_steps") in (1, 2, 4)
    best_model = tuner.hypermodel.build(best)
    assert best_model.accum_steps == best.get("accum_steps")


def test_trial_models_replace_batchnorm_and_scale_learning_rate():
    space = AccumulationSearchSpace(accum_steps=[4], micro_batch_size=8, lr_scaling="linear")
    hp = kt.HyperParameters()
    model = AccumulationHyperModel(build_model, space).build(hp)
    assert model.accum_steps == 4
    assert any(type(layer).__name__ == "AccumBatchNormalization" for layer in model.layers)
    assert float(model.optimizer.learning_rate.numpy()) == pytest.approx(1e-2 * 4)
    sqrt_space = AccumulationSearchSpace(accum_steps=[4], micro_batch_size=8, lr_scaling="sqrt")
    model = AccumulationHyperModel(build_model, sqrt_space).build(kt.HyperParameters())
    assert float(model.optimizer.learning_rate.numpy()) == pytest.approx(1e-2 * math.sqrt(4))


class _OutOfMemoryAt(keras.callbacks.Callback):
    """Raises the error TensorFlow raises on an allocation failure, in the trials whose
    accumulation model has ``accum_steps`` = ``k`` (as a real OOM surfaces: from training)."""

    def __init__(self, k):
        super().__init__()
        self.k = k

    def on_train_batch_begin(self, batch, logs=None):
        if self.model.accum_steps == self.k:
            raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")


def test_a_nan_trial_and_an_out_of_memory_trial_fail_alone_and_the_search_goes_on(tmp_path):
    # One search of 3 trials: K=2's loss is NaN from the first micro-batch, K=4 runs out of
    # memory, K=1 trains.
    def build_sometimes_nan(hp):
        model = build_fixed_model(hp)
        if hp.get("accum_steps") == 2:
            inputs = model.inputs[0]
            poisoned = keras.layers.Lambda(lambda t: t * float("nan"))(model(inputs))
            nan_model = keras.Model(inputs, poisoned)
            nan_model.compile(
                keras.optimizers.Adam(1e-2),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            )
            return nan_model
        return model

    x, y = classification_data(n=N)
    space = {"accum_steps": [1, 2, 4], "micro_batch_size": 8}
    tuner = _tuner(tmp_path, AccumulationHyperModel(build_sometimes_nan, space), max_trials=3)
    tuner.search(x, y, epochs=1, verbose=0, callbacks=[_OutOfMemoryAt(4)])
    trials = {t.hyperparameters.get("accum_steps"): t for t in tuner.oracle.trials.values()}
    assert sorted(trials) == [1, 2, 4]
    assert trials[2].status == "FAILED"
    assert "Loss became nan" in trials[2].message
    assert trials[4].status == "FAILED"
    assert "ran out of memory at effective batch size 32 (micro-batch 8)" in trials[4].message
    # The engine retried it at smaller micro-batches first (the error here comes from a
    # callback at every batch, so it never fits).
    assert "retried at micro-batch 1 and K 32 (the same effective batch)" in trials[4].message
    assert trials[1].status == "COMPLETED"
    assert tuner.get_best_hyperparameters()[0].get("accum_steps") == 1


class _OutOfMemoryUnsplit(keras.callbacks.Callback):
    """Raises TensorFlow's out-of-memory error at the first step of the K=4 trial while its
    micro-batch is whole (8): half of it fits."""

    def on_train_batch_begin(self, batch, logs=None):
        core = self.model.window_core
        if self.model.accum_steps == 4 and core is not None and core.micro_batch_split == 1:
            raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")


def test_a_trial_out_of_memory_at_its_first_step_is_retried_at_half_the_micro_batch(tmp_path):
    x, y = classification_data(n=N)
    space = {"accum_steps": [1, 2, 4], "micro_batch_size": 8}
    tuner = _tuner(tmp_path, AccumulationHyperModel(build_fixed_model, space), max_trials=3)
    tuner.search(x, y, epochs=1, verbose=0, callbacks=[_OutOfMemoryUnsplit()])
    trials = {t.hyperparameters.get("accum_steps"): t for t in tuner.oracle.trials.values()}
    assert all(t.status == "COMPLETED" for t in trials.values())
    retried = trials[4].metrics
    assert retried.get_last_value("micro_batch_split") == 2  # micro-batch 4, K 8
    assert retried.get_last_value("effective_batch_size") == 32  # the effective batch kept
    assert retried.get_last_value("samples_seen") == N  # one whole epoch, nothing twice
    assert not trials[2].metrics.exists("micro_batch_split")


@pytest.mark.slow  # a real out-of-memory error: 10 s of the allocator's retries
def test_a_trial_that_runs_out_of_memory_for_real_is_retried_at_half_the_micro_batch(tmp_path):
    """The allocator's own error, not one raised from Python: a layer of the model asks for an
    impossible tensor whenever its batch has more than 4 rows (``OutOfMemoryAt`` of
    tests/test_oom_recovery.py), so the trial's micro-batch of 8 cannot train and 4 can."""
    from tests.test_oom_recovery import OutOfMemoryAt

    def build(hp):
        keras.utils.set_random_seed(0)
        inputs = keras.Input((8,))
        h = OutOfMemoryAt(at_call=1, limit=4)(inputs)
        h = keras.layers.Dense(8, activation="relu")(h)
        model = keras.Model(inputs, keras.layers.Dense(3)(h))
        model.compile(
            keras.optimizers.SGD(0.1),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        return model

    x, y = classification_data(n=N)
    space = {"accum_steps": [2], "micro_batch_size": 8}
    tuner = _tuner(tmp_path, AccumulationHyperModel(build, space), max_trials=1)
    tuner.search(x, y, epochs=1, verbose=0)
    (trial,) = tuner.oracle.trials.values()
    assert trial.status == "COMPLETED", trial.message
    assert trial.metrics.get_last_value("micro_batch_split") == 2  # micro-batch 4, K 4
    assert trial.metrics.get_last_value("effective_batch_size") == 16  # the effective batch kept
    assert trial.metrics.get_last_value("samples_seen") == N  # one whole epoch, nothing twice


@pytest.mark.parametrize(
    "tuner_class, kwargs",
    [
        pytest.param(kt.BayesianOptimization, {"max_trials": 3}, marks=pytest.mark.slow),
        pytest.param(
            kt.Hyperband,
            {"max_epochs": 2, "factor": 2, "hyperband_iterations": 1},
            marks=pytest.mark.slow,  # other tuners in the slow tier: RandomSearch is fast
        ),
    ],
    ids=["bayesian", "hyperband"],
)
def test_other_tuners(tmp_path, tuner_class, kwargs):
    """Bayesian optimisation and Hyperband drive the same trials: each completed trial records
    its effective batch and whole epochs of N samples whatever its K (Keras Tuner keeps the
    metrics of the trial's best epoch, the 1st or the 2nd), and the best trial's model
    rebuilds with its accumulation settings."""
    x, y = classification_data(n=N)
    space = {"accum_steps": [1, 2], "micro_batch_size": 8, "agc_clip_factor": (0.01, 0.1)}
    tuner = _tuner(tmp_path, AccumulationHyperModel(build_model, space), tuner_class, **kwargs)
    tuner.search(x, y, epochs=2, verbose=0)
    completed = [t for t in tuner.oracle.trials.values() if t.status == "COMPLETED"]
    assert len(completed) >= 2
    for trial in completed:
        k = trial.hyperparameters.get("accum_steps")
        assert trial.metrics.get_last_value("effective_batch_size") == 8 * k
        assert trial.metrics.get_last_value("samples_seen") in (N, 2 * N)
    best = tuner.get_best_hyperparameters()[0]
    model = tuner.hypermodel.build(best)
    assert model.accum_steps == best.get("accum_steps")
    assert (model.agc is None) == (not best.get("agc"))


@pytest.mark.parametrize(
    "space, error, match",
    [
        ({"accum_steps": []}, ValueError, "accum_steps must list at least one value"),
        ({"accum_steps": [0, 2]}, ValueError, "each accum_steps value must be an integer >= 1"),
        ({"accum_steps": [2, 2]}, ValueError, "duplicate"),
        ({"accum_steps": 4}, TypeError, "must be a list of integers"),
        ({"agc_clip_factor": (0.0, 0.1)}, ValueError, "each agc_clip_factor value must be > 0"),
        ({"agc_clip_factor": (0.1, 0.01)}, ValueError, "min <= max"),
        ({"agc_clip_factor": 0.1}, ValueError, r"\(min, max\) pair"),
        ({"learning_rate": (-1.0, 1.0)}, ValueError, "each learning_rate value must be > 0"),
        ({"lr_scaling": "cubic"}, ValueError, "lr_scaling must be one of"),
        ({"micro_batch_size": [0]}, ValueError, "micro_batch_size"),
        ({"accum_step": [1, 2]}, ValueError, r"Unknown search space setting\(s\) \['accum_step'\]"),
    ],
)
def test_bad_search_spaces_fail_before_any_trial(space, error, match):
    with pytest.raises(error, match=match):
        AccumulationHyperModel(build_model, space)
