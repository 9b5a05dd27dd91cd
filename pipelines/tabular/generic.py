"""User code for any CSV with a header: Transform's ``preprocessing_fn`` and a generic model.

``ga-tfx run --data-root DIR --label COLUMN [--task classification|regression]`` uses this module
(by dotted path, like the digits code). Column types come from the data (CsvExampleGen and
SchemaGen infer them); the data plan (:mod:`ga_tfx.pipelines.tabular.data_plan`, made from the
statistics of the training split and handed over in ``custom_config``) says what each column
is. Transform turns every column but the label into one float vector, with statistics of the
**training split** only:

* numbers (``numeric``): an empty (or non-finite) cell is imputed with the training median,
  plus a 0/1 missing-indicator feature when the training split has empty cells; then the
  value robustly scaled, ``(x - median) / (IQR / 1.349)``, **clipped** to
  ``[-CLIP, CLIP]``, and its piecewise-linear encoding over ``QUANTILE_BUCKETS`` training
  quantiles (each feature in [0, 1]): no value, however extreme, reaches the model as more
  than ``CLIP``;
* ``timestamp`` columns: the same, plus hour of day and day of week (UTC) one-hot;
* text (``categorical``) and integer codes (``code``): an empty cell is the token
  ``MISSING_TOKEN``; ``tft.compute_and_apply_vocabulary`` keeps the ``TOP_K`` most frequent
  values, one bucket for the rest; one-hot encoded;
* the label: for classification, vocabulary-encoded (class ``i`` is the ``i``-th most frequent
  training value) with one out-of-vocabulary class for values the training split lacks (a
  class seen only in eval or serving is scored as an error, never a crash); for regression, a
  float.

The model (:func:`build_model`) is an MLP with BatchNormalization (which the ga-tfx Trainer
replaces by ``AccumBatchNormalization``) and dropout over the feature vector: softmax over the
label's vocabulary plus the out-of-vocabulary class, or one linear output for regression,
scaled by the training label's mean and standard deviation (so a label in the thousands trains
as fast as one near 1). It reads the vector's width, the classes and the label's scale from
the Transform output, so it takes ``build_model(hparams, transform_output)``.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx import keras, tf
from ga_tfx.pipelines.tabular import data_plan

from typing import Any, Dict, Mapping, Optional

FEATURES_KEY = "features_xf"  # float32 [batch, width]: every non-label column, transformed
LABEL_KEY = "label_xf"  # int64 [batch] class index, or float32 [batch] for regression
LABEL_VOCABULARY = "label_vocabulary"  # the vocabulary file of a classification label
LABEL_OOV_CLASSES = 1  # one class index for label values the training split lacks
TASKS = data_plan.TASKS
TOP_K = 50  # text values kept per column (the rest share one bucket)
QUANTILE_BUCKETS = 20  # piecewise-linear encoding of a number over training quantiles
CLIP = 5.0  # the robustly scaled value is clipped to [-CLIP, CLIP]
MISSING_TOKEN = data_plan.MISSING_TOKEN
# Transform's custom_config keys (set by the pipeline from --label and --task; the plan is
# added by ga_tfx.pipelines.tabular.planned_transform at run time).
LABEL_CONFIG, TASK_CONFIG, PLAN_CONFIG = "label", "task", "data_plan"
# The generic model's defaults (hparams may override them).
UNITS, LAYERS, DROPOUT, LEARNING_RATE = 64, 2, 0.3, 1e-3


def _dense(value, default):
    """A [batch, 1] dense tensor from a dense or sparse (missing values) input column."""
    if isinstance(value, tf.SparseTensor):
        value = tf.sparse.to_dense(
            tf.SparseTensor(value.indices, value.values, [value.dense_shape[0], 1]), default
        )
    if value.shape.rank == 1:
        value = tf.expand_dims(value, -1)
    return value


def _present(value):
    """[batch, 1] bool: the cell has a value."""
    if isinstance(value, tf.SparseTensor):
        return _dense(
            tf.SparseTensor(value.indices, tf.ones_like(value.values, tf.bool), value.dense_shape),
            False,
        )
    return tf.ones_like(_dense(value, _zero(value.dtype)), tf.bool)


def _zero(dtype):
    return "" if dtype == tf.string else tf.cast(0, dtype)


def _text(value):
    """[batch, 1] strings; an empty or blank cell is ``MISSING_TOKEN``."""
    if value.dtype != tf.string:
        number = _dense(value, _zero(value.dtype))
        if number.dtype.is_floating:
            number = tf.cast(tf.round(number), tf.int64)
        text = tf.strings.as_string(number)
        return tf.where(_present(value), text, MISSING_TOKEN)
    text = _dense(value, "")
    return tf.where(tf.strings.strip(text) == "", MISSING_TOKEN, text)


def _one_hot(text, name):
    import tensorflow_transform as tft

    ids = tft.compute_and_apply_vocabulary(
        text, top_k=TOP_K, num_oov_buckets=1, vocab_filename=f"vocabulary_{name}"
    )
    return tf.one_hot(tf.squeeze(ids, -1), TOP_K + 1, dtype=tf.float32)


def _numeric_statistics(values):
    """The training statistics of the number columns ``values`` (name -> input column), with
    one TFT analyzer of each kind for all of them (per column: four analyzers each made the
    Transform of a 30-column CSV take minutes of Beam stages and tracing).

    Returns name -> ``(raw, present, boundaries, low, high, variance)``, the arguments of
    :func:`numeric_features`: ``raw`` [batch, 1] in the column's dtype, ``present`` [batch, 1]
    bool (a finite value), and, over the non-empty finite training cells of that column, its
    ``QUANTILE_BUCKETS - 1`` quantiles, minimum, maximum and variance.
    """
    import tensorflow_transform as tft

    names = sorted(values)
    if not names:
        return {}
    raws = [_dense(values[name], _zero(values[name].dtype)) for name in names]
    floats = tf.concat([tf.cast(raw, tf.float32) for raw in raws], axis=1)  # [batch, n]
    present = tf.logical_and(
        tf.concat([_present(values[name]) for name in names], axis=1), tf.math.is_finite(floats)
    )
    # What the statistics see: the present cells, per column. Quantiles ignore NaN; min, max
    # and variance take the present cells as a sparse [batch, n] tensor, reduced per column.
    observed = tf.where(present, floats, float("nan"))
    cells = tf.SparseTensor(
        tf.where(present), tf.boolean_mask(floats, present), tf.shape(floats, out_type=tf.int64)
    )
    boundaries = tft.quantiles(
        observed,
        QUANTILE_BUCKETS,
        epsilon=1.0 / (4 * QUANTILE_BUCKETS),
        reduce_instance_dims=False,
    )  # [n, QUANTILE_BUCKETS - 1]
    low = tft.min(cells, reduce_instance_dims=False)
    high = tft.max(cells, reduce_instance_dims=False)
    variance = tft.var(cells, reduce_instance_dims=False)
    return {
        name: (
            raw,
            present[:, i : i + 1],
            tf.reshape(boundaries[i], [-1]),
            low[i],
            high[i],
            variance[i],
        )
        for i, (name, raw) in enumerate(zip(names, raws))
    }


def numeric_features(
    raw, present, boundaries, low, high, variance, missing_indicator, timestamp_scale=None
):
    """The features of a number column from its training statistics, [batch, n] float32.

    Args:
      raw: [batch, 1] the column's values (any number dtype; whatever where not ``present``).
      present: [batch, 1] bool: the cell has a finite value.
      boundaries: [QUANTILE_BUCKETS - 1] training quantiles; ``low``/``high``: the training
        minimum and maximum; ``variance``: the training variance.
      missing_indicator: add the 0/1 feature "the cell was empty".
      timestamp_scale: seconds per unit of a timestamp column (adds hour of day and day of
        week, UTC, one-hot), or None.

    Returns the robustly scaled value clipped to ``[-CLIP, CLIP]`` (median and IQR / 1.349,
    falling back to the standard deviation, then 1, for a column without spread), the
    piecewise-linear encoding over ``[low, boundaries..., high]`` (each in [0, 1]; a segment of
    zero width, a value many rows share, is the step "above that value": e.g. tips > 0), then
    the indicator and the time features. An empty cell takes the training median.
    """
    x = tf.cast(raw, tf.float32)
    median = boundaries[QUANTILE_BUCKETS // 2 - 1]
    iqr = boundaries[(3 * QUANTILE_BUCKETS) // 4 - 1] - boundaries[QUANTILE_BUCKETS // 4 - 1]
    std = tf.sqrt(tf.cast(variance, tf.float32))
    scale = tf.where(iqr > 0, iqr / 1.349, tf.where(std > 0, std, 1.0))
    x = tf.where(present, x, median)
    parts = [tf.clip_by_value((x - median) / scale, -CLIP, CLIP)]
    edges = tf.concat(
        [
            tf.reshape(tf.cast(low, tf.float32), [1]),
            boundaries,
            tf.reshape(tf.cast(high, tf.float32), [1]),
        ],
        0,
    )
    lower, upper = edges[:-1], edges[1:]
    width = upper - lower
    parts.append(
        tf.where(
            width > 0,
            tf.clip_by_value((x - lower) / tf.where(width > 0, width, 1.0), 0.0, 1.0),
            tf.cast(x > upper, tf.float32),
        )
    )
    if missing_indicator:
        parts.append(1.0 - tf.cast(present, tf.float32))
    if timestamp_scale is not None:
        seconds = tf.where(present, tf.cast(raw, tf.float64), tf.cast(median, tf.float64))
        seconds = seconds * float(timestamp_scale)
        hour = tf.math.floormod(tf.math.floordiv(seconds, 3600.0), 24.0)
        day = tf.math.floormod(tf.math.floordiv(seconds, 86400.0) + 3.0, 7.0)  # Monday: 0
        parts.append(tf.one_hot(tf.cast(tf.squeeze(hour, -1), tf.int32), 24))
        parts.append(tf.one_hot(tf.cast(tf.squeeze(day, -1), tf.int32), 7))
    return tf.concat(parts, axis=-1)


def plan_of(custom_config: Mapping[str, Any]) -> Optional[data_plan.DataPlan]:
    """The data plan in Transform's ``custom_config`` (None: run without one)."""
    text = (custom_config or {}).get(PLAN_CONFIG)
    return data_plan.DataPlan.from_json(text) if text else None


