"""The README's main job (`ga-tfx demo`) end to end, on the shipped digits data, kept small."""

import subprocess
import sys

import pytest

# A subprocess running the whole demo (TensorFlow import, two trainings, the comparison).
pytestmark = [pytest.mark.slow]


def test_demo_reports_accumulation_equal_to_big_batch():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ga_tfx.pipelines.cli",
            "demo",
            "--epochs",
            "1",
            "--accum-steps",
            "4",
            "--micro-batch",
            "32",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert "effective batch 128" in lines[0]
    updates = [line.split("updates=")[1].split()[0] for line in lines if "updates=" in line]
    assert updates == ["12", "12"]  # 1500 images / 128 per update, last window partial
    max_dw = float(lines[-1].split("=")[-1])
    assert max_dw <= 1e-5
