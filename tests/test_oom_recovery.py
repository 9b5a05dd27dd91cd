"""Out-of-memory recovery (issue 26): the window again at half the micro-batch, same result.

The out-of-memory error is real: a layer of the model asks TensorFlow's allocator for an
impossible tensor (``tf.fill`` of 2^40 floats per call, a size read from a variable so that
nothing folds it away) when its call count reaches ``at_call`` and its batch has more rows than
``limit`` -- as a device runs out of memory at a micro-batch size, mid-training. TensorFlow
raises ``tf.errors.ResourceExhaustedError`` (``OOM when allocating tensor``). The suite's BFC
CPU allocator retries an allocation for 10 s before it fails, so each injection costs 10 s of
waiting: ``fit``'s recovery mid-window is in the fast tier (one real OOM in every
environment's fast tier, the library's included), the other recoveries are slow, and the
refusals stay fast.

References: plain big-batch Keras training (SGD with momentum) and an uninterrupted ga-tfx run
at the smaller micro-batch from the start; tolerance 1e-5 against big batch (float32
round-off) and 1e-6 against the run at the smaller micro-batch (the same sums, in the same
order). Each test asserts that the error happened (the split is 2) and that training moved the
weights.
"""

import ga_tfx
from ga_tfx import keras, tf
from ga_tfx._state import Untracked
from ga_tfx.window.replay import OutOfMemoryRecovered

import contextlib
import types

import numpy as np
import pytest

from tests.helpers import (
    MIN_MOVEMENT,
    classification_data,
    max_weight_diff,
    sparse_ce,
    two_replica_strategy,
)

pytestmark = []  # library only (no TFX); fit's recovery fast, the others slow (marks, tiers.py)

N, EPOCHS, LR = 96, 2, 0.3


class OutOfMemoryAt(keras.layers.Layer):
    """The identity, which runs out of memory on its ``at_call``-th training call (and later
    ones) when its batch has more than ``limit`` rows. The call counter lives outside the
    layer's weights (held where Keras does not track it)."""

    def __init__(self, at_call, limit, **kwargs):
        super().__init__(**kwargs)
        self.at_call, self.limit = at_call, limit
        self._counter = Untracked(tf.Variable(0, dtype=tf.int64, trainable=False))

    @property
    def calls(self):
        return self._counter.value

    def call(self, inputs, training=None):
        if not training:
            return inputs
        calls = self.calls.assign_add(1)
        rows = tf.cast(tf.shape(inputs)[0], tf.int64)

        def allocate():
            size = tf.reshape(calls * 2**40, [1])  # 4 * 2^40 bytes and more: impossible
            return tf.reduce_sum(tf.fill(size, 0.0))

        boom = tf.cond((calls >= self.at_call) & (rows > self.limit), allocate, lambda: 0.0)
        return inputs + boom


def _model(seed=5, oom=None, batchnorm=False):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((8,), name="x")
    h = oom(inputs) if oom is not None else inputs
    h = keras.layers.Dense(16, activation="tanh", name="hidden")(h)
    if batchnorm:
        h = ga_tfx.AccumBatchNormalization(momentum=0.5, name="bn")(h)
    return keras.Model(inputs, keras.layers.Dense(3, name="logits")(h))


def _fit(micro, k, oom=None, batchnorm=False, strategy=None):
    x, y = classification_data(n=N, seed=3)
    with strategy.scope() if strategy else contextlib.nullcontext():
        model = ga_tfx.wrap_model(_model(oom=oom, batchnorm=batchnorm), k)
        model.compile(keras.optimizers.SGD(LR, momentum=0.9), sparse_ce())
    history = model.fit(x, y, batch_size=micro, epochs=EPOCHS, shuffle=False, verbose=0)
    return model, history


def _big_batch(window):
    x, y = classification_data(n=N, seed=3)
    model = _model()
    model.compile(keras.optimizers.SGD(LR, momentum=0.9), sparse_ce())
    model.fit(x, y, batch_size=window, epochs=EPOCHS, shuffle=False, verbose=0)
    return model


