"""The window's divisor through the TFX Trainer (issue 56): a masked sequence model trained by
the ga-tfx Trainer's executor (``Executor().Do``, hence ``run_fn.train_and_export``, TFXIO's
data path and the export) has the weights of plain Keras 2 big-batch training.

The data are written here: TFRecords of tf.Examples with a token feature padded with 0 to a
fixed length and a per-token label, a schema and no transform graph (the Trainer's schema-only
path). The sequences have very unequal lengths, so the micro-batches of a window hold very
unequal numbers of valid tokens (:data:`LENGTHS`): weighing a micro-batch by its rows instead of
by what Keras' masked loss divided by (its valid tokens) is then as far from big batch as the
training moves the weights. SGD with momentum: its steps are proportional to the gradient, so a
scale error shows. Tolerance 1e-6 (float32 round-off of the reordered sums over 2 updates).
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx._keras import keras, tf
from ga_tfx.components.trainer import Executor

import os
import textwrap

import numpy as np
import pytest
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx.proto import trainer_pb2
from tfx.types import artifact_utils, standard_artifacts
from tfx.types import standard_component_specs as specs
from tfx.utils import io_utils, proto_utils

pytestmark = [pytest.mark.tfx]  # the TFX Trainer's executor and run_fn

T, VOCAB, CLASSES = 12, 20, 5
MICRO, K = 8, 4
WINDOWS = 2
TOLERANCE = 1e-6
MIN_MOVEMENT = 1e-2
# Valid tokens per sequence, one micro-batch of 8 sequences per entry: the two windows' four
# micro-batches hold 96, 8, 48, 16 and 24, 96, 8, 64 tokens (rows weigh them equally).
LENGTHS = (12, 1, 6, 2, 3, 12, 1, 8)
TOKENS, TAGS = "tokens", "tags"

# The user's module: a per-token tagger whose loss Keras masks (Embedding(mask_zero=True)),
# compiled with SGD with momentum and a per-token sparse cross-entropy.
MODULE = f"""
import ga_tfx  # noqa: F401
from ga_tfx._keras import keras


def build_model(hparams):
    keras.utils.set_random_seed(7)
    tokens = keras.Input(shape=({T},), name="{TOKENS}", dtype="int64")
    h = keras.layers.Embedding({VOCAB}, 8, mask_zero=True, name="embedding")(tokens)
    h = keras.layers.Dense(8, activation="tanh", name="hidden")(h)
    tags = keras.layers.Dense({CLASSES}, name="tags")(h)
    model = keras.Model({{"{TOKENS}": tokens}}, tags)
    model.compile(
        keras.optimizers.SGD(0.5, momentum=0.9),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model
"""


def _sequences(lengths=LENGTHS, seed=0):
    """Token ids ``[n, T]`` (0 is padding) and per-token classes; ``MICRO`` rows per length."""
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.array(lengths), MICRO)
    x = np.zeros((len(rows), T), "int64")
    for i, length in enumerate(rows):
        x[i, :length] = rng.integers(1, VOCAB, length)
    return x, (x * 3 + 1) % CLASSES


def _tokens_per_micro_batch(x):
    return [int(np.count_nonzero(x[i : i + MICRO])) for i in range(0, len(x), MICRO)]


def _write_examples(path, x, y):
    with tf.io.TFRecordWriter(path, options="GZIP") as writer:
        for tokens, tags in zip(x, y):
            feature = {
                TOKENS: tf.train.Feature(int64_list=tf.train.Int64List(value=tokens)),
                TAGS: tf.train.Feature(int64_list=tf.train.Int64List(value=tags)),
            }
            example = tf.train.Example(features=tf.train.Features(feature=feature))
            writer.write(example.SerializeToString())


def _schema():
    schema = schema_pb2.Schema()
    for name in (TOKENS, TAGS):
        feature = schema.feature.add(name=name, type=schema_pb2.INT)
        feature.shape.dim.add(size=T)
        feature.presence.min_fraction = 1.0
    return schema


def _inputs(root, x, y):
    """The executor's inputs: Examples (train: ``x, y`` in that order, one file; eval: the same
    examples) and a Schema, no transform graph."""
    examples = standard_artifacts.Examples()
    examples.uri = os.path.join(root, "examples")
    examples.split_names = artifact_utils.encode_split_names(["train", "eval"])
    for split in ("train", "eval"):
        os.makedirs(os.path.join(examples.uri, f"Split-{split}"))
        _write_examples(os.path.join(examples.uri, f"Split-{split}", "data.gz"), x, y)
    schema = standard_artifacts.Schema()
    schema.uri = os.path.join(root, "schema")
    io_utils.write_pbtxt_file(os.path.join(schema.uri, "schema.pbtxt"), _schema())
    return {specs.EXAMPLES_KEY: [examples], specs.SCHEMA_KEY: [schema]}


def _train_with_the_trainer(root, module_file, x, y):
    """``GradientAccumulationTrainer``'s executor on ``x, y``: K=4 micro-batches of 8, shuffle
    off (file order), ``WINDOWS`` windows; returns the serving model's directory."""
    model, model_run = standard_artifacts.Model(), standard_artifacts.ModelRun()
    model.uri, model_run.uri = os.path.join(root, "model"), os.path.join(root, "model_run")
    exec_properties = {
        specs.TRAIN_ARGS_KEY: proto_utils.proto_to_json(trainer_pb2.TrainArgs(num_steps=WINDOWS)),
        specs.EVAL_ARGS_KEY: proto_utils.proto_to_json(trainer_pb2.EvalArgs(num_steps=1)),
        specs.MODULE_FILE_KEY: module_file,
        "label_key": TAGS,
        "raw_label_key": TAGS,
        "strategy": "none",
        "shuffle": 0,
        "accum_steps": K,
        "micro_batch_size": MICRO,
    }
    Executor().Do(
        _inputs(root, x, y),
        {specs.MODEL_KEY: [model], specs.MODEL_RUN_KEY: [model_run]},
        exec_properties,
    )
    return os.path.join(model.uri, "Format-Serving")


