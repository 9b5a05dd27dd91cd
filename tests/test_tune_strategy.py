"""``ga-tfx run --tune``: a reproducible search (issue 25, item 5) and the noise-scale strategy
(item 4) in the Tuner's configuration, the pipeline and the tuning report.

Fast: the oracle's seeding through ``tuner_fn.build_tuner`` (keras-tuner replaces a seed of 0 by
a random one, which made two runs of the same command try different hyperparameters), the
``noise_scale`` kind's configuration and errors, the options and the pipeline's wiring of
``--seed`` and ``--tune-strategy``, and the report's evidence; ``--tuning-target-loss``
(issue 34, item 1): its checks, its route to the probe, and the stock Tuner's probe stopping at
an easy target and running to the cap at an unreachable one. Slow: the same command run twice
into fresh output directories (separate processes, as a user runs it); and a whole
``--tune-strategy noise_scale`` run.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx import keras, tuning
from ga_tfx.components.trainer.settings import AccumulationSettings
from ga_tfx.components.tuner import tuner_fn
from ga_tfx.pipelines import cli, tuning_report
from ga_tfx.pipelines import pipeline as pipeline_lib
from ga_tfx.pipelines.options import (
    CONCERNS,
    AccumulationOptions,
    TrainingOptions,
    TuningOptions,
)
from ga_tfx.pipelines.parts import training

import csv
import dataclasses
import json
import math
import os
import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.tfx]


def _config(kind="random", seed=0, search=None, settings=None, **tuner):
    tuner = dict({"kind": kind, "seed": seed}, **tuner)
    return tuner_fn.parse_config(
        {
            "model_fn": "ga_tfx.pipelines.digits",
            "ga_tfx": dict({"label_key": "label", "micro_batch_size": 8}, **(settings or {})),
            "ga_tfx_search": search
            if search is not None
            else {"accum_steps": [1, 2, 4, 8], "agc_clip_factor": [0.01, 0.16]},
            "tuner": tuner,
        },
        eval_steps=2,
    )


def _tiny_model(hp):
    inputs = keras.Input((2,))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    model.compile(keras.optimizers.SGD(0.1), "mse")
    return model


def _draws(directory, kind, seed):
    """The hyperparameters the tuner's oracle gives its first 4 trials."""
    extra = {"max_epochs": 4} if kind == "hyperband" else {"max_trials": 6}
    config = _config(kind, seed, **extra)
    hypermodel = tuning.AccumulationHyperModel(_tiny_model, config.search_space)
    # (Constructing the tuner builds the hypermodel once: the oracle learns the space.)
    tuner = tuner_fn.build_tuner(config, hypermodel, directory=directory, project_name="p")
    return [tuner.oracle.create_trial(f"worker{i}").hyperparameters.values for i in range(4)]


@pytest.mark.parametrize("kind", ["random", "bayesian", "hyperband"])
def test_the_same_seed_gives_the_same_trials_and_another_seed_others(tmp_path, kind):
    # Seed 0, the pipeline's default, included: keras-tuner would draw a random seed for it.
    first = _draws(str(tmp_path / "a"), kind, 0)
    assert _draws(str(tmp_path / "b"), kind, 0) == first
    assert _draws(str(tmp_path / "c"), kind, 1) != first
    assert len({json.dumps(v, sort_keys=True) for v in first}) > 1  # they are samples


def test_the_noise_scale_kind_probes_the_trainers_settings():
    config = _config("noise_scale", search={"accum_steps": [1, 2, 4, 8]})
    assert (config.kind, config.max_trials, config.max_epochs) == ("noise_scale", 1, None)
    assert config.settings.accum_steps == 8  # not given: the largest searched
    assert (
        _config(
            "noise_scale", search={"accum_steps": [1, 2]}, settings={"accum_steps": 4}
        ).settings.accum_steps
        == 4
    )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(), r"chooses accum_steps only; remove agc_clip_factor=\(0.01, 0.16\)"),
        (
            dict(search={"accum_steps": [1, 2], "micro_batch_size": [8, 16]}),
            r"remove micro_batch_size=\[8, 16\]",
        ),
        (
            dict(search={"accum_steps": [1, 2]}, settings={"accum_steps": 1}),
            r"accum_steps=1: tuner kind \"noise_scale\" probes at the Trainer's accum_steps, "
            r"which must be >= 2",
        ),
        (
            dict(search={"accum_steps": [1, 2]}, max_trials=3),
            r'max_trials does not apply to kind "noise_scale" .*got max_trials=3',
        ),
        (dict(kind="grid"), r"kind must be one of 'random', .*'noise_scale'.*got 'grid'"),
    ],
)
def test_the_noise_scale_kind_rejects_what_it_cannot_do(kwargs, match):
    kind = kwargs.pop("kind", "noise_scale")
    with pytest.raises(ValueError, match=match):
        _config(kind, **kwargs)


