"""mixed_float16 on Keras 3 (TensorFlow backend): Keras 3's LossScaleOptimizer (compile wraps
the optimizer in it under the policy) sees one window per step; a window with a non-finite
gradient is skipped whole. The reference is float32 big-batch SGD (see
tests/test_mixed_precision.py for the tolerance's derivation, the same here)."""

import ga_tfx.keras3 as ga3

import keras
import numpy as np
import pytest

from tests.keras3_helpers import max_weight_difference

pytestmark = [pytest.mark.keras3, pytest.mark.keras3_backend("tensorflow")]

MICRO, K, EPOCHS, RATE = 6, 4, 2, 0.1
# float16's unit round-off 2**-11 times 4, times the weights' total movement (the Keras 2
# suite's bound, tests/test_mixed_precision.py: measured there at 0.5-1 u of the movement).
BOUND = 4.0 * 2.0**-11


@pytest.fixture
def policy():
    yield keras.mixed_precision.set_global_policy
    keras.mixed_precision.set_global_policy("float32")


def _data(n=96):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 8)).astype("float32"), rng.integers(0, 3, size=n)


def _model():
    keras.utils.set_random_seed(5)
    inputs = keras.Input((8,))
    h = keras.layers.Dense(16, activation="tanh")(inputs)
    h = keras.layers.Dense(3)(h)
    outputs = keras.layers.Activation("linear", dtype="float32")(h)
    return keras.Model(inputs, outputs)


def _loss():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _float32_big_batch(x, y):
    model = _model()
    initial = model.get_weights()
    model.compile(keras.optimizers.SGD(RATE, momentum=0.9), _loss())
    model.fit(x, y, batch_size=MICRO * K, epochs=EPOCHS, shuffle=False, verbose=0)
    movement = max(float(np.max(np.abs(a - b))) for a, b in zip(initial, model.get_weights()))
    return model, movement


def _mixed(x, y, sample_weight=None):
    model = ga3.wrap_model(_model(), K)
    model.compile(keras.optimizers.SGD(RATE, momentum=0.9), _loss())
    model.fit(
        x, y, sample_weight=sample_weight, batch_size=MICRO, epochs=EPOCHS, shuffle=False, verbose=0
    )
    return model


def test_mixed_float16_matches_float32_big_batch(policy):
    x, y = _data()
    reference, movement = _float32_big_batch(x, y)
    policy("mixed_float16")
    mixed = _mixed(x, y)
    assert isinstance(mixed.optimizer, keras.optimizers.LossScaleOptimizer)
    assert mixed.layers[1].compute_dtype == "float16"
    assert float(mixed.optimizer.dynamic_scale.numpy()) == 2.0**15  # no window skipped
    assert int(mixed.optimizer.iterations.numpy()) == 8
    assert movement > 0.05
    assert max_weight_difference(mixed, reference) <= BOUND * movement


def test_a_window_with_a_non_finite_gradient_is_skipped_whole(policy):
    # One infinite sample weight in the 2nd window of each epoch: that window is skipped (the
    # weights, the momentum and iterations untouched, the scale halved once) = float32 big
    # batch without that window.
    x, y = _data()
    window = MICRO * K
    keep = np.ones(len(x), bool)
    keep[window : 2 * window] = False
    reference, movement = _float32_big_batch(x[keep], y[keep])
    policy("mixed_float16")
    weights = np.ones(len(x), "float32")
    weights[window + 1] = np.inf
    mixed = _mixed(x, y, sample_weight=weights)
    assert int(mixed.optimizer.iterations.numpy()) == 6
    assert float(mixed.optimizer.dynamic_scale.numpy()) == 2.0**15 / 4
    assert max_weight_difference(mixed, reference) <= BOUND * movement
