"""The Keras 3 front-end on JAX (ga_tfx.keras3.wrap_model: the window as a stateless optimizer
step): weights equal Keras 3's own big-batch training, on one device and under
keras.distribution.DataParallel over two CPU devices (XLA_FLAGS, tests/conftest.py); uneven
micro-batches weigh by their samples; a window the data's end leaves short is applied as a
smaller batch; a run killed inside a window resumes from its checkpoint to the uninterrupted
weights."""

import ga_tfx.keras3 as ga3

import contextlib
import os
import subprocess
import sys

import keras
import pytest

from tests.keras3_helpers import (
    OPTIMIZERS,
    TOLERANCE,
    big_batch_weights,
    check_the_epochs_end_sees_the_short_window_applied,
    data,
    fit_killed_after,
    max_weight_difference,
    mlp,
)

pytestmark = [pytest.mark.keras3, pytest.mark.keras3_backend("jax")]

# Adaptive optimizers divide by running gradient magnitudes, which amplifies the round-off of
# the window sum: the same bound as the TensorFlow backend's and the Keras 2 suite's (1e-5).
ADAPTIVE_TOLERANCE = 1e-5


@contextlib.contextmanager
def _devices(count):
    """``count`` 1: the default (one device); 2: ``DataParallel`` over the two CPU devices."""
    if count == 1:
        yield
        return
    import jax

    devices = jax.devices("cpu")
    assert len(devices) == 2
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
    try:
        yield
    finally:
        keras.distribution.set_distribution(None)


def _accumulated(optimizer, x, y, k=4, micro=8, epochs=2, **fit):
    model = ga3.wrap_model(mlp(), k)
    model.compile(optimizer=optimizer, loss="mse")
    model.fit(x, y, batch_size=micro, epochs=epochs, shuffle=False, verbose=0, **fit)
    return model


def _updates(model):
    return int(model.optimizer.inner_optimizer.iterations.numpy())


def test_sgd_matches_big_batch():
    x, y = data(64)
    ours = _accumulated(keras.optimizers.SGD(0.1), x, y)
    plain = big_batch_weights(keras.optimizers.SGD(0.1), x, y, batch=32, epochs=2)
    assert _updates(ours) == int(plain.optimizer.iterations.numpy()) == 4
    assert int(ours.optimizer.iterations.numpy()) == 4  # the wrapper answers with the updates
    assert max_weight_difference(ours, plain) <= TOLERANCE


@pytest.mark.parametrize("devices", [1, 2])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_every_keras_3_optimizer_matches_big_batch(name, devices):
    # On one device and under DataParallel over two CPU devices (the global batch's gradient).
    x, y = data(64)
    with _devices(devices):
        ours = _accumulated(OPTIMIZERS[name](), x, y)
    plain = big_batch_weights(OPTIMIZERS[name](), x, y, batch=32, epochs=2)
    assert _updates(ours) == int(plain.optimizer.iterations.numpy()) == 4
    assert max_weight_difference(ours, plain) <= ADAPTIVE_TOLERANCE


def _halving():
    return keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.5)


CASES = {
    "sgd_momentum": (lambda: keras.optimizers.SGD(0.05, momentum=0.9), TOLERANCE),
    "adam": (lambda: keras.optimizers.Adam(0.01), ADAPTIVE_TOLERANCE),
    "schedule": (lambda: keras.optimizers.SGD(_halving()), TOLERANCE),
}