def test_fit_survives_an_out_of_memory_error_mid_training_with_the_same_result():
    # Micro-batches of 8, K=4: windows of 32, 3 per epoch. The 10th micro-batch (epoch 0,
    # window 3) runs out of memory; micro-batches of 4 fit.
    oom = OutOfMemoryAt(at_call=10, limit=4)
    model, history = _fit(8, 4, oom=oom)
    assert model.window_core.micro_batch_split == 2  # it happened, and was recovered
    smaller, _ = _fit(4, 8)  # micro-batches of 4 from the start, the same windows of 32
    reference = _big_batch(32)
    print(
        f"vs micro-batch 4: {max_weight_diff(model, smaller):.2e}, "
        f"vs big batch: {max_weight_diff(model, reference):.2e}"
    )
    assert max_weight_diff(model, smaller) <= 1e-6
    assert max_weight_diff(model, reference) <= 1e-5
    assert max_weight_diff(model, _model()) > MIN_MOVEMENT
    assert len(history.history["loss"]) == EPOCHS and history.epoch == [0, 1]
    assert model.window_core.windows == 3 * EPOCHS
    # Every sample counted once per epoch: not the window's first micro-batch again (trained
    # before the error and again after it), nor the micro-batch that failed.
    assert model.samples_seen == N * EPOCHS
    # The data consumed (the one count every front-end's data position is read from): the
    # data's micro-batches of 8, not the slices of 4, the discarded window's counted once.
    assert int(model.window_core.state.micro_batches_done.numpy()) == N // 8 * EPOCHS


@pytest.mark.slow
def test_a_second_out_of_memory_error_in_the_replayed_epoch_keeps_the_later_epochs():
    # Micro-batches of 8 fail from the 10th call above 2 rows: at 8, then at 4 (the first
    # replay, the rest of epoch 0), then 2 fit. The second replay must still train epoch 1.
    model, history = _fit(8, 4, oom=OutOfMemoryAt(at_call=10, limit=2))
    assert model.window_core.micro_batch_split == 4  # two recoveries
    assert history.epoch == [0, 1] and model.window_core.windows == 3 * EPOCHS
    smaller, _ = _fit(2, 16)  # micro-batches of 2 from the start, the same windows of 32
    assert max_weight_diff(model, smaller) <= 1e-6
    assert model.samples_seen == N * EPOCHS


@pytest.mark.slow
def test_accum_bn_statistics_after_a_recovery_equal_the_smaller_micro_batch():
    # The second micro-batch runs out of memory: every window is then trained at 4, so with
    # AccumBatchNormalization (ghost statistics per micro-batch) the weights, and the moving
    # statistics (window statistics), equal a run at micro-batch 4 from the start.
    model, _ = _fit(8, 4, oom=OutOfMemoryAt(at_call=2, limit=4), batchnorm=True)
    smaller, _ = _fit(4, 8, batchnorm=True)
    assert model.window_core.micro_batch_split == 2
    assert max_weight_diff(model, smaller) <= 1e-6
    bn, want = model.get_layer("bn"), smaller.get_layer("bn")
    np.testing.assert_allclose(bn.moving_variance.numpy(), want.moving_variance.numpy(), rtol=1e-6)
    assert np.max(np.abs(bn.moving_mean.numpy())) > 1e-3  # the statistics moved


@pytest.mark.slow
def test_fit_on_two_replicas_survives_an_out_of_memory_error():
    # Global micro-batches of 16, 8 per replica; each replica runs out of memory above 4.
    strategy = two_replica_strategy()
    with strategy.scope():
        oom = OutOfMemoryAt(at_call=5, limit=4)
    model, _ = _fit(16, 2, oom=oom, strategy=strategy)
    assert model.window_core.micro_batch_split == 2
    assert max_weight_diff(model, _big_batch(32)) <= 1e-5


def _loop(micro, k, oom=None, epochs=EPOCHS, **settings):
    x, y = classification_data(n=N, seed=3)
    model = _model(oom=oom)
    loop = ga_tfx.TrainingLoop(
        model,
        keras.optimizers.SGD(LR, momentum=0.9),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none"),
        tf.data.Dataset.from_tensor_slices((x, y)).batch(micro),
        k,
        verbose=False,
        **settings,
    )
    loop.run(epochs=epochs)
    return loop


@pytest.mark.slow
def test_training_loop_survives_an_out_of_memory_error_with_the_same_result():
    loop = _loop(8, 4, oom=OutOfMemoryAt(at_call=7, limit=4))
    assert loop.window_core.micro_batch_split == 2
    assert max_weight_diff(loop.model, _loop(4, 8).model) <= 1e-6
    assert max_weight_diff(loop.model, _big_batch(32)) <= 1e-5
    assert loop.window_core.windows == 3 * EPOCHS


