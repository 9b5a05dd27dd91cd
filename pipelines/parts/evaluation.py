"""The evaluation parts of the pipeline: the trivial baseline, the Evaluator, the Pusher.

The Evaluator scores the trained model on the raw eval split through ``serving_default`` and
blesses it past the thresholds; the Pusher copies a blessed model to the serving directory.
The generic ``--label`` model is scored beside ``TrivialBaseline`` (the training mean or class
frequencies) and must beat it. (Why a model was blessed or not: :mod:`ga_tfx.pipelines.blessing`.)
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx.pipelines.blessing import BASELINE, CANDIDATE
from ga_tfx.pipelines.options import DEFAULT_MIN_ACCURACY
from ga_tfx.pipelines.parts.data import is_generic

import tensorflow_model_analysis as tfma
from tfx import v1 as tfx

# "Beats the baseline": better by more than this (accuracy up, RMSE down).
BEAT_MARGIN = 1e-9


def baseline(code, transform):
    """The generic module's ``TrivialBaseline`` from Transform's graph; None otherwise (the
    digits' code and a ``--module-file`` are blessed by their thresholds alone)."""
    if not is_generic(code):
        return None
    from ga_tfx.pipelines.tabular.baseline import TrivialBaseline

    return TrivialBaseline(
        transform_graph=transform.outputs["transform_graph"], label=code.raw_label_key
    )


def evaluator(code, blessing, examples, trainer, baseline):
    """TFMA's Evaluator of the Trainer's model on ``examples`` (beside ``baseline``'s model when
    not None), with :func:`eval_config` (``blessing``: the :class:`BlessingOptions`)."""
    return tfx.components.Evaluator(
        examples=examples,
        model=trainer.outputs["model"],
        baseline_model=baseline.outputs["model"] if baseline is not None else None,
        eval_config=eval_config(code, blessing, with_baseline=baseline is not None),
    )


def pusher(trainer, evaluator, serving_model_dir):
    """Copies the Trainer's model to ``serving_model_dir`` when the Evaluator blessed it: TFX's
    Pusher, or, when the folder is a runtime parameter (a compiled job's
    ``tfx.dsl.experimental.RuntimeParameter``), :class:`ServingDirPusher` (id ``Pusher``),
    which takes the folder as a str where the stock one takes a proto."""
    if isinstance(serving_model_dir, tfx.dsl.experimental.RuntimeParameter):
        from ga_tfx.pipelines.serving_pusher import ServingDirPusher

        return ServingDirPusher(
            model=trainer.outputs["model"],
            model_blessing=evaluator.outputs["blessing"],
            serving_dir=serving_model_dir,
        ).with_id("Pusher")
    return tfx.components.Pusher(
        model=trainer.outputs["model"],
        model_blessing=evaluator.outputs["blessing"],
        push_destination=tfx.proto.PushDestination(
            filesystem=tfx.proto.PushDestination.Filesystem(base_directory=serving_model_dir)
        ),
    )


def eval_config(code, blessing, with_baseline: bool = False):
    """Metrics on the raw eval split through ``serving_default``, blessed past the thresholds
    (:func:`regression_metrics`, :func:`classification_metrics`). The label is the raw column,
    or the transformed one when Transform encodes it (a string label): the Evaluator applies
    ``transform_features`` first. ``with_baseline``: the trained model is ``candidate``, the
    baseline model ``baseline``."""
    metrics = (
        regression_metrics(blessing.max_rmse, with_baseline)
        if code.task == "regression"
        else classification_metrics(blessing.min_accuracy, with_baseline)
    )
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


def _beats_baseline(direction, margin: float):
    """A change threshold: better than the baseline by more than ``margin`` (signed)."""
    return dict(
        change_threshold=tfma.GenericChangeThreshold(
            direction=direction, absolute={"value": margin}
        )
    )


def regression_metrics(max_rmse, with_baseline: bool):
    """RMSE (blessed at or below ``max_rmse`` when given; below the baseline's by more than
    :data:`BEAT_MARGIN` ``with_baseline``) and MAE."""
    value = (
        {}
        if max_rmse is None
        else dict(value_threshold=tfma.GenericValueThreshold(upper_bound={"value": max_rmse}))
    )
    change = (
        _beats_baseline(tfma.MetricDirection.LOWER_IS_BETTER, -BEAT_MARGIN) if with_baseline else {}
    )
    threshold = tfma.MetricThreshold(**value, **change) if value or change else None
    return [
        tfma.MetricConfig(class_name="RootMeanSquaredError", threshold=threshold),
        tfma.MetricConfig(class_name="MeanAbsoluteError"),
    ]


def classification_metrics(min_accuracy, with_baseline: bool):
    """Accuracy (blessed at or above ``min_accuracy``; None: :data:`DEFAULT_MIN_ACCURACY`
    without a baseline, none with one; above the baseline's by more than :data:`BEAT_MARGIN`
    ``with_baseline``) and the cross-entropy."""
    if min_accuracy is None and not with_baseline:
        min_accuracy = DEFAULT_MIN_ACCURACY
    value = (
        {}
        if min_accuracy is None
        else dict(value_threshold=tfma.GenericValueThreshold(lower_bound={"value": min_accuracy}))
    )
    change = (
        _beats_baseline(tfma.MetricDirection.HIGHER_IS_BETTER, BEAT_MARGIN) if with_baseline else {}
    )
    return [
        tfma.MetricConfig(
            class_name="SparseCategoricalAccuracy",
            threshold=tfma.MetricThreshold(**value, **change),
        ),
        tfma.MetricConfig(class_name="SparseCategoricalCrossentropy"),
    ]
