"""Compiles the digits pipeline for Kubeflow Pipelines (v2 / Vertex AI Pipelines).

``KubeflowV2DagRunner`` writes a PipelineJob JSON whose every step runs ``python -m
ga_tfx.pipelines.kubeflow --executor_class_path ... --json_serialized_invocation_args {{$}}`` in
``image``; the image (``docker/Dockerfile``) holds TFX, ga-tfx and this package, so the dotted
user code (``ga_tfx.pipelines.digits``) and the ga-tfx Trainer executor import there as they
do here.

Run as a program, this module is that entry point: it imports ``ga_tfx`` first (Keras 2 as
``tf.keras``), then runs TFX's own ``kubeflow_v2_run_executor`` unchanged (same flags, same
executor input). TFX's entry point imports TensorFlow and the Evaluator (which binds
``tf.keras``) before it imports a step's executor, so a step started with it directly would
get Keras 3, and the ga-tfx Trainer refuses to run under Keras 3.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx.components.trainer import distribution, preemption
from ga_tfx.pipelines import pipeline as pipeline_lib
from ga_tfx.pipelines.kubeflow_options import (
    DEFAULT_PIPELINE_SPEC,
    DEFAULT_TRAINER_RETRIES,
    PIPELINE_SPECS,
    RETRY_BACKOFF,
    Resources,
    beam_args,
)

import json
import os
import runpy
import sys
from typing import Any, Dict, List, Optional

from tfx import v1 as tfx

TFX_ENTRY_POINT = "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"
# The command of every step's container (TFX adds the executor's flags as its args).
CONTAINER_COMMAND = ["python", "-m", "ga_tfx.pipelines.kubeflow"]
# Where docker/Dockerfile puts the checkout (WORKDIR, COPY pipelines pipelines): ImportSchemaGen
# reads the curated digits schema there when the step runs in the image.
IMAGE_SOURCE_DIR = "/opt/ga-tfx"
IMAGE_DIGITS_SCHEMA = IMAGE_SOURCE_DIR + "/pipelines/data/digits_schema.pbtxt"


def _steps(pipeline) -> Dict[str, Any]:
    """The pipeline's ``trainer`` and (when tuned) ``tuner`` nodes."""
    found = {}
    for node in pipeline.components:
        for step in ("trainer", "tuner"):
            if type(node).__name__.lower().endswith(step):
                found[step] = node
    return found


def compile_pipeline(
    output_file: str,
    image: str,
    pipeline_name: str,
    pipeline_root: str,
    data_root: str,
    serving_model_dir: str,
    options: pipeline_lib.TrainingOptions = pipeline_lib.TrainingOptions(),
    beam_pipeline_args: Optional[List[str]] = None,
    *,
    pipeline_spec: str = DEFAULT_PIPELINE_SPEC,
    trainer_retries: int = DEFAULT_TRAINER_RETRIES,
    resources: Optional[Dict[str, Resources]] = None,
    trainer_workers: int = 1,
    project: Optional[str] = None,
    region: Optional[str] = None,
    trainer_machine_type: Optional[str] = None,
) -> Dict[str, Any]:
    """Writes the PipelineJob JSON to ``output_file`` and returns it as a dict.

    ``pipeline_root``, ``data_root`` and ``serving_model_dir`` are paths as the cluster sees
    them (e.g. ``gs://bucket/...``); nothing is checked or read here. ``beam_pipeline_args``:
    default :func:`beam_args` for DirectRunner. ``pipeline_spec``: the schema,
    :data:`PIPELINE_SPECS` says which backend reads which. ``trainer_retries``: the Trainer
    task's ``retryPolicy.maxRetryCount`` (0: none). ``resources``: ``"trainer"`` or ``"tuner"`` ->
    :class:`Resources` for that step's container. ``trainer_workers`` > 1: the Trainer runs as a
    Vertex AI custom job of that many replicas in ``project`` and ``region``, each on a
    ``trainer_machine_type`` with the Trainer's accelerator
    (:mod:`ga_tfx.components.trainer.vertex_training`).
    """
    if pipeline_spec not in PIPELINE_SPECS:
        raise ValueError(
            f"pipeline spec {pipeline_spec!r}: allowed "
            + "; ".join(f"{k} ({v})" for k, v in PIPELINE_SPECS.items())
        )
    if trainer_retries < 0:
        raise ValueError(f"trainer retries {trainer_retries}: allowed 0 or more")
    vertex = None
    if trainer_workers != 1:
        from ga_tfx.components.trainer.vertex_training import VertexTraining

        resources = dict(resources or {})
        vertex = VertexTraining.of(
            image,
            trainer_workers,
            project,
            region,
            trainer_machine_type,
            resources.pop("trainer", None),
        )
    pipeline = pipeline_lib.create_pipeline(
        pipeline_name,
        pipeline_root,
        data_root,
        serving_model_dir,
        options,
        beam_pipeline_args=(
            beam_pipeline_args
            if beam_pipeline_args is not None
            else beam_args("DirectRunner", image, pipeline_root)
        ),
        curated_schema_file=IMAGE_DIGITS_SCHEMA,
        vertex_training=vertex,
    )
    steps = _steps(pipeline)
    for step, wanted in (resources or {}).items():
        if step not in steps:
            raise ValueError(
                f"resources for the {step}: the pipeline has no {step} step (it has "
                f"{', '.join(node.id for node in pipeline.components)})"
            )
        steps[step].with_platform_config(wanted.spec())
    runner = tfx.orchestration.experimental.KubeflowV2DagRunner(
        config=tfx.orchestration.experimental.KubeflowV2DagRunnerConfig(
            default_image=image,
            default_commands=list(CONTAINER_COMMAND),
            use_pipeline_spec_2_1=pipeline_spec == "2.1",
        ),
        output_dir=os.path.dirname(os.path.abspath(output_file)),
        output_filename=os.path.basename(output_file),
    )
    job = runner.run(pipeline)
    if trainer_retries:
        task = job["pipelineSpec"]["root"]["dag"]["tasks"][steps["trainer"].id]
        task["retryPolicy"] = dict(maxRetryCount=trainer_retries, **RETRY_BACKOFF)
        with open(output_file, "w") as f:
            json.dump(job, f, indent=2, sort_keys=True)
    return job


def main():
    """The steps' entry point: TFX's, after ``import ga_tfx`` (at the top of this module). A
    Trainer stopped by SIGTERM (a preempted pod) saved a checkpoint; its one line is the last
    the log shows, and the exit code is 128 + the signal (143), as ``ga-tfx run``'s. A worker
    of a multi-worker Trainer whose peer is gone ends with one line saying so (exit 1)."""
    try:
        runpy.run_module(TFX_ENTRY_POINT, run_name="__main__", alter_sys=True)
    except Exception as error:
        lost = distribution.peer_lost(error)
        if lost is not None:  # another worker is gone (a node lost): one line, not a traceback
            print(lost, flush=True)
            sys.exit(1)
        sys.exit(preemption.report_interruption(error))


if __name__ == "__main__":
    main()
