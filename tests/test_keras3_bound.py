"""The Keras 3 benchmark's bound (benchmarks/keras3_bound.py) computes what it claims: one
epoch's sum of the per-micro-batch gradients of the mean loss, on each backend (the module runs
in the keras3 tier once per KERAS_BACKEND), against NumPy's closed form for a softmax layer and
against the backend's own per-micro-batch gradients for a conv+BN net in training mode."""

import ga_tfx.keras3  # noqa: F401  (first: keeps this process on Keras 3)

import keras
import numpy as np
import pytest

from benchmarks.keras3_bound import JAX_LOOPS, bound_slot

pytestmark = pytest.mark.keras3

BACKEND = keras.backend.backend()
# On JAX both loops (a jit call per micro-batch, or one per epoch with a fori_loop) must sum
# the same; on TensorFlow there is one bound.
LOOPS = JAX_LOOPS if BACKEND == "jax" else ("host",)
B, N_MICRO = 4, 3
# float32: a sum of 3 micro-batch means of gradients of order 1, each accurate to ~1e-7
# relative, against a reference summed in another order.
TOLERANCE = 1e-5


def _data(shape, classes, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(B * N_MICRO,) + shape).astype("float32")
    y = rng.integers(0, classes, size=B * N_MICRO).astype("int64")
    return x, y


def _inputs(x, y):
    """The data as the benchmark hands it to the bound: tensors on TensorFlow, arrays on JAX."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.constant(x), tf.constant(y)
    return x, y


def _sums(model, x, y, loop):
    import tensorflow as tf

    slot = bound_slot(keras, tf, model, *_inputs(x, y), B, jax_loop=loop)
    first = slot.gradient_sums()
    # a second epoch (the moving statistics threaded on): the same sums, weights unchanged
    second = slot.gradient_sums()
    for a, b in zip(first, second):
        np.testing.assert_allclose(a, b, rtol=0, atol=TOLERANCE)
    return first


@pytest.mark.parametrize("loop", LOOPS)
def test_the_bound_sums_the_softmax_gradients_numpy_computes(loop):
    """A Dense softmax layer: Σ over micro-batches of xᵢᵀ(softmax(xᵢW + c) − onehot(yᵢ))/b, and
    of its column sums for the bias."""
    classes = 5
    x, y = _data((6,), classes)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(classes)])
    kernel, bias = (keras.ops.convert_to_numpy(v) for v in model.weights)
    want_kernel, want_bias = np.zeros_like(kernel), np.zeros_like(bias)
    for i in range(N_MICRO):
        xi, yi = x[i * B : (i + 1) * B].astype("float64"), y[i * B : (i + 1) * B]
        logits = xi @ kernel + bias
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        dlogits = (p - np.eye(classes)[yi]) / B
        want_kernel += xi.T @ dlogits
        want_bias += dlogits.sum(axis=0)
    got_kernel, got_bias = _sums(model, x, y, loop)
    assert np.max(np.abs(got_kernel - want_kernel)) <= TOLERANCE
    assert np.max(np.abs(got_bias - want_bias)) <= TOLERANCE


def _conv_bn_net():
    keras.utils.set_random_seed(7)
    return keras.Sequential(
        [
            keras.Input((6, 6, 2)),
            keras.layers.Conv2D(3, 3, padding="same", use_bias=False),
            keras.layers.BatchNormalization(),
            keras.layers.ReLU(),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(4),
        ]
    )


def _micro_batch_gradients(model, x, y):
    """The backend's own gradient of the mean loss of one micro-batch, training mode, eager."""
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    if BACKEND == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            value = loss(y, model(x, training=True))
        return [g.numpy() for g in tape.gradient(value, model.trainable_variables)]
    import jax

    def micro_loss(trainable):
        non_trainable = [v.value for v in model.non_trainable_variables]
        logits, _ = model.stateless_call(trainable, non_trainable, x, training=True)
        return loss(y, logits)

    return [
        np.asarray(g) for g in jax.grad(micro_loss)([v.value for v in model.trainable_variables])
    ]


@pytest.mark.parametrize("loop", LOOPS)
def test_the_bound_sums_the_training_mode_gradients_of_a_conv_bn_net(loop):
    """Conv+BN: the sums equal the per-micro-batch gradients in training mode (BN on each
    micro-batch's own statistics: in inference mode they would differ), summed."""
    x, y = _data((6, 6, 2), 4, seed=1)
    model = _conv_bn_net()
    want = [np.zeros(v.shape, "float32") for v in model.trainable_variables]
    for i in range(N_MICRO):
        grads = _micro_batch_gradients(model, x[i * B : (i + 1) * B], y[i * B : (i + 1) * B])
        want = [w + g for w, g in zip(want, grads)]
    got = _sums(model, x, y, loop)
    assert len(got) == len(want)
    assert max(float(np.max(np.abs(g - w))) for g, w in zip(got, want)) <= TOLERANCE
