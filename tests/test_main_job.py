"""The README's main job as a user runs it: ``ga-tfx run`` with its defaults on the shipped
digits data, in a fresh process, end to end (CsvExampleGen to Pusher). It runs on each proven
TFX stack (marker ``stack``): it must end blessed, at the accuracy the README shows for both."""

from ga_tfx.components import stack

import os
import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.tfx, pytest.mark.slow, pytest.mark.stack]  # a pipeline, ~1 min

# The README's figure is 0.9904 on TFX 1.16 and on TFX 1.21 (the Evaluator blesses at 0.8): a
# stack that trains the same model worse than this has changed something that matters.
MIN_ACCURACY = 0.97


def test_the_main_job_ends_blessed_on_this_stack(tmp_path):
    # A temporary folder of its own, which the run must leave as it found it: TFX's Beam
    # executors and its user-module packaging make folders there that nothing removes (about
    # 200 MB per run before ga-tfx passed Beam the flags that need no package and gave the run
    # a temporary folder of its own, removed at its end).
    temp = tmp_path / "TMPDIR"
    temp.mkdir()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ga_tfx.pipelines.cli",
            "run",
            "--output-dir",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ, TMPDIR=str(temp)),
    )
    assert os.listdir(temp) == [], os.listdir(temp)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    out = done.stdout
    assert "== ga-tfx pipeline ga-tfx-digits: done ==" in out, out
    assert re.search(r"^blessed: +yes$", out, re.MULTILINE), out
    accuracy = float(re.search(r"sparse_categorical_accuracy=([0-9.]+)", out).group(1))
    assert accuracy >= MIN_ACCURACY, out
    # The summary names the stack the Trainer ran on: this environment's.
    assert re.search(rf"^trained on: +{re.escape(stack.line())}$", out, re.MULTILINE), out
    print(out)
