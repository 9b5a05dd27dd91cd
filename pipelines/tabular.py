"""User code for any CSV with a header: Transform's ``preprocessing_fn`` and a generic model.

``ga-tfx run --data-root DIR --label COLUMN [--task classification|regression]`` uses this module
(by dotted path, like the digits code). Column types come from the data (CsvExampleGen and
SchemaGen infer them); Transform turns every column but the label into one float vector:

* numeric columns: standardised, ``tft.scale_to_z_score`` (a missing value counts as 0 before
  scaling);
* string columns: ``tft.compute_and_apply_vocabulary`` (the ``TOP_K`` most frequent values, one
  bucket for the rest), one-hot encoded;
* the label: for classification, a string or integer label is vocabulary-encoded (class ``i`` is
  the ``i``-th most frequent value); for regression, a float.

The model (:func:`build_model`) is an MLP with BatchNormalization (which the ga-tfx Trainer
replaces by ``AccumBatchNormalization``) over the feature vector: softmax over the label's
vocabulary, or one linear output for regression. It reads the vector's width and the number of
classes from the Transform output, so it takes ``build_model(hparams, transform_output)``.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx import keras, tf

from typing import Any, Dict, Mapping, Optional

FEATURES_KEY = "features_xf"  # float32 [batch, width]: every non-label column, transformed
LABEL_KEY = "label_xf"  # int64 [batch] class index, or float32 [batch] for regression
LABEL_VOCABULARY = "label_vocabulary"  # the vocabulary file of a classification label
TASKS = ("classification", "regression")
TOP_K = 50  # string values kept per column (the rest share one bucket)
# Transform's custom_config keys (set by the pipeline from --label and --task).
LABEL_CONFIG, TASK_CONFIG = "label", "task"


def _dense(value, default):
    """A [batch, 1] dense tensor from a dense or sparse (missing values) input column."""
    if isinstance(value, tf.SparseTensor):
        value = tf.sparse.to_dense(
            tf.SparseTensor(value.indices, value.values, [value.dense_shape[0], 1]), default
        )
    if value.shape.rank == 1:
        value = tf.expand_dims(value, -1)
    return value


def preprocessing_fn(inputs: Mapping[str, Any], custom_config: Dict[str, Any]):
    """Transform: ``{FEATURES_KEY: [batch, width] float32, LABEL_KEY: [batch]}``."""
    import tensorflow_transform as tft

    label, task = custom_config[LABEL_CONFIG], custom_config.get(TASK_CONFIG, TASKS[0])
    parts = []
    for name in sorted(inputs):
        if name == label:
            continue
        value = inputs[name]
        if value.dtype == tf.string:
            ids = tft.compute_and_apply_vocabulary(
                _dense(value, ""),
                top_k=TOP_K,
                num_oov_buckets=1,
                vocab_filename=f"vocabulary_{name}",
            )
            parts.append(tf.one_hot(tf.squeeze(ids, -1), TOP_K + 1, dtype=tf.float32))
        else:
            numbers = tf.cast(_dense(value, tf.cast(0, value.dtype)), tf.float32)
            parts.append(tft.scale_to_z_score(numbers))
    raw_label = tf.squeeze(
        _dense(
            inputs[label],
            "" if inputs[label].dtype == tf.string else tf.cast(0, inputs[label].dtype),
        ),
        -1,
    )
    if task == "regression":
        label_out = tf.cast(raw_label, tf.float32)
    else:
        if raw_label.dtype != tf.string:
            raw_label = tf.strings.as_string(raw_label)
        label_out = tft.compute_and_apply_vocabulary(raw_label, vocab_filename=LABEL_VOCABULARY)
    return {FEATURES_KEY: tf.concat(parts, axis=-1), LABEL_KEY: label_out}


def build_model(hparams: Dict[str, Any], transform_output=None):
    """The generic model, compiled (Adam; sparse cross-entropy or mean squared error).

    ``hparams``: ``units`` (default 64), ``learning_rate`` (default 1e-3), ``task`` (default:
    classification when the Transform output has a label vocabulary), ``seed`` (default 0).
    """
    if transform_output is None:
        raise ValueError(
            "ga_tfx.pipelines.tabular.build_model needs the Transform output "
            "(the feature width and the label's classes): train it with a "
            "transform_graph."
        )
    width = transform_output.transformed_feature_spec()[FEATURES_KEY].shape[-1]
    classes = _classes(transform_output)
    task = hparams.get("task") or ("classification" if classes else "regression")
    keras.utils.set_random_seed(int(hparams.get("seed", 0)))
    units = int(hparams.get("units", 64))
    inputs = keras.Input((width,), name=FEATURES_KEY)
    x = inputs
    for i in range(2):
        x = keras.layers.Dense(units, use_bias=False, name=f"dense_{i}")(x)
        x = keras.layers.BatchNormalization(name=f"bn_{i}")(x)
        x = keras.layers.Activation("relu")(x)
    optimizer = keras.optimizers.Adam(float(hparams.get("learning_rate", 1e-3)))
    if task == "regression":
        outputs = keras.layers.Dense(1, name="prediction")(x)
        model = keras.Model(inputs, outputs)
        model.compile(
            optimizer,
            loss="mse",
            metrics=[
                keras.metrics.RootMeanSquaredError(name="rmse"),
                keras.metrics.MeanAbsoluteError(name="mae"),
            ],
        )
        return model
    outputs = keras.layers.Dense(classes, activation="softmax", name="probabilities")(x)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def _classes(transform_output) -> Optional[int]:
    """The size of the label vocabulary, or None when the label is not vocabulary-encoded."""
    try:
        return int(transform_output.vocabulary_size_by_name(LABEL_VOCABULARY))
    except (ValueError, KeyError, OSError, tf.errors.NotFoundError):
        return None


def check_csv_dir(data_root: str, label: str) -> int:
    """Checks a directory of CSV files for the generic pipeline; returns the data rows.

    ``ValueError`` with one line naming the file (and line) for: no such directory, no
    ``.csv`` file, an empty file, files whose headers differ, no ``label`` column (the columns
    found are listed), a header without data rows, a row with another number of cells, an
    empty label cell. Column types are left to TFX's schema inference.
    """
    from ga_tfx.pipelines import csv_dir

    import csv

    files = csv_dir.csv_files(data_root, "CSV file(s) with a header")
    first_header, rows = None, 0
    for path in files:
        with open(path, newline="") as f:
            reader = csv.reader(f)
            header = [name.strip() for name in next(reader, None) or []]
            if not header:
                raise ValueError(f"{path} is empty: expected a header line, then data rows.")
            if label not in header:
                raise ValueError(
                    f"{path} has no label column {label!r}; its columns: "
                    f"{header}. Pass --label with one of them."
                )
            if first_header is not None and header != first_header:
                raise ValueError(
                    f"{path} has the columns {header}, but {files[0]} has "
                    f"{first_header}: all CSV files must share one header."
                )
            first_header, index, found = header, header.index(label), 0
            for cells in reader:
                if len(cells) != len(header):
                    raise ValueError(
                        f"{path}, line {reader.line_num}: {len(cells)} cells, "
                        f"expected {len(header)} (one per column of the header)."
                    )
                if not cells[index].strip():
                    raise ValueError(
                        f"{path}, line {reader.line_num}, column {label!r}: empty "
                        "label cell; every example needs a label."
                    )
                found += 1
            if not found:
                raise ValueError(f"{path} has a header but no data rows.")
            rows += found
    return rows
