"""The harness's ``--backend kfp`` mode: a compiled job run as open-source Kubeflow Pipelines
2.x's driver and launcher run one.

Read (kubeflow/pipelines ``backend/src/v2`` at 7b70c7b, 2026-08-21, unless a tag is named):
- the job is the bare PipelineSpec YAML the API server takes (``backend/src/apiserver/template/
  template.go``), not Vertex's PipelineJob: a PipelineJob is refused by name, and so is schema
  2.0 (``driver/resolve.go`` resolves the 2.1 forms only);
- the pipeline root is given at run creation (``driver/root_dag.go``, ``RootDAG``: the run's
  ``gcsOutputDirectory``, else the default ``minio://mlpipeline/v2/artifacts`` of
  ``config/env.go``), which TFX cannot write (tf.io.gfile: "File system scheme 'minio' not
  implemented"): ``minio://`` is refused, naming what TFX writes;
- root ``inputDefinitions.parameters`` are the run's parameters, each task reading one as
  ``componentInputParameter``: the run's value, else the spec's ``defaultValue``, else an error
  (``driver/resolve.go``, ``resolveInputs``: lines ~300-320 and ~389; the values resolved by
  ``harness_base.root_values``, shared with the vertex mode);
- outputs under ``<root>/<pipeline name>/<run id>/<task>/<uuid>/<output>`` (``metadata/
  client.go`` ``GetPipeline``: the run's root is ``GenerateOutputURI(root, [pipelineName,
  runID])``; ``driver/driver.go`` ``provisionOutputs``: ``GenerateOutputURI(root, [taskName,
  salt])``, the salt ``uuid.NewString()`` in ``driver/container.go``), each named by its output
  key, the executor output file ``output_metadata.json`` in that task folder;
- an upstream artifact is handed on untyped, ``"type": {"instanceSchema": ""}``
  (``metadata/client.go``: ``Schema: ""`` in ``GetOutputArtifactsByExecutionId``, put into the
  type by ``OutputArtifact.ToRuntimeArtifact``, lines ~256 and ~1144);
- no ``lifecycle.preCacheCheck`` hook is run (nothing in ``backend/src/v2`` reads a container's
  ``lifecycle``: it is Vertex's), so TFX's ExampleGen driver does not run;
- the user command runs as the launcher's child (``component/launcher_v2.go``, ``execute``:
  ``exec.Command(cmd, args...)`` then ``command.Run()``, no process group of its own, no signal
  handling), the launcher under Argo's emissary as the container's first process
  (argoproj/argo-workflows ``cmd/argoexec/commands/emissary.go``): stand-ins for both run in
  the container (``scripts/kfp_pod.py``, which cites what each does);
- ``retryPolicy`` is compiled into Argo's ``retryStrategy`` from KFP backend 2.5.0 (``compiler/
  argocompiler/container.go`` at tag 2.5.0, ``getTaskRetryStrategy``; tags 2.0.5 to 2.4.0
  compile none): limit ``maxRetryCount``, backoff duration in whole seconds, factor truncated to
  an integer, ``maxDuration``; Argo waits ``duration * factor ** (attempts - 1)`` and gives up
  once the wait would end past ``maxDuration`` from the first attempt's start (argo-workflows
  ``workflow/controller/operator.go``, ``processNodeRetries``).
Assumed: the host folder given as the pipeline root stands for a ``gs://`` root and is its own
local path (the launcher's ``LocalPathForURI`` maps ``gs://b/x`` to ``/gcs/b/x``); a failed
container is what Argo retries (a pod deleted before the controller saw it fails with no retry,
not emulated); no ML Metadata, no cache by ``driver/cache.go``'s key (``cache_from`` stands in
for a hit), no artifact upload or download by the launcher.
"""

import os
import uuid
from typing import List, Optional, Tuple

import harness_base as base
import yaml
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2 as pb

# The stand-ins for Argo's emissary and KFP's launcher, mounted read-only into the container.
POD_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kfp_pod.py")
POD_SCRIPT_IN_CONTAINER = "/opt/ga-tfx-harness/kfp_pod.py"
# What TFX (tf.io.gfile) writes, for the refusal of a root it cannot.
TFX_WRITES = "a local or mounted path, or gs:// (tf.io.gfile)"