def test_tune_strategy_and_seed_options_are_checked():
    with pytest.raises(ValueError, match=r"tune_strategy='noise_scale' applies to a tuned run"):
        TrainingOptions.of(tune_strategy="noise_scale")
    with pytest.raises(ValueError, match=r"accum_steps=1: tune_strategy 'noise_scale' probes"):
        TrainingOptions.of(tune=True, tune_strategy="noise_scale", accum_steps=1)
    with pytest.raises(ValueError, match=r"tune_strategy must be one of 'search', 'noise_scale'"):
        TrainingOptions.of(tune=True, tune_strategy="grid")
    with pytest.raises(ValueError, match=r"seed must be an integer >= 0 .*got -1"):
        TrainingOptions.of(seed=-1)
    args = cli.build_parser().parse_args(
        ["run", "--tune", "--tune-strategy", "noise_scale", "--seed", "7"]
    )
    assert cli.training_options(args) == TrainingOptions.of(
        tune=True, tune_strategy="noise_scale", seed=7
    )


def _components(options, tmp_path):
    made = pipeline_lib.create_pipeline(
        "p", str(tmp_path / "root"), cli.SHIPPED_DATA, str(tmp_path / "serving"), options
    )
    return {c.id: c for c in made.components}


def test_seed_and_strategy_reach_the_tuner_and_the_trainer(tmp_path):
    parts = _components(
        TrainingOptions.of(
            tune=True, tune_strategy="noise_scale", seed=3, search_accum_steps=(1, 2, 4, 8)
        ),
        tmp_path,
    )
    config = json.loads(parts["Tuner"].exec_properties["custom_config"])
    assert config["tuner"] == {
        "kind": "noise_scale",
        "objective": "val_accuracy",  # the digits classifier's eval accuracy, stated here
        "seed": 3,
        "trials_file": training.trials_file(str(tmp_path / "root")),
    }
    # The probe runs the Trainer's settings: its accum_steps, AGC factor and data order.
    assert config["ga_tfx"]["accum_steps"] == 4 and config["ga_tfx"]["agc_clip_factor"] == 0.08
    assert config["ga_tfx"]["shuffle_seed"] == 3
    assert config["ga_tfx_search"]["agc_clip_factor"] is None
    assert config["ga_tfx_search"]["accum_steps"] == [1, 2, 4, 8]
    trainer = parts["GradientAccumulationTrainer"].exec_properties
    assert trainer["shuffle_seed"] == 3
    assert "shuffle_buffer" not in trainer  # the shipped digits: tfx_bsl's default buffer
    searched = _components(TrainingOptions.of(tune=True, seed=5), tmp_path)
    config = json.loads(searched["Tuner"].exec_properties["custom_config"])
    assert config["tuner"]["seed"] == 5 and config["tuner"]["max_trials"] == 3
    assert "kind" not in config["tuner"] and config["ga_tfx_search"]["agc_clip_factor"]


# A value other than the default for each option that is a Trainer setting (declared
# like(AccumulationSettings, name)), under the option's name.
NOT_THE_DEFAULTS = dict(
    accum_steps=8,
    micro_batch_size=16,
    windows_per_epoch=30,
    checkpoint_every_updates=7,
    checkpoint_every_seconds=9.5,
    agc_clip_factor=0.05,
    accum_schedule="adaptive:2-16",
    lr_scaling="sqrt",
    log_noise_scale=True,
    memory_budget="1GiB",
    strategy="none",
    seed=9,
)


