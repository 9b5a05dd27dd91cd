"""The ga-tfx ``tuner_fn`` in TFX's stock Tuner executor, and its best hyperparameters in the
ga-tfx Trainer, on the taxi testdata shipped in the TFX wheel (transformed examples + transform
graph, label ``tips_xf``, raw label ``tips``), as in ``test_trainer_component.py``.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
import ga_tfx.components.trainer
from ga_tfx._keras import tf
from ga_tfx.components.tuner import tuner_fn as tuner_lib
from ga_tfx.tuning import AccumulationHyperModel, AccumulationSearchSpace

import glob
import json
import os

import keras_tuner as kt
import pytest
from tfx.components.trainer import fn_args_utils
from tfx.components.tuner import executor as tuner_executor
from tfx.proto import trainer_pb2
from tfx.types import standard_artifacts
from tfx.types import standard_component_specs as specs
from tfx.utils import proto_utils

from tests import taxi

pytestmark = [pytest.mark.tfx]  # the stock TFX Tuner with ga-tfx's tuner_fn

TUNER_FN = "ga_tfx.components.tuner.tuner_fn.tuner_fn"
MODEL_MODULE = taxi.MODEL_MODULE

TUNABLE_MODULE = (
    MODEL_MODULE
    + """

def build_tunable_model(hp):
    return build_model({"units": hp.Int("units", 4, 8, step=4)})
"""
)


_inputs = taxi.transform_inputs


def _args(num_steps, eval_steps):
    return {
        specs.TRAIN_ARGS_KEY: proto_utils.proto_to_json(trainer_pb2.TrainArgs(num_steps=num_steps)),
        specs.EVAL_ARGS_KEY: proto_utils.proto_to_json(trainer_pb2.EvalArgs(num_steps=eval_steps)),
    }


def _tune(out, custom_config, num_steps=2, eval_steps=1):
    """Runs TFX's stock Tuner executor; returns (best hp artifact, working dir)."""
    best = standard_artifacts.HyperParameters()
    best.uri = os.path.join(out, "best_hyperparameters")
    results = standard_artifacts.TunerResults()
    results.uri = os.path.join(out, "tuner_results")
    props = dict(
        _args(num_steps, eval_steps),
        **{specs.TUNER_FN_KEY: TUNER_FN, specs.CUSTOM_CONFIG_KEY: json.dumps(custom_config)},
    )
    context = tuner_executor.Executor.Context(tmp_dir=os.path.join(out, "tmp"), unique_id="1")
    tuner_executor.Executor(context).Do(
        _inputs(),
        {specs.BEST_HYPERPARAMETERS_KEY: [best], specs.TUNER_RESULTS_KEY: [results]},
        props,
    )
    return best, context.get_tmp_path()


def _trials(working_dir):
    """[(status, hyperparameter values, {metric: last value})] of the saved trials."""
    found = []
    for path in sorted(
        glob.glob(os.path.join(working_dir, tuner_lib.PROJECT_NAME, "trial_*", "trial.json"))
    ):
        with open(path) as f:
            state = json.load(f)
        metrics = {
            name: entry["observations"][-1]["value"][0]
            for name, entry in state["metrics"]["metrics"].items()
        }
        found.append((state["status"], state["hyperparameters"]["values"], metrics))
    return found


def _scalars(log_dir, tag):
    values = []
    for path in glob.glob(os.path.join(log_dir, "**", "events.out.tfevents.*"), recursive=True):
        for event in tf.compat.v1.train.summary_iterator(path):
            values += [
                (event.step, float(tf.make_ndarray(v.tensor)))
                for v in event.summary.value
                if v.tag == tag
            ]
    return sorted(values)


def _config(module_name, **overrides):
    config = {
        "model_fn": module_name,
        "ga_tfx": {
            "micro_batch_size": 8,
            "label_key": "tips_xf",
            "raw_label_key": "tips",
            "strategy": "none",
            "shuffle": 0,
        },
        "ga_tfx_search": {"accum_steps": [1, 2, 4]},
        "tuner": {"max_trials": 3, "seed": 6},
    }
    config.update(overrides)
    return config


