"""The noise-scale probe (issue 25, item 4): ``accum_steps`` from a measured noise scale.

``recommend_accum_steps`` is checked against answers worked out by hand (the allowed value
nearest to ``B_simple / micro-batch`` on a log2 scale); :class:`ga_tfx.tuning.NoiseScaleProbe`
against a noise scale known in closed form (linear least squares with Gaussian inputs, as in
``tests/test_noise_scale.py``: ``B_simple = 17``, so with micro-batches of 4 the ideal
``accum_steps`` is 4.25 and the power of two nearest to it is 4). The brute-force validation
(a sweep of effective batches, the fitted critical batch) is ``benchmarks/critical_batch.py``.
"""

import ga_tfx  # noqa: F401
from ga_tfx import keras, tf
from ga_tfx.sizing.batch_choice import path_noise_scale, recommend_accum_steps
from ga_tfx.tuning import AccumulationHyperModel, NoiseScaleProbe, StopAtLoss

import math

import numpy as np
import pytest

from tests.probe_cases import REJECTED, numpy_b_path, numpy_nearest

pytestmark = []  # fast tier; library only (no TFX)


@pytest.mark.parametrize(
    "noise_scale, micro, choices, expected, clamped",
    [
        # 93.1 / 32 = 2.91, log2 = 1.54: nearer 4 (0.46) than 2 (0.54); linear distance: 2.
        (93.1, 32, (1, 2, 4, 8), 4, ""),
        (40.0, 32, (1, 2, 4, 8), 1, ""),  # 1.25, log2 = 0.32: 1 (the lower end, not below it)
        (30.0, 32, (1, 2, 4), 1, ""),  # 0.94: below 1 by less than half an octave: nearest
        (40.0, 32, (2, 4), 2, "below"),  # 1.25: half an octave below 2 is 1.41
        (64.0, 32, (1, 4), 1, ""),  # 2: exactly between 1 and 4 on a log2 scale: the smaller
        (256.0, 32, (3, 6, 12), 6, ""),  # 8, log2 = 3: 6 (0.415) before 12 (0.585)
        (1000.0, 32, (1, 2, 4), 4, "above"),  # 31.25: beyond the largest allowed
        (5.0, 32, (4, 2, 1), 1, "below"),  # 0.16: below the smallest (choices sorted)
        (17.0, 4, (1, 2, 4, 8, 16), 4, ""),  # the closed form below: 4.25 -> 4
    ],
)
def test_recommendation_is_the_allowed_value_nearest_on_a_log2_scale(
    noise_scale, micro, choices, expected, clamped
):
    rec = recommend_accum_steps(noise_scale, micro, choices)
    assert rec.accum_steps == expected
    assert rec.effective_batch_size == expected * micro
    assert rec.ideal_accum_steps == pytest.approx(noise_scale / micro)
    assert rec.clamped == clamped
    assert rec.choices == tuple(sorted(choices))
    # The reason says what was measured and what was taken (the report prints it).
    assert f"{noise_scale:.4g} / {micro}" in rec.reason
    assert f"effective batch {expected * micro}" in rec.reason
    words = {"above": "above the largest", "below": "below the smallest", "": "nearest allowed"}
    assert words[clamped] in rec.reason
    assert type(rec).from_dict(rec.to_dict()) == rec  # what the trial record carries


@pytest.mark.parametrize("bad", [math.nan, math.inf, 0.0, -3.5, None, "17", True])
def test_an_unusable_noise_scale_is_an_error_naming_it(bad):
    with pytest.raises(ValueError, match=r"noise_scale must be a finite number > 0.*got"):
        recommend_accum_steps(bad, 32, (1, 2, 4))


@pytest.mark.parametrize(
    "micro, choices, match",
    [
        (0, (1, 2), "micro_batch_size must be an integer >= 1, got 0"),
        (32, (), r"choices .* non-empty list of integers >= 1, got \[\]"),
        (32, (2, 0), r"got \[2, 0\]"),
        (32, (2, 2.0), r"got \[2, 2.0\]"),
    ],
)
def test_bad_micro_batch_or_choices_are_errors_naming_them(micro, choices, match):
    with pytest.raises(ValueError, match=match):
        recommend_accum_steps(17.0, micro, choices)


# ------------------------------------------------------------------------------- B_path
def test_b_path_of_a_constant_noise_scale_is_that_noise_scale_for_any_window_size():
    # B_simple = S / G² = 17 in every window: each weight is 1 / (1 + 17 / B) and
    # B (1 - w) = 17 w, so the path's value is 17 whatever the windows' sizes.
    windows = [(32, 17.0 * g, g) for g in (1.0, 2.0, 0.5, 1.0)]
    assert path_noise_scale(windows) == pytest.approx(17.0)
    uneven = [(b, 17.0, 1.0) for b in (16, 48, 8, 64)]
    assert path_noise_scale(uneven, half_span=0) == pytest.approx(17.0)


