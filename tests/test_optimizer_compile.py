"""``model.compile(optimizer=GradientAccumulateOptimizer(...))`` on a plain Keras model, then
``fit(batch_size=micro)``: one update per K micro-batches, equal to big-batch training at the
weight level, on one device and under MirroredStrategy (2 logical CPUs, see conftest)."""

import ga_tfx
from ga_tfx._keras import keras, tf

import numpy as np
import pytest

from tests.helpers import (
    classification_data,
    device_cases,
    iterations,
    max_weight_diff,
    mlp,
    sparse_ce,
    two_replica_strategy,
)

pytestmark = []  # fast tier, library only (no TFX)

MICRO, K, EPOCHS = 6, 4, 2
N = 96  # 16 micro-batches of 6 per epoch: 4 windows per epoch, 8 updates
UPDATES = EPOCHS * N // (MICRO * K)
# float32 round-off of summing the window in another order than the big batch; observed ~1e-7.
TOLERANCE = 1e-5


def _schedule():
    # Decays per optimizer update: counting micro-steps instead would decay 4x too fast.
    return keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.8)


OPTIMIZERS = {
    "sgd_momentum_schedule": lambda: keras.optimizers.SGD(_schedule(), momentum=0.9),
    "adam_schedule": lambda: keras.optimizers.Adam(
        keras.optimizers.schedules.ExponentialDecay(1e-2, decay_steps=1, decay_rate=0.8)
    ),
}


def _big_batch(make_optimizer, x, y):
    model = mlp(l2=1e-2)
    model.compile(optimizer=make_optimizer(), loss=sparse_ce())
    model.fit(x, y, batch_size=MICRO * K, epochs=EPOCHS, shuffle=False, verbose=0)
    return model


@pytest.mark.parametrize(
    "name, distributed", device_cases(sorted(OPTIMIZERS), slow_on_two_replicas=["adam_schedule"])
)
def test_compile_fit_matches_big_batch(name, distributed):
    make_optimizer = OPTIMIZERS[name]
    x, y = classification_data(n=N, seed=4)
    big = _big_batch(make_optimizer, x, y)

    strategy = two_replica_strategy() if distributed else tf.distribute.get_strategy()
    with strategy.scope():
        model = mlp(l2=1e-2)  # a plain keras.Model
        optimizer = ga_tfx.GradientAccumulateOptimizer(optimizer=make_optimizer(), accum_steps=K)
        model.compile(optimizer=optimizer, loss=sparse_ce())
    assert model.optimizer is optimizer
    history = model.fit(x, y, batch_size=MICRO, epochs=EPOCHS, shuffle=False, verbose=0)

    assert len(history.history["loss"]) == EPOCHS
    assert iterations(model.optimizer) == iterations(big.optimizer) == UPDATES
    assert int(optimizer.window_core.micro_steps.numpy()) == 0
    # The schedule was evaluated at the update count, not at the micro-step count.
    np.testing.assert_allclose(
        keras.backend.get_value(optimizer.learning_rate),
        keras.backend.get_value(big.optimizer.learning_rate),
        rtol=1e-6,
    )
    initial = keras.backend.get_value(make_optimizer().learning_rate)
    # Keras evaluates the schedule before counting the update: schedule(UPDATES - 1).
    np.testing.assert_allclose(
        keras.backend.get_value(optimizer.learning_rate), initial * 0.8 ** (UPDATES - 1), rtol=1e-6
    )
    diff = max_weight_diff(big, model)
    print(f"{name} {'mirrored' if distributed else 'one device'}: max |dw| = {diff:.3g}")
    assert diff <= TOLERANCE
    assert max_weight_diff(mlp(l2=1e-2), model) > 1e-2  # training moved the weights