def _treatment(value, treatments, name):
    """The plan's treatment of a column, or one from its type (no plan)."""
    if name in treatments:
        return treatments[name]
    return {
        "treatment": data_plan.CATEGORICAL if value.dtype == tf.string else data_plan.NUMERIC,
        "missing_indicator": isinstance(value, tf.SparseTensor),
        "timestamp_scale": 1.0,
    }


def preprocessing_fn(inputs: Mapping[str, Any], custom_config: Dict[str, Any]):
    """Transform: ``{FEATURES_KEY: [batch, width] float32, LABEL_KEY: [batch]}``."""
    import tensorflow_transform as tft

    label, task = custom_config[LABEL_CONFIG], custom_config.get(TASK_CONFIG, TASKS[0])
    plan = plan_of(custom_config)
    treatments = plan.treatments() if plan is not None else {}
    columns = {
        name: _treatment(inputs[name], treatments, name)
        for name in sorted(inputs)
        if name != label and (plan is None or name in treatments)  # not the label, not dropped
    }
    text_kinds = (data_plan.CATEGORICAL, data_plan.CODE)
    numbers = _numeric_statistics(
        {name: inputs[name] for name, c in columns.items() if c["treatment"] not in text_kinds}
    )
    parts = []
    for name, column in columns.items():
        kind = column["treatment"]
        if kind in text_kinds:
            parts.append(_one_hot(_text(inputs[name]), name))
        else:
            parts.append(
                numeric_features(
                    *numbers[name],
                    column["missing_indicator"],
                    column["timestamp_scale"] if kind == data_plan.TIMESTAMP else None,
                )
            )
    raw_label = tf.squeeze(_dense(inputs[label], _zero(inputs[label].dtype)), -1)
    if task == "regression":
        label_out = tf.cast(raw_label, tf.float32)
    else:
        if raw_label.dtype != tf.string:
            raw_label = tf.strings.as_string(raw_label)
        label_out = tft.compute_and_apply_vocabulary(
            raw_label, num_oov_buckets=LABEL_OOV_CLASSES, vocab_filename=LABEL_VOCABULARY
        )
    return {FEATURES_KEY: tf.concat(parts, axis=-1), LABEL_KEY: label_out}


