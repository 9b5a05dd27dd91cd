"""GradientAccumulateOptimizer: accumulation for custom training loops."""

import ga_tfx
from ga_tfx._keras import keras, tf

import numpy as np
import pytest

from tests import test_mixed_precision as mixed_precision
from tests.helpers import (
    classification_data,
    iterations,
    max_weight_diff,
    mlp,
    sparse_ce,
    two_replica_strategy,
)

TOLERANCE = 1e-5
MICRO, K = 6, 4


def _loss_and_grads(model, xb, yb):
    with tf.GradientTape() as tape:
        loss = sparse_ce()(yb, model(xb, training=True)) + tf.add_n(model.losses or [0.0])
    return tape.gradient(loss, model.trainable_variables)


def _step(model, optimizer):
    """One custom-loop micro-step: its gradients and sample count to ``optimizer``."""

    @tf.function
    def step(xb, yb):
        grads = _loss_and_grads(model, xb, yb)
        return optimizer.apply_gradients(
            zip(grads, model.trainable_variables), sample_count=tf.shape(xb)[0]
        )

    return step


def _custom_loop(model, optimizer, x, y, micro, steps=None, start=0):
    step = _step(model, optimizer)
    applied = []
    for i in range(start, len(x) if steps is None else start + steps * micro, micro):
        applied.append(bool(step(x[i : i + micro], y[i : i + micro])))
    return applied


@pytest.mark.parametrize(
    "make_optimizer",
    [
        lambda: keras.optimizers.Adam(1e-2),
        lambda: keras.optimizers.SGD(0.1, momentum=0.9),
        lambda: keras.optimizers.legacy.RMSprop(1e-2),
    ],
    ids=["adam", "sgd_momentum", "legacy_rmsprop"],
)
def test_custom_loop_matches_big_batch(make_optimizer):
    x, y = classification_data(n=192)
    big = mlp(l2=1e-2)
    big.compile(make_optimizer(), sparse_ce())
    big.fit(x, y, batch_size=MICRO * K, epochs=1, shuffle=False, verbose=0)

    model = mlp(l2=1e-2)
    optimizer = ga_tfx.GradientAccumulateOptimizer(make_optimizer(), accum_steps=K)
    applied = _custom_loop(model, optimizer, x, y, MICRO)
    assert applied == [False, False, False, True] * 8
    assert iterations(optimizer) == 8
    assert max_weight_diff(big, model) <= TOLERANCE


def _halving():
    return keras.optimizers.schedules.ExponentialDecay(0.2, decay_steps=1, decay_rate=0.5)


# Each optimizer kind with a rate that changes every update, and that rate at update u
# (0-based), computed apart from Keras.
RATE_KINDS = {
    "keras_schedule": (lambda: keras.optimizers.SGD(_halving()), lambda u: 0.2 * 0.5**u),
    "legacy_schedule": (lambda: keras.optimizers.legacy.SGD(_halving()), lambda u: 0.2 * 0.5**u),
    "legacy_decay": (
        lambda: keras.optimizers.legacy.SGD(0.2, decay=0.5),
        lambda u: 0.2 / (1.0 + 0.5 * u),
    ),
}


@pytest.mark.parametrize("kind", sorted(RATE_KINDS))
def test_the_logged_learning_rate_is_that_of_the_update_just_applied(kind):
    """Plain SGD on ``loss = w`` (gradient 1): update ``u`` moves ``w`` by exactly its rate.
    Each window's logged learning rate is that movement and the rate computed apart, for a
    Keras optimizer with a schedule, a legacy one with a schedule (issue 53: logged one
    window ahead, [0.1, 0.05, 0.025]) and a legacy one with ``decay``."""
    make, rate_at = RATE_KINDS[kind]
    w = tf.Variable(0.0)
    optimizer = ga_tfx.GradientAccumulateOptimizer(make(), accum_steps=2)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = 1.0 * w
        optimizer.apply_gradients([(tape.gradient(loss, w), w)])

    moves = []
    for _ in range(3):
        before = float(w.numpy())
        step()
        step()
        moves.append(before - float(w.numpy()))
    logged = [event.learning_rate for event in optimizer.window_events()]
    expected = [rate_at(u) for u in range(3)]
    # float32 rates and weights: a few units of float32's 1.2e-7 on values below 1.
    assert logged == pytest.approx(expected, rel=1e-6, abs=1e-6), logged
    assert moves == pytest.approx(expected, rel=1e-6, abs=1e-6), moves


