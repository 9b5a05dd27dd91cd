"""Test-only: stands in for Vertex AI's job service for ``scripts/kfp_harness.py``'s vertex mode,
at the one call TFX's Vertex training extension makes of it (the gapic ``JobServiceClient`` of
``VertexJobClient.create_client``, ``training_clients.py`` lines 301-314 in TFX v1.16.0 and
v1.21.0), and starts the custom job's replicas as containers, with the environment Vertex gives
them.

:func:`attach` gives every task container of a :class:`kfp_harness.JobRun` the in-container half,
``scripts/vertex_standin_site/sitecustomize.py`` (mounted, on ``PYTHONPATH``), and a spool folder
under the run's folder; a thread here reads each ``CreateCustomJobRequest`` the Trainer's
container writes there, runs the job (:meth:`CustomJobs.run_job`) and writes its state back.

What Vertex does, as emulated (https://cloud.google.com/vertex-ai/docs/training/distributed-training,
"Configure a distributed training job", "CLUSTER_SPEC" and "TF_CONFIG"):

- ``job_spec.worker_pool_specs[i]`` holds ``replica_count`` replicas of its ``container_spec``
  (``image_uri``, ``command`` + ``args``, ``env``); pool 0 is the primary replica (one), pool 1
  the workers, pool 2 parameter servers, pool 3 evaluators (:func:`replicas`).
- Each replica has an address ``<host>:2222``, its host named
  ``cmle-training-workerpool<i>-<job>-<j>`` (as in the CLUSTER_SPEC example of
  google-deepmind/xmanager ``xmanager/cloud/utils_test.py``, lines 21-32, and in Vertex's logs),
  here a container of that name on a Docker network of the job's own (internal: nothing outside).
- ``CLUSTER_SPEC``: ``{"cluster": {"workerpool0": [...], "workerpool1": [...]}, "environment":
  "cloud", "task": {"type": "workerpool<i>", "index": j}}``, as TFX's Vertex Tuner reads it
  (``tuner/executor.py``, lines 318-352) and Vertex's SDK (google-cloud-aiplatform
  ``training_utils/environment_variables.py``, lines 61-65;
  ``cloud_profiler/plugins/tensorflow/tf_profiler.py``, ``post_setup_check``: the primary is
  ``workerpool0`` / ``chief`` index 0).
- ``TF_CONFIG`` (a distributed job only): the same addresses keyed ``chief`` (pool 0),
  ``worker`` (pool 1), ``ps`` (pool 2) -- evaluators (pool 3) have the task type ``evaluator`` and
  are not in the cluster -- with ``"environment": "cloud"`` and the replica's ``task``, as
  https://cloud.google.com/ai-platform/training/docs/distributed-training-details describes its
  fields; ``CLOUD_ML_JOB_ID``: the job's id (environment_variables.py, line 78).
- The job's state (``JobState`` names): ``JOB_STATE_RUNNING`` once the replicas start,
  ``JOB_STATE_SUCCEEDED`` when every replica exited 0, else ``JOB_STATE_FAILED`` with the failed
  replicas named in ``error.message`` and the others stopped (assumed: Vertex's wording is not
  copied).

Not emulated: machine types and accelerators (checked by Vertex's own message on both sides,
then every replica is a container on this machine), the ``job`` and ``trial`` fields, Reduction
Server, restarts and scheduling, service accounts, Cloud Storage (the pipeline root is a folder
mounted into every container), logs beyond each replica's file under the run's ``logs``.
"""

import json
import os
import subprocess
import threading
import time
from typing import Dict, List, NamedTuple

HERE = os.path.dirname(os.path.abspath(__file__))
SITE = os.path.join(HERE, "vertex_standin_site")  # the in-container half (sitecustomize)
SPOOL_ENV = "VERTEX_STANDIN_SPOOL"
PORT = 2222
TF_CONFIG_TYPES = ("chief", "worker", "ps", "evaluator")  # by pool index
JOB_TIMEOUT_S = 3600