# ---------------------------------------------------------------------- the budget rule
def test_budget_rule_num_steps_counts_windows_of_the_largest_effective_batch():
    space = AccumulationSearchSpace(accum_steps=[1, 2, 4], micro_batch_size=[8, 16])
    assert space.max_effective_batch_size == 64
    # 5 windows of the largest effective batch (4 x 16): 320 samples for every trial, i.e.
    # 320 / (K * b) windows: 40 for (1, 8), 5 for (4, 16).
    assert tuner_lib.trial_budget(5, space) == 320
    # One micro-batch size of 16 and one of 24: 3 x 24 = 72 samples are not micro-batches of 16.
    uneven = AccumulationSearchSpace(accum_steps=[1], micro_batch_size=[16, 24])
    with pytest.raises(ValueError, match=r"not a whole number of micro-batches of \[16\]"):
        tuner_lib.trial_budget(3, uneven)
    assert tuner_lib.trial_budget(2, uneven) == 48
    for bad in (None, 0, 2.0):
        with pytest.raises(ValueError, match="train_args.num_steps"):
            tuner_lib.trial_budget(bad, space)


# ---------------------------------------------------------------------- search, then train
@pytest.mark.slow  # the stock Tuner's whole search, then the Trainer with its best values
def test_stock_tuner_searches_accum_steps_and_the_trainer_uses_the_best(
    tmp_path, model_module, monkeypatch
):
    num_steps, micro = 2, 8
    name = model_module()
    config = _config(
        name,
        ga_tfx_search={
            "accum_steps": [1, 2, 4],
            "agc_clip_factor": [0.01, 0.1],
            "agc_optional": False,
        },
    )
    best, working_dir = _tune(str(tmp_path / "tune"), config, num_steps=num_steps)

    trials = _trials(working_dir)
    assert len(trials) == 3 and {status for status, _, _ in trials} == {"COMPLETED"}
    assert {values["accum_steps"] for _, values, _ in trials} == {1, 2, 4}  # seed 6
    budget = num_steps * 4 * micro  # num_steps windows of the largest effective batch
    for _, values, metrics in trials:
        k = values["accum_steps"]
        assert 0.01 <= values["agc_clip_factor"] <= 0.1
        assert metrics["effective_batch_size"] == k * micro
        assert metrics["samples_seen"] == budget  # equal samples, whatever K
        assert metrics["updates"] == budget // (k * micro)  # num_steps when K = 4
        assert "val_loss" in metrics
    results_file = os.path.join(str(tmp_path / "tune"), "tuner_results", "tuner_results.json")
    assert len(json.load(open(results_file))) == 3

    path = os.path.join(best.uri, "best_hyperparameters.txt")
    assert os.path.exists(path)
    best_values = kt.HyperParameters.from_config(json.load(open(path))).values
    assert best_values["accum_steps"] in (1, 2, 4)
    assert 0.01 <= best_values["agc_clip_factor"] <= 0.1

    # The ga-tfx Trainer with that artifact: its accum_steps=3 (not in the search) is
    # overridden by the tuned value, as is its AGC factor.
    wrapped = []
    original_wrap = ga_tfx.wrap_model
    monkeypatch.setattr(
        ga_tfx, "wrap_model", lambda *a, **kw: wrapped.append(kw) or original_wrap(*a, **kw)
    )
    module_file = str(tmp_path / f"{name}.py")
    out = str(tmp_path / "train")
    model, model_run = standard_artifacts.Model(), standard_artifacts.ModelRun()
    model.uri, model_run.uri = os.path.join(out, "model"), os.path.join(out, "model_run")
    ga_tfx.components.trainer.Executor().Do(
        dict(_inputs(), **{specs.HYPERPARAMETERS_KEY: [best]}),
        {specs.MODEL_KEY: [model], specs.MODEL_RUN_KEY: [model_run]},
        dict(
            _args(num_steps, 0),
            module_file=module_file,
            accum_steps=3,
            micro_batch_size=micro,
            label_key="tips_xf",
            raw_label_key="tips",
            agc_clip_factor=0.5,
            strategy="none",
            shuffle=0,
        ),
    )
    k = best_values["accum_steps"]
    log_dir = os.path.join(model_run.uri, "ga_tfx")
    assert [v for _, v in _scalars(log_dir, "ga_tfx/effective_batch_size")] == [k * micro] * 2
    assert [v for _, v in _scalars(log_dir, "ga_tfx/updates")] == [1.0, 2.0]
    # The Trainer wraps with one AccumulationConfig (ga_tfx.config), the tuned values in it.
    configs = [kw["config"] for kw in wrapped]
    assert [(c.accum_steps, c.agc_clip_factor) for c in configs] == [
        (k, best_values["agc_clip_factor"])
    ]
    assert os.path.exists(os.path.join(model.uri, "Format-Serving", "saved_model.pb"))