def test_compile_keeps_a_pending_window_across_fit_calls_and_checkpoints(tmp_path):
    """fit's windows do not end with fit: 3 micro-batches per fit, K=4 -> windows cross fit
    calls (as with a checkpoint taken between them); the result equals one uninterrupted run."""
    x, y = classification_data(n=N, seed=5)
    make = OPTIMIZERS["adam_schedule"]

    def compiled():
        model = mlp()
        model.compile(
            optimizer=ga_tfx.GradientAccumulateOptimizer(make(), accum_steps=K), loss=sparse_ce()
        )
        return model

    uninterrupted = compiled()
    uninterrupted.fit(x[:72], y[:72], batch_size=MICRO, shuffle=False, verbose=0)

    first = compiled()
    first.fit(x[:18], y[:18], batch_size=MICRO, shuffle=False, verbose=0)  # 3 micro-steps
    assert iterations(first.optimizer) == 0
    path = tf.train.Checkpoint(model=first, optimizer=first.optimizer).save(str(tmp_path / "c"))
    resumed = compiled()
    tf.train.Checkpoint(model=resumed, optimizer=resumed.optimizer).restore(path)
    resumed.fit(x[18:72], y[18:72], batch_size=MICRO, shuffle=False, verbose=0)
    assert iterations(resumed.optimizer) == iterations(uninterrupted.optimizer) == 3
    assert max_weight_diff(uninterrupted, resumed) == 0.0  # same ops, same order


@pytest.mark.parametrize("distributed", [False, True], ids=["one_device", "mirrored"])
def test_flush_after_fit_applies_the_pending_window(distributed):
    """90 samples = 15 micro-batches: 3 windows and 3 pending micro-batches, which
    ``optimizer.flush()`` (eager, outside the strategy scope) applies as the big batch's last,
    smaller batch of 18."""
    x, y = classification_data(n=90, seed=6)
    make = lambda: keras.optimizers.SGD(0.1, momentum=0.9)  # noqa: E731
    big = mlp()
    big.compile(optimizer=make(), loss=sparse_ce())
    big.fit(x, y, batch_size=MICRO * K, shuffle=False, verbose=0)

    strategy = two_replica_strategy() if distributed else tf.distribute.get_strategy()
    with strategy.scope():
        model = mlp()
        model.compile(optimizer=ga_tfx.GradientAccumulateOptimizer(make(), K), loss=sparse_ce())
    model.fit(x, y, batch_size=MICRO, shuffle=False, verbose=0)
    optimizer = model.optimizer
    assert (iterations(optimizer), int(optimizer.window_core.micro_steps.numpy())) == (3, 3)
    assert bool(optimizer.flush())
    assert not bool(optimizer.flush())  # nothing pending
    assert iterations(optimizer) == iterations(big.optimizer) == 4
    diff = max_weight_diff(big, model)
    print(f"flush after fit ({'mirrored' if distributed else 'one device'}): max |dw| = {diff:.3g}")
    assert diff <= TOLERANCE


def test_keras_format_save_and_load_keep_the_wrapper_and_its_pending_window(tmp_path):
    x, y = classification_data(n=N, seed=7)
    model = mlp()
    model.compile(
        optimizer=ga_tfx.GradientAccumulateOptimizer(
            keras.optimizers.Adam(1e-2), accum_steps=K, agc_clip_factor=0.1
        ),
        loss=sparse_ce(),
    )
    model.fit(x[:42], y[:42], batch_size=MICRO, shuffle=False, verbose=0)  # 1 update, 3 pending
    model.save(str(tmp_path / "model.keras"))
    loaded = keras.models.load_model(str(tmp_path / "model.keras"))
    optimizer = loaded.optimizer
    assert isinstance(optimizer, ga_tfx.GradientAccumulateOptimizer)
    assert (optimizer.accum_steps, optimizer.get_config()["agc_clip_factor"]) == (K, 0.1)
    with pytest.raises(AttributeError):
        optimizer.accum_steps = K + 1  # one K, the config's: no copy that could diverge from it
    assert (iterations(optimizer), int(optimizer.window_core.micro_steps.numpy())) == (1, 3)
    model.fit(x[42:], y[42:], batch_size=MICRO, shuffle=False, verbose=0)
    loaded.fit(x[42:], y[42:], batch_size=MICRO, shuffle=False, verbose=0)
    assert iterations(loaded.optimizer) == iterations(model.optimizer) == 4
    assert max_weight_diff(model, loaded) == 0.0  # same state, same ops