def test_b_path_weights_each_window_by_its_progress():
    # Two windows at B_simple 10, two at 90, B = 10 (worked by hand). One window at a time
    # (half_span 0): w = 1/(1+1) = 0.5, 0.5, then 1/(1+9) = 0.1, 0.1; B_path =
    # 10 (0.5 + 0.5 + 0.9 + 0.9) / (0.5 + 0.5 + 0.1 + 0.1) = 28 / 1.2. The plain ratio of sums
    # (200 / 4 = 50) and the mean over the windows (50) weight the noisy windows as much.
    windows = [(10, 10.0, 1.0), (10, 10.0, 1.0), (10, 90.0, 1.0), (10, 90.0, 1.0)]
    assert path_noise_scale(windows, half_span=0) == pytest.approx(28 / 1.2)
    # Blocks of 3 (the default): w = G² sums / (G² + S/B) sums over windows t-1..t+1:
    # 2/(2+2) = 1/2, 3/(3+11) = 3/14, 3/(3+19) = 3/22, 2/(2+18) = 1/10.
    w = [1 / 2, 3 / 14, 3 / 22, 1 / 10]
    expected = 10 * sum(1 - v for v in w) / sum(w)
    assert path_noise_scale(windows) == pytest.approx(expected)
    assert expected != pytest.approx(28 / 1.2, rel=0.1)  # the blocks matter here


def test_b_path_leaves_out_missing_estimates_clips_weights_and_says_when_nothing_was_measured():
    with_gaps = [(32, 17.0, 1.0), (32, None, None), (32, math.nan, 1.0), (32, 17.0, 1.0)]
    assert path_noise_scale(with_gaps) == pytest.approx(17.0)
    assert math.isnan(path_noise_scale([(32, None, None)]))
    # G² estimates at or below 0 (the gradient not told apart from its noise): weight 0.
    assert path_noise_scale([(32, 50.0, -1.0), (32, 40.0, -0.5)]) == math.inf
    # A progress weight is clipped to [0, 1]: G² = -0.2 with S/B = 3 would weigh -0.2/2.8;
    # as 0: 10 (0.5 + 0.5 + 1) / (0.5 + 0.5 + 0) = 20 (unclipped: 20.71 / 0.93 = 22.3).
    negative = [(10, 10.0, 1.0), (10, 10.0, 1.0), (10, 30.0, -0.2)]
    assert path_noise_scale(negative, half_span=0) == pytest.approx(20.0)
    with pytest.raises(ValueError, match="B_path"):  # the probe's error names the measure
        recommend_accum_steps(math.inf, 4, [1, 2, 4], measure="B_path")


# ------------------------------------------------------------------- the probe, end to end
D, MICRO, PROBE_K, WINDOWS = 8, 4, 8, 60
TRUE_B_SIMPLE = 17.0  # (d (|δ|² + σ²) + |δ|²) / |δ|² with d = 8, |δ|² = σ² = 1


def _least_squares_hypermodel(accum_steps=(1, 2, 4, 8, 16), **space):
    """A linear model held (learning rate 0) at distance |δ| = 1 from the truth."""
    w_star = np.linspace(-1.0, 1.0, D).astype("float32")
    w = w_star + np.full(D, 1.0 / np.sqrt(D), "float32")

    def build(hp):
        inputs = keras.Input((D,))
        layer = keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")
        model = keras.Model(inputs, layer(inputs))
        layer.kernel.assign(w[:, None])
        model.compile(keras.optimizers.SGD(0.0), "mse")
        return model

    rng = np.random.default_rng(0)
    n = WINDOWS * PROBE_K * MICRO
    x = rng.normal(size=(n, D)).astype("float32")
    y = (x @ w_star + rng.normal(size=n).astype("float32"))[:, None]
    space = dict({"accum_steps": list(accum_steps), "micro_batch_size": MICRO}, **space)
    return AccumulationHyperModel(build, space, replace_batchnorm=False), x, y


