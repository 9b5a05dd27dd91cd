"""The Keras 3 front-end on JAX (ga_tfx.keras3.wrap_model: the window as a stateless optimizer
step): weights equal Keras 3's own big-batch training, on one device and under
keras.distribution.DataParallel over two CPU devices (XLA_FLAGS, tests/conftest.py)."""

import ga_tfx.keras3 as ga3

import keras
import numpy as np
import pytest

from tests.keras3_helpers import TOLERANCE, big_batch_weights, data, max_weight_difference, mlp

pytestmark = [pytest.mark.keras3, pytest.mark.keras3_backend("jax")]


def _accumulated(optimizer, x, y, k=4, micro=8, epochs=2):
    model = ga3.wrap_model(mlp(), k)
    model.compile(optimizer=optimizer, loss="mse")
    model.fit(x, y, batch_size=micro, epochs=epochs, shuffle=False, verbose=0)
    return model


@pytest.mark.parametrize(
    "make",
    [
        lambda: keras.optimizers.SGD(0.05, momentum=0.9),
        lambda: keras.optimizers.Adam(0.01),
    ],
    ids=["sgd_momentum", "adam"],
)
def test_one_device_matches_big_batch(make):
    x, y = data(64)
    ours = _accumulated(make(), x, y)
    plain = big_batch_weights(make(), x, y, batch=32, epochs=2)
    assert int(ours.optimizer.inner_optimizer.iterations.numpy()) == 4
    # Adam divides by running gradient magnitudes: the Keras 2 suite's accept bound, 1e-5.
    assert max_weight_difference(ours, plain) <= 1e-5


def test_a_learning_rate_schedule_counts_updates():
    x, y = data(64)
    halving = lambda: keras.optimizers.schedules.ExponentialDecay(0.1, 1, 0.5)  # noqa: E731
    ours = _accumulated(keras.optimizers.SGD(halving()), x, y)
    plain = big_batch_weights(keras.optimizers.SGD(halving()), x, y, batch=32, epochs=2)
    assert max_weight_difference(ours, plain) <= TOLERANCE


def test_data_parallel_over_two_devices_matches_big_batch():
    import jax

    devices = jax.devices("cpu")
    assert len(devices) == 2
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
    try:
        x, y = data(64)
        ours = _accumulated(keras.optimizers.SGD(0.05, momentum=0.9), x, y)
        plain = big_batch_weights(keras.optimizers.SGD(0.05, momentum=0.9), x, y, 32, 2)
        kernel = ours.trainable_variables[0].value
        assert len(kernel.sharding.device_set) == 2  # the weights live on both devices
    finally:
        keras.distribution.set_distribution(None)
    assert int(ours.optimizer.inner_optimizer.iterations.numpy()) == 4
    assert max_weight_difference(ours, plain) <= TOLERANCE
    assert np.isfinite(ours.get_weights()[0]).all()


def test_settings_other_than_accum_steps_are_refused_on_jax():
    with pytest.raises(ValueError, match=r"takes accum_steps only; got \['agc_clip_factor'\]"):
        ga3.wrap_model(mlp(), 4, agc_clip_factor=0.01)
