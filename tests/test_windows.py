"""Window semantics: uneven micro-batches, partial windows at epoch ends, K=1, update counts."""

import ga_tfx
from ga_tfx import _tf_keras_internals as internals
from ga_tfx._keras import keras, tf

import numpy as np
import pytest

from tests.helpers import classification_data, iterations, max_weight_diff, mlp, sparse_ce

TOLERANCE = 1e-5
MICRO, K = 6, 4


def _micro_batches(x, y, micro):
    return [(x[i : i + micro], y[i : i + micro]) for i in range(0, len(x), micro)]


def _windows(x, y, micro, k, epochs, policy):
    """The big batches a policy should be equivalent to, in training order."""
    per_epoch = _micro_batches(x, y, micro)
    windows, pending = [], []
    for _ in range(epochs):
        for batch in per_epoch:
            pending.append(batch)
            if len(pending) == k:
                windows.append(pending)
                pending = []
        if pending and policy == "apply":
            windows.append(pending)
            pending = []
        elif policy == "drop":
            pending = []
    if pending:  # carry: what is still pending when fit returns is applied
        windows.append(pending)
    return [(np.concatenate([b[0] for b in w]), np.concatenate([b[1] for b in w])) for w in windows]


def _train_on_windows(windows, make_optimizer):
    model = mlp()
    model.compile(make_optimizer(), sparse_ce())
    dataset = tf.data.Dataset.from_generator(
        lambda: iter(windows),
        output_signature=(tf.TensorSpec((None, 8), tf.float32), tf.TensorSpec((None,), tf.int64)),
    )
    # A known length: with an unknown one, plain Keras' extra end-of-data call increments
    # optimizer.iterations once more (its apply ops do not wait for the failed get_next).
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(len(windows)))
    model.fit(dataset, epochs=1, verbose=0)
    return model


def _train_accumulating(x, y, policy, epochs, make_optimizer, callbacks=None):
    model = ga_tfx.wrap_model(mlp(), accum_steps=K, partial_window=policy)
    model.compile(make_optimizer(), sparse_ce())
    model.fit(x, y, batch_size=MICRO, epochs=epochs, shuffle=False, verbose=0, callbacks=callbacks)
    return model


# 86 samples = 14 micro-batches of 6 and one of 2 per epoch: 3 full windows + a partial one
# of 3 micro-batches (14 samples) whose last micro-batch is short.
@pytest.mark.parametrize("policy", ["apply", "drop", "carry"])
def test_partial_window_policies_match_their_big_batch_definition(policy):
    x, y = classification_data(n=86)
    make_optimizer = lambda: keras.optimizers.Adam(1e-2)
    windows = _windows(x, y, MICRO, K, epochs=3, policy=policy)
    reference = _train_on_windows(windows, make_optimizer)
    model = _train_accumulating(x, y, policy, epochs=3, make_optimizer=make_optimizer)
    assert iterations(model.optimizer) == iterations(reference.optimizer) == len(windows)
    assert max_weight_diff(reference, model) <= TOLERANCE
    # The model is left ready for the next fit: windows of K again.
    assert int(internals.steps_per_execution(model).numpy()) == K


@pytest.mark.slow  # a check of the policy test above, not of the engine
def test_policies_differ_from_each_other():
    """The policy test above can tell the policies apart."""
    x, y = classification_data(n=86)
    make_optimizer = lambda: keras.optimizers.Adam(1e-2)
    apply_model = _train_accumulating(x, y, "apply", 3, make_optimizer)
    drop_model = _train_accumulating(x, y, "drop", 3, make_optimizer)
    carry_model = _train_accumulating(x, y, "carry", 3, make_optimizer)
    assert iterations(apply_model.optimizer) == 12
    assert iterations(drop_model.optimizer) == 9
    assert iterations(carry_model.optimizer) == 12  # 45 micro-batches: 11 windows + 1 flushed
    assert max_weight_diff(apply_model, drop_model) > 1e-3
    assert max_weight_diff(apply_model, carry_model) > 1e-3


def test_uneven_micro_batches_are_weighted_by_their_size():
    """A window of micro-batches of 6, 6, 6 and 2 samples is one batch of 20 (weights n_i/N)."""
    x, y = classification_data(n=20)
    make_optimizer = lambda: keras.optimizers.SGD(0.5)
    reference = mlp()
    reference.compile(make_optimizer(), sparse_ce())
    reference.fit(x, y, batch_size=20, epochs=1, shuffle=False, verbose=0)
    model = _train_accumulating(x, y, "apply", 1, make_optimizer)
    assert iterations(model.optimizer) == 1
    assert max_weight_diff(reference, model) <= TOLERANCE

    # Weighting each micro-batch by 1/K instead would be measurably different.
    naive = mlp()
    variables = naive.trainable_variables
    grads = []
    for xb, yb in _micro_batches(x, y, MICRO):
        with tf.GradientTape() as tape:
            loss = sparse_ce()(yb, naive(xb, training=True))
        grads.append(tape.gradient(loss, variables))
    mean = [sum(g[i] for g in grads) / K for i in range(len(variables))]
    keras.optimizers.SGD(0.5).apply_gradients(zip(mean, variables))
    assert max_weight_diff(reference, naive) > 1e-4


