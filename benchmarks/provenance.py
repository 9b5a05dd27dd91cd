"""Which code a report measured: the commit, read as the runs start, and a refusal of a tree
with uncommitted changes (a report must name the code it measured)."""

import argparse
import os
import subprocess
from typing import List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# What is not code: reports (a run rewrites its own), docs, figures.
NOT_CODE = (".md", ".json", ".png")


def uncommitted() -> List[str]:
    """The top-level folders with uncommitted changes to tracked code ([]: a clean tree; changes
    to :data:`NOT_CODE` files, such as the report a previous run just wrote, do not count)."""
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout.split("\n")
    paths = [line[3:] for line in dirty if line.strip()]
    return sorted({path.split("/")[0] for path in paths if not path.endswith(NOT_CODE)})


def measured_code() -> str:
    """The commit the runs measure, read as they start (a commit made while they run is not
    theirs): ``HEAD``, and the folders with uncommitted changes (``--allow-dirty``)."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    changed = uncommitted()
    if changed:  # say what the run also ran with (--allow-dirty)
        commit += f" (with uncommitted changes under {', '.join(changed)})"
    return commit


def add_allow_dirty(parser: argparse.ArgumentParser) -> None:
    """The ``--allow-dirty`` flag of a report's command."""
    parser.add_argument(
        "--allow-dirty",
        action="store_true",
        help="run with uncommitted changes (the report says so; default: refuse)",
    )


def refuse_uncommitted(parser: argparse.ArgumentParser, allow_dirty: bool) -> None:
    """Stops (``parser.error``) on uncommitted changes unless ``allow_dirty``."""
    changed = uncommitted()
    if changed and not allow_dirty:
        parser.error(
            f"uncommitted changes under {', '.join(changed)}: the report must name the "
            "code it measured; commit first (or pass --allow-dirty, which the report states)."
        )
