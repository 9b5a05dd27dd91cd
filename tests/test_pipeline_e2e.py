"""The digits pipeline end to end with LocalDagRunner on the shipped data (kept small).

One pipeline store serves the whole module, in three runs:
1. ExampleGen .. Tuner run; the Trainer dies after its first checkpoint (an injected crash);
2. the re-run reuses every upstream output from the cache, the Trainer resumes from its
   checkpoint, the Evaluator blesses the model and the Pusher pushes it;
3. a third run is served entirely from the cache.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx._keras import tf
from ga_tfx.components import stack
from ga_tfx.components.trainer import checkpoints
from ga_tfx.pipelines import beam, cli, digits, local
from ga_tfx.pipelines.pipeline import TrainingOptions

import csv
import glob
import os

import numpy as np
import pytest
from tfx import version as tfx_version

from tests.helpers import PIPELINE_COMPONENTS

# The TFX pipeline end to end; its slow tests run on both TFX stacks (`stack`, tests/README.md).
pytestmark = [pytest.mark.tfx, pytest.mark.stack]

OPTIONS = TrainingOptions.of(
    accum_steps=2,
    micro_batch_size=32,
    train_windows=8,
    windows_per_epoch=4,
    eval_steps=4,
    checkpoint_every_updates=4,
    tune=True,
    search_accum_steps=(1, 2),
    tuning_trials=2,
    tuning_windows=2,
    min_accuracy=0.3,
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("digits")
    args = ("ga-tfx-e2e", str(root / "root"), cli.SHIPPED_DATA, str(root / "serving"), OPTIONS)
    kwargs = dict(metadata_path=str(root / "metadata.db"))

    save = checkpoints.UpdateCheckpoint.save

    def save_then_crash(self):
        save(self)
        raise RuntimeError("the Trainer's machine went away after its first checkpoint")

    checkpoints.UpdateCheckpoint.save = save_then_crash
    try:
        with pytest.raises(Exception, match="went away"):
            local.run(*args, **kwargs)
    finally:
        checkpoints.UpdateCheckpoint.save = save
    assert not os.path.exists(root / "serving")  # nothing pushed by the failed run
    resumed = local.run(*args, **kwargs)
    cached = local.run(*args, **kwargs)
    return root, resumed, cached


@pytest.mark.slow  # three pipeline runs (the module's store)
def test_rerun_resumes_the_trainer_and_pushes_a_blessed_model(runs):
    root, summary, _ = runs
    print("\n".join(summary.lines()))
    assert set(summary.cached_components) == PIPELINE_COMPONENTS - {
        "GradientAccumulationTrainer",
        "Evaluator",
        "Pusher",
    }
    # The Tuner chose accum_steps among (1, 2); the Trainer trained with it.
    assert summary.hyperparameters["accum_steps"] in (1, 2)
    assert summary.effective_batch_size == 32 * summary.hyperparameters["accum_steps"]
    assert summary.windows == 8
    (run_dir,) = glob.glob(str(root / "root" / "GradientAccumulationTrainer" / "model_run" / "*"))
    # Only the re-run's execution reached export; it made updates 5..8 (resumed after 4).
    steps = sorted(
        {
            event.step
            for path in glob.glob(os.path.join(run_dir, "ga_tfx", "events*"))
            for event in tf.compat.v1.train.summary_iterator(path)
            if any(v.tag == "ga_tfx/updates" for v in event.summary.value)
        }
    )
    assert steps == [5, 6, 7, 8]
    assert summary.metrics["sparse_categorical_accuracy"] >= OPTIONS.blessing.min_accuracy
    assert summary.metrics["example_count"] > 400  # the eval split of 1797 images (1/3)
    assert summary.blessed
    assert summary.pushed_model.startswith(str(root / "serving"))
    # The run record names the stack the Trainer ran on, and the summary shows it.
    assert summary.stack == stack.versions() and summary.stack["TFX"] == tfx_version.__version__
    assert f"trained on:           {stack.line()}" in summary.lines()


@pytest.mark.slow  # three pipeline runs (the module's store)
def test_pushed_model_answers_serialized_examples(runs):
    _, summary, _ = runs
    model = tf.saved_model.load(summary.pushed_model)
    with open(os.path.join(cli.SHIPPED_DATA, "digits.csv")) as f:
        rows = list(csv.DictReader(f))[:16]
    examples = [
        tf.train.Example(
            features=tf.train.Features(
                feature={
                    key: tf.train.Feature(int64_list=tf.train.Int64List(value=[int(row[key])]))
                    for key in digits.PIXEL_KEYS
                }
            )
        ).SerializeToString()
        for row in rows
    ]
    (probabilities,) = model.signatures["serving_default"](examples=tf.constant(examples)).values()
    assert probabilities.shape == (16, 10)
    np.testing.assert_allclose(probabilities.numpy().sum(axis=1), 1.0, atol=1e-5)
    labels = np.array([int(row["label"]) for row in rows])
    accuracy = float(np.mean(probabilities.numpy().argmax(axis=1) == labels))
    print(f"accuracy on 16 shipped images through serving_default: {accuracy}")
    assert accuracy > 0.3  # ten classes: chance is 0.1


@pytest.mark.slow  # three pipeline runs (the module's store)
def test_third_run_is_served_from_the_cache(runs):
    _, resumed, cached = runs
    assert set(cached.cached_components) == PIPELINE_COMPONENTS
    assert cached.pushed_model == resumed.pushed_model
    assert cached.metrics == resumed.metrics


# ---------------------------------------------------------------------- bad input, nothing runs
def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path.parent)


@pytest.mark.parametrize(
    "make_data,message",
    [
        (lambda tmp: str(tmp / "no_such_dir"), "does not exist"),
        (lambda tmp: _write(tmp / "empty" / "d.csv", ""), "is empty"),
        (
            lambda tmp: _write(tmp / "header" / "d.csv", ",".join(digits.COLUMNS) + "\n"),
            "no data rows",
        ),
        (
            lambda tmp: _write(
                tmp / "wrong" / "d.csv",
                ",".join(digits.PIXEL_KEYS[:-1] + ("pixel_99", "label"))
                + "\n"
                + ",".join(["1"] * 65)
                + "\n",
            ),
            r"missing \['pixel_63'\], unexpected \['pixel_99'\]",
        ),
        (lambda tmp: str((tmp / "no_csv").mkdir() or tmp / "no_csv"), "no .csv file"),
    ],
)
def test_bad_data_fails_before_any_component_runs(tmp_path, capsys, make_data, message):
    data_root = make_data(tmp_path)
    out = tmp_path / "out"
    assert cli.main(["run", "--data-root", data_root, "--output-dir", str(out)]) == 2
    error = capsys.readouterr().err
    assert "ga-tfx run: error:" in error
    assert __import__("re").search(message, error), error
    assert not out.exists()  # no store, no artifacts, nothing reported as done


def test_bad_flags_and_settings_are_rejected_with_the_value(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", "--acum-steps", "4"])
    assert exit_info.value.code == 2
    assert "unrecognized arguments: --acum-steps" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["run", "--accum-steps", "0"])
    assert "accum_steps must be an integer >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["run", "--search-accum-steps", "1,two"])
    assert "search_accum_steps must be a list of integers >= 1" in capsys.readouterr().err
    out = tmp_path / "out"
    assert (
        cli.main(
            ["run", "--output-dir", str(out), "--train-windows", "10", "--windows-per-epoch", "4"]
        )
        == 2
    )
    assert "windows_per_epoch=4 must divide" in capsys.readouterr().err
    assert not out.exists()


def test_help_explains_the_flags(capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    text = capsys.readouterr().out
    for flag in (
        "--accum-steps",
        "--micro-batch",
        "--tune",
        "--output-dir",
        "--data-root",
        "--direct-num-workers",
        "--no-cache",
    ):
        assert flag in text


def test_no_cache_and_direct_num_workers_reach_the_pipeline(tmp_path, monkeypatch, capsys):
    """``ga-tfx run --no-cache --direct-num-workers N``: the pipeline handed to LocalDagRunner
    (replaced here: no component runs) has caching off and Beam's multi-processing
    DirectRunner with N workers; without the flags, caching on and the in-memory runner."""
    pipelines = []

    class RecordingRunner:
        def run(self, pipeline):
            pipelines.append(pipeline)

    monkeypatch.setattr(local.tfx.orchestration, "LocalDagRunner", RecordingRunner)
    monkeypatch.setattr(
        local,
        "summarize",
        lambda config: type("Summary", (), {"lines": lambda self: ["(not run)"]})(),
    )
    assert (
        cli.main(
            ["run", "--output-dir", str(tmp_path / "a"), "--no-cache", "--direct-num-workers", "3"]
        )
        == 0
    )
    assert cli.main(["run", "--output-dir", str(tmp_path / "b")]) == 0
    flagged, default = pipelines
    assert flagged.enable_cache is False and default.enable_cache is True
    # Beam's in-process runner named (not DirectRunner, which tries Prism first), and the flag
    # that spares TFX building a package of itself (pipelines/beam.py).
    assert flagged.beam_pipeline_args == [
        beam.IN_PROCESS_RUNNER,
        "--direct_running_mode=multi_processing",
        "--direct_num_workers=3",
        beam.NO_PACKAGE_FLAG,
    ]
    assert default.beam_pipeline_args == [
        beam.IN_PROCESS_RUNNER,
        "--direct_running_mode=in_memory",
        "--direct_num_workers=1",
        beam.NO_PACKAGE_FLAG,
    ]
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", "--direct-num-workers", "-1"])
    assert exit_info.value.code == 2
    assert "-1" in capsys.readouterr().err
