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
from ga_tfx.pipelines import pipeline as pipeline_lib

import os
import runpy
from typing import Any, Dict, List, Optional

from tfx import v1 as tfx

TFX_ENTRY_POINT = "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"
# The command of every step's container (TFX adds the executor's flags as its args).
CONTAINER_COMMAND = ["python", "-m", "ga_tfx.pipelines.kubeflow"]
# Where docker/Dockerfile puts the checkout (WORKDIR, COPY pipelines pipelines): ImportSchemaGen
# reads the curated digits schema there when the step runs in the image.
IMAGE_SOURCE_DIR = "/opt/ga-tfx"
IMAGE_DIGITS_SCHEMA = IMAGE_SOURCE_DIR + "/pipelines/data/digits_schema.pbtxt"


def compile_pipeline(
    output_file: str,
    image: str,
    pipeline_name: str,
    pipeline_root: str,
    data_root: str,
    serving_model_dir: str,
    options: pipeline_lib.TrainingOptions = pipeline_lib.TrainingOptions(),
    beam_pipeline_args: Optional[List[str]] = None,
) -> Dict[str, Any]:
    """Writes the PipelineJob JSON to ``output_file`` and returns it as a dict.

    ``pipeline_root``, ``data_root`` and ``serving_model_dir`` are paths as the cluster sees
    them (e.g. ``gs://bucket/...``); nothing is checked or read here.
    """
    pipeline = pipeline_lib.create_pipeline(
        pipeline_name,
        pipeline_root,
        data_root,
        serving_model_dir,
        options,
        beam_pipeline_args=beam_pipeline_args,
        curated_schema_file=IMAGE_DIGITS_SCHEMA,
    )
    runner = tfx.orchestration.experimental.KubeflowV2DagRunner(
        config=tfx.orchestration.experimental.KubeflowV2DagRunnerConfig(
            default_image=image, default_commands=list(CONTAINER_COMMAND)
        ),
        output_dir=os.path.dirname(os.path.abspath(output_file)),
        output_filename=os.path.basename(output_file),
    )
    return runner.run(pipeline)


def main():
    """The steps' entry point: TFX's, after ``import ga_tfx`` (at the top of this module)."""
    runpy.run_module(TFX_ENTRY_POINT, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
