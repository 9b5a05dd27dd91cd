"""ga_tfx.compat.gradient_accumulator: every name and argument, at the weight level.

The reference is always plain big-batch training (batches of K * MICRO) from the same initial
weights on the same data in the same order, or a NumPy definition. 96 samples, MICRO=6, K=4,
2 epochs: 8 optimizer updates per comparison. SGD with momentum shows a gradient-scale error in
the weights; Adam is checked as well because its state is what the package's optimizer wrapper
moves between updates.
"""

import ga_tfx  # noqa: I001  (first import: selects Keras 2)

import contextlib

import numpy as np
import pytest

from ga_tfx import keras, tf
import ga_tfx.compat.gradient_accumulator as gradient_accumulator
from ga_tfx.compat.gradient_accumulator import (
    AccumBatchNormalization,
    GradientAccumulateModel,
    GradientAccumulateOptimizer,
    adaptive_clip_grad,
    compute_norm,
    unitwise_norm,
)
from ga_tfx.compat.gradient_accumulator.utils import replace_batchnorm_layers
from tests.helpers import (
    classification_data,
    iterations,
    max_weight_diff,
    mlp,
    sparse_ce,
    two_replica_strategy,
)
from tests.test_agc import _numpy_agc

# Library only, a few seconds per test: neither slow nor tfx.
pytestmark = []

# float32 training, 8 updates: measured differences are 3e-8..1e-7 (round-off of a different
# summation order); 1e-5 is the project's contract and 100x above them, while any gradient
# scale error (a missing 1/K, a micro-batch update) moves the weights by >= 1e-3 here.
TOLERANCE = 1e-5
MICRO, K, EPOCHS = 6, 4, 2
UPDATES = 96 // (MICRO * K) * EPOCHS

OPTIMIZERS = {
    "sgd_momentum": lambda: keras.optimizers.SGD(0.1, momentum=0.9),
    "adam": lambda: keras.optimizers.Adam(1e-2),
}


# Reference runs, trained once per test session: several tests compare with the same one
# (the models are only read afterwards), which keeps these files inside the fast tier.
_REFERENCES = {}


def _cached(kind, make_optimizer, x, build, train):
    optimizer = make_optimizer()
    key = (
        kind,
        build.__name__,
        type(optimizer).__name__,
        repr(optimizer.get_config()),
        hash(x.tobytes()),
    )
    if key not in _REFERENCES:
        _REFERENCES[key] = train(build(), optimizer)
    return _REFERENCES[key]


def _big_batch(make_optimizer, x, y, build=mlp):
    """``build()`` trained on batches of ``K * MICRO`` (cached)."""

    def train(model, optimizer):
        model.compile(optimizer=optimizer, loss=sparse_ce())
        model.fit(x, y, batch_size=MICRO * K, epochs=EPOCHS, shuffle=False, verbose=0)
        return model

    return _cached("big_batch", make_optimizer, x, build, train)


def _fit_micro(model, optimizer, x, y):
    model.compile(optimizer=optimizer, loss=sparse_ce())
    model.fit(x, y, batch_size=MICRO, epochs=EPOCHS, shuffle=False, verbose=0)
    return model


def _compat_model(build=mlp, **kwargs):
    base = build()
    return GradientAccumulateModel(inputs=base.input, outputs=base.output, **kwargs)


def _big_batch_with_numpy_agc(make_optimizer, x, y, clip_factor, eps):
    """Big-batch training whose gradient is clipped by the NumPy AGC rule (Dense layers)."""
    train = lambda model, optimizer: _train_with_numpy_agc(model, optimizer, x, y, clip_factor, eps)
    return _cached(f"numpy_agc {clip_factor} {eps}", make_optimizer, x, mlp, train)


