"""AccumBatchNormalization and replace_batchnorm_layers, checked at the level of statistics.

The reference for the moving statistics is always a plain ``keras.layers.BatchNormalization``
making one update per window on the concatenated window (same momentum and initial values).
``ga_tfx.AccumBatchNormalization`` carries no K (a front-end ends its windows; undriven it is
Keras' layer); the self-counting mode, windows of K training calls of its own, is
``ga_tfx.compat.gradient_accumulator.layers.AccumBatchNormalization`` (``OwnWindowsBN`` here).
"""

import ga_tfx  # noqa: I001  (first import: selects Keras 2)

import contextlib
import inspect
import warnings

import numpy as np
import pytest

from ga_tfx._keras import keras, tf
from ga_tfx.compat.gradient_accumulator.layers import AccumBatchNormalization as OwnWindowsBN
from ga_tfx.compat.gradient_accumulator.utils import (
    replace_batchnorm_layers as replace_with_own_windows,
)

EXACT = 1e-7  # an undriven layer (or one counting windows of 1) is Keras itself
TOLERANCE = 1e-5  # the contract for window statistics (relative to max(1, |value|))
OUTPUT_TOLERANCE = 1e-6  # replace_batchnorm_layers keeps inference outputs

# (input shape without the batch axis, axis): rank 2 and rank 4 (fused), channels last/first.
LAYOUTS = {
    "rank2_last": ((3,), -1),
    "rank2_first": ((3,), 1),
    "rank4_last": ((2, 2, 3), -1),
    "rank4_first": ((3, 2, 2), 1),
}


