"""Each CSV column's rule in a ``--label`` run's data plan, from TFX's statistics of it.

:func:`column_of` decides what one column becomes (:class:`Column`: ``dropped``,
``timestamp``, ``code``, ``categorical`` or ``numeric``, and why) from its statistics in the
training split, by the thresholds below; :mod:`.data_plan` documents the rules and applies
this to every column (:func:`~.data_plan.make_plan`). Standard library plus the
``tensorflow_metadata`` protos.
"""

import dataclasses
import datetime
import re
from typing import Any, Dict, Mapping

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


def features_of(dataset) -> Dict[str, Any]:
    return {feature.path.step[0]: feature for feature in dataset.features if feature.path.step}


def common_stats(feature):
    kind = feature.WhichOneof("stats")
    return getattr(feature, kind).common_stats if kind else None


def empty_cells(feature, rows: int) -> int:
    """Rows of the split without a value (CsvExampleGen writes an empty cell as an empty list:
    ``rows - tot_num_values`` for a one-value column)."""
    if feature is None:
        return rows
    common = common_stats(feature)
    return max(0, rows - int(common.tot_num_values)) if common is not None else rows


def is_numeric(feature) -> bool:
    return feature.WhichOneof("stats") == "num_stats"


def column_of(name: str, feature, rows: int, empty: Dict[str, int]) -> Column:
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
    if is_numeric(feature):
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
