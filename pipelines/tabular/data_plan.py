"""The data plan of a ``--label`` run: what each CSV column becomes, from TFX's statistics.

:func:`make_plan` reads what StatisticsGen and SchemaGen already computed (the statistics of
every split, the inferred schema), never the data itself, and decides per column of the
**training split**:

* ``dropped``: almost empty (a value in fewer than :data:`MIN_PRESENT_FRACTION` of the
  training rows), constant (one distinct value), text that looks like an identifier (at
  least :data:`IDENTIFIER_DISTINCT_FRACTION` of its non-empty cells distinct, e.g. names,
  ticket numbers), or named like one (``id``, ``..._id``, ``uuid``, ``key``);
* ``timestamp``: integers within Unix seconds (or milliseconds) of 1973..2099: the value, plus
  its hour of day and day of week (UTC);
* ``code``: integers of at least :data:`CODE_MIN_MAGNITUDE` that vary by less than
  :data:`CODE_MAX_RELATIVE_SPREAD` of their size (census tracts, postcodes with a prefix):
  categories, not quantities;
* ``categorical``: every other text column;
* ``numeric``: every other number.

Empty cells: numbers are imputed with the training median and get a missing-indicator feature
where the training split has empty cells; text gets the explicit token :data:`MISSING_TOKEN`.
(The transformation itself is :mod:`ga_tfx.pipelines.tabular.generic`'s ``preprocessing_fn``.)

The label: class counts per split (text labels, and integer labels that StatisticsGen counts as
categories, :func:`label_stats_options`), rare classes (fewer than :data:`RARE_CLASS_ROWS`
training rows), classes that the training split lacks; for regression the mean and spread per
split. The trivial baseline's eval metric follows from the same statistics: the accuracy of
the training split's majority class on eval, or the RMSE on eval of the training mean,
``sqrt(std_eval**2 + (mean_eval - mean_train)**2)``.

The plan travels inside the schema that Transform reads (:func:`annotate_schema`): dropped
columns are ``DEPRECATED`` (Transform, the Trainer and serving never parse them), every other
input column is optional (a serving request may leave any cell empty), and the plan itself is a
schema-level annotation (:func:`plan_from_schema`), so Transform, the model and the run's
summary read the same decisions. Standard library plus the ``tensorflow_metadata`` protos.
"""

import dataclasses
import datetime
import json
import math
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

# Column treatments.
NUMERIC, CATEGORICAL, CODE, TIMESTAMP, DROPPED = (
    "numeric",
    "categorical",
    "code",
    "timestamp",
    "dropped",
)
TASKS = ("classification", "regression")
TRAIN, EVAL = "train", "eval"

MIN_PRESENT_FRACTION = 0.01  # fewer training rows with a value: the column is dropped
IDENTIFIER_DISTINCT_FRACTION = 0.5  # text with this share of distinct non-empty cells: an id
IDENTIFIER_MIN_DISTINCT = 20  # ... and at least this many distinct values
IDENTIFIER_NAME = re.compile(r"(^|[_\-. ])(id|uuid|key)$|^id[_\-. ]", re.IGNORECASE)
CODE_MIN_MAGNITUDE = 1e5  # integer codes (census tracts 17031081000, not a count of 12)
CODE_MAX_RELATIVE_SPREAD = 0.01  # (max - min) / max(|min|, |max|) of a code column
# Integers in these ranges are Unix times (seconds, milliseconds): 1973-03-03 .. 2099-12-02.
TIMESTAMP_RANGES = ((1e8, 4.1e9, 1), (1e11, 4.1e12, 1000))
RARE_CLASS_ROWS = 10  # classes with fewer training rows are reported as rare
MISSING_TOKEN = "__empty__"  # what an empty text cell becomes (a category of its own)
WORST_EMPTY_COLUMNS = 5  # empty cells: the summary names this many columns
LISTED_CLASSES = 12  # classes named per line of the summary (the rest are counted)
# Where the plan lives in the schema: a schema-level annotation comment with this prefix.
SCHEMA_COMMENT_PREFIX = "ga_tfx.data_plan="
SCHEMA_DROP_TAG = "ga_tfx.dropped"
EXCLUDED_REASON = "left out by --exclude-columns"