def test_uneven_micro_batches_are_weighted_by_their_sample_count():
    # Windows of micro-batches of 5, 1, 7 and 3 samples: the update is big-batch training on
    # the window's 16 samples only if each micro-batch's gradient is weighted by its
    # sample_count (equal weights move these SGD weights ~1e-2 away).
    sizes = [5, 1, 7, 3] * 3
    x, y = classification_data(n=sum(sizes))
    big = mlp(l2=1e-2)
    initial = big.get_weights()
    big.compile(keras.optimizers.SGD(0.1, momentum=0.9), sparse_ce())
    big.fit(x, y, batch_size=sum(sizes[:K]), epochs=1, shuffle=False, verbose=0)

    model = mlp(l2=1e-2)
    optimizer = ga_tfx.GradientAccumulateOptimizer(
        keras.optimizers.SGD(0.1, momentum=0.9), accum_steps=K
    )
    step = _step(model, optimizer)
    starts = np.cumsum([0] + sizes)
    applied = [bool(step(x[a:b], y[a:b])) for a, b in zip(starts[:-1], starts[1:])]
    assert applied == [False, False, False, True] * 3
    assert iterations(optimizer) == 3
    assert max_weight_diff(big, model) <= TOLERANCE
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(initial, big.get_weights())) > 1e-2


def test_a_loss_scale_optimizer_inside_is_unscaled_and_matches_float32_big_batch():
    # mixed_float16 layers, GradientAccumulateOptimizer(LossScaleOptimizer(SGD)) in a custom
    # loop (minimize: the wrapper's compute_gradients scales the loss and unscales each
    # micro-batch's gradients) against float32 big-batch SGD. Plain SGD: a missing unscale
    # multiplies every step by the loss scale (2**15), a double one divides it by 2**15.
    x, y = classification_data()
    reference, movement = mixed_precision._big_batch_float32(x, y, momentum=0.0)
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = mixed_precision._model()
        inner = keras.mixed_precision.LossScaleOptimizer(
            keras.optimizers.SGD(mixed_precision.LEARNING_RATE)
        )
        optimizer = ga_tfx.GradientAccumulateOptimizer(inner, accum_steps=K)

        @tf.function
        def step(xb, yb):
            with tf.GradientTape() as tape:
                loss = sparse_ce()(yb, model(xb, training=True))
            optimizer.minimize(loss, model.trainable_variables, tape=tape)

        for _ in range(mixed_precision.EPOCHS):
            for i in range(0, len(x), MICRO):
                step(x[i : i + MICRO], y[i : i + MICRO])
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert model.layers[1].compute_dtype == "float16"
    assert float(inner.loss_scale.numpy()) == 2.0**15  # scaled; no window skipped
    assert iterations(optimizer) == iterations(reference.optimizer) == 8
    # test_mixed_precision.py's tolerance: 4 unit round-offs of float16 (2**-11) times the
    # float32 reference's movement (measured error/movement there: 2.4e-4 for plain SGD).
    tolerance = mixed_precision.ROUNDOFF_FACTOR * mixed_precision.UNIT_ROUNDOFF["mixed_float16"]
    diff = max_weight_diff(reference, model)
    print(f"max|dw| = {diff:.3g}, movement {movement:.3g}, tolerance {tolerance * movement:.3g}")
    assert movement > 0.05  # training moved the weights far beyond the tolerance
    assert diff <= tolerance * movement


def test_nothing_moves_on_a_micro_step_that_is_not_an_update():
    x, y = classification_data()
    model = mlp()
    inner = keras.optimizers.Adam(1e-2)
    optimizer = ga_tfx.GradientAccumulateOptimizer(inner, accum_steps=K)
    _custom_loop(model, optimizer, x, y, MICRO, steps=K)  # one full window: inner is built
    for micro_step in range(1, K):
        weights = [w.copy() for w in model.get_weights()]
        state = [v.numpy().copy() for v in inner.variables]
        _custom_loop(model, optimizer, x, y, MICRO, steps=1, start=MICRO * micro_step)
        assert iterations(optimizer) == 1
        assert int(optimizer.window_core.micro_steps.numpy()) == micro_step
        for before, after in zip(weights, model.get_weights()):
            np.testing.assert_array_equal(before, after)
        for before, v in zip(state, inner.variables):  # iterations, moments
            np.testing.assert_array_equal(before, v.numpy())
    _custom_loop(model, optimizer, x, y, MICRO, steps=1, start=MICRO * K)
    assert iterations(optimizer) == 2