def _data(n, shape, seed=0, offset_step=0.0, micro=None):
    """``n`` samples; with ``offset_step``, micro-batch ``i`` (of ``micro``) is shifted by
    ``offset_step * i`` (micro-batch means far apart)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n,) + shape).astype("float32")
    if offset_step:
        shifts = offset_step * (np.arange(n) // micro)
        x += shifts.reshape((n,) + (1,) * len(shape)).astype("float32")
    return x


def _rel_err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(b)))))


def _keras_window_updates(windows, axis=-1, momentum=0.5):
    """Moving statistics of a Keras BN updated once per window (list of arrays)."""
    ref = keras.layers.BatchNormalization(axis=axis, momentum=momentum)
    for window in windows:
        ref(tf.constant(window), training=True)
    return ref.moving_mean.numpy(), ref.moving_variance.numpy()


def _accum_bn(own_steps, **kwargs):
    """``ga_tfx.AccumBatchNormalization`` (``own_steps=None``: no K of its own) or the compat
    layer counting its own windows of ``own_steps`` training calls."""
    if own_steps is None:
        return ga_tfx.AccumBatchNormalization(**kwargs)
    return OwnWindowsBN(accum_steps=own_steps, **kwargs)


def _bn_model(shape, own_steps, axis=-1, momentum=0.5, seed=0):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input(shape, name="x")
    h = _accum_bn(own_steps, axis=axis, momentum=momentum, name="bn")(inputs)
    outputs = keras.layers.Dense(1, name="head")(keras.layers.Flatten()(h))
    return keras.Model(inputs, outputs, name="bn_model")


def _fit_engine(model, x, micro, accum_steps, partial_window="apply", strategy=None):
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        acc = ga_tfx.wrap_model(model, accum_steps=accum_steps, partial_window=partial_window)
        acc.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    y = np.zeros((len(x), 1), "float32")
    acc.fit(x, y, batch_size=micro, epochs=1, shuffle=False, verbose=0)
    return acc


def _randomize_batchnorm(model, seed=0):
    """Non-trivial gamma, beta and moving statistics in every BN layer of ``model``."""
    rng = np.random.default_rng(seed)
    count = 0
    for layer in model._flatten_layers(include_self=False):
        if isinstance(layer, keras.layers.BatchNormalization):
            shapes = [w.shape for w in layer.get_weights()]
            layer.set_weights(
                [
                    rng.uniform(0.8, 1.2, shapes[0]).astype("float32"),  # gamma
                    rng.normal(0, 0.1, shapes[1]).astype("float32"),  # beta
                    rng.normal(0, 0.1, shapes[2]).astype("float32"),  # moving mean
                    rng.uniform(0.5, 1.5, shapes[3]).astype("float32"),  # moving variance
                ]
            )
            count += 1
    return count


def _batchnorm_layers(model):
    return [
        layer
        for layer in model._flatten_layers(include_self=False)
        if isinstance(layer, keras.layers.BatchNormalization)
    ]


def _max_diff(a, b):
    return max(
        float(np.max(np.abs(np.asarray(u) - np.asarray(v))))
        for u, v in zip(tf.nest.flatten(a), tf.nest.flatten(b))
    )


# --------------------------------------------------------------------------- the layer alone
@pytest.mark.parametrize("own_steps", [None, 1], ids=["no_k", "own_windows_of_1"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_undriven_is_keras_batchnorm(layout, own_steps):
    shape, axis = LAYOUTS[layout]
    keras_bn = keras.layers.BatchNormalization(axis=axis, momentum=0.8)
    accum_bn = _accum_bn(own_steps, axis=axis, momentum=0.8)
    for step in range(4):
        x = tf.constant(_data(6, shape, seed=step) * (step + 1) + step)
        assert _max_diff(keras_bn(x, training=True), accum_bn(x, training=True)) <= EXACT
    assert _max_diff(keras_bn.get_weights(), accum_bn.get_weights()) <= EXACT
    assert float(np.max(np.abs(accum_bn.moving_mean.numpy()))) > 0.5  # statistics moved
    x = tf.constant(_data(5, shape, seed=9))
    assert _max_diff(keras_bn(x, training=False), accum_bn(x, training=False)) <= EXACT


def test_signature_is_keras_batchnorms_axis_first():
    """A drop-in replacement: the named parameters are Keras BatchNormalization's first ones,
    in its order and with its defaults (``AccumBatchNormalization(1)`` is ``axis=1``)."""
    ours = list(inspect.signature(ga_tfx.AccumBatchNormalization).parameters.values())
    theirs = list(inspect.signature(keras.layers.BatchNormalization).parameters.values())
    assert ours[-1].kind is inspect.Parameter.VAR_KEYWORD
    named = [(p.name, p.default) for p in ours[:-1]]
    assert named[0] == ("axis", -1) and "accum_steps" not in dict(named)
    assert named == [(p.name, p.default) for p in theirs[: len(named)]]
    assert ga_tfx.AccumBatchNormalization(1, 0.5).axis == keras.layers.BatchNormalization(1).axis


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_compat_own_windows_update_once_per_window_with_window_statistics(layout):
    shape, axis = LAYOUTS[layout]
    k, micro = 3, 4
    x = _data(2 * k * micro, shape, offset_step=100.0, micro=micro)
    batches = np.split(x, 2 * k)
    keras_bn = keras.layers.BatchNormalization(axis=axis, momentum=0.5)
    layer = OwnWindowsBN(k, axis=axis, momentum=0.5)
    for i, batch in enumerate(batches):
        # Ghost batch norm: each micro-batch is normalised with its own statistics, as Keras.
        out = layer(tf.constant(batch), training=True)
        assert _max_diff(out, keras_bn(tf.constant(batch), training=True)) <= EXACT
        if i < k - 1:  # no update before the window is complete
            np.testing.assert_array_equal(layer.moving_mean.numpy(), np.zeros(3, "float32"))
    mean, var = _keras_window_updates(
        [np.concatenate(batches[:k]), np.concatenate(batches[k:])], axis
    )
    assert _rel_err(layer.moving_mean.numpy(), mean) <= TOLERANCE
    assert _rel_err(layer.moving_variance.numpy(), var) <= TOLERANCE
    assert int(layer.window_moments.micro_steps.numpy()) == 0


def test_compat_own_windows_in_plain_keras_fit():
    k, micro = 2, 4
    x = _data(4 * micro, (3,), offset_step=50.0, micro=micro)
    model = _bn_model((3,), k)
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
    model.fit(x, np.zeros((len(x), 1), "float32"), batch_size=micro, shuffle=False, verbose=0)
    mean, var = _keras_window_updates([x[:8], x[8:]])
    bn = model.get_layer("bn")
    assert _rel_err(bn.moving_mean.numpy(), mean) <= TOLERANCE
    assert _rel_err(bn.moving_variance.numpy(), var) <= TOLERANCE


def test_trainable_false_is_inference_mode_and_accumulates_nothing():
    x = tf.constant(_data(6, (3,)) * 3 + 2)
    layer = OwnWindowsBN(2, momentum=0.5)
    layer.build(x.shape)
    layer.trainable = False
    for _ in range(2):
        out = layer(x, training=True)
    assert _max_diff(out, layer(x, training=False)) <= EXACT
    np.testing.assert_array_equal(layer.moving_mean.numpy(), np.zeros(3, "float32"))
    np.testing.assert_array_equal(layer.window_moments.count.numpy(), np.zeros(3, "float32"))


def test_masked_micro_batches_count_only_unmasked_steps():
    x = _data(4, (5, 3), seed=1) + 10.0
    mask = np.array([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 1, 0, 0]], bool)
    layer = OwnWindowsBN(2, momentum=0.0)
    layer(tf.constant(x[:2]), training=True, mask=tf.constant(mask[:2]))
    layer(tf.constant(x[2:]), training=True, mask=tf.constant(mask[2:]))
    kept = x[mask].astype(np.float64)  # (kept steps, 3)
    assert _rel_err(layer.moving_mean.numpy(), kept.mean(0)) <= TOLERANCE
    assert _rel_err(layer.moving_variance.numpy(), kept.var(0)) <= TOLERANCE


# --------------------------------------------------------------------------- with the engine
@pytest.mark.parametrize("layout", ["rank2_last", "rank4_first"])
def test_engine_window_statistics_equal_one_keras_update_per_window(layout):
    shape, axis = LAYOUTS[layout]
    k, micro = 3, 4
    x = _data(2 * k * micro, shape, offset_step=100.0, micro=micro)
    acc = _fit_engine(_bn_model(shape, None, axis), x, micro, k)
    bn = acc.get_layer("bn")
    mean, var = _keras_window_updates([x[: k * micro], x[k * micro :]], axis)
    assert _rel_err(bn.moving_mean.numpy(), mean) <= TOLERANCE
    assert _rel_err(bn.moving_variance.numpy(), var) <= TOLERANCE
    # The between-micro-batch variance is in: averaging micro-batch variances is far off.
    chan = 1 if axis == 1 else -1
    per_batch = [np.moveaxis(b, chan, -1).reshape(-1, 3).var(0) for b in np.split(x, 2 * k)]
    naive = 0.25 * np.mean(per_batch[:k], 0) + 0.5 * np.mean(per_batch[k:], 0) + 0.25
    assert np.min(np.abs(bn.moving_variance.numpy() - naive)) > 100.0
    # Inference uses the moving statistics.
    gamma, beta, moving_mean, moving_var = bn.get_weights()
    bshape = [1] * (len(shape) + 1)
    bshape[axis] = 3
    expected_h = (x - moving_mean.reshape(bshape)) / np.sqrt(moving_var.reshape(bshape) + 1e-3)
    expected_h = expected_h * gamma.reshape(bshape) + beta.reshape(bshape)
    kernel, bias = acc.get_layer("head").get_weights()
    expected = expected_h.reshape(len(x), -1) @ kernel + bias
    predicted = acc.predict(x, verbose=0)
    assert _max_diff(predicted, expected) <= TOLERANCE * max(1.0, float(np.abs(expected).max()))
    assert int(bn.window_moments.micro_steps.numpy()) == 0


def test_engine_uneven_micro_batches_are_weighted_by_size_and_model_window_wins():
    k, micro = 3, 4
    x = _data(10, (3,), offset_step=100.0, micro=micro)  # micro-batches of 4, 4, 2
    model = _bn_model((3,), None)  # no K of its own: the model's windows (K=3), no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        acc = _fit_engine(model, x, micro, k)
    bn = acc.get_layer("bn")
    mean, var = _keras_window_updates([x])
    assert _rel_err(bn.moving_mean.numpy(), mean) <= TOLERANCE
    assert _rel_err(bn.moving_variance.numpy(), var) <= TOLERANCE
    unweighted = 0.5 * np.mean([b.mean(0) for b in (x[:4], x[4:8], x[8:])], 0)
    assert np.min(np.abs(bn.moving_mean.numpy() - unweighted)) > 5.0


def test_engine_drop_discards_the_short_window():
    k, micro = 2, 4
    x = _data(10, (3,), offset_step=100.0, micro=micro)  # windows [4, 4] and [2]
    acc = _fit_engine(_bn_model((3,), None), x, micro, k, partial_window="drop")
    bn = acc.get_layer("bn")
    mean, var = _keras_window_updates([x[:8]])
    assert _rel_err(bn.moving_mean.numpy(), mean) <= TOLERANCE
    assert _rel_err(bn.moving_variance.numpy(), var) <= TOLERANCE
    np.testing.assert_array_equal(bn.window_moments.count.numpy(), np.zeros(3, "float32"))


def _custom_loop(model, opt, x, micro, epochs):
    """The optimizer wrapper in a custom loop: one apply_gradients per micro-batch, and
    opt.flush() at each epoch's end (its last window is partial)."""

    @tf.function
    def step(xb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xb, training=True)))
        opt.apply_gradients(
            zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        )

    for _ in range(epochs):
        for i in range(0, len(x), micro):
            step(tf.constant(x[i : i + micro]))
        opt.flush()


