"""Subprocess workers: the parent's launcher and the child's entry point.

The child is ``python -m benchmarks.workers --kind correctness|xla_probe ...``; it writes one JSON
result (``status`` "ok" or "error" with the error text) to the file named by ``--result``.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import traceback

from benchmarks import frameworks
from benchmarks.configs import CONFIGS
from benchmarks.errors import error_text

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def module_command(module: str, args) -> list:
    """``python -m module`` with the run's ``--micro-batch``, ``--accum-steps`` and
    ``--samples`` (every benchmark subprocess takes these three)."""
    return [
        sys.executable,
        "-m",
        module,
        "--micro-batch",
        str(args.micro_batch),
        "--accum-steps",
        str(args.accum_steps),
        "--samples",
        str(args.samples),
    ]


def run_worker(kind, args, configs=(), timeout=600):
    """Run one worker in a fresh process; returns its result dict (never raises).

    ``configs``: configuration names (the XLA probe's), all of one framework: the process runs
    Keras 3 if they are Keras 3 ones, else Keras 2.
    """
    with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as f:
        path = f.name
    cmd = module_command("benchmarks.workers", args) + ["--kind", kind, "--result", path]
    if configs:
        cmd += ["--configs", ",".join(configs)]
    env = frameworks.subprocess_env(CONFIGS[configs[0]].framework if configs else frameworks.KERAS2)
    try:
        proc = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT
        )
        with open(path) as f:
            text = f.read()
        result = json.loads(text) if text.strip() else {}
        if proc.stdout:
            sys.stdout.write(proc.stdout)
        if proc.returncode != 0 or not result:
            result.setdefault("status", "error")
            result.setdefault(
                "error",
                f"worker exited with {proc.returncode}: "
                + " ".join(proc.stderr.strip().splitlines()[-3:])[-300:],
            )
        return result
    except subprocess.TimeoutExpired:
        return {"status": "error", "error": f"worker timed out after {timeout}s"}
    finally:
        os.unlink(path)


def main(argv=None):
    parser = argparse.ArgumentParser(description="benchmark subprocess worker (internal)")
    parser.add_argument("--kind", required=True, choices=("correctness", "xla_probe"))
    parser.add_argument("--result", required=True, help="JSON result file")
    parser.add_argument("--micro-batch", type=int, required=True)
    parser.add_argument("--accum-steps", type=int, required=True)
    parser.add_argument("--samples", type=int, required=True)
    parser.add_argument("--configs", default=None, help="comma-separated (xla_probe)")
    args = parser.parse_args(argv)
    result = {}
    try:
        if args.kind == "xla_probe":
            from benchmarks.xla_probe import worker_xla_probe

            worker_xla_probe(args, result)
        else:
            from benchmarks.correctness import worker_correctness

            worker_correctness(args, result)
        result.setdefault("status", "ok")
    except Exception as error:
        result.update(status="error", error=error_text(error))
        traceback.print_exc()
    with open(args.result, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