def _train_with_numpy_agc(model, optimizer, x, y, clip_factor, eps):
    variables = model.trainable_variables
    for _ in range(EPOCHS):
        for start in range(0, len(x), MICRO * K):
            xb, yb = x[start : start + MICRO * K], y[start : start + MICRO * K]
            with tf.GradientTape() as tape:
                loss = sparse_ce()(yb, model(xb, training=True))
            grads = tape.gradient(loss, variables)
            clipped = [
                _numpy_agc(
                    g.numpy(), v.numpy(), clip_factor, eps, (0,) if v.shape.rank == 2 else None
                )
                for g, v in zip(grads, variables)
            ]
            optimizer.apply_gradients(zip([tf.constant(c, tf.float32) for c in clipped], variables))
    return model


# ---------------------------------------------------------------- GradientAccumulateModel
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_model_matches_big_batch(name):
    x, y = classification_data()
    big = _big_batch(OPTIMIZERS[name], x, y)
    acc = _fit_micro(_compat_model(accum_steps=K), OPTIMIZERS[name](), x, y)
    assert isinstance(acc, ga_tfx.GradientAccumulateModel)  # the ga-tfx engine runs it
    assert iterations(acc.optimizer) == iterations(big.optimizer) == UPDATES
    assert max_weight_diff(big, acc) <= TOLERANCE


def test_model_default_accum_steps_is_plain_keras_bit_for_bit():
    x, y = classification_data()
    plain = mlp()
    plain.compile(optimizer=OPTIMIZERS["adam"](), loss=sparse_ce())
    plain.fit(x, y, batch_size=MICRO, epochs=EPOCHS, shuffle=False, verbose=0)
    acc = _fit_micro(_compat_model(), OPTIMIZERS["adam"](), x, y)
    assert acc.accum_steps == 1
    assert max_weight_diff(plain, acc) == 0.0


@pytest.mark.parametrize("spelling", ["use_agc", "agc"])
def test_model_agc_clips_the_accumulated_gradient_once_per_update(spelling):
    x, y = classification_data()
    make = lambda: keras.optimizers.SGD(0.5, momentum=0.9)
    reference = _big_batch_with_numpy_agc(make, x, y, clip_factor=0.02, eps=0.05)
    unclipped = _big_batch(make, x, y)
    acc = _fit_micro(
        _compat_model(accum_steps=K, clip_factor=0.02, eps=0.05, **{spelling: True}), make(), x, y
    )
    assert acc.use_agc and acc.agc.clip_factor == 0.02 and acc.agc.eps == 0.05
    assert max_weight_diff(unclipped, reference) > 100 * TOLERANCE  # AGC really clips here
    assert max_weight_diff(reference, acc) <= TOLERANCE


def test_model_agc_defaults_are_the_packages():
    model = _compat_model(accum_steps=K, agc=True)
    assert (model.clip_factor, model.eps) == (0.01, 1e-3)
    assert (model.agc.clip_factor, model.agc.eps) == (0.01, 1e-3)
    assert _compat_model(accum_steps=K).agc is None  # AGC off by default


def test_model_positional_arguments_follow_the_package_order():
    base = mlp()
    model = GradientAccumulateModel(4, True, True, 0.05, 1e-2, True, base.input, base.output)
    assert (model.accum_steps, model.mixed_precision, model.use_agc) == (4, True, True)
    assert (model.agc.clip_factor, model.agc.eps, model.experimental_distributed_support) == (
        0.05,
        1e-2,
        True,
    )


# Mixed precision: float16 forward/backward against float32 big batch. Tolerance as in
# test_mixed_precision.py: 4 unit round-offs of float16 (2**-11) times the weights' total
# movement; a missing unscale, a double unscale or a window counted twice exceeds it.
FLOAT16_TOLERANCE_PER_MOVEMENT = 4 * 2.0**-11


def _mixed_model(seed=5):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((8,))
    h = keras.layers.Dense(16, activation="tanh")(inputs)
    h = keras.layers.Dense(3)(h)
    return keras.Model(inputs, keras.layers.Activation("linear", dtype="float32")(h))


@contextlib.contextmanager
def mixed_float16():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy("float32")


