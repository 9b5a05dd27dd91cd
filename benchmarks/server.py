"""A subprocess that hosts configurations for the paired runner (Keras 3, or a second Keras 2
process).

``python -m benchmarks.server --host keras3 --configs keras3_ga,... --micro-batch 32
--accum-steps 8 --samples 2048`` builds and warms up its configurations, then answers one JSON
line per command read from stdin: ``epoch NAME`` runs one epoch of NAME and replies
``{"wall": s, "cpu": s, "tensor_peak_mib": MiB}``; ``quit`` ends. Its first line is
``{"ready": {NAME: status}}``. Everything else the process prints goes to stderr, so stdout
carries only the protocol.
"""

import argparse
import dataclasses
import json
import os
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(description="benchmark configuration host (internal)")
    parser.add_argument("--host", required=True)
    parser.add_argument("--configs", required=True, help="comma-separated configuration names")
    parser.add_argument("--micro-batch", type=int, required=True)
    parser.add_argument("--accum-steps", type=int, required=True)
    parser.add_argument("--samples", type=int, required=True)
    args = parser.parse_args(argv)
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # library prints go to stderr

    def reply(message):
        protocol.write(json.dumps(message) + "\n")
        protocol.flush()

    from benchmarks import frameworks
    from benchmarks.builders import set_logical_cpus
    from benchmarks.configs import HOST_FRAMEWORK, HOST_LOGICAL_CPUS

    _, tf = frameworks.load(HOST_FRAMEWORK[args.host])
    set_logical_cpus(tf, HOST_LOGICAL_CPUS.get(args.host, 1))
    from benchmarks.runner import build_slots

    slots, status = build_slots(args.configs.split(","), args)
    reply({"ready": status})
    for line in sys.stdin:
        command, _, name = line.strip().partition(" ")
        if command == "quit":
            break
        if command != "epoch" or name not in slots:
            reply(
                {
                    "error": f"bad command {line.strip()!r}; expected 'epoch NAME' (NAME in "
                    f"{sorted(slots)}) or 'quit'"
                }
            )
            continue
        timing = slots[name].run_epoch()
        reply(dataclasses.asdict(timing))


if __name__ == "__main__":
    main()
