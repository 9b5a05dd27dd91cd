"""The settings of ``ga-tfx compile`` beyond the training: the backend and the file it takes,
the PipelineSpec's schema, the job's runtime parameters, the paths TFX can write, the Beam
runner of the Beam steps, the Trainer's retries and the steps' resources in each backend's
vocabulary. Imports neither TFX nor kfp (the command's parser reads it for every command).
"""

from ga_tfx.pipelines import beam

import dataclasses
import os
import re
from typing import Any, Dict, List, Optional, Sequence

# The PipelineSpec schema each backend reads (docs/pipelines.md, "Kubeflow"). TFX writes 2.0
# by default (task parameters as ``constantValue``, executors reading ``inputs.parameters``);
# the open-source KFP 2.x backend and ``kfp.local`` resolve only 2.1's ``constant`` and
# ``parameterValues`` (kubeflow/pipelines backend/src/v2/driver/resolve.go).
PIPELINE_SPECS = {
    "2.1": "open-source Kubeflow Pipelines 2.x, kfp.local and Vertex AI Pipelines",
    "2.0": "Vertex AI Pipelines (TFX's default form; open-source KFP cannot resolve it)",
}
DEFAULT_PIPELINE_SPEC = "2.1"
# Where the Beam-based steps run: DirectRunner inside the step's own container, or Dataflow
# with the image as the workers' SDK container.
BEAM_RUNNERS = ("DirectRunner", "DataflowRunner")
# Retries of a failed Trainer pod (a preempted node's SIGTERM ends it with 143 after a
# checkpoint; the retry resumes): KFP's retryPolicy on the Trainer task; 0 compiles none.
DEFAULT_TRAINER_RETRIES = 3
RETRY_BACKOFF = {"backoffDuration": "30s", "backoffFactor": 2.0, "backoffMaxDuration": "600s"}
# The two backends ``ga-tfx compile --backend`` writes for, and what each file is.
BACKENDS = {
    "kfp": "open-source Kubeflow Pipelines 2.x: the bare PipelineSpec as YAML, what its API "
    "server takes on upload",
    "vertex": "Vertex AI Pipelines: the PipelineJob JSON (the PipelineSpec, its runtimeConfig)",
}
DEFAULT_BACKEND = "vertex"  # today's file; open-source KFP asks for --backend kfp
# The file each backend takes: kfp 2.x's client loads only .yaml/.yml (or an archive of one)
# before upload (kfp/client/client.py, _extract_pipeline_yaml); Vertex's PipelineJob is JSON.
OUTPUT_SUFFIXES = {"kfp": (".yaml", ".yml"), "vertex": (".json",)}
# Open-source KFP: the driver puts the accelerator type, as it is, as a resource name into the
# pod's limits (kubeflow/pipelines backend/src/v2/driver/driver.go, initPodSpecPatch:
# ``res.Limits[k8score.ResourceName(acceleratorType)]``): a Kubernetes extended resource,
# ``<domain>/<name>`` outside kubernetes.io, as a device plugin advertises it. These are the
# usual ones; any such name is taken.
KUBERNETES_ACCELERATORS = ("nvidia.com/gpu", "amd.com/gpu", "google.com/tpu")
_EXTENDED_RESOURCE = re.compile(
    r"(?!(?:[a-z0-9-]+\.)*kubernetes\.io/)[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
)
# The compiled job's runtime parameters: name -> (type, what it is). Each task that needs one
# reads the root's input (``componentInputParameter``), whose default is the compile flag's
# value; a run sets its own (KFP: the run's parameters; Vertex: the PipelineJob's
# ``parameter_values``), so one compiled job serves many runs.
RUNTIME_PARAMETERS = {
    "data_root": (str, "the folder of CSV files ExampleGen reads (--data-root)"),
    "serving_dir": (str, "where the Pusher copies a blessed model (--serving-dir)"),
    "train_windows": (int, "the Trainer's length in windows (--train-windows)"),
}
# How a run is given its pipeline root (the file holds none under kfp; Vertex's holds a default).
RUN_PIPELINE_ROOT = {
    "kfp": "the run's pipeline_root (kfp.Client().create_run_from_pipeline_package(..., "
    "pipeline_root=...), the API's runtime_config.pipeline_root)",
    "vertex": "the PipelineJob's pipeline_root (aiplatform.PipelineJob(..., pipeline_root=...), "
    "runtimeConfig.gcsOutputDirectory)",
}
_MEMORY_UNITS = {
    "": 1.0,
    "G": 1.0,
    "M": 1e-3,
    "T": 1e3,
    "Gi": 2**30 / 1e9,
    "Mi": 2**20 / 1e9,
    "Ti": 2**40 / 1e9,
}


