"""One worker of a MultiWorkerMirroredStrategy TrainingLoop, for
tests/test_training_loop_multi_worker.py.

``python -m tests.training_loop_worker OUT CHECKPOINT_DIR`` with ``TF_CONFIG`` set: creates the
strategy first (as it must be), trains the test model with :class:`ga_tfx.TrainingLoop`
with SGD (Nesterov momentum; interrupted mid-window after ``INTERRUPT_AFTER`` micro-batches,
then resumed by new loop objects from the shared checkpoint directory) and with Adam
(uninterrupted), measures the gradient noise scale on the closed-form problem of
tests/test_noise_scale.py, and writes ``OUT/weights.npz``, ``OUT/weights_adam.npz`` and
``OUT/stats.json``. The data (see :func:`data`) has a NaN window and ends inside a short last
window (fewer than K micro-batches, applied under the default ``partial_window="apply"``); it
is read from two TFRecord files, so that the AUTO auto-shard policy would give each worker
other files (the loop sets DATA: every worker takes its part of each global micro-batch).
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx import keras, tf

import json
import os
import sys

import numpy as np

from tests import test_noise_scale as closed_form

MICRO, K, EPOCHS = 7, 3, 2
# 8 micro-batches: 7 of 7 samples, 1 of 1 sample; windows of 3, 3 and 2 micro-batches (21, 21
# and 8 samples): the data ends inside the last window, which partial_window="apply" applies.
N_SAMPLES = 50
NAN_MICRO_BATCH = 4  # window 2 has a NaN input: skipped in every epoch
INTERRUPT_AFTER = 12  # micro-batches: epoch 2, inside its second window


def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N_SAMPLES, 8)).astype("float32")
    y = rng.integers(0, 3, N_SAMPLES).astype("int64")
    x[NAN_MICRO_BATCH * MICRO + 1, 2] = np.nan
    return x, y


def write_files(out):
    """Writes :func:`data` to two TFRecord files (samples 0..27 and 28..), in order."""
    x, y = data()
    paths = []
    for index, rows in enumerate((range(0, 28), range(28, N_SAMPLES))):
        path = os.path.join(out, f"data-{index}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for i in rows:
                writer.write(
                    tf.train.Example(
                        features=tf.train.Features(
                            feature={
                                "x": tf.train.Feature(float_list=tf.train.FloatList(value=x[i])),
                                "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[y[i]])),
                            }
                        )
                    ).SerializeToString()
                )
        paths.append(path)
    return paths


def read_files(paths):
    spec = {"x": tf.io.FixedLenFeature([8], tf.float32), "y": tf.io.FixedLenFeature([], tf.int64)}

    def parse(record):
        example = tf.io.parse_single_example(record, spec)
        return example["x"], example["y"]

    return tf.data.TFRecordDataset(paths).map(parse).batch(MICRO)


def build_model(seed):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((8,))
    h = keras.layers.Dense(16, activation="tanh", kernel_regularizer=keras.regularizers.l2(1e-2))(
        inputs
    )
    return keras.Model(inputs, keras.layers.Dense(3, name="logits")(h))


OPTIMIZERS = {
    "sgd": lambda: keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True),
    "adam": lambda: keras.optimizers.Adam(1e-2),
}


def make_loop(strategy, paths, checkpoint_dir, log_dir, seed, optimizer="sgd"):
    with strategy.scope():
        model = build_model(seed)
        optimizer = OPTIMIZERS[optimizer]()
    return ga_tfx.TrainingLoop(
        model,
        optimizer,
        keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none"),
        read_files(paths),
        K,
        strategy=strategy,
        checkpoint_dir=checkpoint_dir,
        checkpoint_every_n_updates=1,
        log_dir=log_dir,
    )


def main(out, checkpoint_dir):
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    os.makedirs(out, exist_ok=True)
    log_dir = os.path.join(out, "logs")
    paths = write_files(out)
    first = make_loop(strategy, paths, checkpoint_dir, log_dir, seed=22)
    first.run(epochs=EPOCHS, max_micro_batches=INTERRUPT_AFTER)
    pending = int(first.window_core.micro_steps.numpy())
    second = make_loop(strategy, paths, checkpoint_dir, log_dir, seed=7)  # other initial weights
    second.run(epochs=EPOCHS)
    np.savez(os.path.join(out, "weights.npz"), *second.model.get_weights())
    adam = make_loop(strategy, paths, None, None, seed=22, optimizer="adam")  # uninterrupted
    adam.run(epochs=EPOCHS)
    np.savez(os.path.join(out, "weights_adam.npz"), *adam.model.get_weights())
    noise_scale, noise_windows = closed_form.loop_estimate(strategy)
    stats = {
        "replicas": strategy.num_replicas_in_sync,
        "pending_at_interrupt": pending,
        "updates": second.window_core.updates,
        "skipped_windows": second.window_core.skipped_windows,
        "iterations": int(second.optimizer.iterations.numpy()),
        "is_chief": bool(strategy.extended.should_checkpoint),
        "noise_scale": noise_scale,
        "noise_windows": noise_windows,
    }
    with open(os.path.join(out, "stats.json"), "w") as f:
        json.dump(stats, f)
    print(json.dumps(stats), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
