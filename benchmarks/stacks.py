"""The main job on both TFX stacks, paired: wall time and accuracy of ``ga-tfx run``.

    .venv/bin/python -m benchmarks.stacks [--pairs 3] [--out benchmarks/STACKS]

Each pair runs the README's main job (``ga-tfx run`` with its defaults, ``--no-cache``, a fresh
output directory) once on each stack, back to back, the order alternating from pair to pair
(ABBA...) so that a drift in the machine's load falls on both sides alike:

- the stack of ``.venv/`` on this machine (TFX 1.16 where glibc < 2.39);
- the other stack: TFX 1.21 in the Debian 13 root of ``scripts/debian13_root.sh`` where glibc <
  2.39 (its copy of the tree and its ``.venv/``), else TFX 1.16 in ``.venv-tfx-1.16/``.

The time is the command's wall time as the user sees it (Python start, every component, the
summary); for the root it includes entering it (copying the work tree in, the mounts), measured
apart as ``root_overhead_s`` (``true`` run there) and subtracted in ``ratio_net``. Writes
``OUT.json`` (every run) and ``OUT.md`` (the table, the ratios and the command). Nothing else
should run on the machine meanwhile.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT_SCRIPT = os.path.join(ROOT, "scripts", "debian13_root.sh")


def _which():
    out = subprocess.run(
        ["bash", os.path.join(ROOT, "scripts", "bootstrap.sh"), "which"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return {"this": out[0], "other": out[1], "where": out[2]}


def _command(side, stacks, output_dir):
    job = ["run", "--no-cache", "--output-dir", output_dir]
    if side == "this":
        return [os.path.join(ROOT, ".venv", "bin", "ga-tfx")] + job
    if stacks["where"] == "root":
        return ["bash", ROOT_SCRIPT, "run", ".venv/bin/ga-tfx"] + job
    return [os.path.join(ROOT, f".venv-tfx-{stacks['other']}", "bin", "ga-tfx")] + job


def _run(side, stacks, scratch, index):
    # The root's /tmp is its own: a path under /tmp works on both sides.
    output_dir = os.path.join(
        scratch if side == "this" else "/tmp", f"ga-tfx-stacks-{side}-{index}"
    )
    if side == "this":
        shutil.rmtree(output_dir, ignore_errors=True)
    started = time.monotonic()
    done = subprocess.run(_command(side, stacks, output_dir), capture_output=True, text=True)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"the main job failed on {side}:\n{(done.stdout + done.stderr)[-3000:]}")
    accuracy = float(re.search(r"sparse_categorical_accuracy=([0-9.]+)", done.stdout).group(1))
    blessed = bool(re.search(r"^blessed: +yes$", done.stdout, re.MULTILINE))
    trained_on = re.search(r"^trained on: +(.*)$", done.stdout, re.MULTILINE)
    return {
        "side": side,
        "seconds": round(seconds, 2),
        "accuracy": accuracy,
        "blessed": blessed,
        "trained_on": trained_on.group(1) if trained_on else None,
    }


def _root_overhead(stacks, repeats=3):
    if stacks["where"] != "root":
        return 0.0
    times = []
    for _ in range(repeats):
        started = time.monotonic()
        subprocess.run(["bash", ROOT_SCRIPT, "run", "true"], check=True, capture_output=True)
        times.append(time.monotonic() - started)
    return statistics.median(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3, help="pairs of runs (default 3)")
    parser.add_argument(
        "--out", default=os.path.join("benchmarks", "STACKS"), help="OUT.json and OUT.md"
    )
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error(f"--pairs must be at least 1, got {args.pairs}")
    stacks = _which()
    load_start = os.getloadavg()
    overhead = _root_overhead(stacks)
    runs = []
    with tempfile.TemporaryDirectory() as scratch:
        for pair in range(args.pairs):
            order = ("this", "other") if pair % 2 == 0 else ("other", "this")
            for side in order:
                result = dict(_run(side, stacks, scratch, pair), pair=pair)
                print(json.dumps(result), flush=True)
                runs.append(result)
    by_pair = {}
    for r in runs:
        by_pair.setdefault(r["pair"], {})[r["side"]] = r
    ratios = [p["other"]["seconds"] / p["this"]["seconds"] for p in by_pair.values()]
    net = [(p["other"]["seconds"] - overhead) / p["this"]["seconds"] for p in by_pair.values()]
    commit = subprocess.run(
        ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = bool(
        subprocess.run(
            ["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    report = {
        "command": ".venv/bin/python -m benchmarks.stacks --pairs %d" % args.pairs,
        "started": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "facts": {
            "cpus": os.cpu_count(),
            "host_python": platform.python_version(),
            "commit": commit,
            "dirty": dirty,
            "load_start": "%.1f / %.1f / %.1f" % load_start,
            "load_end": "%.1f / %.1f / %.1f" % os.getloadavg(),
        },
        "stacks": stacks,
        "root_overhead_s": round(overhead, 2),
        "runs": runs,
        "ratio_other_to_this": [round(r, 3) for r in ratios],
        "ratio_median": round(statistics.median(ratios), 3),
        "ratio_net_median": round(statistics.median(net), 3),
    }
    with open(args.out + ".json", "w") as f:
        json.dump(report, f, indent=1)
    with open(args.out + ".md", "w") as f:
        f.write(_markdown(report, by_pair))
    print(f"wrote {args.out}.json and {args.out}.md")


def _markdown(report, by_pair):
    this, other = report["stacks"]["this"], report["stacks"]["other"]
    where = "in the Debian 13 root" if report["stacks"]["where"] == "root" else "on the host"
    lines = [
        "# The main job on both TFX stacks (paired)",
        "",
        f"Made by `{report['command']}` on {report['started']} (commit {report['facts']['commit']}"
        + (", with uncommitted changes" if report["facts"]["dirty"] else "")
        + f"; {report['facts']['cpus']} CPUs, load {report['facts']['load_start']} at the start,"
        f" {report['facts']['load_end']} at the end).",
        "",
        f"`ga-tfx run --no-cache` with its defaults (the README's main job) on TFX {this} "
        f"(`.venv/`, this machine) and TFX {other} ({where}), back to back in each pair, the "
        "order alternating. Wall time of the whole command as the user sees it.",
        "",
        f"| pair | TFX {this} s | TFX {other} s | ratio {other} / {this} | accuracy {this} | "
        f"accuracy {other} | blessed |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for pair, sides in sorted(by_pair.items()):
        a, b = sides["this"], sides["other"]
        lines.append(
            f"| {pair} | {a['seconds']:.1f} | {b['seconds']:.1f} | "
            f"{b['seconds'] / a['seconds']:.2f} | {a['accuracy']:.4f} | {b['accuracy']:.4f} | "
            f"{'yes' if a['blessed'] and b['blessed'] else 'no'} |"
        )
    lines += [
        "",
        f"Median ratio TFX {other} / TFX {this}: **{report['ratio_median']:.2f}**"
        + (
            f" ({report['ratio_net_median']:.2f} without the {report['root_overhead_s']:.1f} s "
            "of entering the root: copying the tree in and the mounts)."
            if report["stacks"]["where"] == "root"
            else "."
        ),
        "",
        "Trained on: " + "; ".join(sorted({r["trained_on"] or "?" for r in report["runs"]})) + ".",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