@pytest.mark.parametrize("attached", [True, False], ids=["window_layers", "found"])
def test_the_optimizer_wrapper_ends_accum_batchnorm_windows_flush_included(attached):
    """K=4, micro-batches of 4, 10 per epoch (windows of 4, 4 and a partial 2 that flush()
    applies), two epochs: the moving statistics are those of one Keras BatchNormalization
    update per window, partial windows included (6 updates), whether the model is given as
    ``window_layers`` or the wrapper finds the layer by its variables (issue 45; before, the
    layer counted its own calls and ran into the next epoch)."""
    k, micro = 4, 4
    x = _data(10 * micro, (3,), offset_step=10.0, micro=micro)
    model = _bn_model((3,), None)
    opt = ga_tfx.GradientAccumulateOptimizer(
        keras.optimizers.SGD(0.0), k, window_layers=model if attached else None
    )
    _custom_loop(model, opt, x, micro, epochs=2)
    bn = model.get_layer("bn")
    windows = [x[: 4 * micro], x[4 * micro : 8 * micro], x[8 * micro :]] * 2
    mean, var = _keras_window_updates(windows)
    assert _rel_err(bn.moving_mean.numpy(), mean) <= TOLERANCE
    assert _rel_err(bn.moving_variance.numpy(), var) <= TOLERANCE
    assert int(bn.window_moments.micro_steps.numpy()) == 0  # nothing left pending


