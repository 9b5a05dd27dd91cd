"""The ga-tfx digits pipeline: a plain function returning a ``tfx.dsl.Pipeline``.

CsvExampleGen -> StatisticsGen -> ImportSchemaGen (curated schema) -> ExampleValidator ->
DataCheck (stops on anomalies) -> Transform -> [Tuner] -> GradientAccumulationTrainer ->
Evaluator (accuracy threshold -> blessing) -> Pusher.

The user code is referenced by dotted path (``ga_tfx.pipelines.digits``), so the same definition
runs locally (:mod:`ga_tfx.pipelines.local`) and in the Kubeflow image
(:mod:`ga_tfx.pipelines.kubeflow`).
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx._schema import values_for
from ga_tfx.components import keys
from ga_tfx.components.trainer import GradientAccumulationTrainer
from ga_tfx.components.trainer.settings import AccumulationSettings
from ga_tfx.components.tuner import tuner_fn
from ga_tfx.components.tuner.options import TunerOptions
from ga_tfx.config import ADAPTIVE, parse_schedule
from ga_tfx.pipelines import data_check, user_code
from ga_tfx.pipelines.options import DEFAULT_MIN_ACCURACY, LABEL_SHUFFLE_BUFFER, TrainingOptions
from ga_tfx.pipelines.tabular import data_plan

import json
import os
from typing import List, Optional

import tensorflow_model_analysis as tfma
from tfx import v1 as tfx

MODEL_FN = user_code.DIGITS.model_fn
PREPROCESSING_FN = user_code.DIGITS.preprocessing_fn
TUNER_FN = "ga_tfx.components.tuner.tuner_fn.tuner_fn"


TUNER_OBJECTIVE = "val_accuracy"
# The Evaluator's model names when the trivial baseline is scored beside the trained model.
CANDIDATE, BASELINE = "candidate", "baseline"
# "Beats the baseline": better by more than this (accuracy up, RMSE down).
BEAT_MARGIN = 1e-9


# The Trainer's resumable checkpoints, under the pipeline root: <RESUME_DIR>/<pipeline name>/...
RESUME_DIR = ".ga_tfx_resume"


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
    train_rows: Optional[int] = None,
) -> tfx.dsl.Pipeline:
    """The digits pipeline over the CSV files in ``data_root`` (or, with ``options.label``, the
    pipeline of any CSV: see below).

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
      train_rows: the training split's rows (about 2/3 of the rows with a label), from which a
        ``--label`` run without ``train_updates`` derives its length
        (:meth:`TrainingOptions.updates_plan`); None: not counted.

    With ``options.label`` (any CSV): ``LabeledExamples`` drops (and counts) rows whose label
    cell is empty right after CsvExampleGen; StatisticsGen counts the label's classes; SchemaGen
    infers the schema; ``DataPlanCheck`` replaces DataCheck: it also makes the data plan from
    the statistics, prints the data summary and hands the plan to Transform in the schema
    (``PlannedTransform``, for the generic module). The generic model is evaluated beside
    ``TrivialBaseline`` (the training mean or class frequencies) and blessed when it beats it
    (and passes ``min_accuracy`` / ``max_rmse`` when given).
    """
    code = user_code.for_options(options)
    updates, updates_per_epoch = options.updates_plan(train_rows)
    generic = code.curated_schema is None and code.module_file is None
    if code.reading is None:
        example_gen = tfx.components.CsvExampleGen(input_base=data_root)
    else:  # any CSV: read in its own dialect (R, Excel, pandas, database exports)
        from ga_tfx.pipelines.tabular.csv_example_gen import DialectCsvExampleGen

        example_gen = DialectCsvExampleGen(data_root, code.reading)
    components = [example_gen]
    examples = example_gen.outputs["examples"]
    if code.curated_schema is None:
        from ga_tfx.pipelines.tabular.labeled_examples import LabeledExamples

        labeled = LabeledExamples(examples=examples, label=code.raw_label_key)
        components.append(labeled)
        examples = labeled.outputs["labeled_examples"]
    statistics_gen = tfx.components.StatisticsGen(
        examples=examples, stats_options=_stats_options(code)
    )
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
    if code.curated_schema:
        checked = data_check.DataCheck(
            schema=schema_gen.outputs["schema"],
            statistics=statistics_gen.outputs["statistics"],
            anomalies=example_validator.outputs["anomalies"],
            effective_batch_size=data_check.largest_effective_batch(options),
        )
    else:
        from ga_tfx.pipelines.tabular.plan_check import DataPlanCheck

        checked = DataPlanCheck(
            schema=schema_gen.outputs["schema"],
            statistics=statistics_gen.outputs["statistics"],
            anomalies=example_validator.outputs["anomalies"],
            examples=examples,
            label=code.raw_label_key,
            task=code.task,
            edit_columns=int(generic),
            effective_batch_size=data_check.largest_effective_batch(options),
            exclude_columns=json.dumps(list(options.exclude_columns)),
        )
    if generic:
        from ga_tfx.pipelines.tabular.planned_transform import PlannedTransform

        transform_class = PlannedTransform
    else:
        transform_class = tfx.components.Transform
    transform = transform_class(
        examples=examples,
        schema=checked.outputs["checked_schema"],
        **_user_code_args(code, "preprocessing_fn"),
        custom_config=code.transform_config,
        # The data summary reads StatisticsGen's statistics: Transform's own (before and after,
        # one column per feature of a wide vector) would double its time for nothing here.
        disable_statistics=code.curated_schema is None,
    ).with_id("Transform")
    components += [statistics_gen, schema_gen, example_validator, checked, transform]

    if options.accum_schedule and options.tune:
        raise ValueError(
            f"accum_schedule={options.accum_schedule!r} and tune: the Tuner sets accum_steps, a "
            "schedule sets K by window; give one of them."
        )
    # The Trainer's settings: those the options carry (each declared like() a Trainer setting),
    # the label, and the planned K and epoch.
    settings = dict(
        values_for(options, AccumulationSettings),
        label_key=code.label_key,
        raw_label_key=code.raw_label_key,
        accum_steps=first_accum_steps(options),
        updates_per_epoch=updates_per_epoch,
    )
    if options.label:  # any CSV: one shuffle over the whole training split (a sorted file too)
        settings["shuffle_buffer"] = LABEL_SHUFFLE_BUFFER
    hyperparameters = None
    if options.tune:
        if code.model_fn is None:
            raise ValueError(
                "tune searches with the model of an installed module (model_fn); "
                f"a module_file ({code.module_file!r}) cannot be tuned here."
            )
        probe = options.tune_strategy == "noise_scale"
        # The same search every run of the same command: its seed is the run's (--seed).
        tuner_options = {
            "objective": TUNER_OBJECTIVE,
            "seed": options.seed,
            "trials_file": trials_file(pipeline_root),
        }
        if probe:  # one probe run of the Trainer's settings (its AGC factor included)
            tuner_options["kind"] = "noise_scale"
        else:
            tuner_options["max_trials"] = options.tuning_trials
        # The Tuner's own options (e.g. the probe's target loss), when given.
        tuner_options.update(
            {k: v for k, v in values_for(options, TunerOptions).items() if v is not None}
        )
        search_agc = (
            None
            if probe or options.search_agc_clip_factor is None
            else list(options.search_agc_clip_factor)
        )
        # A trial trains tuning_updates, not the Trainer's epochs; a search sets the AGC factor.
        ga_settings = dict(settings, accum_steps=options.accum_steps)
        del ga_settings["updates_per_epoch"]
        if not probe:
            del ga_settings["agc_clip_factor"]
        tuner_config = {
            keys.MODEL_FN: code.model_fn,
            keys.GA_TFX: ga_settings,
            keys.GA_TFX_SEARCH: {
                "accum_steps": list(options.search_accum_steps),
                "agc_clip_factor": search_agc,
                "micro_batch_size": options.micro_batch_size,
            },
            keys.TUNER: tuner_options,
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
        train_args=tfx.proto.TrainArgs(num_steps=updates),
        eval_args=tfx.proto.EvalArgs(num_steps=options.eval_steps),
        # Keyed by the pipeline, not by the run: a Kubeflow job submitted again gets a new job
        # id and new output URIs (on Vertex, <root>/<project>/<job id>/<task>_<uuid>/...).
        resume_root=os.path.join(pipeline_root, RESUME_DIR, pipeline_name),
        **settings,
    )
    components.append(trainer)
    baseline = None
    if generic:
        from ga_tfx.pipelines.tabular.baseline import TrivialBaseline

        baseline = TrivialBaseline(
            transform_graph=transform.outputs["transform_graph"], label=code.raw_label_key
        )
        components.append(baseline)
    evaluator = tfx.components.Evaluator(
        examples=examples,
        model=trainer.outputs["model"],
        baseline_model=baseline.outputs["model"] if baseline is not None else None,
        eval_config=_eval_config(code, options, with_baseline=baseline is not None),
    )
    pusher = tfx.components.Pusher(
        model=trainer.outputs["model"],
        model_blessing=evaluator.outputs["blessing"],
        push_destination=tfx.proto.PushDestination(
            filesystem=tfx.proto.PushDestination.Filesystem(base_directory=serving_model_dir)
        ),
    )
    components += [evaluator, pusher]

    return tfx.dsl.Pipeline(
        pipeline_name=pipeline_name,
        pipeline_root=pipeline_root,
        components=components,
        enable_cache=enable_cache,
        metadata_connection_config=metadata_connection_config,
        beam_pipeline_args=beam_pipeline_args or [],
    )


def first_accum_steps(options):
    """K of the Trainer's first window: a piecewise schedule's first K, else ``accum_steps``
    (an adaptive schedule starts there)."""
    if options.accum_schedule:
        kind, schedule = parse_schedule(options.accum_schedule)
        if kind != ADAPTIVE:
            return schedule[0][1]
    return options.accum_steps


def _user_code_args(code, dotted_name):
    """``{dotted_name: path}`` for installed user code, or ``{"module_file": ...}``."""
    if code.module_file:
        return {"module_file": code.module_file}
    return {dotted_name: getattr(code, dotted_name)}


def _stats_options(code):
    """StatisticsGen's options: for a classification label, count its values even when they
    are integers (the data summary's classes per split); None otherwise."""
    if code.curated_schema is not None:
        return None
    schema = data_plan.label_stats_options_schema(code.raw_label_key, code.task)
    if schema is None:
        return None
    import tensorflow_data_validation as tfdv

    return tfdv.StatsOptions(schema=schema)


def _eval_config(code, options, with_baseline=False):
    """Metrics on the raw eval split through ``serving_default``, blessed past the thresholds.

    Classification: accuracy >= ``min_accuracy`` (when given; :data:`DEFAULT_MIN_ACCURACY`
    without a baseline); regression: RMSE <= ``max_rmse`` (when given). ``with_baseline``:
    the trained model (``candidate``) must also beat the baseline model (``baseline``) by more
    than :data:`BEAT_MARGIN` in accuracy (up) or RMSE (down). The label is the raw column, or
    the transformed one when Transform encodes it (a string label): the Evaluator applies
    ``transform_features`` first."""
    change = {}
    if code.task == "regression":
        value = (
            {}
            if options.max_rmse is None
            else dict(
                value_threshold=tfma.GenericValueThreshold(upper_bound={"value": options.max_rmse})
            )
        )
        if with_baseline:
            change = dict(
                change_threshold=tfma.GenericChangeThreshold(
                    direction=tfma.MetricDirection.LOWER_IS_BETTER,
                    absolute={"value": -BEAT_MARGIN},
                )
            )
        threshold = tfma.MetricThreshold(**value, **change) if value or change else None
        metrics = [
            tfma.MetricConfig(class_name="RootMeanSquaredError", threshold=threshold),
            tfma.MetricConfig(class_name="MeanAbsoluteError"),
        ]
    else:
        min_accuracy = options.min_accuracy
        if min_accuracy is None and not with_baseline:
            min_accuracy = DEFAULT_MIN_ACCURACY
        value = (
            {}
            if min_accuracy is None
            else dict(
                value_threshold=tfma.GenericValueThreshold(lower_bound={"value": min_accuracy})
            )
        )
        if with_baseline:
            change = dict(
                change_threshold=tfma.GenericChangeThreshold(
                    direction=tfma.MetricDirection.HIGHER_IS_BETTER,
                    absolute={"value": BEAT_MARGIN},
                )
            )
        metrics = [
            tfma.MetricConfig(
                class_name="SparseCategoricalAccuracy",
                threshold=tfma.MetricThreshold(**value, **change),
            ),
            tfma.MetricConfig(class_name="SparseCategoricalCrossentropy"),
        ]
    label_key = code.raw_label_key if code.curated_schema else code.label_key
    spec = dict(
        signature_name="serving_default",
        label_key=label_key,
        preprocessing_function_names=["transform_features"],
    )
    model_specs = (
        [
            tfma.ModelSpec(name=CANDIDATE, **spec),
            tfma.ModelSpec(name=BASELINE, is_baseline=True, **spec),
        ]
        if with_baseline
        else [tfma.ModelSpec(**spec)]
    )
    return tfma.EvalConfig(
        model_specs=model_specs,
        slicing_specs=[tfma.SlicingSpec()],
        metrics_specs=[
            tfma.MetricsSpec(metrics=metrics + [tfma.MetricConfig(class_name="ExampleCount")])
        ],
    )
