#!/usr/bin/env bash
# Lint, format check and type check (configuration: pyproject.toml; tools: setup.py's `dev` extra,
# pinned in the TFX locks (requirements/lock-tfx-*.txt), installed in .venv/ by scripts/bootstrap.sh):
#   ruff check           pycodestyle, pyflakes, import order (ga_tfx first), bugbear
#   ruff format --check  the formatter's layout, line length 100
#   mypy                 the public API: ga_tfx/__init__.py and the non-private ga_tfx modules
#   mkdocs build --strict  the manual (docs/, mkdocs.yml): a broken link or anchor, or a page
#                        outside the navigation, fails it (built into a temporary directory)
# Usage: lint.sh          check only; exit status 1 if any of the four finds something
#        lint.sh --fix    apply ruff's safe fixes and format the tree, then check
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/bootstrap.sh" tfx
cd "$root"
bin="$root/.venv/bin"

case "${1:-}" in
  "") ;;
  --fix) "$bin/ruff" check --fix --quiet . || true  # what is left is reported below
         "$bin/ruff" format --quiet . ;;
  *) echo "error: unknown argument '$1' (allowed: --fix, or nothing)" >&2; exit 2 ;;
esac

status=0
echo "== ruff check"; "$bin/ruff" check --output-format concise . || status=1
echo "== ruff format --check"; "$bin/ruff" format --check --output-format concise . || status=1
echo "== mypy (public API)"; "$bin/mypy" || status=1
site="$(mktemp -d)"
echo "== mkdocs build --strict"
# NO_MKDOCS_2_WARNING: mkdocs-material's banner about MkDocs 2.0, printed on every build
NO_MKDOCS_2_WARNING=1 "$bin/mkdocs" build --strict --quiet --site-dir "$site" || status=1
rm -rf "$site"
exit "$status"