def _dense_bn_relu_dense(own_steps=None, **bn_options):
    keras.utils.set_random_seed(3)
    return keras.Sequential(
        [
            keras.Input((5,)),
            keras.layers.Dense(4, name="dense"),
            _accum_bn(own_steps, momentum=0.5, name="bn", **bn_options),
            keras.layers.ReLU(),
            keras.layers.Dense(1, name="head"),
        ]
    )


def _issue_45_loop(model, opt, x, strategy=None, traced=True):
    """The case of issue 45: a plain custom loop, one apply_gradients per micro-batch of 8
    (split over the replicas), opt.flush() at each epoch's end, two epochs."""
    micro = 8

    def step(xb):
        with tf.GradientTape() as tape:
            out = model(xb, training=True)
            loss = tf.nn.compute_average_loss(
                tf.reduce_sum(tf.square(out), -1), global_batch_size=micro
            )
        opt.apply_gradients(
            zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        )

    step = tf.function(step) if traced else step
    for _ in range(2):
        for i in range(0, len(x), micro):
            xb = x[i : i + micro]
            if strategy is None:
                step(tf.constant(xb))
                continue
            per_replica = strategy.experimental_distribute_values_from_function(
                lambda ctx, xb=xb, n=micro // strategy.num_replicas_in_sync: tf.constant(
                    xb[ctx.replica_id_in_sync_group * n :][:n]
                )
            )
            strategy.run(step, args=(per_replica,))
        if strategy is None:
            opt.flush()
        else:
            strategy.run(opt.flush)


def _big_batch_statistics(model, x):
    """Keras BatchNormalization updated once per window of 4 micro-batches of 8 (136 rows:
    four windows of 32 and a flushed one of 8 per epoch), two epochs, on the Dense output."""
    dense = model.get_layer("dense")
    h = x @ dense.kernel.numpy() + dense.bias.numpy()
    windows = [h[i : i + 32] for i in range(0, 128, 32)] + [h[128:]]
    return _keras_window_updates(windows * 2)


@pytest.mark.parametrize("replicas", [1, 2])
def test_optimizer_wrapper_finds_accum_batchnorm_without_window_layers(replicas, strategy):
    """Issue 45's case without ``window_layers``: the moving statistics are big-batch
    BatchNormalization's, on one device and on two replicas."""
    x = _data(136, (5,), offset_step=0.5, micro=8)
    with strategy.scope() if replicas == 2 else contextlib.nullcontext():
        model = _dense_bn_relu_dense()
        opt = ga_tfx.GradientAccumulateOptimizer(keras.optimizers.SGD(0.0), accum_steps=4)
    _issue_45_loop(model, opt, x, strategy if replicas == 2 else None)
    mean, var = _big_batch_statistics(model, x)
    bn = model.get_layer("bn")
    means = bn.moving_mean.values if replicas == 2 else [bn.moving_mean]
    variances = bn.moving_variance.values if replicas == 2 else [bn.moving_variance]
    for replica_mean, replica_var in zip(means, variances):
        assert _rel_err(replica_mean.numpy(), mean) <= TOLERANCE
        assert _rel_err(replica_var.numpy(), var) <= TOLERANCE


@pytest.mark.parametrize("options", [{"scale": False}, {"center": False}], ids=["beta", "gamma"])
def test_optimizer_wrapper_finds_accum_batchnorm_with_one_trainable_weight(options):
    """A layer with only ``beta`` (``scale=False``) or only ``gamma`` (``center=False``) among
    the variables the wrapper updates is found as one with both: its moving statistics are
    big-batch BatchNormalization's (issue 53: a search for layers with two such weights left
    it on Keras' per-call update, relative error 0.13)."""
    x = _data(136, (5,), offset_step=0.5, micro=8)
    model = _dense_bn_relu_dense(**options)
    bn = model.get_layer("bn")
    assert len(bn.trainable_weights) == 1, bn.trainable_weights
    opt = ga_tfx.GradientAccumulateOptimizer(keras.optimizers.SGD(0.0), accum_steps=4)
    _issue_45_loop(model, opt, x)
    mean, var = _big_batch_statistics(model, x)
    assert _rel_err(bn.moving_mean.numpy(), mean) <= TOLERANCE
    assert _rel_err(bn.moving_variance.numpy(), var) <= TOLERANCE


