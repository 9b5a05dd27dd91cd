"""Adaptive gradient clipping against a NumPy reference, for every parameter rank."""

import ga_tfx
from ga_tfx._keras import keras, tf
from ga_tfx.transforms import AdaptiveClipping
from ga_tfx.transforms.agc import clip_gradient, unit_axes

import numpy as np
import pytest

from tests.helpers import classification_data, max_weight_diff, mlp, sparse_ce


def _numpy_agc(grad, param, clip_factor, eps, axes):
    """The NFNets rule, written independently in NumPy (float64)."""
    grad, param = grad.astype(np.float64), param.astype(np.float64)
    keep = axes is not None
    param_norm = np.maximum(np.sqrt(np.sum(param**2, axis=axes, keepdims=keep)), eps)
    grad_norm = np.sqrt(np.sum(grad**2, axis=axes, keepdims=keep))
    max_norm = clip_factor * param_norm
    scale = np.where(grad_norm > max_norm, max_norm / np.maximum(grad_norm, 1e-6), 1.0)
    return grad * scale


# (variable name, shape, unit-norm axes): what Keras layers create.
CASES = [
    ("dense/bias:0", (7,), None),
    ("scalar:0", (), None),
    ("dense/kernel:0", (5, 7), (0,)),
    ("conv1d/kernel:0", (3, 4, 6), (0, 1)),
    ("conv2d/kernel:0", (3, 3, 4, 6), (0, 1, 2)),
    ("conv3d/kernel:0", (2, 3, 3, 4, 6), (0, 1, 2, 3)),
    ("depthwise_conv2d/depthwise_kernel:0", (3, 3, 4, 2), (0, 1)),
    ("embedding/embeddings:0", (11, 5), (1,)),
]


@pytest.mark.parametrize("name, shape, axes", CASES, ids=[c[0] for c in CASES])
def test_unitwise_clipping_matches_numpy_reference(name, shape, axes):
    assert unit_axes(name, len(shape)) == axes
    rng = np.random.default_rng(len(shape))
    param = rng.normal(size=shape).astype("float32")
    # Mix of units above and below the threshold.
    grad = (rng.normal(size=shape) * rng.choice([0.001, 1.0], size=shape)).astype("float32")
    variable = tf.Variable(param, name=name.split(":")[0].split("/")[-1])
    clipped = clip_gradient(tf.constant(grad), variable, clip_factor=0.05, eps=1e-3, name=name)
    expected = _numpy_agc(grad, param, 0.05, 1e-3, axes)
    np.testing.assert_allclose(clipped.numpy(), expected, rtol=1e-5, atol=1e-7)
    if len(shape) >= 2:
        assert not np.allclose(grad, expected)  # the case really clips something


def test_sparse_gradients_are_clipped_like_their_dense_form():
    param = np.random.default_rng(0).normal(size=(10, 4)).astype("float32")
    variable = tf.Variable(param)
    sparse = tf.IndexedSlices(
        tf.constant(np.ones((2, 4), "float32")), tf.constant([1, 7]), tf.constant([10, 4])
    )
    dense = tf.convert_to_tensor(sparse)
    a = clip_gradient(sparse, variable, 0.01, name="embedding/embeddings:0")
    b = clip_gradient(dense, variable, 0.01, name="embedding/embeddings:0")
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_exclusion_by_name():
    agc = AdaptiveClipping(0.01, exclude=["*logits*"])
    model = mlp()
    grads_and_vars = [(tf.ones_like(v) * 100.0, v) for v in model.trainable_variables]
    out, apply = agc(grads_and_vars)
    assert apply is None
    for (g_in, v), (g_out, _) in zip(grads_and_vars, out):
        if "logits" in v.name:
            np.testing.assert_array_equal(g_in.numpy(), g_out.numpy())
        else:
            assert float(tf.reduce_max(tf.abs(g_out))) < 100.0


