"""Measures where gradient-accumulator 0.5.2 and ga_tfx.compat.gradient_accumulator differ.

    .venv/bin/python scripts/compare_gradient_accumulator.py

Needs ``gradient-accumulator==0.5.2`` installed beside ga-tfx (``pip install --no-deps``).
Every figure compares with plain big-batch training from the same initial weights on the same
data in the same order: 96 samples (8 features, 3 classes), micro-batches of 6, K=4, 2 epochs
(8 updates). The README's migration table quotes its output.
"""

from ga_tfx import keras, tf  # noqa: I001  (first import: selects Keras 2)
import ga_tfx.compat.gradient_accumulator as compat

import numpy as np

import gradient_accumulator as package

N, FEATURES, CLASSES, MICRO, K, EPOCHS = 96, 8, 3, 6, 4, 2


def data():
    rng = np.random.default_rng(0)
    return (
        rng.normal(size=(N, FEATURES)).astype("float32"),
        rng.integers(0, CLASSES, N).astype("int64"),
    )


def mlp():
    keras.utils.set_random_seed(1234)
    inputs = keras.Input((FEATURES,))
    h = keras.layers.Dense(16, activation="tanh")(inputs)
    return keras.Model(inputs, keras.layers.Dense(CLASSES)(h))


def loss():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def max_diff(a, b):
    return max(float(np.max(np.abs(u - v))) for u, v in zip(a.get_weights(), b.get_weights()))


def fit(model, optimizer, batch_size):
    x, y = data()
    model.compile(optimizer=optimizer, loss=loss())
    model.fit(x, y, batch_size=batch_size, epochs=EPOCHS, shuffle=False, verbose=0)
    return model


def iterations(model):
    return int(model.optimizer.iterations.numpy())


def optimizer_wrappers():
    # The package's wrapper derives from the legacy optimizer: both sides use legacy ones.
    makes = {
        "SGD(0.1, momentum=0.9)": lambda: keras.optimizers.legacy.SGD(0.1, momentum=0.9),
        "Adam(1e-2)": lambda: keras.optimizers.legacy.Adam(1e-2),
    }
    for name, make in makes.items():
        big = fit(mlp(), make(), MICRO * K)
        theirs = fit(mlp(), package.GradientAccumulateOptimizer(make(), accum_steps=K), MICRO)
        ours = fit(mlp(), compat.GradientAccumulateOptimizer(make(), accum_steps=K), MICRO)
        print(
            f"GradientAccumulateOptimizer, {name}: max|dw| vs big batch: package "
            f"{max_diff(big, theirs):.3g} (iterations {iterations(theirs)}), compat "
            f"{max_diff(big, ours):.3g} (iterations {iterations(ours)}); big batch "
            f"iterations {iterations(big)}"
        )


def adam_moves_between_updates():
    """Weights before and after one micro-step that is not an update (package wrapper)."""
    x, y = data()
    for label, wrapper in (
        ("package", package.GradientAccumulateOptimizer),
        ("compat", compat.GradientAccumulateOptimizer),
    ):
        model = mlp()
        model.compile(
            optimizer=wrapper(keras.optimizers.legacy.Adam(1e-2), accum_steps=K), loss=loss()
        )
        model.fit(x[: MICRO * K], y[: MICRO * K], batch_size=MICRO, shuffle=False, verbose=0)
        before = model.get_weights()
        model.fit(x[:MICRO], y[:MICRO], batch_size=MICRO, shuffle=False, verbose=0)
        moved = max(float(np.max(np.abs(a - b))) for a, b in zip(before, model.get_weights()))
        print(f"Adam, one micro-step after a full window ({label}): max|dw| = {moved:.3g}")


def parameter_counts():
    base = mlp()
    for label, cls in (
        ("package", package.GradientAccumulateModel),
        ("compat", compat.GradientAccumulateModel),
    ):
        model = cls(accum_steps=K, inputs=base.input, outputs=base.output)
        print(f"count_params ({label}): {model.count_params()} (plain model {base.count_params()})")


def agc():
    """AGC (clip_factor 0.01): per micro-batch (package) vs on the accumulated gradient."""
    x, y = data()
    reference, optimizer = mlp(), keras.optimizers.SGD(0.5, momentum=0.9)
    variables = reference.trainable_variables
    for _ in range(EPOCHS):
        for start in range(0, N, MICRO * K):
            with tf.GradientTape() as tape:
                value = loss()(
                    y[start : start + MICRO * K],
                    reference(x[start : start + MICRO * K], training=True),
                )
            grads = tape.gradient(value, variables)
            optimizer.apply_gradients(zip(compat.adaptive_clip_grad(variables, grads), variables))
    for label, cls in (
        ("package", package.GradientAccumulateModel),
        ("compat", compat.GradientAccumulateModel),
    ):
        base = mlp()
        model = fit(
            cls(accum_steps=K, use_agc=True, inputs=base.input, outputs=base.output),
            keras.optimizers.SGD(0.5, momentum=0.9),
            MICRO,
        )
        print(
            f"use_agc=True ({label}): max|dw| vs big batch with AGC: "
            f"{max_diff(reference, model):.3g}"
        )


def batchnorm_variance():
    """Moving variance after one window whose micro-batch means differ (momentum 0)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(MICRO * K, 3)) + np.repeat(np.arange(K) * 3.0, MICRO)[:, None]
    x = x.astype("float32")
    reference = keras.layers.BatchNormalization(momentum=0.0)
    reference(tf.constant(x), training=True)
    for label, module in (("package", package), ("compat", compat)):
        layer = module.AccumBatchNormalization(accum_steps=K, momentum=0.0)
        inputs = keras.Input((3,))
        model = module.GradientAccumulateModel(
            accum_steps=K, inputs=inputs, outputs=keras.layers.Dense(1)(layer(inputs))
        )
        model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
        model.fit(x, np.zeros((len(x), 1)), batch_size=MICRO, shuffle=False, verbose=0)
        print(
            f"AccumBatchNormalization moving_variance ({label}): "
            f"{np.round(layer.moving_variance.numpy(), 3)}; one Keras BN update on the window: "
            f"{np.round(reference.moving_variance.numpy(), 3)}"
        )


def readme_agc_line():
    base = mlp()
    for label, cls in (
        ("package", package.GradientAccumulateModel),
        ("compat", compat.GradientAccumulateModel),
    ):
        try:
            cls(accum_steps=4, agc=True, inputs=base.input, outputs=base.output)
            print(f"README line agc=True ({label}): builds")
        except TypeError as error:
            print(f"README line agc=True ({label}): TypeError: {error}")


if __name__ == "__main__":
    readme_agc_line()
    parameter_counts()
    optimizer_wrappers()
    adam_moves_between_updates()
    agc()
    batchnorm_variance()
