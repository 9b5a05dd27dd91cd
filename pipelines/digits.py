"""The digits pipeline's user code: Transform's ``preprocessing_fn`` and the Trainer's model.

The shipped data (``pipelines/data/digits/digits.csv``) holds 1797 real 8x8 images as
``pixel_00`` .. ``pixel_63`` (integers 0-16) and ``label`` (0-9). Referenced by dotted path
(``ga_tfx.pipelines.digits.preprocessing_fn``, ``ga_tfx.pipelines.digits``), so nothing is
packaged at run time and the same names work in the Kubeflow image.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx._keras import keras, tf
from ga_tfx.pipelines.common import csv_dir

import csv
import math
import os

PIXEL_KEYS = tuple(f"pixel_{i:02d}" for i in range(64))
RAW_LABEL_KEY = "label"
FEATURES_KEY = "pixels_xf"  # float32 [batch, 64], grey levels scaled to [0, 1]
LABEL_KEY = "label_xf"
CLASSES = 10
COLUMNS = PIXEL_KEYS + (RAW_LABEL_KEY,)


PIXEL_RANGE = (0, 16)  # grey levels of the 8x8 images
LABEL_RANGE = (0, CLASSES - 1)  # the known classes
# The curated schema of the shipped data (ImportSchemaGen): the same ranges, every value required.
SCHEMA_FILE = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "data", "digits_schema.pbtxt"
)
# CsvExampleGen's default split: hash buckets 2:1 (train:eval).
TRAIN_FRACTION = 2 / 3


def allowed(column):
    """What ``column`` may hold, in words."""
    if column == RAW_LABEL_KEY:
        return f"the known classes, integers {LABEL_RANGE[0]}..{LABEL_RANGE[1]}"
    return f"integers {PIXEL_RANGE[0]}..{PIXEL_RANGE[1]} (grey levels)"


def check_value(column, text):
    """What is wrong with the CSV cell ``text`` of ``column`` (``None``: nothing)."""
    low, high = LABEL_RANGE if column == RAW_LABEL_KEY else PIXEL_RANGE
    text = text.strip()
    if not text:
        return "empty cell (a value is required)"
    try:
        number = float(text)
    except ValueError:
        return f"{text!r} is not a number"
    if math.isnan(number) or math.isinf(number):
        return f"{text!r} is not a finite number"
    if number != int(number):
        return f"{text!r} is not an integer"
    if not low <= number <= high:
        if column == RAW_LABEL_KEY:
            return f"label {text!r} is outside the known classes"
        return f"{text!r} is out of range"
    return None


def check_csv_dir(data_root):
    """Checks every cell of the digits CSV files in ``data_root``; returns the number of data
    rows. Raises ``ValueError`` with one line naming the file, the line, the column, the bad
    value and what is allowed, for: no such directory, no ``.csv`` file, an empty file, a file
    with a header but no rows, a missing or unexpected column (header ``pixel_00,..,pixel_63,
    label`` in any order), a row with too few or too many cells, an empty cell, a value that is
    not a number, NaN or inf, a non-integer, a pixel outside 0..16, a label outside the classes
    0..9.

    CsvExampleGen would otherwise fail deep inside Beam or Transform, or train on wrong values;
    this runs before any component. (The pipeline's own gate, :mod:`ga_tfx.pipelines.data_check`,
    checks the same rules with TFX's ExampleValidator against the curated schema, for runs that
    do not start from this command line, e.g. Kubeflow.)
    """
    files = csv_dir.csv_files(data_root, "the digits CSV file(s)")
    rows = 0
    for path in files:
        with open(path, newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if not header:
                raise ValueError(
                    f"{path} is empty: expected a header with the columns "
                    f"pixel_00..pixel_63, {RAW_LABEL_KEY}, then data rows."
                )
            header = [name.strip() for name in header]
            missing = [c for c in COLUMNS if c not in header]
            unexpected = [c for c in header if c not in COLUMNS]
            if missing or unexpected:
                raise ValueError(
                    f"{path} has the wrong columns: missing {missing}, "
                    f"unexpected {unexpected}; expected pixel_00..pixel_63 and "
                    f"{RAW_LABEL_KEY!r}."
                )
            found = 0
            for cells in reader:
                line = reader.line_num
                if len(cells) != len(header):
                    raise ValueError(
                        f"{path}, line {line}: {len(cells)} cells, expected "
                        f"{len(header)} (one per column of the header)."
                    )
                for column, text in zip(header, cells):
                    problem = check_value(column, text)
                    if problem:
                        raise ValueError(
                            f"{path}, line {line}, column {column!r}: {problem}; "
                            f"allowed: {allowed(column)}."
                        )
                found += 1
            if not found:
                raise ValueError(f"{path} has a header but no data rows.")
            rows += found
    return rows


def preprocessing_fn(inputs):
    """Raw pixel columns -> one ``pixels_xf`` vector per image; the label as it is."""
    pixels = tf.stack(
        [tf.reshape(tf.cast(inputs[key], tf.float32), [-1]) for key in PIXEL_KEYS], axis=1
    )
    return {
        FEATURES_KEY: pixels / 16.0,
        LABEL_KEY: tf.reshape(tf.cast(inputs[RAW_LABEL_KEY], tf.int64), [-1]),
    }


def build_model(hparams):
    """A small CNN with BatchNormalization (replaced by AccumBatchNormalization in training).

    ``hparams``: a dict; ``learning_rate`` (default 1e-2) and ``seed`` (default 0) are read.
    Outputs class probabilities, ``[batch, 10]``.
    """
    keras.utils.set_random_seed(int(hparams.get("seed", 0)))
    inputs = keras.Input(shape=(64,), name=FEATURES_KEY)
    x = keras.layers.Reshape((8, 8, 1))(inputs)
    x = keras.layers.Conv2D(16, 3, padding="same", use_bias=False, name="conv1")(x)
    x = keras.layers.BatchNormalization(momentum=0.9, name="bn1")(x)
    x = keras.layers.Activation("relu")(x)
    x = keras.layers.Conv2D(32, 3, strides=2, padding="same", use_bias=False, name="conv2")(x)
    x = keras.layers.BatchNormalization(momentum=0.9, name="bn2")(x)
    x = keras.layers.Activation("relu")(x)
    x = keras.layers.Flatten()(x)
    outputs = keras.layers.Dense(CLASSES, activation="softmax", name="probabilities")(x)
    model = keras.Model(inputs, outputs, name="digits_cnn")
    model.compile(
        optimizer=keras.optimizers.Adam(float(hparams.get("learning_rate", 1e-2))),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )
    return model
