"""The house's rules that the code's own text shows: which package imports which, how long a
product file may be.

Reads the source files (no import of the project): fast, in every environment with a source
tree.
"""

import ast
import os

import pytest

pytestmark = [pytest.mark.source_tree]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRODUCT = ("ga_tfx", "components", "pipelines")  # installed as ga_tfx, ga_tfx.components, ...
MAX_LINES = 400


def _python_files(folder):
    for directory, _, names in os.walk(os.path.join(ROOT, folder)):
        for name in sorted(names):
            if name.endswith(".py"):
                yield os.path.join(directory, name)


def _imported_modules(path):
    """Every module ``path`` imports (at any depth of the file), as absolute dotted names."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


@pytest.mark.parametrize("package", ["tabular", "common"])
def test_the_packages_below_pipelines_import_nothing_from_above(package):
    """``pipelines/tabular/`` and ``pipelines/common/`` stand below ``pipelines/``: of
    ``ga_tfx.pipelines`` they import only ``common`` (and ``tabular`` itself for tabular)."""
    allowed = {"common", package}
    wrong = [
        f"{os.path.relpath(path, ROOT)} imports {module}"
        for path in _python_files(os.path.join("pipelines", package))
        for module in _imported_modules(path)
        if module.startswith("ga_tfx.pipelines.") and module.split(".")[2] not in allowed
    ]
    assert not wrong, "; ".join(wrong)


def test_no_product_file_is_over_400_lines():
    """One concern per file: no Python file of the library, the components or the pipelines is
    longer than ``MAX_LINES`` (tests, benchmarks and scripts are not the product)."""
    long = []
    for folder in PRODUCT:
        for path in _python_files(folder):
            with open(path, encoding="utf-8") as f:
                lines = sum(1 for _ in f)
            if lines > MAX_LINES:
                long.append(f"{os.path.relpath(path, ROOT)}: {lines} lines")
    assert not long, f"over {MAX_LINES} lines: " + "; ".join(long)