def test_dataset_of_unknown_length_needs_steps_per_epoch():
    """Keras cannot size an execution over data of unknown length: a clear error, and with
    steps_per_epoch (in micro-batches) a repeated dataset of unknown length trains normally."""
    x, y = classification_data(n=96)
    batches = _micro_batches(x, y, MICRO)
    signature = (tf.TensorSpec((None, 8), tf.float32), tf.TensorSpec((None,), tf.int64))
    dataset = tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=signature)
    model = ga_tfx.wrap_model(mlp(), accum_steps=K)
    model.compile(keras.optimizers.Adam(1e-2), sparse_ce())
    with pytest.raises(ValueError, match="steps_per_epoch"):
        model.fit(dataset, epochs=1, verbose=0)
    model.fit(dataset.repeat(), steps_per_epoch=len(batches), epochs=2, verbose=0)
    reference = _train_on_windows(
        _windows(x, y, MICRO, K, 2, "apply"), lambda: keras.optimizers.Adam(1e-2)
    )
    assert iterations(model.optimizer) == 8
    assert max_weight_diff(reference, model) <= TOLERANCE


def test_accum_steps_one_is_bit_identical_to_plain_keras():
    x, y = classification_data()
    plain = mlp()
    plain.compile(keras.optimizers.Adam(1e-2), sparse_ce(), metrics=["accuracy"])
    plain_history = plain.fit(x, y, batch_size=MICRO, epochs=2, shuffle=False, verbose=0)
    wrapped = ga_tfx.wrap_model(mlp(), accum_steps=1)
    wrapped.compile(keras.optimizers.Adam(1e-2), sparse_ce(), metrics=["accuracy"])
    wrapped_history = wrapped.fit(x, y, batch_size=MICRO, epochs=2, shuffle=False, verbose=0)
    for a, b in zip(plain.get_weights(), wrapped.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert plain_history.history == wrapped_history.history
    assert iterations(wrapped.optimizer) == 32


def test_iterations_count_updates_and_history_is_per_epoch():
    x, y = classification_data()
    model = _train_accumulating(x, y, "apply", 2, lambda: keras.optimizers.Adam(1e-2))
    assert iterations(model.optimizer) == 8  # 2 epochs x 16 micro-batches / K
    assert int(model._train_counter.numpy()) == 8  # Keras' step counter (TensorBoard) too


def test_metrics_cover_every_sample_of_the_window():
    x, y = classification_data()
    model = ga_tfx.wrap_model(mlp(), accum_steps=K)
    model.compile(keras.optimizers.SGD(0.0), sparse_ce(), metrics=["accuracy"])
    history = model.fit(x, y, batch_size=MICRO, epochs=1, shuffle=False, verbose=0)
    # With a zero learning rate the weights never change: the epoch's loss and accuracy are
    # those of the initial model over all 96 samples.
    loss, accuracy = model.evaluate(x, y, batch_size=96, verbose=0)
    assert history.history["loss"][0] == pytest.approx(loss, rel=1e-6)
    assert history.history["accuracy"][0] == pytest.approx(accuracy)


@pytest.mark.parametrize("policy", ["apply", "drop", "carry"])
def test_train_on_batch_treats_its_batch_as_one_window(policy):
    """``train_on_batch`` is one update on the whole batch: plain Keras' update (SGD with
    momentum, weights and iterations), whatever K and whatever the partial-window policy."""
    x, y = classification_data(n=48)
    plain = mlp()
    plain.compile(keras.optimizers.SGD(0.1, momentum=0.9), sparse_ce())
    model = ga_tfx.wrap_model(mlp(), accum_steps=K, partial_window=policy)
    model.compile(keras.optimizers.SGD(0.1, momentum=0.9), sparse_ce())
    for batch in (slice(0, 24), slice(24, 48)):
        plain_loss = plain.train_on_batch(x[batch], y[batch])
        loss = model.train_on_batch(x[batch], y[batch])
        assert loss == pytest.approx(plain_loss, rel=1e-6)
    assert iterations(model.optimizer) == iterations(plain.optimizer) == 2
    assert model.train_function.pending() == 0
    assert max_weight_diff(plain, model) <= TOLERANCE
    assert max_weight_diff(plain, mlp()) > 1e-3  # the weights moved


class _BatchEnds(keras.callbacks.Callback):
    """Counts Keras' batch-end calls: one per call of the train function (an execution)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def on_train_batch_end(self, batch, logs=None):
        self.count += 1


# 86 samples = 15 micro-batches per epoch. With steps_per_execution = 2K = 8, an epoch is one
# execution of 8 micro-batches (2 windows) and one of 7 (1 window + the partial one); carry
# makes later epochs start with the short execution that completes the pending window.
@pytest.mark.parametrize("policy", ["apply", "drop", "carry"])
def test_several_windows_per_execution_match_their_big_batch_definition(policy):
    x, y = classification_data(n=86)
    make_optimizer = lambda: keras.optimizers.SGD(0.1, momentum=0.9)
    windows = _windows(x, y, MICRO, K, epochs=3, policy=policy)
    reference = _train_on_windows(windows, make_optimizer)
    model = ga_tfx.wrap_model(mlp(), accum_steps=K, partial_window=policy)
    model.compile(make_optimizer(), sparse_ce(), steps_per_execution=2 * K)
    ends = _BatchEnds()
    history = model.fit(
        x, y, batch_size=MICRO, epochs=3, shuffle=False, verbose=0, callbacks=[ends]
    )
    assert iterations(model.optimizer) == len(windows)
    assert max_weight_diff(reference, model) <= TOLERANCE
    if policy != "carry":
        assert ends.count == 3 * 2  # two executions per epoch, not one per window
    # The loss is every micro-batch's, as with one window per execution.
    one_window = _train_accumulating(x, y, policy, epochs=3, make_optimizer=make_optimizer)
    assert history.history["loss"] == pytest.approx(one_window.history.history["loss"], rel=1e-5)
    assert max_weight_diff(one_window, model) <= TOLERANCE
    assert int(internals.steps_per_execution(model).numpy()) == 2 * K


# One window per call in the slow tier: 2K covers the data ending inside the second window.
@pytest.mark.parametrize("steps_per_execution", [pytest.param(K, marks=pytest.mark.slow), 2 * K])
@pytest.mark.parametrize("policy", ["apply", "drop", "carry"])
def test_data_that_ends_inside_an_execution_ends_the_window_by_the_policy(
    policy, steps_per_execution
):
    """steps_per_epoch beyond the data (Keras stops the epoch when next() finds no more): the
    micro-batches before the end form the epoch's last window, applied, dropped or carried
    (and applied when fit returns) as an epoch end's would be."""
    x, y = classification_data(n=86)
    batches = _micro_batches(x, y, MICRO)
    signature = (tf.TensorSpec((None, 8), tf.float32), tf.TensorSpec((None,), tf.int64))
    dataset = tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=signature)
    make_optimizer = lambda: keras.optimizers.SGD(0.1, momentum=0.9)
    model = ga_tfx.wrap_model(mlp(), accum_steps=K, partial_window=policy)
    model.compile(make_optimizer(), sparse_ce(), steps_per_execution=steps_per_execution)
    model.fit(dataset, steps_per_epoch=24, epochs=1, verbose=0)  # the data has 15
    windows = _windows(x, y, MICRO, K, epochs=1, policy=policy)
    reference = _train_on_windows(windows, make_optimizer)
    assert iterations(model.optimizer) == len(windows) == (3 if policy == "drop" else 4)
    assert max_weight_diff(reference, model) <= TOLERANCE
    assert model.train_function.pending() == 0