def test_training_loop_refuses_an_out_of_memory_error_in_a_window_carried_across_epochs(
    monkeypatch,
):
    # Micro-batches of 8, K=5: 12 per epoch, so "carry" takes the last 2 of epoch 0 into the
    # first window of epoch 1. Its first call runs out of memory, once (raised before the
    # traced window runs: the refusal, not the allocator, is under test; fast). Those 2 are
    # epoch 0's data, which cannot be read again: a clear error, not a silent skip (a replay
    # read epoch 1 from a negative position, dataset.skip(-2): the whole epoch lost).
    from ga_tfx.training_loop.run import LoopRun

    next_window, raised_once = LoopRun._next_window, []

    def out_of_memory_in_epoch_1(self):
        if self.loop.epoch == 1 and not raised_once:
            raised_once.append(True)
            raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")
        return next_window(self)

    monkeypatch.setattr(LoopRun, "_next_window", out_of_memory_in_epoch_1)
    with pytest.raises(RuntimeError, match="partial_window='carry'.*spans epochs") as raised:
        _loop(8, 5, partial_window="carry")
    message = str(raised.value)
    assert "previous epoch" in message and "cannot be read again" in message
    assert "'apply' or 'drop'" in message and "smaller micro-batch" in message
    assert isinstance(raised.value.__cause__, tf.errors.ResourceExhaustedError)


@pytest.mark.slow
def test_training_loop_under_carry_recovers_an_out_of_memory_error_inside_an_epoch():
    # Micro-batches of 8, K=5, "carry": the 7th micro-batch (epoch 0's second window, inside
    # the epoch) runs out of memory; the window is read again at 4 rows and every later window
    # (the carried one across the epoch boundary too) is that of a run at micro-batch 4, K=10.
    loop = _loop(8, 5, oom=OutOfMemoryAt(at_call=7, limit=4), partial_window="carry")
    assert loop.window_core.micro_batch_split == 2
    smaller = _loop(4, 10, partial_window="carry")
    assert max_weight_diff(loop.model, smaller.model) <= 1e-6
    # the run's last window applied
    assert loop.window_core.windows == smaller.window_core.windows == 2 * 12 // 5 + 1
    assert max_weight_diff(loop.model, _model()) > MIN_MOVEMENT


def test_recovery_refuses_when_the_micro_batch_is_one_sample():
    model, _ = _fit(1, 2)
    core = model.window_core
    with pytest.raises(RuntimeError, match="split into 1 slices of 1 sample.*nothing smaller") as e:
        core.recover_from_oom(
            model.distribute_strategy, tf.errors.ResourceExhaustedError(None, None, "OOM")
        )
    assert "set oom_recovery=True" not in str(e.value)  # it is on: not a way out
    assert core.micro_batch_split == 1  # nothing changed


def test_fit_that_cannot_read_the_window_again_says_where_to_continue():
    x, y = classification_data(n=N, seed=3)
    model = ga_tfx.wrap_model(_model(), 4)
    model.compile(keras.optimizers.SGD(LR), sparse_ce())
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)  # builds the core
    from ga_tfx.engine import recovery

    position = recovery.FitPosition(model)
    position.on_epoch_begin(0)
    error = tf.errors.ResourceExhaustedError(None, None, "OOM")

    def fit_once(arguments):  # a fit that runs out of memory
        raise error

    with pytest.raises(OutOfMemoryRecovered, match="shuffled arrays.*epoch 0"):
        arguments = dict(x=x, y=y, batch_size=8, shuffle=True)
        recovery.fit_replayed(model, arguments, fit_once, position)
    assert model.window_core.micro_batch_split == 2  # recovered, only the data is the caller's


def test_fit_under_carry_refuses_an_out_of_memory_error_with_the_same_rule():
    # fit does not tell a carried window from the others: under carry it refuses every one,
    # with TrainingLoop's message (refuse_carried_window), and recovers nothing.
    x, y = classification_data(n=N, seed=3)
    model = ga_tfx.wrap_model(_model(), 4, partial_window="carry")
    model.compile(keras.optimizers.SGD(LR), sparse_ce())
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)  # builds the core
    from ga_tfx.engine import recovery

    position = recovery.FitPosition(model)
    position.on_epoch_begin(0)

    def fit_once(arguments):  # a fit that runs out of memory
        raise tf.errors.ResourceExhaustedError(None, None, "OOM")

    with pytest.raises(RuntimeError, match="partial_window='carry'.*spans epochs.*so fit"):
        recovery.fit_replayed(model, dict(x=x, y=y, batch_size=8), fit_once, position)
    assert model.window_core.micro_batch_split == 1  # nothing recovered


