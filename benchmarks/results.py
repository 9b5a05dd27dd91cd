"""The JSON results of ``python -m benchmarks --json FILE``: summary figures, one line per record.

A reader of the JSON wants what the Markdown report states, in numbers: per configuration its
rates, tensor peak and ratio to the baseline (median, quartiles, range, n), per pair its in-round
ratio, the correctness and BatchNormalization checks, the XLA probes, the machine and the
command. The rounds' raw timings (every epoch of every configuration) are summarised there and
not kept: they made a 21-round report about 4,700 lines (115 kB) of JSON.

* :func:`compact` takes the record the run assembles (or one written before this module, with
  the rounds) and returns the summary: every configuration's ``rounds`` list left out, and every
  float rounded to :data:`DIGITS` significant digits (the report prints 2 to 3; 4 would round
  some twice, 1.14479 to 1.145 to 1.15).
* :func:`write` writes it with one line per record: per configuration, per pair, per check row,
  per XLA probe (about 120 lines).

Reports written before, with the rounds, are made compact in place, their figures unchanged::

    .venv/bin/python -m benchmarks.results benchmarks/REPORT.json benchmarks/GOAL.json
"""

import json
import math
import sys

DIGITS = 6
# Containers nested this deep or deeper are written on one line: the top level's keys (depth
# 0) and the throughput's configurations and pairs (depth 2) each get lines of their own.
ONE_LINE_DEPTH = 3


def _round(value):
    """``value`` with every float at :data:`DIGITS` significant digits (NaN and inf kept)."""
    if isinstance(value, float):
        return value if not math.isfinite(value) else float(f"{value:.{DIGITS}g}")
    if isinstance(value, dict):
        return {key: _round(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_round(item) for item in value]
    return value


def compact(record):
    """The summary of one run's record ``{"command", "facts", "throughput", "checks",
    "xla_probes", "phases", "args"}``: a new dict, ``record`` untouched; each configuration
    of ``throughput["configs"]`` without its per-round ``rounds``; floats rounded. Compacting
    twice gives the same result."""
    record = json.loads(json.dumps(record, default=str))  # a deep copy, non-JSON values as str
    for config in record.get("throughput", {}).get("configs", {}).values():
        config.pop("rounds", None)
    return _round(record)


def _lines(value, depth, indent):
    """JSON text of ``value`` at ``depth``: a container above :data:`ONE_LINE_DEPTH` with a
    container inside spreads its items one per line; anything else is one line."""
    nested = isinstance(value, dict) and any(isinstance(v, (dict, list)) for v in value.values())
    nested |= isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value)
    if depth >= ONE_LINE_DEPTH or not nested:
        return json.dumps(value, ensure_ascii=False)
    inner = indent + " "
    if isinstance(value, dict):
        items = [
            f"{inner}{json.dumps(key)}: {_lines(item, depth + 1, inner)}"
            for key, item in value.items()
        ]
        return "{\n" + ",\n".join(items) + f"\n{indent}}}"
    items = [f"{inner}{_lines(item, depth + 1, inner)}" for item in value]
    return "[\n" + ",\n".join(items) + f"\n{indent}]"


def write(record, path):
    """Writes :func:`compact` of ``record`` to ``path``, one line per record."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(_lines(compact(record), 0, "") + "\n")


def main(paths):
    """Rewrites each JSON results file of ``paths`` in compact form; prints lines before and
    after."""
    if not paths:
        sys.exit("usage: python -m benchmarks.results FILE.json [FILE.json ...]")
    for path in paths:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        write(json.loads(text), path)
        with open(path, encoding="utf-8") as f:
            after = f.read()
        print(f"{path}: {text.count(chr(10))} -> {after.count(chr(10))} lines")


if __name__ == "__main__":
    main(sys.argv[1:])
