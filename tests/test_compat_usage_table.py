"""The usage table of gradient-accumulator's README, run line by line through the compat module.

Each line is the package README's own text (0.5.2, "Why?" section); only the import line
changes (``from gradient_accumulator import`` -> ``from ga_tfx.compat.gradient_accumulator
import``). What each line builds is then trained and compared with big-batch training, as in
``test_compat_gradient_accumulator.py`` (same data, sizes and tolerances).
"""

from ga_tfx import keras, tf  # noqa: I001  (first import: selects Keras 2)

import numpy as np

import ga_tfx.compat.gradient_accumulator as gradient_accumulator
from tests.helpers import classification_data, iterations, max_weight_diff, mlp
from tests.test_compat_gradient_accumulator import (
    FLOAT16_TOLERANCE_PER_MOVEMENT,
    K,
    MICRO,
    TOLERANCE,
    UPDATES,
    _big_batch,
    _big_batch_with_numpy_agc,
    _fit_micro,
    _mixed_model,
    float32_reference_and_movement,
    mixed_float16,
)

# Library only, a few seconds per test: neither slow nor tfx.
pytestmark = []

PACKAGE_IMPORT = (
    "from gradient_accumulator import GradientAccumulateModel, GradientAccumulateOptimizer, "
    "AccumBatchNormalization"
)
MIGRATED_IMPORT = (
    "from ga_tfx.compat.gradient_accumulator import GradientAccumulateModel, "
    "GradientAccumulateOptimizer, AccumBatchNormalization"
)
USAGE_TABLE = {
    "model": "model = GradientAccumulateModel(accum_steps=4, inputs=model.input, "
    "outputs=model.output)",
    "optimizer": "opt = GradientAccumulateOptimizer(accum_steps=4, "
    "optimizer=tf.keras.optimizers.SGD(1e-2))",
    "batch_normalization": "layer = AccumBatchNormalization(accum_steps=4)",
    "agc": "model = GradientAccumulateModel(accum_steps=4, agc=True, inputs=model.input, "
    "outputs=model.output)",
    "mixed_precision": "model = GradientAccumulateModel(accum_steps=4, mixed_precision=True, "
    "inputs=model.input, outputs=model.output)",
}
assert K == 4  # the table's accum_steps


def _run(line, **namespace):
    """Runs the migrated import and one table line; returns the namespace."""
    namespace = {"tf": tf, **namespace}
    exec(MIGRATED_IMPORT, namespace)
    exec(line, namespace)
    return namespace


def test_migration_is_the_import_line_only():
    # The two import lines name the same things; only the module differs.
    package_module, package_names = PACKAGE_IMPORT.removeprefix("from ").split(" import ")
    migrated_module, migrated_names = MIGRATED_IMPORT.removeprefix("from ").split(" import ")
    assert (package_module, migrated_module) == (
        "gradient_accumulator",
        "ga_tfx.compat.gradient_accumulator",
    )
    assert migrated_names == package_names
    # The migrated line imports the compat module's names, and the table's lines are the
    # package's text: they name nothing of ga-tfx.
    namespace = _run("pass")
    for name in package_names.split(", "):
        assert namespace[name] is getattr(gradient_accumulator, name)
    assert not any("ga_tfx" in line for line in USAGE_TABLE.values())


def test_model_line():
    x, y = classification_data()
    make = lambda: keras.optimizers.SGD(0.1, momentum=0.9)
    big = _big_batch(make, x, y)
    model = _fit_micro(_run(USAGE_TABLE["model"], model=mlp())["model"], make(), x, y)
    assert iterations(model.optimizer) == UPDATES
    assert max_weight_diff(big, model) <= TOLERANCE


def test_optimizer_line_in_compile():
    x, y = classification_data()
    big = _big_batch(lambda: keras.optimizers.SGD(1e-2), x, y)
    initial = mlp().get_weights()
    opt = _run(USAGE_TABLE["optimizer"])["opt"]
    model = _fit_micro(mlp(), opt, x, y)
    assert iterations(opt) == UPDATES
    movement = max(float(np.max(np.abs(a - b))) for a, b in zip(initial, big.get_weights()))
    assert movement > 100 * TOLERANCE
    assert max_weight_diff(big, model) <= TOLERANCE


def test_batch_normalization_line_window_statistics():
    layer = _run(USAGE_TABLE["batch_normalization"])["layer"]
    rng = np.random.default_rng(4)
    x = (rng.normal(size=(MICRO * K * 2, 3)) * 2 + 1).astype("float32")
    inputs = keras.Input((3,))
    plain = keras.Model(inputs, keras.layers.Dense(1)(layer(inputs)))
    model = _run(USAGE_TABLE["model"], model=plain)["model"]
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
    model.fit(x, np.zeros((len(x), 1)), batch_size=MICRO, epochs=1, shuffle=False, verbose=0)
    reference = keras.layers.BatchNormalization()  # the layer's defaults: momentum 0.99
    for window in np.split(x, 2):  # one Keras update per window of K micro-batches
        reference(tf.constant(window), training=True)
    np.testing.assert_allclose(layer.moving_mean, reference.moving_mean, rtol=1e-5)
    np.testing.assert_allclose(layer.moving_variance, reference.moving_variance, rtol=1e-5)


def test_agc_line():
    x, y = classification_data()
    make = lambda: keras.optimizers.SGD(0.5, momentum=0.9)
    # The package's default factor and eps, AGC on the big-batch gradient.
    reference = _big_batch_with_numpy_agc(make, x, y, clip_factor=0.01, eps=1e-3)
    assert max_weight_diff(reference, _big_batch(make, x, y)) > 100 * TOLERANCE
    model = _fit_micro(_run(USAGE_TABLE["agc"], model=mlp())["model"], make(), x, y)
    assert max_weight_diff(reference, model) <= TOLERANCE


def test_mixed_precision_line():
    x, y = classification_data()
    make = lambda: keras.optimizers.SGD(0.1, momentum=0.9)
    reference, movement = float32_reference_and_movement(make, x, y)
    with mixed_float16():
        model = _run(USAGE_TABLE["mixed_precision"], model=_mixed_model())["model"]
        model = _fit_micro(model, make(), x, y)
    assert isinstance(model.optimizer, keras.mixed_precision.LossScaleOptimizer)
    assert model.layers[1].compute_dtype == "float16"
    assert max_weight_diff(reference, model) <= FLOAT16_TOLERANCE_PER_MOVEMENT * movement
