"""The data plan of a ``--label`` run: what each CSV column becomes, from TFX's statistics.

:func:`make_plan` reads what StatisticsGen and SchemaGen already computed (the statistics of
every split, the inferred schema), never the data itself, and decides per column of the
**training split**:

* ``dropped``: almost empty (a value in fewer than ``MIN_PRESENT_FRACTION`` of the
  training rows), constant (one distinct value), text that looks like an identifier (at
  least ``IDENTIFIER_DISTINCT_FRACTION`` of its non-empty cells distinct, e.g. names,
  ticket numbers), or named like one (``id``, ``..._id``, ``uuid``, ``key``);
* ``timestamp``: integers within Unix seconds (or milliseconds) of 1973..2099: the value, plus
  its hour of day and day of week (UTC);
* ``code``: integers of at least ``CODE_MIN_MAGNITUDE`` that vary by less than
  ``CODE_MAX_RELATIVE_SPREAD`` of their size (census tracts, postcodes with a prefix):
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

Each column's rule and its thresholds are :mod:`.column_rules`; the summary's text
:mod:`.plan_summary`.
"""

from ga_tfx.pipelines.tabular.column_rules import (  # re-exported: the plan's vocabulary
    CATEGORICAL,
    CODE,
    DROPPED,
    EVAL,
    NUMERIC,
    TASKS,
    TIMESTAMP,
    TRAIN,
    Column,
    column_of,
    empty_cells,
    features_of,
    is_numeric,
)

import dataclasses
import json
import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

RARE_CLASS_ROWS = 10  # classes with fewer training rows are reported as rare
MISSING_TOKEN = "__empty__"  # what an empty text cell becomes (a category of its own)
WORST_EMPTY_COLUMNS = 5  # empty cells: the summary names this many columns
LISTED_CLASSES = 12  # classes named per line of the summary (the rest are counted)
# Where the plan lives in the schema: a schema-level annotation comment with this prefix.
SCHEMA_COMMENT_PREFIX = "ga_tfx.data_plan="
SCHEMA_DROP_TAG = "ga_tfx.dropped"
EXCLUDED_REASON = "left out by --exclude-columns"


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
        """The one-screen data summary (about 10-20 lines): :mod:`.plan_summary`."""
        from ga_tfx.pipelines.tabular import plan_summary  # (it reads this module's names)

        return plan_summary.summary_lines(self)

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
    by_split = {split: features_of(stats) for split, stats in statistics.items()}
    rows = {split: int(stats.num_examples) for split, stats in statistics.items()}
    columns = []
    for feature in schema.feature:
        if feature.name == label:
            continue
        empty = {
            split: empty_cells(by_split[split].get(feature.name), rows[split])
            for split in statistics
        }
        if feature.name in exclude:
            columns.append(Column(feature.name, DROPPED, EXCLUDED_REASON, empty))
            continue
        columns.append(
            column_of(feature.name, by_split[TRAIN].get(feature.name), rows[TRAIN], empty)
        )
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
        if feature is not None and is_numeric(feature):
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
