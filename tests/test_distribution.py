"""MirroredStrategy with 2 replicas (two logical CPUs, see conftest) == single device."""

import ga_tfx
from ga_tfx._keras import keras, tf

import numpy as np
import pytest

from tests.helpers import (
    classification_data,
    iterations,
    max_weight_diff,
    mlp,
    sparse_ce,
    two_replica_strategy,
)

TOLERANCE = 1e-5
MICRO, K = 6, 4  # global micro-batch of 6 = 3 samples per replica


class CountingReduction(tf.distribute.ReductionToOneDevice):
    """Cross-device ops that count how many reductions execute inside the train function.

    Reductions run eagerly by Keras' own loop (reading the replica-local metric variables for
    the logs) are not gradient all-reduces and are the same with and without ga_tfx; only
    reductions traced into a graph are counted, with a counter that runs in that graph.
    """

    def __init__(self):
        super().__init__()
        with tf.init_scope():
            self.executed = tf.Variable(0, dtype=tf.int64, trainable=False)
        self._depth = 0  # ReductionToOneDevice's batch reduce calls reduce once per tensor

    def _counted(self, reduce, *args, **kwargs):
        self._depth += 1
        try:
            result = reduce(*args, **kwargs)
        finally:
            self._depth -= 1
        if self._depth == 0 and not tf.executing_eagerly():
            flat = [v for value in tf.nest.flatten(result) for v in value.values]
            with tf.control_dependencies(flat):
                self.executed.assign_add(1)
        return result

    def reduce_implementation(self, *args, **kwargs):
        return self._counted(super().reduce_implementation, *args, **kwargs)

    def batch_reduce_implementation(self, *args, **kwargs):
        return self._counted(super().batch_reduce_implementation, *args, **kwargs)


def _two_replicas(cross_device_ops=None):
    return two_replica_strategy(cross_device_ops)


def _embedding_mlp(seed=21):
    keras.utils.set_random_seed(seed)
    dense = keras.Input((8,), name="x")
    tokens = keras.Input((3,), dtype="int32", name="tokens")
    embedded = keras.layers.Flatten()(keras.layers.Embedding(30, 4)(tokens))
    h = keras.layers.Concatenate()([dense, embedded])
    h = keras.layers.Dense(16, activation="relu", kernel_regularizer=keras.regularizers.l2(1e-2))(h)
    return keras.Model([dense, tokens], keras.layers.Dense(3)(h))


def _dense_mlp():
    return mlp(seed=22, l2=1e-2)


def _data(n=96, seed=0):
    x, y = classification_data(n=n, seed=seed)
    tokens = np.random.default_rng(seed).integers(0, 30, (n, 3)).astype("int32")
    return (x, tokens), y


def _fit(model, x, y, micro, epochs, **fit_kwargs):
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(micro)
    model.fit(dataset, epochs=epochs, verbose=0, **fit_kwargs)


@pytest.mark.parametrize(
    "build, make_optimizer",
    [
        pytest.param(  # slow tier: SGD with momentum (next) sees any scale error
            _embedding_mlp, lambda: keras.optimizers.Adam(1e-2), marks=pytest.mark.slow
        ),
        (_embedding_mlp, lambda: keras.optimizers.SGD(0.1, momentum=0.9)),
        (_dense_mlp, lambda: keras.optimizers.SGD(0.1, momentum=0.9, global_clipnorm=0.5)),
    ],
    ids=["embedding_adam", "embedding_sgd_momentum", "dense_sgd_momentum_global_clipnorm"],
)
def test_mirrored_two_replicas_match_single_device(build, make_optimizer):
    x, y = _data(n=92)  # 92 = 15 micro-batches of 6 + one of 2: uneven last window
    if build is _dense_mlp:
        x = x[0]
    single = ga_tfx.wrap_model(build(), accum_steps=K)
    single.compile(make_optimizer(), sparse_ce())
    _fit(single, x, y, MICRO, epochs=2)

    strategy = _two_replicas()
    with strategy.scope():
        mirrored = ga_tfx.wrap_model(build(), accum_steps=K)
        mirrored.compile(make_optimizer(), sparse_ce())
    _fit(mirrored, x, y, MICRO, epochs=2)

    big = build()
    big.compile(make_optimizer(), sparse_ce())
    _fit(big, x, y, MICRO * K, epochs=2)

    assert iterations(mirrored.optimizer) == iterations(single.optimizer) == 8
    assert max_weight_diff(single, mirrored) <= TOLERANCE
    assert max_weight_diff(big, mirrored) <= TOLERANCE


def test_gradients_are_all_reduced_once_per_update():
    """Counted at run time: one batched all-reduce per window (gradients and sample count
    together), none per micro-batch, none inside the optimizer."""
    x, y = _data(n=96)
    counting = CountingReduction()
    strategy = _two_replicas(counting)
    with strategy.scope():
        model = ga_tfx.wrap_model(_embedding_mlp(), accum_steps=K)
        model.compile(keras.optimizers.Adam(1e-2), sparse_ce())
    _fit(model, x, y, MICRO, epochs=2)
    updates = iterations(model.optimizer)
    assert updates == 8
    assert int(counting.executed.numpy()) == updates

    # Plain Keras on the same micro-batches reduces once per micro-batch: 32 times.
    plain_counting = CountingReduction()
    with _two_replicas(plain_counting).scope():
        plain = _embedding_mlp()
        plain.compile(keras.optimizers.Adam(1e-2), sparse_ce())
    _fit(plain, x, y, MICRO, epochs=2)
    assert int(plain_counting.executed.numpy()) == 32


@pytest.mark.slow  # one device: test_windows.py's several-windows tests (fast tier)
def test_several_windows_per_execution_under_mirrored_reduce_once_per_update():
    """steps_per_execution = 2K on 2 replicas: big-batch weights, one all-reduce per update
    (the in-loop updates included), the epoch's short last window applied."""
    x, y = _data(n=92)  # 16 micro-batches: executions of 8 and 8, the last window short
    counting = CountingReduction()
    strategy = _two_replicas(counting)
    make_optimizer = lambda: keras.optimizers.SGD(0.1, momentum=0.9)
    with strategy.scope():
        mirrored = ga_tfx.wrap_model(_embedding_mlp(), accum_steps=K)
        mirrored.compile(make_optimizer(), sparse_ce(), steps_per_execution=2 * K)
    _fit(mirrored, x, y, MICRO, epochs=2)
    big = _embedding_mlp()
    big.compile(make_optimizer(), sparse_ce())
    _fit(big, x, y, MICRO * K, epochs=2)
    assert iterations(mirrored.optimizer) == 8
    assert int(counting.executed.numpy()) == 8
    assert max_weight_diff(big, mirrored) <= TOLERANCE
