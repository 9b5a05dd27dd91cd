"""The ga-tfx pipeline: a plain function returning a ``tfx.dsl.Pipeline``, composed of parts.

The shipped digits: CsvExampleGen -> StatisticsGen -> ImportSchemaGen (curated schema) ->
ExampleValidator -> DataCheck (stops on anomalies) -> Transform -> [Tuner] ->
GradientAccumulationTrainer -> Evaluator (accuracy threshold -> blessing) -> Pusher. Any CSV
(``options.csv.label``) swaps in its own parts (:mod:`ga_tfx.pipelines.parts.data`).

The user code is referenced by dotted path (``ga_tfx.pipelines.digits``), so the same definition
runs locally (:mod:`ga_tfx.pipelines.local`) and in the Kubeflow image
(:mod:`ga_tfx.pipelines.kubeflow`).
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx.pipelines import user_code
from ga_tfx.pipelines.options import TrainingOptions
from ga_tfx.pipelines.parts import data, evaluation, training

import os
from typing import List, Optional

from tfx import v1 as tfx

# The Trainer's resumable checkpoints, under the pipeline root: <RESUME_DIR>/<pipeline name>/...
RESUME_DIR = ".ga_tfx_resume"


def create_pipeline(
    pipeline_name: str,
    pipeline_root: str,
    data_root: str,
    serving_model_dir: str,
    options: TrainingOptions = TrainingOptions(),
    *,
    metadata_connection_config=None,
    enable_cache: bool = True,
    beam_pipeline_args: Optional[List[str]] = None,
    curated_schema_file: Optional[str] = None,
    train_rows: Optional[int] = None,
    runtime_windows=None,
    vertex_training=None,
) -> tfx.dsl.Pipeline:
    """The digits pipeline over the CSV files in ``data_root`` (or, with ``options.csv.label``, the
    pipeline of any CSV: see :mod:`ga_tfx.pipelines.parts.data`).

    Args:
      pipeline_name: the MLMD pipeline name (runs of the same name share a cache).
      pipeline_root: where component outputs go (local path or ``gs://``).
      data_root: a directory of CSV files with ``pixel_00`` .. ``pixel_63`` and ``label`` (or a
        ``tfx.dsl.experimental.RuntimeParameter`` of ``ptype=str``: a compiled job's run sets it).
      serving_model_dir: where the Pusher copies a blessed model (or a str RuntimeParameter).
      options: the training options (:class:`TrainingOptions`).
      metadata_connection_config: MLMD connection (local runs); ``None`` on Kubeflow.
      enable_cache: reuse the outputs of components whose inputs did not change.
      beam_pipeline_args: Beam flags of the Beam-based components.
      curated_schema_file: where ImportSchemaGen reads the curated digits schema when it runs
        (default: the file beside this package; the Kubeflow image's path when compiled).
      train_rows: the training split's rows (about 2/3 of the rows with a label), from which a
        ``--label`` run without ``train_windows`` derives its length
        (:meth:`TrainingOptions.windows_plan`); None: not counted.
      runtime_windows: a ``tfx.dsl.experimental.RuntimeParameter`` of ``ptype=int`` that the
        Trainer reads as its length instead of the plan's windows (a compiled job's run sets
        it; the windows per epoch stay the plan's); None: the plan's.
      vertex_training: the Trainer as a Vertex AI custom job of several replicas
        (:class:`~ga_tfx.components.trainer.vertex_training.VertexTraining`); None: one container.
    """
    code = user_code.for_options(options.csv)
    windows, windows_per_epoch = options.windows_plan(train_rows)
    if runtime_windows is not None:
        windows = runtime_windows

    example_gen = data.example_gen(code, data_root)
    examples = example_gen.outputs["examples"]
    labeled = data.labeled_examples(code, examples)  # any CSV: rows without a label dropped
    if labeled is not None:
        examples = labeled.outputs["labeled_examples"]
    statistics_gen = data.statistics_gen(code, examples)
    statistics = statistics_gen.outputs["statistics"]
    schema_gen = data.schema_gen(code, statistics, curated_schema_file)
    schema = schema_gen.outputs["schema"]
    example_validator = tfx.components.ExampleValidator(statistics=statistics, schema=schema)
    anomalies = example_validator.outputs["anomalies"]
    checked = data.data_check(code, options, examples, statistics, schema, anomalies)
    transform = data.transform(code, examples, checked.outputs["checked_schema"])

    run, tuning = options.accumulation, options.tuning
    settings = training.trainer_settings(code, run, windows_per_epoch)
    tuner = (
        training.tuner(code, run, tuning, settings, transform, pipeline_root)
        if tuning.tune
        else None
    )
    # Keyed by the pipeline, not by the run: a Kubeflow job submitted again gets a new job id
    # and new output URIs (on Vertex, <root>/<project>/<job id>/<task>_<uuid>/...).
    resume_root = os.path.join(pipeline_root, RESUME_DIR, pipeline_name)
    trainer = training.trainer(
        code, run, settings, transform, tuner, windows, resume_root, vertex_training
    )

    baseline = evaluation.baseline(code, transform)  # the generic model must beat it
    evaluator = evaluation.evaluator(code, options.blessing, examples, trainer, baseline)
    pusher = evaluation.pusher(trainer, evaluator, serving_model_dir)

    components = [example_gen, labeled, statistics_gen, schema_gen, example_validator, checked]
    components += [transform, tuner, trainer, baseline, evaluator, pusher]
    return tfx.dsl.Pipeline(
        pipeline_name=pipeline_name,
        pipeline_root=pipeline_root,
        components=[component for component in components if component is not None],
        enable_cache=enable_cache,
        metadata_connection_config=metadata_connection_config,
        beam_pipeline_args=beam_pipeline_args or [],
    )
