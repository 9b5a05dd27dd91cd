"""The Trainer as a Vertex AI custom job of several replicas
(``ga_tfx.components.trainer.vertex_training``) and the harness's stand-in for Vertex's job
service (``scripts/vertex_standin.py``, ``scripts/vertex_standin_site/sitecustomize.py``),
without Docker.

1. The worker pools are Vertex's (its own ``CustomJobSpec`` message parses them): pool 0 one
   replica, pool 1 the other N-1, the image, the machine type and the accelerator in Vertex's
   names; ``custom_config`` is keyed as TFX's Vertex training extension reads it; the compiled job's
   Trainer step runs the extension's executor subclass with that ``custom_config``.
2. TFX's own extension code, run here with the stand-in's client, submits a CustomJob whose every
   pool runs ``tfx.scripts.run_executor`` with the ga-tfx Trainer executor and the step's own
   artifacts and execution properties; the stand-in's answer (a failed job) reaches TFX's runner,
   which raises.
3. The stand-in gives each replica Vertex's ``CLUSTER_SPEC`` and ``TF_CONFIG``: TFX's Vertex Tuner,
   TensorFlow's cluster resolver and ga-tfx's chief rule read pool 0 as the chief and only it.
4. Loaded at Python start from ``PYTHONPATH``, the in-container half replaces the gapic client in
   TFX's ``training_clients`` only when its spool folder is set (slow: a new Python importing TFX
   and Vertex's client, about 30 s), and refuses a request Vertex's API would.
5. Bad flags end ``ga-tfx compile`` with one line naming them.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx._keras import tf
from ga_tfx.components.trainer import vertex_training
from ga_tfx.distribution import is_chief
from ga_tfx.pipelines import cli, kubeflow
from ga_tfx.pipelines.kubeflow_options import Resources
from ga_tfx.pipelines.pipeline import TrainingOptions

import importlib.util
import json
import os
import subprocess
import sys
import types

import pytest
from google.cloud.aiplatform_v1.types import CustomJobSpec
from tfx.extensions.google_cloud_ai_platform import constants, runner, training_clients
from tfx.extensions.google_cloud_ai_platform.trainer import executor as extension_executor
from tfx.extensions.google_cloud_ai_platform.tuner import executor as tuner_executor
from tfx.types import artifact_utils, standard_artifacts
from tfx.utils import json_utils

pytestmark = [pytest.mark.tfx]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import vertex_standin  # noqa: E402

IMAGE = "europe-docker.pkg.dev/example-project/ga-tfx/ga-tfx:test"
REPLICA_EXECUTOR = "ga_tfx.components.trainer.executor.Executor"


def load_site():
    """The in-container half, loaded from its file as a module of its own (not as this
    process's sitecustomize)."""
    spec = importlib.util.spec_from_file_location(
        "vertex_standin_site", os.path.join(vertex_standin.SITE, "sitecustomize.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def vertex(workers=3, **kwargs):
    resources = Resources(accelerator="NVIDIA_TESLA_T4", accelerator_count=2)
    return vertex_training.VertexTraining.of(
        IMAGE, workers, "my-project", "europe-west4", "n1-highmem-16", resources, **kwargs
    )


# --- 1. the worker pools --------------------------------------------------------------------


def test_the_worker_pools_are_vertex_s_chief_and_workers_of_the_image():
    pools = vertex().worker_pool_specs()
    assert [pool["replica_count"] for pool in pools] == [1, 2]  # pool 0: the chief alone
    for pool in pools:
        assert pool["machine_spec"] == {
            "machine_type": "n1-highmem-16",
            "accelerator_type": "NVIDIA_TESLA_T4",
            "accelerator_count": 2,
        }
        assert pool["container_spec"]["image_uri"] == IMAGE
        assert {"name": "TF_USE_LEGACY_KERAS", "value": "1"} in pool["container_spec"]["env"]
        assert "command" not in pool["container_spec"]  # the extension writes it
    parsed = CustomJobSpec(worker_pool_specs=pools)  # Vertex's message, its field names
    assert parsed.worker_pool_specs[1].machine_spec.accelerator_type.name == "NVIDIA_TESLA_T4"
    no_accelerator = vertex_training.VertexTraining(IMAGE, 2, "p", "r").worker_pool_specs()
    assert no_accelerator[0]["machine_spec"] == {"machine_type": "n1-standard-8"}


def test_custom_config_is_keyed_as_the_extension_reads_it():
    config = vertex().custom_config()
    assert config[constants.ENABLE_VERTEX_KEY] is True
    assert config[constants.VERTEX_REGION_KEY] == "europe-west4"
    job = config[extension_executor.TRAINING_ARGS_KEY]
    assert job["project"] == "my-project"
    assert job["job_spec"]["worker_pool_specs"] == vertex().worker_pool_specs()
    assert vertex_training.Executor().__class__.__mro__[1] is extension_executor.GenericExecutor
    assert vertex_training.Executor()._GetExecutorClass().__module__ + ".Executor" == (
        REPLICA_EXECUTOR
    )


def test_the_compiled_trainer_step_is_the_extension_s_executor_with_the_job(tmp_path):
    options = TrainingOptions.of(strategy="multi_worker", micro_batch_size=32, accum_steps=4)
    job = kubeflow.compile_pipeline(
        str(tmp_path / "job.json"),
        IMAGE,
        "ga-tfx-digits",
        "gs://bucket/root",
        "gs://bucket/digits",
        "gs://bucket/serving",
        options,
        resources={"trainer": Resources(accelerator="NVIDIA_TESLA_T4", accelerator_count=2)},
        trainer_workers=3,
        project="my-project",
        region="europe-west4",
        trainer_machine_type="n1-highmem-16",
    )
    spec = job["pipelineSpec"]
    (task,) = [name for name in spec["root"]["dag"]["tasks"] if name.endswith("Trainer")]
    executor = spec["deploymentSpec"]["executors"][f"{task}_executor"]["container"]
    path = executor["args"][executor["args"].index("--executor_class_path") + 1]
    assert path == "ga_tfx.components.trainer.vertex_training.Executor"
    assert "resources" not in executor  # the step only submits; the replicas have the T4s
    parameters = spec["root"]["dag"]["tasks"][task]["inputs"]["parameters"]
    config = json.loads(parameters["custom_config"]["runtimeValue"]["constant"])
    assert config == vertex().custom_config()
    assert parameters["strategy"]["runtimeValue"]["constant"] == "multi_worker"


# --- 2. TFX's extension, run with the stand-in ---------------------------------------------


def artifact(kind, uri):
    made = kind()
    made.uri = uri
    return made


def test_the_extension_submits_the_ga_tfx_executor_in_every_pool(tmp_path, monkeypatch):
    site = load_site()
    monkeypatch.setattr(
        training_clients,
        "gapic",
        types.SimpleNamespace(JobServiceClient=site.SpoolJobServiceClient),
    )
    monkeypatch.setattr(runner, "_POLLING_INTERVAL_IN_SECONDS", 0.1)  # TFX's 30 s poll
    run = types.SimpleNamespace(
        run_dir=str(tmp_path), image="another-image", mounts=[], env={}
    )  # the replicas' image is not the harness's: the stand-in fails the job
    jobs = vertex_standin.CustomJobs(run, poll_s=0.05)
    monkeypatch.setenv(site.SPOOL_ENV, jobs.spool)
    inputs = {"examples": [artifact(standard_artifacts.Examples, "/root/Transform/examples")]}
    outputs = {
        "model": [artifact(standard_artifacts.Model, "/root/Trainer/model")],
        "model_run": [artifact(standard_artifacts.ModelRun, "/root/Trainer/model_run")],
    }
    exec_properties = {
        "custom_config": json_utils.dumps(vertex().custom_config()),
        "accum_steps": 4,
        "train_args": '{"num_steps": 24}',
    }
    try:
        with pytest.raises(RuntimeError, match="did not succeed") as raised:
            vertex_training.Executor().Do(inputs, outputs, dict(exec_properties))
    finally:
        jobs.close()
    assert "is not the harness" in str(raised.value)  # the stand-in's error, through TFX
    ((job_id, job),) = jobs.jobs.items()
    assert job["state"] == "JOB_STATE_FAILED"
    body = job["body"]
    assert body["endpoint"] == "europe-west4-aiplatform.googleapis.com"
    assert body["request"]["parent"] == "projects/my-project/locations/europe-west4"
    custom_job = body["request"]["custom_job"]
    assert custom_job["display_name"].startswith("tfx_")
    pools = custom_job["job_spec"]["worker_pool_specs"]
    assert [int(pool["replica_count"]) for pool in pools] == [1, 2]
    for pool in pools:
        command = pool["container_spec"]["command"]
        assert command[:5] == [
            "python",
            "-m",
            "tfx.scripts.run_executor",
            "--executor_class_path",
            REPLICA_EXECUTOR,
        ]
        flags = dict(zip(command[5::2], command[6::2]))
        assert json.loads(flags["--exec-properties"]) == exec_properties
        for flag, given in (("--inputs", inputs), ("--outputs", outputs)):
            parsed = artifact_utils.parse_artifact_dict(flags[flag])
            assert {k: [a.uri for a in v] for k, v in parsed.items()} == {
                k: [a.uri for a in v] for k, v in given.items()
            }
        assert pool["machine_spec"]["accelerator_type"] == "NVIDIA_TESLA_T4"
    assert [r.host for r in job["replicas"]] == [
        f"cmle-training-workerpool0-{job_id}-0",
        f"cmle-training-workerpool1-{job_id}-0",
        f"cmle-training-workerpool1-{job_id}-1",
    ]


# --- 3. the replicas' environment ------------------------------------------------------------


def spec_of(*counts):
    return {
        "worker_pool_specs": [
            {
                "replica_count": str(count),  # int64 fields arrive as strings
                "container_spec": {
                    "image_uri": IMAGE,
                    "command": ["python", "-m", "tfx.scripts.run_executor"],
                    "args": ["--flag"],
                    "env": [{"name": "TF_USE_LEGACY_KERAS", "value": "1"}],
                },
            }
            for count in counts
        ]
    }


def test_each_replica_gets_vertex_s_cluster_spec_and_tf_config(monkeypatch):
    found = vertex_standin.replicas(spec_of(1, 2), "j1")
    hosts = ["cmle-training-workerpool0-j1-0:2222"]
    workers = [f"cmle-training-workerpool1-j1-{i}:2222" for i in (0, 1)]
    chiefs = []
    for replica in found:
        cluster_spec = json.loads(replica.env["CLUSTER_SPEC"])
        assert cluster_spec["cluster"] == {"workerpool0": hosts, "workerpool1": workers}
        assert cluster_spec["task"] == {"type": f"workerpool{replica.pool}", "index": replica.index}
        tf_config = json.loads(replica.env["TF_CONFIG"])
        assert tf_config["cluster"] == {"chief": hosts, "worker": workers}
        assert replica.env["TF_USE_LEGACY_KERAS"] == "1" and replica.env["CLOUD_ML_JOB_ID"] == "j1"
        assert replica.command == ["python", "-m", "tfx.scripts.run_executor", "--flag"]
        for name in ("CLUSTER_SPEC", "TF_CONFIG"):
            monkeypatch.setenv(name, replica.env[name])
        tuner_worker = tuner_executor._WorkerExecutor(None)  # TFX's own CLUSTER_SPEC reader
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        chief = is_chief()
        assert tuner_worker._is_chief == chief
        assert resolver.task_type == ("chief" if replica.pool == 0 else "worker")
        assert resolver.task_id == replica.index
        chiefs.append(chief)
    assert chiefs == [True, False, False]
    (alone,) = vertex_standin.replicas(spec_of(1), "j2")
    assert "TF_CONFIG" not in alone.env  # not a distributed job


# --- 4. the in-container half ----------------------------------------------------------------

PROBE = (
    "from tfx.extensions.google_cloud_ai_platform import training_clients as t; "
    "print(t.gapic.JobServiceClient.__module__); "
    "c = t.VertexJobClient('europe-west4'); print(type(c._client).__name__, c._client.endpoint)"
)


@pytest.mark.slow  # a Python that imports TFX and Vertex's client: about 30 s each
@pytest.mark.parametrize("spool", [True, False])
def test_the_site_module_replaces_the_gapic_client_only_with_a_spool(tmp_path, spool):
    env = dict(os.environ, PYTHONPATH=vertex_standin.SITE, PYTHONWARNINGS="ignore")
    env.pop(vertex_standin.SPOOL_ENV, None)
    if spool:
        env[vertex_standin.SPOOL_ENV] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    if spool:
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.split() == [
            "sitecustomize",
            "SpoolJobServiceClient",
            "europe-west4-aiplatform.googleapis.com",
        ]
    else:  # Vertex's own client, which looks for Google credentials (there are none here)
        assert done.stdout.split() == ["google.cloud.aiplatform_v1.services.job_service.client"]
        assert "DefaultCredentialsError" in done.stderr.strip().splitlines()[-1]


def test_a_request_vertex_s_api_does_not_have_is_refused_as_by_the_gapic_client(tmp_path):
    client = load_site().SpoolJobServiceClient(
        {"api_endpoint": "europe-west4-aiplatform.googleapis.com"}, spool=str(tmp_path)
    )
    bad = {"display_name": "x", "job_spec": {"worker_pool_specs": [{"machineSpec": {}}]}}
    with pytest.raises(ValueError, match="machineSpec"):
        client.create_custom_job(parent="projects/p/locations/r", custom_job=bad)
    assert os.listdir(tmp_path) == []


# --- 5. bad flags ----------------------------------------------------------------------------

COMPILE = ["compile", "--image", IMAGE, "--pipeline-root", "gs://b/root", "--data-root"]
COMPILE += ["gs://b/digits", "--serving-dir", "gs://b/serving"]


@pytest.mark.parametrize(
    "flags, line",
    [
        (
            ["--trainer-workers", "2", "--region", "r"],
            "--trainer-workers 2 runs the Trainer as a Vertex AI custom job: it needs --project "
            "and --region (got project=None, region='r')",
        ),
        (
            ["--trainer-workers", "3", "--project", "p"],
            "--trainer-workers 3 runs the Trainer as a Vertex AI custom job: it needs --project "
            "and --region (got project='p', region=None)",
        ),
        (
            ["--trainer-workers", "0"],
            "--trainer-workers 0: a Vertex AI custom job here has 2 or more replicas (1 compiles "
            "the Trainer as one container)",
        ),
        (
            ["--trainer-workers", "2", "--project", "p", "--region", "r"]
            + ["--trainer-resources", "accelerator=nvidia.com/gpu"],
            # The compile's resources check (--backend vertex's vocabulary) comes first.
            "--trainer-resources: accelerator='nvidia.com/gpu' is a Kubernetes resource name "
            "(--backend kfp); Vertex names the device model",
        ),
        (
            ["--trainer-workers", "2", "--project", "p", "--region", "r"]
            + ["--trainer-resources", "cpu=4"],
            "--trainer-resources with --trainer-workers: a Vertex AI replica's CPUs and memory "
            "are its machine type's",
        ),
    ],
)
def test_bad_worker_flags_end_compile_with_one_line(tmp_path, capsys, flags, line):
    assert cli.main(COMPILE + ["--output", str(tmp_path / "job.json")] + flags) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("ga-tfx compile: error: " + line), last
    assert not (tmp_path / "job.json").exists()


def test_workers_without_the_multi_worker_strategy_end_compile_with_one_line(tmp_path, capsys):
    flags = ["--trainer-workers", "2", "--project", "p", "--region", "r"]
    assert cli.main(COMPILE + ["--output", str(tmp_path / "job.json")] + flags) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == (
        "ga-tfx compile: error: --trainer-workers 2 trains one model over 2 replicas: it needs "
        "--strategy multi_worker (got 'auto')"
    )
