"""The compiled Kubeflow job run as each backend runs it: every step in a container of the image
``scripts/build_image.sh`` builds, by that backend's container contract (``scripts/kfp_harness.py
--backend kfp|vertex``), with no network.

kfp (open-source KFP 2.x: ``ga-tfx compile --backend kfp``'s bare PipelineSpec, the data root
and serving folder run parameters (``--param``, their compiled defaults naming no folder),
upstream artifacts handed on untyped, the user command under the emissary and launcher
stand-ins):
1. TFX's stock entry point fails at StatisticsGen (``AttributeError``), ours runs the job to the
   end, blessed and pushed, in the same run setup.
2. The Trainer's pod stopped as Kubernetes stops it (``docker stop``: SIGTERM to the emissary,
   which forwards it and leaves as soon as the launcher dies of it): the resubmitted job resumes
   from the checkpoint left on disk and ends at the uninterrupted weights.
3. The Trainer's container killed: the harness's retry loop waits the compiled backoff (on a
   scaled clock) and the retry resumes, ending at the uninterrupted weights.

vertex (the PipelineJob, its ``runtimeConfig`` parameter values, typed inputs, the ExampleGen
hook, Python as the first process):
4. The digits job (schema 2.1, the default, and 2.0) ends blessed and pushed, at the evaluation
   of the same pipeline run locally (``ga-tfx run``) in the same image; no step reaches for the
   network (no Beam Prism download, no TFX sdist built).
5. The Trainer's container, SIGTERMed mid-training (``docker stop``, Python as PID 1), saves and
   exits 143 with the one interruption line last; the task retried with the same
   ExecutorInput resumes from that update, and so does the job submitted again; both end at
   the weights of an uninterrupted run.
6. Steps run as several containers, each with its own address on a Docker network: the Trainer
   as a chief and a worker under MultiWorkerMirroredStrategy (Vertex's ``TF_CONFIG``) ends at
   one worker's weights, and a killed worker stops the chief with one line; the Tuner as
   keras-tuner's distributed search (a chief oracle and two workers) runs each trial once and
   its best hyperparameters reach the Trainer.

Marker ``container``: run by the container stage of ``scripts/test.sh`` (Docker, as root), not
by the other tiers. Nothing here is skipped: without Docker these tests fail. The stage runs
the whole job once, in the kfp mode (1-3); the vertex mode's Trainer as two workers (6) runs on
that run's outputs (the same upstream tasks: a cache hit). Marker ``container_extra`` (the
vertex mode's whole job in both schemas (4; ``scripts/container_job.sh --backend vertex`` runs
it too), the comparison with a local run, vertex's SIGTERM resume, the tuned job, the Tuner as
three containers, the killed worker): left out of CI's stage for its time, run by
``.venv/bin/python -m pytest -m container tests/test_container_job.py``.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid

import numpy as np
import pytest
import tensorflow as tf

pytestmark = [pytest.mark.tfx, pytest.mark.slow, pytest.mark.container]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from ga_tfx.components.trainer import run_record  # noqa: E402
from ga_tfx.pipelines.parts.training import TUNER_OBJECTIVE  # noqa: E402

import kfp_harness  # noqa: E402
from keras_tuner.src.engine.objective import create_objective  # noqa: E402

TFX = os.environ.get("GA_TFX_IMAGE_TFX", "1.21")
PIPELINE = "ga-tfx-digits"
# Log lines that would mean a step reached for the network or packaged TFX at run time:
# Beam's Prism runner downloading its binary, TFX building its ephemeral sdist.
NETWORK_SIGNS = ("prism", "Attempting to infer TFX Python dependency", "build_ephemeral_package")


@pytest.fixture(scope="module")
def image():
    done = subprocess.run(
        ["bash", os.path.join(ROOT, "scripts", "build_image.sh"), "--tfx", TFX],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "ga-tfx image OK:" in done.stdout, done.stdout[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    work = tmp_path_factory.mktemp("kubeflow")
    (work / "data").mkdir()
    for name in os.listdir(os.path.join(ROOT, "pipelines", "data", "digits")):
        shutil.copy(os.path.join(ROOT, "pipelines", "data", "digits", name), work / "data")
    (work / "serving").mkdir()
    yield work
    # Containers write as root: remove what they wrote from inside one.
    subprocess.run(["rm", "-rf", str(work)], check=False)


def in_image(image, work, *args):
    """``python ARGS`` in a container of the image, the work folder mounted, no network."""
    return subprocess.run(
        ["docker", "run", "--rm", "--network=none", f"--volume={work}:{work}"]
        + ["--entrypoint=python", image]
        + list(args),
        capture_output=True,
        text=True,
    )


def compile_job(image, work, name, *flags, backend="vertex", data=None, serving=None):
    """``ga-tfx compile --backend BACKEND`` in the image: vertex's PipelineJob JSON, kfp's bare
    PipelineSpec YAML; ``data`` and ``serving`` (default: the work folder's) are the runtime
    parameters' defaults."""
    out = work / f"{name}.{'yaml' if backend == 'kfp' else 'json'}"
    done = in_image(
        image,
        work,
        "-m",
        "ga_tfx.pipelines.cli",
        "compile",
        "--image",
        image,
        "--pipeline-root",
        str(work / "root"),
        "--data-root",
        data or str(work / "data"),
        "--serving-dir",
        serving or str(work / "serving"),
        "--backend",
        backend,
        "--output",
        str(out),
        *flags,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return str(out)


def new_run(job, image, work, backend="vertex", **kwargs):
    return kfp_harness.BACKENDS[backend](
        job, image, str(work / "root"), (str(work / "data"), str(work / "serving")), **kwargs
    )


# The kfp job's data and serving folders are run parameters: their defaults name no folder, so
# a run that did not pass them would read and push nothing.
DATA_ROOT_DEFAULT = "/nonexistent/data"
SERVING_DIR_DEFAULT = "/nonexistent/serving"


def kfp_job(image, work, name, *flags):
    """The job compiled in the image by ``ga-tfx compile --backend kfp``: the bare
    PipelineSpec YAML open-source KFP uploads, its data root and serving folder runtime
    parameters (root ``inputDefinitions`` with defaults that name no folder)."""
    return compile_job(
        image,
        work,
        name,
        *flags,
        backend="kfp",
        data=DATA_ROOT_DEFAULT,
        serving=SERVING_DIR_DEFAULT,
    )


def kfp_new_run(job, image, work, **kwargs):
    """A run of the kfp job, given the work folder's data and serving folders as its
    parameters (``--param``, as at KFP's run creation)."""
    params = {"data_root": str(work / "data"), "serving_dir": str(work / "serving")}
    return new_run(job, image, work, "kfp", params=params, **kwargs)


@pytest.fixture(scope="module")
def local_accuracy(image, work):
    """The same pipeline run locally (LocalDagRunner) in the same image."""
    done = in_image(
        image, work, "-m", "ga_tfx.pipelines.cli", "run", "--output-dir", str(work / "local")
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return float(re.search(r"sparse_categorical_accuracy=([0-9.]+)", done.stdout).group(1))


@pytest.fixture(scope="module")
def job_runs(image, work):
    """The digits job in a schema ("2.1" or "2.0"), run to the end once, on first use."""

    class Runs(dict):
        def __missing__(self, schema):
            job = compile_job(image, work, f"job-{schema}", "--pipeline-spec", schema)
            run = new_run(job, image, work)
            run.run()
            self[schema] = run
            return run

    return Runs()


# The README's main-job figure is 0.9904 (both stacks); the Evaluator blesses at 0.8.
MIN_ACCURACY = 0.97


# The vertex mode's whole job in both schemas is container_extra: the stage runs the whole job
# once, in the kfp mode (test_the_kfp_job_runs_on_open_source_kfps_terms_...), and the vertex
# mode's Trainer on its outputs (the two-worker test); scripts/container_job.sh --backend vertex
# runs the vertex job whole.
@pytest.mark.container_extra
@pytest.mark.parametrize("schema", ["2.1", "2.0"])
def test_the_compiled_job_runs_step_by_step_in_containers(job_runs, schema):
    run = job_runs[schema]
    assert run.spec.schema_version == f"{schema}.0"
    parameters = {
        name: param.runtime_value.WhichOneof("value")
        for task in run.spec.root.dag.tasks.values()
        for name, param in task.inputs.parameters.items()
        if param.WhichOneof("kind") == "runtime_value"
    }
    # 2.1 writes constants as `constant` (what open-source KFP resolves), 2.0 as constantValue.
    assert set(parameters.values()) == {"constant" if schema == "2.1" else "constant_value"}
    assert len(run.outputs) == 9
    summary = kfp_harness.summary(run)
    print(schema, summary)
    assert summary["blessed"] is True and summary["pushed"] is True
    assert os.path.exists(os.path.join(summary["pushed_destination"], "saved_model.pb"))
    assert summary["evaluation"]["sparse_categorical_accuracy"] >= MIN_ACCURACY
    for name, log in run.logs.items():
        for sign in NETWORK_SIGNS:
            assert sign.lower() not in log.lower(), f"{name}: {sign!r} in its log"


@pytest.fixture(scope="module")
def kfp_runs(image, work):
    """The digits job run in the kfp mode with our entry point, to the end; then its
    StatisticsGen (the first task handed another's output) again in a run with TFX's stock
    entry point, handed the same upstream outputs (a cache hit, as KFP's). Returns (the stock
    run, its TaskFailed, our run)."""
    job = kfp_job(image, work, "kfp")
    ours = kfp_new_run(job, image, work)
    ours.run()
    stock = kfp_new_run(job, image, work, stock_entrypoint=True)
    stock.outputs["CsvExampleGen"] = ours.outputs["CsvExampleGen"]  # what StatisticsGen reads
    with pytest.raises(kfp_harness.TaskFailed) as failed:
        stock.run_task("StatisticsGen")
    return stock, failed.value, ours


def test_the_kfp_job_runs_on_open_source_kfps_terms_where_tfxs_own_entry_point_fails(
    kfp_runs, work
):
    stock, failure, run = kfp_runs
    # TFX's entry point: StatisticsGen (the first task handed another's output, untyped)
    # raised in TFX's reading of the type.
    assert failure.task == "StatisticsGen" and list(stock.outputs) == ["CsvExampleGen"]
    (stock_handed,) = stock.inputs["StatisticsGen"].inputs.artifacts["examples"].artifacts
    assert not stock_handed.type.instance_schema
    assert "AttributeError: 'NoneType' object has no attribute 'get'" in failure.log, failure.log
    # Ours, on the same tasks handed the same untyped inputs: every task, blessed and pushed.
    (handed,) = run.inputs["StatisticsGen"].inputs.artifacts["examples"].artifacts
    assert handed.type.WhichOneof("kind") == "instance_schema" and not handed.type.instance_schema
    assert len(run.outputs) == 9
    example_gen = run.inputs["CsvExampleGen"].inputs.parameter_values["input_base"]
    assert example_gen.string_value == str(work / "data")  # the run's parameter
    summary = kfp_harness.summary(run)
    print("kfp", summary)
    assert summary["blessed"] is True and summary["pushed"] is True
    assert summary["pushed_destination"].startswith(str(work / "serving") + "/")  # run's too
    assert os.path.exists(os.path.join(summary["pushed_destination"], "saved_model.pb"))
    assert summary["evaluation"]["sparse_categorical_accuracy"] >= MIN_ACCURACY
    for name, log in run.logs.items():
        for sign in NETWORK_SIGNS:
            assert sign.lower() not in log.lower(), f"{name}: {sign!r} in its log"


@pytest.mark.container_extra
def test_both_schemas_evaluate_as_the_same_pipeline_run_locally_in_the_image(
    job_runs, local_accuracy
):
    for schema in ("2.1", "2.0"):
        accuracy = kfp_harness.summary(job_runs[schema])["evaluation"]
        print(schema, accuracy, "local:", local_accuracy)
        assert round(accuracy["sparse_categorical_accuracy"], 4) == local_accuracy  # 4 decimals


# A Trainer long enough to be stopped mid-training (about 25 s of training): checkpoints every
# 50 updates, stopped right after the first one it writes.
LONG = ("--train-windows", "600", "--checkpoint-every-updates", "50")


def trainer_of(run):
    (task,) = [name for name in run.spec.root.dag.tasks if name.endswith("Trainer")]
    return task


def resume_checkpoints(work):
    root = work / "root" / ".ga_tfx_resume" / PIPELINE
    return sorted(str(p) for p in root.glob("*/ckpt-*.index")) if root.exists() else []


def preempt_trainer(run, work, retry_name):
    """Starts the run's Trainer task in a container (Python as PID 1, as in a pod), waits for its
    first checkpoint, stops it as Kubernetes stops a pod (SIGTERM, a 30 s grace period), and
    returns (exit code, log)."""
    task = trainer_of(run)
    container = run.container(task)
    name = f"{run.job_id}-{retry_name}-{uuid.uuid4().hex[:6]}".lower()
    subprocess.run(
        run.command(task, container.command, container.args, name, detach=True),
        check=True,
        capture_output=True,
    )
    try:
        before, deadline = set(resume_checkpoints(work)), time.time() + 600
        while not set(resume_checkpoints(work)) - before and time.time() < deadline:
            time.sleep(0.5)
        subprocess.run(["docker", "stop", "-t", "30", name], check=True, capture_output=True)
        code = int(subprocess.run(["docker", "wait", name], capture_output=True, text=True).stdout)
        # Both streams in one pipe, in the order written, as a pod's log shows them.
        log = subprocess.run(
            ["docker", "logs", name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        return code, log.stdout
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def interrupted_at(code, log):
    assert code == 143, log[-3000:]
    last = log.strip().splitlines()[-1]
    found = re.fullmatch(
        r"interrupted at window (\d+) of 600; checkpoint saved; re-run the same command to resume",
        last,
    )
    assert found, f"last line: {last!r}\n{log[-3000:]}"
    assert "Traceback" not in log, log[-3000:]
    return int(found.group(1))


def trainer_outputs(run):
    out = run.outputs[trainer_of(run)]
    model = out.artifacts["model"].artifacts[0].uri
    with open(os.path.join(out.artifacts["model_run"].artifacts[0].uri, "ga_tfx_run.json")) as f:
        # an image built before 0.3.0 writes the record's old keys: read them as today's
        record = {run_record.OLD_KEYS.get(k, k): v for k, v in json.load(f).items()}
    reader = tf.train.load_checkpoint(
        os.path.join(model, "Format-Serving", "variables", "variables")
    )
    weights = {
        key: reader.get_tensor(key)
        for key in reader.get_variable_to_shape_map()
        if reader.get_variable_to_dtype_map()[key].is_floating
    }
    return record, weights


@pytest.mark.container_extra
def test_a_preempted_trainer_resumes_on_a_retry_and_on_a_resubmitted_job(image, work, job_runs):
    job = compile_job(image, work, "long", *LONG)
    upstream = job_runs["2.1"]  # the cache of KFP: the same upstream tasks' outputs

    def submission():
        run = new_run(job, image, work)
        assert trainer_of(run) not in run.cache_from(upstream)  # all but the Trainer
        assert len(run.outputs) == 6
        return run

    reference = submission()
    reference.run_task(trainer_of(reference))
    ref_record, ref_weights = trainer_outputs(reference)
    assert ref_record["resumed_from_window"] is None and ref_record["windows"] == 600
    assert not resume_checkpoints(work)  # removed once the model was exported

    # (a) A KFP retry: the same task, the same ExecutorInput.
    first = submission()
    n1 = interrupted_at(*preempt_trainer(first, work, "a"))
    assert 0 < n1 < 600
    # ... stopped again on its retry, (b) then the job submitted again: a new job id, new URIs.
    code, log = preempt_trainer(first, work, "a-retry")
    assert f"ga_tfx: resuming after window {n1} of 600" in log, log[-3000:]
    n2 = interrupted_at(code, log)
    assert n2 > n1
    resubmitted = submission()
    assert resubmitted.job_id != first.job_id
    resubmitted.run_task(trainer_of(resubmitted))
    record, weights = trainer_outputs(resubmitted)
    assert record["resumed_from_window"] == n2, record
    assert record["windows"] == 600 and record["windows_this_run"] == 600 - n2, record

    assert set(weights) == set(ref_weights) and len(weights) >= 8
    diff = max(float(np.max(np.abs(weights[k] - ref_weights[k]))) for k in weights)
    print(
        f"interrupted at {n1}, retried and interrupted at {n2}, resubmitted: max |dw| = {diff:.3g}"
    )
    assert diff <= 1e-6  # the local preemption tests' bound (float32)


def test_the_compiled_trainer_has_a_retry_policy_and_its_resources(image, work):
    job = compile_job(
        image,
        work,
        "resources",
        "--trainer-resources",
        "cpu=8,memory=32G,accelerator=NVIDIA_TESLA_T4",
    )
    spec = kfp_harness.load_spec(job)
    task = spec.root.dag.tasks[trainer_of(new_run(job, image, work))]
    assert task.retry_policy.max_retry_count == 3
    resources = kfp_harness.ignored_resources(spec)
    (label,) = resources
    assert json.loads(resources[label]) == {
        "cpuLimit": 8.0,
        "memoryLimit": 32.0,
        "accelerator": {"type": "NVIDIA_TESLA_T4", "count": "1"},
    }


@pytest.mark.container_extra
def test_the_tuned_job_hands_its_best_hyperparameters_to_the_trainer(image, work, job_runs):
    run = new_run(compile_job(image, work, "tuned", "--tune"), image, work)
    cached = run.cache_from(job_runs["2.1"])
    assert "Transform" in cached and "Tuner" not in cached
    run.run()
    (best,) = kfp_harness.artifacts_of_type(run, "tfx.HyperParameters")
    with open(os.path.join(best.uri, "best_hyperparameters.txt")) as f:
        values = json.load(f)["values"]
    record, _ = trainer_outputs(run)
    print("best:", values, "trainer:", record["accum_steps"], record["effective_batch_size"])
    assert record["accum_steps"] == values["accum_steps"]
    with open(work / "root" / "Tuner" / "trials.jsonl") as f:
        trials = [json.loads(line) for line in f]
    ids = [trial["trial_id"] for trial in trials]
    assert len(ids) == len(set(ids)) == 3  # the default tuning_trials, each run once
    assert kfp_harness.summary(run)["blessed"] is True


# Keras' line at the end of a fit's epoch (verbose 2): "40/40 - 19s - loss: ...".
EPOCH_LINE = re.compile(r"^\d+/\d+ - \d+s - loss: ", re.MULTILINE)


def tuner_pool(run):
    """The Tuner task as keras-tuner's distributed search: a chief serving the oracle on
    0.0.0.0 (as TFX's Vertex Tuner starts it) and two workers, ``tuner0`` and ``tuner1``,
    that reach it by its address."""
    (task,) = [name for name in run.spec.root.dag.tasks if name.endswith("Tuner")]

    def envs(names):
        port = {"KERASTUNER_ORACLE_PORT": "8000"}
        return {
            kind: {
                "KERASTUNER_TUNER_ID": kind,
                "KERASTUNER_ORACLE_IP": "0.0.0.0" if kind == "chief" else names["chief"],
                **port,
            }
            for kind in names
        }

    return Replicas(run, task, ("chief", "tuner0", "tuner1"), envs)


@pytest.mark.container_extra
def test_the_tuner_as_a_chief_and_two_worker_containers_runs_each_trial_once(image, work, job_runs):
    run = new_run(compile_job(image, work, "tuned-pool", "--tune"), image, work)
    run.cache_from(job_runs["2.1"])
    pool = tuner_pool(run)
    run.run(until=pool.task)
    trials_file = work / "root" / "Tuner" / "trials.jsonl"
    before = trials_file.read_text().splitlines() if trials_file.exists() else []
    try:
        logs = pool.run_to_the_end()
    finally:
        pool.close()
    run.finish(pool.task)
    records = [json.loads(line) for line in trials_file.read_text().splitlines()[len(before) :]]
    ids = [r["trial_id"] for r in records]
    print("trials:", [(r["trial_id"], r["values"], r["score"]) for r in records])
    # Every trial of the budget (the default tuning_trials, 3) once, none twice, all completed.
    assert len(ids) == len(set(ids)) == 3, ids
    assert {r["status"] for r in records} == {"completed"}, records
    # Both workers trained (Keras' end-of-epoch line of a trial's fit); the chief, which
    # serves the oracle, trained nothing.
    fitted = {kind: len(EPOCH_LINE.findall(log)) for kind, log in logs.items()}
    print("epochs trained per replica:", fitted)
    assert fitted["chief"] == 0 and fitted["tuner0"] and fitted["tuner1"], fitted
    # The best hyperparameters are the best trial's (by the oracle's objective and
    # direction), and they reach the Trainer.
    (best,) = kfp_harness.artifacts_of_type(run, "tfx.HyperParameters")
    with open(os.path.join(best.uri, "best_hyperparameters.txt")) as f:
        values = json.load(f)["values"]
    better = max if create_objective(TUNER_OBJECTIVE).direction == "max" else min
    winner = better(records, key=lambda r: r["score"])
    assert {k: winner["values"][k] for k in values} == values, (values, winner)
    run.run_task(trainer_of(run))
    record, _ = trainer_outputs(run)
    assert record["accum_steps"] == values["accum_steps"], (record, values)


# The same effective batch of 128 on one worker (micro-batches of 16, K = 8) and on two (a
# global micro-batch of 32: 16 per worker, K = 4): the same gradient sums, and each of the
# digits CNN's BatchNormalization layers normalises the same 16 examples (ghost batch norm per
# replica), so the weights agree to the all-reduce's round-off.
ONE_WORKER = ("--micro-batch", "16", "--accum-steps", "8", "--strategy", "none")
TWO_WORKERS = ("--micro-batch", "32", "--accum-steps", "4", "--strategy", "multi_worker")
# As tests/test_multi_worker.py: the workers' all-reduce sums in another order than one device.
MULTI_WORKER_TOLERANCE = 1e-5


def one_worker_weights(image, work, upstream, flags, name):
    """The one-worker Trainer's weights (a vertex run, every task before the Trainer taken
    from the finished run ``upstream``)."""
    one = new_run(compile_job(image, work, name, *flags, *ONE_WORKER), image, work)
    assert trainer_of(one) not in one.cache_from(upstream) and len(one.outputs) == 6
    one.run_task(trainer_of(one))
    return trainer_outputs(one)[1]


class Replicas:
    """One task of ``run`` as several containers (a worker pool's replicas), each with its own
    address (its name) on a Docker network of their own (internal: nothing outside) and its own
    environment: ``envs(names)`` gives each replica's variables from every replica's name
    (``names``: kind -> container name for this attempt)."""

    def __init__(self, run, task, kinds, envs):
        self.run, self.task, self.kinds, self.envs = run, task, tuple(kinds), envs
        self.network = f"ga-tfx-{run.job_id}-{task}".lower()
        self.attempt = 0
        subprocess.run(["docker", "network", "create", "--internal", self.network], check=True)

    def start(self):
        self.attempt += 1
        self.names = {k: f"{k}-{self.run.job_id}-{self.attempt}".lower() for k in self.kinds}
        container = self.run.container(self.task)
        for kind, env in self.envs(self.names).items():
            docker = self.run.command(
                self.task,
                container.command,
                container.args,
                self.names[kind],
                detach=True,
                env=env,
                network=self.network,
            )
            subprocess.run(docker, check=True, capture_output=True)

    def wait(self, kind, timeout=600):
        """(exit code, log) of one of them."""
        name = self.names[kind]
        code = subprocess.run(
            ["docker", "wait", name], capture_output=True, text=True, timeout=timeout
        )
        log = subprocess.run(
            ["docker", "logs", name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        log_dir = os.path.join(self.run.run_dir, "logs")
        os.makedirs(log_dir, exist_ok=True)
        with open(os.path.join(log_dir, f"{self.task}.{kind}.{self.attempt}.log"), "w") as f:
            f.write(log.stdout)
        return int(code.stdout), log.stdout

    def run_to_the_end(self):
        """Starts them all; each must exit 0. Returns their logs."""
        self.start()
        logs = {}
        for kind in self.kinds:
            code, logs[kind] = self.wait(kind)
            assert code == 0, f"{kind}: {logs[kind][-3000:]}"
        return logs

    def close(self):
        for attempt in range(1, self.attempt + 1):
            names = [f"{k}-{self.run.job_id}-{attempt}".lower() for k in self.kinds]
            subprocess.run(["docker", "rm", "-f", *names], capture_output=True)
        subprocess.run(["docker", "network", "rm", self.network], capture_output=True)


def trainer_workers(run):
    """The Trainer task as a chief and a worker, with the ``TF_CONFIG`` Vertex gives each
    worker pool's replica (cluster spec, task type and index)."""

    def envs(names):
        cluster = {k: [f"{n}:2222"] for k, n in names.items()}
        task = {kind: {"type": kind, "index": 0} for kind in names}
        return {
            kind: {"TF_CONFIG": json.dumps({"cluster": cluster, "task": task[kind]})}
            for kind in names
        }

    return Replicas(run, trainer_of(run), ("chief", "worker"), envs)


def test_two_trainer_containers_under_multi_worker_end_at_one_workers_weights(
    image, work, kfp_runs
):
    """In the vertex mode (Vertex starts a worker pool's replicas with ``TF_CONFIG``), the
    tasks before the Trainer taken from the kfp job's run (the same tasks: a cache hit), so the
    stage runs the whole job once."""
    flags = ["--train-windows", "24", "--windows-per-epoch", "12"]
    upstream = kfp_runs[2]
    want = one_worker_weights(image, work, upstream, flags, "one")
    two = new_run(compile_job(image, work, "two", *flags, *TWO_WORKERS), image, work)
    assert trainer_of(two) not in two.cache_from(upstream) and len(two.outputs) == 6
    workers = trainer_workers(two)
    try:
        workers.run_to_the_end()
    finally:
        workers.close()
    two.finish(workers.task)
    record, got = trainer_outputs(two)
    assert record["replicas"] == 2 and record["windows"] == 24, record
    assert record["resumed_from_window"] is None, record
    assert set(got) == set(want) and len(want) >= 8
    diff = max(float(np.max(np.abs(got[k] - want[k]))) for k in want)
    print(f"two workers vs one: max |dw| = {diff:.3g} over {len(want)} tensors")
    assert diff <= MULTI_WORKER_TOLERANCE


@pytest.mark.container_extra
def test_a_killed_worker_stops_the_chief_with_a_clear_line_and_a_rerun_resumes(
    image, work, job_runs
):
    # Two workers on one 2-core machine train about one update a second (a collective over
    # the Docker network per micro-batch): killed after update 10, 50 are left.
    flags = ["--train-windows", "60", "--windows-per-epoch", "30"]
    flags += ["--checkpoint-every-updates", "10"]
    two = new_run(compile_job(image, work, "killed", *flags, *TWO_WORKERS), image, work)
    two.cache_from(job_runs["2.1"])
    workers = trainer_workers(two)
    try:
        workers.start()
        deadline = time.time() + 600
        while not resume_checkpoints(work) and time.time() < deadline:
            time.sleep(0.5)
        subprocess.run(["docker", "kill", workers.names["worker"]], check=True, capture_output=True)
        code, log = workers.wait("chief", timeout=300)
        last = log.strip().splitlines()[-1]
        print("the chief's last line:", last)
        assert code == 1, log[-3000:]
        assert last.startswith("a worker of this multi-worker training stopped (/job:worker/"), log[
            -3000:
        ]
        # The retry of the step: every worker again, with the same ExecutorInput.
        workers.run_to_the_end()
    finally:
        workers.close()
    two.finish(workers.task)
    record, got = trainer_outputs(two)
    assert record["resumed_from_window"] and record["windows"] == 60, record
    want = one_worker_weights(image, work, job_runs["2.1"], flags, "killed-one")
    diff = max(float(np.max(np.abs(got[k] - want[k]))) for k in want)
    print(f"resumed at {record['resumed_from_window']}: max |dw| vs one worker = {diff:.3g}")
    assert diff <= MULTI_WORKER_TOLERANCE


@pytest.fixture(scope="module")
def kfp_long(image, work, kfp_runs):
    """The long Trainer's job in the kfp mode: a new submission of it, every task but the
    Trainer taken from the kfp job's run (a cache hit), and the uninterrupted Trainer's
    (record, weights)."""
    job = kfp_job(image, work, "kfp-long", *LONG)

    def submission(**kwargs):
        run = kfp_new_run(job, image, work, **kwargs)
        assert trainer_of(run) not in run.cache_from(kfp_runs[2])
        assert len(run.outputs) == 6
        return run

    reference = submission()
    reference.run_task(trainer_of(reference))
    record, weights = trainer_outputs(reference)
    assert record["resumed_from_window"] is None and record["windows"] == 600
    return submission, weights


def max_dw(weights, want):
    assert set(weights) == set(want) and len(want) >= 8
    return max(float(np.max(np.abs(weights[k] - want[k]))) for k in want)


def test_a_kfp_trainer_stopped_as_kubernetes_stops_its_pod_resumes_on_resubmission(
    image, work, kfp_long
):
    """``docker stop`` (SIGTERM to the first process, SIGKILL after 30 s) of a Trainer under
    the emissary and launcher stand-ins: the emissary forwards SIGTERM to the launcher's group,
    the launcher dies of it, the emissary leaves within a second and the container ends, Python
    with it; the resubmitted job resumes from the checkpoint that was on disk."""
    submission, want = kfp_long
    first = submission()
    code, log = preempt_trainer(first, work, "k")
    assert code == 128 + 15, log[-3000:]  # the emissary's: its child died of SIGTERM
    saved = re.search(r"interrupted at window (\d+) of 600; checkpoint saved", log)
    resubmitted = submission()
    assert resubmitted.job_id != first.job_id
    resubmitted.run_task(trainer_of(resubmitted))
    record, weights = trainer_outputs(resubmitted)
    resumed = record["resumed_from_window"]
    kind = "its SIGTERM checkpoint" if saved else "the last periodic checkpoint"
    print(f"kfp: stopped; Python {'saved' if saved else 'was killed first'}; resumed at {resumed}")
    if saved:
        assert resumed == int(saved.group(1)), (record, log[-3000:])
    else:
        assert resumed and resumed % 50 == 0, (kind, record)  # every 50 updates (LONG)
    assert record["windows"] == 600 and record["windows_this_run"] == 600 - resumed, record
    diff = max_dw(weights, want)
    print(f"kfp: resumed from {kind} ({resumed}): max |dw| = {diff:.3g}")
    assert diff <= 1e-6


def test_a_failing_trainer_container_is_retried_with_the_compiled_backoff(image, work, kfp_long):
    """The Trainer's container killed (exit 137) in its first attempt: the harness's retry loop
    waits the compiled ``retryPolicy``'s first backoff (30 s, on a clock scaled by 0.01, as
    Argo's retryStrategy compiled by KFP 2.5.0 waits) and retries with the same ExecutorInput;
    the retry resumes and ends at the uninterrupted weights."""
    submission, want = kfp_long
    lines = []
    run = submission(backoff_scale=0.01, log=lines.append)
    task = trainer_of(run)
    name = f"{run.job_id}-{task}-executor-1".lower()

    def kill_the_first_attempt():
        before, deadline = set(resume_checkpoints(work)), time.time() + 600
        while not set(resume_checkpoints(work)) - before and time.time() < deadline:
            time.sleep(0.5)
        subprocess.run(["docker", "kill", name], capture_output=True)

    killer = threading.Thread(target=kill_the_first_attempt)
    killer.start()
    try:
        run.run_task(task)
    finally:
        killer.join()
    print("retry:", lines)
    assert run.waits == [30.0], run.waits
    assert lines[0].endswith("exit 137; retry 1 of 3 after 30 s (clock scaled by 0.01)"), lines
    assert "ga_tfx: resuming after window" in run.logs[f"{task}/executor/2"]
    record, weights = trainer_outputs(run)
    assert record["resumed_from_window"] and record["windows"] == 600, record
    assert max_dw(weights, want) <= 1e-6