@pytest.mark.parametrize("attached", [True, False], ids=["window_layers", "not_given"])
def test_accum_batchnorm_without_trainable_weights_needs_window_layers(attached):
    """``center=False, scale=False``: no variable of the layer reaches the wrapper, which
    cannot find it. Given as ``window_layers`` its moving statistics are big-batch
    BatchNormalization's; not given, the wrapper's first update refuses naming
    ``window_layers`` (issue 53: it trained on Keras' per-call clock, relative error 0.13)."""
    x = _data(136, (5,), offset_step=0.5, micro=8)
    model = _dense_bn_relu_dense(center=False, scale=False)
    assert model.get_layer("bn").trainable_weights == []
    opt = ga_tfx.GradientAccumulateOptimizer(
        keras.optimizers.SGD(0.0), accum_steps=4, window_layers=model if attached else None
    )
    if not attached:
        with pytest.raises(RuntimeError, match=r"'bn' has no trainable weights.*window_layers="):
            _issue_45_loop(model, opt, x)
        return
    _issue_45_loop(model, opt, x)
    mean, var = _big_batch_statistics(model, x)
    bn = model.get_layer("bn")
    assert _rel_err(bn.moving_mean.numpy(), mean) <= TOLERANCE
    assert _rel_err(bn.moving_variance.numpy(), var) <= TOLERANCE


def test_optimizer_wrapper_finds_accum_batchnorm_in_an_eager_loop():
    """Eagerly, the layer's first micro-batch ran before the wrapper found it; the compat
    layer counting its own windows accumulated it on one replica: it is the start of the
    wrapper's first window, still exact. (A layer without windows of its own updated the
    moving statistics with it: refused, below.)"""
    x = _data(136, (5,), offset_step=0.5, micro=8)
    model = _dense_bn_relu_dense(4)
    opt = ga_tfx.GradientAccumulateOptimizer(keras.optimizers.SGD(0.0), accum_steps=4)
    _issue_45_loop(model, opt, x, traced=False)
    mean, var = _big_batch_statistics(model, x)
    bn = model.get_layer("bn")
    assert _rel_err(bn.moving_mean.numpy(), mean) <= TOLERANCE
    assert _rel_err(bn.moving_variance.numpy(), var) <= TOLERANCE


@pytest.mark.parametrize(
    "replicas, own_steps", [(1, None), (2, None), (2, 4)], ids=["1-no_k", "2-no_k", "2-own_4"]
)
def test_an_eager_first_call_that_cannot_be_a_window_start_is_refused(
    replicas, own_steps, strategy
):
    """AccumBatchNormalization is Keras' layer until the wrapper finds it: its eager first
    call already updated the moving statistics; the compat layer counting its own windows, on
    two replicas, made the first call's statistics global on each replica. Either: an error
    naming ``window_layers`` at the wrapper's first update, not wrong statistics."""
    x = _data(136, (5,), offset_step=0.5, micro=8)
    with strategy.scope() if replicas == 2 else contextlib.nullcontext():
        model = _dense_bn_relu_dense(own_steps)
        opt = ga_tfx.GradientAccumulateOptimizer(keras.optimizers.SGD(0.0), accum_steps=4)
    with pytest.raises(RuntimeError, match=r"'bn'.*window_layers=model"):
        _issue_45_loop(model, opt, x, strategy if replicas == 2 else None, traced=False)


@pytest.mark.parametrize("own_steps", [None, 4], ids=["no_k", "own_4"])
def test_a_step_traced_before_the_wrapper_found_the_layer_refuses_to_run(own_steps):
    """A forward traced in its own tf.function before the wrapper's first update (gradients
    computed in one function, applied outside it) keeps the layer's own clock (Keras'
    per-call update, or the compat layer's own windows): once the wrapper found the layer,
    running it again is an error naming ``window_layers``."""
    x = _data(16, (5,), micro=8)
    model = _dense_bn_relu_dense(own_steps)
    opt = ga_tfx.GradientAccumulateOptimizer(keras.optimizers.SGD(0.0), accum_steps=4)

    @tf.function
    def gradients(xb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xb, training=True)))
        return tape.gradient(loss, model.trainable_variables)

    def step(xb):
        opt.apply_gradients(zip(gradients(tf.constant(xb)), model.trainable_variables))

    step(x[:8])  # traced on the layer's own clock, then the wrapper finds the layer
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"bn.*window_layers=model"):
        step(x[8:])


def test_window_layers_must_be_layers():
    with pytest.raises(TypeError, match=r"window_layers must be the Keras model being trained"):
        ga_tfx.GradientAccumulateOptimizer(keras.optimizers.SGD(0.1), 2, window_layers=["bn"])


@pytest.fixture(scope="module")
def strategy():
    """One MirroredStrategy (2 replicas) for this module, with its own collective key range.

    Two MirroredStrategy objects in one process start their collective keys at the same value,
    so a second strategy's in-replica all-reduce can be matched with the first one's (``Shape
    mismatch in the collective instance``). TensorFlow's own tests avoid it the same way.
    """
    cls = tf.distribute.MirroredStrategy
    base = cls._collective_key_base
    cls._collective_key_base = base + 1_000_000
    try:
        strategy = cls(["/cpu:0", "/cpu:1"])
    finally:
        cls._collective_key_base = base
    assert strategy.num_replicas_in_sync == 2
    return strategy