def float32_reference_and_movement(make_optimizer, x, y):
    """Float32 big-batch training of ``_mixed_model``; returns it and max |w_final - w_0|."""
    reference = _big_batch(make_optimizer, x, y, build=_mixed_model)
    initial = _mixed_model().get_weights()
    movement = max(float(np.max(np.abs(a - b))) for a, b in zip(initial, reference.get_weights()))
    assert movement > 0.05  # training moves the weights far beyond the tolerance
    return reference, movement


@pytest.mark.parametrize("wrap_first", [False, True], ids=["plain_optimizer", "loss_scale_given"])
def test_model_mixed_precision_scales_the_loss_and_matches_float32_big_batch(wrap_first):
    x, y = classification_data()
    make = lambda: keras.optimizers.SGD(0.1, momentum=0.9)
    reference, movement = float32_reference_and_movement(make, x, y)
    with mixed_float16():
        optimizer = make()
        if wrap_first:
            optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
        acc = _compat_model(_mixed_model, accum_steps=K, mixed_precision=True)
        acc = _fit_micro(acc, optimizer, x, y)
    assert acc.layers[1].compute_dtype == "float16"
    assert isinstance(acc.optimizer, keras.mixed_precision.LossScaleOptimizer)
    assert float(acc.optimizer.loss_scale.numpy()) == 2.0**15  # scaled, no window skipped
    assert iterations(acc.optimizer) == UPDATES
    assert max_weight_diff(reference, acc) <= FLOAT16_TOLERANCE_PER_MOVEMENT * movement


def test_model_mixed_precision_wraps_an_optimizer_given_by_name():
    model = _compat_model(accum_steps=K, mixed_precision=True)
    model.compile(optimizer="sgd", loss=sparse_ce())
    assert isinstance(model.optimizer, keras.mixed_precision.LossScaleOptimizer)
    assert isinstance(model.optimizer.inner_optimizer, keras.optimizers.SGD)


@pytest.mark.parametrize(
    "name",
    # Adam's 2-replica case in the slow tier (SGD with momentum sees any scale error).
    [pytest.param(n, marks=[pytest.mark.slow] if n == "adam" else []) for n in sorted(OPTIMIZERS)],
)
def test_model_experimental_distributed_support_two_replicas_match_big_batch(name):
    x, y = classification_data()
    big = _big_batch(OPTIMIZERS[name], x, y)
    with two_replica_strategy().scope():
        acc = _compat_model(accum_steps=K, experimental_distributed_support=True)
        acc.compile(optimizer=OPTIMIZERS[name](), loss=sparse_ce())
    acc.fit(x, y, batch_size=MICRO, epochs=EPOCHS, shuffle=False, verbose=0)
    assert iterations(acc.optimizer) == UPDATES
    assert max_weight_diff(big, acc) <= TOLERANCE


def test_model_parameter_count_excludes_accumulation_buffers():
    base = mlp()
    model = GradientAccumulateModel(accum_steps=K, inputs=base.input, outputs=base.output)
    x, y = classification_data()
    _fit_micro(model, OPTIMIZERS["adam"](), x, y)  # buffers exist now
    assert model.count_params() == base.count_params() == 8 * 16 + 16 + 16 * 3 + 3
    assert len(model.get_weights()) == len(base.get_weights())


@pytest.mark.parametrize("suffix", [".keras", ""], ids=["keras_format", "saved_model"])
def test_model_save_and_load_keep_the_package_settings_and_weights(tmp_path, suffix):
    x, y = classification_data()
    model = _fit_micro(
        _compat_model(accum_steps=K, use_agc=True, clip_factor=0.05, mixed_precision=False),
        OPTIMIZERS["sgd_momentum"](),
        x,
        y,
    )
    path = str(tmp_path / f"model{suffix}")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert type(loaded) is GradientAccumulateModel
    assert max_weight_diff(model, loaded) == 0.0
    config = loaded.get_config()
    for key, value in dict(accum_steps=K, use_agc=True, clip_factor=0.05, eps=1e-3).items():
        assert config[key] == value
    assert "agc_clip_factor" not in config