def test_every_option_that_is_a_trainer_setting_reaches_the_trainer_and_the_probe(tmp_path):
    """One route (``values_for``): each such option arrives under the Trainer's name with its
    value, in the Trainer and in the probe's settings (which train tuning_windows, not the
    Trainer's epochs); an option added later without a value here fails the first line."""
    from ga_tfx._schema import SOURCE_KEY

    carried = {
        f.name: f.metadata[SOURCE_KEY][1]
        for concern in CONCERNS.values()
        for f in dataclasses.fields(concern)
        if f.metadata.get(SOURCE_KEY, (None,))[0] is AccumulationSettings
    }
    assert set(carried) == set(NOT_THE_DEFAULTS)
    defaults = AccumulationOptions()
    assert all(getattr(defaults, name) != v for name, v in NOT_THE_DEFAULTS.items())
    no_schedule = dict(NOT_THE_DEFAULTS, accum_schedule=None)
    parts = _components(TrainingOptions.of(**NOT_THE_DEFAULTS), tmp_path)
    trainer = parts["GradientAccumulationTrainer"].exec_properties
    probed = _components(
        TrainingOptions.of(tune=True, tune_strategy="noise_scale", **no_schedule), tmp_path
    )
    probe = json.loads(probed["Tuner"].exec_properties["custom_config"])["ga_tfx"]
    for option, name in carried.items():
        value = NOT_THE_DEFAULTS[option]
        sent = int(value) if isinstance(value, bool) else value  # exec properties: 0/1
        assert trainer[name] == sent, name
        if option == "windows_per_epoch":
            assert name not in probe
        elif option != "accum_schedule":
            assert probe[name] == value, name


# ------------------------------------------------- the probe's target loss (issue 34, item 1)
# A value other than the default for each option that is a Tuner option (declared
# like(TunerOptions, name)), under the option's name.
TUNER_NOT_THE_DEFAULTS = dict(tuning_target_loss=0.25)


@pytest.mark.parametrize(
    "flag, match",
    [
        ("-1", r"tuning_target_loss must be > 0, got -1.0"),
        ("0", r"tuning_target_loss must be > 0, got 0.0"),
        ("nan", r"tuning_target_loss must be a finite number > 0, got nan"),
        ("inf", r"tuning_target_loss must be a finite number > 0, got inf"),
        ("low", r"tuning_target_loss must be a number > 0, or None, got 'low'"),
    ],
)
def test_a_bad_tuning_target_loss_is_an_error_naming_it(flag, match, capsys):
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(
            ["run", "--tune", "--tune-strategy", "noise_scale", "--tuning-target-loss", flag]
        )
    assert re.search(match, capsys.readouterr().err.splitlines()[-1])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(), r"got tune=False, tune_strategy='search'"),
        (dict(tune=True), r"got tune=True, tune_strategy='search'"),
    ],
)
def test_a_tuning_target_loss_without_the_probe_is_an_error(kwargs, match):
    """It ends the probe: a search (or no tuning) would silently ignore it."""
    with pytest.raises(ValueError, match=r"tuning_target_loss=0.3 ends the noise-scale probe: "):
        TrainingOptions.of(tuning_target_loss=0.3, **kwargs)
    with pytest.raises(ValueError, match=match):
        TrainingOptions.of(tuning_target_loss=0.3, **kwargs)
    args = cli.build_parser().parse_args(
        ["run", "--tune", "--tune-strategy", "noise_scale", "--tuning-target-loss", "0.3"]
    )
    assert cli.training_options(args) == TrainingOptions.of(
        tune=True, tune_strategy="noise_scale", tuning_target_loss=0.3
    )
    # The Tuner's own check (custom_config written by hand): the probe only, with evaluation.
    with pytest.raises(ValueError, match=r"target_loss=0.3 ends the noise-scale probe: .*'random'"):
        _config("random", target_loss=0.3)
    with pytest.raises(ValueError, match=r"target_loss=0.3 is read from the probe's val_loss"):
        tuner_fn.parse_config(
            {
                "model_fn": "ga_tfx.pipelines.digits",
                "ga_tfx": {"label_key": "label"},
                "tuner": {"kind": "noise_scale", "target_loss": 0.3},
            }
        )


