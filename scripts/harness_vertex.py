"""The harness's ``--backend vertex`` mode: a compiled PipelineJob run as Vertex AI Pipelines
documents it runs one.

Read (Vertex's documents and the code that writes for it):
- the job is Vertex's PipelineJob JSON (``displayName``, ``labels``, ``pipelineSpec``,
  ``runtimeConfig``), what ``KubeflowV2DagRunner`` writes (tensorflow/tfx
  ``orchestration/kubeflow/v2/kubeflow_v2_dag_runner.py``, ``run``);
- outputs under ``<root>/<project>/<job id>/<task>_<uuid>/<output>``, the executor output file
  ``executor_output.json`` beside them: the layout TFX's entry point itself states
  (tensorflow/tfx ``orchestration/kubeflow/v2/container/kubeflow_v2_run_executor.py``,
  ``_run_executor``: "{gcsOutputDirectory}/{project_number}/{pipeline_job_user_id}/
  {task_name}_{task_uuid}/executor_output.json");
- an upstream artifact handed on with its type (Vertex keeps it in its metadata store);
- a task's ``lifecycle.preCacheCheck`` hook (TFX's file-based ExampleGen driver,
  ``orchestration/kubeflow/v2/file_based_example_gen/driver.py``) run first, its executor
  output's parameters and artifact metadata put into the executor's input;
- a run's parameters: the PipelineJob's ``runtimeConfig.parameterValues`` (schema 2.1; 2.0:
  ``runtimeConfig.parameters``, each ``{"intValue" | "doubleValue" | "stringValue": ...}``),
  "passed into PipelineJob.pipeline_spec to replace the placeholders at runtime" (Vertex's
  API reference, ``PipelineJob.RuntimeConfig``, ``parameter_values``), with the values given
  at job creation over them (``--param NAME=VALUE`` as the Vertex SDK's ``PipelineJob(...,
  parameter_values=...)``: googleapis/python-aiplatform ``google/cloud/aiplatform/utils/
  pipeline_utils.py``, ``PipelineRuntimeConfigBuilder.from_job_spec_json`` reads them with
  ``_parse_runtime_parameters``, ``update_runtime_parameters`` merges the given ones over them,
  ``_get_vertex_value`` refuses a name the root ``inputDefinitions`` lacks); TFX writes them
  there (tensorflow/tfx ``orchestration/kubeflow/v2/kubeflow_v2_dag_runner.py``, ``run``'s
  ``parameter_values``; ``pipeline_builder.py``), each task reading one as
  ``componentInputParameter`` (``harness_base.root_values``, shared with the kfp mode);
- ``retryPolicy``: ``backoffDuration * backoffFactor ** n`` before retry n + 1
  (kubeflow/pipelines ``sdk/python/kfp/dsl/structures.py``, ``RetryPolicy``: "the first retry
  will happen after 60 seconds, then after 120, 240, and so on"), at most ``maxRetryCount``.
Assumed (not read: Vertex is a service): a parameter the job's ``runtimeConfig`` lacks takes
the root's ``defaultValue`` (as KFP's driver does), else its task is refused;
``backoffMaxDuration`` is not applied; the user command is the container's first process (a
stopped pod's SIGTERM reaches Python); a task's container failing is what a retry follows.

Other backends' terms are refused by name: a bare PipelineSpec (the kfp mode's).
"""

import os
import uuid
from typing import Dict, Optional

import harness_base as base
from google.protobuf import json_format, struct_pb2
from kfp.pipeline_spec import pipeline_spec_pb2 as pb

# A stand-in for the Google Cloud project in Vertex's output layout.
PROJECT = "harness-project"


def load_job(job_path: str) -> dict:
    """The PipelineJob (JSON); a bare PipelineSpec (the kfp mode's job) is refused by name."""
    try:
        job = base.load_json(job_path)
    except ValueError:
        job = {}
    if "pipelineSpec" not in job:
        raise base.Unsupported(
            f"{job_path}: not a PipelineJob (no pipelineSpec): the vertex mode reads "
            "`ga-tfx compile --backend vertex`'s JSON; a bare PipelineSpec is --backend kfp's"
        )
    return job


def load_spec(job_path: str) -> pb.PipelineSpec:
    """The PipelineJob's PipelineSpec, parsed strictly by kfp's protos (an unknown field is an
    error); a bare PipelineSpec is refused by name (:func:`load_job`)."""
    return json_format.ParseDict(load_job(job_path)["pipelineSpec"], pb.PipelineSpec())


def runtime_values(runtime_config: dict) -> Dict[str, struct_pb2.Value]:
    """The PipelineJob's ``runtimeConfig`` parameter values, in schema 2.1's form:
    ``parameterValues`` if present, else 2.0's typed ``parameters`` (as the Vertex SDK's
    ``_parse_runtime_parameters`` reads them)."""
    values = {}
    if runtime_config.get("parameterValues") is not None:
        for name, value in runtime_config["parameterValues"].items():
            values[name] = json_format.ParseDict(value, struct_pb2.Value())
        return values
    for name, value in (runtime_config.get("parameters") or {}).items():
        values[name] = base.from_v20(json_format.ParseDict(value, pb.Value()))
    return values


class VertexRun(base.BaseRun):
    """One submission of the PipelineJob, as Vertex runs it (see the module's docstring)."""

    backend = "vertex"

    def load(self, job_path: str) -> pb.PipelineSpec:
        job = load_job(job_path)
        self.runtime_config = job.get("runtimeConfig") or {}
        return json_format.ParseDict(job["pipelineSpec"], pb.PipelineSpec())

    def parameter_defaults(self) -> Dict[str, struct_pb2.Value]:
        """The job's ``runtimeConfig`` values over the root's ``defaultValue`` (a run's
        ``--param`` values go over both: ``harness_base.root_values``)."""
        return {**super().parameter_defaults(), **runtime_values(self.runtime_config)}

    def layout_root(self) -> str:
        return os.path.join(self.pipeline_root, PROJECT, self.job_id)

    def task_root(self, task: str) -> str:
        return os.path.join(self.run_dir, f"{task}_{uuid.uuid4().hex[:8]}")

    def before(self, task: str) -> None:
        """Runs the task's ``lifecycle.preCacheCheck`` hook, if it has one, and applies its
        output to the executor's input."""
        container = self.container(task)
        if not (
            container.HasField("lifecycle") and container.lifecycle.HasField("pre_cache_check")
        ):
            return
        ei = self.inputs[task]
        hook = container.lifecycle.pre_cache_check
        executor_file = ei.outputs.output_file
        ei.outputs.output_file = os.path.join(os.path.dirname(executor_file), "driver_output.json")
        self._run(task, hook.command, hook.args, "driver")
        driver_output = base.read_output(ei.outputs.output_file)
        ei.outputs.output_file = executor_file
        for name, value in driver_output.parameter_values.items():
            if self.schema_21:
                ei.inputs.parameter_values[name].CopyFrom(value)
            else:
                ei.inputs.parameters[name].CopyFrom(base._as_v20(value))
        for name, arts in driver_output.artifacts.items():
            for ours, theirs in zip(ei.outputs.artifacts[name].artifacts, arts.artifacts):
                ours.metadata.CopyFrom(theirs.metadata)

    def retry_wait(self, policy, retries_done: int, elapsed: float) -> Optional[float]:
        if retries_done >= policy.max_retry_count:
            return None
        return base.backoff_wait(policy, retries_done, policy.backoff_factor or 2.0)
