"""The settings of ``ga-tfx compile`` beyond the training: the PipelineSpec's schema, the Beam
runner of the Beam steps, the Trainer's retries and the steps' resources. Imports neither TFX
nor kfp (the command's parser reads it for every command).
"""

from ga_tfx.pipelines import beam

import dataclasses
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
# Accelerator names: Vertex AI's machine-spec accelerator types, and the Kubernetes resource
# names the open-source KFP backend puts in the pod's limits.
ACCELERATORS = (
    "NVIDIA_TESLA_T4",
    "NVIDIA_TESLA_V100",
    "NVIDIA_TESLA_P100",
    "NVIDIA_TESLA_P4",
    "NVIDIA_TESLA_A100",
    "NVIDIA_A100_80GB",
    "NVIDIA_L4",
    "NVIDIA_H100_80GB",
    "NVIDIA_H100_MEGA_80GB",
    "NVIDIA_H200_141GB",
    "TPU_V2",
    "TPU_V3",
    "TPU_V5_LITEPOD",
    "nvidia.com/gpu",
    "amd.com/gpu",
)
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
    """What a step's container asks for: the PipelineSpec's ``resources`` (``cpuLimit`` in
    cores, ``memoryLimit`` in GB, ``accelerator`` type and count). Parsed from the flag text
    ``cpu=8,memory=32G,accelerator=NVIDIA_TESLA_T4,count=1`` (every key optional; memory in
    G, M, T or Gi, Mi, Ti; count defaults to 1 with an accelerator)."""

    cpu: Optional[float] = None
    memory_gb: Optional[float] = None
    accelerator: Optional[str] = None
    accelerator_count: int = 0

    @classmethod
    def parse(cls, text: str, flag: str = "resources") -> "Resources":
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
            return cls(**fields)
        except ValueError as error:
            raise ValueError(f"{flag}: {error}") from None

    def __post_init__(self):
        """Checked once, as it is made (parsed or built in code)."""
        for name, value in (("cpu", self.cpu), ("memory", self.memory_gb)):
            if value is not None and not value > 0:
                raise ValueError(f"{name}={value} must be positive")
        if self.accelerator is not None and self.accelerator not in ACCELERATORS:
            raise ValueError(
                f"accelerator={self.accelerator!r} is not a known type; allowed: "
                + ", ".join(ACCELERATORS)
            )
        if (self.accelerator is None) != (
            self.accelerator_count == 0
        ) or self.accelerator_count < 0:
            raise ValueError(
                f"count={self.accelerator_count} with accelerator={self.accelerator!r}: "
                "an accelerator needs a count of 1 or more, and a count needs an accelerator"
            )

    def spec(self):
        """As kfp's ``PipelineContainerSpec.ResourceSpec`` (TFX copies a component's platform
        config into its container's ``resources``)."""
        from kfp.pipeline_spec import pipeline_spec_pb2

        result = pipeline_spec_pb2.PipelineDeploymentConfig.PipelineContainerSpec.ResourceSpec()
        if self.cpu is not None:
            result.cpu_limit = self.cpu
        if self.memory_gb is not None:
            result.memory_limit = self.memory_gb
        if self.accelerator:
            result.accelerator.type = self.accelerator
            result.accelerator.count = self.accelerator_count
        return result


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
