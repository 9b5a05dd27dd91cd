"""The paired throughput runner.

Every configuration trains one epoch per round; a round visits all of them (the order rotated
each round, the pairs of ``configs.ADJACENT`` back to back with their order alternating), so
machine-load changes, which on these shared machines last minutes, hit the configurations of a
round alike. Ratios are taken within a round and summarised over rounds (median, IQR). Keras 2
configurations share this process; Keras 3 (and its Keras 2 partner) run in subprocesses
(:mod:`benchmarks.server`) driven epoch by epoch from here. Every epoch reports wall-clock and
process CPU seconds of the process that ran it.
"""

import json
import os
import subprocess
import tempfile
import time

from benchmarks import builders, frameworks
from benchmarks.configs import ADJACENT, BASELINE, CONFIGS, HOST_FRAMEWORK, MAIN, PAIRS, make_data
from benchmarks.errors import error_text
from benchmarks.stats import paired_ratios, spread
from benchmarks.workers import REPO_ROOT, module_command


def build_slots(names, args):
    """Build and warm up (tracing plus one discarded epoch) ``names`` in this process.

    Returns ``(slots, status)``: name -> slot for those that work; name -> ``{"status": "ok",
    "warmup_s": ...}`` or ``{"status": "error", "error": text}`` for all.
    """
    slots, status = {}, {}
    if not names:
        return slots, status
    _, tf = frameworks.load(CONFIGS[names[0]].framework)
    model = getattr(args, "model", "conv")  # benchmarks.server's hosts run the conv net
    x, y = builders.as_tensors(tf, *make_data(args.samples, model=model))
    for name in names:
        try:
            start = time.perf_counter()
            slot = builders.build(
                CONFIGS[name], args.micro_batch, args.accum_steps, x, y, model=model
            )
            timing = slot.run_epoch()
            slots[name] = slot
            status[name] = {
                "status": "ok",
                "warmup_s": time.perf_counter() - start,
                "warmup_epoch_rate": args.samples / timing.wall,
            }
        except Exception as error:
            status[name] = {"status": "error", "error": error_text(error)}
        print(
            f"  warm-up {name}: "
            + (f"{status[name]['warmup_s']:.1f}s" if name in slots else status[name]["error"]),
            flush=True,
        )
    return slots, status


class RemoteHost:
    """A :mod:`benchmarks.server` subprocess hosting some configurations."""

    def __init__(self, host, names, args):
        self.host = host
        self.log = tempfile.TemporaryFile("w+")
        cmd = module_command("benchmarks.server", args)
        cmd += ["--host", host, "--configs", ",".join(names)]
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            cwd=REPO_ROOT,
            env=frameworks.subprocess_env(HOST_FRAMEWORK[host]),
        )

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            self.log.seek(0)
            tail = " ".join(self.log.read().strip().splitlines()[-3:])[-300:]
            raise RuntimeError(f"host {self.host} exited ({self.proc.poll()}): {tail}")
        message = json.loads(line)
        if "error" in message:
            raise RuntimeError(f"host {self.host}: {message['error']}")
        return message

    def ready(self):
        """Waits for the host's build and warm-up; its per-configuration status."""
        return self._read()["ready"]

    def run_epoch(self, name) -> builders.Timing:
        self.proc.stdin.write(f"epoch {name}\n")
        self.proc.stdin.flush()
        message = self._read()
        return builders.Timing(**message)

    def close(self):
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
        self.log.close()


class _RemoteSlot:
    def __init__(self, host, name):
        self.host, self.name = host, name

    def run_epoch(self):
        return self.host.run_epoch(self.name)


def round_units(names):
    """The round's units: pairs of ``ADJACENT`` (when both run) as one unit, the rest alone."""
    units, paired = [], set()
    for pair in ADJACENT:
        if all(n in names for n in pair):
            units.append(pair)
            paired.update(pair)
    return units + [(n,) for n in names if n not in paired]


def round_order(units, r):
    """Round ``r``'s order: units rotated by ``r``, each pair reversed in odd rounds."""
    r_units = units[r % len(units) :] + units[: r % len(units)]
    return [name for unit in r_units for name in (unit[::-1] if r % 2 else unit)]


