"""Accumulation over K micro-batches of b == big-batch training on batches of K*b (weight level).

Every comparison starts from the same initial weights, sees the same data in the same order and
runs at least 8 optimizer updates (96 samples, b=6, K=4: 4 updates per epoch, 2 epochs).
"""

from ga_tfx._keras import keras

import numpy as np
import pytest

from tests.helpers import (
    classification_data,
    iterations,
    max_weight_diff,
    mlp,
    sparse_ce,
    train_pair,
)

TOLERANCE = 1e-5  # the contract; measured values are ~1e-7 (float32 round-off)
MICRO, K = 6, 4

OPTIMIZERS = {
    "sgd": lambda: keras.optimizers.SGD(0.1),
    "sgd_momentum": lambda: keras.optimizers.SGD(0.1, momentum=0.9),
    "sgd_nesterov": lambda: keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True),
    "adam": lambda: keras.optimizers.Adam(1e-2),
    "adamw": lambda: keras.optimizers.AdamW(1e-2, weight_decay=0.05),
    "nadam": lambda: keras.optimizers.Nadam(1e-2),
    "adamax": lambda: keras.optimizers.Adamax(1e-2),
    "rmsprop_momentum": lambda: keras.optimizers.RMSprop(1e-2, momentum=0.9),
    "adagrad": lambda: keras.optimizers.Adagrad(0.1),
    "adadelta": lambda: keras.optimizers.Adadelta(1.0),
    "ftrl": lambda: keras.optimizers.Ftrl(0.1, l1_regularization_strength=1e-3),
    "legacy_adam": lambda: keras.optimizers.legacy.Adam(1e-2),
    "legacy_sgd_momentum": lambda: keras.optimizers.legacy.SGD(0.1, momentum=0.9),
    "lion": lambda: keras.optimizers.Lion(1e-3),
    "adafactor": lambda: keras.optimizers.Adafactor(1e-2),
}
# SGD sees the scale of the gradient (a gradient off by a factor moves the weights by that
# factor); Adam normalises it away but has per-variable state: both where a claim needs them.
SGD_AND_ADAM = {
    "sgd_momentum": lambda: keras.optimizers.SGD(0.1, momentum=0.9),
    "adam": lambda: keras.optimizers.Adam(1e-2),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_every_optimizer_matches_big_batch(name):
    x, y = classification_data()
    big, acc = train_pair(mlp, OPTIMIZERS[name], x, y, MICRO, K)
    assert iterations(big.optimizer) == iterations(acc.optimizer) == 8
    assert max_weight_diff(big, acc) <= TOLERANCE


@pytest.mark.parametrize(
    "clip", [{"clipnorm": 0.05}, {"global_clipnorm": 0.05}, {"clipvalue": 0.01}]
)
def test_gradient_clipping_sees_the_accumulated_gradient(clip):
    # SGD with momentum: its step is proportional to the (clipped) gradient, so clipping each
    # micro-batch, or a window gradient of the wrong scale, shows in the weights.
    x, y = classification_data()
    sgd = lambda **kwargs: keras.optimizers.SGD(0.1, momentum=0.9, **kwargs)
    big, acc = train_pair(mlp, lambda: sgd(**clip), x, y, MICRO, K)
    assert max_weight_diff(big, acc) <= TOLERANCE
    # The thresholds are below the gradients' norms and values: clipping was active (measured
    # 0.22 between the clipped and the unclipped big-batch weights).
    unclipped = mlp()
    unclipped.compile(sgd(), sparse_ce())
    unclipped.fit(x, y, batch_size=MICRO * K, epochs=2, shuffle=False, verbose=0)
    assert max_weight_diff(big, unclipped) > 1000 * TOLERANCE


def test_learning_rate_schedule_advances_once_per_update():
    schedule = lambda: keras.optimizers.schedules.ExponentialDecay(
        0.5, decay_steps=1, decay_rate=0.5
    )
    x, y = classification_data()
    big, acc = train_pair(
        mlp, lambda: keras.optimizers.SGD(schedule(), momentum=0.9), x, y, MICRO, K
    )
    assert max_weight_diff(big, acc) <= TOLERANCE
    # The last update used the schedule at step 7 (the 8th update), not at micro-step 31.
    lr = float(acc.optimizer.learning_rate.numpy())
    assert lr == float(big.optimizer.learning_rate.numpy()) == pytest.approx(0.5 * 0.5**7)


def test_l2_regularisation_is_counted_once_per_update():
    x, y = classification_data()
    big, acc = train_pair(lambda: mlp(l2=0.1), lambda: keras.optimizers.SGD(0.2), x, y, MICRO, K)
    assert max_weight_diff(big, acc) <= TOLERANCE


@pytest.mark.parametrize("name", sorted(SGD_AND_ADAM))
def test_sample_weight_and_class_weight(name):
    x, y = classification_data()
    weights = np.random.default_rng(3).uniform(0.1, 3.0, len(x)).astype("float32")
    big, acc = train_pair(
        mlp, SGD_AND_ADAM[name], x, y, MICRO, K, fit_kwargs={"sample_weight": weights}
    )
    assert max_weight_diff(big, acc) <= TOLERANCE
    big, acc = train_pair(
        mlp,
        SGD_AND_ADAM[name],
        x,
        y,
        MICRO,
        K,
        fit_kwargs={"class_weight": {0: 0.3, 1: 2.0, 2: 1.0}},
    )
    assert max_weight_diff(big, acc) <= TOLERANCE


@pytest.mark.parametrize("name", sorted(SGD_AND_ADAM))
def test_ema_counts_updates_not_micro_steps(name):
    """``use_ema=True``: the moving average is taken once per update, and its overwrite every
    ``ema_overwrite_frequency`` updates (iterations), as in big-batch training."""

    def make_optimizer():
        optimizer = SGD_AND_ADAM[name]()
        return type(optimizer)(
            **dict(
                optimizer.get_config(), use_ema=True, ema_momentum=0.5, ema_overwrite_frequency=3
            )
        )

    x, y = classification_data()
    big, acc = train_pair(mlp, make_optimizer, x, y, MICRO, K)
    assert iterations(big.optimizer) == iterations(acc.optimizer) == 8
    big_ema = [v.numpy() for v in big.optimizer._model_variables_moving_average]
    acc_ema = [v.numpy() for v in acc.optimizer._model_variables_moving_average]
    assert len(big_ema) == len(acc_ema) == 4
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(big_ema, acc_ema)) <= TOLERANCE
    assert max_weight_diff(big, acc) <= TOLERANCE