def load_spec(job_path: str) -> pb.PipelineSpec:
    """The bare PipelineSpec (YAML; its first document), parsed strictly by kfp's protos; a
    Vertex PipelineJob is refused by name."""
    with open(job_path) as f:
        docs = [doc for doc in yaml.safe_load_all(f) if doc]
    if not docs:
        raise base.Unsupported(f"{job_path}: empty: the kfp mode reads a PipelineSpec YAML")
    doc = docs[0]
    if "pipelineSpec" in doc or "displayName" in doc:
        raise base.Unsupported(
            f"{job_path}: a Vertex PipelineJob (displayName, pipelineSpec); open-source KFP "
            "uploads a bare PipelineSpec: compile with --backend kfp"
        )
    spec = pb.PipelineSpec()
    json_format.ParseDict(doc, spec)
    if spec.schema_version == "2.0.0":
        raise base.Unsupported(
            f"{job_path}: schemaVersion 2.0.0: open-source KFP's driver resolves only the 2.1 "
            "forms (driver/resolve.go): compile with --pipeline-spec 2.1"
        )
    return spec


class KfpRun(base.BaseRun):
    """One run of the PipelineSpec, as open-source KFP runs it (see the module's docstring).

    Args (beyond :class:`harness_base.BaseRun`'s, whose ``params`` are the run's parameters
    over the spec's ``defaultValue``):
      pod: run the user command under the emissary and launcher stand-ins (default True); False
        runs it as the container's first process (a fast check of the rest).
    """

    backend = "kfp"

    def __init__(
        self,
        job_path: str,
        image: str,
        pipeline_root: str,
        mounts: tuple = (),
        job_id: Optional[str] = None,
        pod: bool = True,
        **kwargs,
    ):
        scheme = pipeline_root.split("://", 1)[0] if "://" in pipeline_root else ""
        if scheme:
            what = (
                "TFX cannot write it (File system scheme 'minio' not implemented)"
                if scheme == "minio"
                else "the harness runs on a host folder standing in for it"
            )
            raise base.Unsupported(
                f"pipeline root {pipeline_root!r}: {what}; allowed: {TFX_WRITES}, here a "
                "host folder"
            )
        self.use_pod = pod
        super().__init__(
            job_path, image, pipeline_root, mounts, job_id or str(uuid.uuid4()), **kwargs
        )

    def load(self, job_path: str) -> pb.PipelineSpec:
        return load_spec(job_path)

    def layout_root(self) -> str:
        return os.path.join(self.pipeline_root, self.spec.pipeline_info.name, self.job_id)

    def task_root(self, task: str) -> str:
        return os.path.join(self.run_dir, task, str(uuid.uuid4()))

    output_file_name = "output_metadata.json"

    def output_name(self, task: str, name: str) -> str:
        return name

    def handed(self, produced: pb.ArtifactList) -> pb.ArtifactList:
        untyped = pb.ArtifactList()
        untyped.CopyFrom(produced)
        for art in untyped.artifacts:
            art.type.Clear()
            art.type.instance_schema = ""  # metadata/client.go: Schema: ""
        return untyped

    def pod(self, command: List[str], args: List[str]) -> Tuple[List[str], List[str], List[str]]:
        if not self.use_pod:
            return command, args, []
        stand_in = [command[0], POD_SCRIPT_IN_CONTAINER]
        wrapped = stand_in + ["emissary", "--"] + stand_in + ["launcher", "--"] + command
        return wrapped, args, [f"--volume={POD_SCRIPT}:{POD_SCRIPT_IN_CONTAINER}:ro"]

    def retry_wait(self, policy, retries_done: int, elapsed: float) -> Optional[float]:
        if retries_done >= policy.max_retry_count:
            return None
        factor = int(policy.backoff_factor)  # container.go: int32(GetBackoffFactor())
        seconds = policy.backoff_duration.seconds  # container.go: whole seconds
        wait = float(seconds * factor**retries_done if factor > 0 else seconds)
        limit = policy.backoff_max_duration.seconds
        if limit and (elapsed > limit or elapsed + wait > limit):
            return None  # operator.go: "Backoff would exceed max duration limit"
        return wait
