"""Effective-batch schedules (issue 25): every window is big-batch training on its own K·b
samples, at and around each switch, in every front-end; adaptive K follows the noise scale.

The reference is plain Keras big-batch training, one ``apply_gradients`` per window on the
concatenated micro-batches of that window (the window sizes the schedule gives), with the
learning rate ``lr_scaling`` gives that window; SGD with momentum (sees any gradient-scale
error) and Adam (per-variable state). AccumBatchNormalization's moving statistics are checked
against a Keras BatchNormalization updated once per window on the concatenated window.
Tolerance: float32 round-off of the reordered sums, 1e-5 on the weights (1e-5 relative on the
statistics); every comparison asserts that the weights moved by far more.
"""

import ga_tfx
from ga_tfx import keras, tf

import contextlib
import math

import numpy as np
import pytest

from tests.helpers import MIN_MOVEMENT, max_weight_diff, mlp, sparse_ce, two_replica_strategy

pytestmark = []  # fast tier; library only (no TFX)

MICRO = 8
SCHEDULE = "0:2,2:4,4:1"  # windows 0-1: K=2, 2-3: K=4, 4-: K=1
WINDOW_KS = (2, 2, 4, 4, 1, 1)  # one epoch of 14 micro-batches
N = MICRO * sum(WINDOW_KS)  # 112 samples


def _data(n=N, seed=3):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8)).astype("float32")
    y = rng.integers(0, 3, n).astype("int64")
    return x, y


OPTIMIZERS = {
    "sgd_momentum": lambda lr: keras.optimizers.SGD(lr, momentum=0.9),
    "adam": lambda lr: keras.optimizers.Adam(lr),
}
LR = {"sgd_momentum": 0.3, "adam": 0.01}


def _scaled(lr, k, k0, scaling):
    ratio = k / k0
    return lr * {"none": 1.0, "linear": ratio, "sqrt": math.sqrt(ratio)}[scaling]


def _reference(optimizer_name, x, y, ks, scaling="none", epochs=1):
    model = mlp(seed=5)
    optimizer = OPTIMIZERS[optimizer_name](LR[optimizer_name])
    for _ in range(epochs):
        start = 0
        for k in ks:
            optimizer.learning_rate.assign(_scaled(LR[optimizer_name], k, ks[0], scaling))
            xb, yb = x[start : start + k * MICRO], y[start : start + k * MICRO]
            start += k * MICRO
            with tf.GradientTape() as tape:
                loss = sparse_ce()(yb, model(xb, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return model


def _fit(optimizer_name, x, y, schedule, scaling, strategy=None):
    with strategy.scope() if strategy else contextlib.nullcontext():
        model = ga_tfx.wrap_model(mlp(seed=5), schedule, lr_scaling=scaling)
        model.compile(OPTIMIZERS[optimizer_name](LR[optimizer_name]), sparse_ce())
    model.fit(x, y, batch_size=MICRO, epochs=1, shuffle=False, verbose=0)
    return model, model.window_core


def _loop(optimizer_name, x, y, schedule, scaling):
    model = mlp(seed=5)
    loop = ga_tfx.TrainingLoop(
        model,
        OPTIMIZERS[optimizer_name](LR[optimizer_name]),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none"),
        tf.data.Dataset.from_tensor_slices((x, y)).batch(MICRO),
        schedule,
        lr_scaling=scaling,
        verbose=False,
    )
    loop.run(epochs=1)
    return model, loop.window_core


def _wrapper(optimizer_name, x, y, schedule, scaling):
    model = mlp(seed=5)
    optimizer = ga_tfx.GradientAccumulateOptimizer(
        OPTIMIZERS[optimizer_name](LR[optimizer_name]), schedule, lr_scaling=scaling
    )
    loss_fn = sparse_ce()

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables), sample_count=len(xb))

    for start in range(0, len(x), MICRO):
        step(x[start : start + MICRO], y[start : start + MICRO])
    return model, optimizer.window_core


