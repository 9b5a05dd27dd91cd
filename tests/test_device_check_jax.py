"""The JAX device check (``benchmarks/device_check_jax.py``, made for the lent GPU machine: JAX,
keras 3, no TensorFlow) runs its ``--quick`` sizes on the CPU and says what it found: the two
float32 exactness verdicts pass (the masked case with Keras 3's built-in far off, so the mask
reached the loss), bfloat16 is a SKIP with its distance measured, memory is "not available" on a
CPU, the speed ratios are there, the out-of-memory replay is reported as not available on JAX
yet, no TensorFlow was imported, and the report (Markdown and JSON) holds the device, the
command and the commit. The memory section's GPU branch (a batch beyond the device) is checked
with stand-in children."""

import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = [pytest.mark.keras3, pytest.mark.keras3_backend("jax")]


@pytest.mark.slow  # about a minute on 2 cores: 8 trainings, 3 child processes, 3 speed rounds
def test_the_quick_device_check_runs_and_reports_each_claim(tmp_path):
    out = tmp_path / "DEVICE_JAX.md"
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONUNBUFFERED="1")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.device_check_jax", "--quick", "--output", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    print(done.stdout)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("device: CPU")
    for model in ("conv net + AccumBatchNormalization", "masked-token transformer"):
        verdict = next(line for line in lines if line.startswith(f"PASS exactness float32 {model}"))
        assert re.search(r"max\|dw\| \S+ <= \S+ \(64 u \(1 \+ movement", verdict)
        assert any(line.startswith(f"SKIP exactness mixed_bfloat16 {model}") for line in lines)
        assert any(line.startswith(f"INFO exactness mixed_bfloat16 {model}") for line in lines)
    builtin = next(line for line in lines if "the divisor case" in line)
    assert float(re.search(r"max\|dw\| (\S+) from", builtin).group(1)) > 1e-3
    assert any(line.startswith("INFO memory: peak_bytes_in_use not available") for line in lines)
    assert any(line.startswith("SKIP memory beyond the device") for line in lines)
    ratios = [line for line in lines if line.startswith("INFO speed: ga / ")]
    assert len(ratios) == 3 and all(re.search(r": \d+\.\d+ \[", line) for line in ratios)
    assert any(line.startswith("SKIP oom: not available on Keras 3 JAX yet") for line in lines)
    assert "PASS imports: TensorFlow not imported (sys.modules)" in lines
    assert not any(line.startswith("FAIL") for line in lines)
    text = out.read_text()
    assert "python -m benchmarks.device_check_jax --quick" in text and "CPU" in text
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["device"].startswith("CPU") and report["commit"]
    assert report["command"] == "python -m benchmarks.device_check_jax --quick"
    assert report["lines"] == lines
    assert set(report["sections"]) == {"exactness", "memory", "speed", "oom"}


GIB = 2**30


def _child(kind, b, k, quick, limit=140 * GIB, per_sample=8 * 2**20, fixed=GIB):
    """A stand-in memory child on a device of ``limit`` bytes: peak = fixed + batch · bytes per
    sample (ga: one micro-batch); a batch over the limit fails with the device's error."""
    batch = b
    peak = fixed + batch * per_sample
    if peak > limit:
        error = "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 212.3GiB."
        return {
            "kind": kind,
            "b": b,
            "k": k,
            "trained": False,
            "oom": True,
            "error": error,
            "peak": fixed,
            "limit": limit,
        }
    return {
        "kind": kind,
        "b": b,
        "k": k,
        "trained": True,
        "finite": True,
        "peak": peak,
        "limit": limit,
        "tensorflow_imported": False,
    }


def _memory_lines(monkeypatch, child):
    monkeypatch.setenv("KERAS_BACKEND", "jax")  # what the module sets, undone after the test
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    from benchmarks import device_check_jax

    monkeypatch.setattr(device_check_jax, "_run_memory_child", child)
    return device_check_jax.memory(quick=False)


def test_the_memory_section_on_a_gpu_says_plain_could_not_train_where_ga_did(monkeypatch):
    lines, record = _memory_lines(monkeypatch, _child)
    assert lines[0].startswith("PASS memory: peak_bytes_in_use ga(512, 8)")
    beyond = lines[1]
    assert beyond.startswith("PASS memory beyond the device: K'=64")  # 1.5 x 140 GiB / 4 GiB
    assert "ga(512, 64) trained" in beyond and "plain(32768) could not train: RESOURCE_EX" in beyond
    assert record["big_k"] == 64


def test_the_memory_section_fails_when_plain_fits_beyond_the_device(monkeypatch):
    def roomy(kind, b, k, quick):  # a device that grew: plain's batch fits after all
        result = _child(kind, b, k, quick, limit=10**15)
        result["limit"] = 140 * GIB
        return result

    lines, _ = _memory_lines(monkeypatch, roomy)
    assert lines[1].startswith("FAIL memory beyond the device") and "K' too small" in lines[1]
