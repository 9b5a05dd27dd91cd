"""The digits pipeline's user code: Transform's ``preprocessing_fn`` and the Trainer's model.

The shipped data (``pipelines/data/digits/digits.csv``) holds 1797 real 8x8 images as
``pixel_00`` .. ``pixel_63`` (integers 0-16) and ``label`` (0-9). Referenced by dotted path
(``ga_tfx.pipelines.digits.preprocessing_fn``, ``ga_tfx.pipelines.digits``), so nothing is packaged at run time
and the same names work in the Kubeflow image.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx._keras import keras, tf

import csv
import os

PIXEL_KEYS = tuple(f"pixel_{i:02d}" for i in range(64))
RAW_LABEL_KEY = "label"
FEATURES_KEY = "pixels_xf"  # float32 [batch, 64], grey levels scaled to [0, 1]
LABEL_KEY = "label_xf"
CLASSES = 10
COLUMNS = PIXEL_KEYS + (RAW_LABEL_KEY,)


def check_csv_dir(data_root):
    """Raises ``ValueError`` unless ``data_root`` is a directory of CSV files, each with the
    header ``pixel_00,..,pixel_63,label`` (any order) and at least one data row.

    CsvExampleGen would otherwise fail deep inside Beam, or (for a wrong column) train on the
    wrong features; this runs before any component.
    """
    if not os.path.isdir(data_root):
        raise ValueError(f"Data directory {data_root!r} does not exist (or is not a "
                         "directory); it must hold the digits CSV file(s).")
    files = sorted(os.path.join(data_root, name) for name in os.listdir(data_root)
                   if name.endswith(".csv"))
    if not files:
        raise ValueError(f"Data directory {data_root!r} holds no .csv file.")
    for path in files:
        with open(path, newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if not header:
                raise ValueError(f"{path} is empty: expected a header with the columns "
                                 f"pixel_00..pixel_63, {RAW_LABEL_KEY}, then data rows.")
            missing = [c for c in COLUMNS if c not in header]
            unexpected = [c for c in header if c not in COLUMNS]
            if missing or unexpected:
                raise ValueError(f"{path} has the wrong columns: missing {missing}, "
                                 f"unexpected {unexpected}; expected pixel_00..pixel_63 and "
                                 f"{RAW_LABEL_KEY!r}.")
            if next(reader, None) is None:
                raise ValueError(f"{path} has a header but no data rows.")


def preprocessing_fn(inputs):
    """Raw pixel columns -> one ``pixels_xf`` vector per image; the label as it is."""
    pixels = tf.stack([tf.reshape(tf.cast(inputs[key], tf.float32), [-1])
                       for key in PIXEL_KEYS], axis=1)
    return {FEATURES_KEY: pixels / 16.0,
            LABEL_KEY: tf.reshape(tf.cast(inputs[RAW_LABEL_KEY], tf.int64), [-1])}


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
    model.compile(optimizer=keras.optimizers.Adam(float(hparams.get("learning_rate", 1e-2))),
                  loss=keras.losses.SparseCategoricalCrossentropy(),
                  metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
    return model