@dataclasses.dataclass(frozen=True)
class Resources:
    """What a step's container asks for, in ``backend``'s vocabulary: ``cpu`` cores, memory in
    GB, an accelerator type and count. Parsed from the flag text
    ``cpu=8,memory=32G,accelerator=NVIDIA_TESLA_T4,count=1`` (every key optional; memory in
    G, M, T or Gi, Mi, Ti; count defaults to 1 with an accelerator).

    ``backend="vertex"``: Vertex's accelerator types (``vertex_training.ACCELERATOR_TYPES``);
    ``"kfp"``: a Kubernetes extended resource name (:data:`KUBERNETES_ACCELERATORS`). Each
    refuses the other's names, naming the equivalent. How each is compiled: :meth:`spec`."""

    cpu: Optional[float] = None
    memory_gb: Optional[float] = None
    accelerator: Optional[str] = None
    accelerator_count: int = 0
    backend: str = DEFAULT_BACKEND

    @classmethod
    def parse(cls, text: str, flag: str = "resources", backend: str = DEFAULT_BACKEND):
        fields: Dict[str, Any] = {}
        for item in filter(None, (part.strip() for part in text.split(","))):
            key, _, value = item.partition("=")
            try:
                if key == "cpu":
                    fields["cpu"] = float(value)
                elif key == "memory":
                    number = re.fullmatch(r"([0-9.]+)([GMT]i?)?", value)
                    fields["memory_gb"] = (
                        float(number.group(1)) * _MEMORY_UNITS[number.group(2) or ""]
                    )
                elif key == "accelerator":
                    fields["accelerator"] = value
                elif key == "count":
                    fields["accelerator_count"] = int(value)
                else:
                    raise ValueError(f"unknown key {key!r}")
            except (ValueError, AttributeError) as error:
                raise ValueError(
                    f"{flag}: {item!r} is not valid ({error}); allowed: cpu=CORES, "
                    "memory=SIZE (e.g. 32G, 512Mi), accelerator=TYPE, count=N, comma-separated"
                ) from None
        if fields.get("accelerator") and "accelerator_count" not in fields:
            fields["accelerator_count"] = 1
        try:
            return cls(**fields, backend=backend)
        except ValueError as error:
            raise ValueError(f"{flag}: {error}") from None

    def __post_init__(self):
        """Checked once, as it is made (parsed or built in code)."""
        if self.backend not in BACKENDS:
            raise ValueError(f"backend={self.backend!r}: allowed {', '.join(BACKENDS)}")
        for name, value in (("cpu", self.cpu), ("memory", self.memory_gb)):
            if value is not None and not value > 0:
                raise ValueError(f"{name}={value} must be positive")
        if self.accelerator is not None:
            _check_accelerator(self.accelerator, self.backend)
        if (self.accelerator is None) != (
            self.accelerator_count == 0
        ) or self.accelerator_count < 0:
            raise ValueError(
                f"count={self.accelerator_count} with accelerator={self.accelerator!r}: "
                "an accelerator needs a count of 1 or more, and a count needs an accelerator"
            )

    def spec(self):
        """As kfp's ``PipelineContainerSpec.ResourceSpec`` (TFX copies a component's platform
        config into its container's ``resources``), with the fields both stacks'
        kfp-pipeline-spec have (0.2.2 under TFX 1.16, 2.17.3 beside kfp 2.16 under TFX 1.21:
        ``cpu_limit``, ``memory_limit``, ``cpu_request``, ``memory_request``,
        ``accelerator.type``/``count``; the newer string fields ``resource_*`` exist only in the
        latter).

        Vertex: the limits and the accelerator, from which it picks the machine. KFP: the
        requests as well, equal to the limits: the driver writes ``cpu_request`` and
        ``memory_request`` into the pod's requests and the limits into its limits
        (backend/src/v2/driver/driver.go, initPodSpecPatch); with both set the pod is
        Guaranteed (the last that Kubernetes evicts under node pressure) whatever default
        request a namespace's LimitRange would give. The accelerator goes only into the limits,
        as Kubernetes wants for an extended resource (its request is the limit; a request
        without a limit is refused)."""
        from kfp.pipeline_spec import pipeline_spec_pb2

        result = pipeline_spec_pb2.PipelineDeploymentConfig.PipelineContainerSpec.ResourceSpec()
        if self.cpu is not None:
            result.cpu_limit = self.cpu
            if self.backend == "kfp":
                result.cpu_request = self.cpu
        if self.memory_gb is not None:
            result.memory_limit = self.memory_gb
            if self.backend == "kfp":
                result.memory_request = self.memory_gb
        if self.accelerator:
            result.accelerator.type = self.accelerator
            result.accelerator.count = self.accelerator_count
        return result