def _sgd_with_agc_per_batch(x, y, batch_size, epochs, clip_factor=0.02, learning_rate=0.5):
    """The reference: a custom loop applying NFNets AGC to each batch's gradient, then SGD."""
    model = mlp()
    optimizer = keras.optimizers.SGD(learning_rate)
    loss_fn = sparse_ce()
    for _ in range(epochs):
        for i in range(0, len(x), batch_size):
            with tf.GradientTape() as tape:
                loss = loss_fn(y[i : i + batch_size], model(x[i : i + batch_size], training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(
                ga_tfx.adaptive_clip_gradients(zip(grads, model.trainable_variables), clip_factor)
            )
    return model


def test_model_agc_acts_once_on_the_accumulated_gradient():
    """Accumulated (b=6, K=4) with AGC == big batch of 24 with AGC on its gradient."""
    x, y = classification_data()
    big = _sgd_with_agc_per_batch(x, y, batch_size=24, epochs=2)
    model = ga_tfx.wrap_model(mlp(), accum_steps=4, agc_clip_factor=0.02)
    model.compile(keras.optimizers.SGD(0.5), sparse_ce())
    model.fit(x, y, batch_size=6, epochs=2, shuffle=False, verbose=0)
    assert max_weight_diff(big, model) <= 1e-5
    # Without AGC the result is different: the clipping really acted.
    unclipped = ga_tfx.wrap_model(mlp(), accum_steps=4)
    unclipped.compile(keras.optimizers.SGD(0.5), sparse_ce())
    unclipped.fit(x, y, batch_size=6, epochs=2, shuffle=False, verbose=0)
    assert max_weight_diff(big, unclipped) > 1e-3


def test_agc_with_accum_steps_one_clips_every_batch_like_plain_agc_training():
    """accum_steps=1 with AGC runs the engine (plain Keras has no AGC) and equals a custom loop
    applying NFNets AGC to each batch's gradient; SGD, 8 updates, float32 round-off (1e-5)."""
    x, y = classification_data(n=48)
    reference = _sgd_with_agc_per_batch(x, y, batch_size=6, epochs=1)
    model = ga_tfx.wrap_model(mlp(), accum_steps=1, agc_clip_factor=0.02)
    model.compile(keras.optimizers.SGD(0.5), sparse_ce())
    model.fit(x, y, batch_size=6, epochs=1, shuffle=False, verbose=0)
    assert model.window_core is not None
    assert int(model.optimizer.iterations.numpy()) == 8
    assert max_weight_diff(reference, model) <= 1e-5
    unclipped = mlp()
    unclipped.compile(keras.optimizers.SGD(0.5), sparse_ce())
    unclipped.fit(x, y, batch_size=6, epochs=1, shuffle=False, verbose=0)
    assert max_weight_diff(reference, unclipped) > 1e-3  # AGC really acted


def test_zero_parameters_are_clipped_to_clip_factor_times_eps():
    """A zero-initialised parameter (a fresh bias) has norm 0: the floor eps bounds its
    gradient to clip_factor * eps, as in NFNets (and the NumPy reference)."""
    grad = np.array([3.0, -4.0], "float32")  # norm 5
    variable = tf.Variable(np.zeros(2, "float32"), name="bias")
    clipped = clip_gradient(
        tf.constant(grad), variable, clip_factor=0.1, eps=1e-3, name="dense/bias:0"
    ).numpy()
    np.testing.assert_allclose(clipped, _numpy_agc(grad, np.zeros(2), 0.1, 1e-3, None), rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(clipped), 0.1 * 1e-3, rtol=1e-6)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"clip_factor": 0.0}, ValueError, "agc_clip_factor must be > 0, got 0.0"),
        ({"clip_factor": -1.0}, ValueError, "agc_clip_factor must be > 0"),
        ({"clip_factor": float("nan")}, ValueError, "finite"),
        ({"clip_factor": "0.1"}, TypeError, "real number"),
        ({"clip_factor": 0.1, "eps": -1e-3}, ValueError, "agc_eps must be >= 0"),
    ],
)
def test_bad_agc_settings(kwargs, error, match):
    with pytest.raises(error, match=match):
        AdaptiveClipping(**kwargs)
    with pytest.raises(error, match=match):
        ga_tfx.adaptive_clip_gradients([], **kwargs)


class _Rank6(keras.layers.Layer):
    """A layer with a rank-6 parameter, which AGC has no unit layout for."""

    def build(self, input_shape):
        self.w6 = self.add_weight(name="w6", shape=(1, 1, 1, 1, 1, 3), initializer="ones")

    def call(self, inputs):
        return inputs * tf.reshape(self.w6, (1, 3))


def test_unsupported_rank_is_a_clear_error_before_training():
    with pytest.raises(ValueError, match="rank 6"):
        unit_axes("weird/kernel:0", 6)
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8,))
    outputs = _Rank6(name="rank6")(keras.layers.Dense(3)(inputs))
    x, y = classification_data(n=12)
    model = ga_tfx.wrap_model(keras.Model(inputs, outputs), accum_steps=2, agc_clip_factor=0.01)
    model.compile(keras.optimizers.SGD(0.1), sparse_ce())
    with pytest.raises(ValueError, match=r"'rank6/w6:0' has rank 6\. Exclude it with agc_exclude"):
        model.fit(x, y, batch_size=6, epochs=1, verbose=0)
    # Excluded by name, the same model trains.
    model = ga_tfx.wrap_model(
        keras.Model(inputs, outputs), accum_steps=2, agc_clip_factor=0.01, agc_exclude=["rank6/*"]
    )
    model.compile(keras.optimizers.SGD(0.1), sparse_ce())
    model.fit(x, y, batch_size=6, epochs=1, verbose=0)
    assert int(model.optimizer.iterations.numpy()) == 1
