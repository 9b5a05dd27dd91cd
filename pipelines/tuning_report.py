"""The tuning report of a ``ga-tfx run --tune``: a table, ``tuning_report.csv`` and a plot.

Reads the Tuner's trial record (JSON lines, see :mod:`ga_tfx.components.tuner.trials`), keeps
the latest search's trials, and writes next to the run's outputs:

* ``tuning_report.csv``: one row per trial, best first;
* ``tuning_report.png``: score against effective batch size, one marker per trial, the AGC
  clip factor as colour (grey: AGC off), failed trials as crosses at the bottom.

Each trial's measured gradient noise scale (``noise_scale``, B_simple in samples, at the trial's
end) stands beside its score. A noise-scale probe (``--tune-strategy noise_scale``) adds its
evidence: ``noise_scale_probe.csv`` (one row per window: update, samples, loss, noise scale and
the two moving averages it is the ratio of, the window's own two estimates, from which the
probe's B_path is made), ``noise_scale_probe.png`` (the noise scale and the
loss against samples, with the recommended effective batch) and lines saying what was measured,
why the probe stopped when it had a target loss (:func:`stop_lines`) and why ``accum_steps``
was chosen (:func:`probe_lines`).

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
    "noise_scale",
    "status",
)
PROBE_CSV, PROBE_PNG = "noise_scale_probe.csv", "noise_scale_probe.png"


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
                "noise_scale": metrics.get("noise_scale"),
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
    """Writes the CSV and the plot into ``output_dir``; returns ``{"lines", "csv", "png",
    "files", "probe_lines"}`` (None when no trial was recorded). ``files`` lists every file
    written; ``probe_lines`` is the noise-scale probe's evidence ([] without a probe)."""
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
    files = [csv_path, png_path]
    probe = next((r["probe"] for r in records if r.get("probe")), None)
    lines = probe_lines(probe) if probe is not None else []
    if probe is not None and probe.get("curve"):
        files += write_probe(probe, output_dir)
    return {
        "lines": table_lines(table),
        "csv": csv_path,
        "png": png_path,
        "files": files,
        "probe_lines": lines,
    }


def probe_lines(probe: Dict[str, Any]) -> List[str]:
    """What the noise-scale probe measured and why it chose ``accum_steps``, in words."""
    if "recommendation" not in probe:
        return [f"noise-scale probe: no recommendation: {probe.get('error', 'no estimate')}"]
    rec, curve = probe["recommendation"], probe.get("curve") or []
    micro, k = probe["micro_batch_size"], probe["probe_accum_steps"]
    last = curve[-1] if curve else {}
    measure = rec.get("measure", "B_simple")  # B_simple: a record from before B_path
    lines = [
        f"noise-scale probe:    accum_steps {k} x micro-batch {micro} (effective batch "
        f"{k * micro}), {last.get('window', '?')} windows, {last.get('samples', '?')} samples",
        f"measured {measure + ':':<13}{rec['noise_scale']:.4g} samples ("
        + (
            "the noise scale of the probe's path, each window weighted by its progress)"
            if measure == "B_path"
            else "the ratio of the moving averages at the probe's last update)"
        ),
    ]
    if measure == "B_path" and last.get("noise_scale"):
        lines.append(
            f"  B_simple at the probe's last update: {last['noise_scale']:.4g} samples (the "
            "ratio of the moving averages)"
        )
    half = [r["noise_scale"] for r in curve[len(curve) // 2 :] if r.get("noise_scale")]
    if half:
        lines.append(
            f"  over the probe's second half: {min(half):.4g} to {max(half):.4g} samples "
            f"({len(half)} windows); a wide range means a longer probe (--tuning-windows) "
            "would measure it better"
        )
    lines += stop_lines(probe)
    lines.append(f"recommended:          accum_steps {rec['accum_steps']}: {rec['reason']}")
    return lines


def stop_lines(probe: Dict[str, Any]) -> List[str]:
    """Why a probe with a target loss (``--tuning-target-loss``) stopped ([] without one)."""
    if probe.get("target_loss") is None:
        return []
    target, curve = probe["target_loss"], probe.get("curve") or []
    windows = curve[-1].get("window", "?") if curve else 0
    if probe.get("reached_target"):
        return [
            f"stopped at the target: eval loss at or below {target:.4g} after {windows} windows "
            "(the probe measured the path to the loss you aim at)"
        ]
    return [
        f"target NOT reached:   eval loss still above {target:.4g} after {windows} windows (the "
        "cap, --tuning-windows); the noise scale grows as the loss falls, so the recommendation "
        "is that of a higher loss: a lower limit of the target's effective batch. A longer "
        "probe (--tuning-windows) would reach the target"
    ]


def write_probe(probe: Dict[str, Any], output_dir: str) -> List[str]:
    """The probe's curve as ``noise_scale_probe.csv`` and ``.png``; returns their paths."""
    curve = probe["curve"]
    fields = list(curve[0])
    csv_path = os.path.join(output_dir, PROBE_CSV)
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(curve)
    png_path = os.path.join(output_dir, PROBE_PNG)
    plot_probe(probe, png_path)
    return [csv_path, png_path]


def plot_probe(probe: Dict[str, Any], path: str) -> None:
    """Noise scale (left axis, log) and loss (right axis) against samples seen; the
    recommended effective batch and the others allowed as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    curve, rec = probe["curve"], probe["recommendation"]
    micro = probe["micro_batch_size"]
    figure, axes = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    measured = [r for r in curve if r.get("noise_scale")]
    axes.plot(
        [r["samples"] for r in measured],
        [r["noise_scale"] for r in measured],
        "o-",
        color="C0",
        label="noise scale B_simple",
    )
    for k in rec["choices"]:
        chosen = k == rec["accum_steps"]
        axes.axhline(
            k * micro,
            color="C3" if chosen else "0.8",
            lw=2 if chosen else 0.8,
            ls="-" if chosen else ":",
            label=f"recommended: {k} x {micro} = {k * micro}" if chosen else None,
        )
    axes.set_yscale("log", base=2)
    axes.set_xlabel("samples seen by the probe")
    axes.set_ylabel("samples (B_simple; effective batch)")
    losses = [r for r in curve if r.get("loss") is not None]
    if losses:
        right = axes.twinx()
        right.plot(
            [r["samples"] for r in losses], [r["loss"] for r in losses], color="C2", alpha=0.6
        )
        right.set_ylabel("window loss", color="C2")
    measure = rec.get("measure", "B_simple")
    if measure != "B_simple":
        axes.axhline(rec["noise_scale"], color="C1", ls="--", label=f"{measure}")
    axes.set_title(
        f"noise-scale probe: accum_steps {probe['probe_accum_steps']} x {micro}; "
        f"{measure} {rec['noise_scale']:.3g}"
    )
    axes.grid(True, alpha=0.3)
    axes.legend(loc="upper left", fontsize="small")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


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
