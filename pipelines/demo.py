"""`ga-tfx demo`: gradient accumulation against big-batch training on real data.

Trains the same small network on scikit-learn's digits (1797 8x8 images, shipped offline with
scikit-learn) twice from the same initial weights: once as big batches of K*b, once as
micro-batches of b accumulated over K. Prints both runs' update counts, accuracies and the
largest weight difference.
"""

import ga_tfx  # first: selects Keras 2
from ga_tfx._keras import keras, tf

import time

import numpy as np


def load_digits_data():
    """``(x_train, y_train, x_test, y_test)``: digits scaled to [0, 1], shape (n, 8, 8, 1)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images / 16.0).astype("float32")[..., None]
    y = digits.target.astype("int64")
    split = 1500
    return x[:split], y[:split], x[split:], y[split:]


def build_model(seed):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((8, 8, 1), name="pixels")
    h = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(inputs)
    h = keras.layers.MaxPooling2D()(h)
    h = keras.layers.Flatten()(h)
    h = keras.layers.Dense(64, activation="relu")(h)
    outputs = keras.layers.Dense(10, name="logits")(h)
    return keras.Model(inputs, outputs, name="digits_cnn")


def _compile(model, learning_rate):
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )


def run_demo(accum_steps=8, micro_batch=16, epochs=3, learning_rate=3e-3, seed=0):
    tf.config.experimental.enable_op_determinism()
    x, y, x_test, y_test = load_digits_data()
    print(
        f"digits: {len(x)} train / {len(x_test)} test images; micro-batch {micro_batch}, "
        f"accum_steps {accum_steps} -> effective batch {micro_batch * accum_steps}"
    )

    big = build_model(seed)
    _compile(big, learning_rate)
    start = time.perf_counter()
    big.fit(x, y, batch_size=micro_batch * accum_steps, epochs=epochs, shuffle=False, verbose=0)
    big_seconds = time.perf_counter() - start

    accumulating = ga_tfx.wrap_model(build_model(seed), accum_steps=accum_steps)
    _compile(accumulating, learning_rate)
    start = time.perf_counter()
    accumulating.fit(x, y, batch_size=micro_batch, epochs=epochs, shuffle=False, verbose=0)
    accum_seconds = time.perf_counter() - start

    max_dw = max(
        float(np.max(np.abs(a - b))) for a, b in zip(big.get_weights(), accumulating.get_weights())
    )
    rows = [("big batch", big, big_seconds), ("ga_tfx accumulation", accumulating, accum_seconds)]
    for name, model, seconds in rows:
        _, accuracy = model.evaluate(x_test, y_test, verbose=0)
        print(
            f"{name:>20}: updates={int(model.optimizer.iterations):4d} "
            f"test accuracy={accuracy:.4f} train time={seconds:.1f}s"
        )
    print(f"max |w_accumulated - w_big_batch| = {max_dw:.3g}")
    return max_dw
