"""AccumBatchNormalization for Keras 3 (TensorFlow backend): the moving statistics of whole
windows equal big-batch BatchNormalization's; replace_batchnorm_layers carries weights over."""

import ga_tfx.keras3 as ga3

import keras
import numpy as np
import pytest

from tests.keras3_helpers import (
    BN_TOLERANCE,
    bn_first,
    check_a_frozen_layer_keeps_its_moving_statistics,
    check_per_micro_batch_bn_is_far_off,
    moving_statistics,
    shifted_data,
    two_replicas,
)

pytestmark = [pytest.mark.keras3, pytest.mark.keras3_backend("tensorflow")]


@pytest.mark.parametrize("replicas", [1, 2])
def test_moving_statistics_of_whole_windows_equal_big_batch_bn(replicas):
    import tensorflow as tf

    x, y = shifted_data()
    big = bn_first()
    big.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    big.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)
    strategy = two_replicas() if replicas == 2 else tf.distribute.get_strategy()
    with strategy.scope():
        ours = ga3.wrap_model(bn_first(ga3.AccumBatchNormalization), 4)
        ours.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    ours.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    assert len(ours.weights) == len(big.weights)  # the window sums are not weights
    for a, b in zip(moving_statistics(ours), moving_statistics(big)):
        assert np.max(np.abs(a - b)) <= BN_TOLERANCE
    # Per micro-batch (plain BN on micro-batches) the statistics are far off: the claim is real.
    micro = bn_first()
    micro.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    micro.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    check_per_micro_batch_bn_is_far_off(micro, big)


def test_replace_batchnorm_layers_carries_the_weights_over():
    model = bn_first()
    model.layers[0].moving_mean.assign([1.0, 2.0, 3.0, 4.0])
    model.layers[0].gamma.assign([0.5, 0.5, 2.0, 2.0])
    replaced = ga3.replace_batchnorm_layers(model)
    assert isinstance(replaced.layers[0], ga3.AccumBatchNormalization)
    assert replaced.layers[0].momentum == 0.5
    for a, b in zip(model.get_weights(), replaced.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_a_frozen_layer_keeps_its_moving_statistics():
    check_a_frozen_layer_keeps_its_moving_statistics(ga3.wrap_model, ga3.AccumBatchNormalization)