def test_the_probe_measures_a_known_noise_scale_and_recommends_accum_steps_from_it(tmp_path):
    hypermodel, x, y = _least_squares_hypermodel()
    tuner = NoiseScaleProbe(
        hypermodel,
        objective="loss",
        probe_accum_steps=PROBE_K,
        seed=0,
        directory=str(tmp_path),
        project_name="probe",
    )
    tuner.search(
        tf.data.Dataset.from_tensor_slices((x, y)), samples_per_epoch=len(x), epochs=1, verbose=0
    )
    report = tuner.probe_report()
    curve = report["curve"]
    assert [row["window"] for row in curve] == list(range(1, WINDOWS + 1))
    assert curve[-1]["samples"] == len(x)  # every probe window was PROBE_K micro-batches
    rec = report["recommendation"]
    # B_path of a constant noise scale is that noise scale. Its spread: 2.3 % over 400
    # windows (tests/test_noise_scale.py), so about 2.3 % x sqrt(400 / 60) = 5.9 % over the
    # probe's 60; the weights of 3-window blocks lean it up a little (1 / |g|² is convex:
    # +3 to +11 % over 3 data orders, measured). 25 % is more than three spreads past that
    # (measured here: 18.1, +7 %). K = 4 holds for any estimate in [11.3, 22.6].
    assert rec["measure"] == "B_path"
    assert rec["noise_scale"] == pytest.approx(numpy_b_path(curve), rel=1e-12)
    assert rec["accum_steps"] == numpy_nearest(numpy_b_path(curve) / MICRO, [1, 2, 4, 8, 16])
    assert rec["noise_scale"] == pytest.approx(TRUE_B_SIMPLE, rel=0.25)
    assert all(row["window_samples"] == PROBE_K * MICRO for row in curve)
    assert all(row["noise_grad_sq_window"] is not None for row in curve)
    assert rec["accum_steps"] == 4 and rec["effective_batch_size"] == 16
    assert report["probe_accum_steps"] == PROBE_K and report["micro_batch_size"] == MICRO
    # The probe trained at its own accum_steps; the best hyperparameters carry the choice.
    trial = tuner.oracle.get_best_trials(1)[0]
    assert trial.hyperparameters.values["accum_steps"] == PROBE_K
    assert tuner.get_best_hyperparameters()[0].values["accum_steps"] == 4
    # A reloaded tuner (a resumed Tuner component) gives the same answer without running.
    again = NoiseScaleProbe(
        _least_squares_hypermodel()[0],
        objective="loss",
        probe_accum_steps=PROBE_K,
        directory=str(tmp_path),
        project_name="probe",
    )
    assert again.probe_report() == report


def _regression_probe(tmp_path, name, target, epochs):
    """A linear model trained by SGD on y = x w* (no noise): its loss falls towards 0."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(512, D)).astype("float32")
    y = (x @ np.linspace(-1.0, 1.0, D).astype("float32"))[:, None]

    def build(hp):
        inputs = keras.Input((D,))
        model = keras.Model(inputs, keras.layers.Dense(1, kernel_initializer="zeros")(inputs))
        model.compile(keras.optimizers.SGD(0.05), "mse")
        return model

    space = {"accum_steps": [1, 2, 4], "micro_batch_size": MICRO}
    tuner = NoiseScaleProbe(
        AccumulationHyperModel(build, space, replace_batchnorm=False),
        objective="val_loss",
        probe_accum_steps=2,
        seed=0,
        directory=str(tmp_path),
        project_name=name,
    )
    val: list = []  # the Tuner deep-copies callbacks; a function (and its list) stays shared
    seen = keras.callbacks.LambdaCallback(on_epoch_end=lambda _, logs: val.append(logs["val_loss"]))
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
    tuner.search(
        data,
        samples_per_epoch=2 * 2 * MICRO,  # two windows per epoch: the loss read every 2
        epochs=epochs,
        validation_data=(x[:128], y[:128]),
        callbacks=[seen, StopAtLoss(target)],
        verbose=0,
    )
    return tuner.probe_report()["curve"], val


def test_stop_at_loss_ends_the_probe_at_the_first_epoch_at_the_target(tmp_path):
    curve, val = _regression_probe(tmp_path, "stopped", target=0.5, epochs=40)
    # Stopped after the first epoch at or below the target: every earlier one was above.
    assert val[-1] <= 0.5 and all(v > 0.5 for v in val[:-1]) and 1 < len(val) < 40
    epochs = len(val) + 2  # a target never met: every epoch runs, past where the other stopped
    full, full_val = _regression_probe(tmp_path, "full", target=-1.0, epochs=epochs)
    assert len(full) == 2 * epochs and len(full_val) == epochs  # epochs of 2 windows
    assert len(curve) == 2 * len(val) < len(full)
    assert val == full_val[: len(val)]
    # The stopped probe's path is the full one's first windows (the same data and seed).
    assert [r["loss"] for r in curve] == [r["loss"] for r in full[: len(curve)]]


@pytest.mark.parametrize(
    "bad, error", [(None, TypeError), (True, TypeError), (math.nan, ValueError)]
)
def test_stop_at_loss_needs_a_finite_target_and_the_monitored_loss(bad, error):
    with pytest.raises(error, match="StopAtLoss: target"):
        StopAtLoss(bad)
    with pytest.raises(ValueError, match="no 'val_loss' in the epoch's logs"):
        StopAtLoss(0.1).on_epoch_end(0, {"loss": 0.3})


@pytest.mark.parametrize("space, probe, match", REJECTED)
def test_the_probe_rejects_what_it_cannot_measure_or_does_not_choose(tmp_path, space, probe, match):
    hypermodel = _least_squares_hypermodel(**space)[0]
    with pytest.raises(ValueError, match=match):
        NoiseScaleProbe(hypermodel, probe_accum_steps=probe, directory=str(tmp_path))


def test_no_recommendation_without_a_completed_probe(tmp_path):
    tuner = NoiseScaleProbe(_least_squares_hypermodel()[0], directory=str(tmp_path))
    with pytest.raises(ValueError, match="no completed run"):
        tuner.get_best_hyperparameters()