def test_embeddings_do_not_move_between_updates():
    keras.utils.set_random_seed(0)
    tokens = keras.Input((4,), dtype="int32")
    h = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(40, 5)(tokens))
    model = keras.Model(tokens, keras.layers.Dense(3)(h))
    rng = np.random.default_rng(1)
    x = rng.integers(0, 40, (48, 4)).astype("int32")
    y = rng.integers(0, 3, 48)
    optimizer = ga_tfx.GradientAccumulateOptimizer(keras.optimizers.Adam(0.1), accum_steps=K)
    table = model.layers[1].embeddings
    start = table.numpy().copy()
    applied = _custom_loop(model, optimizer, x, y, MICRO, steps=K - 1)
    assert applied == [False] * (K - 1)
    np.testing.assert_array_equal(start, table.numpy())
    _custom_loop(model, optimizer, x, y, MICRO, steps=1, start=MICRO * (K - 1))
    assert np.max(np.abs(start - table.numpy())) > 1e-3


def test_flush_applies_a_partial_window():
    x, y = classification_data(n=18)  # three micro-batches of 6: a window of 3 < K
    big = mlp()
    big.compile(keras.optimizers.SGD(0.5), sparse_ce())
    big.fit(x, y, batch_size=18, epochs=1, shuffle=False, verbose=0)
    model = mlp()
    optimizer = ga_tfx.GradientAccumulateOptimizer(keras.optimizers.SGD(0.5), accum_steps=K)
    assert _custom_loop(model, optimizer, x, y, MICRO) == [False, False, False]
    assert bool(optimizer.flush())
    assert not bool(optimizer.flush())  # empty window: nothing to do
    assert iterations(optimizer) == 1
    assert max_weight_diff(big, model) <= TOLERANCE


# One epoch: 6 micro-batches of MICRO, windows of K=4: one whole window and 2 micro-batches left.
EPOCH_MICRO_BATCHES = 6


def _policy_windows(policy, epochs):
    """The windows of ``epochs`` epochs by ``partial_window``'s definition, as lists of
    (epoch, micro-batch) pairs: "apply" ends each epoch's short window as a smaller batch,
    "drop" leaves it out, "carry" completes it with the next epoch's first micro-batches (what
    is left after the last epoch: flush())."""
    windows, current = [], []
    for epoch in range(epochs):
        for micro_batch in range(EPOCH_MICRO_BATCHES):
            current.append((epoch, micro_batch))
            if len(current) == K:
                windows, current = windows + [current], []
        if current and policy == "apply":
            windows, current = windows + [current], []
        elif policy == "drop":
            current = []
    return windows + ([current] if current else [])


@pytest.mark.parametrize("policy", ["apply", "drop", "carry"])
def test_end_of_data_ends_the_short_window_by_the_policy(policy):
    """The wrapper's end_of_data() at each epoch's end, then flush(): the weights of big-batch
    SGD with momentum over the windows partial_window defines (max |dw| <= 1e-5)."""
    epochs = 3
    x, y = classification_data(n=EPOCH_MICRO_BATCHES * MICRO)
    big, reference = mlp(), keras.optimizers.SGD(0.5, momentum=0.9)
    for window in _policy_windows(policy, epochs):
        rows = np.concatenate([np.arange(b * MICRO, (b + 1) * MICRO) for _, b in window])
        grads = _loss_and_grads(big, x[rows], y[rows])
        reference.apply_gradients(zip(grads, big.trainable_variables))

    model = mlp()
    optimizer = ga_tfx.GradientAccumulateOptimizer(
        keras.optimizers.SGD(0.5, momentum=0.9), accum_steps=K, partial_window=policy
    )
    step = _step(model, optimizer)
    for _ in range(epochs):
        for i in range(0, len(x), MICRO):
            step(x[i : i + MICRO], y[i : i + MICRO])
        optimizer.end_of_data()
    optimizer.flush()
    assert iterations(optimizer) == len(_policy_windows(policy, epochs))
    assert iterations(optimizer) == {"apply": 6, "drop": 3, "carry": 5}[policy]
    assert max_weight_diff(big, model) <= TOLERANCE


