"""The noise-scale probe on Keras 3 (keras-tuner 1.4.8, TensorFlow backend).

Checked against answers computed here, not by the library's functions: each window's
noise-scale estimates, loss and weights on a linear model against NumPy in float64 (McCandlish
et al. 2018, appendix A: the unbiased ``|G|²`` and ``tr(Σ)`` from the small and big batch
gradients' squared norms), and the probe's recommendation against ``B_path`` recomputed with
NumPy from the curve file it wrote and the allowed ``accum_steps`` nearest on a log2 scale. The
least-squares model held at distance 1 from its truth has ``B_simple = 17`` in closed form (as
in ``tests/test_noise_scale_probe.py``, the Keras 2 probe's tests).
"""

import ga_tfx.keras3 as ga3

import json
import math
import os

import keras
import numpy as np
import pytest

from tests.keras3_helpers import TOLERANCE, two_replicas
from tests.probe_cases import REJECTED, numpy_b_path, numpy_nearest

pytestmark = [pytest.mark.keras3]
TF = pytest.mark.keras3_backend("tensorflow")

D, MICRO = 8, 4
TRUE_B_SIMPLE = 17.0  # (d (|δ|² + σ²) + |δ|²) / |δ|² with d = 8, |δ|² = σ² = 1


def _linear(w):
    inputs = keras.Input((D,))
    layer = keras.layers.Dense(1, use_bias=False)
    model = keras.Model(inputs, layer(inputs))
    layer.kernel.assign(np.asarray(w, "float32")[:, None])
    return model


def _regression(n, seed=0, noise=1.0):
    rng = np.random.default_rng(seed)
    w_star = np.linspace(-1.0, 1.0, D)
    x = rng.normal(size=(n, D)).astype("float32")
    y = (x @ w_star + noise * rng.normal(size=n))[:, None].astype("float32")
    return x, y, w_star


