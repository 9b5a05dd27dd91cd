"""Mixed precision: float32 accumulation of unscaled gradients, one loss-scale step per window.

The reference is plain float32 big-batch training with SGD (an optimizer whose step is
proportional to the gradient, so a loss-scale error of 2**15 or a halved gradient shows in the
weights; Adam would normalise it away).
"""

import ga_tfx
from ga_tfx import keras, tf

import numpy as np
import pytest

from tests.helpers import classification_data, iterations, max_weight_diff, sparse_ce

MICRO, K = 6, 4
EPOCHS = 2
LEARNING_RATE = 0.1

# Unit round-off u = 2**-p of each compute dtype (p: significand bits, hidden bit included).
UNIT_ROUNDOFF = {"mixed_float16": 2.0**-11, "mixed_bfloat16": 2.0**-8}
# Tolerance = ROUNDOFF_FACTOR * u * max|w_final - w_initial| of the float32 reference: the
# half-precision forward/backward passes perturb each gradient by a few u (relative), so the
# weights differ by a few u of their total movement. Measured (96 samples, 2 epochs, 8 updates):
# error / movement = 2.4e-4 (float16, momentum 0), 3.5e-4 (float16, momentum 0.9), 3.3e-3 and
# 3.7e-3 (bfloat16), i.e. 0.5 to 1 u. With the factor 4 the bound is at most 1.6% of the
# movement, so a gradient off by any factor outside [0.98, 1.02] fails: a missing unscale
# (x 32768), a double unscale (/ 32768: the weights stay put), a window counted twice or half.
ROUNDOFF_FACTOR = 4.0


@pytest.fixture
def policy():
    def use(name):
        keras.mixed_precision.set_global_policy(name)

    yield use
    keras.mixed_precision.set_global_policy("float32")


def _model(seed=5):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((8,))
    h = keras.layers.Dense(16, activation="tanh")(inputs)
    h = keras.layers.Dense(3)(h)
    outputs = keras.layers.Activation("linear", dtype="float32")(h)  # float32 logits
    return keras.Model(inputs, outputs)


def _big_batch_float32(x, y, momentum):
    """The reference: float32 training on batches of K * MICRO; returns (model, movement)."""
    model = _model()
    initial = model.get_weights()
    model.compile(keras.optimizers.SGD(LEARNING_RATE, momentum=momentum), sparse_ce())
    model.fit(x, y, batch_size=MICRO * K, epochs=EPOCHS, shuffle=False, verbose=0)
    movement = max(float(np.max(np.abs(a - b))) for a, b in zip(initial, model.get_weights()))
    return model, movement


def _accumulated(x, y, momentum, sample_weight=None):
    model = ga_tfx.wrap_model(_model(), accum_steps=K)
    model.compile(keras.optimizers.SGD(LEARNING_RATE, momentum=momentum), sparse_ce())
    model.fit(
        x, y, sample_weight=sample_weight, batch_size=MICRO, epochs=EPOCHS, shuffle=False, verbose=0
    )
    return model