def _build_model():
    namespace = {}
    exec(textwrap.dedent(MODULE), namespace)
    return namespace["build_model"]({})


def _max_diff(weights_a, weights_b):
    assert [w.shape for w in weights_a] == [w.shape for w in weights_b]
    return max(float(np.max(np.abs(a - b))) for a, b in zip(weights_a, weights_b))


def test_the_trainer_on_a_masked_sequence_model_gives_the_big_batch_weights(tmp_path):
    x, y = _sequences()
    tokens = _tokens_per_micro_batch(x)
    assert len(x) == WINDOWS * K * MICRO
    assert len(set(tokens)) > 4 and max(tokens) >= 10 * min(tokens), tokens
    module_file = tmp_path / "masked_tagger.py"
    module_file.write_text(textwrap.dedent(MODULE))
    serving_dir = _train_with_the_trainer(str(tmp_path / "run"), str(module_file), x, y)

    # Plain Keras 2 big-batch training (no ga-tfx wrapper, no TFXIO): batches of K * MICRO on
    # the same examples in the same order (the Trainer reads its one file in order).
    initial = _build_model().get_weights()
    reference = _build_model()
    reference.fit({TOKENS: x}, y, batch_size=K * MICRO, epochs=1, shuffle=False, verbose=0)
    assert int(reference.optimizer.iterations.numpy()) == WINDOWS

    exported = keras.models.load_model(serving_dir, compile=False)
    diff = _max_diff(exported.get_weights(), reference.get_weights())
    moved = _max_diff(initial, reference.get_weights())
    print(f"valid tokens per micro-batch: {tokens}")
    print(f"max |w_trainer - w_big_batch| = {diff:.3g}; big batch moved {moved:.3g}")
    assert moved >= MIN_MOVEMENT
    assert diff <= TOLERANCE, f"max |dw| {diff:.3g} from big batch (it moved {moved:.3g})"

    # The export serves raw tf.Examples (no label) with the trained model's answer.
    serialized = tf.stack(
        [
            tf.train.Example(
                features=tf.train.Features(
                    feature={TOKENS: tf.train.Feature(int64_list=tf.train.Int64List(value=row))}
                )
            ).SerializeToString()
            for row in x[:4]
        ]
    )
    signature = tf.saved_model.load(serving_dir).signatures["serving_default"]
    (served,) = signature(examples=serialized).values()
    expected = reference({TOKENS: x[:4]}, training=False).numpy()
    assert served.shape == (4, T, CLASSES)
    assert float(np.max(np.abs(served.numpy() - expected))) <= 1e-5