def measure_throughput(args, names):
    """Paired rounds over ``names``; returns the summary dict the report reads."""
    by_host = {}
    for name in names:
        by_host.setdefault(CONFIGS[name].host, []).append(name)
    remotes, status = {}, {}
    for host, host_names in by_host.items():
        if host != MAIN:
            remotes[host] = RemoteHost(host, host_names, args)
    try:
        local, status = build_slots(by_host.get(MAIN, []), args)
        slots = dict(local)
        for host, remote in remotes.items():
            try:
                host_status = remote.ready()
            except Exception as error:
                host_status = {
                    n: {"status": "error", "error": error_text(error)} for n in by_host[host]
                }
            status.update(host_status)
            for name, s in host_status.items():
                print(
                    f"  warm-up {name} [{host}]: "
                    + (f"{s['warmup_s']:.1f}s" if s["status"] == "ok" else s["error"]),
                    flush=True,
                )
                if s["status"] == "ok":
                    slots[name] = _RemoteSlot(remote, name)
        runnable = [n for n in names if n in slots]
        units = round_units(runnable)
        times = {name: [] for name in runnable}
        load, round_seconds = [], []
        for r in range(args.repeats):
            load.append(os.getloadavg()[0])
            round_start = time.perf_counter()
            for name in round_order(units, r):
                try:
                    times[name].append(slots[name].run_epoch())
                except Exception as error:  # a lost host: its configurations stop here
                    status[name] = {"status": "error", "error": error_text(error)}
                    times[name].append(None)
            round_seconds.append(time.perf_counter() - round_start)
            print(
                f"  round {r + 1}/{args.repeats}: "
                + ", ".join(
                    f"{name}={args.samples / times[name][-1].wall:.0f}"
                    for name in runnable
                    if times[name][-1]
                ),
                flush=True,
            )
    finally:
        for remote in remotes.values():
            remote.close()
    summary = summarize(args, names, status, times)
    summary["load_1min"] = spread(load) if load else None
    summary["round_seconds"] = spread(round_seconds) if round_seconds else None
    return summary


def summarize(args, names, status, times):
    """Rates (samples/s wall, samples per CPU-second) and within-round ratios, as spreads."""
    n, b, k = args.samples, args.micro_batch, args.accum_steps
    wall = {name: [t.wall if t else None for t in ts] for name, ts in times.items()}
    cpu = {name: [t.cpu if t else None for t in ts] for name, ts in times.items()}
    peak = {name: [t.tensor_peak_mib if t else None for t in ts] for name, ts in times.items()}
    configs = {}
    for name in names:
        row = dict(status.get(name, {"status": "error", "error": "not run"}))
        row["updates_per_epoch"] = CONFIGS[name].updates_per_epoch(n, b, k)
        if row["status"] == "ok" and any(wall.get(name, [])):
            row["rounds"] = [
                {"wall": w, "cpu": c, "tensor_peak_mib": m}
                for w, c, m in zip(wall[name], cpu[name], peak[name])
            ]
            if any(m is not None for m in peak[name]):
                row["tensor_peak_mib"] = spread(m for m in peak[name] if m is not None)
            row["wall_rate"] = spread(n / w for w in wall[name] if w)
            row["cpu_rate"] = spread(n / c for c in cpu[name] if c)
            if BASELINE in wall and any(wall[BASELINE]):
                row["vs_baseline_wall"] = spread(paired_ratios(wall[name], wall[BASELINE]))
                row["vs_baseline_cpu"] = spread(paired_ratios(cpu[name], cpu[BASELINE]))
        configs[name] = row
    pairs = []
    for num, den, what in PAIRS:
        pair = {"num": num, "den": den, "what": what}
        if num in wall and den in wall:
            w, c = paired_ratios(wall[num], wall[den]), paired_ratios(cpu[num], cpu[den])
            if w:
                pair.update(wall=spread(w), cpu=spread(c))
        pairs.append(pair)
    return {"configs": configs, "pairs": pairs, "repeats": args.repeats}
