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
Q = generic.QUANTILE_BUCKETS
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
    widths = {"a": 1 + Q, "b": 1 + Q, "c": 2 + Q, "d": 1 + Q, "town": generic.TOP_K + 1}
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
            expected = np.clip(values / values.std(), -generic.CLIP, generic.CLIP)
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
