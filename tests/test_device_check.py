"""The accelerator check (``benchmarks/device_check.py``) runs, and says what it found.

On this CPU machine (no GPU) its ``--quick`` sizes run every section that does not need a GPU:
the half-precision accumulation must pass its weight-level bound, the memory section must report
its pick and that pick's training peak (an INFO line on a CPU, whose peaks vary too much between
runs for a verdict at a budget between two sizes), the real out-of-memory section must say it
needs a GPU, and the speed lines must carry their ratios. On a GPU the same test runs
the out-of-memory section for real.
"""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = [pytest.mark.slow]  # about 80 s: two precisions, four probes, Keras 3's process


def test_the_device_check_runs_and_reports_each_claim(tmp_path):
    out = tmp_path / "DEVICE.md"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.device_check", "--quick", "--output", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    print(done.stdout)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("device: ")
    for policy in ("mixed_float16", "mixed_bfloat16"):
        assert any(line.startswith(f"PASS precision {policy}: ") for line in lines)
    gpu = lines[0].startswith("device: GPU")
    memory = next(line for line in lines if " memory on " in line)
    assert memory.startswith("PASS memory on GPU" if gpu else "INFO memory on CPU")
    assert re.search(
        r"picked \d+ x \d+; its training peaks at [\d.]+ MiB|No micro-batch fits memory_budget=",
        memory,
    )
    assert any(line.startswith("PASS oom: " if gpu else "SKIP oom: needs a GPU") for line in lines)
    speed = next(line for line in lines if line.startswith("INFO speed: ga-tfx "))
    assert len(re.findall(r"ga-tfx / it (\d+\.\d+)", speed)) == 2
    assert any(line.startswith("INFO noise scale: ") for line in lines)
    assert not any(line.startswith("FAIL") for line in lines)
    assert out.read_text().count("\n") >= len(lines)