def test_every_option_that_is_a_tuner_option_reaches_the_probe(tmp_path):
    """One route (``values_for``): each option declared like(TunerOptions, name) arrives in
    custom_config["tuner"] under the Tuner's name and in the parsed config the probe is built
    from; an option added later without a value here fails the first line."""
    from ga_tfx._schema import SOURCE_KEY
    from ga_tfx.components.tuner.options import TunerOptions

    carried = {
        f.name: f.metadata[SOURCE_KEY][1]
        for concern in CONCERNS.values()
        for f in dataclasses.fields(concern)
        if f.metadata.get(SOURCE_KEY, (None,))[0] is TunerOptions
    }
    assert set(carried) == set(TUNER_NOT_THE_DEFAULTS)
    defaults = TuningOptions()
    assert all(getattr(defaults, name) != v for name, v in TUNER_NOT_THE_DEFAULTS.items())
    options = TrainingOptions.of(tune=True, tune_strategy="noise_scale", **TUNER_NOT_THE_DEFAULTS)
    tuner = _components(options, tmp_path)["Tuner"]
    config = json.loads(tuner.exec_properties["custom_config"])
    parsed = tuner_fn.parse_config(config, eval_steps=options.accumulation.eval_steps)
    for option, name in carried.items():
        assert config["tuner"][name] == TUNER_NOT_THE_DEFAULTS[option], name
        assert getattr(parsed, name) == TUNER_NOT_THE_DEFAULTS[option], name
    # The probe built from it stops at that target.
    hypermodel = tuning.AccumulationHyperModel(_tiny_model, parsed.search_space)
    probe = tuner_fn.build_tuner(parsed, hypermodel, directory=str(tmp_path), project_name="p")
    assert probe.target_loss == TUNER_NOT_THE_DEFAULTS["tuning_target_loss"]


@pytest.mark.parametrize("cap, every", [(1, 1), (7, 1), (10, 1), (20, 2), (26, 2), (100, 10)])
def test_a_probe_with_a_target_is_evaluated_about_ten_times_up_to_the_cap_exactly(cap, every):
    assert tuner_fn.probe_check_windows(cap) == every
    assert cap % every == 0 and every <= max(1, math.ceil(cap / tuner_fn.PROBE_TARGET_CHECKS))


def _stock_probe(tmp_path, model_module, name, target, num_steps):
    """The stock Tuner's noise-scale probe (taxi testdata) with ``target_loss``: its record."""
    from tests.test_tuner_component import _config as stock_config
    from tests.test_tuner_component import _tune

    module = model_module()
    trials_file = str(tmp_path / f"{name}.jsonl")
    config = stock_config(
        module,
        ga_tfx=dict(stock_config(module)["ga_tfx"], accum_steps=2, micro_batch_size=4),
        ga_tfx_search={"accum_steps": [1, 2, 4]},
        tuner={"kind": "noise_scale", "trials_file": trials_file, "target_loss": target},
    )
    _tune(str(tmp_path / name), config, num_steps=num_steps)
    (record,) = tuning_report.read_trials(trials_file)
    assert record["status"] == "completed", record["message"]
    return record


def test_the_probe_stops_at_its_first_evaluation_at_an_easy_target(tmp_path, model_module):
    """Through TFX's stock Tuner executor: a target every loss meets ends the probe at its
    first evaluation (2 windows of a cap of 20: evaluated every 2), and the report says so."""
    easy = _stock_probe(tmp_path, model_module, "easy", 1e6, 20)
    assert [r["window"] for r in easy["probe"]["curve"]] == [1, 2]
    assert easy["probe"]["target_loss"] == 1e6 and easy["probe"]["reached_target"] is True
    assert tuning_report.stop_lines(easy["probe"]) == [
        "stopped at the target: eval loss at or below 1e+06 after 2 windows (the probe "
        "measured the path to the loss you aim at)"
    ]
    assert tuning_report.stop_lines({"curve": []}) == []  # no target: no line


def test_the_probe_runs_to_the_cap_at_an_unreachable_target(tmp_path, model_module):
    """A target no loss meets: all the cap's windows (8, evaluated every one), and the report
    says the target was not reached and what the recommendation then is."""
    never = _stock_probe(tmp_path, model_module, "never", 1e-9, 8)
    assert [r["window"] for r in never["probe"]["curve"]] == list(range(1, 9))
    assert never["probe"]["reached_target"] is False
    (line,) = tuning_report.stop_lines(never["probe"])
    assert line.startswith("target NOT reached:   eval loss still above 1e-09 after 8 windows")
    assert "a lower limit of the target's effective batch" in line
    assert line in tuning_report.probe_lines(never["probe"])


CHOICES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def _nearest(noise_scale, micro_batch):
    """The allowed accum_steps nearest (log2) to noise_scale / micro_batch (ties: smaller)."""
    return min(CHOICES, key=lambda k: (abs(math.log2(k * micro_batch / noise_scale)), k))