def test_mirrored_strategy_two_replicas_equals_single_device(strategy):
    k, micro = 2, 4
    x = _data(2 * k * micro, (3,), offset_step=100.0, micro=micro)
    x[np.arange(len(x)) % micro < micro // 2] += 30.0  # the two replicas' halves differ too
    with strategy.scope():
        model = _bn_model((3,), None)  # alone it would update per micro-batch (plain Keras)
    acc = _fit_engine(model, x, micro, k, strategy=strategy)
    bn = acc.get_layer("bn")
    mean, var = _keras_window_updates([x[: k * micro], x[k * micro :]])
    for replica_mean, replica_var in zip(bn.moving_mean.values, bn.moving_variance.values):
        assert _rel_err(replica_mean.numpy(), mean) <= TOLERANCE
        assert _rel_err(replica_var.numpy(), var) <= TOLERANCE
    assert _rel_err(bn.moving_variance.numpy(), var) <= TOLERANCE


def test_mirrored_strategy_compat_own_windows_keras_fit_equals_single_device(strategy):
    k, micro = 2, 4
    x = _data(2 * k * micro, (3,), offset_step=100.0, micro=micro)
    x[np.arange(len(x)) % micro < micro // 2] += 30.0
    with strategy.scope():
        model = _bn_model((3,), k)
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    model.fit(x, np.zeros((len(x), 1), "float32"), batch_size=micro, shuffle=False, verbose=0)
    bn = model.get_layer("bn")
    mean, var = _keras_window_updates([x[: k * micro], x[k * micro :]])
    for replica_mean, replica_var in zip(bn.moving_mean.values, bn.moving_variance.values):
        assert _rel_err(replica_mean.numpy(), mean) <= TOLERANCE
        assert _rel_err(replica_var.numpy(), var) <= TOLERANCE


# --------------------------------------------------------------------------- state and saving
def test_buffers_are_not_weights_but_are_checkpointed_mid_window(tmp_path):
    k = 3
    batches = np.split(_data(12, (3,), offset_step=20.0, micro=4), 3)
    model = _bn_model((3,), k)
    bn = model.get_layer("bn")
    assert len(model.get_weights()) == 6  # gamma, beta, moving mean/variance, kernel, bias
    assert [w.name.split("/")[-1] for w in bn.weights] == [
        "gamma:0",
        "beta:0",
        "moving_mean:0",
        "moving_variance:0",
    ]
    assert not any("window_moments" in v.name for v in model.variables)

    model(batches[0], training=True)
    path = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))
    for batch in batches[1:]:
        model(batch, training=True)
    uninterrupted = bn.get_weights()
    assert float(np.max(np.abs(uninterrupted[2]))) > 1.0  # the window was applied

    restored = _bn_model((3,), k, seed=1)
    tf.train.Checkpoint(model=restored).restore(path).assert_consumed()
    assert int(restored.get_layer("bn").window_moments.micro_steps.numpy()) == 1
    for batch in batches[1:]:
        restored(batch, training=True)
    assert _max_diff(restored.get_layer("bn").get_weights(), uninterrupted) <= EXACT


def test_get_config_round_trip_carries_no_k():
    layer = ga_tfx.AccumBatchNormalization(
        axis=1,
        momentum=0.9,
        epsilon=1e-4,
        center=False,
        gamma_regularizer=keras.regularizers.l2(1e-3),
        moving_variance_initializer="zeros",
        name="abn",
    )
    config = layer.get_config()
    assert "accum_steps" not in config
    assert config["momentum"] == 0.9 and config["axis"] == 1
    clone = ga_tfx.AccumBatchNormalization.from_config(config)
    assert type(clone) is ga_tfx.AccumBatchNormalization
    assert clone.get_config() == config
    revived = keras.layers.deserialize(keras.layers.serialize(layer))
    assert isinstance(revived, ga_tfx.AccumBatchNormalization)
    assert revived.get_config() == config


@pytest.mark.parametrize("own_steps", [None, 2], ids=["no_k", "own_2"])
def test_savedmodel_export_same_inference_outputs_and_inputs(tmp_path, own_steps):
    model = _bn_model((3,), own_steps)
    _randomize_batchnorm(model)
    x = _data(5, (3,), seed=3)
    expected = model(x, training=False).numpy()

    tf.saved_model.save(model, str(tmp_path / "tf"))
    loaded = tf.saved_model.load(str(tmp_path / "tf"))
    serving = loaded.signatures["serving_default"]
    args, kwargs = serving.structured_input_signature
    assert not args and list(kwargs) == ["x"]
    outputs = serving(x=tf.constant(x))
    assert _max_diff(list(outputs.values())[0], expected) <= EXACT

    model.save(str(tmp_path / "keras"))
    revived = keras.models.load_model(str(tmp_path / "keras"))
    bn = revived.get_layer("bn")
    assert type(bn) is (ga_tfx.AccumBatchNormalization if own_steps is None else OwnWindowsBN)
    assert bn.get_config().get("accum_steps") == own_steps
    assert _max_diff(revived(x, training=False), expected) <= EXACT