@dataclasses.dataclass(frozen=True)
class Column:
    """One input column and what the model makes of it.

    Attributes:
      name: the CSV column.
      treatment: one of ``numeric``, ``categorical``, ``code``, ``timestamp``, ``dropped``.
      reason: why (in words, for the summary); empty for plain numeric/categorical columns.
      empty_cells: ``{split: empty cells}``.
      missing_indicator: the model gets a 0/1 feature "this cell was empty" (numbers with empty
        cells in the training split).
      timestamp_scale: seconds per unit of a timestamp column (1, or 0.001 for milliseconds).
    """

    name: str
    treatment: str
    reason: str = ""
    empty_cells: Mapping[str, int] = dataclasses.field(default_factory=dict)
    missing_indicator: bool = False
    timestamp_scale: float = 1.0


@dataclasses.dataclass(frozen=True)
class DataPlan:
    """What a run trains on: rows, columns, the label and its trivial baseline.

    Attributes:
      label: the label column; ``task``: ``classification`` or ``regression``.
      rows: ``{split: rows}`` after rows with an empty label were dropped.
      unlabeled_rows: ``{split: rows dropped for an empty label cell}``.
      columns: every input column but the label, in schema order.
      classes: ``{split: [(class, rows), ...]}`` most frequent first (classification; empty
        when the statistics do not count the label's values, e.g. a float label).
      distinct_classes: ``{split: number of distinct classes}``.
      label_mean / label_std: ``{split: value}`` (regression).
      baseline_name: the trivial prediction (``majority class 'x'`` or ``training mean 1.05``).
      baseline_metric: that prediction's eval accuracy (classification) or RMSE (regression);
        None when the statistics cannot give it.
      majority_class: the training split's most frequent class (classification).
      leaks: ``(column, eval error alone, baseline's eval error)`` of the columns that alone
        predict the label nearly perfectly (:mod:`ga_tfx.pipelines.tabular.leaks`).
    """

    label: str
    task: str
    rows: Mapping[str, int]
    unlabeled_rows: Mapping[str, int]
    columns: Tuple[Column, ...]
    classes: Mapping[str, Sequence[Tuple[str, int]]] = dataclasses.field(default_factory=dict)
    distinct_classes: Mapping[str, int] = dataclasses.field(default_factory=dict)
    label_mean: Mapping[str, float] = dataclasses.field(default_factory=dict)
    label_std: Mapping[str, float] = dataclasses.field(default_factory=dict)
    baseline_name: str = ""
    baseline_metric: Optional[float] = None
    majority_class: Optional[str] = None
    leaks: Tuple[Tuple[str, float, float], ...] = ()

    # ------------------------------------------------------------------ derived
    @property
    def used(self) -> Tuple[Column, ...]:
        return tuple(c for c in self.columns if c.treatment != DROPPED)

    @property
    def dropped(self) -> Tuple[Column, ...]:
        return tuple(c for c in self.columns if c.treatment == DROPPED)

    def treatments(self) -> Dict[str, Dict[str, Any]]:
        """``{column: {"treatment": ..., "missing_indicator": ..., "timestamp_scale": ...}}``
        of the columns used: what ``preprocessing_fn`` needs."""
        return {
            c.name: {
                "treatment": c.treatment,
                "missing_indicator": c.missing_indicator,
                "timestamp_scale": c.timestamp_scale,
            }
            for c in self.used
        }

    def train_classes(self) -> Dict[str, int]:
        return dict(self.classes.get(TRAIN, ()))

    def rare_classes(self) -> List[Tuple[str, int]]:
        """Training classes with fewer than :data:`RARE_CLASS_ROWS` rows."""
        return [(c, n) for c, n in self.classes.get(TRAIN, ()) if n < RARE_CLASS_ROWS]

    def unseen_classes(self) -> List[Tuple[str, str, int]]:
        """``(class, split, rows)`` of classes in another split that training lacks (only when
        the training split's classes are all counted)."""
        train = self.train_classes()
        if len(train) < self.distinct_classes.get(TRAIN, 0):
            return []  # the statistics list only the most frequent classes
        return [
            (value, split, count)
            for split, classes in sorted(self.classes.items())
            if split != TRAIN
            for value, count in classes
            if value not in train
        ]

    # ------------------------------------------------------------------ the summary
    def summary_lines(self) -> List[str]:
        """The one-screen data summary (about 10-20 lines)."""
        splits = ", ".join(f"{s} {n}" for s, n in sorted(self.rows.items(), key=_split_order))
        unlabeled = sum(self.unlabeled_rows.values())
        lines = [
            f"data: {sum(self.rows.values())} rows ({splits})"
            + (
                f"; {unlabeled} rows with an empty or missing {self.label!r} dropped ("
                + ", ".join(
                    f"{s} {n}" for s, n in sorted(self.unlabeled_rows.items(), key=_split_order)
                )
                + ")"
                if unlabeled
                else ""
            )
        ]
        kinds: Dict[str, int] = {}
        for column in self.used:
            kinds[column.treatment] = kinds.get(column.treatment, 0) + 1
        lines.append(
            f"columns: {len(self.used)} used ("
            + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
            + f"), {len(self.dropped)} dropped"
        )
        for column in self.columns:
            if column.treatment in (DROPPED, CODE, TIMESTAMP):
                lines.append(f"  {column.treatment:<9} {column.name}: {column.reason}")
        empty = sorted(
            (c for c in self.used if c.empty_cells.get(TRAIN, 0)),
            key=lambda c: -c.empty_cells.get(TRAIN, 0),
        )
        train_rows = max(self.rows.get(TRAIN, 0), 1)
        if empty:
            shown = ", ".join(
                f"{c.name} {c.empty_cells[TRAIN]} ({c.empty_cells[TRAIN] / train_rows:.0%})"
                for c in empty[:WORST_EMPTY_COLUMNS]
            )
            more = len(empty) - WORST_EMPTY_COLUMNS
            lines.append(
                f"empty cells (train): {shown}" + (f" and {more} more columns" if more > 0 else "")
            )
            lines.append(
                "  numbers: the training median plus a missing flag; text: the token "
                f"{MISSING_TOKEN!r}"
            )
        else:
            lines.append("empty cells (train): none in the columns used")
        lines += self._label_lines()
        lines.append(f"baseline: {self.baseline_line()}")
        for column, error, baseline in self.leaks:
            metric = "error" if self.task == "classification" else "RMSE"
            lines.append(
                f"warning: possible leak: {column!r} alone predicts {self.label!r} with eval "
                f"{metric} {error:.3g} (the baseline's: {baseline:.3g}); a column known only "
                f"after the outcome inflates the eval metric: --exclude-columns {column} "
                "leaves it out"
            )
        return lines

    def _label_lines(self) -> List[str]:
        if self.task == "regression":
            if TRAIN not in self.label_mean:
                return [f"label {self.label!r} (regression): no statistics"]
            return [
                f"label {self.label!r} (regression): "
                + ", ".join(
                    f"{s} mean {self.label_mean[s]:.4g} sd {self.label_std.get(s, 0.0):.4g}"
                    for s in sorted(self.label_mean, key=_split_order_key)
                )
            ]
        if not self.classes.get(TRAIN):
            return [
                f"label {self.label!r} (classification): classes not counted by the "
                "statistics (a float label?)"
            ]
        lines = [
            f"label {self.label!r}: {self.distinct_classes.get(TRAIN, 0)} classes in train"
            + "".join(
                f", {n} in {s}"
                for s, n in sorted(self.distinct_classes.items(), key=_split_order)
                if s != TRAIN
            )
        ]
        for split, classes in sorted(self.classes.items(), key=_split_order):
            listed = ", ".join(f"{c} {n}" for c, n in classes[:LISTED_CLASSES])
            more = self.distinct_classes.get(split, len(classes)) - min(
                len(classes), LISTED_CLASSES
            )
            lines.append(f"  {split}: {listed}" + (f" and {more} more" if more > 0 else ""))
        rare = self.rare_classes()
        if rare:
            lines.append(
                f"  rare (fewer than {RARE_CLASS_ROWS} training rows): "
                + _listed([f"{c} {n}" for c, n in rare])
            )
        unseen = self.unseen_classes()
        if unseen:
            lines.append(
                "  not in train (the model cannot predict them; their rows count as errors): "
                + _listed([f"{c} ({s} {n})" for c, s, n in unseen])
            )
        return lines

    def baseline_line(self) -> str:
        metric = "accuracy" if self.task == "classification" else "RMSE"
        if self.baseline_metric is None:
            return f"{self.baseline_name or 'unknown'} (eval {metric} unknown)"
        return f"{self.baseline_name}: eval {metric} {self.baseline_metric:.4g}"

    # ------------------------------------------------------------------ JSON
    def to_json(self) -> str:
        data = dataclasses.asdict(self)
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "DataPlan":
        data = json.loads(text)
        data["columns"] = tuple(Column(**c) for c in data["columns"])
        data["classes"] = {s: [tuple(p) for p in v] for s, v in data["classes"].items()}
        data["leaks"] = tuple(tuple(leak) for leak in data.get("leaks", ()))
        return cls(**data)


