"""The main job before and after a change, paired: its wall time and what it leaves in its
temporary folder.

Each pair runs ``bash scripts/main.sh --output-dir NEW`` in the "before" checkout (another clone
at an older commit, with its own ``.venv/``) and in this one, in turn, each with a new empty
``TMPDIR``; a run's figures are its wall seconds and the bytes and folders it left in that
``TMPDIR``. The report gives each pair and the median ratio after/before.

    .venv/bin/python -m benchmarks.main_job_temp --before /tmp/before --pairs 3

writes ``benchmarks/MAIN_JOB_TEMP.md`` (refuses uncommitted code here: ``--allow-dirty``).
"""

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from benchmarks.provenance import ROOT, add_allow_dirty, measured_code, refuse_uncommitted

REPORT = os.path.join(ROOT, "benchmarks", "MAIN_JOB_TEMP.md")


def _left_behind(folder):
    total = 0
    for d, _, names in os.walk(folder):
        total += sum(
            os.path.getsize(os.path.join(d, n))
            for n in names
            if not os.path.islink(os.path.join(d, n))
        )
    return total, len(os.listdir(folder))


def run_main_job(checkout):
    """(wall seconds, bytes left in TMPDIR, entries left in TMPDIR) of one main job."""
    temp, out = tempfile.mkdtemp(prefix="bench-tmp-"), tempfile.mkdtemp(prefix="bench-out-")
    try:
        started = time.monotonic()
        done = subprocess.run(
            ["bash", os.path.join(checkout, "scripts", "main.sh"), "--output-dir", out],
            env=dict(os.environ, TMPDIR=temp),
            capture_output=True,
            text=True,
        )
        wall = time.monotonic() - started
        if done.returncode != 0 or "blessed:              yes" not in done.stdout:
            raise RuntimeError(
                f"the main job in {checkout} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
            )
        return (wall,) + _left_behind(temp)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="a checkout of the older commit")
    parser.add_argument("--pairs", type=int, default=3)
    add_allow_dirty(parser)
    args = parser.parse_args(argv)
    refuse_uncommitted(parser, args.allow_dirty)
    after_commit = measured_code()
    before_commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=args.before, capture_output=True, text=True
    ).stdout.strip()
    rows = []
    for pair in range(args.pairs):
        before, after = run_main_job(args.before), run_main_job(ROOT)
        rows.append((before, after))
        print(
            f"pair {pair + 1}: before {before[0]:.1f} s, {before[1] / 2**20:.0f} MiB left; "
            f"after {after[0]:.1f} s, {after[1] / 2**20:.0f} MiB left",
            flush=True,
        )
    ratio = statistics.median(a[0] / b[0] for b, a in rows)
    lines = [
        "# The main job before and after: wall time and its temporary folder",
        "",
        "Command: `.venv/bin/python -m benchmarks.main_job_temp "
        f"--before <clone at {before_commit}> --pairs {args.pairs}`; "
        f"before = {before_commit}, after = {after_commit}; each run "
        "`bash scripts/main.sh --output-dir <new>` with a new empty `TMPDIR`, the two in turn "
        "(2 cores).",
        "",
        "| pair | before: wall s | before: left in TMPDIR | after: wall s "
        "| after: left in TMPDIR | after / before |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for i, (b, a) in enumerate(rows, 1):
        lines.append(
            f"| {i} | {b[0]:.1f} | {b[1] / 2**20:.1f} MiB in {b[2]} entries | {a[0]:.1f} | "
            f"{a[1] / 2**20:.1f} MiB in {a[2]} entries | {a[0] / b[0]:.2f} |"
        )
    lines += ["", f"Median ratio after/before: **{ratio:.2f}**.", ""]
    with open(REPORT, "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {REPORT}: median ratio {ratio:.2f}")


if __name__ == "__main__":
    main()