@pytest.mark.parametrize("momentum", [0.0, 0.9])
@pytest.mark.parametrize("name", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_accumulation_matches_float32_big_batch(policy, name, momentum):
    x, y = classification_data()
    reference, movement = _big_batch_float32(x, y, momentum)
    policy(name)
    mixed = _accumulated(x, y, momentum)
    assert mixed.layers[1].compute_dtype == name.split("_")[1]
    assert all(v.dtype == tf.float32 for v in mixed.trainable_variables)
    assert all(b.dtype == tf.float32 for b in mixed.window_core.accumulator.sums)
    if name == "mixed_float16":
        assert isinstance(mixed.optimizer, keras.mixed_precision.LossScaleOptimizer)
        assert float(mixed.optimizer.loss_scale.numpy()) == 2.0**15  # no window skipped
    assert iterations(mixed.optimizer) == iterations(reference.optimizer) == 8
    tolerance = ROUNDOFF_FACTOR * UNIT_ROUNDOFF[name] * movement
    diff = max_weight_diff(reference, mixed)
    print(
        f"{name} momentum={momentum}: max|dw| = {diff:.3g}, movement {movement:.3g}, "
        f"tolerance {tolerance:.3g}"
    )
    assert movement > 0.05  # training moved the weights far beyond the tolerance
    assert diff <= tolerance


# Momentum 0.9 also catches a skipped window leaking into the slots; plain SGD is slow tier.
@pytest.mark.parametrize("momentum", [pytest.param(0.0, marks=pytest.mark.slow), 0.9])
def test_skipped_windows_leave_no_trace_in_later_updates(policy, momentum):
    """float16 with one non-finite window per epoch == float32 big batch without that window.

    A skipped window must not reach the weights, the momentum, ``iterations`` or the next
    window's buffers: any leak shows as a difference far above the float16 tolerance.
    """
    x, y = classification_data()
    window = MICRO * K
    skipped = slice(window, 2 * window)  # the 2nd window of each epoch
    keep = np.ones(len(x), bool)
    keep[skipped] = False
    reference, movement = _big_batch_float32(x[keep], y[keep], momentum)
    assert iterations(reference.optimizer) == 6  # 3 windows per epoch

    policy("mixed_float16")
    weights = np.ones(len(x), "float32")
    weights[window + 1] = np.inf  # one infinite loss in one micro-batch of the 2nd window
    mixed = _accumulated(x, y, momentum, sample_weight=weights)
    assert iterations(mixed.optimizer) == 6
    assert float(mixed.optimizer.loss_scale.numpy()) == 2.0**15 / 4  # halved once per skip
    tolerance = ROUNDOFF_FACTOR * UNIT_ROUNDOFF["mixed_float16"] * movement
    diff = max_weight_diff(reference, mixed)
    print(f"momentum={momentum}: max|dw| = {diff:.3g}, tolerance {tolerance:.3g}")
    assert diff <= tolerance


@pytest.mark.parametrize(
    "make_optimizer",
    [
        lambda: keras.optimizers.SGD(LEARNING_RATE, momentum=0.9),
        lambda: keras.optimizers.Adam(1e-2),
    ],
    ids=["sgd_momentum", "adam"],
)
def test_a_non_finite_window_leaves_weights_and_every_slot_bitwise_unchanged(
    policy, make_optimizer
):
    policy("mixed_float16")
    x, y = classification_data(n=MICRO * K * 2)
    model = ga_tfx.wrap_model(_model(), accum_steps=K)
    optimizer = keras.mixed_precision.LossScaleOptimizer(make_optimizer())
    model.compile(optimizer, sparse_ce())
    first, second = slice(0, MICRO * K), slice(MICRO * K, None)
    model.fit(x[first], y[first], batch_size=MICRO, epochs=1, shuffle=False, verbose=0)
    weights = model.get_weights()
    slots = {v.name: v.numpy() for v in optimizer.inner_optimizer.variables}
    assert len(slots) >= 3 and iterations(optimizer) == 1  # iterations + one slot per variable
    assert any(np.any(value != 0) for name, value in slots.items() if "iteration" not in name)
    scale = float(optimizer.loss_scale.numpy())

    bad = np.ones(MICRO * K, "float32")
    bad[MICRO + 2] = np.inf  # the 2nd micro-batch of the window has an infinite loss
    model.fit(
        x[second],
        y[second],
        sample_weight=bad,
        batch_size=MICRO,
        epochs=1,
        shuffle=False,
        verbose=0,
    )
    assert float(optimizer.loss_scale.numpy()) == scale / 2
    for before, after in zip(weights, model.get_weights()):
        np.testing.assert_array_equal(before, after)
    after_slots = {v.name: v.numpy() for v in optimizer.inner_optimizer.variables}
    assert set(after_slots) == set(slots)
    for name, value in slots.items():
        np.testing.assert_array_equal(value, after_slots[name], err_msg=name)
    assert iterations(optimizer) == 1
    # The buffers are empty and training goes on with the next window.
    assert all(float(tf.reduce_max(tf.abs(b))) == 0.0 for b in model.window_core.accumulator.sums)
    model.fit(x[second], y[second], batch_size=MICRO, epochs=1, shuffle=False, verbose=0)
    assert iterations(optimizer) == 2
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(weights, model.get_weights())) > 0
