"""Distributed Keras Tuner over ``AccumulationHyperModel``: a chief oracle and two workers on
127.0.0.1 (``tests/distributed_tuning_worker.py``), compared with a single-process search."""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)

import json
import os
import time

import pytest

from tests import distributed_tuning_worker as worker
from tests.worker_processes import free_ports, start_tuner, stop_all

pytestmark = [pytest.mark.slow]  # a chief and two worker processes (no TFX)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_S = 240


def _start(tuner_id, port, tmp_path, log):
    args = [
        "--directory",
        str(tmp_path / tuner_id),
        "--out",
        str(tmp_path / f"{tuner_id}.json"),
        "--barrier",
        str(tmp_path / "barrier"),
        "--workers",
        "2",
    ]
    return start_tuner("tests.distributed_tuning_worker", tuner_id, port, log, args)


def test_chief_and_two_workers_search_accum_steps_like_a_single_process(tmp_path):
    (tmp_path / "barrier").mkdir()
    (port,) = free_ports(1)
    processes, logs = {}, {}
    try:
        for tuner_id in ("chief", "tuner0", "tuner1"):
            logs[tuner_id] = open(tmp_path / f"{tuner_id}.log", "w")
            processes[tuner_id] = _start(tuner_id, port, tmp_path, logs[tuner_id])

        # Meanwhile, the same search in this process (no KERASTUNER_* variables here).
        assert not any(name.startswith("KERASTUNER_") for name in os.environ)
        single = worker.make_tuner(str(tmp_path / "single"))
        x, y = worker.data()
        single.search(x, y, epochs=1, verbose=0)
        single_summary = worker.summary(single)

        deadline = time.monotonic() + TIMEOUT_S
        for process in processes.values():
            process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        stop_all(processes, logs)

    def tail(tuner_id):
        return (tmp_path / f"{tuner_id}.log").read_text()[-3000:]

    for tuner_id, process in processes.items():
        assert process.returncode == 0, f"{tuner_id} failed:\n{tail(tuner_id)}"

    chief = json.loads((tmp_path / "chief.json").read_text())
    ran = {
        tuner_id: json.loads((tmp_path / f"{tuner_id}.json").read_text())["ran"]
        for tuner_id in ("tuner0", "tuner1")
    }
    # Both workers ran trials, and together exactly the chief oracle's trials.
    assert all(ran.values()), ran
    assert sorted(ran["tuner0"] + ran["tuner1"]) == sorted(t["trial_id"] for t in chief["trials"])
    assert len(chief["trials"]) == worker.MAX_TRIALS
    assert {t["status"] for t in chief["trials"]} == {"COMPLETED"}
    assert {t["values"]["accum_steps"] for t in chief["trials"]} == {1, 2, 4}
    for trial in chief["trials"]:
        k = trial["values"]["accum_steps"]
        assert trial["metrics"]["effective_batch_size"] == 8 * k
        assert trial["metrics"]["samples_seen"] == worker.SAMPLES  # equal budgets
        assert trial["metrics"]["updates"] == worker.SAMPLES // (8 * k)

    # The same results as the single-process search, by value: each accum_steps trial trains
    # the same seeded model on the same data in both searches, so its metrics agree to float32
    # round-off (the workers run one thread each: 1e-5 relative).
    by_k = {t["values"]["accum_steps"]: t for t in single_summary["trials"]}
    for trial in chief["trials"]:
        reference = by_k[trial["values"]["accum_steps"]]
        assert trial["values"] == reference["values"]
        assert set(trial["metrics"]) == set(reference["metrics"])
        for name, value in trial["metrics"].items():
            assert value == pytest.approx(reference["metrics"][name], rel=1e-5), name
    assert chief["best_values"] == single_summary["best_values"]
    assert chief["space"] == single_summary["space"]
    assert set(chief["best_values"]) == set(single_summary["best_values"])
    assert chief["best_values"]["accum_steps"] in (1, 2, 4)
    assert (
        set(chief["best_metrics"])
        == set(single_summary["best_metrics"])
        >= {"loss", "effective_batch_size", "samples_seen", "updates"}
    )
    assert {t["values"]["accum_steps"] for t in single_summary["trials"]} == {1, 2, 4}
