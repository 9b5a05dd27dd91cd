"""GradientAccumulateOptimizer under MultiWorkerMirroredStrategy: 2 worker processes on
127.0.0.1 (tests/optimizer_multi_worker_script.py, the custom loop of
tests/test_optimizer_distributed.py) == plain big-batch training on one device, this process."""

import json
import time

import numpy as np
import pytest

from tests.test_optimizer_distributed import OPTIMIZERS, SIZES, UPDATES, K, big_batch_reference
from tests.worker_processes import run_workers

pytestmark = [pytest.mark.slow]

TIMEOUT_S = 420  # two TensorFlow worker processes on 2 busy cores
# float32 round-off of the window sum taken per worker, all-reduced, then scaled (see
# tests/test_optimizer_distributed.py); the two workers hold one set of mirrored weights.
TOLERANCE = 1e-5


def _weights(path):
    with np.load(path) as data:
        return [data[f"arr_{i}"] for i in range(len(data.files))]


def _max_diff(a, b):
    assert [w.shape for w in a] == [w.shape for w in b]
    return max(float(np.max(np.abs(u - v))) for u, v in zip(a, b))


def test_two_workers_custom_loop_matches_big_batch(tmp_path):
    start = time.monotonic()
    run_workers(
        tmp_path,
        "tests.optimizer_multi_worker_script",
        lambda index: [tmp_path / f"w{index}"],
        timeout_s=TIMEOUT_S,
    )
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
