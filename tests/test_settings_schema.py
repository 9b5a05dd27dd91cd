"""One declaration per setting: every derived form (component spec, custom_config parsing, CLI
flags, the tables of README.md and docs/) is compared here with the declaration it comes from."""

from ga_tfx._schema import SettingError, Spec, defaults, required, specs
from ga_tfx.components.trainer import settings as settings_lib
from ga_tfx.components.trainer.settings import AccumulationSettings
from ga_tfx.pipelines import cli, options
from ga_tfx.pipelines.options import TrainingOptions
from ga_tfx.tuning.search_space import AccumulationSearchSpace

import os
import subprocess
import sys

import pytest


def test_declarations_import_without_tensorflow_or_tfx():
    code = (
        "import sys\n"
        "import ga_tfx.components.trainer.settings, ga_tfx.components.tuner.options\n"
        "import ga_tfx.pipelines.options, ga_tfx.pipelines.cli, ga_tfx.tuning.search_space\n"
        "ga_tfx.pipelines.cli.build_parser()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('tensorflow', 'tfx', 'tf_keras', 'keras_tuner')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_readme_tables_are_generated_from_the_declarations():
    result = subprocess.run(
        [sys.executable, "scripts/settings_table.py", "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr


def test_cli_flags_are_the_declared_options():
    parser = cli.build_parser()
    run = next(
        a for a in parser._subparsers._group_actions[0].choices.values() if a.prog.endswith(" run")
    )
    by_flag = {flag: a for a in run._actions for flag in a.option_strings}
    declared = {n: s for concern in options.CONCERNS.values() for n, s in specs(concern).items()}
    # One declaration per setting: no name in two concerns.
    assert len(declared) == sum(len(specs(c)) for c in options.CONCERNS.values())
    for concern in options.CONCERNS.values():
        for name, spec in specs(concern).items():
            action = by_flag[spec.cli_flag(name)]
            assert action.dest == name
            assert action.default == defaults(concern)[name]
            assert spec.help in action.help
    args = parser.parse_args(["run"])
    assert options.from_flags(args) == TrainingOptions()
    # A Trainer setting seen from the pipeline keeps the Trainer's rule and help.
    assert declared["accum_steps"].check("x", 3) == 3
    assert declared["micro_batch_size"].help == specs(AccumulationSettings)["micro_batch_size"].help


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "--accum-steps", "0"], "accum_steps must be an integer >= 1"),
        (["run", "--accum-steps", "2.5"], "got '2.5'"),
        (["run", "--strategy", "tpu"], "strategy must be one of 'auto', 'mirrored'"),
        (["run", "--search-accum-steps", "1,x"], "got 'x'"),
        (["run", "--search-agc-clip-factor", "0.2,0.1"], "min <= max"),
        (["run", "--min-accuracy", "1.5"], "min_accuracy must be > 0 and <= 1, got 1.5"),
    ],
)
def test_bad_flags_name_the_value_and_what_is_allowed(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        cli.build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.tfx  # `ga-tfx run` checks the options after importing the TFX runner (local.py)
def test_options_checked_as_a_whole_are_one_line_errors(capsys):
    assert (
        cli.main(
            [
                "run",
                "--train-windows",
                "10",
                "--windows-per-epoch",
                "3",
                "--output-dir",
                "/nonexistent/never/written",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("ga-tfx run: error: windows_per_epoch=3 must divide")


@pytest.mark.parametrize(
    "make, match",
    [
        # Each concern checks its own rules as it is made, alone.
        (lambda: options.TuningOptions(tune_strategy="noise_scale"), "applies to a tuned run"),
        (lambda: options.TuningOptions(tuning_target_loss=0.3), "ends the noise-scale probe"),
        (lambda: options.CsvDataOptions(task="regression"), "apply to your own CSV data"),
        (lambda: options.CsvDataOptions(csv_delimiter="tab"), "csv_delimiter applies to your"),
        (lambda: options.CsvDataOptions(label="y", exclude_columns=("y",)), "holds the label"),
        (
            lambda: options.CsvDataOptions(label="y", module_file="m.py", exclude_columns=("a",)),
            "applies to the generic model",
        ),
        # The rules across two concerns: checked by TrainingOptions.
        (
            lambda: options.TrainingOptions(
                accumulation=options.AccumulationOptions(accum_steps=1),
                tuning=options.TuningOptions(tune=True, tune_strategy="noise_scale"),
            ),
            "accum_steps=1: tune_strategy 'noise_scale' probes",
        ),
        (
            lambda: options.TrainingOptions.of(tune=True, accum_schedule="0:2,10:4"),
            "accum_schedule='0:2,10:4' and tune",
        ),
        (
            lambda: options.TrainingOptions.of(label="y", task="regression", module_file="m.py"),
            "a module_file regression is blessed only past an explicit threshold",
        ),
        (lambda: options.TrainingOptions.of(train_windows=30), "windows_per_epoch=20 must divide"),
        (lambda: options.TrainingOptions.of(acum_steps=2), r"Unknown option\(s\) \['acum_steps'\]"),
    ],
)
def test_each_rule_is_checked_by_its_concern(make, match):
    with pytest.raises(SettingError, match=match):
        make()


def test_options_of_flat_names_hand_each_to_its_concern():
    made = options.TrainingOptions.of(
        accum_steps=2, tune=True, label="y", csv_delimiter="tab", max_rmse=1.5, task="regression"
    )
    assert made.accumulation == options.AccumulationOptions(accum_steps=2)
    assert made.tuning == options.TuningOptions(tune=True)
    assert made.csv == options.CsvDataOptions(label="y", csv_delimiter="tab", task="regression")
    assert made.blessing == options.BlessingOptions(max_rmse=1.5)
    # The flags, each to its concern.
    flags = ["run", "--accum-steps", "3", "--tune", "--label", "y", "--min-accuracy", "0.5"]
    parsed = options.from_flags(cli.build_parser().parse_args(flags))
    assert parsed == options.TrainingOptions.of(
        accum_steps=3, tune=True, label="y", min_accuracy=0.5
    )
    assert parsed.blessing.min_accuracy == 0.5 and parsed.csv.label == "y"
    # Without --label the digits evaluate every 20 windows; with it, 30 windows in one epoch pass.
    assert options.TrainingOptions.of(label="y", train_windows=30).windows_plan() == (30, 30)


@pytest.mark.parametrize(
    "cls", [AccumulationSettings, *options.CONCERNS.values(), AccumulationSearchSpace]
)
def test_every_field_is_declared_with_help(cls):
    import dataclasses

    # Every constructor argument is declared; a value made from them (init=False, e.g. the
    # schedule) is not a setting.
    assert {f.name for f in dataclasses.fields(cls) if f.init} == set(specs(cls))
    assert all(spec.help and not spec.help.endswith(".") for spec in specs(cls).values())


def test_settings_parsing_names_field_value_and_allowed():
    with pytest.raises(ValueError, match=r"Unknown ga_tfx setting\(s\) \['acum_steps'\]"):
        settings_lib.from_dict({"acum_steps": 2, "micro_batch_size": 4, "label_key": "y"})
    with pytest.raises(ValueError, match=r"Missing required ga_tfx setting\(s\) \['label_key'\]"):
        settings_lib.from_dict({"accum_steps": 2, "micro_batch_size": 4})
    with pytest.raises(
        ValueError,
        match=r"strategy must be one of 'auto', 'mirrored', 'none', "
        r"'multi_worker' .*got 'tpu'",
    ):
        settings_lib.from_dict(
            {"accum_steps": 2, "micro_batch_size": 4, "label_key": "y", "strategy": "tpu"}
        )
    parsed = settings_lib.from_dict(
        {
            "accum_steps": 2,
            "micro_batch_size": 4,
            "label_key": "y",
            "shuffle": 0,
            "replace_batchnorm": 1,
        }
    )
    assert parsed.shuffle is False and parsed.replace_batchnorm is True
    assert settings_lib.from_dict(parsed.to_exec_properties()) == parsed
    assert set(required(AccumulationSettings)) == {"accum_steps", "micro_batch_size", "label_key"}


@pytest.mark.parametrize(
    "spec, value, error",
    [
        (Spec(int, "h", minimum=1), 0, "x must be an integer >= 1 (h), got 0."),
        (Spec(int, "h", minimum=1), 4.0, "x must be an integer >= 1 (h), got 4.0 of type float."),
        (Spec(int, "h", minimum=1), True, "of type bool"),
        (Spec(float, "h", above=0), float("inf"), "x must be a finite number > 0, got inf."),
        (Spec(float, "h", above=0), "1", "x must be a real number > 0, got '1' of type str."),
        (Spec(str, "h", choices=("a", "b")), "c", "x must be one of 'a', 'b' (h), got 'c'."),
        (Spec(bool, "h"), 2, "x must be True or False (h), got 2 of type int."),
        (Spec(int, "h", minimum=1, many=True), [], "x must list at least one value"),
        (Spec(int, "h", minimum=1, many=True), [1, 0], "each x value must be an integer >= 1"),
        (Spec(str, "h"), None, "x must be a non-empty string (h), got None of type NoneType."),
    ],
)
def test_spec_errors(spec, value, error):
    with pytest.raises(SettingError) as info:
        spec.check("x", value)
    assert error in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, TypeError)


@pytest.mark.tfx  # the pipeline's parts import TFX
@pytest.mark.parametrize("schedule, first", [(None, 4), ("0:2,10:8", 2), ("adaptive:2-16", 4)])
def test_the_trainer_gets_the_first_k_of_the_options_schedule_value(schedule, first):
    # --accum-steps left out: a piecewise schedule's first K, an adaptive one starts at 4.
    from ga_tfx.pipelines.parts.training import trainer_settings

    import types

    run = options.AccumulationOptions(accum_schedule=schedule)
    code = types.SimpleNamespace(label_key="y", raw_label_key=None, curated_schema=object())
    settings = trainer_settings(code, run, windows_per_epoch=10)
    assert settings["accum_steps"] == first and settings["accum_schedule"] == schedule
    # The Trainer's settings hold the same schedule value, made once from them.
    made = settings_lib.from_dict(dict(settings, micro_batch_size=8))
    assert made.schedule == run.schedule and made.schedule.first_accum_steps == first
    settings_lib.accumulation_config(made)  # the library takes them as they are


def test_a_label_runs_length_is_planned_at_the_schedules_first_k():
    # `--accum-schedule 0:2,500:8` without --accum-steps trains from window 0 at K=2: 20 passes
    # over 10001 rows are ceil(10001 / (2 x 32)) = 157 windows each, not the 79 of the flag's
    # default K=4.
    scheduled = TrainingOptions.of(label="y", accum_schedule="0:2,500:8")
    assert scheduled.windows_plan(train_rows=10001) == (20 * 157, 157)


@pytest.mark.tfx  # `ga-tfx run` checks the options after importing the TFX runner (local.py)
def test_a_memory_budget_beside_a_piecewise_schedule_is_refused_before_anything_runs(
    capsys, tmp_path
):
    """Issue 53: the memory fit changes K, which a piecewise schedule fixes; the run stopped in
    the Trainer minutes in. Now the options refuse it at once, naming both flags (the output
    folder is never made), and so do the Trainer's settings (a component made by hand)."""
    argv = ["run", "--accum-schedule", "0:2,20:4", "--memory-budget", "64MiB"]
    argv += ["--micro-batch", "32", "--output-dir", str(tmp_path / "out")]
    assert cli.main(argv) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("ga-tfx run: error: accum_schedule='0:2,20:4' (--accum-schedule)")
    assert "memory_budget='64MiB' (--memory-budget)" in last and "give one of them" in last
    assert not os.path.exists(tmp_path / "out")  # nothing ran
    values = {"accum_steps": 2, "accum_schedule": "0:2,20:4", "memory_budget": "64MiB"}
    values.update(micro_batch_size=32, label_key="y")
    with pytest.raises(SettingError, match=r"'0:2,20:4'.*memory_budget='64MiB'"):
        settings_lib.from_dict(values)
    # Either alone is accepted.
    assert settings_lib.from_dict(dict(values, memory_budget=None)).schedule.varies
    assert settings_lib.from_dict(dict(values, accum_schedule=None)).memory_budget == "64MiB"


@pytest.mark.tfx  # `ga-tfx run` checks the options after importing the TFX runner (local.py)
def test_an_accum_steps_flag_that_is_not_the_schedules_first_k_is_a_flag_error(capsys):
    argv = ["run", "--accum-steps", "4", "--accum-schedule", "0:2,5:4"]
    assert cli.main(argv + ["--output-dir", "/nonexistent/never/written"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("ga-tfx run: error: accum_steps=4 is not the first K")
    assert "'0:2,5:4'" in last


# The names before 0.3.0 that counted windows as "updates" (CHANGELOG, "Renamed").
RENAMED = {
    "train_updates": "train_windows",
    "updates_per_epoch": "windows_per_epoch",
    "tuning_updates": "tuning_windows",
}


def test_the_names_before_0_3_0_are_declared_once_where_they_were_renamed():
    olds = {
        spec.renamed_from: name
        for concern in options.CONCERNS.values()
        for name, spec in specs(concern).items()
        if spec.renamed_from
    }
    assert olds == RENAMED
    assert "updates_per_epoch" in settings_lib.accepted_names()  # a saved pipeline's property
    assert "updates_per_epoch" not in settings_lib.field_names()


def test_an_old_trainer_setting_still_works_with_a_warning_naming_the_new_one():
    with pytest.warns(FutureWarning, match=r"'updates_per_epoch' is deprecated: use "):
        settings = settings_lib.from_dict(
            dict(accum_steps=2, micro_batch_size=4, label_key="y", updates_per_epoch=5)
        )
    assert settings.windows_per_epoch == 5
    with pytest.raises(SettingError, match="updates_per_epoch is the old name of windows_per"):
        settings_lib.from_dict(
            dict(
                accum_steps=2,
                micro_batch_size=4,
                label_key="y",
                updates_per_epoch=5,
                windows_per_epoch=5,
            )
        )


def test_old_option_names_still_work_with_a_warning_naming_the_new_ones():
    with pytest.warns(FutureWarning) as warned:
        made = options.TrainingOptions.of(train_updates=30, updates_per_epoch=10, tuning_updates=3)
    assert made == options.TrainingOptions.of(
        train_windows=30, windows_per_epoch=10, tuning_windows=3
    )
    said = sorted(str(w.message) for w in warned)
    assert said == sorted(
        f"options setting {old!r} is deprecated: use {new!r} (the old name goes in 0.4.0)."
        for old, new in RENAMED.items()
    )


def test_old_flags_still_work_hidden_with_one_line_each_naming_the_new_flag(capsys):
    old = ["run", "--train-updates", "30", "--updates-per-epoch", "10", "--tuning-updates", "3"]
    new = ["run", "--train-windows", "30", "--windows-per-epoch", "10", "--tuning-windows", "3"]
    parser = cli.build_parser()
    assert options.from_flags(parser.parse_args(old)) == options.from_flags(parser.parse_args(new))
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"ga-tfx run: warning: --{o.replace('_', '-')} is deprecated: use "
        f"--{n.replace('_', '-')} (the old name goes in 0.4.0)."
        for o, n in RENAMED.items()
    ]
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--help"])
    shown = capsys.readouterr().out
    assert "--train-windows" in shown and "--train-updates" not in shown
