"""Mixed precision: float32 accumulation of unscaled gradients, one loss-scale step per window."""

import numpy as np
import pytest

import ga_tfx
from ga_tfx._keras import keras, tf
from tests.helpers import classification_data, iterations, max_weight_diff, sparse_ce

MICRO, K = 6, 4


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


def _train(x, y, epochs=2):
    model = ga_tfx.wrap_model(_model(), accum_steps=K)
    model.compile(keras.optimizers.Adam(1e-2), sparse_ce())
    model.fit(x, y, batch_size=MICRO, epochs=epochs, shuffle=False, verbose=0)
    return model


@pytest.mark.parametrize("name, tolerance", [("mixed_float16", 5e-3), ("mixed_bfloat16", 3e-2)])
def test_mixed_precision_tracks_float32_training(policy, name, tolerance):
    x, y = classification_data()
    reference = _train(x, y)
    policy(name)
    mixed = _train(x, y)
    assert mixed.layers[1].compute_dtype == name.split("_")[1]
    assert all(v.dtype == tf.float32 for v in mixed.trainable_variables)
    assert all(b.dtype == tf.float32 for b in mixed.gradient_accumulator.sums)
    if name == "mixed_float16":
        assert isinstance(mixed.optimizer, keras.mixed_precision.LossScaleOptimizer)
    assert iterations(mixed.optimizer) == iterations(reference.optimizer) == 8
    # Adam over 8 updates of lr 1e-2 moves weights by ~0.08; half precision forward/backward
    # passes stay within the stated tolerance of float32 training.
    assert max_weight_diff(reference, mixed) <= tolerance


def test_a_non_finite_micro_batch_skips_exactly_one_update(policy):
    policy("mixed_float16")
    x, y = classification_data()
    weights = np.ones(len(x), "float32")
    weights[MICRO * K + 1] = np.inf  # an infinite loss in one micro-batch of the 2nd window

    model = ga_tfx.wrap_model(_model(), accum_steps=K)
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-2))
    model.compile(optimizer, sparse_ce())
    scale_before = float(optimizer.loss_scale.numpy())
    model.fit(x, y, sample_weight=weights, batch_size=MICRO, epochs=1, shuffle=False,
              verbose=0)
    # 4 windows, the second one non-finite: 3 updates, the loss scale halved once.
    assert iterations(optimizer) == 3
    assert float(optimizer.loss_scale.numpy()) == scale_before / 2
    assert all(np.all(np.isfinite(w)) for w in model.get_weights())
    # The skipped window left nothing behind: the buffers are empty and training goes on.
    assert all(float(tf.reduce_max(tf.abs(b))) == 0.0 for b in model.gradient_accumulator.sums)
    model.fit(x, y, batch_size=MICRO, epochs=1, shuffle=False, verbose=0)
    assert iterations(optimizer) == 7
