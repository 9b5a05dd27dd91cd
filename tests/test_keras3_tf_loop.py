"""The Keras 3 optimizer wrapper in a custom loop (TensorFlow backend): big-batch weights, and a
run killed inside a window resumes to the uninterrupted weights."""

import ga_tfx.keras3 as ga3

import keras
import pytest
import tensorflow as tf

from tests.keras3_helpers import TOLERANCE, big_batch_weights, data, max_weight_difference, mlp

pytestmark = [pytest.mark.keras3, pytest.mark.keras3_backend("tensorflow")]

K, MICRO = 4, 8


def _micro_steps(model, opt, x, y, start, stop):
    for i in range(start, stop):
        xb, yb = x[i * MICRO : (i + 1) * MICRO], y[i * MICRO : (i + 1) * MICRO]
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(keras.ops.square(model(xb, training=True) - yb))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))


def _sgd():
    return keras.optimizers.SGD(0.05, momentum=0.9)


def test_custom_loop_killed_inside_a_window_resumes_to_the_uninterrupted_weights(tmp_path):
    x, y = data(64)
    whole = mlp()
    whole_opt = ga3.GradientAccumulateOptimizer(_sgd(), accum_steps=K)
    _micro_steps(whole, whole_opt, x, y, 0, 8)
    plain = big_batch_weights(_sgd(), x, y, batch=K * MICRO)
    assert int(whole_opt.iterations.numpy()) == 2
    assert max_weight_difference(whole, plain) <= TOLERANCE

    # Killed after 6 micro-batches: one update done, two micro-batches of the second window in
    # the buffers, saved.
    first = mlp()
    first_opt = ga3.GradientAccumulateOptimizer(_sgd(), accum_steps=K)
    _micro_steps(first, first_opt, x, y, 0, 6)
    path = tf.train.Checkpoint(model=first, optimizer=first_opt).write(str(tmp_path / "ckpt"))
    assert int(first_opt.window_core.micro_steps.numpy()) == 2
    names = [name for name, _ in tf.train.list_variables(path)]
    assert any(name.startswith("optimizer/ga_window_core/accumulator/") for name in names)

    # A new process's objects (other initial weights), restored, then the last two.
    resumed = mlp(seed=7)
    resumed_opt = ga3.GradientAccumulateOptimizer(_sgd(), accum_steps=K)
    tf.train.Checkpoint(model=resumed, optimizer=resumed_opt).read(path)
    _micro_steps(resumed, resumed_opt, x, y, 6, 8)
    assert int(resumed_opt.iterations.numpy()) == 2
    assert max_weight_difference(resumed, whole) <= TOLERANCE
