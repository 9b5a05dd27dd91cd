"""``TrivialBaseline``: the model a ``--label`` model must beat to be blessed.

It predicts, for every row, what the training split alone suggests: the training mean of a
regression label, or the training class frequencies of a classification label (its prediction
is the majority class). It is exported like the trained model (``serving_default`` and
``transform_features`` over the same Transform graph), so the Evaluator scores both on the eval
split with the same metrics (TFMA's baseline comparison) and blesses the trained model only
when it beats this one; the run's summary prints both metrics side by side.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx import keras
from ga_tfx.components.trainer import export
from ga_tfx.pipelines.tabular import data_plan, generic

import math
import os
from typing import List

from tfx import v1 as tfx

# Where the Evaluator (and the Pusher) look for a model artifact's SavedModel.
SERVING_DIR = "Format-Serving"


def class_priors(plan, vocabulary: List[str], classes: int) -> List[float]:
    """Training frequencies of the model's classes (vocabulary order, then the
    out-of-vocabulary class), smoothed by one row each so that no log is -inf."""
    counts = plan.train_classes() if plan is not None else {}
    values = [counts.get(value, 0) for value in vocabulary]
    values += [0] * (classes - len(values))
    total = sum(values) + classes
    return [(v + 1) / total for v in values]


def baseline_model(transform_output) -> "keras.Model":
    """A Keras model over the transformed features that ignores them: the training mean, or
    the training class frequencies."""
    width = transform_output.transformed_feature_spec()[generic.FEATURES_KEY].shape[-1]
    inputs = keras.Input((width,), name=generic.FEATURES_KEY)
    classes = generic.output_classes(transform_output)
    plan = generic.transform_plan(transform_output)
    if classes is None:
        mean, _ = generic.label_scale(transform_output)
        outputs = keras.layers.Dense(
            1,
            kernel_initializer="zeros",
            bias_initializer=keras.initializers.Constant(mean),
            name="training_mean",
        )(inputs)
    else:
        vocabulary = [
            v.decode() if isinstance(v, bytes) else str(v)
            for v in transform_output.vocabulary_by_name(generic.LABEL_VOCABULARY)
        ]
        priors = class_priors(plan, vocabulary, classes)
        outputs = keras.layers.Dense(
            classes,
            activation="softmax",
            kernel_initializer="zeros",
            bias_initializer=keras.initializers.Constant([math.log(p) for p in priors]),
            name="training_frequencies",
        )(inputs)
    return keras.Model(inputs, outputs)


@tfx.dsl.components.component
def TrivialBaseline(
    transform_graph: tfx.dsl.components.InputArtifact[tfx.types.standard_artifacts.TransformGraph],
    model: tfx.dsl.components.OutputArtifact[tfx.types.standard_artifacts.Model],
    label: tfx.dsl.components.Parameter[str],
) -> None:
    """Exports :func:`baseline_model` with the Trainer's signatures (``label``: the raw label
    column, which serving requests do not carry)."""
    import tensorflow_transform as tft

    transform_output = tft.TFTransformOutput(transform_graph.uri)
    plan = generic.transform_plan(transform_output)
    if plan is None:
        raise ValueError(
            "TrivialBaseline needs the data plan in Transform's schema "
            f"({data_plan.SCHEMA_COMMENT_PREFIX!r} annotation): run DataPlanCheck first."
        )
    export.export_serving_model(
        baseline_model(transform_output),
        os.path.join(model.uri, SERVING_DIR),
        transform_output,
        None,
        (label,),
    )