def _b_path(curve):
    """B_path worked out here from the probe's per-window estimates: each window weighted by
    its progress w = G2 / (G2 + S / B), over a centred block of 3 windows (fewer at the ends),
    and B_path = sum B (1 - w) / sum w."""
    rows = [
        (r["window_samples"], r["noise_trace_window"], r["noise_grad_sq_window"])
        for r in curve
        if r.get("noise_trace_window") is not None
    ]
    signal = noise = 0.0
    for t, (b, _, _) in enumerate(rows):
        block = rows[max(0, t - 1) : t + 2]
        grad_sq = sum(g for _, _, g in block)
        w = min(max(grad_sq / sum(g + s / bj for bj, s, g in block), 0.0), 1.0)
        signal, noise = signal + w, noise + b * (1 - w)
    return noise / signal


def test_the_stock_tuner_probes_once_and_exports_the_recommendation(tmp_path, model_module):
    """The noise-scale kind through TFX's stock Tuner executor (taxi testdata, the test model
    its BatchNormalization replaced): one probe of 26 windows at accum_steps 4 x micro-batch 1,
    and the best hyperparameters it exports are the searched accum_steps nearest on a log2
    scale to B_path / 1, B_path worked out here from the probe's per-window estimates. On this
    problem the last window's B_simple points to another accum_steps, so a recommendation
    made from B_simple fails the test (seen failing so)."""
    from tests.test_tuner_component import _config as stock_config
    from tests.test_tuner_component import _tune

    name = model_module()
    trials_file = str(tmp_path / "trials.jsonl")
    config = stock_config(
        name,
        ga_tfx=dict(stock_config(name)["ga_tfx"], accum_steps=4, micro_batch_size=1),
        ga_tfx_search={"accum_steps": list(CHOICES)},
        tuner={"kind": "noise_scale", "trials_file": trials_file},
    )
    best, _ = _tune(str(tmp_path / "tune"), config, num_steps=26)
    (record,) = tuning_report.read_trials(trials_file)
    assert record["values"]["accum_steps"] == 4 and record["status"] == "completed"
    b_simple = record["metrics"]["noise_scale"]  # beside the score, as for a searched trial
    assert b_simple > 0 and record["score"] is not None
    curve = record["probe"]["curve"]
    assert [row["update"] for row in curve] == list(range(1, 27))
    assert curve[-1]["noise_scale"] == b_simple
    b_path = _b_path(curve)
    expected = _nearest(b_path, 1)
    print(
        f"B_simple {b_simple:.4g} -> K {_nearest(b_simple, 1)}; B_path {b_path:.4g} -> K {expected}"
    )
    assert _nearest(b_simple, 1) != expected  # the premise: the two rules disagree here
    recommendation = record["probe"]["recommendation"]
    assert recommendation["noise_scale"] == pytest.approx(b_path, rel=1e-9)
    assert recommendation["accum_steps"] == expected
    with open(os.path.join(best.uri, "best_hyperparameters.txt")) as f:
        assert json.load(f)["values"]["accum_steps"] == expected


# ------------------------------------------------------------------- the report's evidence
def _probe_record():
    # Window 4 skipped (non-finite): 8 windows, 7 updates; the report counts windows.
    curve = [
        {
            "window": i,
            "update": i - (i >= 4),
            "samples": 128 * i,
            "loss": 2.0 / i,
            "noise_scale": None if i == 1 else 20.0 + 10 * i,
            "noise_trace": 1.0,
            "noise_grad_sq": 0.05,
        }
        for i in range(1, 9)
    ]
    from ga_tfx.sizing.batch_choice import recommend_accum_steps

    rec = recommend_accum_steps(100.0, 32, (1, 2, 4, 8), measure="B_path")  # 3.125 -> 4
    return {
        "run": "r",
        "trial_id": "0",
        "status": "completed",
        "score": 0.8,
        "values": {"accum_steps": 4, "micro_batch_size": 32},
        "metrics": {"effective_batch_size": 128.0, "noise_scale": 100.0},
        "message": None,
        "probe": {
            "probe_accum_steps": 4,
            "micro_batch_size": 32,
            "curve": curve,
            "recommendation": rec.to_dict(),
        },
    }


