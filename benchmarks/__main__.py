"""Command line: ``.venv/bin/python -m benchmarks [--output benchmarks/REPORT.md] ...``.

Runs the phases (the XLA probes, and the correctness and BatchNormalization checks, in
subprocesses; then the paired throughput rounds, which also measure peak tensor memory, driven
from this process),
prints the report and optionally writes it (and its figures as JSON: :mod:`benchmarks.results`).
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2 before TensorFlow is imported)

import argparse
import datetime
import os
import shlex
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from benchmarks import anchor, results
from benchmarks.configs import CONFIGS, DEFAULT_CONFIGS, MAIN, MODELS
from benchmarks.machine import ga_tfx_source, machine_facts
from benchmarks.report import render
from benchmarks.runner import measure_throughput
from benchmarks.workers import run_worker


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Gradient accumulation benchmark: ga_tfx vs plain Keras 2, "
        "gradient-accumulator 0.5.2, Keras 3's gradient_accumulation_steps and the bound.",
    )
    parser.add_argument("--micro-batch", type=int, default=32, help="micro-batch size b")
    parser.add_argument("--accum-steps", type=int, default=8, help="accumulation steps K")
    parser.add_argument(
        "--repeats", type=int, default=7, help="paired rounds (one epoch of every configuration)"
    )
    parser.add_argument(
        "--samples", type=int, default=2048, help="samples per timed epoch (a multiple of K*b)"
    )
    parser.add_argument(
        "--configs",
        default=",".join(DEFAULT_CONFIGS),
        help="comma-separated configurations to measure; default: "
        + ",".join(DEFAULT_CONFIGS)
        + "; also: "
        + ",".join(name for name in CONFIGS if name not in DEFAULT_CONFIGS),
    )
    parser.add_argument("--output", default=None, help="write the Markdown report here")
    parser.add_argument(
        "--json",
        default=None,
        help="write the results here: summary figures, one line per record (benchmarks.results)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=2,
        help="subprocess workers (XLA probes, checks) run at a time, before the rounds",
    )
    parser.add_argument("--skip-checks", action="store_true", help="no correctness/BN phase")
    parser.add_argument(
        "--model",
        choices=MODELS,
        default="conv",
        help="the network: conv (conv+BN on images, the default) or masked_seq (padded token "
        "sequences, Embedding(mask_zero=True), GRU, per-token loss over the valid tokens; main "
        "process configurations without XLA or AccumBatchNormalization, with --skip-checks)",
    )
    args = parser.parse_args(argv)
    if args.samples % (args.micro_batch * args.accum_steps):
        parser.error(
            f"--samples {args.samples} must be a multiple of micro-batch * accum-steps = "
            f"{args.micro_batch * args.accum_steps}"
        )
    args.config_names = [name for name in args.configs.split(",") if name]
    unknown = [name for name in args.config_names if name not in CONFIGS]
    if unknown or not args.config_names:
        parser.error(f"--configs {args.configs!r}: unknown {unknown}; allowed: {list(CONFIGS)}")
    if args.model != "conv":
        # The subprocess hosts, the XLA probes and the checks build the conv net.
        other = [
            name
            for name in args.config_names
            if CONFIGS[name].host != MAIN or CONFIGS[name].jit or CONFIGS[name].bn != "keras"
        ]
        if other or not args.skip_checks:
            parser.error(
                f"--model {args.model}: main-process configurations without XLA or "
                f"AccumBatchNormalization only, with --skip-checks (not: {other})"
            )
    return args


def main(argv=None):
    args = parse_args(argv)
    started = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    t0 = time.perf_counter()
    python = (
        os.path.relpath(sys.executable)
        if sys.executable.startswith(os.getcwd())
        else sys.executable
    )
    command = shlex.join([python, "-m", "benchmarks"] + sys.argv[1:])
    facts = machine_facts()
    facts["anchor_import_error"] = anchor.IMPORT_ERROR
    names = args.config_names
    print(
        f"ga_tfx benchmark: b={args.micro_batch} K={args.accum_steps} "
        f"samples={args.samples} repeats={args.repeats} configs={len(names)}",
        flush=True,
    )

    checks, probes, phases = {}, {}, {}
    t_phase = time.perf_counter()
    jobs = {}
    xla = [name for name in names if CONFIGS[name].jit]
    for framework in sorted({CONFIGS[name].framework for name in xla}):
        group = [name for name in xla if CONFIGS[name].framework == framework]
        jobs[f"xla_probe {framework}"] = ("xla_probe", {"configs": group, "timeout": 1200})
    if not args.skip_checks:
        jobs["correctness"] = ("correctness", {"timeout": 1200})
    print(
        f"[1/2] {len(jobs)} subprocess workers ({args.jobs} at a time): XLA probes, correctness "
        "and BatchNormalization checks",
        flush=True,
    )
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {
            key: pool.submit(run_worker, kind, args, **kwargs)
            for key, (kind, kwargs) in jobs.items()
        }
        for key, future in futures.items():
            r = future.result()
            kind, kwargs = jobs[key]
            if kind == "xla_probe":
                probes.update(r.get("probes", {}))
                for name in kwargs["configs"]:
                    probes.setdefault(name, {"error": r.get("error", "not probed")})
            else:
                checks = r
            print(f"  {key}: {r.get('status')} {r.get('error', '')}", flush=True)
    phases["probes+checks"] = time.perf_counter() - t_phase
    print("[2/2] throughput and tensor memory, paired rounds", flush=True)
    t_phase = time.perf_counter()
    throughput = measure_throughput(args, names)
    phases["throughput"] = time.perf_counter() - t_phase
    facts["load_avg_end"] = os.getloadavg()
    facts["ga_tfx_source_end"] = ga_tfx_source()

    if args.json:
        record = {
            "command": command,
            "facts": facts,
            "throughput": throughput,
            "checks": checks,
            "xla_probes": probes,
            "phases": phases,
            "args": vars(args),
        }
        results.write(record, args.json)
        print(f"wrote {args.json}")
    report = render(
        args,
        facts,
        throughput,
        checks,
        probes,
        command,
        started,
        time.perf_counter() - t0,
        phases,
    )
    print()
    print(report)
    if args.output:
        with open(args.output, "w") as f:
            f.write(report + "\n")
        print(f"\nwrote {args.output}")


if __name__ == "__main__":
    main()
