"""``benchmarks/CRITICAL_BATCH.json``: the critical-batch benchmark's figures as readable data.

One JSON document (any JSON reader loads it), laid out for a text editor and a diff: a list of
records that share their keys and hold only numbers, strings or booleans (a probe's curve, one
row per window) is stored as a table, ``{"columns": [...], "rows": [[...], ...]}``, one row per
line; a list of numbers is wrapped; no line is longer than :data:`WIDTH` characters but for a
single string that is longer itself. :func:`read` gives back what :func:`write` was given (the
tables as lists of dicts again); floats are written as :func:`rounded` leaves them (6
significant digits).

Written by ``benchmarks/critical_batch.py``; its Markdown report and figure are made from the
results in memory, not from this file.
"""

import json
from typing import Any, Dict, List

WIDTH = 100  # the width lists are wrapped to (a string longer than that keeps its own line)
_SCALARS = (int, float, str, bool, type(None))


def rounded(value):
    """``value`` with its floats to 6 significant digits (the record stays small)."""
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v) for v in value]
    return value


def _is_table(value) -> bool:
    """A list of two or more dicts with the same keys, every value a scalar."""
    if not isinstance(value, list) or len(value) < 2 or not isinstance(value[0], dict):
        return False
    keys = list(value[0])
    return all(
        isinstance(row, dict)
        and list(row) == keys
        and all(isinstance(v, _SCALARS) for v in row.values())
        for row in value
    )


def _tabled(value):
    """``value`` with its tables (:func:`_is_table`) as ``{"columns", "rows"}``."""
    if _is_table(value):
        return {"columns": list(value[0]), "rows": [list(row.values()) for row in value]}
    if isinstance(value, dict):
        return {k: _tabled(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_tabled(v) for v in value]
    return value


def _untabled(value):
    """The inverse of :func:`_tabled`."""
    if isinstance(value, dict):
        if set(value) == {"columns", "rows"}:
            return [dict(zip(value["columns"], row)) for row in value["rows"]]
        return {k: _untabled(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_untabled(v) for v in value]
    return value


def _dump(value) -> str:
    return json.dumps(value, default=float, separators=(", ", ": "))


def _emit(value, depth: int, start: int) -> List[str]:
    """``value`` as lines at nesting ``depth`` (one space a level), its first line to start at
    column ``start`` (the caller writes that line's indentation or key), the others whole; a
    comma may follow each line."""
    pad = " " * (depth + 1)
    one_line = _dump(value)
    if start + len(one_line) < WIDTH or isinstance(value, _SCALARS):
        return [one_line]
    if isinstance(value, dict):
        lines = ["{"]
        for n, (key, item) in enumerate(value.items()):
            head = pad + json.dumps(key) + ": "
            inner = _emit(item, depth + 1, len(head))
            comma = "," if n < len(value) - 1 else ""
            lines.append(head + inner[0] + ("" if inner[1:] else comma))
            lines += inner[1:-1] + ([inner[-1] + comma] if inner[1:] else [])
        return lines + [" " * depth + "}"]
    if all(isinstance(v, _SCALARS) and not isinstance(v, str) for v in value):
        lines, line = ["["], ""
        for item in (_dump(v) for v in value):
            if line and len(pad) + len(line) + len(item) + 3 > WIDTH:  # ", " item ","
                lines.append(pad + line + ",")
                line = ""
            line += (", " if line else "") + item
        return lines + [pad + line, " " * depth + "]"]
    lines = ["["]
    for n, item in enumerate(value):
        inner = _emit(item, depth + 1, len(pad))
        inner[-1] += "," if n < len(value) - 1 else ""
        lines += [pad + inner[0]] + inner[1:]
    return lines + [" " * depth + "]"]


def write(path: str, header: Dict[str, Any], datasets: List[Dict[str, Any]]) -> None:
    """Writes ``header`` (the command, when, the machine) and one entry per data set, their
    floats :func:`rounded`, to ``path``."""
    document = dict(header, datasets=rounded(datasets))
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(_emit(_tabled(document), 0, 0)) + "\n")


def read(path: str) -> Dict[str, Any]:
    """The document :func:`write` wrote: the header's keys and ``datasets``, the tables as
    lists of dicts."""
    with open(path, encoding="utf-8") as f:
        return _untabled(json.load(f))
