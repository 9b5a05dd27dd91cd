"""The generic module's ``preprocessing_fn`` run by TF Transform on Beam (``tft_beam``), on a
small table whose number columns have very different ranges: each column's features are made
from that column's own training statistics (one analyzer of each kind serves all the number
columns), checked against numpy on the column itself.

A number column's block is ``[scaled, QUANTILE_BUCKETS piecewise-linear features, missing
flag?]`` (``generic.numeric_features``). Checked per column: an empty cell takes the training
median (scaled to exactly 0) and sets the flag; the scaled value is monotone in the cell's
value and centred on the training median (a column without spread between its quartiles: divided by
its standard deviation); the piecewise-linear features sum, over
``QUANTILE_BUCKETS``, to the cell's rank among the training cells (its empirical CDF), within
the quantile sketch's error and the linear interpolation inside a bucket; the training minimum
is 0 and the maximum 1 on every one of them. Statistics taken from
another column (ranges 0-1, 1000-2000, around 50, mostly 0) fail each of these by far.
"""

from ga_tfx.pipelines.tabular import generic

import numpy as np
import pytest

pytestmark = [pytest.mark.tfx]

ROWS = 400
# The encoding's parameters as docs/pipelines.md states them, not read from the code under test
# (generic.QUANTILE_BUCKETS, TOP_K, CLIP): "its 20 training quantiles", "the 50 most frequent
# values, one bucket for the rest", "clipped to [-5, 5]".
Q = 20
TOP_K = 50
CLIP = 5.0
# |encoding sum / Q - empirical CDF|: the sketch's rank error (epsilon = 1 / (4 Q)), the linear
# interpolation inside one bucket (up to 1 / Q), one row.
CDF_TOLERANCE = 1 / (4 * Q) + 1 / Q + 1 / ROWS


def _table():
    rng = np.random.RandomState(0)
    a = rng.uniform(0, 1, ROWS).astype(np.float32)
    b = rng.randint(1000, 2000, ROWS).astype(np.int64)
    c = rng.normal(50, 1, ROWS).astype(np.float32)
    c_missing = rng.uniform(size=ROWS) < 0.2
    # Mostly zeros: no spread between the quartiles, so scaled by the standard deviation.
    d = np.where(rng.uniform(size=ROWS) < 0.8, 0.0, rng.normal(100, 10, ROWS)).astype(np.float32)
    town = rng.choice(["north", "south", "east"], ROWS)
    label = rng.choice(["yes", "no"], ROWS)
    rows = [
        {
            "a": float(a[i]),
            "b": int(b[i]),
            "c": [] if c_missing[i] else [float(c[i])],
            "d": float(d[i]),
            "town": town[i],
            "y": label[i],
        }
        for i in range(ROWS)
    ]
    return rows, {"a": a, "b": b.astype(np.float32), "c": c, "d": d}, c_missing


def _transform(rows, directory):
    import ga_tfx  # noqa: F401  (first import: selects Keras 2)
    from ga_tfx import tf

    import tensorflow_transform.beam as tft_beam
    from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils

    spec = {
        "a": tf.io.FixedLenFeature([], tf.float32),
        "b": tf.io.FixedLenFeature([], tf.int64),
        "c": tf.io.VarLenFeature(tf.float32),  # empty cells: a SparseTensor column
        "d": tf.io.FixedLenFeature([], tf.float32),
        "town": tf.io.FixedLenFeature([], tf.string),
        "y": tf.io.FixedLenFeature([], tf.string),
    }
    metadata = dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec(spec))
    config = {generic.LABEL_CONFIG: "y", generic.TASK_CONFIG: "classification"}
    with tft_beam.Context(temp_dir=directory):
        (transformed, _), _ = (rows, metadata) | tft_beam.AnalyzeAndTransformDataset(
            lambda inputs: generic.preprocessing_fn(inputs, config)
        )
    return np.array([row[generic.FEATURES_KEY] for row in transformed])


