"""TrainingLoop under MultiWorkerMirroredStrategy: 2 worker processes on 127.0.0.1.

Each worker runs tests/training_loop_worker.py: uneven micro-batches, a short last window, a NaN
window skipped in each epoch; with SGD (Nesterov momentum) an interruption inside a window and
a resume by new objects from the shared checkpoint directory, with Adam one uninterrupted run.
The result must equal big-batch training on one device
(this process) over the applied windows, within float32 round-off (1e-5, see
tests/test_training_loop.py), and only the chief may write checkpoints and TensorBoard logs.
The gradient noise scale the workers measure on the closed-form problem of
tests/test_noise_scale.py (B_small: a replica's micro-batch, so 2 x K small gradients per
window) must land within 10 % of the true B_simple, on both workers alike.
"""

import glob
import json
import os
import time

import numpy as np
import pytest

from tests import test_noise_scale as closed_form
from tests import training_loop_worker as worker
from tests.test_training_loop import TOLERANCE, big_batch, max_diff
from tests.worker_processes import run_workers

pytestmark = [pytest.mark.slow]

TIMEOUT_S = 480  # 2 TensorFlow worker processes on 2 busy cores


def _run_workers(tmp_path):
    run_workers(
        tmp_path,
        "tests.training_loop_worker",
        lambda index: [tmp_path / f"w{index}", tmp_path / "checkpoints"],
        timeout_s=TIMEOUT_S,
    )


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

    # The noise scale: one estimate (the workers agree), every window measured.
    assert stats[0]["noise_scale"] == stats[1]["noise_scale"]
    true = closed_form.TRUE_B_SIMPLE
    print(f"noise scale, 2 workers: {stats[0]['noise_scale']:.3f}, true {true}")
    for s in stats:
        assert abs(s["noise_scale"] - true) <= 0.10 * true
        assert s["noise_windows"] == closed_form.WINDOWS

    # Reference: one device, big batches of the applied windows (the NaN window left out).
    x, y = worker.data()
    size = worker.MICRO * worker.K
    windows = [(x[s : s + size], y[s : s + size]) for s in range(0, len(x), size)]
    applied = [w for i, w in enumerate(windows) if i != 1] * worker.EPOCHS
    initial = worker.build_model(22).get_weights()
    for name, suffix in (("sgd", ""), ("adam", "_adam")):
        reference = worker.build_model(22)
        big_batch(reference, worker.OPTIMIZERS[name](), applied)
        chief, other = (_weights(tmp_path / f"w{i}" / f"weights{suffix}.npz") for i in range(2))
        assert max_diff(chief, other) == 0.0  # one set of mirrored weights
        diff = max_diff(chief, reference.get_weights())
        print(f"{name}: max |w_2workers - w_big_batch| = {diff:.3g}")
        assert diff <= TOLERANCE, (name, diff)
        assert max_diff(initial, reference.get_weights()) > 1e-2

    # Only the chief wrote TensorBoard events; checkpoints went to the shared directory
    # (written by the chief), the other worker's temporary copies are gone.
    assert glob.glob(str(tmp_path / "w0" / "logs" / "events.out.tfevents.*"))
    assert not os.path.exists(tmp_path / "w1" / "logs")
    assert glob.glob(str(tmp_path / "checkpoints" / "ckpt-*.index"))
    assert not glob.glob(str(tmp_path / "tmp1" / "ga_tfx_loop_worker_*"))