def build_model(hparams: Dict[str, Any], transform_output=None):
    """The generic model, compiled (Adam; sparse cross-entropy or mean squared error).

    ``hparams``: ``units`` (default ``UNITS``), ``layers`` (``LAYERS``), ``dropout``
    (``DROPOUT``), ``learning_rate`` (``LEARNING_RATE``), ``task`` (default: classification
    when the Transform output has a label vocabulary), ``seed`` (default 0).
    """
    if transform_output is None:
        raise ValueError(
            "ga_tfx.pipelines.tabular.generic.build_model needs the Transform output "
            "(the feature width and the label's classes): train it with a "
            "transform_graph."
        )
    width = transform_output.transformed_feature_spec()[FEATURES_KEY].shape[-1]
    classes = output_classes(transform_output)
    task = hparams.get("task") or ("classification" if classes else "regression")
    keras.utils.set_random_seed(int(hparams.get("seed", 0)))
    units = int(hparams.get("units", UNITS))
    dropout = float(hparams.get("dropout", DROPOUT))
    inputs = keras.Input((width,), name=FEATURES_KEY)
    x = inputs
    for i in range(int(hparams.get("layers", LAYERS))):
        x = keras.layers.Dense(units, use_bias=False, name=f"dense_{i}")(x)
        x = keras.layers.BatchNormalization(name=f"bn_{i}")(x)
        x = keras.layers.Activation("relu")(x)
        if dropout:
            x = keras.layers.Dropout(dropout, name=f"dropout_{i}")(x)
    optimizer = keras.optimizers.Adam(float(hparams.get("learning_rate", LEARNING_RATE)))
    if task == "regression":
        mean, std = label_scale(transform_output)
        outputs = keras.layers.Dense(1, name="standardised")(x)
        outputs = keras.layers.Rescaling(std, offset=mean, name="prediction")(outputs)
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