def _check_accelerator(name: str, backend: str) -> None:
    """``ValueError`` unless ``name`` is an accelerator in ``backend``'s vocabulary; a name of
    the other backend's is refused naming this one's equivalent."""
    # Vertex names the device model (its AcceleratorType enum: one declaration, the Vertex
    # Trainer's); a Kubernetes cluster names a device plugin's resource instead.
    from ga_tfx.components.trainer.vertex_training import ACCELERATOR_TYPES as VERTEX_ACCELERATORS

    if backend == "vertex":
        if name in VERTEX_ACCELERATORS:
            return
        if _EXTENDED_RESOURCE.fullmatch(name):
            raise ValueError(
                f"accelerator={name!r} is a Kubernetes resource name (--backend kfp); Vertex "
                "names the device model: one of " + ", ".join(VERTEX_ACCELERATORS)
            )
        raise ValueError(
            f"accelerator={name!r} is not a known type; allowed: " + ", ".join(VERTEX_ACCELERATORS)
        )
    if _EXTENDED_RESOURCE.fullmatch(name):
        return
    if name in VERTEX_ACCELERATORS:
        plugin = "google.com/tpu" if name.startswith("TPU_") else "nvidia.com/gpu"
        raise ValueError(
            f"accelerator={name!r} is Vertex's name (--backend vertex); a Kubernetes pod "
            f"asks for the device plugin's resource: {plugin} (the model by a node selector)"
        )
    raise ValueError(
        f"accelerator={name!r} is not a Kubernetes resource name; allowed: <domain>/<name> of a "
        "device plugin, e.g. " + ", ".join(KUBERNETES_ACCELERATORS)
    )


def check_schema(pipeline_spec: str, backend: str) -> str:
    """``pipeline_spec`` if ``backend`` reads it, else ``ValueError`` in one line."""
    if pipeline_spec not in PIPELINE_SPECS:
        raise ValueError(
            f"pipeline spec {pipeline_spec!r}: allowed "
            + "; ".join(f"{k} ({v})" for k, v in PIPELINE_SPECS.items())
        )
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r}: allowed {', '.join(BACKENDS)}")
    if backend == "kfp" and pipeline_spec != "2.1":
        raise ValueError(
            f"--pipeline-spec {pipeline_spec} with --backend kfp: open-source KFP resolves only "
            "2.1's parameter forms (kubeflow/pipelines backend/src/v2/driver/resolve.go); use "
            "--pipeline-spec 2.1, or --backend vertex for 2.0"
        )
    return pipeline_spec


