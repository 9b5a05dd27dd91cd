"""Shared by the Keras 3 tests (tests/test_keras3_*.py): models, data, the big-batch reference."""

import keras
import numpy as np

# float32 round-off: the window gradient sums K micro-batch means in another order than the
# big batch's one mean (relative error ~1e-7 per entry); over a few SGD updates of weights of
# order 1 that stays below 1e-6 (ENGINEERING.md section 3: aim <= 1e-6).
TOLERANCE = 1e-6

# Every Keras 3 optimizer, as the TensorFlow and JAX backends' tests check it against big batch.
OPTIMIZERS = {
    "sgd_momentum": lambda: keras.optimizers.SGD(0.05, momentum=0.9),
    "sgd_nesterov": lambda: keras.optimizers.SGD(0.05, momentum=0.9, nesterov=True),
    "adam": lambda: keras.optimizers.Adam(0.01),
    "adamw": lambda: keras.optimizers.AdamW(0.01, weight_decay=0.05),
    "rmsprop": lambda: keras.optimizers.RMSprop(0.01, momentum=0.5),
    "adagrad": lambda: keras.optimizers.Adagrad(0.05),
    "adadelta": lambda: keras.optimizers.Adadelta(1.0),
    "adamax": lambda: keras.optimizers.Adamax(0.01),
    "nadam": lambda: keras.optimizers.Nadam(0.01),
    "lion": lambda: keras.optimizers.Lion(0.001),
    "ftrl": lambda: keras.optimizers.Ftrl(0.05),
}


def data(n=64, features=4, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features)).astype("float32")
    y = (x @ rng.normal(size=(features, 1)) + 0.1 * rng.normal(size=(n, 1))).astype("float32")
    return x, y


