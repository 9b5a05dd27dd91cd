"""The Trainer step as Vertex AI custom training with several replicas, through TFX's own Vertex
training extension (``tfx.extensions.google_cloud_ai_platform``).

``ga-tfx compile --trainer-workers N`` (N >= 2) compiles the Trainer as
:class:`VertexGradientAccumulationTrainer`: the ga-tfx Trainer whose executor is :class:`Executor`,
a subclass of the extension's ``GenericExecutor`` whose ``_GetExecutorClass`` names the ga-tfx
Trainer executor (:mod:`ga_tfx.components.trainer.executor`), as TFX's own Vertex Tuner runs its
``_WorkerExecutor`` in the replicas (``tuner/executor.py``, lines 173-180). What happens, read in
TFX v1.16.0 and v1.21.0 (``git diff v1.16.0 v1.21.0 -- tfx/extensions/google_cloud_ai_platform``
changes only ``runner_test.py``; the line numbers below hold in both):

1. The step's container runs :class:`Executor`. Its ``Do`` is the extension's
   (``trainer/executor.py``, lines 70-126): it reads ``custom_config['ai_platform_training_args']``
   (the CustomJob: its ``project`` and ``job_spec``), ``'ai_platform_enable_vertex'`` and
   ``'ai_platform_vertex_region'`` (:meth:`VertexTraining.custom_config` writes exactly these) and
   calls ``runner.start_cloud_training`` with the class path of ``_GetExecutorClass()``.
2. ``start_cloud_training`` (``runner.py``, lines 154-206) pops ``project``;
   ``VertexJobClient.create_training_job`` (``training_clients.py``, lines 316-402) overwrites
   every pool's ``container_spec.command`` with ``python -m tfx.scripts.run_executor
   --executor_class_path ... --inputs ... --outputs ... --exec-properties ...`` (lines 134-160,
   370-379: the step's own artifacts and execution properties, the run_fn's arguments); the gapic
   ``JobServiceClient`` built in ``create_client`` (lines 301-314) creates the job under
   ``projects/P/locations/R`` (lines 404-423), and ``runner._launch_cloud_training`` polls it every
   30 s until it ends, raising ``RuntimeError`` if it failed (``runner.py``, lines 28, 48-123).
3. Vertex starts the replicas: pool 0 is the primary replica, ``TF_CONFIG`` task type ``chief``;
   pool 1 holds the other N-1, type ``worker``
   (https://cloud.google.com/vertex-ai/docs/training/distributed-training, "Configure a
   distributed training job" and "TF_CONFIG"). Each runs the ga-tfx Trainer executor under
   ``MultiWorkerMirroredStrategy`` (``strategy="multi_worker"`` is required); only the chief
   checks and keeps ``serving_model_dir``, the checkpoints and the run record
   (:func:`ga_tfx.distribution.is_chief`, through :mod:`ga_tfx.components.trainer.distribution`),
   the others write to temporary folders. TFX's own ``GenericExecutor.Do`` would require
   ``serving_model_dir`` on every replica (``tfx/components/trainer/executor.py``, v1.16.0 lines
   177-180, v1.21.0 lines 189-192: "it is the user module's responsibility to export the model
   only once"; its ``_is_chief`` at line 46 / 47 is not called there).
4. The replicas read the step's inputs and write its outputs at the URIs the step was given, so
   the pipeline root must be one every replica reaches (``gs://...``).

Each pool's container also gets ``TF_USE_LEGACY_KERAS=1`` (Vertex's ``container_spec.env``, which
the extension leaves as given): ``tfx.scripts.run_executor`` imports TFX, and with it Keras 3,
before it imports the ga-tfx executor, so ``import ga_tfx`` would come too late to select Keras 2
(:mod:`ga_tfx._keras`). One worker (N = 1) compiles the plain Trainer: one container, the step.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx.components.trainer import component
from ga_tfx.components.trainer import executor as trainer_executor

import dataclasses
from typing import Any, Dict, List, Optional

from google.cloud.aiplatform_v1.types import AcceleratorType, CustomJobSpec
from tfx.dsl.components.base import executor_spec
from tfx.extensions.google_cloud_ai_platform import constants
from tfx.extensions.google_cloud_ai_platform.trainer import executor as vertex_executor

# TFX's Vertex Tuner's machine when it writes the worker pools itself (tuner/executor.py, lines
# 123-137).
DEFAULT_MACHINE_TYPE = "n1-standard-8"
# Vertex's accelerator names: its API's AcceleratorType enum, as its client library has it.
ACCELERATOR_TYPES = tuple(
    name for name in AcceleratorType.__members__ if name != "ACCELERATOR_TYPE_UNSPECIFIED"
)
# Each replica's environment beyond Vertex's own (module docstring, last paragraph).
REPLICA_ENV = {"TF_USE_LEGACY_KERAS": "1"}
# The only strategy under which the replicas train as one model.
STRATEGY = "multi_worker"


class Executor(vertex_executor.GenericExecutor):
    """Submits the Trainer step as a Vertex AI custom job (TFX's extension's ``Do``); every
    replica runs :class:`ga_tfx.components.trainer.executor.Executor`."""

    def _GetExecutorClass(self):
        return trainer_executor.Executor


class VertexGradientAccumulationTrainer(component.GradientAccumulationTrainer):
    """The ga-tfx Trainer run as a Vertex AI custom job by :class:`Executor`, as TFX's
    ``tfx.extensions.google_cloud_ai_platform.Trainer`` is the stock Trainer with the extension's
    executor (``trainer/component.py``); build it with :meth:`VertexTraining.trainer`."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)