@pytest.mark.parametrize(
    "kwargs, named",
    [
        (dict(mixed_precision="yes"), "mixed_precision"),
        (dict(use_agc=2), "use_agc"),
        (dict(clip_factor=0.0), "clip_factor"),
        (dict(eps=-1.0), "eps"),
        (dict(accum_steps=0), "accum_steps"),
        (dict(experimental_distributed_support="on"), "experimental_distributed_support"),
        (dict(use_agc=True, agc=False), "agc"),
    ],
)
def test_model_bad_arguments_name_the_argument(kwargs, named):
    with pytest.raises((TypeError, ValueError), match=named):
        _compat_model(**kwargs)


# ---------------------------------------------------------------- GradientAccumulateOptimizer
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_in_compile_matches_big_batch(name):
    x, y = classification_data()
    big = _big_batch(OPTIMIZERS[name], x, y)
    optimizer = GradientAccumulateOptimizer(
        accum_steps=K, optimizer=OPTIMIZERS[name](), reduction="MEAN"
    )
    acc = _fit_micro(mlp(), optimizer, x, y)
    assert iterations(acc.optimizer) == iterations(big.optimizer) == UPDATES
    assert max_weight_diff(big, acc) <= TOLERANCE


def test_optimizer_in_compile_under_two_replicas_matches_big_batch():
    x, y = classification_data()
    big = _big_batch(OPTIMIZERS["adam"], x, y)
    with two_replica_strategy().scope():
        model = mlp()
        optimizer = GradientAccumulateOptimizer(OPTIMIZERS["adam"](), K)
        model.compile(optimizer=optimizer, loss=sparse_ce())
    model.fit(x, y, batch_size=MICRO, epochs=EPOCHS, shuffle=False, verbose=0)
    assert iterations(optimizer) == UPDATES
    assert max_weight_diff(big, model) <= TOLERANCE


def test_optimizer_defaults_are_the_packages():
    optimizer = GradientAccumulateOptimizer()
    assert isinstance(optimizer.optimizer, keras.optimizers.SGD)  # optimizer="SGD"
    assert (optimizer.accum_steps, optimizer.reduction, optimizer.name) == (
        1,
        "MEAN",
        "GradientAccumulateOptimizer",
    )
    assert isinstance(GradientAccumulateOptimizer("adam", 2).optimizer, keras.optimizers.Adam)


@pytest.mark.parametrize(
    "clip", [dict(clipnorm=0.05), dict(global_clipnorm=0.05), dict(clipvalue=0.01)]
)
def test_optimizer_clipping_keywords_clip_the_accumulated_gradient(clip):
    x, y = classification_data()
    big = _big_batch(lambda: keras.optimizers.SGD(0.5, momentum=0.9, **clip), x, y)
    unclipped = _big_batch(lambda: keras.optimizers.SGD(0.5, momentum=0.9), x, y)
    optimizer = GradientAccumulateOptimizer(keras.optimizers.SGD(0.5, momentum=0.9), K, **clip)
    acc = _fit_micro(mlp(), optimizer, x, y)
    assert max_weight_diff(unclipped, big) > 100 * TOLERANCE  # the clipping is active
    assert max_weight_diff(big, acc) <= TOLERANCE


def test_optimizer_config_round_trip():
    optimizer = GradientAccumulateOptimizer(keras.optimizers.Adam(1e-2), accum_steps=3)
    config = optimizer.get_config()
    assert config["reduction"] == "MEAN" and config["accum_steps"] == 3
    assert not any(key.startswith("agc") for key in config)
    again = GradientAccumulateOptimizer.from_config(config)
    assert type(again) is GradientAccumulateOptimizer and again.accum_steps == 3
    assert again.optimizer.get_config() == optimizer.optimizer.get_config()


@pytest.mark.parametrize(
    "kwargs, error, named",
    [
        (dict(reduction="SUM"), ValueError, "reduction"),
        (dict(lr=0.1), TypeError, "lr"),
        (dict(decay=0.1), TypeError, "decay"),
        (dict(accum_steps=0), ValueError, "accum_steps"),
        (dict(optimizer=object()), TypeError, "optimizer"),
    ],
)
def test_optimizer_bad_arguments_name_the_argument(kwargs, error, named):
    with pytest.raises(error, match=named):
        GradientAccumulateOptimizer(**kwargs)