def _listed(items: List[str]) -> str:
    """The first ``LISTED_CLASSES`` items, then how many more."""
    more = len(items) - LISTED_CLASSES
    return ", ".join(items[:LISTED_CLASSES]) + (f" and {more} more" if more > 0 else "")


def _split_order_key(split: str):
    return (split != TRAIN, split != EVAL, split)


def _split_order(item):
    return _split_order_key(item[0])


# ---------------------------------------------------------------------------- the plan
def make_plan(
    statistics: Mapping[str, Any],
    schema: Any,
    label: str,
    task: str,
    unlabeled_rows: Optional[Mapping[str, int]] = None,
    exclude: Sequence[str] = (),
) -> DataPlan:
    """The plan from ``statistics`` (``{split: DatasetFeatureStatistics}``, one dataset per
    split, as StatisticsGen writes) and ``schema`` (the inferred ``Schema`` proto); the
    columns of ``exclude`` are dropped (``--exclude-columns``).

    Raises ``ValueError`` when ``task`` is not one of :data:`TASKS`, the label is not in the
    schema, or there is no ``train`` split.
    """
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}.")
    if TRAIN not in statistics:
        raise ValueError(f"the statistics have no {TRAIN!r} split (splits: {sorted(statistics)}).")
    names = [feature.name for feature in schema.feature]
    if label not in names:
        raise ValueError(f"the label {label!r} is not a column of the data; columns: {names}.")
    by_split = {split: _features(stats) for split, stats in statistics.items()}
    rows = {split: int(stats.num_examples) for split, stats in statistics.items()}
    columns = []
    for feature in schema.feature:
        if feature.name == label:
            continue
        empty = {
            split: _empty_cells(by_split[split].get(feature.name), rows[split])
            for split in statistics
        }
        if feature.name in exclude:
            columns.append(Column(feature.name, DROPPED, EXCLUDED_REASON, empty))
            continue
        columns.append(_column(feature.name, by_split[TRAIN].get(feature.name), rows[TRAIN], empty))
    plan = DataPlan(
        label=label,
        task=task,
        rows=rows,
        unlabeled_rows=dict(unlabeled_rows or {}),
        columns=tuple(columns),
    )
    label_stats = {split: features.get(label) for split, features in by_split.items()}
    if task == "classification":
        return _with_classes(plan, label_stats)
    return _with_label_moments(plan, label_stats)


