"""``python -m benchmarks --json``'s results (``benchmarks/results.py``): summary figures, one
line per record, and the committed JSON reports agree with their Markdown reports.

Reads files and small dicts only: no TensorFlow, fast, in every environment.
"""

import json
import os

import pytest

from benchmarks import critical_batch_record, results
from benchmarks.report import fmt_spread

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The reports `python -m benchmarks --output X.md --json X.json` wrote (their Markdown's command
# says so).
REPORTS = ["REPORT", "GOAL", "NOISE_SCALE", "DIVISOR"]


def _spread(median):
    return {"median": median, "q1": median - 0.01, "q3": median + 0.01, "min": 0.5, "max": 2.0}


def _record():
    """A run's record as ``benchmarks.__main__`` assembles it: two configurations of three
    rounds, one pair."""
    rounds = [{"wall": 0.123456789, "cpu": 0.2, "tensor_peak_mib": 12.375}] * 3
    return {
        "command": "python -m benchmarks",
        "facts": {"ga_tfx_source": {"commit": "abc1234", "dirty": False}},
        "throughput": {
            "configs": {
                name: {"status": "ok", "rounds": list(rounds), "cpu_rate": _spread(1234.56789)}
                for name in ("ga_tfx", "bound_fit_data")
            },
            "pairs": [
                {"num": "ga_tfx", "den": "bound_fit_data", "what": "x", "cpu": _spread(0.98765)}
            ],
            "repeats": 3,
        },
        "checks": {"correctness": [{"max_dw": 1.8328428268432617e-06}], "status": "ok"},
        "xla_probes": {},
    }


def test_compact_leaves_out_the_rounds_and_keeps_the_summaries():
    record = _record()
    out = results.compact(record)
    configs = out["throughput"]["configs"]
    assert all("rounds" not in config for config in configs.values())
    assert configs["ga_tfx"]["cpu_rate"]["median"] == 1234.57  # 6 significant digits
    assert out["throughput"]["pairs"][0]["cpu"]["median"] == 0.98765
    assert out["checks"]["correctness"][0]["max_dw"] == 1.83284e-06
    assert out["throughput"]["repeats"] == 3 and out["command"] == record["command"]
    assert "rounds" in record["throughput"]["configs"]["ga_tfx"]  # the input is not changed
    assert results.compact(out) == out


def test_write_puts_one_record_per_line(tmp_path):
    path = tmp_path / "r.json"
    results.write(_record(), str(path))
    text = path.read_text()
    assert json.loads(text) == results.compact(_record())
    lines = text.splitlines()
    # each configuration and the pair on a line of its own, whole
    for name in ("ga_tfx", "bound_fit_data"):
        [line] = [line for line in lines if line.strip().startswith(f'"{name}": {{')]
        assert json.loads("{" + line.strip().rstrip(",") + "}")[name]["status"] == "ok"
    assert sum('"num": "ga_tfx"' in line for line in lines) == 1


@pytest.mark.parametrize("name", REPORTS)
def test_committed_results_are_compact_and_match_their_report(name):
    """The committed JSON is what ``results.write`` writes (no rounds), and each pair's wall and
    CPU ratios in it print as its Markdown report's headline table does."""
    with open(os.path.join(ROOT, "benchmarks", f"{name}.json"), encoding="utf-8") as f:
        text = f.read()
    record = json.loads(text)
    assert results.compact(record) == record
    assert text.count("\n") < 200, f"{name}.json: {text.count(chr(10))} lines"
    with open(os.path.join(ROOT, "benchmarks", f"{name}.md"), encoding="utf-8") as f:
        report = f.read()
    assert f"--json benchmarks/{name}.json" in report and record["command"] in report
    pairs = [pair for pair in record["throughput"]["pairs"] if "wall" in pair]
    assert pairs
    for pair in pairs:
        row = (
            f"| `{pair['num']}` / `{pair['den']}` | {fmt_spread(pair['wall'])} | "
            f"{fmt_spread(pair['cpu'])} | {pair['wall']['n']} |"
        )
        assert row in report, f"{name}: {row}"


def test_critical_batch_record_reads_back_what_it_wrote_in_short_lines(tmp_path):
    """Tables (lists of records with the same keys) become columns and rows, long lists of
    numbers are wrapped, and :func:`read` gives back what :func:`write` was given."""
    curve = [dict(window=n, loss=n / 4, noise=None, done=n > 300) for n in range(1, 400)]
    datasets = [
        dict(name="d", probes=[dict(curve=curve, seed=0)] * 2, paths=[0.5 * n for n in range(300)]),
        dict(name="e", sweep=[dict(batch=8, steps_per_seed=[1, 2])], fit=dict(b_crit=28.1)),
    ]
    path = tmp_path / "CB.json"
    critical_batch_record.write(str(path), dict(command="c", facts=dict(cpus=2)), datasets)
    text = path.read_text()
    assert critical_batch_record.read(str(path)) == dict(
        command="c", facts=dict(cpus=2), datasets=datasets
    )
    assert max(len(line) for line in text.splitlines()) <= critical_batch_record.WIDTH
    assert json.loads(text)["datasets"][0]["probes"][0]["curve"]["columns"] == list(curve[0])


def test_committed_critical_batch_record_is_short_lines_and_matches_its_report():
    """``benchmarks/CRITICAL_BATCH.json`` has no long line, holds each probe's curve (a row per
    window, the columns its B_path is computed from), and its fitted figures and probes print
    as ``CRITICAL_BATCH.md``'s table does; the report's figure is the manual's one copy."""
    path = os.path.join(ROOT, "benchmarks", "CRITICAL_BATCH.json")
    with open(path, encoding="utf-8") as f:
        longest = max(len(line) for line in f)
    assert longest <= 250, f"CRITICAL_BATCH.json: a line of {longest} characters"
    record = critical_batch_record.read(path)
    with open(os.path.join(ROOT, "benchmarks", "CRITICAL_BATCH.md"), encoding="utf-8") as f:
        report = f.read()
    assert record["command"] in report and len(record["datasets"]) == 4
    for r in record["datasets"]:
        fit = r["fit"]
        simple = ", ".join(f"{p['recommendation']['noise_scale']:.1f}" for p in r["probes"])
        row = (
            f"| {r['name']} | {r['target']} | {fit['s_min']:.1f} | {fit['e_min']:.0f} | "
            f"{fit['b_crit']:.1f} | {simple} |"
        )
        assert row in report, row
        for p in r["probes"] + r["variants"] + r["user_probes"]:
            assert len(p["curve"]) == p["windows"] > 0
            assert {"window_samples", "noise_trace_window", "noise_grad_sq_window"} <= set(
                p["curve"][-1]
            )
    link = "![critical batch](../docs/img/critical_batch.png)"
    assert link in report and os.path.isfile(
        os.path.join(ROOT, "docs", "img", "critical_batch.png")
    )
    assert not os.path.exists(os.path.join(ROOT, "benchmarks", "critical_batch.png"))


@pytest.mark.parametrize("stem", ["KERAS3", "KERAS3_jax"])
def test_committed_keras3_front_report_matches_its_json(stem):
    """``python -m benchmarks.keras3_front``'s report: the JSON is compact, and its command,
    commit, every paired ratio (with its goal's verdict) and the memory verdict are in the
    Markdown as its writer prints them."""
    from benchmarks import keras3_front

    with open(os.path.join(ROOT, "benchmarks", f"{stem}.json"), encoding="utf-8") as f:
        record = json.load(f)
    assert results.compact(record) == record
    with open(os.path.join(ROOT, "benchmarks", f"{stem}.md"), encoding="utf-8") as f:
        report = f.read()
    assert record["command"] in report and record["facts"]["commit"] in report
    assert [p["num"] for p in record["pairs"]] == [
        p[0] for p in keras3_front.pairs_on(record["facts"]["backend"])
    ]
    for pair in record["pairs"]:
        assert keras3_front.pair_row(pair) in report, f"{stem}: {keras3_front.pair_row(pair)}"
    memory = keras3_front.VERDICT[record["memory_goal_met"]]
    assert f"plain Keras 3 @ b, medians): {memory}" in report