def test_the_probe_report_shows_the_curve_the_choice_and_why(tmp_path):
    trials = tmp_path / "trials.jsonl"
    trials.write_text(json.dumps(_probe_record()) + "\n")
    report = tuning_report.write(str(trials), str(tmp_path / "out"), "val_accuracy")
    header, row = report["lines"][0].split(), report["lines"][1].split()
    assert row[header.index("noise_scale")] == "100"  # beside the score
    lines = report["probe_lines"]
    text = "\n".join(lines)
    assert "accum_steps 4 x micro-batch 32 (effective batch 128), 8 windows, 1024 samples" in text
    assert "measured B_path:      100 samples (the noise scale of the probe's path" in text
    assert "B_simple at the probe's last update: 100 samples" in text
    assert "second half: 70 to 100 samples (4 windows)" in text  # windows 5..8: 70, 80, 90, 100
    assert (
        "recommended:          accum_steps 4: B_path / micro-batch = 100 / 32 = 3.12 "
        "micro-batches per update: the nearest allowed accum_steps on a log2 scale is 4"
    ) in text
    probe_csv = os.path.join(str(tmp_path / "out"), tuning_report.PROBE_CSV)
    assert probe_csv in report["files"]
    with open(probe_csv) as f:
        rows = list(csv.DictReader(f))
    assert [r["noise_scale"] for r in rows] == [""] + [f"{20.0 + 10 * i}" for i in range(2, 9)]
    with open(os.path.join(str(tmp_path / "out"), tuning_report.PROBE_PNG), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    # A probe without an estimate says why, instead of a recommendation.
    record = _probe_record()
    record["probe"] = {"error": "The noise-scale probe ... measured no usable noise scale"}
    trials.write_text(json.dumps(record) + "\n")
    lines = tuning_report.write(str(trials), str(tmp_path / "err"), "val_accuracy")["probe_lines"]
    assert lines == [
        "noise-scale probe: no recommendation: The noise-scale probe ... measured no usable "
        "noise scale"
    ]


# ------------------------------------------------------------------- whole runs (slow)
SMALL = [
    "--train-windows",
    "4",
    "--windows-per-epoch",
    "4",
    "--eval-steps",
    "4",
    "--tuning-windows",
    "2",
    "--search-accum-steps",
    "1,2,4",
]


def _ga_tfx_run(output_dir, *flags):
    """``ga-tfx run --tune ...`` in its own process, as a user runs it; returns its stdout."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ga_tfx.pipelines.cli",
            "run",
            "--tune",
            "--output-dir",
            str(output_dir),
            *SMALL,
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def _search(output_dir, stdout):
    """(each trial's id, values and score; the tuned line) of a run."""
    records = tuning_report.read_trials(training.trials_file(str(output_dir / "root")))
    trials = sorted((r["trial_id"], r["values"], r["score"]) for r in records)
    tuned = next(line for line in stdout.splitlines() if line.startswith("tuned:"))
    return trials, tuned


@pytest.mark.slow  # two pipeline runs
def test_two_fresh_runs_of_the_same_tune_command_agree(tmp_path):
    """Separate processes, fresh output directories: the same trials, scores and best trial.
    (That another ``--seed`` draws other trials is the fast tests': the seed reaches the
    Tuner's config, test_seed_and_strategy_reach_the_tuner_and_the_trainer, and changes the
    oracle's draws, test_the_same_seed_gives_the_same_trials_and_another_seed_others.)"""
    first = _search(tmp_path / "a", _ga_tfx_run(tmp_path / "a"))
    again = _search(tmp_path / "b", _ga_tfx_run(tmp_path / "b"))
    assert len(first[0]) == 3 and all(score is not None for _, _, score in first[0])
    assert again == first  # the same hyperparameters, the same scores, the same best trial


@pytest.mark.slow  # a pipeline run
def test_a_noise_scale_run_trains_with_the_recommended_accum_steps(tmp_path):
    out = _ga_tfx_run(tmp_path, "--tune-strategy", "noise_scale", "--accum-steps", "4")
    record = tuning_report.read_trials(training.trials_file(str(tmp_path / "root")))[0]
    rec = record["probe"]["recommendation"]
    assert record["values"]["accum_steps"] == 4  # the probe ran at --accum-steps
    assert len(record["probe"]["curve"]) == 2  # --tuning-windows
    assert f"tuned:                accum_steps={rec['accum_steps']}" in out
    assert f"effective batch size: {rec['accum_steps'] * 32}" in out  # the Trainer used it
    assert f"recommended:          accum_steps {rec['accum_steps']}: {rec['reason']}" in out
    for name in (tuning_report.PROBE_CSV, tuning_report.PROBE_PNG, "tuning_report.csv"):
        assert os.path.exists(tmp_path / name), name
