"""tests/README.md's claim table names tests that exist, and marks their tier truthfully: "(slow)"
only of slow tests, and a reference without it names at least one fast test (a test is slow when
it, or its module, is marked slow, or ``tests/tiers.py`` moves it there whole).

Reads the files only (``ast``): no test is imported or run, so this runs in both environments.
A renamed or deleted test that the table still names fails here.
"""

import ast
import fnmatch
import os
import re

import pytest

pytestmark = []  # library and TFX environments alike, fast: neither slow nor tfx

TESTS = os.path.dirname(os.path.abspath(__file__))
TABLE_TITLE = "## Claim -> test (README.md and the manual, docs/)"


def claim_rows():
    """(claim, test cell) of each row of the claim table."""
    with open(os.path.join(TESTS, "README.md"), encoding="utf-8") as f:
        text = f.read()
    assert TABLE_TITLE in text
    rows = []
    for line in text.split(TABLE_TITLE, 1)[1].splitlines():
        if line.startswith("#"):
            break  # the next section
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        if len(cells) == 2 and cells != ["claim", "test"] and set(cells[1]) - set("- "):
            rows.append((cells[0], cells[1]))
    return rows


def references(cell):
    """[(file, test name pattern or None, marked slow)] of one test cell: `file.py`,
    `file.py::test_x`, `::test_y` (the cell's previous file), each optionally followed by
    "(slow)"."""
    found, current = [], None
    for match in re.finditer(r"`([^`]+)`( \(slow\))?", cell):
        token, slow = match.group(1), bool(match.group(2))
        path, _, name = token.partition("::")
        if path:
            current = path
        found.append((current, name or None, slow))
    return found


class _Module:
    """The top-level test functions of a test module and what marks them slow."""

    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            source = f.read()
        tree = ast.parse(source)
        self.slow_module = any(
            isinstance(node, ast.Assign)
            and any(getattr(t, "id", None) == "pytestmark" for t in node.targets)
            and "mark.slow" in ast.get_source_segment(source, node)
            for node in tree.body
        )
        self.functions = {
            node.name: any(
                "mark.slow" in ast.get_source_segment(source, d) for d in node.decorator_list
            )
            for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.name.startswith("test")
        }


ROWS = claim_rows()


def _moved_whole(path, name):
    """Whether tests/tiers.py moves test ``name`` of ``path`` to the slow tier in every
    parametrization (a pattern naming parameters moves those cases only)."""
    from tests.tiers import SLOW

    return any(
        fnmatch.fnmatchcase(f"{path}::{name}", pattern.replace("[", "[[]"))
        for pattern in SLOW
        if "[" not in pattern
    )


def _fast(module, path, name):
    return not module.slow_module and not module.functions[name] and not _moved_whole(path, name)


def test_the_claim_table_is_read():
    assert len(ROWS) >= 40
    assert all(references(cell) for _, cell in ROWS), [
        c for c, cell in ROWS if not references(cell)
    ]


@pytest.mark.parametrize("claim, cell", ROWS, ids=[f"row{i + 1}" for i in range(len(ROWS))])
def test_each_named_test_exists_and_slow_ones_are_slow(claim, cell):
    for path, name, slow in references(cell):
        assert path and path.endswith(".py"), (claim, cell)
        full = os.path.join(TESTS, path)
        assert os.path.isfile(full), f"{claim}: {path} does not exist"
        module = _Module(full)
        if name is None:
            assert module.functions, f"{claim}: {path} has no test"
            assert not slow or module.slow_module, f"{claim}: {path} is not marked slow"
            assert slow or any(_fast(module, path, n) for n in module.functions), (
                f"{claim}: every test of {path} is slow: say (slow)"
            )
            continue
        matching = fnmatch.filter(module.functions, name)
        assert matching, f"{claim}: no test {name} in {path}"
        if slow:
            assert module.slow_module or all(
                module.functions[n] or _moved_whole(path, n) for n in matching
            ), f"{claim}: {path}::{name} is not marked slow"
        else:
            assert any(_fast(module, path, n) for n in matching), (
                f"{claim}: {path}::{name} is slow (marked, or moved by tests/tiers.py): say (slow)"
            )
