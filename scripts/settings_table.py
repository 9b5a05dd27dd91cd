"""Writes the manual's settings tables from the declarations (or, with --check, compares).

    .venv/bin/python scripts/settings_table.py          # rewrite the tables in docs/*.md
    .venv/bin/python scripts/settings_table.py --check  # exit 1 if a page is out of date

Each table sits between ``<!-- settings:NAME -->`` and ``<!-- /settings:NAME -->`` in one page
of README.md and docs/*.md; NAME is a key of :func:`tables`. tests/test_settings_schema.py runs
the check.
"""

import argparse
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]


def tables():
    """``{marker name: markdown}``; standard library only (no TensorFlow, no TFX)."""
    from ga_tfx._schema import markdown_table
    from ga_tfx.components.trainer.settings import AccumulationSettings
    from ga_tfx.components.tuner.options import TunerOptions
    from ga_tfx.config import AccumulationConfig
    from ga_tfx.pipelines.options import flags_table
    from ga_tfx.tuning.search_space import AccumulationSearchSpace

    return {
        "library": markdown_table(AccumulationConfig),
        "trainer": markdown_table(AccumulationSettings),
        "cli": flags_table(),
        "search_space": markdown_table(AccumulationSearchSpace),
        "tuner": markdown_table(TunerOptions),
    }


def render(pages):
    """``{path: text}`` of ``pages`` (``{path: text}``) with every marked table replaced by the
    generated one; each table must be marked in exactly one page."""
    pages = dict(pages)
    for name, table in tables().items():
        pattern = re.compile(rf"(<!-- settings:{name} -->\n).*?(<!-- /settings:{name} -->)", re.S)
        found = [path for path, text in pages.items() if pattern.search(text)]
        if len(found) != 1:
            where = ", ".join(os.path.relpath(p, ROOT) for p in found) or "no page"
            raise SystemExit(
                f"<!-- settings:{name} --> ... <!-- /settings:{name} --> must be in exactly one "
                f"of README.md and docs/*.md; found in {where}."
            )
        path = found[0]
        pages[path] = pattern.sub(
            lambda m, table=table: m.group(1) + table + "\n" + m.group(2), pages[path]
        )
    return pages


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="do not write; exit 1 if a page differs from the declarations",
    )
    args = parser.parse_args(argv)
    current = {}
    for path in PAGES:
        with open(path, encoding="utf-8") as f:
            current[path] = f.read()
    wanted = render(current)
    stale = [path for path in PAGES if wanted[path] != current[path]]
    if args.check:
        if stale:
            names = ", ".join(os.path.relpath(p, ROOT) for p in stale)
            print(
                f"settings tables out of date in {names}: run "
                "`.venv/bin/python scripts/settings_table.py`.",
                file=sys.stderr,
            )
            return 1
        return 0
    for path in stale:
        with open(path, "w", encoding="utf-8") as f:
            f.write(wanted[path])
    return 0


if __name__ == "__main__":
    sys.exit(main())
