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
from ga_tfx.components.trainer import settings as settings_lib
from ga_tfx.pipelines import kfp_inputs
from ga_tfx.pipelines import pipeline as pipeline_lib
from ga_tfx.pipelines.kubeflow_options import (
    DEFAULT_BACKEND,
    DEFAULT_PIPELINE_SPEC,
    DEFAULT_TRAINER_RETRIES,
    RETRY_BACKOFF,
    RUNTIME_PARAMETERS,
    Resources,
    beam_args,
    check_cluster_path,
    check_output_file,
    check_schema,
)

import dataclasses
import json
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


def runtime_parameters(data_root: str, serving_model_dir: str, windows: int) -> Dict[str, Any]:
    """The job's runtime parameters (:data:`RUNTIME_PARAMETERS`) as TFX's
    ``RuntimeParameter`` objects, their defaults the given values. TFX's Kubeflow V2 compiler
    turns each into a root input of the PipelineSpec (``root.inputDefinitions.parameters``,
    tfx ``orchestration/kubeflow/v2/pipeline_builder.py``, ``PipelineBuilder.build``) and each
    task input set to it into ``componentInputParameter`` (``step_builder.py``,
    ``StepBuilder.build``); it compiles no default (``compiler_utils.build_parameter_type_spec``
    writes the type only): :func:`compile_pipeline` writes them."""
    values = dict(data_root=data_root, serving_dir=serving_model_dir, train_windows=windows)
    return {
        name: tfx.dsl.experimental.RuntimeParameter(
            name=name, ptype=ptype, default=values[name], description=description
        )
        for name, (ptype, description) in RUNTIME_PARAMETERS.items()
    }


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
    backend: str = DEFAULT_BACKEND,
    pipeline_spec: str = DEFAULT_PIPELINE_SPEC,
    trainer_retries: int = DEFAULT_TRAINER_RETRIES,
    resources: Optional[Dict[str, Resources]] = None,
    trainer_workers: int = 1,
    project: Optional[str] = None,
    region: Optional[str] = None,
    trainer_machine_type: Optional[str] = None,
) -> Dict[str, Any]:
    """Writes the job for ``backend`` to ``output_file`` and returns what it wrote, as a dict.

    ``backend="kfp"`` (open-source Kubeflow Pipelines 2.x): ``output_file`` ends in ``.yaml``
    (or ``.yml``) and holds the bare PipelineSpec that TFX's ``KubeflowV2DagRunner`` compiles
    (the ``pipelineSpec`` of its PipelineJob, schema 2.1 only), as YAML: what KFP's API server
    takes on upload (kubeflow/pipelines ``backend/src/apiserver/template/template.go``,
    ``isPipelineSpec``: a PipelineSpec with ``pipelineInfo.name`` and ``root``) and kfp's client
    loads before upload (``kfp/client/client.py``, ``_extract_pipeline_yaml``). No pipeline
    root is in it: a run is created with one (KFP: the run's ``pipeline_root``, the API's
    ``runtime_config.pipeline_root``, which its driver reads as ``gcsOutputDirectory``:
    ``backend/src/v2/driver/root_dag.go``; without it KFP's default, ``minio://...``, which TFX
    cannot write). ``backend="vertex"``: the PipelineJob JSON, as TFX writes it
    (``displayName``, ``labels``, ``pipelineSpec``, ``runtimeConfig`` with
    ``gcsOutputDirectory`` = ``pipeline_root``, a default that the PipelineJob's
    ``pipeline_root`` overrides), schema 2.1 or 2.0.

    Runtime parameters (both backends; :data:`RUNTIME_PARAMETERS`): ``data_root`` (STRING, the
    CSV folder ExampleGen reads as ``input_base``), ``serving_dir`` (STRING, the Pusher's
    folder) and ``train_windows`` (NUMBER_INTEGER, the Trainer's length in windows): root
    ``inputDefinitions.parameters``, read by the tasks as ``componentInputParameter``, their
    defaults the arguments (``data_root``, ``serving_model_dir``, the options' windows): under
    kfp in each one's ``defaultValue``, under vertex in ``runtimeConfig.parameterValues``
    (2.0: ``runtimeConfig.parameters``). The Trainer's checkpoints stay under the compiled
    ``<pipeline_root>/.ga_tfx_resume/<pipeline_name>`` whatever pipeline root a run has.
    A run's values reach the tasks as each backend passes them: KFP takes the run's
    ``runtime_config.parameters``, fills the missing ones from the defaults
    (``backend/src/v2/compiler/argocompiler/argo.go``) and resolves each
    ``componentInputParameter`` to it (``backend/src/v2/driver/resolve.go``); Vertex takes the
    PipelineJob's ``parameter_values`` over ``runtimeConfig.parameterValues``.

    ``pipeline_root``, ``data_root`` and ``serving_model_dir`` are paths as the pods see them,
    checked for a scheme TFX can write (:func:`check_cluster_path`); nothing is read.
    ``beam_pipeline_args``: default :func:`beam_args` for DirectRunner. ``pipeline_spec``: the
    schema, :data:`PIPELINE_SPECS` says which backend reads which. ``trainer_retries``: the
    Trainer task's ``retryPolicy.maxRetryCount`` (0: none). ``resources``: ``"trainer"`` or
    ``"tuner"`` -> :class:`Resources` for that step's container, in ``backend``'s vocabulary.
    ``trainer_workers`` > 1 (``backend="vertex"`` only): the Trainer runs as a Vertex AI custom
    job of that many replicas in ``project`` and ``region``, each on a ``trainer_machine_type``
    with the Trainer's accelerator (:mod:`ga_tfx.components.trainer.vertex_training`).
    """
    check_schema(pipeline_spec, backend)
    check_output_file(output_file, backend)
    for flag, path in (
        ("--pipeline-root", pipeline_root),
        ("--data-root", data_root),
        ("--serving-dir", serving_model_dir),
    ):
        check_cluster_path(flag, path, backend)
    if trainer_retries < 0:
        raise ValueError(f"trainer retries {trainer_retries}: allowed 0 or more")
    # A preempted pod on open-source KFP keeps only its last periodic checkpoint (about 1 s
    # between SIGTERM and the end: docs/failure-and-resume.md): the Trainer's Kubeflow interval.
    accumulation = options.accumulation
    options = dataclasses.replace(
        options,
        accumulation=dataclasses.replace(
            accumulation,
            checkpoint_every_seconds=settings_lib.kubeflow_checkpoint_every_seconds(
                accumulation.checkpoint_every_seconds
            ),
        ),
    )
    parameters = runtime_parameters(data_root, serving_model_dir, options.windows_plan()[0])
    if trainer_workers != 1 and backend != "vertex":
        raise ValueError(
            f"--trainer-workers {trainer_workers} with --backend {backend}: open-source KFP "
            "starts one container per task (several workers need Kubeflow's training "
            "operator: docs/pipelines.md, 'Several Trainer workers'); allowed with --backend vertex"
        )
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
        parameters["data_root"],
        parameters["serving_dir"],
        options,
        beam_pipeline_args=(
            beam_pipeline_args
            if beam_pipeline_args is not None
            else beam_args("DirectRunner", image, pipeline_root)
        ),
        curated_schema_file=IMAGE_DIGITS_SCHEMA,
        runtime_windows=parameters["train_windows"],
        vertex_training=vertex,
    )
    steps = _steps(pipeline)
    _set_resources(pipeline, steps, resources or {}, backend)
    runner = tfx.orchestration.experimental.KubeflowV2DagRunner(
        config=tfx.orchestration.experimental.KubeflowV2DagRunnerConfig(
            default_image=image,
            default_commands=list(CONTAINER_COMMAND),
            use_pipeline_spec_2_1=pipeline_spec == "2.1",
        ),
    )
    job = runner.run(
        pipeline,
        parameter_values={name: p.default for name, p in parameters.items()},
        write_out=False,
    )
    if trainer_retries:
        task = job["pipelineSpec"]["root"]["dag"]["tasks"][steps["trainer"].id]
        task["retryPolicy"] = dict(maxRetryCount=trainer_retries, **RETRY_BACKOFF)
    if backend == "kfp":
        return _write_kfp_spec(output_file, job["pipelineSpec"], parameters)
    with open(output_file, "w") as f:
        json.dump(job, f, indent=2, sort_keys=True)
    return job


