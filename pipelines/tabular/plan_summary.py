"""The one-screen data summary of a ``--label`` run's :class:`~.data_plan.DataPlan`.

:func:`summary_lines` (what :meth:`DataPlan.summary_lines` returns): the rows by split and those
dropped for an empty label, the columns used and dropped (and why), the worst empty cells, the
label's classes (rare ones, ones not in train) or moments, the baseline, and any possible leak.
Printed by :mod:`.plan_check` before Transform and training.
"""

from ga_tfx.pipelines.tabular.data_plan import (
    CODE,
    DROPPED,
    EVAL,
    LISTED_CLASSES,
    MISSING_TOKEN,
    RARE_CLASS_ROWS,
    TIMESTAMP,
    TRAIN,
    WORST_EMPTY_COLUMNS,
    DataPlan,
)

from typing import Dict, List


def summary_lines(plan: DataPlan) -> List[str]:
    """The one-screen data summary (about 10-20 lines)."""
    splits = ", ".join(f"{s} {n}" for s, n in sorted(plan.rows.items(), key=_split_order))
    unlabeled = sum(plan.unlabeled_rows.values())
    lines = [
        f"data: {sum(plan.rows.values())} rows ({splits})"
        + (
            f"; {unlabeled} rows with an empty or missing {plan.label!r} dropped ("
            + ", ".join(
                f"{s} {n}" for s, n in sorted(plan.unlabeled_rows.items(), key=_split_order)
            )
            + ")"
            if unlabeled
            else ""
        )
    ]
    kinds: Dict[str, int] = {}
    for column in plan.used:
        kinds[column.treatment] = kinds.get(column.treatment, 0) + 1
    lines.append(
        f"columns: {len(plan.used)} used ("
        + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
        + f"), {len(plan.dropped)} dropped"
    )
    for column in plan.columns:
        if column.treatment in (DROPPED, CODE, TIMESTAMP):
            lines.append(f"  {column.treatment:<9} {column.name}: {column.reason}")
    empty = sorted(
        (c for c in plan.used if c.empty_cells.get(TRAIN, 0)),
        key=lambda c: -c.empty_cells.get(TRAIN, 0),
    )
    train_rows = max(plan.rows.get(TRAIN, 0), 1)
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
            f"  numbers: the training median plus a missing flag; text: the token {MISSING_TOKEN!r}"
        )
    else:
        lines.append("empty cells (train): none in the columns used")
    lines += _label_lines(plan)
    lines.append(f"baseline: {plan.baseline_line()}")
    for column, error, baseline in plan.leaks:
        metric = "error" if plan.task == "classification" else "RMSE"
        lines.append(
            f"warning: possible leak: {column!r} alone predicts {plan.label!r} with eval "
            f"{metric} {error:.3g} (the baseline's: {baseline:.3g}); a column known only "
            f"after the outcome inflates the eval metric: --exclude-columns {column} "
            "leaves it out"
        )
    return lines


def _label_lines(plan: DataPlan) -> List[str]:
    """The label's lines: its classes by split (rare, unseen), or its moments."""
    if plan.task == "regression":
        if TRAIN not in plan.label_mean:
            return [f"label {plan.label!r} (regression): no statistics"]
        return [
            f"label {plan.label!r} (regression): "
            + ", ".join(
                f"{s} mean {plan.label_mean[s]:.4g} sd {plan.label_std.get(s, 0.0):.4g}"
                for s in sorted(plan.label_mean, key=_split_order_key)
            )
        ]
    if not plan.classes.get(TRAIN):
        return [
            f"label {plan.label!r} (classification): classes not counted by the "
            "statistics (a float label?)"
        ]
    lines = [
        f"label {plan.label!r}: {plan.distinct_classes.get(TRAIN, 0)} classes in train"
        + "".join(
            f", {n} in {s}"
            for s, n in sorted(plan.distinct_classes.items(), key=_split_order)
            if s != TRAIN
        )
    ]
    for split, classes in sorted(plan.classes.items(), key=_split_order):
        listed = ", ".join(f"{c} {n}" for c, n in classes[:LISTED_CLASSES])
        more = plan.distinct_classes.get(split, len(classes)) - min(len(classes), LISTED_CLASSES)
        lines.append(f"  {split}: {listed}" + (f" and {more} more" if more > 0 else ""))
    rare = plan.rare_classes()
    if rare:
        lines.append(
            f"  rare (fewer than {RARE_CLASS_ROWS} training rows): "
            + _listed([f"{c} {n}" for c, n in rare])
        )
    unseen = plan.unseen_classes()
    if unseen:
        lines.append(
            "  not in train (the model cannot predict them; their rows count as errors): "
            + _listed([f"{c} ({s} {n})" for c, s, n in unseen])
        )
    return lines


def _listed(items: List[str]) -> str:
    """The first ``LISTED_CLASSES`` items, then how many more."""
    more = len(items) - LISTED_CLASSES
    return ", ".join(items[:LISTED_CLASSES]) + (f" and {more} more" if more > 0 else "")


def _split_order_key(split: str):
    return (split != TRAIN, split != EVAL, split)


def _split_order(item):
    return _split_order_key(item[0])
