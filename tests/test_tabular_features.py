"""What the generic module makes of a cell (``pipelines/tabular/generic.py``), without Beam.

``numeric_features`` gets the training statistics that TFT's analyzers would compute (here
from numpy on a known training column), so each feature is checked against a direct numpy
computation: imputation by the training median, the missing flag, robust scaling clipped to
``[-CLIP, CLIP]`` (an extreme eval value cannot blow up the model), the piecewise-linear
encoding, and the time features of a timestamp. The whole Transform runs in the slow tests
(``tests/test_any_csv.py``).
"""

from ga_tfx.pipelines.tabular import generic

import datetime

import numpy as np
import pytest
import tensorflow as tf

pytestmark = [pytest.mark.tfx]  # the generic module is TFX user code

# The encoding's parameters as docs/pipelines.md states them, not read from the code under test
# (CLIP, QUANTILE_BUCKETS, MISSING_TOKEN): "clipped to [-5, 5]", "its 20 training
# quantiles", an empty text cell "is the token `__empty__`".
CLIP = 5.0
QUANTILE_BUCKETS = 20
MISSING_TOKEN = "__empty__"

TRAIN = np.random.RandomState(0).gamma(2.0, 5.0, size=1000).astype(np.float32)


def _statistics(values):
    q = np.quantile(values, np.linspace(0, 1, QUANTILE_BUCKETS + 1))[1:-1]
    return dict(
        boundaries=tf.constant(q, tf.float32),
        low=float(values.min()),
        high=float(values.max()),
        variance=float(values.var()),
    )


def _features(cells, statistics, missing_indicator=True, timestamp_scale=None, dtype=tf.float32):
    raw = tf.constant([[0 if c is None else c] for c in cells], dtype)
    present = tf.constant([[c is not None] for c in cells])
    return generic.numeric_features(
        raw,
        present,
        missing_indicator=missing_indicator,
        timestamp_scale=timestamp_scale,
        **statistics,
    ).numpy()


def test_an_extreme_value_reaches_the_model_clipped():
    stats = _statistics(TRAIN)
    out = _features([1e12, -1e12, 3.0e38], stats)
    assert np.isfinite(out).all()
    assert out[:, 0].tolist() == [CLIP, -CLIP, CLIP]
    encoding = out[:, 1 : 1 + QUANTILE_BUCKETS]
    assert encoding.min() >= 0.0 and encoding.max() <= 1.0
    assert encoding[0].tolist() == [1.0] * QUANTILE_BUCKETS  # above every quantile
    assert encoding[1].tolist() == [0.0] * QUANTILE_BUCKETS


def test_a_value_is_scaled_by_the_training_median_and_iqr():
    stats = _statistics(TRAIN)
    q = np.quantile(TRAIN, np.linspace(0, 1, QUANTILE_BUCKETS + 1))
    median, iqr = q[QUANTILE_BUCKETS // 2], q[15] - q[5]
    out = _features([12.5], stats)
    assert out[0, 0] == pytest.approx((12.5 - median) / (iqr / 1.349), rel=1e-5)
    edges = np.concatenate([[TRAIN.min()], q[1:-1], [TRAIN.max()]])
    expected = np.clip((12.5 - edges[:-1]) / (edges[1:] - edges[:-1]), 0, 1)
    np.testing.assert_allclose(out[0, 1 : 1 + QUANTILE_BUCKETS], expected, rtol=1e-5)
    assert out[0, -1] == 0.0  # present: the missing flag is off


def test_an_empty_cell_is_the_training_median_with_the_missing_flag():
    stats = _statistics(TRAIN)
    median = float(np.quantile(TRAIN, 0.5))
    empty, at_median = _features([None, median], stats)
    assert empty[0] == pytest.approx(0.0, abs=1e-6)  # scaled median
    np.testing.assert_allclose(empty[1:-1], at_median[1:-1], atol=1e-6)
    assert (empty[-1], at_median[-1]) == (1.0, 0.0)
    without = _features([None], stats, missing_indicator=False)
    assert without.shape[1] == empty.shape[0] - 1


def test_a_column_without_spread_scales_by_its_standard_deviation_and_steps():
    mostly_zero = np.array([0.0] * 900 + list(np.linspace(1, 10, 100)), np.float32)
    stats = _statistics(mostly_zero)  # IQR 0: quantiles 5 %..90 % are all 0
    out = _features([0.0, 5.0], stats)
    assert out[1, 0] == pytest.approx(min(5.0 / mostly_zero.std(), CLIP), rel=1e-5)
    encoding = out[:, 1 : 1 + QUANTILE_BUCKETS]
    assert np.isfinite(out).all() and encoding.min() >= 0.0 and encoding.max() <= 1.0
    # The zero-width segments [0, 0] are the step "above 0" (a tip was given, or not).
    assert encoding[0, :17].tolist() == [0.0] * 17
    assert encoding[1, :17].tolist() == [1.0] * 17


def test_a_timestamp_gets_its_hour_and_weekday_in_utc():
    moments = [datetime.datetime(2014, 5, 13, 22, 15), datetime.datetime(2016, 1, 3, 7, 59)]
    seconds = [int(m.replace(tzinfo=datetime.timezone.utc).timestamp()) for m in moments]
    stats = _statistics(np.array(seconds * 10, np.float32))
    for scale, cells in ((1.0, seconds), (0.001, [s * 1000 for s in seconds])):
        out = _features(cells, stats, False, timestamp_scale=scale, dtype=tf.int64)
        hours, days = out[:, -31:-7], out[:, -7:]
        assert hours.argmax(1).tolist() == [m.hour for m in moments]
        assert days.argmax(1).tolist() == [m.weekday() for m in moments]  # Monday: 0
        assert hours.sum() == days.sum() == 2.0


def test_text_cells_empty_blank_and_numeric_codes():
    sparse = tf.sparse.SparseTensor([[0, 0], [2, 0]], tf.constant(["Cash", "  "]), [3, 1])
    assert generic._text(sparse).numpy().ravel().tolist() == [
        b"Cash",
        MISSING_TOKEN.encode(),
        MISSING_TOKEN.encode(),
    ]
    codes = tf.sparse.SparseTensor([[1, 0]], tf.constant([17031081000.0], tf.float64), [2, 1])
    assert generic._text(codes).numpy().ravel().tolist() == [
        MISSING_TOKEN.encode(),
        b"17031081000",
    ]
