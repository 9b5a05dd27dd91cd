"""A model compiled with ``GradientAccumulateOptimizer`` survives ``model.save(dir)`` (TF
SavedModel) and ``keras.models.load_model(dir)``, and training resumed from it (pending partial
window included) equals one uninterrupted run at the weight level."""

import ga_tfx
from ga_tfx._keras import keras, tf

import os

import pytest

from tests.helpers import (
    classification_data,
    device_cases,
    iterations,
    max_weight_diff,
    mlp,
    sparse_ce,
    two_replica_strategy,
)

pytestmark = []  # fast tier, library only (no TFX)

MICRO, K = 6, 4
SPLIT = 42  # 7 micro-batches before saving: 1 update and a pending window of 3 micro-batches
N = 96  # 16 micro-batches in all: 4 updates
# One device: the same float32 ops in the same order after the restore (observed 0.0).
# MirroredStrategy: the restored replica-local window sums are split over the replicas again
# (observed 3e-8). The bound is float32 round-off only, far below one SGD step (~1e-2 here).
TOLERANCE = 1e-6

OPTIMIZERS = {
    "sgd_momentum": lambda: keras.optimizers.SGD(0.1, momentum=0.9),
    "adam": lambda: keras.optimizers.Adam(1e-2),
}


def _compiled(make_optimizer, strategy):
    with strategy.scope():
        model = mlp()
        model.compile(
            loss=sparse_ce(),
            optimizer=ga_tfx.GradientAccumulateOptimizer(make_optimizer(), accum_steps=K),
        )
    return model


@pytest.mark.parametrize(
    "name, distributed", device_cases(sorted(OPTIMIZERS), slow_on_two_replicas=["adam"])
)
def test_savedmodel_load_and_resume_match_an_uninterrupted_run(tmp_path, name, distributed):
    x, y = classification_data(n=N, seed=8)
    strategy = two_replica_strategy() if distributed else tf.distribute.get_strategy()
    uninterrupted = _compiled(OPTIMIZERS[name], strategy)
    uninterrupted.fit(x, y, batch_size=MICRO, shuffle=False, verbose=0)

    model = _compiled(OPTIMIZERS[name], strategy)
    model.fit(x[:SPLIT], y[:SPLIT], batch_size=MICRO, shuffle=False, verbose=0)
    pending = model.optimizer.window_core.micro_steps
    assert (iterations(model.optimizer), int(pending.numpy())) == (1, 3)
    path = str(tmp_path / "saved_model")
    model.save(path)  # a directory: TF SavedModel

    with strategy.scope():
        loaded = keras.models.load_model(path, compile=True)
    optimizer = loaded.optimizer
    assert isinstance(optimizer, ga_tfx.GradientAccumulateOptimizer)
    assert optimizer.accum_steps == K
    assert type(optimizer.optimizer) is type(model.optimizer.optimizer)
    # tf-keras' SavedModel loader compiles a new optimizer from the training config (for plain
    # Keras optimizers too); the saved optimizer state is in the SavedModel's checkpoint.
    with strategy.scope():
        loaded.load_weights(os.path.join(path, "variables", "variables"))
    assert iterations(optimizer) == 1

    loaded.fit(x[SPLIT:], y[SPLIT:], batch_size=MICRO, shuffle=False, verbose=0)
    assert iterations(optimizer) == iterations(uninterrupted.optimizer) == N // (MICRO * K)
    assert int(optimizer.window_core.micro_steps.numpy()) == 0
    diff = max_weight_diff(uninterrupted, loaded)
    where = "mirrored" if distributed else "one device"
    print(f"{name} {where}: SavedModel resume vs uninterrupted: max |dw| = {diff:.3g}")
    assert diff <= TOLERANCE
    assert max_weight_diff(mlp(), loaded) > 1e-2  # training moved the weights