def _features(dataset) -> Dict[str, Any]:
    return {feature.path.step[0]: feature for feature in dataset.features if feature.path.step}


def _common(feature):
    kind = feature.WhichOneof("stats")
    return getattr(feature, kind).common_stats if kind else None


def _empty_cells(feature, rows: int) -> int:
    """Rows of the split without a value (CsvExampleGen writes an empty cell as an empty list:
    ``rows - tot_num_values`` for a one-value column)."""
    if feature is None:
        return rows
    common = _common(feature)
    return max(0, rows - int(common.tot_num_values)) if common is not None else rows


def _is_numeric(feature) -> bool:
    return feature.WhichOneof("stats") == "num_stats"


def _column(name: str, feature, rows: int, empty: Dict[str, int]) -> Column:
    train_empty = empty.get(TRAIN, rows)
    present = rows - train_empty
    make = lambda treatment, reason="", **kw: Column(  # noqa: E731
        name, treatment, reason, dict(empty), **kw
    )
    if feature is None or present < max(1, MIN_PRESENT_FRACTION * rows):
        return make(
            DROPPED,
            f"almost empty: {present} of {rows} training rows have a value "
            f"(fewer than {MIN_PRESENT_FRACTION:.0%})",
        )
    if IDENTIFIER_NAME.search(name):
        return make(DROPPED, "named like an identifier")
    if _is_numeric(feature):
        stats = feature.num_stats
        if stats.min == stats.max:
            return make(DROPPED, f"constant in the training split: every value is {stats.min:g}")
        whole = _looks_integer(feature)
        for low, high, per_second in TIMESTAMP_RANGES:
            if whole and low <= stats.min and stats.max <= high:
                first, last = (_date(v / per_second) for v in (stats.min, stats.max))
                unit = "seconds" if per_second == 1 else "milliseconds"
                return make(
                    TIMESTAMP,
                    f"integers {stats.min:.0f}..{stats.max:.0f} look like Unix {unit} "
                    f"({first}..{last}): used as hour of day, day of week (UTC) and the value",
                    missing_indicator=train_empty > 0,
                    timestamp_scale=1.0 / per_second,
                )
        size = max(abs(stats.min), abs(stats.max))
        if (
            whole
            and min(abs(stats.min), abs(stats.max)) >= CODE_MIN_MAGNITUDE
            and (stats.max - stats.min) < CODE_MAX_RELATIVE_SPREAD * size
        ):
            return make(
                CODE,
                f"integers {stats.min:.0f}..{stats.max:.0f} vary in their last digits only: "
                "treated as categories (codes), not quantities",
            )
        return make(NUMERIC, missing_indicator=train_empty > 0)
    stats = feature.string_stats
    distinct = int(stats.unique)
    if distinct <= 1:
        value = stats.top_values[0].value if stats.top_values else ""
        return make(DROPPED, f"constant in the training split: every value is {value!r}")
    if distinct >= IDENTIFIER_MIN_DISTINCT and distinct >= IDENTIFIER_DISTINCT_FRACTION * present:
        return make(
            DROPPED,
            f"looks like an identifier: {distinct} distinct values in {present} non-empty "
            "training cells",
        )
    return make(CATEGORICAL)