def test_checkpoint_mid_window_resumes_exactly(tmp_path):
    x, y = classification_data(n=96)
    make = lambda: ga_tfx.GradientAccumulateOptimizer(keras.optimizers.Adam(1e-2), K)

    model = mlp()
    optimizer = make()
    _custom_loop(model, optimizer, x, y, MICRO)  # 16 micro-steps, uninterrupted

    interrupted = mlp()
    first = make()
    _custom_loop(interrupted, first, x, y, MICRO, steps=6)  # 1 update + 2 micro-steps pending
    path = tf.train.Checkpoint(model=interrupted, optimizer=first).save(str(tmp_path / "ckpt"))

    resumed = mlp()  # fresh process state: new model, new optimizer
    second = make()
    tf.train.Checkpoint(model=resumed, optimizer=second).restore(path)
    _custom_loop(resumed, second, x, y, MICRO, steps=10, start=6 * MICRO)
    assert iterations(second) == iterations(optimizer) == 4
    assert max_weight_diff(model, resumed) == 0.0


def test_agc_on_the_accumulated_gradient_matches_big_batch_agc():
    x, y = classification_data(n=96)
    big = mlp()
    variables = big.trainable_variables
    reference = keras.optimizers.SGD(0.5)
    for i in range(0, 96, MICRO * K):
        grads = _loss_and_grads(big, x[i : i + MICRO * K], y[i : i + MICRO * K])
        reference.apply_gradients(ga_tfx.adaptive_clip_gradients(zip(grads, variables), 0.01))

    model = mlp()
    optimizer = ga_tfx.GradientAccumulateOptimizer(
        keras.optimizers.SGD(0.5), K, agc_clip_factor=0.01
    )
    _custom_loop(model, optimizer, x, y, MICRO)
    assert max_weight_diff(big, model) <= TOLERANCE

    # Clipping each micro-batch instead (what gradient-accumulator does) is different.
    per_micro = mlp()
    sgd = keras.optimizers.SGD(0.5)
    for i in range(0, 96, MICRO * K):
        clipped = []
        for j in range(i, i + MICRO * K, MICRO):
            grads = _loss_and_grads(per_micro, x[j : j + MICRO], y[j : j + MICRO])
            clipped.append(
                [
                    g
                    for g, _ in ga_tfx.adaptive_clip_gradients(
                        zip(grads, per_micro.trainable_variables), 0.01
                    )
                ]
            )
        mean = [sum(c[k] for c in clipped) / K for k in range(len(clipped[0]))]
        sgd.apply_gradients(zip(mean, per_micro.trainable_variables))
    assert max_weight_diff(big, per_micro) > 1e-4


def test_misuse_gives_clear_errors():
    strategy = two_replica_strategy()
    with strategy.scope():
        model = mlp()
        optimizer = ga_tfx.GradientAccumulateOptimizer(keras.optimizers.SGD(0.1), K)
    variables = model.trainable_variables
    zeros = [tf.zeros_like(v) for v in variables]

    with strategy.scope(), pytest.raises(RuntimeError, match="cross-replica context.*strategy.run"):
        optimizer.apply_gradients(zip(zeros, variables))

    @tf.function
    def pre_aggregated():
        return strategy.run(
            lambda: optimizer.apply_gradients(
                zip(zeros, variables), skip_gradients_aggregation=True
            )
        )

    with pytest.raises(ValueError, match="skip_gradients_aggregation=True.*2 replicas"):
        pre_aggregated()
    strategy.run(tf.function(lambda: optimizer.apply_gradients(zip(zeros, variables))))
    with pytest.raises(RuntimeError, match="outside the distribution strategy.*strategy.run"):
        optimizer.apply_gradients(zip(zeros, variables))  # no scope: default strategy
    with pytest.raises(TypeError, match="already a GradientAccumulateOptimizer"):
        ga_tfx.GradientAccumulateOptimizer(optimizer, K)
    with pytest.raises(TypeError, match=r"Unexpected keyword arguments \['loss_scale'\]"):
        optimizer.apply_gradients(zip(zeros, variables), loss_scale=2.0)