@pytest.mark.slow
def test_a_masked_micro_batch_split_by_a_recovery_keeps_its_divisor():
    # Issue 56: token sequences whose micro-batches of 8 hold 96, 8, 48 and 16 valid tokens;
    # the 6th micro-batch runs out of memory and is trained again as two slices of 4 rows,
    # whose valid tokens add up to the micro-batch's: the window is still its big batch.
    from tests.test_loss_divisor import MICRO, K, sequences, tagger, token_ce

    class TokensOutOfMemoryAt(OutOfMemoryAt):
        def call(self, inputs, training=None):
            return tf.cast(super().call(tf.cast(inputs, tf.float32), training), inputs.dtype)

    def build(oom=None):
        model = tagger()
        if oom is None:
            return model
        inputs = keras.Input(model.input_shape[1:], dtype="int64")
        return keras.Model(inputs, model(oom(inputs)))

    x, y = sequences()
    reference = build()
    reference.compile(keras.optimizers.SGD(0.5, momentum=0.9), token_ce())
    reference.fit(x, y, batch_size=MICRO * K, epochs=EPOCHS, shuffle=False, verbose=0)
    model = ga_tfx.wrap_model(build(TokensOutOfMemoryAt(at_call=6, limit=4)), K)
    model.compile(keras.optimizers.SGD(0.5, momentum=0.9), token_ce())
    model.fit(x, y, batch_size=MICRO, epochs=EPOCHS, shuffle=False, verbose=0)
    assert model.window_core.micro_batch_split == 2  # it happened, and was recovered
    assert (
        max(np.abs(a - b).max() for a, b in zip(reference.get_weights(), model.get_weights()))
        <= 1e-6
    )
    # The discarded window's rows, not its tokens, are taken back out of the samples seen.
    assert model.samples_seen == len(x) * EPOCHS


# Slice sizes of a micro-batch of ``rows`` split in ``split`` parts, counted by hand (not by the
# code under test's formula): ceil(rows / split) each, the last fewer (and, where the ceiling
# uses the rows up early, empty).
SLICES = {
    (8, 2): [4, 4],
    (7, 2): [4, 3],
    (6, 4): [2, 2, 2, 0],
    (10, 4): [3, 3, 3, 1],
    (5, 8): [1, 1, 1, 1, 1, 0, 0, 0],
}


@pytest.mark.parametrize("rows, split", sorted(SLICES), ids=lambda v: str(v))
def test_a_split_micro_batch_is_sliced_in_ceil_sized_parts_in_order(rows, split):
    from ga_tfx.window import split as split_lib

    state = types.SimpleNamespace(micro_batch_split=tf.Variable(split, dtype=tf.int64))
    core = types.SimpleNamespace(state=state)
    seen = []

    def step(part):
        seen.append(part["x"].numpy().tolist())
        return tf.shape(part["x"])[0]

    data = {"x": tf.range(rows)}
    split_lib.run_micro_batch(core, tf.distribute.get_strategy(), step, data)
    assert [len(s) for s in seen] == SLICES[rows, split]
    assert sum(seen, []) == list(range(rows))  # every row once, in order


@pytest.mark.slow  # one real OOM, and about 30 s at load
def test_fit_recovers_a_micro_batch_whose_last_slice_is_smaller_with_the_same_result():
    # Micro-batches of 7, K=4: windows of 28, 3 per epoch of 84 rows. The 6th micro-batch runs
    # out of memory above 4 rows; from then on each micro-batch is trained as slices of 4 and 3
    # rows (ceil(7 / 2), the last fewer): every row counted, the window still its big batch.
    n, micro, k = 84, 7, 4
    x, y = classification_data(n=n, seed=3)
    model = ga_tfx.wrap_model(_model(oom=OutOfMemoryAt(at_call=6, limit=4)), k)
    model.compile(keras.optimizers.SGD(LR, momentum=0.9), sparse_ce())
    model.fit(x, y, batch_size=micro, epochs=EPOCHS, shuffle=False, verbose=0)
    assert model.window_core.micro_batch_split == 2  # it happened, and was recovered
    reference = _model()
    reference.compile(keras.optimizers.SGD(LR, momentum=0.9), sparse_ce())
    reference.fit(x, y, batch_size=micro * k, epochs=EPOCHS, shuffle=False, verbose=0)
    print(f"vs big batch: {max_weight_diff(model, reference):.2e}")
    assert max_weight_diff(model, reference) <= 1e-5
    assert max_weight_diff(model, _model()) > MIN_MOVEMENT
    assert model.samples_seen == n * EPOCHS