FRONT_ENDS = {"fit": _fit, "training_loop": _loop, "optimizer_wrapper": _wrapper}


def _check(model, reference, core, ks):
    diff = max_weight_diff(model, reference)
    print(f"max |dw| {diff:.2e}")
    assert diff <= 1e-5
    assert max_weight_diff(model, mlp(seed=5)) > MIN_MOVEMENT
    assert core.windows == len(ks)


@pytest.mark.parametrize("front_end", sorted(FRONT_ENDS))
@pytest.mark.parametrize(
    "optimizer_name, scaling",
    [("sgd_momentum", "linear"), ("adam", "sqrt"), ("sgd_momentum", "none")],
)
def test_a_piecewise_schedule_is_big_batch_training_window_by_window(
    front_end, optimizer_name, scaling
):
    x, y = _data()
    reference = _reference(optimizer_name, x, y, WINDOW_KS, scaling)
    model, core = FRONT_ENDS[front_end](optimizer_name, x, y, SCHEDULE, scaling)
    _check(model, reference, core, WINDOW_KS)
    assert core.current_accum_steps == 1  # the last part of the schedule
    # The constant-K reference differs by far more: the switches happened.
    assert max_weight_diff(model, _reference(optimizer_name, x, y, (2,) * 7, scaling)) > 1e-3


def test_a_piecewise_schedule_on_two_replicas():
    x, y = _data()
    reference = _reference("sgd_momentum", x, y, WINDOW_KS, "linear")
    model, core = _fit("sgd_momentum", x, y, SCHEDULE, "linear", two_replica_strategy())
    _check(model, reference, core, WINDOW_KS)


def test_a_callable_schedule_and_the_events_show_each_window_k():
    x, y = _data()
    events = []

    class Record(keras.callbacks.Callback):
        def on_window_end(self, event):
            events.append(event)

    model = ga_tfx.wrap_model(mlp(seed=5), lambda w: tf.where(w < 2, 2, tf.where(w < 4, 4, 1)))
    model.compile(OPTIMIZERS["sgd_momentum"](LR["sgd_momentum"]), sparse_ce())
    model.fit(x, y, batch_size=MICRO, epochs=1, shuffle=False, verbose=0, callbacks=[Record()])
    _check(model, _reference("sgd_momentum", x, y, WINDOW_KS), model.window_core, WINDOW_KS)
    assert [e.micro_batches for e in events] == list(WINDOW_KS)
    assert [e.next_accum_steps for e in events] == list(WINDOW_KS[1:]) + [1]