# --------------------------------------------------------------------------- replace_batchnorm
def _functional_with_bn():
    keras.utils.set_random_seed(3)
    inputs = keras.Input((4, 4, 2), name="image")
    h = keras.layers.Conv2D(3, 3, padding="same", name="conv")(inputs)
    h = keras.layers.BatchNormalization(name="bn_conv")(h)
    h = keras.layers.Flatten()(h)
    h = keras.layers.Dense(5, name="dense")(h)
    h = keras.layers.BatchNormalization(momentum=0.9, epsilon=1e-2, name="bn_dense")(h)
    return keras.Model(inputs, keras.layers.Dense(2, name="out")(h), name="func")


def _assert_replaced(original, replaced, x, n_bn):
    new_bns = _batchnorm_layers(replaced)
    assert len(new_bns) == n_bn == len(_batchnorm_layers(original))
    assert all(type(layer) is ga_tfx.AccumBatchNormalization for layer in new_bns)
    assert not any("accum_steps" in layer.get_config() for layer in new_bns)
    assert not any(
        isinstance(layer, ga_tfx.AccumBatchNormalization) for layer in _batchnorm_layers(original)
    )
    assert _max_diff(replaced.get_weights(), original.get_weights()) == 0.0
    assert _max_diff(replaced(x, training=False), original(x, training=False)) <= OUTPUT_TOLERANCE
    original_ids = {id(v) for v in original.variables}
    assert not any(id(v) in original_ids for v in replaced.variables)


def test_replace_functional_keeps_weights_statistics_and_outputs():
    model = _functional_with_bn()
    assert _randomize_batchnorm(model) == 2
    before = [w.copy() for w in model.get_weights()]
    x = _data(3, (4, 4, 2), seed=4)
    replaced = ga_tfx.replace_batchnorm_layers(model)
    _assert_replaced(model, replaced, x, 2)
    assert replaced.get_layer("bn_dense").momentum == 0.9
    assert replaced.get_layer("bn_dense").epsilon == 1e-2
    assert _max_diff(model.get_weights(), before) == 0.0  # the original is unmodified
    assert type(model.get_layer("bn_conv")) is keras.layers.BatchNormalization


def test_replace_nested_mobilenet_v2():
    keras.utils.set_random_seed(5)
    backbone = keras.applications.MobileNetV2(
        weights=None, input_shape=(32, 32, 3), alpha=0.35, include_top=False
    )
    inputs = keras.Input((32, 32, 3), name="image")
    h = keras.layers.GlobalAveragePooling2D()(backbone(inputs))
    model = keras.Model(inputs, keras.layers.Dense(3, name="logits")(h), name="classifier")
    n_bn = _randomize_batchnorm(model, seed=1)
    assert n_bn > 30
    x = _data(2, (32, 32, 3), seed=6)
    replaced = ga_tfx.replace_batchnorm_layers(model)
    _assert_replaced(model, replaced, x, n_bn)
    assert isinstance(replaced.layers[1], keras.Model)
    assert replaced.layers[1].name == backbone.name


def test_replace_sequential():
    keras.utils.set_random_seed(6)
    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(3),
            keras.layers.BatchNormalization(),
            keras.layers.Dense(1),
        ]
    )
    _randomize_batchnorm(model)
    replaced = ga_tfx.replace_batchnorm_layers(model)
    assert isinstance(replaced, keras.Sequential)
    _assert_replaced(model, replaced, _data(3, (4,)), 1)


def test_replace_multi_input_multi_output_keeps_names():
    keras.utils.set_random_seed(7)
    a, b = keras.Input((3,), name="a"), keras.Input((2,), name="b")
    h = keras.layers.Concatenate()([keras.layers.BatchNormalization(name="bn_a")(a), b])
    out1 = keras.layers.Dense(1, name="score")(h)
    out2 = keras.layers.BatchNormalization(name="bn_out")(keras.layers.Dense(2, name="d")(h))
    model = keras.Model([a, b], {"score": out1, "features": out2}, name="multi")
    _randomize_batchnorm(model)
    replaced = ga_tfx.replace_batchnorm_layers(model)
    assert replaced.input_names == model.input_names == ["a", "b"]
    assert replaced.output_names == model.output_names
    x = [_data(3, (3,), seed=1), _data(3, (2,), seed=2)]
    _assert_replaced(model, replaced, x, 2)
    assert set(replaced(x)) == {"score", "features"}


def test_replace_model_without_batchnorm_is_an_equivalent_copy():
    keras.utils.set_random_seed(8)
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Dense(3)(inputs)))
    replaced = ga_tfx.replace_batchnorm_layers(model)
    _assert_replaced(model, replaced, _data(3, (4,)), 0)