@dataclasses.dataclass(frozen=True)
class VertexTraining:
    """The Trainer's Vertex AI custom job: ``workers`` replicas of ``image`` on ``machine_type``
    machines (each with ``accelerator_count`` of ``accelerator``, Vertex's names:
    :data:`ACCELERATOR_TYPES`) in ``project`` and ``region``. Checked as it is made: a bad value
    raises ``ValueError`` with one line naming it."""

    image: str
    workers: int
    project: Optional[str]
    region: Optional[str]
    machine_type: str = DEFAULT_MACHINE_TYPE
    accelerator: Optional[str] = None
    accelerator_count: int = 0

    def __post_init__(self):
        if self.workers < 2:
            raise ValueError(
                f"--trainer-workers {self.workers}: a Vertex AI custom job here has 2 or more "
                "replicas (1 compiles the Trainer as one container)"
            )
        if not self.project or not self.region:
            raise ValueError(
                f"--trainer-workers {self.workers} runs the Trainer as a Vertex AI custom job: it "
                f"needs --project and --region (got project={self.project!r}, "
                f"region={self.region!r})"
            )
        if self.accelerator is not None and self.accelerator not in ACCELERATOR_TYPES:
            raise ValueError(
                f"accelerator={self.accelerator!r}: a Vertex AI worker pool takes one of "
                + ", ".join(ACCELERATOR_TYPES)
            )

    @classmethod
    def of(cls, image, workers, project, region, machine_type=None, resources=None):
        """From the compile flags; ``resources``: the Trainer's
        :class:`~ga_tfx.pipelines.kubeflow_options.Resources` (``--trainer-resources``), each
        replica's accelerator (its CPUs and memory are its machine type's)."""
        if resources is not None and (resources.cpu is not None or resources.memory_gb is not None):
            raise ValueError(
                "--trainer-resources with --trainer-workers: a Vertex AI replica's CPUs and "
                "memory are its machine type's; give --trainer-machine-type (allowed in "
                "--trainer-resources: accelerator=TYPE, count=N)"
            )
        return cls(
            image,
            workers,
            project,
            region,
            machine_type or DEFAULT_MACHINE_TYPE,
            getattr(resources, "accelerator", None),
            getattr(resources, "accelerator_count", 0),
        )

    def worker_pool_specs(self) -> List[Dict[str, Any]]:
        """Pool 0: the chief (one replica); pool 1: the other ``workers - 1``; the same machine
        and container (its command is the extension's, step 2 of the module docstring)."""
        machine: Dict[str, Any] = {"machine_type": self.machine_type}
        if self.accelerator:
            machine.update(
                accelerator_type=self.accelerator, accelerator_count=self.accelerator_count
            )
        container = {
            "image_uri": self.image,
            "env": [{"name": name, "value": value} for name, value in REPLICA_ENV.items()],
        }
        pools = [
            {"machine_spec": dict(machine), "replica_count": count, "container_spec": container}
            for count in (1, self.workers - 1)
        ]
        CustomJobSpec(worker_pool_specs=pools)  # Vertex's own message: an unknown field raises
        return pools

    def custom_config(self) -> Dict[str, Any]:
        """The Trainer's ``custom_config``, keyed as the extension reads it (step 1)."""
        return {
            vertex_executor.TRAINING_ARGS_KEY: {
                "project": self.project,
                "job_spec": {"worker_pool_specs": self.worker_pool_specs()},
            },
            constants.ENABLE_VERTEX_KEY: True,
            constants.VERTEX_REGION_KEY: self.region,
        }

    def trainer(self, **kwargs) -> VertexGradientAccumulationTrainer:
        """The Trainer component, from :class:`GradientAccumulationTrainer`'s arguments; their
        ``strategy`` must be ``"multi_worker"``."""
        if kwargs.get("strategy") != STRATEGY:
            raise ValueError(
                f"--trainer-workers {self.workers} trains one model over {self.workers} "
                f"replicas: it needs --strategy {STRATEGY} (got {kwargs.get('strategy')!r})"
            )
        return VertexGradientAccumulationTrainer(custom_config=self.custom_config(), **kwargs)