@pytest.mark.parametrize(
    "kind, tuner_class",
    [
        ("random", kt.RandomSearch),
        ("bayesian", kt.BayesianOptimization),
        ("hyperband", kt.Hyperband),
    ],
)
def test_tuner_fn_builds_each_kind_over_tunable_or_plain_modules(
    tmp_path, model_module, kind, tuner_class
):
    tunable = kind != "random"  # build_tunable_model(hp) for two kinds, build_model for one
    name = model_module(TUNABLE_MODULE if tunable else MODEL_MODULE)
    tuner_config = {"kind": kind}
    tuner_config.update({"max_epochs": 2} if kind == "hyperband" else {"max_trials": 2})
    config = _config(
        name, tuner=tuner_config, ga_tfx_search={"accum_steps": [2, 8], "micro_batch_size": [4, 8]}
    )
    exec_properties = dict(_args(3, 2), custom_config=json.dumps(config))
    fn_args = fn_args_utils.get_common_fn_args(_inputs(), exec_properties, str(tmp_path / "work"))
    result = tuner_lib.tuner_fn(fn_args)
    assert isinstance(result.tuner, tuner_class)
    assert result.tuner.oracle.objective.name == "val_loss"  # eval_args.num_steps is set
    assert result.tuner.project_dir == os.path.join(str(tmp_path / "work"), tuner_lib.PROJECT_NAME)
    names = {hp.name for hp in result.tuner.oracle.hyperparameters.space}
    assert {"accum_steps", "micro_batch_size"} <= names
    assert ("units" in names) == tunable
    kwargs = result.fit_kwargs
    assert kwargs["samples_per_epoch"] == 3 * 8 * 8
    assert kwargs["validation_steps"] == 2
    batch = next(iter(kwargs["x"](4)))
    features, labels = batch
    assert labels.shape[0] == 4 and features["fare_xf"].shape[0] == 4
    assert next(iter(kwargs["validation_data"]))[1].shape[0] == 8  # largest micro-batch


def test_settings_agc_factor_is_used_by_every_trial_unless_agc_is_searched(tmp_path, model_module):
    name = model_module()
    settings = dict(_config(name)["ga_tfx"], agc_clip_factor=0.05)
    for search, expected in (
        ({"accum_steps": [2]}, 0.05),
        ({"accum_steps": [2], "agc_clip_factor": [0.2, 0.3], "agc_optional": False}, None),
    ):
        config = _config(name, ga_tfx=settings, ga_tfx_search=search)
        fn_args = fn_args_utils.get_common_fn_args(
            _inputs(),
            dict(_args(1, 0), custom_config=json.dumps(config)),
            str(tmp_path / f"work{expected}"),
        )
        hypermodel = tuner_lib.tuner_fn(fn_args).tuner.hypermodel
        assert hypermodel.agc_clip_factor == expected
        trial_agc = hypermodel.build(kt.HyperParameters()).ga_trial_values["agc_clip_factor"]
        assert trial_agc == (0.05 if expected else 0.2)  # the searched range's default: min
    with pytest.raises(ValueError, match="exclude each other"):
        AccumulationHyperModel(
            lambda hp: None, {"agc_clip_factor": [0.1, 0.2]}, agc_clip_factor=0.1
        )