@pytest.mark.slow  # TF Transform's Beam pipeline
@pytest.mark.stack  # TF Transform differs between the TFX stacks
def test_each_number_column_is_encoded_with_its_own_training_statistics(tmp_path):
    rows, columns, c_missing = _table()
    features = _transform(rows, str(tmp_path))
    # Columns in name order: a, b (numbers), c (number with empty cells: + the flag), d
    # (number), town (one-hot over TOP_K + 1).
    widths = {"a": 1 + Q, "b": 1 + Q, "c": 2 + Q, "d": 1 + Q, "town": TOP_K + 1}
    assert features.shape == (ROWS, sum(widths.values()))
    start = 0
    for name in ("a", "b", "c", "d"):
        block = features[:, start : start + widths[name]]
        start += widths[name]
        present = ~c_missing if name == "c" else np.ones(ROWS, bool)
        values, scaled, encoding = columns[name][present], block[:, 0], block[:, 1 : 1 + Q]
        if name == "c":
            np.testing.assert_array_equal(block[:, -1], c_missing.astype(np.float32))
            assert (scaled[c_missing] == 0.0).all()  # the training median, scaled
        scaled = scaled[present]
        if name == "d":  # median 0, no spread between the quartiles: x / std (biased)
            expected = np.clip(values / values.std(), -CLIP, CLIP)
            np.testing.assert_allclose(scaled, expected, rtol=1e-5, atol=1e-6)
        order = np.argsort(values, kind="stable")
        assert (np.diff(scaled[order]) >= 0).all(), name
        assert abs(np.median(scaled)) < 0.1, (name, np.median(scaled))
        # The training minimum is below every bucket, the maximum above every one.
        assert encoding[present][values == values.min()].sum() == 0.0, name
        assert (encoding[present][values == values.max()] == 1.0).all(), name
        if name == "d":
            continue  # 80% ties at its minimum: the encoding's zero-width buckets, not a CDF
        ranked = np.sort(values)  # each cell's mid-rank among the training cells, as a CDF
        cdf = (np.searchsorted(ranked, values) + np.searchsorted(ranked, values, "right")) / (
            2 * len(values)
        )
        error = np.abs(encoding[present].sum(axis=1) / Q - cdf).max()
        assert error <= CDF_TOLERANCE, (name, error)


def _one_batch_analyzers(monkeypatch):
    """TF Transform's full-pass analyzers of ``generic._numeric_statistics`` (per column:
    ``reduce_instance_dims=False``) replaced by the same reductions over one batch, which is
    what they compute when the training data is that batch; quantiles become each column's
    own ``QUANTILE_BUCKETS - 1`` evenly spaced points between its minimum and maximum."""
    from ga_tfx import tf

    import tensorflow_transform as tft

    def per_column(cells):
        mask = tf.sparse.to_dense(
            tf.SparseTensor(cells.indices, tf.ones_like(cells.values), cells.dense_shape)
        )
        return tf.sparse.to_dense(cells), mask

    def minimum(cells, reduce_instance_dims):
        values, mask = per_column(cells)
        return tf.reduce_min(tf.where(mask > 0, values, np.inf), axis=0)

    def maximum(cells, reduce_instance_dims):
        values, mask = per_column(cells)
        return tf.reduce_max(tf.where(mask > 0, values, -np.inf), axis=0)

    def variance(cells, reduce_instance_dims):
        values, mask = per_column(cells)
        count = tf.reduce_sum(mask, axis=0)
        mean = tf.reduce_sum(values, axis=0) / count
        return tf.reduce_sum(mask * tf.square(values - mean), axis=0) / count

    def quantiles(observed, num_buckets, epsilon, reduce_instance_dims):
        present = tf.math.is_finite(observed)
        low = tf.reduce_min(tf.where(present, observed, np.inf), axis=0)
        high = tf.reduce_max(tf.where(present, observed, -np.inf), axis=0)
        return tf.transpose(tf.linspace(low, high, num_buckets + 1)[1:-1])  # [n, buckets - 1]

    for name, fake in (("min", minimum), ("max", maximum), ("var", variance)):
        monkeypatch.setattr(tft, name, fake)
    monkeypatch.setattr(tft, "quantiles", quantiles)


def test_each_number_column_gets_its_own_statistics_from_the_shared_analyzers(monkeypatch):
    """The fast half of the test above: one analyzer of each kind serves every number column,
    and each column is handed its own row of each (quantiles, minimum, maximum, variance),
    checked against numpy on the column itself (issue 53: one column's minimum used for all
    was seen only by the slow Beam run). The analyzers are one-batch reductions here
    (:func:`_one_batch_analyzers`); what TF Transform computes is the test above's."""
    from ga_tfx import tf

    _one_batch_analyzers(monkeypatch)
    rows, columns, c_missing = _table()
    present_rows = np.flatnonzero(~c_missing)
    inputs = {name: tf.constant(columns[name]) for name in ("a", "d")}
    inputs["b"] = tf.constant(columns["b"].astype(np.int64))
    inputs["c"] = tf.SparseTensor(
        np.stack([present_rows, np.zeros_like(present_rows)], axis=1).astype(np.int64),
        columns["c"][present_rows],
        [ROWS, 1],
    )
    statistics = generic._numeric_statistics(inputs)
    assert sorted(statistics) == ["a", "b", "c", "d"]
    for name, (_, present, boundaries, low, high, variance) in statistics.items():
        values = columns[name][~c_missing] if name == "c" else columns[name]
        np.testing.assert_array_equal(present.numpy()[:, 0], ~c_missing if name == "c" else True)
        # float32 statistics of float32 cells: a few units of 1.2e-7, relative.
        assert float(low) == pytest.approx(values.min(), rel=1e-6), name
        assert float(high) == pytest.approx(values.max(), rel=1e-6), name
        assert float(variance) == pytest.approx(values.var(), rel=1e-5), name
        expected = np.linspace(values.min(), values.max(), Q + 1)[1:-1]
        np.testing.assert_allclose(boundaries.numpy(), expected, rtol=1e-5, err_msg=name)
