"""The quiet console of `ga-tfx run`: component lines, progress, the log file; the tuning report."""

from ga_tfx.components.trainer import progress
from ga_tfx.pipelines import tuning_report
from ga_tfx.pipelines.console import RunConsole

import io
import json
import logging
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.tfx]  # `ga-tfx run`'s console and tuning plot (the tfx extra)


def _absl(message, *args):
    logging.getLogger("absl").info(message, *args)


def test_component_lines_and_plain_progress_milestones():
    logging.getLogger("absl").setLevel(logging.INFO)
    out = io.StringIO()
    with RunConsole(verbose=True, stream=out):
        _absl("Component %s is running.", "CsvExampleGen")
        _absl("Component %s is finished.", "CsvExampleGen")
        _absl("Component %s is running.", "Transform")
        _absl("A cached execution %d is used.", 7)
        _absl("Component %s is finished.", "Transform")
        _absl("Component %s is running.", "Trainer")
        for window in range(1, 101):
            progress.report(
                label="Trainer",
                window=window,
                total=100,
                loss=1.0 / window,
                samples_per_second=512.0,
            )
        _absl("Component %s is finished.", "Trainer")
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["CsvExampleGen", "running"]
    assert lines[1].startswith("  CsvExampleGen      done in ")
    assert lines[3].startswith("  Transform          cached in ")
    windows = [line for line in lines if "window " in line]
    # Not a terminal: one plain line at 25, 50, 75 and 100 %, not one per window.
    assert [line.split()[2] for line in windows] == ["25/100", "50/100", "75/100", "100/100"]
    assert "512 samples/s" in windows[0] and "ETA" in windows[0]
    assert lines[-1].startswith("  Trainer            done in ")
    progress.report(label="Trainer", window=1, total=1)  # no listener once the console closed


def test_the_trainer_and_the_tuner_report_progress_in_windows(tmp_path):
    """The progress line counts windows, a skipped one included (window 3 of 3 after two
    updates): the Trainer's AccumulationLogger and a Tuner trial's callback report the window
    core's window count against a total in windows."""
    from ga_tfx import keras
    from ga_tfx.components.trainer import run_log
    from ga_tfx.components.tuner import trials

    from types import SimpleNamespace

    nan = float("nan")
    events = [  # window 2 skipped: 3 windows, 2 updates
        SimpleNamespace(window=w, update=u, samples=16, micro_batches=2, loss=0.5)
        for w, u in ((1, 1), (2, 1), (3, 2))
    ]
    logger = run_log.AccumulationLogger(str(tmp_path), total_windows=3)
    logger.set_model(keras.Sequential([keras.layers.Dense(1, input_shape=(2,))]))
    trial = trials._WindowProgress("Tuner trial 1/2", 3)
    out = io.StringIO()
    with RunConsole(verbose=True, stream=out):
        logger.on_train_begin()
        logger.on_epoch_begin(0)
        for callback in (logger, trial):
            for event in events:
                event.noise_scale = event.noise_trace = event.noise_grad_sq = nan
                callback.on_window_end(event)
            callback.on_train_batch_end(0)  # one call of the train function: three windows
        logger.on_train_end()
    lines = out.getvalue().splitlines()
    trainer = [line for line in lines if line.split()[:2] == ["Trainer", "window"]]
    tuner = [line for line in lines if line.split()[:4] == ["Tuner", "trial", "1/2", "window"]]
    assert [line.split()[2] for line in trainer] == ["3/3"], lines
    assert [line.split()[4] for line in tuner] == ["3/3"], lines


def test_everything_else_goes_to_the_log_file(tmp_path):
    script = (
        "import os, sys, logging, warnings\n"
        "from absl import logging as absl_logging\n"
        "from ga_tfx.pipelines.console import RunConsole\n"
        "with RunConsole() as console:\n"
        "    print('noise from print'); os.write(2, b'noise from C++\\n')\n"
        "    warnings.warn('noise from warnings', FutureWarning)\n"
        "    logging.getLogger('absl').setLevel(logging.INFO)\n"
        f"    log = console.keep_log({str(tmp_path)!r}, 'p')\n"
        "    absl_logging.warning('noise from absl')\n"
        "    console.line('for the person')\n"
        "print('after: ' + log)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "for the person"
    log = result.stdout.splitlines()[-1].split("after: ")[1]
    assert os.path.dirname(log) == str(tmp_path) and os.path.basename(log).startswith("p-")
    text = open(log).read()
    for noise in ("noise from print", "noise from C++", "noise from warnings", "noise from absl"):
        assert noise in text and noise not in result.stdout + result.stderr


def _record(trial_id, score, accum, agc=None, status="completed", run="r2"):
    values = {"accum_steps": accum, "micro_batch_size": 16, "agc": agc is not None}
    if agc is not None:
        values["agc_clip_factor"] = agc
    return {
        "run": run,
        "trial_id": trial_id,
        "status": status,
        "score": score,
        "values": values,
        "metrics": {"effective_batch_size": 16.0 * accum},
    }


def test_tuning_report_table_csv_and_plot(tmp_path):
    trials = tmp_path / "trials.jsonl"
    records = [
        _record("00", 0.5, 1, run="r1"),  # an older search: left out
        _record("07", 0.99, 8, run="r1"),  # (a trial id the latest search does not have)
        _record("00", 0.91, 1),
        _record("01", 0.97, 4, agc=0.02),
        _record("02", None, 2, status="failed"),
        _record("03", 0.95, 2),
    ]
    trials.write_text("".join(json.dumps(r) + "\n" for r in records))
    report = tuning_report.write(str(trials), str(tmp_path / "out"), "val_accuracy")
    # The report's columns, written out here (not read from tuning_report.COLUMNS): a column
    # dropped or moved in the code under test fails this line.
    columns = "trial accum_steps micro_batch effective_batch agc_clip_factor learning_rate"
    columns = (columns + " score noise_scale status").split()
    assert report["lines"][0].split() == columns
    order = [line.split()[0] for line in report["lines"][1:]]
    assert order == ["01", "03", "00", "02"]  # best first (accuracy: higher), failed last
    assert report["lines"][1].split()[3:5] == ["64", "0.02"]
    rows = open(report["csv"]).read().splitlines()
    assert rows[0] == ",".join(columns) and len(rows) == 5
    with open(report["png"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    loss = tuning_report.rows(tuning_report.read_trials(str(trials)), maximize=False)
    assert [r["trial"] for r in loss] == ["00", "03", "01", "02"]  # a loss: lower first
    # The objective names the direction: a loss (or an error) is minimised.
    for objective in ("val_loss", "error_rate"):
        lines = tuning_report.write(str(trials), str(tmp_path / objective), objective)["lines"]
        assert [line.split()[0] for line in lines[1:]] == ["00", "03", "01", "02"], objective
    assert tuning_report.write(str(tmp_path / "none.jsonl"), str(tmp_path), "loss") is None