def check_cluster_path(flag: str, value: str, backend: str = DEFAULT_BACKEND) -> str:
    """``value`` if TFX's file I/O in the image can open it, else ``ValueError`` in one line.

    The steps read and write through ``tfx.dsl.io.fileio``, i.e. ``tf.io.gfile``: it opens
    ``gs://`` (TensorFlow's own GCS file system) and paths (a volume mounted at the same place
    in every pod); ``minio://``, ``s3://`` and ``hdfs://`` raise "File system scheme '...' not
    implemented" there (TensorFlow 2.16 and 2.21 without tensorflow-io, which the image does
    not install; checked with ``tf.io.gfile.exists``). Open-source KFP's own default pipeline
    root is ``minio://mlpipeline/v2/artifacts`` (kubeflow/pipelines
    ``backend/src/v2/config/env.go``, ``defaultPipelineRoot``), used when a run names none
    (``backend/src/v2/driver/root_dag.go``): a TFX job must be given one."""
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", value)
    if scheme is None and value.startswith("/") or scheme and scheme.group(1) == "gs":
        return value
    what = f"{scheme.group(1)}:// is not implemented there" if scheme else "a relative path"
    runs = (
        f"; give a pipeline root of that kind to each run as {RUN_PIPELINE_ROOT[backend]}"
        if flag == "--pipeline-root"
        else ""
    )
    raise ValueError(
        f"{flag} {value!r}: {what}; TFX's file I/O in the image (tf.io.gfile) writes "
        "gs://BUCKET/... or an absolute path mounted in every pod (e.g. /mnt/pipeline)" + runs
    )


def check_output_file(path: str, backend: str) -> str:
    """``path`` if its suffix is one ``backend`` takes (:data:`OUTPUT_SUFFIXES`), else
    ``ValueError`` naming the right one."""
    if path.endswith(OUTPUT_SUFFIXES[backend]):
        return path
    stem = os.path.splitext(path)[0]
    raise ValueError(
        f"--output {path!r}: --backend {backend} writes "
        + (
            f"the bare PipelineSpec as YAML, which kfp's client uploads only from a .yaml "
            f"file: use {stem}.yaml"
            if backend == "kfp"
            else f"the PipelineJob as JSON: use {stem}.json"
        )
    )


def beam_args(runner: str, image: str, pipeline_root: str, extra: Sequence[str] = ()) -> List[str]:
    """The Beam flags of the compiled job's Beam-based steps (ExampleGen and its driver,
    StatisticsGen, Transform, Evaluator). Each names its runner: with none, or with Beam's
    ``DirectRunner``, Beam 2.77 first tries Prism and downloads its binary in every step; the
    choice ``DirectRunner`` is Beam's in-process runner named as such
    (:data:`ga_tfx.pipelines.beam.IN_PROCESS_RUNNER`). ``--sdk_container_image`` is the image: the
    workers' container on Dataflow, and, for TFX, the sign that the code is already there (else
    each step builds an sdist of TFX: tfx/utils/dependency_utils.py). DataflowRunner needs
    ``--project=`` and ``--region=`` among ``extra``; its temporary files go under the
    pipeline root unless ``extra`` names ``--temp_location=``."""
    if runner not in BEAM_RUNNERS:
        raise ValueError(f"beam runner {runner!r}: allowed {', '.join(BEAM_RUNNERS)}")
    if runner == "DirectRunner":
        return beam.in_process_args(1, f"--sdk_container_image={image}") + list(extra)
    missing = [f for f in ("--project=", "--region=") if not any(a.startswith(f) for a in extra)]
    if missing:
        raise ValueError(
            f"DataflowRunner needs {' and '.join(m + '...' for m in missing)} among the Beam "
            "arguments (--beam-arg=--project=P --beam-arg=--region=R)"
        )
    args = [f"--runner={runner}", f"--sdk_container_image={image}"]
    if not any(a.startswith("--temp_location=") for a in extra):
        args.append(f"--temp_location={pipeline_root.rstrip('/')}/beam-temp")
    return args + ["--experiments=use_runner_v2"] + list(extra)