def test_replaced_without_k_the_layers_follow_the_front_ends_windows():
    # replace_batchnorm_layers needs no K under a front-end: the model's windows (K=3) end the
    # layer's, as one Keras update per window; alone the layer would update per micro-batch.
    k, micro = 3, 4
    x = _data(2 * k * micro, (3,), offset_step=100.0, micro=micro)
    keras.utils.set_random_seed(0)
    inputs = keras.Input((3,), name="x")
    h = keras.layers.BatchNormalization(momentum=0.5, name="bn")(inputs)
    plain = keras.Model(inputs, keras.layers.Dense(1, name="head")(h))
    acc = _fit_engine(ga_tfx.replace_batchnorm_layers(plain), x, micro, k)
    bn = acc.get_layer("bn")
    mean, var = _keras_window_updates([x[: k * micro], x[k * micro :]])
    assert _rel_err(bn.moving_mean.numpy(), mean) <= TOLERANCE
    assert _rel_err(bn.moving_variance.numpy(), var) <= TOLERANCE
    per_micro_batch = _keras_window_updates(np.split(x, 2 * k))[1]
    assert np.min(np.abs(bn.moving_variance.numpy() - per_micro_batch)) > 100.0


def test_replace_accumulation_model_stays_one():
    acc = ga_tfx.wrap_model(_functional_with_bn(), accum_steps=3, partial_window="drop")
    replaced = ga_tfx.replace_batchnorm_layers(acc)
    assert isinstance(replaced, ga_tfx.GradientAccumulateModel)
    assert (replaced.accum_steps, replaced.partial_window) == (3, "drop")
    assert len(_batchnorm_layers(replaced)) == 2
    assert all(
        isinstance(layer, ga_tfx.AccumBatchNormalization) for layer in _batchnorm_layers(replaced)
    )


def test_replace_accumulation_model_keeps_a_callable_schedule_and_the_transforms():
    def schedule(window):
        return tf.where(window < 1, 2, 3)

    def halve(pairs):
        return [(g * 0.5, v) for g, v in pairs]

    acc = ga_tfx.wrap_model(_functional_with_bn(), schedule, transforms=[("halve", halve)])
    replaced = ga_tfx.replace_batchnorm_layers(acc)
    assert replaced.accumulation is acc.accumulation  # the config itself: its schedule's fn
    assert replaced.accumulation.schedule.fn is schedule
    assert replaced.transforms == acc.transforms == (("halve", halve),)


def test_replace_subclassed_model_explains_what_to_do():
    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.bn = keras.layers.BatchNormalization()

        def call(self, x):
            return self.bn(x)

    net = Net()
    net(np.zeros((1, 3), "float32"))
    with pytest.raises(TypeError, match="AccumBatchNormalization layers directly"):
        ga_tfx.replace_batchnorm_layers(net)


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("k", [4, 1])
def test_a_k_given_to_the_core_layer_or_replace_is_refused_naming_the_compat_layer(k):
    """The layer and replace_batchnorm_layers carry no K: a front-end ends the windows. A K
    (keyword, positional for replace, or in an old config) is a one-line error naming the
    value and the compat call whose layers count their own windows."""
    layer_message = (
        rf"AccumBatchNormalization takes no accum_steps \(got {k}\): the ga-tfx front-end "
        r"that trains the layers .* ends their windows, with its own K\. For layers that count "
        r"their own windows of K training calls, use "
        r"ga_tfx\.compat\.gradient_accumulator\.layers\.AccumBatchNormalization\(accum_steps=K\)"
    )
    with pytest.raises(TypeError, match="^" + layer_message) as raised:
        ga_tfx.AccumBatchNormalization(accum_steps=k, momentum=0.5)
    assert "\n" not in str(raised.value)
    config = ga_tfx.AccumBatchNormalization(momentum=0.5).get_config()
    with pytest.raises(TypeError, match=layer_message):  # inside Keras' deserialization error
        ga_tfx.AccumBatchNormalization.from_config({**config, "accum_steps": k})
    replace_message = (
        rf"^replace_batchnorm_layers takes no accum_steps \(got {k}\): .* use "
        r"ga_tfx\.compat\.gradient_accumulator\.utils\.replace_batchnorm_layers\(model, K\)"
    )
    with pytest.raises(TypeError, match=replace_message):
        ga_tfx.replace_batchnorm_layers(_functional_with_bn(), k)
    with pytest.raises(TypeError, match=replace_message):
        ga_tfx.replace_batchnorm_layers(_functional_with_bn(), accum_steps=k)


@pytest.mark.parametrize("bad", [0, -1, 2.5, None])
def test_bad_own_window_accum_steps_is_rejected_with_the_value(bad):
    with pytest.raises((TypeError, ValueError), match=repr(bad).replace(".", r"\.")):
        OwnWindowsBN(bad)
    with pytest.raises((TypeError, ValueError), match=repr(bad).replace(".", r"\.")):
        replace_with_own_windows(_functional_with_bn(), accum_steps=bad)


@pytest.mark.parametrize("option", [{"renorm": True}, {"virtual_batch_size": 2}])
def test_unsupported_batchnorm_options_are_rejected(option):
    with pytest.raises(ValueError, match=list(option)[0]):
        ga_tfx.AccumBatchNormalization(**option)