class _Events(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.events = []

    def on_window_end(self, event):
        self.events.append(event)


def _numpy_windows(x, y, w, k, micro, lr, decay, replicas):
    """float64: per window (samples, loss, S, G², B_simple of the averages), and the weights
    after SGD on each window's mean gradient. MSE of a linear model: g = 2 xᵀ(xw - y) / b.
    The small gradients are each replica's share of each micro-batch (``micro / replicas``
    samples: the order of the shares changes no sum)."""
    w = np.asarray(w, np.float64)[:, None]
    rows, amplification, ema_s, ema_g, count = [], [], 0.0, 0.0, 0
    share = micro // replicas
    for start in range(0, len(x), k * micro):
        window = [slice(i, i + share) for i in range(start, min(start + k * micro, len(x)), share)]
        xs = [x[s].astype(np.float64) for s in window]
        ys = [y[s].astype(np.float64) for s in window]
        b = np.array([len(xi) for xi in xs], np.float64)
        small = [2 * xi.T @ (xi @ w - yi) / len(xi) for xi, yi in zip(xs, ys)]
        losses = [np.mean((xi @ w - yi) ** 2) for xi, yi in zip(xs, ys)]
        big = sum(bi * g for bi, g in zip(b, small)) / b.sum()
        m, total = len(window), b.sum()
        small_sq = sum(bi * float(np.sum(g**2)) for bi, g in zip(b, small)) / total
        big_sq = float(np.sum(big**2))
        trace = total * (small_sq - big_sq) / (m - 1)  # tr(Σ): (|g|² - |G|²) / (1/b - 1/B)
        grad_sq = (m * big_sq - small_sq) / (m - 1)  # |G|²: (B|G|² - b|g|²) / (B - b)
        ema_s = decay * ema_s + (1 - decay) * trace
        ema_g = decay * ema_g + (1 - decay) * grad_sq
        count += 1
        corr = 1 - decay**count  # bias-corrected as Adam's moments
        loss = float(np.dot(b, losses) / total)
        rows.append((total, loss, trace, grad_sq, (ema_s / corr) / (ema_g / corr)))
        amplification.append(
            max(small_sq / (small_sq - big_sq), m * big_sq / (m * big_sq - small_sq))
        )
        w = w - lr * big
    return rows, w[:, 0], amplification


@TF
@pytest.mark.parametrize("replicas", [1, 2])
def test_each_windows_noise_estimates_loss_and_the_weights_equal_numpy(replicas):
    """``wrap_model(..., log_noise_scale=True)`` hands each window's record to ``fit``'s
    ``on_window_end`` callbacks; its figures equal a float64 NumPy computation, the epoch's
    short last window (2 micro-batches) included; on one device and under MirroredStrategy
    with two replicas (two logical CPUs, tests/conftest.py: 2 small gradients a micro-batch)."""
    import tensorflow as tf

    k, lr, decay = 4, 0.05, 0.9
    x, y, _ = _regression((5 * k + 2) * MICRO)
    w0 = np.linspace(0.5, -0.5, D)
    strategy = two_replicas() if replicas == 2 else tf.distribute.get_strategy()
    with strategy.scope():
        model = ga3.wrap_model(_linear(w0), k, log_noise_scale=True, noise_scale_decay=decay)
        model.compile(optimizer=keras.optimizers.SGD(lr), loss="mse")
    assert model.distribute_strategy.num_replicas_in_sync == replicas
    events = _Events()
    model.fit(x, y, batch_size=MICRO, epochs=1, shuffle=False, verbose=0, callbacks=[events])
    expected, w, amplification = _numpy_windows(x, y, w0, k, MICRO, lr, decay, replicas)
    got = [
        (e.samples, e.loss, e.noise_trace_window, e.noise_grad_sq_window, e.noise_scale)
        for e in events.events
    ]
    assert [e.window for e in events.events] == [1, 2, 3, 4, 5, 6]
    assert [e.micro_batches for e in events.events] == [4, 4, 4, 4, 4, 2]
    # float32 round-off: the squared norms and the loss, sums of at most K·b·D = 128 products,
    # to ~16 eps ≈ 1e-6 relative; S and G² are differences of them, amplified by
    # |g|²/(|g|² - |G|²) and m|G|²/(m|G|² - |g|²), below 10 on these windows (asserted): 1e-5.
    # (Measured: 1.2e-6 at most, on G² of the window amplified 3.6 times.)
    assert max(amplification) < 10, amplification
    np.testing.assert_allclose(np.array(got), np.array(expected), rtol=1e-5)
    assert float(np.max(np.abs(model.get_weights()[0][:, 0] - w))) <= TOLERANCE


def _hypermodel(w, lr, accum_steps, **space):
    """A hypermodel of the linear model at weights ``w``, trained by SGD (micro-batch 4)."""
    from ga_tfx.keras3.tuning import AccumulationHyperModel

    def build(hp):
        model = _linear(w)
        model.compile(keras.optimizers.SGD(lr), "mse")
        return model

    space = dict({"accum_steps": list(accum_steps), "micro_batch_size": MICRO}, **space)
    return AccumulationHyperModel(build, space, replace_batchnorm=False)


def _least_squares_hypermodel(**space):
    """The linear model held (learning rate 0) at distance |δ| = 1 from the truth."""
    w = np.linspace(-1.0, 1.0, D) + np.full(D, 1.0 / np.sqrt(D))
    return _hypermodel(w, 0.0, (1, 2, 4, 8, 16), **space)


@TF
def test_the_probe_writes_its_curve_and_recommends_the_k_numpy_finds_from_it(tmp_path):
    from ga_tfx.keras3.tuning import NoiseScaleProbe
    from ga_tfx.tuning.probe_base import CURVE_FIELDS, PROBE_FILE

    probe_k, updates = 8, 60
    x, y, _ = _regression(updates * probe_k * MICRO)

    def probe(**seed):
        return NoiseScaleProbe(
            _least_squares_hypermodel(),
            objective="loss",
            probe_accum_steps=probe_k,
            directory=str(tmp_path),
            project_name="probe",
            **seed,
        )

    tuner = probe(seed=0)
    tuner.search(x, y, epochs=1, shuffle=False, verbose=0)
    trials = list(tuner.oracle.trials.values())
    assert len(trials) == 1 and trials[0].hyperparameters.values["accum_steps"] == probe_k
    with open(os.path.join(tuner.get_trial_dir(trials[0].trial_id), PROBE_FILE)) as f:
        curve = json.load(f)["curve"]
    assert [row["window"] for row in curve] == list(range(1, updates + 1))
    assert all(set(row) == set(CURVE_FIELDS) for row in curve)
    assert all(row["window_samples"] == probe_k * MICRO for row in curve)
    assert curve[-1]["samples"] == len(x)
    b_path = numpy_b_path(curve)
    nearest = numpy_nearest(b_path / MICRO, [1, 2, 4, 8, 16])
    report = tuner.probe_report()
    rec = report["recommendation"]
    assert report["curve"] == curve
    assert rec["measure"] == "B_path" and rec["noise_scale"] == pytest.approx(b_path, rel=1e-12)
    assert rec["accum_steps"] == nearest == 4  # the Keras 2 probe's test: 4 for 11.3..22.6
    # Its spread over 60 windows and the 3-window blocks' lean: tests/test_noise_scale_probe.py.
    assert b_path == pytest.approx(TRUE_B_SIMPLE, rel=0.25)
    assert report["probe_accum_steps"] == probe_k and report["micro_batch_size"] == MICRO
    assert tuner.get_best_hyperparameters()[0].values["accum_steps"] == 4
    assert tuner.ga_extra_record(trials[0]) == {"probe": report}
    assert probe().probe_report() == report  # reloaded: the same answer without running


def _stop_probe(tmp_path, name, target, epochs):
    """SGD on y = x w* (no noise): two windows of K=2 per epoch, validation after each."""
    from ga_tfx.keras3.tuning import NoiseScaleProbe

    x, y, _ = _regression(512, seed=1, noise=0.0)
    tuner = NoiseScaleProbe(
        _hypermodel(np.zeros(D), 0.05, (1, 2, 4)),
        objective="val_loss",
        probe_accum_steps=2,
        seed=0,
        target_loss=target,
        directory=str(tmp_path),
        project_name=name,
    )
    val: list = []  # the Tuner deep-copies callbacks; a function (and its list) stays shared
    seen = keras.callbacks.LambdaCallback(on_epoch_end=lambda _, logs: val.append(logs["val_loss"]))
    tuner.search(
        x[: 2 * 2 * MICRO],
        y[: 2 * 2 * MICRO],
        epochs=epochs,
        validation_data=(x[128:256], y[128:256]),
        callbacks=[seen],
        shuffle=False,
        verbose=0,
    )
    return tuner.probe_report(), val


@TF
def test_the_probe_stops_at_its_target_loss_and_says_whether_it_got_there(tmp_path):
    report, val = _stop_probe(tmp_path, "stopped", target=0.5, epochs=40)
    assert val[-1] <= 0.5 and all(v > 0.5 for v in val[:-1]) and 1 < len(val) < 40
    assert report["reached_target"] is True and report["target_loss"] == 0.5
    assert len(report["curve"]) == 2 * len(val)  # epochs of 2 windows
    epochs = len(val) + 2
    full, full_val = _stop_probe(tmp_path, "full", target=-1.0, epochs=epochs)
    assert full["reached_target"] is False and len(full_val) == epochs
    assert len(full["curve"]) == 2 * epochs
    assert full_val[: len(val)] == val  # the same path until the stop
    assert [r["loss"] for r in full["curve"][: len(report["curve"])]] == [
        r["loss"] for r in report["curve"]
    ]


@TF
@pytest.mark.parametrize("space, probe, match", REJECTED)
def test_the_probe_rejects_what_it_cannot_measure_or_does_not_choose(tmp_path, space, probe, match):
    from ga_tfx.keras3.tuning import NoiseScaleProbe

    with pytest.raises(ValueError, match=match):
        NoiseScaleProbe(
            _least_squares_hypermodel(**space), probe_accum_steps=probe, directory=str(tmp_path)
        )


@TF
def test_the_probe_needs_a_keras3_hypermodel_a_completed_run_and_a_target_it_can_read(tmp_path):
    from ga_tfx.keras3.tuning import NoiseScaleProbe, StopAtLoss

    with pytest.raises(TypeError, match="needs an AccumulationHyperModel"):
        NoiseScaleProbe(object(), directory=str(tmp_path))
    with pytest.raises(ValueError, match="StopAtLoss: target must be finite, got nan"):
        NoiseScaleProbe(_least_squares_hypermodel(), target_loss=math.nan)
    tuner = NoiseScaleProbe(_least_squares_hypermodel(), directory=str(tmp_path))
    with pytest.raises(ValueError, match="no completed run"):
        tuner.recommendation()
    stop = StopAtLoss(0.1)
    assert isinstance(stop, keras.callbacks.Callback)
    with pytest.raises(ValueError, match="no 'val_loss' in the epoch's logs"):
        stop.on_epoch_end(0, {"loss": 0.3})


@pytest.mark.keras3_backend("jax")
def test_on_jax_the_probe_is_refused_naming_the_tensorflow_backend(tmp_path):
    from ga_tfx.keras3.tuning import NoiseScaleProbe

    with pytest.raises(ValueError, match=r"needs the TensorFlow backend .* got 'jax'") as error:
        NoiseScaleProbe(_least_squares_hypermodel(), directory=str(tmp_path))
    assert "\n" not in str(error.value)
