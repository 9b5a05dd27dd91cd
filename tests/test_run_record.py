"""The Trainer's run record (``model_run/ga_tfx_run.json``) and the run summary that reads it."""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx.components.trainer import run_record
from ga_tfx.pipelines import local

import dataclasses
import json

import pytest

pytestmark = [pytest.mark.tfx]  # the record is written with TFX's file system layer

RECORD = run_record.RunRecord(
    windows=8,
    windows_this_run=4,
    resumed_from_window=4,
    effective_batch_size=64,
    micro_batch_size=32,
    accum_steps=2,
    replicas=1,
    skipped_windows=0,
    samples_per_second=1234.5,
    final_metrics={"loss": 0.5, "val_accuracy": 0.75},
)


def test_record_round_trips_as_plain_json(tmp_path):
    path = run_record.write(str(tmp_path / "model_run"), RECORD)
    with open(path) as f:
        assert json.load(f) == dataclasses.asdict(RECORD)  # machine-readable, no pickles
    assert run_record.read(str(tmp_path / "model_run")) == RECORD
    assert run_record.read(str(tmp_path / "nothing_here")) is None


def test_a_record_written_before_0_3_0_reads_with_todays_keys(tmp_path):
    """0.2.0 named the windows ``updates``, ``updates_this_run``, ``resumed_from_update``."""
    before = {new: old for old, new in run_record.OLD_KEYS.items()}
    old = {before.get(k, k): v for k, v in dataclasses.asdict(RECORD).items()}
    assert {"updates", "updates_this_run", "resumed_from_update"} <= set(old)
    (tmp_path / "model_run").mkdir()
    with open(run_record.path(str(tmp_path / "model_run")), "w") as f:
        json.dump(old, f)
    assert run_record.read(str(tmp_path / "model_run")) == RECORD


@pytest.mark.parametrize("window,line", [(4, "resumed: after window 4"), (None, "resumed: no")])
def test_summary_says_whether_the_trainer_resumed(window, line):
    summary = local.RunSummary(
        effective_batch_size=64,
        windows=8,
        hyperparameters={},
        metrics={},
        blessed=True,
        pushed_model=None,
        serving_model=None,
        cached_components=[],
        resumed_after_window=window,
    )
    assert line in summary.lines()


def test_summary_shows_the_schedule_used_and_the_noise_scale():
    summary = local.RunSummary(
        effective_batch_size=64,
        windows=8,
        hyperparameters={},
        metrics={},
        blessed=True,
        pushed_model=None,
        serving_model=None,
        cached_components=[],
        accum_schedule_used=[[0, 2], [4, 8]],
        noise_scale=123.456,
    )
    lines = summary.lines()
    assert "accum_steps used:     K=2 from window 0, K=8 from window 4" in lines
    assert "noise scale B_simple: 123.5 samples at the end of training" in lines
    constant = dataclasses.replace(summary, accum_schedule_used=[[0, 4]], noise_scale=None)
    assert not any("accum_steps used" in line or "noise scale" in line for line in constant.lines())