def _two_in_two_out(seed=7):
    keras.utils.set_random_seed(seed)
    a = keras.Input((5,), name="a")
    b = keras.Input((3,), name="b")
    h = keras.layers.Dense(12, activation="relu")(keras.layers.Concatenate()([a, b]))
    cls = keras.layers.Dense(3, name="cls")(h)
    reg = keras.layers.Dense(1, name="reg")(h)
    return keras.Model({"a": a, "b": b}, {"cls": cls, "reg": reg})


@pytest.mark.parametrize("name", sorted(SGD_AND_ADAM))
def test_multi_input_multi_output_with_loss_weights(name):
    rng = np.random.default_rng(5)
    n = 96
    x = {
        "a": rng.normal(size=(n, 5)).astype("float32"),
        "b": rng.normal(size=(n, 3)).astype("float32"),
    }
    y = {"cls": rng.integers(0, 3, n), "reg": rng.normal(size=(n, 1)).astype("float32")}
    losses = {
        "cls": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        "reg": keras.losses.MeanSquaredError(),
    }
    big, acc = train_pair(
        _two_in_two_out,
        SGD_AND_ADAM[name],
        x,
        y,
        MICRO,
        K,
        loss=losses,
        compile_kwargs={"loss_weights": {"cls": 1.0, "reg": 0.3}},
    )
    assert acc.output_names == big.output_names
    assert max_weight_diff(big, acc) <= TOLERANCE


def _embedding_model(seed=11):
    keras.utils.set_random_seed(seed)
    tokens = keras.Input((4,), dtype="int32", name="tokens")
    h = keras.layers.Embedding(50, 6, name="embedding")(tokens)
    h = keras.layers.GlobalAveragePooling1D()(h)
    return keras.Model(tokens, keras.layers.Dense(3)(h))


@pytest.mark.parametrize(
    "make_optimizer",
    [
        lambda: keras.optimizers.Adam(1e-2),
        lambda: keras.optimizers.SGD(0.5, momentum=0.9),
        lambda: keras.optimizers.Adagrad(0.5),
    ],
    ids=["adam", "sgd_momentum", "adagrad"],
)
def test_sparse_embedding_gradients_match_big_batch(make_optimizer):
    rng = np.random.default_rng(2)
    x = rng.integers(0, 50, (96, 4)).astype("int32")
    y = rng.integers(0, 3, 96)
    big, acc = train_pair(_embedding_model, make_optimizer, x, y, MICRO, K)
    assert max_weight_diff(big, acc) <= TOLERANCE


def test_subclassed_model_matches_big_batch():
    class TwoLayer(keras.Model):
        def __init__(self):
            super().__init__()
            self.hidden = keras.layers.Dense(16, activation="tanh")
            self.out = keras.layers.Dense(3)

        def call(self, inputs):
            return self.out(self.hidden(inputs))

    def build():
        keras.utils.set_random_seed(3)
        model = TwoLayer()
        model(np.zeros((1, 8), "float32"))
        return model

    x, y = classification_data()
    big, acc = train_pair(build, lambda: keras.optimizers.Adam(1e-2), x, y, MICRO, K)
    assert type(acc).__name__ == "AccumulatingModel"
    assert max_weight_diff(big, acc) <= TOLERANCE


def test_sequential_model_matches_big_batch():
    def build():
        keras.utils.set_random_seed(4)
        return keras.Sequential(
            [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)]
        )

    x, y = classification_data()
    big, acc = train_pair(build, lambda: keras.optimizers.RMSprop(1e-2), x, y, MICRO, K)
    assert max_weight_diff(big, acc) <= TOLERANCE


def test_a_detector_that_can_fail():
    """The comparisons above can fail: K micro-steps of plain training are far from K*b."""
    x, y = classification_data()
    big = mlp()
    big.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(True))
    big.fit(x, y, batch_size=MICRO * K, epochs=2, shuffle=False, verbose=0)
    small = mlp()
    small.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(True))
    small.fit(x, y, batch_size=MICRO, epochs=2, shuffle=False, verbose=0)
    assert max_weight_diff(big, small) > 100 * TOLERANCE