class _WindowAtBatchEnd(keras.callbacks.Callback):
    """At every batch end: the micro-batches pending in the window, and the updates so far."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def on_train_batch_end(self, batch, logs=None):
        self.seen.append((self.model.train_function.pending(), iterations(self.model.optimizer)))


def test_carry_keeps_every_execution_a_whole_window():
    """With carry, an epoch's first execution completes the pending window (K - pending
    micro-batches), so each batch end but an epoch's last follows exactly one update and
    sees empty buffers: a checkpoint taken there holds no half window."""
    x, y = classification_data(n=86)  # 15 micro-batches per epoch: 3 left pending after epoch 1
    model = ga_tfx.wrap_model(mlp(), accum_steps=K, partial_window="carry")
    model.compile(keras.optimizers.SGD(0.1), sparse_ce())
    probe = _WindowAtBatchEnd()
    model.fit(x, y, batch_size=MICRO, epochs=3, shuffle=False, verbose=0, callbacks=[probe])
    # Epoch 1: 4+4+4+3; epoch 2: 1 (completes), 4, 4, 4, 2 left; epoch 3: 2, 4, 4, 4, 1 left.
    assert probe.seen == [
        (0, 1), (0, 2), (0, 3), (3, 3),
        (0, 4), (0, 5), (0, 6), (0, 7), (2, 7),
        (0, 8), (0, 9), (0, 10), (0, 11), (1, 11),
    ]  # fmt: skip