def test_accum_bn_statistics_follow_the_windows_of_the_schedule():
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(N, 3)) + 50.0 * (np.arange(N) // MICRO)[:, None]).astype("float32")
    keras.utils.set_random_seed(0)
    inputs = keras.Input((3,))
    h = ga_tfx.AccumBatchNormalization(momentum=0.5, name="bn")(inputs)  # no K: the schedule's
    model = ga_tfx.wrap_model(keras.Model(inputs, keras.layers.Dense(1)(h)), SCHEDULE)
    model.compile(keras.optimizers.SGD(0.01), "mse")
    model.fit(x, np.zeros((N, 1), "float32"), batch_size=MICRO, shuffle=False, verbose=0)
    reference = keras.layers.BatchNormalization(momentum=0.5)
    start = 0
    for k in WINDOW_KS:
        reference(tf.constant(x[start : start + k * MICRO]), training=True)
        start += k * MICRO
    bn = model.get_layer("bn")
    for got, want in (
        (bn.moving_mean, reference.moving_mean),
        (bn.moving_variance, reference.moving_variance),
    ):
        got, want = got.numpy(), want.numpy()
        assert np.max(np.abs(got - want)) / max(1.0, np.max(np.abs(want))) <= 1e-5
    # Windows of a constant K=2 give other statistics (the micro-batch means are far apart).
    constant = keras.layers.BatchNormalization(momentum=0.5)
    for start in range(0, N, 2 * MICRO):
        constant(tf.constant(x[start : start + 2 * MICRO]), training=True)
    assert np.max(np.abs(bn.moving_variance.numpy() - constant.moving_variance.numpy())) > 10.0


def test_a_checkpoint_in_the_middle_of_a_schedule_resumes_exactly(tmp_path):
    x, y = _data()

    def loop():
        return ga_tfx.TrainingLoop(
            mlp(seed=5),
            OPTIMIZERS["adam"](LR["adam"]),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none"),
            tf.data.Dataset.from_tensor_slices((x, y)).batch(MICRO),
            SCHEDULE,
            lr_scaling="sqrt",
            checkpoint_dir=str(tmp_path),
            verbose=False,
        )

    whole = ga_tfx.TrainingLoop(
        mlp(seed=5),
        OPTIMIZERS["adam"](LR["adam"]),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none"),
        tf.data.Dataset.from_tensor_slices((x, y)).batch(MICRO),
        SCHEDULE,
        lr_scaling="sqrt",
        verbose=False,
    )
    whole.run(epochs=2)
    first = loop()
    first.run(epochs=2, max_micro_batches=7)  # stops inside the first K=4 window
    pending = int(first.window_core.micro_steps.numpy())
    assert (first.window_core.current_accum_steps, first.window_core.windows, pending) == (4, 2, 3)
    second = loop()
    second.run(epochs=2)
    assert max_weight_diff(second.model, whole.model) == 0.0
    assert second.window_core.windows == whole.window_core.windows
    assert second.window_core.current_accum_steps == 1
    assert second.optimizer.learning_rate.numpy() == whole.optimizer.learning_rate.numpy()


@pytest.mark.timeout(120)  # the bug this guards against was a hang: fail by name, not at 300 s
def test_a_training_loop_window_that_does_not_end_within_its_k_micro_steps_is_an_error(
    monkeypatch,
):
    # The host loop's K not moved on by a window end (the schedule's K=4 from window 2): the
    # window holds the old K=2 micro-batches and does not end. The loop asked for none more,
    # for ever; now it stops with an error that names it.
    from ga_tfx.training_loop.run import LoopRun

    dispatch = LoopRun._dispatch_window_ends

    def stale_k(self):
        k = self.current_accum_steps
        logs = dispatch(self)
        self.current_accum_steps = k
        return logs

    monkeypatch.setattr(LoopRun, "_dispatch_window_ends", stale_k)
    x, y = _data()
    with pytest.raises(RuntimeError, match="did not end within its K micro-steps") as raised:
        _loop("sgd_momentum", x, y, SCHEDULE, "none")
    assert "it holds 2 micro-batch(es), the loop's K is 2 and the window core's 4" in str(
        raised.value
    )


def test_a_fit_restored_from_a_checkpoint_after_a_switch_goes_on_with_the_schedule(tmp_path):
    # Two fits by two model objects: the first trains windows 0-1 (K=2) and is saved; the
    # second is restored, with K=4 in its window core, and trains the rest. Its first call must
    # run one window of the restored K (4 micro-batches), not of the compiled first K (2: a
    # window of 2 would end early, applied by partial_window="apply").
    x, y = _data()
    reference = _reference("sgd_momentum", x, y, WINDOW_KS, "linear")

    def model():
        m = ga_tfx.wrap_model(mlp(seed=5), SCHEDULE, lr_scaling="linear")
        m.compile(OPTIMIZERS["sgd_momentum"](LR["sgd_momentum"]), sparse_ce())
        return m

    first = model()
    split = MICRO * sum(WINDOW_KS[:2])
    first.fit(x[:split], y[:split], batch_size=MICRO, shuffle=False, verbose=0)
    assert first.window_core.current_accum_steps == 4
    path = tf.train.Checkpoint(model=first).save(str(tmp_path / "ckpt"))
    second = model()
    tf.train.Checkpoint(model=second).restore(path)
    events = []

    class Record(keras.callbacks.Callback):
        def on_window_end(self, event):
            events.append(event)

    second.fit(
        x[split:], y[split:], batch_size=MICRO, shuffle=False, verbose=0, callbacks=[Record()]
    )
    assert [e.micro_batches for e in events] == list(WINDOW_KS[2:])
    _check(second, reference, second.window_core, WINDOW_KS)


def _least_squares_stream(micro_batches, micro, seed=0):
    """Linear least squares with Gaussian inputs (B_simple = 17, see test_noise_scale.py)."""
    rng = np.random.default_rng(seed)
    d = 8
    w_star = np.linspace(-1.0, 1.0, d).astype("float32")
    x = rng.normal(size=(micro_batches * micro, d)).astype("float32")
    y = x @ w_star + rng.normal(size=micro_batches * micro).astype("float32")
    return x, y[:, None], w_star + np.full(d, 1.0 / np.sqrt(d), "float32")


def test_adaptive_k_follows_the_noise_scale_once_without_flapping():
    # B_simple = 17 at a fixed point (learning rate 0); micro-batches of 4: the target K is
    # 2^round(log2(17 / 4)) = 4. Starting at K=2 the schedule switches to 4 once, after its
    # warm-up and patience, and stays.
    micro = 4
    x, y, w = _least_squares_stream(micro_batches=600, micro=micro)
    inputs = keras.Input((8,))
    layer = keras.layers.Dense(1, use_bias=False)
    model = ga_tfx.wrap_model(keras.Model(inputs, layer(inputs)), "adaptive:2-32")
    layer.kernel.assign(w[:, None])
    model.compile(keras.optimizers.SGD(0.0), "mse")
    events = []

    class Record(keras.callbacks.Callback):
        def on_window_end(self, event):
            events.append(event)

    model.fit(x, y, batch_size=micro, shuffle=False, verbose=0, callbacks=[Record()])
    ks = [2] + [e.next_accum_steps for e in events]  # K of each window, and of the next
    changes = [(i, a, b) for i, (a, b) in enumerate(zip(ks, ks[1:])) if a != b]
    print(f"K changes {changes}, last noise_scale {events[-1].noise_scale:.2f}")
    assert len(changes) == 1 and changes[0][1:] == (2, 4)
    assert 10 < changes[0][0] < 100  # after warm-up and patience, not at once
    # Each window had the K chosen at the end of the one before (the epoch's last is short).
    assert [e.micro_batches for e in events[:-1]] == ks[: len(events) - 1]
    assert abs(events[-1].noise_scale - 17.0) <= 0.25 * 17.0


def test_schedule_errors_name_the_problem():
    with pytest.raises(ValueError, match="starts at window 0"):
        ga_tfx.wrap_model(mlp(), [(1, 2), (5, 4)])
    with pytest.raises(ValueError, match="must increase strictly"):
        ga_tfx.wrap_model(mlp(), "0:2,5:4,5:8")
    with pytest.raises(ValueError, match="MIN <= MAX"):
        ga_tfx.wrap_model(mlp(), "adaptive:8-2")
    with pytest.raises(ValueError, match="lr_scaling must be one of"):
        ga_tfx.wrap_model(mlp(), 2, lr_scaling="cubic")
    model = ga_tfx.wrap_model(mlp(), SCHEDULE)
    with pytest.raises(ValueError, match="steps_per_execution=4 is not supported with an accum"):
        model.compile(keras.optimizers.SGD(0.1), sparse_ce(), steps_per_execution=4)
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.9)
    model = ga_tfx.wrap_model(mlp(), SCHEDULE, lr_scaling="linear")
    model.compile(keras.optimizers.SGD(schedule), sparse_ce())
    x, y = _data()
    with pytest.raises(ValueError, match="must be a constant learning rate"):
        model.fit(x, y, batch_size=MICRO, verbose=0, shuffle=False)