def _set_resources(pipeline, steps, resources: Dict[str, Resources], backend: str) -> None:
    """Each step's :class:`Resources` as its platform config (TFX compiles it into the step's
    container ``resources``); ``ValueError`` for a step the pipeline lacks or resources in the
    other backend's vocabulary."""
    for step, wanted in resources.items():
        if step not in steps:
            raise ValueError(
                f"resources for the {step}: the pipeline has no {step} step (it has "
                f"{', '.join(node.id for node in pipeline.components)})"
            )
        if wanted.backend != backend:
            raise ValueError(
                f"resources for the {step} are in --backend {wanted.backend}'s vocabulary, "
                f"the job is for --backend {backend}"
            )
        steps[step].with_platform_config(wanted.spec())


def _write_kfp_spec(output_file: str, spec: Dict[str, Any], parameters) -> Dict[str, Any]:
    """Writes the bare PipelineSpec ``spec`` as YAML, each root input parameter with its
    ``defaultValue`` (KFP's API server fills a run's missing parameters from them:
    kubeflow/pipelines ``backend/src/v2/compiler/argocompiler/argo.go``, "fill root component
    default parameters"), and returns it."""
    import yaml

    root_inputs = spec["root"]["inputDefinitions"]["parameters"]
    for name, parameter in parameters.items():
        root_inputs[name]["defaultValue"] = parameter.default
        root_inputs[name]["description"] = parameter.description
    with open(output_file, "w") as f:
        yaml.safe_dump(spec, f, sort_keys=True)
    return spec


def main():
    """The steps' entry point: TFX's, after ``import ga_tfx`` (at the top of this module), given
    the ExecutorInput with every untyped input artifact typed from the task's own inputs spec
    (:mod:`ga_tfx.pipelines.kfp_inputs`: open-source KFP passes upstream artifacts untyped; an
    input it cannot type ends the step with one line, exit 1). A Trainer stopped by SIGTERM (a
    preempted pod) saved a checkpoint; its one line is the last the log shows, and the exit
    code is 128 + the signal (143), as ``ga-tfx run``'s. A worker of a multi-worker Trainer
    whose peer is gone ends with one line saying so (exit 1)."""
    try:
        sys.argv = kfp_inputs.typed_argv(sys.argv)
    except kfp_inputs.UntypedInput as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        sys.exit(1)
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