@pytest.mark.parametrize("devices", [1, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_momentum_adam_and_a_schedule_per_update_match_big_batch(case, devices):
    make, tolerance = CASES[case]
    x, y = data(64)
    with _devices(devices):
        ours = _accumulated(make(), x, y)
        if devices == 2:  # the weights live on both devices
            assert len(ours.trainable_variables[0].value.sharding.device_set) == 2
    plain = big_batch_weights(make(), x, y, batch=32, epochs=2)
    assert _updates(ours) == 4
    assert max_weight_difference(ours, plain) <= tolerance


def test_a_schedule_advancing_per_micro_step_would_show():
    # The contrast to the test above: Keras 3's built-in accumulation advances the schedule per
    # micro-step, which the weights show (so counting updates is what the test above checks).
    x, y = data(64)
    builtin = mlp()
    builtin.compile(
        optimizer=keras.optimizers.SGD(_halving(), gradient_accumulation_steps=4), loss="mse"
    )
    builtin.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    plain = big_batch_weights(keras.optimizers.SGD(_halving()), x, y, batch=32, epochs=2)
    assert max_weight_difference(builtin, plain) > 1e-2


# (samples, what the data's end leaves): micro-batches of 8, K=4.
DATA_ENDS = {
    # 60: windows of 32 and 28, the last micro-batch of 4 samples (weighing half the others).
    "uneven_last_micro_batch": 60,
    # 40: a window of 32 and one of 8, one micro-batch, applied at the data's end.
    "one_micro_batch_left": 40,
    # 52: a window of 32 and one of 20 (3 micro-batches, the last of 4 samples).
    "short_window_uneven": 52,
}


@pytest.mark.parametrize("devices", [1, 2])
@pytest.mark.parametrize("end", sorted(DATA_ENDS))
def test_uneven_data_and_short_windows_match_big_batch(end, devices):
    # Plain Keras on batches of 32 makes its last batch smaller: the same updates.
    x, y = data(DATA_ENDS[end])
    with _devices(devices):
        ours = _accumulated(keras.optimizers.SGD(0.1), x, y)
    plain = big_batch_weights(keras.optimizers.SGD(0.1), x, y, batch=32, epochs=2)
    assert _updates(ours) == int(plain.optimizer.iterations.numpy()) == 4
    assert int(ours.optimizer.micro_steps.numpy()) == 0  # nothing left pending
    assert max_weight_difference(ours, plain) <= TOLERANCE


def test_an_epoch_cut_by_steps_per_epoch_ends_its_window_as_a_smaller_batch():
    # 8 micro-batches of 8, steps_per_epoch=6, 2 epochs: Keras' array iterator goes on where the
    # last epoch stopped, so the epochs see micro-batches 0-5 and 6-7: updates on samples 0-31,
    # 32-47 (the first epoch's end) and 48-63 (the second's), as train_on_batch makes them.
    x, y = data(64)
    ours = _accumulated(keras.optimizers.SGD(0.1), x, y, steps_per_epoch=6)
    by_hand = mlp()
    by_hand.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    for start, stop in ((0, 32), (32, 48), (48, 64)):
        by_hand.train_on_batch(x[start:stop], y[start:stop])
    assert _updates(ours) == 3
    assert max_weight_difference(ours, by_hand) <= TOLERANCE


@pytest.mark.parametrize("validation", [False, True], ids=["callbacks", "validation"])
def test_validation_and_callbacks_at_the_epochs_end_see_the_short_window_applied(validation):
    check_the_epochs_end_sees_the_short_window_applied(ga3.wrap_model, validation)


@pytest.mark.parametrize("devices", [1, 2])
def test_a_run_killed_inside_a_window_resumes_to_the_uninterrupted_weights(tmp_path, devices):
    # 64 samples, micro-batches of 8, K=4: killed after 6 micro-batches (one update done, two
    # micro-batches of the second window in the optimizer's sums), checkpointed by Keras'
    # ModelCheckpoint there (weights and optimizer state); a new process's model (other initial
    # weights) compiles, loads the checkpoint and fits the two micro-batches left.
    x, y = data(64)
    path = str(tmp_path / "mid_window.weights.h5")
    sgd = lambda: keras.optimizers.SGD(0.05, momentum=0.9)  # noqa: E731
    with _devices(devices):
        whole = _accumulated(sgd(), x, y, epochs=1)
        first = ga3.wrap_model(mlp(), 4)
        first.compile(optimizer=sgd(), loss="mse")
        fit_killed_after(first, x, y, path, micro_batches=6)
        resumed = ga3.wrap_model(mlp(seed=7), 4)
        resumed.compile(optimizer=sgd(), loss="mse")
        resumed.load_weights(path)
        assert int(resumed.optimizer.micro_steps.numpy()) == 2
        assert float(resumed.optimizer.window_samples.numpy()) == 16.0
        assert _updates(resumed) == 1
        resumed.fit(x[48:], y[48:], batch_size=8, epochs=1, shuffle=False, verbose=0)
    plain = big_batch_weights(sgd(), x, y, batch=32, epochs=1)
    assert max_weight_difference(whole, plain) <= TOLERANCE
    assert _updates(resumed) == 2
    assert max_weight_difference(resumed, whole) <= TOLERANCE


def test_a_callback_setting_the_learning_rate_reaches_the_optimizer_that_updates():
    # LearningRateScheduler sets model.optimizer.learning_rate at each epoch's start: the
    # wrapper passes it to the inner optimizer (otherwise the rate would stay 0.1).
    x, y = data(64)

    def fit(model, batch):
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        rate = keras.callbacks.LearningRateScheduler(lambda epoch: 0.1 / (1 + 9 * epoch))
        model.fit(x, y, batch_size=batch, epochs=2, shuffle=False, verbose=0, callbacks=[rate])
        return model

    ours, plain = fit(ga3.wrap_model(mlp(), 4), 8), fit(mlp(), 32)
    assert float(ours.optimizer.learning_rate.numpy()) == pytest.approx(0.01)
    assert max_weight_difference(ours, plain) <= TOLERANCE


def test_global_clipping_on_the_optimizer_acts_once_on_the_window_gradient():
    x, y = data(64)
    sgd = lambda **kwargs: keras.optimizers.SGD(0.1, momentum=0.9, **kwargs)  # noqa: E731
    plain = big_batch_weights(sgd(global_clipnorm=0.05), x, y, batch=32, epochs=2)
    ours = _accumulated(sgd(global_clipnorm=0.05), x, y)
    assert max_weight_difference(ours, plain) <= TOLERANCE
    unclipped = big_batch_weights(sgd(), x, y, batch=32, epochs=2)
    assert max_weight_difference(plain, unclipped) > 1e-3  # the threshold is active


def test_settings_other_than_accum_steps_are_refused_on_jax():
    with pytest.raises(ValueError, match=r"takes accum_steps only; got \['agc_clip_factor'\]"):
        ga3.wrap_model(mlp(), 4, agc_clip_factor=0.01)


@pytest.mark.parametrize(
    "optimizer, message",
    [
        (
            lambda: keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1)),
            r"a LossScaleOptimizer is not supported \(allowed: ",
        ),
        (
            lambda: keras.optimizers.SGD(0.1, gradient_accumulation_steps=4),
            r"gradient_accumulation_steps=4 on the optimizer would accumulate twice \(allowed: ",
        ),
    ],
    ids=["loss_scale_optimizer", "keras_accumulation"],
)
def test_optimizers_it_cannot_wrap_exactly_are_refused_at_compile(optimizer, message):
    model = ga3.wrap_model(mlp(), 4)
    with pytest.raises(ValueError, match=message):
        model.compile(optimizer=optimizer(), loss="mse")


def test_a_mixed_float16_policy_is_refused_at_compile():
    # Keras' compile wraps the optimizer in a LossScaleOptimizer under mixed_float16: its
    # unscaling of the window gradient is not proven on JAX (it is on TensorFlow).
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = ga3.wrap_model(mlp(), 4)
        with pytest.raises(ValueError, match=r"dtype policy 'mixed_float16' .* \(allowed: "):
            model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_the_jax_path_imports_no_tensorflow():
    # A JAX user may have no TensorFlow: wrapping, compiling and fitting (AccumBN and a short
    # window included) import none (keras.utils.set_random_seed would, so it is not called).
    script = """
import sys
import ga_tfx.keras3 as ga3
import keras
import numpy as np
x, y = np.ones((52, 4), "float32"), np.ones((52, 1), "float32")
layers = [keras.Input((4,)), ga3.AccumBatchNormalization(), keras.layers.Dense(1)]
model = ga3.wrap_model(keras.Sequential(layers), 4)
model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
print(int(model.optimizer.iterations.numpy()), "tensorflow" in sys.modules)
"""
    env = dict(os.environ, KERAS_BACKEND="jax")
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["2", "False"]