def test_optimizer_clipping_keyword_conflicting_with_the_wrapped_optimizer():
    with pytest.raises(ValueError, match="clipnorm"):
        GradientAccumulateOptimizer(keras.optimizers.SGD(clipnorm=1.0), 2, clipnorm=2.0)


# ---------------------------------------------------------------- AccumBatchNormalization
def test_batchnorm_signature_and_window_statistics_equal_one_big_batch_update():
    layer = AccumBatchNormalization(K, 0.5, 1e-2, True, name="bn")
    assert (layer.accum_steps, layer.momentum, layer.epsilon, layer.trainable) == (
        K,
        0.5,
        1e-2,
        True,
    )
    rng = np.random.default_rng(0)
    # Micro-batch means far apart: the between-micro-batch variance is most of the variance.
    x = (rng.normal(size=(MICRO * K, 3)) + np.repeat(np.arange(K) * 3.0, MICRO)[:, None]).astype(
        "float32"
    )
    inputs = keras.Input((3,))
    model = GradientAccumulateModel(
        accum_steps=K, inputs=inputs, outputs=keras.layers.Dense(1)(layer(inputs))
    )
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
    model.fit(
        x, np.zeros((len(x), 1), "float32"), batch_size=MICRO, epochs=1, shuffle=False, verbose=0
    )
    reference = keras.layers.BatchNormalization(momentum=0.5, epsilon=1e-2)
    reference(tf.constant(x), training=True)  # one Keras update on the whole window
    np.testing.assert_allclose(layer.moving_mean.numpy(), reference.moving_mean.numpy(), rtol=1e-5)
    np.testing.assert_allclose(
        layer.moving_variance.numpy(), reference.moving_variance.numpy(), rtol=1e-5
    )
    # The package's rule (mean of micro-batch variances) would be far off here.
    packages_variance = np.mean([np.var(w, axis=0) for w in np.split(x, K)], axis=0)
    assert np.all(np.var(x, axis=0) > 5 * packages_variance)


def test_batchnorm_config_keeps_accum_steps_and_the_compat_class():
    layer = AccumBatchNormalization(accum_steps=3, momentum=0.9, name="bn")
    config = layer.get_config()
    assert (config["accum_steps"], config["momentum"]) == (3, 0.9)
    assert AccumBatchNormalization.from_config(config).get_config() == config
    again = keras.layers.deserialize(keras.layers.serialize(layer))
    assert type(again) is AccumBatchNormalization
    assert (again.accum_steps, again.momentum) == (3, 0.9)


# ---------------------------------------------------------------- replace_batchnorm_layers
def test_replace_batchnorm_layers_carries_weights_and_statistics_over():
    keras.utils.set_random_seed(3)
    inputs = keras.Input((4,))
    bn = keras.layers.BatchNormalization(name="bn")
    model = keras.Model(inputs, keras.layers.Dense(2)(bn(inputs)))
    bn.set_weights([np.full(4, v, "float32") for v in (1.5, 0.2, -0.7, 2.5)])  # "pretrained"
    replaced = replace_batchnorm_layers(model, accum_steps=K)
    new_bn = replaced.get_layer("bn")
    assert type(new_bn) is AccumBatchNormalization and new_bn.accum_steps == K
    assert max_weight_diff(model, replaced) == 0.0
    x = np.random.default_rng(0).normal(size=(5, 4)).astype("float32")
    np.testing.assert_array_equal(model(x, training=False), replaced(x, training=False))


def test_replace_batchnorm_layers_position_other_than_replace_is_an_error():
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.BatchNormalization()(inputs))
    with pytest.raises(ValueError, match="position"):
        replace_batchnorm_layers(model, 2, position="after")


