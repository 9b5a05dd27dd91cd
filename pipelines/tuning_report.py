"""The tuning report of a ``ga-tfx run --tune``: a table, ``tuning_report.csv`` and a plot.

Reads the Tuner's trial record (JSON lines, see :mod:`ga_tfx.components.tuner.trials`), keeps
the latest search's trials, and writes next to the run's outputs:

* ``tuning_report.csv``: one row per trial, best first;
* ``tuning_report.png``: score against effective batch size, one marker per trial, the AGC
  clip factor as colour (grey: AGC off), failed trials as crosses at the bottom.

Standard library plus matplotlib (imported only to draw).
"""

import csv
import json
import os
from typing import Any, Dict, List, Optional, Sequence

COLUMNS = (
    "trial",
    "accum_steps",
    "micro_batch",
    "effective_batch",
    "agc_clip_factor",
    "learning_rate",
    "score",
    "status",
)


def read_trials(path: str) -> List[Dict[str, Any]]:
    """The latest search's trial records in ``path`` ([] when there is none)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    if not records:
        return []
    latest = records[-1].get("run")
    by_id = {r["trial_id"]: r for r in records if r.get("run") == latest}  # last write wins
    return list(by_id.values())


def rows(records: Sequence[Dict[str, Any]], maximize: bool) -> List[Dict[str, Any]]:
    """Table rows (:data:`COLUMNS`), completed trials best first, then the others."""
    table = []
    for record in records:
        values, metrics = record.get("values", {}), record.get("metrics", {})
        accum, micro = values.get("accum_steps"), values.get("micro_batch_size")
        effective = metrics.get("effective_batch_size") or (
            accum * micro if accum and micro else None
        )
        agc = values.get("agc_clip_factor") if values.get("agc", True) else None
        table.append(
            {
                "trial": record["trial_id"],
                "accum_steps": accum,
                "micro_batch": micro,
                "effective_batch": None if effective is None else int(effective),
                "agc_clip_factor": agc,
                "learning_rate": values.get("learning_rate"),
                "score": record.get("score"),
                "status": record.get("status", "?"),
            }
        )
    scored = [r for r in table if r["score"] is not None]
    others = [r for r in table if r["score"] is None]
    scored.sort(key=lambda r: r["score"], reverse=maximize)
    return scored + others


def _shown(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def table_lines(table: Sequence[Dict[str, Any]]) -> List[str]:
    """The rows as aligned text lines (a header first)."""
    cells = [list(COLUMNS)] + [[_shown(row[c]) for c in COLUMNS] for row in table]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in cells
    ]


def write(trials_path: str, output_dir: str, objective: str) -> Optional[Dict[str, Any]]:
    """Writes the CSV and the plot into ``output_dir``; returns ``{"lines", "csv", "png"}``
    (None when no trial was recorded)."""
    records = read_trials(trials_path)
    if not records:
        return None
    maximize = not any(word in objective for word in ("loss", "error"))
    table = rows(records, maximize)
    os.makedirs(output_dir, exist_ok=True)
    csv_path = os.path.join(output_dir, "tuning_report.csv")
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(table)
    png_path = os.path.join(output_dir, "tuning_report.png")
    plot(table, png_path, objective)
    return {"lines": table_lines(table), "csv": csv_path, "png": png_path}


def plot(table: Sequence[Dict[str, Any]], path: str, objective: str) -> None:
    """Score against effective batch; colour = AGC clip factor (grey: off); x: failed."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    done = [r for r in table if r["score"] is not None and r["effective_batch"]]
    with_agc = [r for r in done if r["agc_clip_factor"] is not None]
    without = [r for r in done if r["agc_clip_factor"] is None]
    if without:
        axes.scatter(
            [r["effective_batch"] for r in without],
            [r["score"] for r in without],
            c="0.6",
            s=60,
            edgecolors="k",
            label="AGC off",
        )
    if with_agc:
        points = axes.scatter(
            [r["effective_batch"] for r in with_agc],
            [r["score"] for r in with_agc],
            c=[r["agc_clip_factor"] for r in with_agc],
            cmap="viridis",
            s=60,
            edgecolors="k",
            label="AGC on",
        )
        figure.colorbar(points, ax=axes, label="AGC clip factor")
    failed = [r for r in table if r["score"] is None and r["effective_batch"]]
    if failed:
        bottom = min([r["score"] for r in done], default=0.0)
        axes.scatter(
            [r["effective_batch"] for r in failed],
            [bottom] * len(failed),
            marker="x",
            c="red",
            s=60,
            label="failed",
        )
    batches = sorted({r["effective_batch"] for r in table if r["effective_batch"]})
    if batches:
        axes.set_xscale("log", base=2)
        axes.set_xticks(batches)
        axes.set_xticklabels([str(b) for b in batches])
    axes.set_xlabel("effective batch size (accum_steps x micro-batch)")
    axes.set_ylabel(objective)
    axes.set_title(f"ga-tfx tuning: {len(table)} trials")
    axes.grid(True, alpha=0.3)
    axes.legend(loc="best", fontsize="small")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
