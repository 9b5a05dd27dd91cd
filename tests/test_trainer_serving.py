"""The Trainer's export as a TFX user expects it: {'outputs': ...}, the module's own serving
function, and the raw label found from the Transform graph when Transform renames it."""

from ga_tfx import tf
from ga_tfx.components.trainer import export

import os

import numpy as np
import pytest
import tensorflow_transform as tft

from tests import taxi
from tests.test_trainer_component import _in_memory_answer, _raw_examples, _train_in_memory

pytestmark = [pytest.mark.tfx]

TRANSFORM_GRAPH = os.path.join(taxi.TESTDATA, "transform", "transform_graph")

SERVING_FN = """

def make_serving_fn(model, transform_output):
    layer = transform_output.transform_features_layer()
    model.own_tft_layer = layer  # tracked with the model, as penguin does
    spec = transform_output.raw_feature_spec()
    spec.pop("tips")

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def serve(serialized):
        return {"scores": model(layer(tf.io.parse_example(serialized, spec)))}

    return serve
"""


def _without(examples, feature):
    """The serialized examples with ``feature`` removed (what a serving client sends)."""
    out = []
    for serialized in examples.numpy():
        example = tf.train.Example.FromString(serialized)
        del example.features.feature[feature]
        out.append(example.SerializeToString())
    return tf.constant(out)


def test_label_only_raw_features_come_from_the_transform_graph():
    transform_output = tft.TFTransformOutput(TRANSFORM_GRAPH)
    # tips_xf (big tipper) is computed from tips and fare; fare also feeds fare_xf.
    assert export.label_only_raw_features(transform_output, "tips_xf") == ("tips",)
    assert export.label_only_raw_features(transform_output, "fare") == ("fare",)
    assert export.label_only_raw_features(None, "y") == ("y",)


# The signature and the in-memory model run the same float32 operations in two graphs:
# round-off only (measured 0); a serving path in training mode (BatchNormalization on the
# batch's statistics), or another model's weights, is off by > 1e-2.
SERVING_TOLERANCE = 1e-6


def _answers_like(model, answer, examples):
    expected = _in_memory_answer(model, examples).numpy()
    assert answer.shape == expected.shape == (len(examples), 2)
    diff = float(np.max(np.abs(answer.numpy() - expected)))
    print(f"max |served - in-memory| = {diff:.3g}")
    assert diff <= SERVING_TOLERANCE
    assert float(np.max(np.abs(expected))) > 0.1  # real predictions, not zeros


def test_serving_default_returns_outputs_and_needs_no_raw_label(tmp_path):
    # raw_label_key unset: the label-only raw feature (tips) is found from the transform graph.
    live, fn_args = _train_in_memory(
        tmp_path, "run", accum_steps=2, micro_batch_size=8, num_steps=2, raw_label_key=None
    )
    serving = tf.saved_model.load(fn_args.serving_model_dir).signatures["serving_default"]
    assert set(serving.structured_outputs) == {"outputs"}
    examples = _raw_examples(8)
    answer = serving(examples=_without(examples, "tips"))
    _answers_like(live, answer["outputs"], examples)


@pytest.mark.slow  # a Trainer run and export; the default signature stays fast
def test_a_module_serving_function_is_used(tmp_path):
    live, fn_args = _train_in_memory(
        tmp_path,
        "own",
        taxi.MODEL_MODULE + SERVING_FN,
        accum_steps=2,
        micro_batch_size=8,
        num_steps=2,
    )
    serving = tf.saved_model.load(fn_args.serving_model_dir).signatures["serving_default"]
    assert set(serving.structured_outputs) == {"scores"}
    examples = _raw_examples(4)
    _answers_like(live, serving(examples=_without(examples, "tips"))["scores"], examples)
