"""GradientAccumulateOptimizer in a custom loop under MirroredStrategy (2 logical CPUs, see
conftest) == plain big-batch training on one device, at the weight level.

The loop is TF's custom-loop convention: inside ``strategy.run`` each replica's loss is
``compute_average_loss(per_example_loss, global_batch_size=n)`` (``n``: the global micro-batch)
plus ``scale_regularization_loss(model.losses)``, and ``apply_gradients`` is called on every
micro-step; ``strategy.run(opt.flush)`` applies the last, partial window.

The micro-batches are uneven (odd global sizes are split 3/2, 1/2 ... between the replicas), so
the window mean must weight each micro-batch by its sample count over both replicas to equal
the big batch.
"""

import ga_tfx
from ga_tfx._keras import keras, tf

import functools

import numpy as np
import pytest

from tests.helpers import (
    classification_data,
    iterations,
    max_weight_diff,
    mlp,
    two_replica_strategy,
)
from tests.test_distribution import CountingReduction

pytestmark = []  # fast tier, library only (no TFX)

K = 4
# Global micro-batch sizes: 6 full windows of K, then a partial window of 3 (flushed): 7 updates.
SIZES = [6, 6, 5, 6, 6, 6, 6, 3, 4, 6, 6, 6, 6, 6, 6, 6, 6, 2, 6, 6, 6, 6, 6, 6, 5, 6, 3]
UPDATES = 7
# float32 round-off: the window sum is taken in another order (per replica, then all-reduced,
# then scaled) than the big batch's mean; the observed difference is ~1e-7 after 7 updates.
TOLERANCE = 1e-5

OPTIMIZERS = {
    "sgd_nesterov": lambda: keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True),
    "adam": lambda: keras.optimizers.Adam(1e-2),
}
PER_EXAMPLE_LOSS = keras.losses.SparseCategoricalCrossentropy(
    from_logits=True, reduction=keras.losses.Reduction.NONE
)


def data():
    """``(x, y)`` of ``sum(SIZES)`` samples."""
    return classification_data(n=sum(SIZES), seed=3)


def bounds(sizes):
    """``[(start, end)]`` sample ranges of consecutive micro-batches of ``sizes``."""
    ends = np.cumsum(sizes)
    return list(zip(ends - np.asarray(sizes), ends))


def _windows():
    """(start, end) sample ranges of the big batches: K consecutive micro-batches each."""
    micro = bounds(SIZES)
    return [(micro[i][0], micro[min(i + K, len(micro)) - 1][1]) for i in range(0, len(micro), K)]


def big_batch_reference(make_optimizer, agc_clip_factor=None):
    """Plain training on one device, one big batch per window (mean loss + regularisation)."""
    x, y = data()
    model = mlp(l2=1e-2)
    optimizer = make_optimizer()
    norms = []

    @tf.function(reduce_retracing=True)
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(PER_EXAMPLE_LOSS(yb, model(xb, training=True)))
            loss += tf.add_n(model.losses)
        grads_and_vars = list(
            zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        )
        if agc_clip_factor is not None:
            grads_and_vars = ga_tfx.adaptive_clip_gradients(grads_and_vars, agc_clip_factor)
        optimizer.apply_gradients(grads_and_vars)
        return tf.linalg.global_norm([g for g, _ in grads_and_vars])

    for start, end in _windows():
        norms.append(float(step(x[start:end], y[start:end])))
    assert iterations(optimizer) == UPDATES
    return model, norms


def _uneven_dataset(x, y):
    return functools.reduce(
        lambda a, b: a.concatenate(b),
        [
            tf.data.Dataset.from_tensor_slices((x[s:e], y[s:e])).batch(e - s)
            for s, e in bounds(SIZES)
        ],
    )


def _accumulate_mirrored(make_optimizer, strategy=None, build=True, **wrapper_kwargs):
    """The custom loop under 2 replicas; returns (model, optimizer, applied flags)."""
    x, y = data()
    strategy = strategy or two_replica_strategy()
    with strategy.scope():
        model = mlp(l2=1e-2)
        optimizer = ga_tfx.GradientAccumulateOptimizer(
            optimizer=make_optimizer(), accum_steps=K, **wrapper_kwargs
        )
    if build:  # else the first apply_gradients creates the state, inside strategy.run
        optimizer.build(model.trainable_variables)
    dataset = strategy.experimental_distribute_dataset(_uneven_dataset(x, y))

    def replica_step(xb, yb, n):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(
                PER_EXAMPLE_LOSS(yb, model(xb, training=True)), global_batch_size=n
            )
            loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
        grads = tape.gradient(loss, model.trainable_variables)
        return optimizer.apply_gradients(zip(grads, model.trainable_variables), sample_count=n)

    # Micro-batches of several sizes: one trace (element_spec has an unknown batch size).
    @tf.function(input_signature=[dataset.element_spec, tf.TensorSpec([], tf.int32)])
    def step(batch, n):
        return strategy.run(replica_step, args=(*batch, n))

    @tf.function
    def flush():
        return strategy.run(optimizer.flush)

    applied = [bool(step(batch, tf.constant(n))) for batch, n in zip(dataset, SIZES)]
    applied.append(bool(flush()))
    applied.append(bool(flush()))  # nothing pending: no update
    return model, optimizer, applied


def _expected_applied():
    full = len(SIZES) // K
    return ([False] * (K - 1) + [True]) * full + [False] * (len(SIZES) % K) + [True, False]


@pytest.mark.parametrize(
    "name, build",
    [("sgd_nesterov", True), ("adam", False)],
    ids=["sgd_nesterov_built_first", "adam_built_in_strategy_run"],
)
def test_mirrored_custom_loop_matches_big_batch_with_one_all_reduce_per_update(name, build):
    """Weights == one-device big batch; all-reduces counted at run time (CountingReduction, see
    tests/test_distribution.py, whose plain-Keras control counts one per micro-batch): one
    batched reduction per update (the flush included), none on the other micro-steps."""
    make_optimizer = OPTIMIZERS[name]
    reference, _ = big_batch_reference(make_optimizer)
    counting = CountingReduction()
    model, optimizer, applied = _accumulate_mirrored(
        make_optimizer, strategy=two_replica_strategy(counting), build=build
    )
    assert applied == _expected_applied()
    assert iterations(optimizer) == UPDATES  # updates, not micro-steps
    assert int(optimizer.window_core.micro_steps.numpy()) == 0
    assert int(counting.executed.numpy()) == UPDATES  # not len(SIZES) == 27
    diff = max_weight_diff(reference, model)
    print(f"max |w_mirrored - w_big_batch| = {diff:.3g}")
    assert diff <= TOLERANCE
    assert max_weight_diff(mlp(l2=1e-2), model) > 1e-2  # training moved the weights


def test_agc_and_global_clipnorm_act_once_per_update_on_the_all_reduced_gradient():
    make_optimizer = lambda: keras.optimizers.SGD(0.5, momentum=0.9, global_clipnorm=0.15)  # noqa: E731
    reference, norms = big_batch_reference(make_optimizer, agc_clip_factor=0.05)
    assert min(norms) > 0.15  # global_clipnorm binds on every update
    model, optimizer, _ = _accumulate_mirrored(make_optimizer, agc_clip_factor=0.05)
    assert iterations(optimizer) == UPDATES
    diff = max_weight_diff(reference, model)
    print(f"max |w_mirrored - w_big_batch| (AGC, global_clipnorm) = {diff:.3g}")
    assert diff <= TOLERANCE
