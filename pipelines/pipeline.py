"""The ga-tfx digits pipeline: a plain function returning a ``tfx.dsl.Pipeline``.

CsvExampleGen -> StatisticsGen -> ImportSchemaGen (curated schema) -> ExampleValidator ->
DataCheck (stops on anomalies) -> Transform -> [Tuner] -> GradientAccumulationTrainer ->
Evaluator (accuracy threshold -> blessing) -> Pusher.

The user code is referenced by dotted path (``ga_tfx.pipelines.digits``), so the same definition
runs locally (:mod:`ga_tfx.pipelines.local`) and in the Kubeflow image
(:mod:`ga_tfx.pipelines.kubeflow`).
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx.components import keys
from ga_tfx.components.trainer import GradientAccumulationTrainer
from ga_tfx.components.tuner import tuner_fn
from ga_tfx.pipelines import data_check, user_code
from ga_tfx.pipelines.options import TrainingOptions

import os
from typing import List, Optional

import tensorflow_model_analysis as tfma
from tfx import v1 as tfx

MODEL_FN = user_code.DIGITS.model_fn
PREPROCESSING_FN = user_code.DIGITS.preprocessing_fn
TUNER_FN = "ga_tfx.components.tuner.tuner_fn.tuner_fn"


TUNER_OBJECTIVE = "val_accuracy"
TUNER_SEED = 0  # trials are seeded from it and their id: a repeated search ranks them the same


def trials_file(pipeline_root: str) -> str:
    """Where the Tuner appends its finished trials (read by the tuning report)."""
    return os.path.join(pipeline_root, "Tuner", "trials.jsonl")


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
) -> tfx.dsl.Pipeline:
    """The digits pipeline over the CSV files in ``data_root``.

    Args:
      pipeline_name: the MLMD pipeline name (runs of the same name share a cache).
      pipeline_root: where component outputs go (local path or ``gs://``).
      data_root: a directory of CSV files with ``pixel_00`` .. ``pixel_63`` and ``label``.
      serving_model_dir: where the Pusher copies a blessed model.
      options: the training options (:class:`TrainingOptions`).
      metadata_connection_config: MLMD connection (local runs); ``None`` on Kubeflow.
      enable_cache: reuse the outputs of components whose inputs did not change.
      beam_pipeline_args: Beam flags of the Beam-based components.
      curated_schema_file: where ImportSchemaGen reads the curated digits schema when it runs
        (default: the file beside this package; the Kubeflow image's path when compiled).
    """
    code = user_code.for_options(options)
    example_gen = tfx.components.CsvExampleGen(input_base=data_root)
    statistics_gen = tfx.components.StatisticsGen(examples=example_gen.outputs["examples"])
    # The curated schema of the shipped data; anomalies against it stop the run in DataCheck,
    # before Transform (which reads the schema DataCheck passed on) and the Trainer.
    # (Any other CSV: the schema SchemaGen infers, written where the user can curate it.)
    schema_gen = (
        tfx.components.ImportSchemaGen(schema_file=curated_schema_file or code.curated_schema)
        if code.curated_schema
        else tfx.components.SchemaGen(
            statistics=statistics_gen.outputs["statistics"], infer_feature_shape=True
        )
    )
    example_validator = tfx.components.ExampleValidator(
        statistics=statistics_gen.outputs["statistics"], schema=schema_gen.outputs["schema"]
    )
    checked = data_check.DataCheck(
        schema=schema_gen.outputs["schema"],
        statistics=statistics_gen.outputs["statistics"],
        anomalies=example_validator.outputs["anomalies"],
        effective_batch_size=data_check.largest_effective_batch(options),
    )
    transform = tfx.components.Transform(
        examples=example_gen.outputs["examples"],
        schema=checked.outputs["checked_schema"],
        **_user_code_args(code, "preprocessing_fn"),
        custom_config=code.transform_config,
    )
    components = [example_gen, statistics_gen, schema_gen, example_validator, checked, transform]

    settings = dict(
        label_key=code.label_key,
        raw_label_key=code.raw_label_key,
        micro_batch_size=options.micro_batch_size,
        strategy=options.strategy,
        checkpoint_every_updates=options.checkpoint_every_updates,
        checkpoint_every_seconds=options.checkpoint_every_seconds,
    )
    hyperparameters = None
    if options.tune:
        if code.model_fn is None:
            raise ValueError(
                "tune searches with the model of an installed module (model_fn); "
                f"a module_file ({code.module_file!r}) cannot be tuned here."
            )
        tuner_config = {
            keys.MODEL_FN: code.model_fn,
            keys.GA_TFX: dict(settings, accum_steps=options.accum_steps),
            keys.GA_TFX_SEARCH: {
                "accum_steps": list(options.search_accum_steps),
                "agc_clip_factor": (
                    None
                    if options.search_agc_clip_factor is None
                    else list(options.search_agc_clip_factor)
                ),
                "micro_batch_size": options.micro_batch_size,
            },
            keys.TUNER: {
                "max_trials": options.tuning_trials,
                "objective": TUNER_OBJECTIVE,
                "seed": TUNER_SEED,
                "trials_file": trials_file(pipeline_root),
            },
        }
        # Checked now, so that a bad search space fails when the pipeline is built.
        parsed = tuner_fn.parse_config(tuner_config, eval_steps=options.eval_steps)
        tuner_fn.trial_budget(options.tuning_updates, parsed.search_space)
        tuner = tfx.components.Tuner(
            examples=transform.outputs["transformed_examples"],
            transform_graph=transform.outputs["transform_graph"],
            tuner_fn=TUNER_FN,
            train_args=tfx.proto.TrainArgs(num_steps=options.tuning_updates),
            eval_args=tfx.proto.EvalArgs(num_steps=options.eval_steps),
            custom_config=tuner_config,
        )
        components.append(tuner)
        hyperparameters = tuner.outputs["best_hyperparameters"]

    trainer = GradientAccumulationTrainer(
        examples=transform.outputs["transformed_examples"],
        transform_graph=transform.outputs["transform_graph"],
        hyperparameters=hyperparameters,
        **_user_code_args(code, "model_fn"),
        accum_steps=options.accum_steps,
        agc_clip_factor=options.agc_clip_factor,
        updates_per_epoch=options.updates_per_epoch,
        train_args=tfx.proto.TrainArgs(num_steps=options.train_updates),
        eval_args=tfx.proto.EvalArgs(num_steps=options.eval_steps),
        **settings,
    )
    evaluator = tfx.components.Evaluator(
        examples=example_gen.outputs["examples"],
        model=trainer.outputs["model"],
        eval_config=_eval_config(code, options),
    )
    pusher = tfx.components.Pusher(
        model=trainer.outputs["model"],
        model_blessing=evaluator.outputs["blessing"],
        push_destination=tfx.proto.PushDestination(
            filesystem=tfx.proto.PushDestination.Filesystem(base_directory=serving_model_dir)
        ),
    )
    components += [trainer, evaluator, pusher]

    return tfx.dsl.Pipeline(
        pipeline_name=pipeline_name,
        pipeline_root=pipeline_root,
        components=components,
        enable_cache=enable_cache,
        metadata_connection_config=metadata_connection_config,
        beam_pipeline_args=beam_pipeline_args or [],
    )


def _user_code_args(code, dotted_name):
    """``{dotted_name: path}`` for installed user code, or ``{"module_file": ...}``."""
    if code.module_file:
        return {"module_file": code.module_file}
    return {dotted_name: getattr(code, dotted_name)}


def _eval_config(code, options):
    """Metrics on the raw eval split through ``serving_default``, blessed past the threshold:
    accuracy >= ``min_accuracy`` for classification, RMSE <= ``max_rmse`` (when given) for
    regression. The label is the raw column, or the transformed one when Transform encodes it
    (a string label): the Evaluator applies ``transform_features`` first."""
    if code.task == "regression":
        threshold = (
            None
            if options.max_rmse is None
            else tfma.MetricThreshold(
                value_threshold=tfma.GenericValueThreshold(upper_bound={"value": options.max_rmse})
            )
        )
        metrics = [
            tfma.MetricConfig(class_name="RootMeanSquaredError", threshold=threshold),
            tfma.MetricConfig(class_name="MeanAbsoluteError"),
        ]
    else:
        metrics = [
            tfma.MetricConfig(
                class_name="SparseCategoricalAccuracy",
                threshold=tfma.MetricThreshold(
                    value_threshold=tfma.GenericValueThreshold(
                        lower_bound={"value": options.min_accuracy}
                    )
                ),
            ),
            tfma.MetricConfig(class_name="SparseCategoricalCrossentropy"),
        ]
    label_key = code.raw_label_key if code.curated_schema else code.label_key
    return tfma.EvalConfig(
        model_specs=[
            tfma.ModelSpec(
                signature_name="serving_default",
                label_key=label_key,
                preprocessing_function_names=["transform_features"],
            )
        ],
        slicing_specs=[tfma.SlicingSpec()],
        metrics_specs=[
            tfma.MetricsSpec(metrics=metrics + [tfma.MetricConfig(class_name="ExampleCount")])
        ],
    )
