"""Columns that give the label away: each column alone, as a lookup table, against the label.

A column recorded after the outcome (the Titanic's lifeboat, a job's hours for "did she work")
lets a model score near-perfectly on the eval split and fail on the rows it is meant for, where
that column is not known yet. :func:`scan` fits, for every column used, the simplest model of
the label on that column alone, from the **training split**: its rows grouped by the column's
value (text and codes: the value; numbers: :data:`BINS` training-quantile bins; an empty cell:
a group of its own), each group predicting its majority class or mean label (a value training
never saw: the training majority or mean). Scored on the **eval split**, the column is a
*leak* when this one-column model's error is at most :data:`LEAK_SHARE` of the trivial
baseline's (majority class / training mean), i.e. the column alone removes at least 90% of the
error: nearly perfect. (A strong honest feature removes less: a diamond's carat alone leaves
about a third of the price's RMSE.) The rule is fixed before any table was scanned and is
tested against a known leak (the Titanic's ``boat``, ``tests/test_leaks.py``).

Leaks are reported, not removed: ``--exclude-columns`` leaves columns out. NumPy only.
"""

import dataclasses
from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np

LEAK_SHARE = 0.1  # a leak: alone, at most this share of the trivial baseline's eval error
BINS = 20  # a number column's groups: training-quantile bins
_MISSING = "\0missing"  # the group of empty cells


@dataclasses.dataclass(frozen=True)
class Leak:
    """A column that alone predicts the label nearly perfectly.

    Attributes:
      column: its name; ``error``: the one-column model's eval error (1 - accuracy, or RMSE);
      baseline: the trivial model's eval error.
    """

    column: str
    error: float
    baseline: float

    def describe(self, label: str, task: str) -> str:
        metric = "error" if task == "classification" else "RMSE"
        return (
            f"{self.column!r} alone predicts {label!r} with eval {metric} {self.error:.3g} "
            f"(the trivial baseline's: {self.baseline:.3g})"
        )


def groups(train: Sequence[object], *columns: Sequence[object]) -> List[List[object]]:
    """The group of each value of each of ``columns`` by the training column ``train`` (its
    bins computed once; None: empty)."""
    present = [v for v in train if v is not None]
    numeric = bool(present) and all(isinstance(v, (int, float)) for v in present)
    if not numeric:
        return [[_MISSING if v is None else v for v in values] for values in columns]
    numbers = np.asarray(present, dtype=np.float64)
    edges = np.unique(np.quantile(numbers, np.linspace(0, 1, BINS + 1)[1:-1]))
    return [
        [
            _MISSING if v is None else int(np.searchsorted(edges, float(v), side="right"))  # type: ignore[arg-type]
            for v in values
        ]
        for values in columns
    ]


def one_column_error(
    train_column: Sequence[object],
    train_label: Sequence[object],
    eval_column: Sequence[object],
    eval_label: Sequence[object],
    task: str,
) -> float:
    """The eval error of the label predicted from one column's group (module docstring)."""
    train_groups, eval_groups = groups(train_column, train_column, eval_column)
    if task == "classification":
        counts: Dict[object, Dict[object, int]] = {}
        for group, label in zip(train_groups, train_label):
            by_label = counts.setdefault(group, {})
            by_label[label] = by_label.get(label, 0) + 1
        overall = _majority(train_label)
        best = {g: _most_common(c) for g, c in counts.items()}
        wrong = sum(best.get(g, overall) != y for g, y in zip(eval_groups, eval_label))
        return wrong / max(len(eval_label), 1)
    sums: Dict[object, List[float]] = {}
    for group, label in zip(train_groups, train_label):
        sums.setdefault(group, []).append(float(label))  # type: ignore[arg-type]
    mean = float(np.mean(np.asarray(train_label, dtype=np.float64)))
    means = {g: float(np.mean(v)) for g, v in sums.items()}
    predicted = np.asarray([means.get(g, mean) for g in eval_groups])
    return float(np.sqrt(np.mean((predicted - np.asarray(eval_label, dtype=np.float64)) ** 2)))


def baseline_error(train_label, eval_label, task: str) -> float:
    """The trivial model's eval error: the training majority class, or the training mean."""
    if task == "classification":
        majority = _majority(train_label)
        return sum(y != majority for y in eval_label) / max(len(eval_label), 1)
    mean = float(np.mean(np.asarray(train_label, dtype=np.float64)))
    return float(np.sqrt(np.mean((np.asarray(eval_label, dtype=np.float64) - mean) ** 2)))


def scan(
    train: Mapping[str, Sequence[object]],
    evaluation: Mapping[str, Sequence[object]],
    label: str,
    task: str,
    columns: Optional[Sequence[str]] = None,
) -> List[Leak]:
    """The leaks among ``columns`` (default: every column but the label), most telling first.

    ``train`` / ``evaluation``: ``{column: values}`` of the rows with a label (None: an empty
    cell)."""
    if not train.get(label) or not evaluation.get(label):
        return []
    baseline = baseline_error(train[label], evaluation[label], task)
    if baseline <= 0:
        return []
    found = []
    for column in columns if columns is not None else [c for c in train if c != label]:
        error = one_column_error(
            train[column], train[label], evaluation[column], evaluation[label], task
        )
        if error <= LEAK_SHARE * baseline:
            found.append(Leak(column, error, baseline))
    return sorted(found, key=lambda leak: leak.error)


def _majority(labels: Sequence[object]) -> object:
    counts: Dict[object, int] = {}
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
    return _most_common(counts)


def _most_common(counts: Mapping[object, int]) -> object:
    """The most counted key (ties: the larger as text, so the choice does not depend on
    order)."""
    return max(counts.items(), key=lambda item: (item[1], str(item[0])))[0]