class Replica(NamedTuple):
    """One replica of a custom job: its host (container) name, pool, index, image, command
    (``command`` + ``args``) and environment."""

    host: str
    pool: int
    index: int
    image: str
    command: List[str]
    env: Dict[str, str]


def replicas(job_spec: dict, job_id: str) -> List[Replica]:
    """Every replica of ``job_spec`` (a ``CustomJobSpec`` as a dict, snake_case keys) with the
    environment Vertex gives it (module docstring)."""
    pools = job_spec["worker_pool_specs"]
    hosts = [
        [f"cmle-training-workerpool{i}-{job_id}-{j}" for j in range(int(p.get("replica_count", 0)))]
        for i, p in enumerate(pools)
    ]
    cluster_spec = {
        f"workerpool{i}": [f"{h}:{PORT}" for h in hs] for i, hs in enumerate(hosts) if hs
    }
    tf_cluster = {
        TF_CONFIG_TYPES[i]: [f"{h}:{PORT}" for h in hs]
        for i, hs in enumerate(hosts)
        if hs and TF_CONFIG_TYPES[i] != "evaluator"
    }
    distributed = sum(len(hs) for hs in hosts) > 1
    found = []
    for i, (pool, pool_hosts) in enumerate(zip(pools, hosts)):
        container = pool["container_spec"]
        for j, host in enumerate(pool_hosts):
            env = {item["name"]: item["value"] for item in container.get("env", [])}
            env["CLOUD_ML_JOB_ID"] = job_id
            env["CLUSTER_SPEC"] = json.dumps(
                {
                    "cluster": cluster_spec,
                    "environment": "cloud",
                    "task": {"type": f"workerpool{i}", "index": j},
                }
            )
            if distributed:
                env["TF_CONFIG"] = json.dumps(
                    {
                        "cluster": tf_cluster,
                        "environment": "cloud",
                        "task": {"type": TF_CONFIG_TYPES[i], "index": j},
                    }
                )
            command = list(container.get("command", [])) + list(container.get("args", []))
            found.append(Replica(host, i, j, container["image_uri"], command, env))
    return found