def mlp(features=4, seed=1):
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [keras.Input((features,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
    )


def max_weight_difference(a, b):
    return max(float(np.max(np.abs(u - v))) for u, v in zip(a.get_weights(), b.get_weights()))


def big_batch_weights(optimizer, x, y, batch, epochs=1, model_fn=mlp, loss="mse"):
    """Plain Keras 3 trained on batches of ``batch``: the reference."""
    model = model_fn()
    model.compile(optimizer=optimizer, loss=loss)
    model.fit(x, y, batch_size=batch, epochs=epochs, shuffle=False, verbose=0)
    return model


# float32 round-off of the window's sums (Σ n·mean, Σ n·(var + mean²)) against one batch's
# moments, over 4 moving-average steps of statistics of order 1.
BN_TOLERANCE = 1e-5


def bn_first(layer_class=keras.layers.BatchNormalization):
    # BatchNormalization on the data itself: its statistics depend on the data only, so the
    # accumulated model's (whose later weights train on ghost-normalised micro-batches) are
    # comparable with the big batch's.
    keras.utils.set_random_seed(1)
    return keras.Sequential([keras.Input((4,)), layer_class(momentum=0.5), keras.layers.Dense(1)])


def moving_statistics(model):
    layer = model.layers[0]
    return layer.moving_mean.numpy(), layer.moving_variance.numpy()


def shifted_data(n=64):
    x, y = data(n)
    x = x * 3.0 + np.arange(n, dtype="float32")[:, None] / 16.0  # micro-batches differ in mean
    return x, y


class _AtEpochEnd(keras.callbacks.Callback):
    """Records the weights each epoch ends with, as a user's callback sees them."""

    def __init__(self):
        super().__init__()
        self.weights = []

    def on_epoch_end(self, epoch, logs=None):
        self.weights.append(self.model.get_weights())


def _fit_recording(model, batch, **fit):
    seen = _AtEpochEnd()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    x, y = data(52)  # 7 micro-batches of 8 (the last of 4): each epoch ends inside a window
    history = model.fit(
        x, y, batch_size=batch, epochs=2, shuffle=False, verbose=0, callbacks=[seen], **fit
    )
    return history.history, seen.weights


def check_the_epochs_end_sees_the_short_window_applied(wrap, validation):
    """Keras 3's ``fit`` (TensorFlow and JAX) validates before the callbacks' ``on_epoch_end``:
    both must see the epoch's last (short) window applied, as they see plain big-batch
    training's last (smaller) batch. ``wrap(model, k)``: the front-end's ``wrap_model``."""
    fit = {"validation_data": data(16, seed=5)} if validation else {}
    ours_logs, ours_seen = _fit_recording(wrap(mlp(), 4), 8, **fit)
    plain_logs, plain_seen = _fit_recording(mlp(), 32, **fit)
    for epoch in range(2):
        difference = max(
            float(np.max(np.abs(a - b))) for a, b in zip(ours_seen[epoch], plain_seen[epoch])
        )
        assert difference <= TOLERANCE
    if validation:
        # The validation loss of the same weights, to float32 round-off of a mean of order 1.
        np.testing.assert_allclose(ours_logs["val_loss"], plain_logs["val_loss"], rtol=1e-5)


def two_replicas(collective=False):
    """``tf.distribute.MirroredStrategy`` over the two logical CPUs (tests/conftest.py).

    ``collective=False`` (the default): ``ReductionToOneDevice``. The default collective
    all-reduce keys its instances per process, and two such strategies over other shapes in one
    test process collide ("Shape mismatch in the collective instance"; tests/helpers.py says
    the same for the Keras 2 tests); one per process, as in real training, is unaffected. ONE
    test of the tier uses it (``collective=True``): the strategy users get by default.
    """
    import tensorflow as tf

    ops = None if collective else tf.distribute.ReductionToOneDevice()
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"], cross_device_ops=ops)
    assert strategy.num_replicas_in_sync == 2
    return strategy


class _KilledAt(keras.callbacks.Callback):
    """Kills the run (an exception out of fit) when micro-batch ``batch`` (0-based) ends."""

    def __init__(self, batch):
        super().__init__()
        self.batch = batch

    def on_train_batch_end(self, batch, logs=None):
        if batch == self.batch:
            raise KeyboardInterrupt("killed")


def fit_killed_after(model, x, y, path, micro_batches, batch=8):
    """``model.fit`` on micro-batches of ``batch``, checkpointed by Keras' ``ModelCheckpoint``
    (weights and optimizer state, to ``path``) and killed when micro-batch ``micro_batches``
    ends: a run killed inside a window, as a user meets it."""
    import pytest

    checkpoint = keras.callbacks.ModelCheckpoint(
        path, save_weights_only=True, save_freq=micro_batches
    )
    with pytest.raises(KeyboardInterrupt):
        model.fit(
            x,
            y,
            batch_size=batch,
            epochs=1,
            shuffle=False,
            verbose=0,
            callbacks=[checkpoint, _KilledAt(micro_batches - 1)],
        )


def check_per_micro_batch_bn_is_far_off(micro, big):
    """Plain BN trained on micro-batches (``micro``) ends far from big-batch BN's statistics
    (``big``): the contrast that makes the whole-window claim a real one."""
    assert (
        max(np.max(np.abs(a - b)) for a, b in zip(moving_statistics(micro), moving_statistics(big)))
        > 0.1
    )


def check_a_frozen_layer_keeps_its_moving_statistics(wrap, accum_bn):
    """``trainable=False``: the layer normalises with its moving statistics and adds nothing to
    the window; the window's end leaves them as they were (folding an empty window gave NaN).
    ``wrap``: the front-end's ``wrap_model``; ``accum_bn``: its AccumBatchNormalization."""
    x, y = shifted_data(64)
    model = wrap(bn_first(accum_bn), 4)
    layer = model.layers[0]
    layer.moving_mean.assign([1.0, 2.0, 3.0, 4.0])
    layer.trainable = False
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    mean, variance = moving_statistics(model)
    np.testing.assert_array_equal(mean, [1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(variance, [1.0, 1.0, 1.0, 1.0])