@pytest.mark.slow  # an interrupted search and its resumption
def test_a_tuning_run_resumes_in_its_working_directory(tmp_path, model_module, monkeypatch):
    """A second Tuner execution over the same working directory (a re-run after a crash, or
    more trials) reloads the finished trials and runs only the missing ones."""
    fits = []
    original_fit = AccumulationHyperModel.fit
    monkeypatch.setattr(
        AccumulationHyperModel,
        "fit",
        lambda self, hp, model, *a, **kw: (
            fits.append(hp.get("accum_steps")) or original_fit(self, hp, model, *a, **kw)
        ),
    )
    name = model_module()
    out = str(tmp_path / "tune")
    _, working_dir = _tune(out, _config(name, tuner={"max_trials": 2, "seed": 6}))
    first = {tuple(sorted(values.items())): metrics for _, values, metrics in _trials(working_dir)}
    assert len(first) == 2 and len(fits) == 2
    _, again = _tune(out, _config(name, tuner={"max_trials": 3, "seed": 6}))
    assert again == working_dir
    assert len(fits) == 3  # one new trial; the first two were not trained again
    trials = _trials(working_dir)
    assert len(trials) == 3 and {status for status, _, _ in trials} == {"COMPLETED"}
    for _, values, metrics in trials:  # the reloaded trials kept their results
        key = tuple(sorted(values.items()))
        if key in first:
            assert metrics == first[key]


# ---------------------------------------------------------------------- errors before trials
@pytest.mark.parametrize(
    "change, match",
    [
        ({"ga_tfx_serch": {}}, r"Unknown custom_config key\(s\) \['ga_tfx_serch'\]"),
        (
            {"ga_tfx_search": {"accum_step": [1, 2]}},
            r"ga_tfx_search: Unknown search space setting\(s\) "
            r"\['accum_step'\]",
        ),
        ({"ga_tfx_search": {"accum_steps": [0, 2]}}, "accum_steps value must be an integer"),
        (
            {"tuner": {"max_trails": 3}},
            r"Unknown custom_config tuner setting\(s\) \['max_trails'\]",
        ),
        ({"tuner": {"kind": "grid"}}, "tuner: kind must be one of"),
        ({"tuner": {"kind": "hyperband", "max_trials": 3}}, "max_trials does not apply"),
        (
            {"ga_tfx": {"micro_batch_size": 8, "label_key": "tips_xf", "acum_steps": 2}},
            r"Unknown ga_tfx setting\(s\) \['acum_steps'\]",
        ),
        (
            {"ga_tfx": {"micro_batch_size": 8}},
            r"Missing required ga_tfx setting\(s\) "
            r"\['label_key'\]",
        ),
        ({"model_fn": None}, r"missing \['model_fn'\]"),
        ({"model_fn": "no_such_module_anywhere"}, "no_such_module_anywhere"),
        (
            {"ga_tfx_search": {"accum_steps": [1], "micro_batch_size": [16, 24]}},
            "not a whole number of micro-batches",
        ),
    ],
)
def test_bad_custom_config_fails_before_any_trial(tmp_path, model_module, change, match):
    config = _config(model_module(), **change)
    out = str(tmp_path / "bad")
    with pytest.raises((ValueError, TypeError), match=match):
        _tune(out, config, num_steps=1)
    assert not glob.glob(os.path.join(out, "tmp", "**", "trial_*"), recursive=True)
    assert not os.path.exists(os.path.join(out, "best_hyperparameters", "best_hyperparameters.txt"))


def test_validation_objective_without_evaluation_is_rejected(tmp_path, model_module):
    config = _config(model_module(), tuner={"objective": "val_loss"})
    with pytest.raises(ValueError, match="needs evaluation: set eval_args.num_steps"):
        _tune(str(tmp_path / "noeval"), config, eval_steps=0)
