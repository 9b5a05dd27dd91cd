"""Workers launched by the job: the Trainer compiled with ``--trainer-workers 2`` runs as a Vertex
AI custom job of two replicas, in containers of the image, as Vertex runs it.

The job is compiled in the image (``ga-tfx compile --trainer-workers 2 --project ... --region ...
--strategy multi_worker``) and run step by step by the harness (``scripts/kfp_harness.py``). The
Trainer step's container runs TFX's Vertex training extension
(``ga_tfx.components.trainer.vertex_training.Executor``); its one call of Vertex's job service
reaches the harness's stand-in (``scripts/vertex_standin.py``), which starts the replicas of the
worker pools it was sent -- pool 0 the chief, pool 1 a worker -- as two containers with Vertex's
``CLUSTER_SPEC`` and ``TF_CONFIG`` on a network of their own. The run:

- starts exactly the compiled worker pools (image, replica counts, machine), each replica running
  ``tfx.scripts.run_executor`` with the ga-tfx Trainer executor, and both exit 0;
- ends at the weights of the one-worker Trainer on the same upstream outputs (the same effective
  batch of 128: micro-batches of 16 and K = 8 on one worker, a global micro-batch of 32 and K = 4
  on two), within the all-reduce's round-off;
- is evaluated and blessed, and the model pushed, from the chief's export.

Markers ``container`` and ``container_extra``: 10.5 to 28 minutes measured on the shared 2-core
machine (the upstream steps, the one-worker Trainer, the two-replica job with TFX's 30 s poll,
the Evaluator and the Pusher), left out of CI's container stage; run by
``.venv/bin/python -m pytest -m container tests/test_container_workers.py``.
"""

import json
import os
import sys

import numpy as np
import pytest

from tests import test_container_job as job_tests
from tests.test_container_job import (
    ONE_WORKER,
    TWO_WORKERS,
    compile_job,
    kfp_harness,
    new_run,
    trainer_of,
    trainer_outputs,
)

sys.path.insert(0, os.path.join(job_tests.ROOT, "scripts"))
import vertex_standin  # noqa: E402

# The fixtures of the compiled job's container tests: the image scripts/build_image.sh builds
# ($GA_TFX_IMAGE_TAG) and a work folder with the digits and the serving folder.
image, work = job_tests.image, job_tests.work
pytestmark = [pytest.mark.tfx, pytest.mark.slow, pytest.mark.container, pytest.mark.container_extra]

FLAGS = ("--train-windows", "24", "--windows-per-epoch", "12")
# float32 weights after 24 updates, the two workers' all-reduce summing in another order than
# one worker: measured 3.3e-7 (2026-11-28), about 3 float32 ulps at 1.0.
TOLERANCE = 1e-6
VERTEX = ("--trainer-workers", "2", "--project", kfp_harness.PROJECT, "--region", "us-central1")
REPLICA_COMMAND = [
    "python",
    "-m",
    "tfx.scripts.run_executor",
    "--executor_class_path",
    "ga_tfx.components.trainer.executor.Executor",
]


def compiled_pools(run):
    """The worker pools compiled into the Trainer step's ``custom_config``."""
    parameters = run.spec.root.dag.tasks[trainer_of(run)].inputs.parameters
    config = json.loads(parameters["custom_config"].runtime_value.constant.string_value)
    return config["ai_platform_training_args"]["job_spec"]["worker_pool_specs"]


def test_two_vertex_replicas_of_the_compiled_worker_pools_end_at_one_workers_weights(image, work):
    one = new_run(compile_job(image, work, "one", *FLAGS, *ONE_WORKER), image, work)
    for task in kfp_harness.task_order(one.spec):
        one.run_task(task)
        if task == trainer_of(one):
            break
    want = trainer_outputs(one)[1]

    two = new_run(compile_job(image, work, "vertex", *FLAGS, *TWO_WORKERS, *VERTEX), image, work)
    jobs = vertex_standin.attach(two)
    try:
        taken = two.cache_from(one)  # the upstream steps, as a backend's cache
        assert trainer_of(two) not in taken and len(taken) == 6, taken
        two.run()
    finally:
        jobs.close()

    ((job_id, job),) = jobs.jobs.items()
    assert job["state"] == "JOB_STATE_SUCCEEDED", job
    sent = job["body"]["request"]["custom_job"]["job_spec"]["worker_pool_specs"]
    compiled = compiled_pools(two)
    assert [int(pool["replica_count"]) for pool in sent] == [1, 1]
    for pool, want_pool in zip(sent, compiled):
        assert pool["container_spec"]["image_uri"] == want_pool["container_spec"]["image_uri"]
        assert pool["container_spec"]["image_uri"] == image
        assert pool["machine_spec"]["machine_type"] == want_pool["machine_spec"]["machine_type"]
        assert pool["container_spec"]["command"][:5] == REPLICA_COMMAND
    started = [(r.host, r.pool, r.index) for r in job["replicas"]]
    assert started == [
        (f"cmle-training-workerpool0-{job_id}-0", 0, 0),
        (f"cmle-training-workerpool1-{job_id}-0", 1, 0),
    ]
    assert job["exit_codes"] == {host: 0 for host, _, _ in started}
    for host, _, _ in started:
        with open(os.path.join(two.run_dir, "logs", f"{host}.log")) as f:
            log = f.read()
        assert "ga_tfx: " in log and ", 2 replicas, " in log, log[-3000:]  # one cluster

    record, got = trainer_outputs(two)
    assert record["replicas"] == 2 and record["windows"] == 24, record
    assert set(got) == set(want) and len(want) >= 8
    diff = max(float(np.max(np.abs(got[k] - want[k]))) for k in want)
    print(f"two Vertex replicas vs one worker: max |dw| = {diff:.3g} over {len(want)} tensors")
    assert diff <= TOLERANCE

    summary = kfp_harness.summary(two)
    print(summary)
    assert summary["blessed"] is True and summary["pushed"] is True