# ---------------------------------------------------------------- AGC functions
def test_compute_norm_matches_numpy():
    x = np.random.default_rng(1).normal(size=(3, 4, 5)).astype("float32")
    for axis, keepdims in [(None, False), (0, True), ((0, 1), False), ([0, 1, 2], True)]:
        numpy_axis = tuple(axis) if isinstance(axis, list) else axis  # the package takes lists
        expected = np.sqrt(np.sum(x.astype(np.float64) ** 2, axis=numpy_axis, keepdims=keepdims))
        np.testing.assert_allclose(
            compute_norm(tf.constant(x), axis, keepdims), expected, rtol=1e-6
        )


@pytest.mark.parametrize("rank", range(7))
def test_unitwise_norm_every_rank(rank):
    shape = tuple(range(2, 2 + rank))
    x = np.random.default_rng(rank).normal(size=shape).astype("float32")
    if rank > 5:
        with pytest.raises(ValueError, match="rank"):
            unitwise_norm(tf.constant(x))
        return
    axes = None if rank <= 1 else tuple(range(rank - 1))  # all axes but the output units
    expected = np.sqrt(np.sum(x.astype(np.float64) ** 2, axis=axes, keepdims=axes is not None))
    np.testing.assert_allclose(unitwise_norm(tf.constant(x)), expected, rtol=1e-6)


def test_adaptive_clip_grad_matches_numpy_and_keeps_none():
    rng = np.random.default_rng(2)
    kernel = rng.normal(size=(5, 7)).astype("float32")
    bias = rng.normal(size=(7,)).astype("float32")
    grads = [
        (rng.normal(size=s) * rng.choice([0.001, 1.0], size=s)).astype("float32")
        for s in [(5, 7), (7,)]
    ]
    clipped = adaptive_clip_grad(
        [tf.Variable(kernel), tf.Variable(bias), tf.Variable(bias)], grads + [None], 0.05, 1e-3
    )
    np.testing.assert_allclose(
        clipped[0], _numpy_agc(grads[0], kernel, 0.05, 1e-3, (0,)), rtol=1e-5
    )
    np.testing.assert_allclose(clipped[1], _numpy_agc(grads[1], bias, 0.05, 1e-3, None), rtol=1e-5)
    assert clipped[2] is None
    assert not np.allclose(clipped[0], grads[0])  # the case clips something
    defaults = adaptive_clip_grad([kernel], [grads[0]])  # clip_factor=0.01, eps=1e-3
    np.testing.assert_allclose(
        defaults[0], _numpy_agc(grads[0], kernel, 0.01, 1e-3, (0,)), rtol=1e-5
    )


# ---------------------------------------------------------------- the module and main names
def test_module_exposes_the_packages_names_and_submodules():
    for name in [
        "GradientAccumulateModel",
        "GradientAccumulateOptimizer",
        "AccumBatchNormalization",
        "adaptive_clip_grad",
        "unitwise_norm",
        "compute_norm",
    ]:
        assert getattr(gradient_accumulator, name) is not None
    from ga_tfx.compat.gradient_accumulator import accumulators, agc, layers, utils

    assert accumulators.GradientAccumulateModel is GradientAccumulateModel
    assert layers.AccumBatchNormalization is AccumBatchNormalization
    assert agc.adaptive_clip_grad is adaptive_clip_grad
    assert utils.replace_batchnorm_layers is replace_batchnorm_layers


@pytest.mark.parametrize(
    "argument, names",
    [
        (dict(agc=True), "agc_clip_factor"),
        (dict(use_agc=True), "agc_clip_factor"),
        (dict(clip_factor=0.1), "agc_clip_factor"),
        (dict(eps=0.1), "agc_eps"),
        (dict(mixed_precision=True), "set_global_policy"),
        (dict(experimental_distributed_support=True), "tf.distribute"),
    ],
)
def test_main_names_reject_package_arguments_naming_the_ga_tfx_way(argument, names):
    base = mlp()
    for make in [
        lambda: ga_tfx.GradientAccumulateModel(
            accum_steps=K, inputs=base.input, outputs=base.output, **argument
        ),
        lambda: ga_tfx.wrap_model(base, K, **argument),
    ]:
        with pytest.raises(TypeError, match=names) as raised:
            make()
        assert "ga_tfx.compat.gradient_accumulator" in str(raised.value)
