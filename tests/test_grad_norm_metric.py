"""``log_grad_norm=True``: fit reports the global gradient norm of each update (issue 15).

The reference is plain big-batch training run in lockstep with SGD: before each of its
updates, the global L2 norm of the window's big-batch gradient (mean loss over the window's
samples). ``history["grad_norm"]`` must be each epoch's mean of those norms, as Keras reports
``loss``. Tolerance: float32 round-off of the reordered sums (the accumulated gradient differs
from the big-batch one by ~1e-7 relative), so rtol 1e-5; a norm taken per micro-batch, before
the window mean, of a window a partial window or of the wrong replica count is off by far more
(> 10 % here).
"""

import ga_tfx
from ga_tfx import keras, tf

import contextlib

import numpy as np
import pytest

from tests.helpers import classification_data, max_weight_diff, mlp, sparse_ce, two_replica_strategy

pytestmark = []  # fast tier; library only (no TFX)

MICRO, K = 8, 4
N = 72  # 9 micro-batches per epoch: windows of 32, 32 and 8 samples
EPOCHS = 2


def _reference_norms(x, y, policy, skipped=()):
    """Big-batch SGD, one update per window; returns the per-epoch lists of gradient norms.
    The windows numbered in ``skipped`` (0-based, each epoch) are not applied and not counted,
    as a LossScaleOptimizer skips a window whose gradient is not finite."""
    model, optimizer = mlp(seed=5), keras.optimizers.SGD(0.1)
    per_epoch = []
    for _ in range(EPOCHS):
        norms = []
        for window, start in enumerate(range(0, N, MICRO * K)):
            xb, yb = x[start : start + MICRO * K], y[start : start + MICRO * K]
            if (policy == "drop" and len(xb) < MICRO * K) or window in skipped:
                continue
            with tf.GradientTape() as tape:
                loss = sparse_ce()(yb, model(xb, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            norms.append(float(tf.linalg.global_norm(grads)))
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        per_epoch.append(norms)
    return model, per_epoch


@pytest.mark.parametrize(
    "policy, replicas", [("apply", 1), ("drop", 1), ("apply", 2)], ids=["apply", "drop", "mirrored"]
)
def test_grad_norm_is_the_epoch_mean_of_each_update_gradient_norm(policy, replicas):
    x, y = classification_data(n=N, seed=3)
    reference, norms = _reference_norms(x, y, policy)
    strategy = two_replica_strategy() if replicas == 2 else None
    with strategy.scope() if strategy else contextlib.nullcontext():
        model = ga_tfx.wrap_model(
            mlp(seed=5), accum_steps=K, partial_window=policy, log_grad_norm=True
        )
        model.compile(keras.optimizers.SGD(0.1), sparse_ce())
    history = model.fit(x, y, batch_size=MICRO, epochs=EPOCHS, shuffle=False, verbose=0)

    assert max_weight_diff(model, reference) <= 1e-5  # the same updates as the reference
    want = [float(np.mean(epoch)) for epoch in norms]
    print(f"{policy} x{replicas}: grad_norm {history.history['grad_norm']} want {want}")
    np.testing.assert_allclose(history.history["grad_norm"], want, rtol=1e-5)
    # The norms change between updates by far more than the tolerance: a stale or per-micro-
    # batch value would be seen.
    assert max(max(e) - min(e) for e in norms) > 1e-2
    # Not an evaluation metric, and not there unless asked for.
    assert "grad_norm" not in model.evaluate(x, y, verbose=0, return_dict=True)


def test_a_window_skipped_as_non_finite_is_left_out_of_the_mean():
    # One NaN sample in the second window of each epoch: the dynamic LossScaleOptimizer skips
    # that window (no update); grad_norm is the mean over the other windows, not NaN.
    x, y = classification_data(n=N, seed=3)
    x[40, 0] = np.nan  # the second window holds samples 32-63
    reference, norms = _reference_norms(x, y, "apply", skipped={1})
    model = ga_tfx.wrap_model(mlp(seed=5), accum_steps=K, log_grad_norm=True)
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))
    model.compile(optimizer, sparse_ce())
    history = model.fit(x, y, batch_size=MICRO, epochs=EPOCHS, shuffle=False, verbose=0)

    assert max_weight_diff(model, reference) <= 1e-5  # the NaN windows were skipped
    want = [float(np.mean(epoch)) for epoch in norms]
    np.testing.assert_allclose(history.history["grad_norm"], want, rtol=1e-5)


def test_off_by_default_and_checked():
    x, y = classification_data(n=N, seed=3)
    model = ga_tfx.wrap_model(mlp(seed=5), accum_steps=K)
    model.compile(keras.optimizers.SGD(0.1), sparse_ce())
    history = model.fit(x, y, batch_size=MICRO, epochs=1, verbose=0)
    assert "grad_norm" not in history.history and model.gradient_norm_metric is None
    assert model.get_config()["log_grad_norm"] is False
    with pytest.raises(ValueError, match="log_grad_norm must be True or False.*got 'yes'"):
        ga_tfx.wrap_model(mlp(seed=5), accum_steps=K, log_grad_norm="yes")
