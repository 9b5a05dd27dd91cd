"""Writes the README's settings tables from the declarations (or, with --check, compares).

    .venv/bin/python scripts/settings_table.py          # rewrite the tables in README.md
    .venv/bin/python scripts/settings_table.py --check  # exit 1 if README.md is out of date

Each table sits between ``<!-- settings:NAME -->`` and ``<!-- /settings:NAME -->`` in README.md;
NAME is a key of :data:`TABLES`. tests/test_settings_schema.py runs the check.
"""

import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")


def tables():
    """``{marker name: markdown}``; standard library only (no TensorFlow, no TFX)."""
    from ga_tfx._schema import markdown_table
    from ga_tfx.components.trainer.settings import AccumulationSettings
    from ga_tfx.components.tuner.options import TunerOptions
    from ga_tfx.config import AccumulationConfig
    from ga_tfx.pipelines.options import TrainingOptions
    from ga_tfx.search_space import AccumulationSearchSpace

    return {
        "library": markdown_table(AccumulationConfig),
        "trainer": markdown_table(AccumulationSettings),
        "cli": markdown_table(TrainingOptions, flags=True),
        "search_space": markdown_table(AccumulationSearchSpace),
        "tuner": markdown_table(TunerOptions),
    }


def render(text):
    """``text`` with every marked table replaced by the generated one."""
    for name, table in tables().items():
        pattern = re.compile(rf"(<!-- settings:{name} -->\n).*?(<!-- /settings:{name} -->)", re.S)
        if not pattern.search(text):
            raise SystemExit(
                f"README.md has no <!-- settings:{name} --> ... <!-- /settings:{name} --> block."
            )
        text = pattern.sub(lambda m, table=table: m.group(1) + table + "\n" + m.group(2), text)
    return text


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="do not write; exit 1 if README.md differs from the declarations",
    )
    args = parser.parse_args(argv)
    with open(README) as f:
        current = f.read()
    wanted = render(current)
    if args.check:
        if wanted != current:
            print(
                "README.md settings tables are out of date: run "
                "`.venv/bin/python scripts/settings_table.py`.",
                file=sys.stderr,
            )
            return 1
        return 0
    if wanted != current:
        with open(README, "w") as f:
            f.write(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
