"""Command line: ``.venv/bin/python -m benchmarks [--output benchmarks/REPORT.md] ...``.

Runs the three phases (memory in fresh subprocesses, correctness and BatchNormalization checks in
a subprocess, throughput in this process), prints the report and optionally writes it.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2 before TensorFlow is imported)

import argparse  # noqa: E402
import datetime  # noqa: E402
import os  # noqa: E402
import shlex  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402

from benchmarks.configs import CONFIGS  # noqa: E402
from benchmarks.machine import ga_tfx_source, machine_facts  # noqa: E402
from benchmarks.report import render  # noqa: E402
from benchmarks.runner import measure_throughput  # noqa: E402
from benchmarks.workers import run_worker  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Gradient accumulation benchmark: ga_tfx vs plain Keras 2 vs "
                    "gradient-accumulator 0.5.2.")
    parser.add_argument("--micro-batch", type=int, default=32, help="micro-batch size b")
    parser.add_argument("--accum-steps", type=int, default=8, help="accumulation steps K")
    parser.add_argument("--repeats", type=int, default=15,
                        help="timed rounds per configuration (interleaved)")
    parser.add_argument("--samples", type=int, default=2048,
                        help="samples per timed epoch (a multiple of K*b)")
    parser.add_argument("--output", default=None, help="write the Markdown report here")
    parser.add_argument("--memory-jobs", type=int, default=2,
                        help="memory subprocesses run at a time (peak memory is per process)")
    parser.add_argument("--skip-memory", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.samples % (args.micro_batch * args.accum_steps):
        parser.error(f"--samples {args.samples} must be a multiple of micro-batch * "
                     f"accum-steps = {args.micro_batch * args.accum_steps}")
    return args


def main(argv=None):
    args = parse_args(argv)
    started = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    t0 = time.perf_counter()
    python = os.path.relpath(sys.executable) if sys.executable.startswith(os.getcwd()) \
        else sys.executable
    command = shlex.join([python, "-m", "benchmarks"] + sys.argv[1:])
    facts = machine_facts()
    print(f"ga_tfx benchmark: b={args.micro_batch} K={args.accum_steps} "
          f"samples={args.samples} repeats={args.repeats}", flush=True)

    memory, phases = {}, {}
    t_phase = time.perf_counter()
    if not args.skip_memory:
        print(f"[1/3] peak memory, one fresh subprocess per configuration "
              f"({args.memory_jobs} at a time)", flush=True)
        with ThreadPoolExecutor(max_workers=args.memory_jobs) as pool:
            futures = {name: pool.submit(run_worker, "memory", args, name) for name in CONFIGS}
            for name, future in futures.items():
                memory[name] = r = future.result()
                print(f"  {name}: " + (
                    f"RSS pre {r['pre_train_maxrss_mib']:.0f} MiB, peak "
                    f"{r['peak_maxrss_mib']:.0f} MiB; TF tensors steady peak "
                    f"{r['tf_peak_steady_mib']:.1f} MiB (pre-train {r['tf_pre_train_mib']:.1f})"
                    if r.get("status") == "ok" else f"FAILED {r.get('error')}"), flush=True)
        phases["memory"] = time.perf_counter() - t_phase
    print("[2/3] correctness and BatchNormalization checks (subprocess, op determinism)",
          flush=True)
    t_phase = time.perf_counter()
    checks = run_worker("correctness", args)
    phases["correctness+BN"] = time.perf_counter() - t_phase
    print("[3/3] throughput, interleaved rounds", flush=True)
    t_phase = time.perf_counter()
    throughput = measure_throughput(args)
    phases["throughput"] = time.perf_counter() - t_phase
    facts["load_avg_end"] = os.getloadavg()
    facts["ga_tfx_source_end"] = ga_tfx_source()

    report = render(args, facts, throughput, memory, checks, command, started,
                    time.perf_counter() - t0, phases)
    print()
    print(report)
    if args.output:
        with open(args.output, "w") as f:
            f.write(report + "\n")
        print(f"\nwrote {args.output}")


if __name__ == "__main__":
    main()
