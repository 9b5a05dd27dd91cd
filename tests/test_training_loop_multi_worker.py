"""TrainingLoop under MultiWorkerMirroredStrategy: 2 worker processes on 127.0.0.1.

Each worker runs tests/training_loop_worker.py: uneven micro-batches, a short last window, a NaN
window skipped in each epoch, an interruption inside a window and a resume by new objects
from the shared checkpoint directory. The result must equal big-batch training on one device
(this process) over the applied windows, within float32 round-off (1e-5, see
tests/test_training_loop.py), and only the chief may write checkpoints and TensorBoard logs.
"""

import glob
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from tests import training_loop_worker as worker
from tests.test_training_loop import TOLERANCE, big_batch, max_diff

pytestmark = [pytest.mark.slow]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_S = 480  # 2 TensorFlow worker processes on 2 busy cores


def _free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _run_workers(tmp_path):
    cluster = [f"127.0.0.1:{port}" for port in _free_ports(2)]
    procs = []
    for index in range(2):
        temp_dir = tmp_path / f"tmp{index}"
        temp_dir.mkdir()
        env = dict(os.environ, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2",
                   TMPDIR=str(temp_dir),
                   TF_CONFIG=json.dumps({"cluster": {"worker": cluster},
                                         "task": {"type": "worker", "index": index}}))
        with open(tmp_path / f"worker{index}.log", "w") as log:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "tests.training_loop_worker", str(tmp_path / f"w{index}"),
                 str(tmp_path / "checkpoints")],
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
            open(tmp_path / f"worker{i}.log").readlines()[-30:]) for i, code in enumerate(codes))
        raise AssertionError(f"multi-worker TrainingLoop failed, exit codes {codes}:\n{tails}")


def _weights(path):
    with np.load(path) as data:
        return [data[f"arr_{i}"] for i in range(len(data.files))]


def test_two_workers_match_big_batch_and_only_the_chief_writes(tmp_path):
    start = time.monotonic()
    _run_workers(tmp_path)
    print(f"two workers: {time.monotonic() - start:.1f}s")
    stats = [json.load(open(tmp_path / f"w{i}" / "stats.json")) for i in range(2)]
    for index, s in enumerate(stats):
        assert s["replicas"] == 2 and s["is_chief"] == (index == 0)
        # 2 epochs x (3 windows, the NaN one skipped); interrupted 1 micro-batch into a window.
        assert (s["updates"], s["iterations"], s["skipped_windows"]) == (4, 4, 2)
        assert s["pending_at_interrupt"] == 1

    # Reference: one device, big batches of the applied windows (the NaN window left out).
    x, y = worker.data()
    size = worker.MICRO * worker.K
    windows = [(x[s:s + size], y[s:s + size]) for s in range(0, len(x), size)]
    applied = [w for i, w in enumerate(windows) if i != 1] * worker.EPOCHS
    reference = worker.build_model(22)
    big_batch(reference, worker.make_optimizer(), applied)

    chief, other = (_weights(tmp_path / f"w{i}" / "weights.npz") for i in range(2))
    assert max_diff(chief, other) == 0.0  # one set of mirrored weights
    diff = max_diff(chief, reference.get_weights())
    print(f"max |w_2workers - w_big_batch| = {diff:.3g}")
    assert diff <= TOLERANCE, diff
    assert max_diff(worker.build_model(22).get_weights(), reference.get_weights()) > 1e-2

    # Only the chief wrote TensorBoard events; checkpoints went to the shared directory
    # (written by the chief), the other worker's temporary copies are gone.
    assert glob.glob(str(tmp_path / "w0" / "logs" / "events.out.tfevents.*"))
    assert not os.path.exists(tmp_path / "w1" / "logs")
    assert glob.glob(str(tmp_path / "checkpoints" / "ckpt-*.index"))
    assert not glob.glob(str(tmp_path / "tmp1" / "ga_tfx_loop_worker_*"))