def _looks_integer(feature) -> bool:
    """An INT column (TFDV's type), or FLOAT whose quantile boundaries are all whole (a CSV
    column of codes written as ``17031081000.0``)."""
    from tensorflow_metadata.proto.v0 import statistics_pb2

    if feature.type == statistics_pb2.FeatureNameStatistics.INT:
        return True
    values = [feature.num_stats.min, feature.num_stats.max] + [
        bucket.low_value
        for histogram in feature.num_stats.histograms
        if histogram.type == statistics_pb2.Histogram.QUANTILES
        for bucket in histogram.buckets
    ]
    return all(float(v).is_integer() for v in values)


def _date(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%d")


def _with_classes(plan: DataPlan, label_stats) -> DataPlan:
    classes, distinct = {}, {}
    for split, feature in label_stats.items():
        if feature is None or feature.WhichOneof("stats") != "string_stats":
            continue
        stats = feature.string_stats
        classes[split] = [(v.value, int(v.frequency)) for v in stats.top_values]
        distinct[split] = int(stats.unique)
    train = classes.get(TRAIN) or []
    if not train:
        return dataclasses.replace(plan, baseline_name="majority class (not counted)")
    majority = max(train, key=lambda pair: (pair[1], pair[0]))[0]
    baseline = None
    eval_rows = plan.rows.get(EVAL, 0)
    if EVAL in classes and eval_rows:
        found = dict(classes[EVAL]).get(majority)
        complete = len(classes[EVAL]) >= distinct.get(EVAL, 0)
        if found is not None or complete:
            baseline = (found or 0) / eval_rows
    return dataclasses.replace(
        plan,
        classes=classes,
        distinct_classes=distinct,
        majority_class=majority,
        baseline_name=f"majority class {majority!r}",
        baseline_metric=baseline,
    )


def _with_label_moments(plan: DataPlan, label_stats) -> DataPlan:
    means, stds = {}, {}
    for split, feature in label_stats.items():
        if feature is not None and _is_numeric(feature):
            means[split] = float(feature.num_stats.mean)
            stds[split] = float(feature.num_stats.std_dev)
    if TRAIN not in means:
        return dataclasses.replace(plan, baseline_name="training mean (not computed)")
    baseline = None
    if EVAL in means:  # RMSE on eval of the constant prediction mean_train
        baseline = math.sqrt(stds[EVAL] ** 2 + (means[EVAL] - means[TRAIN]) ** 2)
    return dataclasses.replace(
        plan,
        label_mean=means,
        label_std=stds,
        baseline_name=f"training mean {means[TRAIN]:.4g}",
        baseline_metric=baseline,
    )


# ---------------------------------------------------------------------------- the schema
def annotate_schema(schema: Any, plan: DataPlan, edit_columns: bool = True) -> Any:
    """A copy of ``schema`` carrying ``plan``. With ``edit_columns`` (the generic module):
    dropped columns are ``DEPRECATED`` with the reason as a comment, every other input column
    is optional (no shape, no presence minimum), so Transform, the Evaluator and serving accept
    an empty cell in any column."""
    from tensorflow_metadata.proto.v0 import schema_pb2

    out = schema_pb2.Schema()
    out.CopyFrom(schema)
    if edit_columns:
        reasons = {c.name: c.reason for c in plan.dropped}
        for feature in out.feature:
            if feature.name == plan.label:
                continue
            if feature.name in reasons:
                feature.lifecycle_stage = schema_pb2.DEPRECATED
                feature.annotation.tag.append(SCHEMA_DROP_TAG)
                feature.annotation.comment.append(reasons[feature.name])
                continue
            feature.ClearField("shape")
            feature.ClearField("value_count")
            feature.presence.min_fraction = 0.0
            feature.presence.min_count = 0
    comments = [c for c in out.annotation.comment if not c.startswith(SCHEMA_COMMENT_PREFIX)]
    del out.annotation.comment[:]
    out.annotation.comment.extend(comments + [SCHEMA_COMMENT_PREFIX + plan.to_json()])
    return out


def plan_from_schema(schema: Any) -> Optional[DataPlan]:
    """The plan :func:`annotate_schema` stored in ``schema`` (None: none)."""
    for comment in schema.annotation.comment:
        if comment.startswith(SCHEMA_COMMENT_PREFIX):
            return DataPlan.from_json(comment[len(SCHEMA_COMMENT_PREFIX) :])
    return None


def label_stats_options_schema(label: str, task: str) -> Optional[Any]:
    """For classification: a one-feature schema telling StatisticsGen to count the label's
    values even when they are integers (``int_domain.is_categorical``); None for regression.
    A text label is counted either way."""
    if task != "classification":
        return None
    from tensorflow_metadata.proto.v0 import schema_pb2

    schema = schema_pb2.Schema()
    feature = schema.feature.add(name=label, type=schema_pb2.INT)
    feature.int_domain.is_categorical = True
    return schema
