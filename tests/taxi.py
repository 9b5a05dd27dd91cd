"""TFX's Chicago taxi testdata (shipped in the tfx wheel) and a small model for executor tests.

TFX 1.16 ships a transform graph only for the taxi data (``tfx/components/testdata/transform``:
transformed examples + transform graph; raw examples in ``csv_example_gen``). Label
``tips_xf`` (raw ``tips``).
"""

import os

import tfx
from tfx.types import artifact_utils, standard_artifacts
from tfx.types import standard_component_specs as specs

TESTDATA = os.path.join(os.path.dirname(tfx.__file__), "components", "testdata")
# TFX's own taxi example (its module files and pipelines).
EXAMPLE = os.path.join(os.path.dirname(tfx.__file__), "examples", "chicago_taxi_pipeline")

# A module file defining build_model(hparams): hparams "units" (default 8), "batchnorm"
# (default True) and "optimizer" (default "adam"; "sgd" and "sgd_momentum", whose steps are
# proportional to the gradient, for weight-level comparisons) are read.
MODEL_MODULE = """
import ga_tfx  # noqa: F401
from ga_tfx._keras import keras, tf

FEATURES = ("fare_xf", "trip_miles_xf", "trip_seconds_xf")
OPTIMIZERS = {"adam": lambda: keras.optimizers.Adam(1e-2),
              "sgd": lambda: keras.optimizers.SGD(0.1),
              "sgd_momentum": lambda: keras.optimizers.SGD(0.1, momentum=0.9)}


def build_model(hparams):
    keras.utils.set_random_seed(7)
    inputs = {name: keras.Input(shape=(1,), name=name, dtype=tf.float32) for name in FEATURES}
    x = keras.layers.Concatenate()([inputs[name] for name in FEATURES])
    x = keras.layers.Dense(hparams.get("units", 8), name="hidden")(x)
    if hparams.get("batchnorm", True):
        x = keras.layers.BatchNormalization(name="bn")(x)
    x = keras.layers.Activation("relu")(x)
    outputs = keras.layers.Dense(2, name="logits")(x)
    model = keras.Model(inputs, outputs)
    model.compile(OPTIMIZERS[hparams.get("optimizer", "adam")](),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model
"""


def transform_inputs():
    """The input dict of a Trainer/Tuner executor: transformed examples (train and eval
    splits), the transform graph and the raw schema."""
    examples = standard_artifacts.Examples()
    examples.uri = os.path.join(TESTDATA, "transform", "transformed_examples")
    examples.split_names = artifact_utils.encode_split_names(["train", "eval"])
    graph = standard_artifacts.TransformGraph()
    graph.uri = os.path.join(TESTDATA, "transform", "transform_graph")
    schema = standard_artifacts.Schema()
    schema.uri = os.path.join(TESTDATA, "schema_gen")
    return {
        specs.EXAMPLES_KEY: [examples],
        specs.TRANSFORM_GRAPH_KEY: [graph],
        specs.SCHEMA_KEY: [schema],
    }
