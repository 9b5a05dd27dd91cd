"""AccumBatchNormalization for Keras 3 on JAX: the moving statistics of whole windows equal
big-batch BatchNormalization's, on one device and under DataParallel over two CPU devices, a
window the data's end leaves short included; its window sums are weights there (JAX's
stateless forward threads non-trainable weights only), so a mid-window checkpoint holds them."""

import ga_tfx.keras3 as ga3

import keras
import numpy as np
import pytest

from tests.keras3_helpers import (
    BN_TOLERANCE,
    bn_first,
    check_a_frozen_layer_keeps_its_moving_statistics,
    check_per_micro_batch_bn_is_far_off,
    fit_killed_after,
    moving_statistics,
    shifted_data,
)
from tests.test_keras3_jax import _devices

pytestmark = [pytest.mark.keras3, pytest.mark.keras3_backend("jax")]


def _fit(model, x, y, batch):
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    model.fit(x, y, batch_size=batch, epochs=2, shuffle=False, verbose=0)
    return model


@pytest.mark.parametrize("devices", [1, 2])
@pytest.mark.parametrize("samples", [64, 52], ids=["whole_windows", "short_last_window"])
def test_moving_statistics_of_whole_windows_equal_big_batch_bn(samples, devices):
    # 52 samples: each epoch ends with a window of 20 (micro-batches of 8, 8 and 4), folded in
    # at the data's end as big-batch BN folds its smaller last batch.
    x, y = shifted_data(samples)
    big = _fit(bn_first(), x, y, 32)
    with _devices(devices):
        ours = _fit(ga3.wrap_model(bn_first(ga3.AccumBatchNormalization), 4), x, y, 8)
    for a, b in zip(moving_statistics(ours), moving_statistics(big)):
        assert np.max(np.abs(a - b)) <= BN_TOLERANCE
    assert all(float(np.max(np.abs(v.numpy()))) == 0.0 for v in ours.layers[0].window_sums)
    # Per micro-batch (plain BN on micro-batches) the statistics are far off: the claim is real.
    micro = _fit(bn_first(), x, y, 8)
    check_per_micro_batch_bn_is_far_off(micro, big)


def test_replace_batchnorm_layers_carries_the_weights_over():
    model = bn_first()
    model.layers[0].moving_mean.assign([1.0, 2.0, 3.0, 4.0])
    model.layers[0].gamma.assign([0.5, 0.5, 2.0, 2.0])
    replaced = ga3.replace_batchnorm_layers(model)
    layer = replaced.layers[0]
    assert isinstance(layer, ga3.AccumBatchNormalization)
    assert layer.momentum == 0.5
    sums = {id(v) for v in layer.window_sums}
    carried = [w.numpy() for w in replaced.weights if id(w) not in sums]
    for a, b in zip(model.get_weights(), carried, strict=True):
        np.testing.assert_array_equal(a, b)
    assert len(replaced.weights) == len(model.weights) + 3  # count, Σ n·mean, Σ n·(var + mean²)


def test_a_frozen_layer_keeps_its_moving_statistics():
    check_a_frozen_layer_keeps_its_moving_statistics(ga3.wrap_model, ga3.AccumBatchNormalization)


def test_a_run_killed_inside_a_window_resumes_its_statistics(tmp_path):
    # Killed after 6 micro-batches of 8 (K=4): the layer's window sums of the two micro-batches
    # since the last update are in the ModelCheckpoint's weights file with the optimizer's;
    # a new model loads it and fits the two micro-batches left.
    x, y = shifted_data(64)
    path = str(tmp_path / "mid_window.weights.h5")
    accum_bn = lambda: bn_first(ga3.AccumBatchNormalization)  # noqa: E731
    whole = ga3.wrap_model(accum_bn(), 4)
    whole.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    whole.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    first = ga3.wrap_model(accum_bn(), 4)
    first.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    fit_killed_after(first, x, y, path, micro_batches=6)
    resumed = ga3.wrap_model(accum_bn(), 4)
    resumed.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    resumed.load_weights(path)
    assert float(resumed.layers[0].window_sums[0].numpy()) == 16.0  # two micro-batches of 8
    resumed.fit(x[48:], y[48:], batch_size=8, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(moving_statistics(resumed), moving_statistics(whole)):
        assert np.max(np.abs(a - b)) <= BN_TOLERANCE
    assert (
        max(np.max(np.abs(a - b)) for a, b in zip(resumed.get_weights(), whole.get_weights()))
        <= 1e-6
    )