def output_classes(transform_output) -> Optional[int]:
    """The model's classes: the label vocabulary plus the out-of-vocabulary class (None when
    the label is not vocabulary-encoded)."""
    try:
        size = int(transform_output.vocabulary_size_by_name(LABEL_VOCABULARY))
    except (ValueError, KeyError, OSError, tf.errors.NotFoundError):
        return None
    return size + LABEL_OOV_CLASSES


def transform_plan(transform_output) -> Optional[data_plan.DataPlan]:
    """The data plan in the schema Transform read (None: it carried none)."""
    return data_plan.plan_from_schema(transform_output.raw_metadata.schema)


def label_scale(transform_output):
    """(mean, standard deviation) of the training split's regression label, from the plan;
    (0, 1) without one."""
    plan = transform_plan(transform_output)
    if plan is None or data_plan.TRAIN not in plan.label_mean:
        return 0.0, 1.0
    std = plan.label_std.get(data_plan.TRAIN) or 1.0
    return plan.label_mean[data_plan.TRAIN], std


def check_csv_dir(data_root: str, label: str, reading=None, exclude=()) -> int:
    """Checks a directory of CSV files for the generic pipeline; returns the rows with a label.

    The files are read in their dialect (:func:`ga_tfx.pipelines.tabular.csv_dialect.read`, under
    ``reading``'s overrides), as the pipeline's ExampleGen reads them. ``ValueError`` with one
    line naming the cause: no such directory, no ``.csv`` file, an empty file, files whose
    columns differ, a row with another number of cells (file and line), no ``label`` column
    (the columns are listed, the closest names first; likewise for a column of ``exclude``), no
    row with a label (how many rows have it empty or missing). Rows whose label is missing are
    not counted (the pipeline drops them: :mod:`ga_tfx.pipelines.tabular.labeled_examples`).
    """
    from ga_tfx.pipelines.common import csv_dir
    from ga_tfx.pipelines.tabular import csv_dialect

    files = csv_dir.csv_files(data_root, "CSV file(s) with a header")
    dialect = csv_dialect.read(files, reading or csv_dialect.CsvReading())
    for flag, name in [("--label", label)] + [("--exclude-columns", n) for n in exclude]:
        if name not in dialect.columns:
            raise ValueError(
                f"{flag} {name!r} is not a column of the CSV files in {data_root!r}; its "
                f"columns, closest first: {', '.join(closest_first(name, dialect.columns))}."
            )
    rows = dialect.present[dialect.columns.index(label)]
    if not rows:
        seen = ", ".join(token or "empty" for token, _ in dialect.missing_seen)
        raise ValueError(
            f"the label column {label!r} is empty or missing ({seen}) in all {dialect.rows} rows "
            f"of the CSV files in {data_root!r}: no row can be trained on."
        )
    return rows


def closest_first(name: str, names) -> list:
    """``names`` quoted, those most like ``name`` first (case aside, then by spelling)."""
    import difflib

    def likeness(candidate: str) -> float:
        if candidate.lower() == name.lower():
            return 2.0
        return difflib.SequenceMatcher(None, name.lower(), candidate.lower()).ratio()

    return [repr(n) for n in sorted(names, key=lambda n: -likeness(n))]
