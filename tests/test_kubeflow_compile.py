"""The Kubeflow job `ga-tfx compile` writes, as the manual promises it, in the fast tier: one
compile with the defaults and one with `--trainer-retries 5` (TFX's KubeflowV2DagRunner, no
cluster; the slow `test_kubeflow_pipeline.py` parses the job strictly against kfp's
PipelineSpec, runs its Trainer container and compares the golden).

Issue 53: a default schema of 2.0 (which open-source KFP cannot resolve) and a retry count
written one short were seen only by the slow tier.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx.pipelines import cli

import json

import pytest

pytestmark = [pytest.mark.tfx]  # the compile is TFX's

TRAINER = "GradientAccumulationTrainer"
COMMON = ["compile", "--image", "reg/ga-tfx:1", "--pipeline-root", "gs://b/r"]
COMMON += ["--data-root", "gs://b/digits", "--serving-dir", "gs://b/serving"]
# docs/pipelines.md, "Kubeflow": schema 2.1 (open-source KFP 2.x, kfp.local and Vertex AI)
# and "--trainer-retries, default 3".
DOCUMENTED_SCHEMA, DOCUMENTED_RETRIES = "2.1.0", 3


def _compiled(tmp_path, *flags):
    """The job file `ga-tfx compile` wrote with ``flags``, read back."""
    output = tmp_path / "job.json"
    assert cli.main(COMMON + ["--output", str(output), *flags]) == 0
    return json.loads(output.read_text())


def _retries(job):
    task = job["pipelineSpec"]["root"]["dag"]["tasks"][TRAINER]
    return task.get("retryPolicy", {}).get("maxRetryCount")


def test_the_default_job_is_schema_2_1_and_retries_the_trainer_3_times(tmp_path, capsys):
    job = _compiled(tmp_path)
    assert job["pipelineSpec"]["schemaVersion"] == DOCUMENTED_SCHEMA
    assert "pipeline spec 2.1.0" in capsys.readouterr().out
    assert _retries(job) == DOCUMENTED_RETRIES


def test_the_written_job_retries_the_trainer_as_often_as_asked(tmp_path):
    assert _retries(_compiled(tmp_path, "--trainer-retries", "5")) == 5


def _trainer_checkpoint_seconds(job):
    params = job["pipelineSpec"]["root"]["dag"]["tasks"][TRAINER]["inputs"]["parameters"]
    return params["checkpoint_every_seconds"]["runtimeValue"]["constant"]


def test_the_compiled_trainer_checkpoints_at_kubeflows_interval_unless_told(tmp_path):
    """A preempted pod on open-source KFP keeps only its last periodic checkpoint: the compiled
    Trainer's interval is Kubeflow's (60 s), not the local 600 s; one the user gives is kept."""
    from ga_tfx.components.trainer import settings as settings_lib

    job = _compiled(tmp_path)
    assert _trainer_checkpoint_seconds(job) == 60.0  # docs/trainer-and-tuner.md: "60 s"
    assert settings_lib.KUBEFLOW_CHECKPOINT_EVERY_SECONDS == 60.0
    given = _compiled(tmp_path, "--checkpoint-every-seconds", "90")
    assert _trainer_checkpoint_seconds(given) == 90
    # The local default, asked for by name, is kept too (it once became 60).
    local = _compiled(tmp_path, "--checkpoint-every-seconds", "600")
    assert _trainer_checkpoint_seconds(local) == 600
