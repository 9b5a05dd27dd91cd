"""The house's rules that the code's own text shows: which package imports which.

Reads the source files (no import of the project): fast, in every environment with a source
tree.
"""

import ast
import os

import pytest

pytestmark = [pytest.mark.source_tree]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
