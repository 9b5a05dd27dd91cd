"""GradientAccumulateOptimizer under MultiWorkerMirroredStrategy: 2 worker processes on
127.0.0.1 (tests/optimizer_multi_worker_script.py, the custom loop of
tests/test_optimizer_distributed.py) == plain big-batch training on one device, this process."""

import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.test_optimizer_distributed import (OPTIMIZERS, SIZES, UPDATES, K,
                                              big_batch_reference)

pytestmark = [pytest.mark.slow]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_S = 420  # two TensorFlow worker processes on 2 busy cores
# float32 round-off of the window sum taken per worker, all-reduced, then scaled (see
# tests/test_optimizer_distributed.py); the two workers hold one set of mirrored weights.
TOLERANCE = 1e-5


def _free_ports(n):
    # tests/test_multi_worker.py has the same helper, but importing it imports TFX.
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _run_workers(tmp_path):
    workers = [f"127.0.0.1:{port}" for port in _free_ports(2)]
    procs = []
    for index in range(2):
        env = dict(os.environ, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2",
                   TF_CONFIG=json.dumps({"cluster": {"worker": workers},
                                         "task": {"type": "worker", "index": index}}))
        with open(tmp_path / f"worker{index}.log", "w") as log:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "tests.optimizer_multi_worker_script",
                 str(tmp_path / f"w{index}")],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            if any(p.poll() not in (None, 0) for p in procs):
                break
            time.sleep(0.5)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    codes = [p.returncode for p in procs]
    if codes != [0, 0]:
        tails = "\n".join(f"--- worker {i} (exit {code}):\n" + "".join(
            open(tmp_path / f"worker{i}.log").readlines()[-25:]) for i, code in enumerate(codes))
        raise AssertionError(f"multi-worker run failed, exit codes {codes}:\n{tails}")


def _weights(path):
    with np.load(path) as data:
        return [data[f"arr_{i}"] for i in range(len(data.files))]


def _max_diff(a, b):
    assert [w.shape for w in a] == [w.shape for w in b]
    return max(float(np.max(np.abs(u - v))) for u, v in zip(a, b))


def test_two_workers_custom_loop_matches_big_batch(tmp_path):
    start = time.monotonic()
    _run_workers(tmp_path)
    print(f"two workers: {time.monotonic() - start:.1f}s")
    expected = ([False] * (K - 1) + [True]) * (len(SIZES) // K) + [False] * (len(SIZES) % K)
    for name in sorted(OPTIMIZERS):
        reference, _ = big_batch_reference(OPTIMIZERS[name])
        chief, other = (_weights(tmp_path / f"w{i}" / f"{name}.npz") for i in range(2))
        for index in range(2):
            summary = json.loads((tmp_path / f"w{index}" / "summary.json").read_text())[name]
            assert summary == {"updates": UPDATES, "applied": expected + [True]}, (index, name)
        assert _max_diff(chief, other) == 0.0  # one set of mirrored weights
        diff = _max_diff(chief, reference.get_weights())
        print(f"{name}: max |w_2workers - w_big_batch| = {diff:.3g}")
        assert diff <= TOLERANCE, (name, diff)
