"""The ga-tfx digits pipeline: a plain function returning a ``tfx.dsl.Pipeline``.

CsvExampleGen -> StatisticsGen -> SchemaGen -> ExampleValidator -> Transform -> [Tuner] ->
GradientAccumulationTrainer -> Evaluator (accuracy threshold -> blessing) -> Pusher.

The user code is referenced by dotted path (``ga_tfx.pipelines.digits``), so the same definition runs
locally (:mod:`ga_tfx.pipelines.local`) and in the Kubeflow image (:mod:`ga_tfx.pipelines.kubeflow`).
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)

import dataclasses
from typing import List, Optional, Sequence

import tensorflow_model_analysis as tfma
from tfx import v1 as tfx

from ga_tfx.components.trainer import GradientAccumulationTrainer
from ga_tfx.components.tuner import tuner_fn
from ga_tfx.pipelines import digits

MODEL_FN = "ga_tfx.pipelines.digits"
PREPROCESSING_FN = "ga_tfx.pipelines.digits.preprocessing_fn"
TUNER_FN = "ga_tfx.components.tuner.tuner_fn.tuner_fn"


@dataclasses.dataclass(frozen=True)
class TrainingOptions:
    """How the Trainer (and the optional Tuner) train; defaults suit the shipped data.

    ``train_updates`` counts optimizer updates of ``accum_steps * micro_batch_size`` examples;
    ``eval_steps`` counts evaluation micro-batches. With ``tune``, the Tuner searches
    ``accum_steps`` over ``search_accum_steps`` and the AGC clip factor over
    ``search_agc_clip_factor`` (AGC off included) in ``tuning_trials`` trials of
    ``tuning_updates`` updates, and its best values override ``accum_steps`` and
    ``agc_clip_factor`` in the Trainer.
    """

    accum_steps: int = 4
    micro_batch_size: int = 32
    train_updates: int = 60
    updates_per_epoch: Optional[int] = 20
    eval_steps: int = 8
    agc_clip_factor: Optional[float] = 0.08
    strategy: str = "auto"
    tune: bool = False
    search_accum_steps: Sequence[int] = (1, 2, 4)
    search_agc_clip_factor: Sequence[float] = (0.01, 0.16)
    tuning_trials: int = 3
    tuning_updates: int = 10
    min_accuracy: float = 0.8


def create_pipeline(pipeline_name: str, pipeline_root: str, data_root: str,
                    serving_model_dir: str, options: TrainingOptions = TrainingOptions(), *,
                    metadata_connection_config=None, enable_cache: bool = True,
                    beam_pipeline_args: Optional[List[str]] = None) -> tfx.dsl.Pipeline:
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
    """
    if not 0 < options.min_accuracy <= 1:
        raise ValueError(f"min_accuracy must be in (0, 1], got {options.min_accuracy!r}.")
    example_gen = tfx.components.CsvExampleGen(input_base=data_root)
    statistics_gen = tfx.components.StatisticsGen(examples=example_gen.outputs["examples"])
    schema_gen = tfx.components.SchemaGen(statistics=statistics_gen.outputs["statistics"],
                                          infer_feature_shape=True)
    example_validator = tfx.components.ExampleValidator(
        statistics=statistics_gen.outputs["statistics"], schema=schema_gen.outputs["schema"])
    transform = tfx.components.Transform(
        examples=example_gen.outputs["examples"], schema=schema_gen.outputs["schema"],
        preprocessing_fn=PREPROCESSING_FN)
    components = [example_gen, statistics_gen, schema_gen, example_validator, transform]

    settings = dict(label_key=digits.LABEL_KEY, raw_label_key=digits.RAW_LABEL_KEY,
                    micro_batch_size=options.micro_batch_size, strategy=options.strategy)
    hyperparameters = None
    if options.tune:
        tuner_config = {
            "model_fn": MODEL_FN,
            "ga_tfx": dict(settings, accum_steps=options.accum_steps),
            "ga_tfx_search": {
                "accum_steps": list(options.search_accum_steps),
                "agc_clip_factor": list(options.search_agc_clip_factor),
                "micro_batch_size": options.micro_batch_size},
            "tuner": {"max_trials": options.tuning_trials, "objective": "val_accuracy"},
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
            custom_config=tuner_config)
        components.append(tuner)
        hyperparameters = tuner.outputs["best_hyperparameters"]

    trainer = GradientAccumulationTrainer(
        examples=transform.outputs["transformed_examples"],
        transform_graph=transform.outputs["transform_graph"],
        hyperparameters=hyperparameters,
        model_fn=MODEL_FN,
        accum_steps=options.accum_steps,
        agc_clip_factor=options.agc_clip_factor,
        updates_per_epoch=options.updates_per_epoch,
        train_args=tfx.proto.TrainArgs(num_steps=options.train_updates),
        eval_args=tfx.proto.EvalArgs(num_steps=options.eval_steps),
        **settings)
    evaluator = tfx.components.Evaluator(
        examples=example_gen.outputs["examples"], model=trainer.outputs["model"],
        eval_config=_eval_config(options.min_accuracy))
    pusher = tfx.components.Pusher(
        model=trainer.outputs["model"], model_blessing=evaluator.outputs["blessing"],
        push_destination=tfx.proto.PushDestination(
            filesystem=tfx.proto.PushDestination.Filesystem(
                base_directory=serving_model_dir)))
    components += [trainer, evaluator, pusher]

    return tfx.dsl.Pipeline(
        pipeline_name=pipeline_name, pipeline_root=pipeline_root, components=components,
        enable_cache=enable_cache, metadata_connection_config=metadata_connection_config,
        beam_pipeline_args=beam_pipeline_args or [])


def _eval_config(min_accuracy):
    """Accuracy on the raw eval split through ``serving_default``; blessed above the bound."""
    accuracy = tfma.MetricConfig(
        class_name="SparseCategoricalAccuracy",
        threshold=tfma.MetricThreshold(value_threshold=tfma.GenericValueThreshold(
            lower_bound={"value": min_accuracy})))
    return tfma.EvalConfig(
        model_specs=[tfma.ModelSpec(signature_name="serving_default",
                                    label_key=digits.RAW_LABEL_KEY,
                                    preprocessing_function_names=["transform_features"])],
        slicing_specs=[tfma.SlicingSpec()],
        metrics_specs=[tfma.MetricsSpec(metrics=[
            accuracy, tfma.MetricConfig(class_name="SparseCategoricalCrossentropy"),
            tfma.MetricConfig(class_name="ExampleCount")])])