class CustomJobs:
    """The job service of one :class:`kfp_harness.JobRun` (see :func:`attach`): ``jobs`` holds,
    per job id, its request, replicas, their exit codes and its final state."""

    def __init__(self, run, poll_s: float = 0.5):
        self.run = run
        self.spool = os.path.join(run.run_dir, "vertex-custom-jobs")
        os.makedirs(self.spool, exist_ok=True)
        self.jobs: Dict[str, dict] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(poll_s,), daemon=True)
        self._thread.start()

    def close(self):
        self._stop.set()
        self._thread.join()

    def _serve(self, poll_s):
        taken = set()
        while not self._stop.is_set():
            for name in sorted(os.listdir(self.spool)):
                if name.endswith(".request.json") and name not in taken:
                    taken.add(name)
                    job_id = name[: -len(".request.json")]
                    threading.Thread(target=self.run_job, args=(job_id,), daemon=True).start()
            self._stop.wait(poll_s)

    def _state(self, job_id, state, message=None):
        body = {"state": state}
        if message:
            body["error"] = {"code": 13, "message": message}  # INTERNAL, as a failed job's
        path = os.path.join(self.spool, f"{job_id}.state.json")
        with open(path + ".tmp", "w") as f:
            json.dump(body, f)
        os.rename(path + ".tmp", path)
        self.jobs[job_id]["state"] = state

    def run_job(self, job_id: str) -> str:
        """Runs the job of ``<spool>/<job_id>.request.json`` to its end; returns its state (a
        failure of the stand-in itself fails the job, with its message)."""
        self.jobs[job_id] = {}
        try:
            return self._run_job(job_id)
        except Exception as error:  # the Trainer's container must not poll forever
            self._state(job_id, "JOB_STATE_FAILED", f"the stand-in failed: {error!r}")
            return "JOB_STATE_FAILED"

    def _run_job(self, job_id: str) -> str:
        with open(os.path.join(self.spool, f"{job_id}.request.json")) as f:
            body = json.load(f)
        job_spec = body["request"]["custom_job"]["job_spec"]
        job = self.jobs[job_id]
        job.update(body=body, replicas=replicas(job_spec, job_id))
        wrong = sorted({r.image for r in job["replicas"]} - {self.run.image})
        if wrong:
            self._state(job_id, "JOB_STATE_FAILED", f"image {wrong} is not the harness's image")
            return job["state"]
        network = f"vertex-{job_id}"
        subprocess.run(
            ["docker", "network", "create", "--internal", network], check=True, capture_output=True
        )
        try:
            for replica in job["replicas"]:
                subprocess.run(self.docker_run(replica, network), check=True, capture_output=True)
            self._state(job_id, "JOB_STATE_RUNNING")
            job["exit_codes"] = self._wait(job["replicas"])
        finally:
            hosts = [r.host for r in job["replicas"]]
            subprocess.run(["docker", "rm", "-f", *hosts], capture_output=True)
            subprocess.run(["docker", "network", "rm", network], capture_output=True)
        failed = [f"{host} exited {code}" for host, code in job["exit_codes"].items() if code]
        self._state(
            job_id,
            "JOB_STATE_FAILED" if failed else "JOB_STATE_SUCCEEDED",
            "; ".join(failed) or None,
        )
        return job["state"]

    def docker_run(self, replica: Replica, network: str) -> List[str]:
        """The ``docker run`` of one replica: its name is its host, on the job's network, the
        run's folders mounted at the same paths."""
        return (
            ["docker", "run", "--detach", f"--name={replica.host}", f"--network={network}"]
            + [f"--entrypoint={replica.command[0]}"]
            + [f"--env={key}={value}" for key, value in replica.env.items()]
            + [f"--volume={m}:{m}" for m in self.run.mounts]
            + [replica.image]
            + replica.command[1:]
        )

    def _wait(self, found: List[Replica]) -> Dict[str, int]:
        """Each replica's exit code; once one fails, the others are stopped (a job whose
        replica failed has failed)."""
        codes: Dict[str, int] = {}
        deadline = time.time() + JOB_TIMEOUT_S
        log_dir = os.path.join(self.run.run_dir, "logs")
        os.makedirs(log_dir, exist_ok=True)
        while len(codes) < len(found) and time.time() < deadline:
            for replica in found:
                if replica.host in codes:
                    continue
                state = subprocess.run(
                    ["docker", "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}"]
                    + [replica.host],
                    capture_output=True,
                    text=True,
                ).stdout.split()
                if state and state[0] == "exited":
                    codes[replica.host] = int(state[1])
                    log = subprocess.run(
                        ["docker", "logs", replica.host],
                        stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT,
                        text=True,
                    ).stdout
                    with open(os.path.join(log_dir, f"{replica.host}.log"), "w") as f:
                        f.write(log)
            if any(codes.values()):
                for replica in found:
                    if replica.host not in codes:
                        subprocess.run(["docker", "kill", replica.host], capture_output=True)
            time.sleep(1)
        return {r.host: codes.get(r.host, 124) for r in found}


def attach(run) -> CustomJobs:
    """Makes ``run``'s task containers reach :class:`CustomJobs` instead of Vertex's job API:
    the in-container half mounted and on ``PYTHONPATH``, the spool folder named in
    ``$VERTEX_STANDIN_SPOOL``. Returns the service (``close()`` stops its thread)."""
    jobs = CustomJobs(run)
    run.mounts.append(SITE)
    run.env.update({"PYTHONPATH": SITE, SPOOL_ENV: jobs.spool})
    return jobs
