"""Shared helpers: small models, data, and weight-level comparisons."""

import ga_tfx
from ga_tfx._keras import keras, tf

import numpy as np
import pytest

SEED = 1234
# The least movement of the big-batch weights a comparison accepts (train_pair): 100 times the
# float32 tolerance of the weight comparisons (1e-5). Measured on 96 samples, 8 updates: 8e-3
# (Lion 1e-3) to 0.56 (RMSprop with momentum).
MIN_MOVEMENT = 1e-3
# The components (Kubeflow steps) of the digits pipeline; "Tuner" only when it tunes.
PIPELINE_COMPONENTS = frozenset(
    {
        "CsvExampleGen",
        "StatisticsGen",
        "ImportSchemaGen",
        "ExampleValidator",
        "DataCheck",
        "Transform",
        "Tuner",
        "GradientAccumulationTrainer",
        "Evaluator",
        "Pusher",
    }
)


def max_weight_diff(model_a, model_b):
    """max |Δw| over all weights of two models with identical architectures."""
    weights_a, weights_b = model_a.get_weights(), model_b.get_weights()
    assert len(weights_a) == len(weights_b)
    return max(float(np.max(np.abs(a - b))) for a, b in zip(weights_a, weights_b))


def classification_data(n=96, features=8, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features)).astype("float32")
    y = rng.integers(0, classes, n).astype("int64")
    return x, y


def mlp(seed=SEED, features=8, classes=3, l2=None):
    keras.utils.set_random_seed(seed)
    reg = keras.regularizers.l2(l2) if l2 else None
    inputs = keras.Input((features,), name="x")
    h = keras.layers.Dense(16, activation="tanh", kernel_regularizer=reg, name="hidden")(inputs)
    outputs = keras.layers.Dense(classes, name="logits")(h)
    return keras.Model(inputs, outputs, name="mlp")


class HostOp(keras.layers.Layer):
    """The identity through a Python function: an op XLA cannot compile (``PyFunc``)."""

    def call(self, inputs):
        outputs = tf.numpy_function(lambda a: a, [inputs], tf.float32)
        return tf.ensure_shape(outputs, inputs.shape)


def host_op_model(features=8, outputs=3):
    """A Dense model behind :class:`HostOp`: trains without XLA, fails under jit_compile."""
    inputs = keras.Input((features,), name="x")
    return keras.Model(inputs, keras.layers.Dense(outputs)(HostOp()(inputs)))


def device_cases(names, slow_on_two_replicas=()):
    """``(name, distributed)`` parameters for a test run on one device and on 2 replicas, ids
    ``name-one_device`` / ``name-mirrored``. The 2-replica cases of ``slow_on_two_replicas``
    are in the slow tier (the fast tier keeps one 2-replica case per test)."""
    return [
        pytest.param(
            name,
            distributed,
            id=f"{name}-{'mirrored' if distributed else 'one_device'}",
            marks=[pytest.mark.slow] if distributed and name in slow_on_two_replicas else [],
        )
        for distributed in (False, True)
        for name in names
    ]


def sparse_ce():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def train_pair(
    build,
    make_optimizer,
    x,
    y,
    micro_batch,
    accum_steps,
    epochs=2,
    compile_kwargs=None,
    fit_kwargs=None,
    loss=None,
    wrap_kwargs=None,
    min_movement=MIN_MOVEMENT,
):
    """Trains ``build()`` as big batches of K*b and, wrapped, as micro-batches of b.

    Returns ``(big_batch_model, accumulation_model)``. Asserts that the big-batch training
    moved some weight by more than ``min_movement`` (default: 100 times the float32 tolerance
    of the comparisons), so that a comparison is never one of (nearly) initial weights.
    """
    compile_kwargs = dict(compile_kwargs or {})
    fit_kwargs = dict(fit_kwargs or {})
    loss = loss if loss is not None else sparse_ce()
    big = build()
    initial = big.get_weights()
    big.compile(optimizer=make_optimizer(), loss=loss, **compile_kwargs)
    big.fit(
        x,
        y,
        batch_size=micro_batch * accum_steps,
        epochs=epochs,
        shuffle=False,
        verbose=0,
        **fit_kwargs,
    )
    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(initial, big.get_weights()))
    assert moved > min_movement, f"big-batch training moved the weights by {moved:.3g} only"
    acc = ga_tfx.wrap_model(build(), accum_steps=accum_steps, **(wrap_kwargs or {}))
    acc.compile(optimizer=make_optimizer(), loss=loss, **compile_kwargs)
    acc.fit(x, y, batch_size=micro_batch, epochs=epochs, shuffle=False, verbose=0, **fit_kwargs)
    return big, acc


def iterations(optimizer):
    value = optimizer.iterations
    return int(value.numpy() if hasattr(value, "numpy") else value)


def as_dataset(x, y, batch_size, sample_weight=None):
    tensors = (x, y) if sample_weight is None else (x, y, sample_weight)
    return tf.data.Dataset.from_tensor_slices(tensors).batch(batch_size)


def two_replica_strategy(cross_device_ops=None):
    """MirroredStrategy over the two logical CPUs that conftest creates.

    Defaults to ReductionToOneDevice: the default collective all-reduce keys its instances per
    process, and several strategies in one test process then collide ("Shape mismatch in the
    collective instance"). One strategy per process, as in real training, is unaffected.
    """
    strategy = tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"],
        cross_device_ops=cross_device_ops or tf.distribute.ReductionToOneDevice(),
    )
    assert strategy.num_replicas_in_sync == 2
    return strategy
