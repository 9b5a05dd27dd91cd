"""strategy="multi_worker": 2 worker processes on 127.0.0.1 == plain big-batch training.

Each worker runs the real run_fn (tests/multi_worker_script.py) with its own ``TF_CONFIG``,
K=2 windows of a global micro-batch of 8 (4 per worker); the reference is plain Keras ``fit``
on batches of K x 8 = 16 in this process (no ga-tfx, no Trainer: the examples read apart from
TFXIO in the order the Trainer reads them), so a bug in run_fn or the data path shows. The
optimizers: SGD and SGD with momentum (steps proportional to the gradient: a gradient off by
any factor, e.g. the number of workers, moves the weights by that factor) and Adam
(per-variable state). Unlike in a TFX job (where all workers get the same output URIs), each
worker here gets its own outputs so that what each one wrote can be told apart; the resume
checkpoints, derived from the component directory, are shared as in TFX.
"""

import glob
import os
import time

import numpy as np
import pytest

from tests.multi_worker_script import hyperparameters
from tests.test_trainer_component import _module, _plain_keras_big_batch, _scalars
from tests.worker_processes import workers_running

pytestmark = [pytest.mark.tfx, pytest.mark.slow]  # the TFX Trainer's run_fn in 2 workers

MICRO, K, WINDOWS = 8, 2, 3  # global micro-batch of 8 = 4 examples per worker
OPTIMIZERS = ("sgd", "sgd_momentum", "adam")
# float32 round-off: the workers' all-reduce sums the gradient in another order than one
# big batch does, a few ulp (eps = 1.2e-7) of each gradient; the weights (|w| < 2) move by
# 1e-2 to 1e-1 in 3 updates. 1e-5 is ~40 ulp of the largest weight, and a factor of 1.001 on
# the gradient would already exceed it.
TOLERANCE = 1e-5
TIMEOUT_S = 600  # 3 TensorFlow processes on 2 busy cores, 3 trainings each


def _weights(path):
    with np.load(path) as data:
        return [data[f"arr_{i}"] for i in range(len(data.files))]


def _updates(out):
    """The ga_tfx/updates scalars the run logged (optimizer.iterations after each update)."""
    return [
        value for _, value in _scalars(str(out / "model_run" / "ga_tfx")).get("ga_tfx/updates", [])
    ]


def _max_diff(a, b):
    assert [w.shape for w in a] == [w.shape for w in b]
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))


def test_two_workers_match_big_batch_training_and_only_the_chief_writes(tmp_path):
    module_file = _module(tmp_path)
    start = time.monotonic()
    with workers_running(
        tmp_path,
        "tests.multi_worker_script",
        lambda index: [
            tmp_path / f"w{index}",
            module_file,
            "multi_worker",
            MICRO,
            K,
            WINDOWS,
            ",".join(OPTIMIZERS),
        ],
        timeout_s=TIMEOUT_S,
        tail_lines=25,
    ):
        # The plain Keras references train while the workers start.
        big = {
            name: _plain_keras_big_batch(hyperparameters(name), MICRO * K, WINDOWS).get_weights()
            for name in OPTIMIZERS
        }
    print(f"two workers + references: {time.monotonic() - start:.1f}s")

    namespace = {}
    exec(open(module_file).read(), namespace)
    for name in OPTIMIZERS:
        chief = _weights(tmp_path / "w0" / name / "weights.npz")
        other = _weights(tmp_path / "w1" / name / "weights.npz")
        assert _updates(tmp_path / "w0" / name) == [float(u) for u in range(1, WINDOWS + 1)]
        assert _max_diff(chief, other) == 0.0  # the workers hold one set of mirrored weights
        diff = _max_diff(chief, big[name])
        initial = namespace["build_model"](hyperparameters(name)).get_weights()
        moved = _max_diff(initial, big[name])
        print(f"{name}: max |w_2workers - w_big_batch| = {diff:.3g} (weights moved {moved:.3g})")
        assert diff <= TOLERANCE, (name, diff)
        # Training moved the weights far beyond the tolerance: not a comparison of initial
        # weights, and a scale error would show.
        assert moved > 1000 * TOLERANCE, (name, moved)

        # Only the chief wrote the Trainer's outputs: its serving model and TensorBoard logs.
        for index, writes in ((0, True), (1, False)):
            out = tmp_path / f"w{index}" / name
            serving_dir = out / "model" / "Format-Serving"
            events = glob.glob(
                str(out / "model_run" / "**" / "events.out.tfevents.*"), recursive=True
            )
            assert os.path.exists(serving_dir / "saved_model.pb") == writes, index
            assert bool(os.path.exists(serving_dir) and os.listdir(serving_dir)) == writes, index
            assert bool(events) == writes, (index, events)
            assert any("/ga_tfx/" in path for path in events) == writes, index
    # The non-chief's temporary copies are removed; the finished training's checkpoints too.
    assert not glob.glob(str(tmp_path / "tmp*" / "ga_tfx_worker_*"))
    assert not glob.glob(str(tmp_path / ".ga_tfx_resume" / "*" / "*"))
