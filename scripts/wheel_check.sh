#!/usr/bin/env bash
# The wheel as a user gets it: built from this clone, installed into a new virtual environment
# outside it, where `ga-tfx --version` and the library's fast tests run against the installed
# package, not the source tree every other environment imports (editable installs).
#   1. the wheel: `uv build --wheel` (PEP 517, isolated) from a copy of what setup.py reads
#      (setup.py, pyproject.toml, LICENSE, ga_tfx/, components/, pipelines/), so nothing is written into
#      the clone; its version must be setup.py's.
#   2. a new venv in a temporary folder (Python 3.12, as .venv-lib/), the wheel installed with
#      its `tuner` and `test` extras, its dependencies from its own metadata, each at the
#      version requirements/lock-lib.txt pins (the library tier's stack: TensorFlow 2.21, no
#      TFX); uv links them from its cache (seconds once .venv-lib/ has been installed).
#   3. `ga-tfx --version` (the console script of the wheel) must print "ga-tfx VERSION," and no
#      TFX.
#   4. pytest, run in a copy of the clone without the three package folders and setup.py (so
#      nothing of the source tree can be imported; tests/conftest.py refuses to run if ga_tfx
#      does not come from the venv's site-packages, GA_TFX_EXPECT_INSTALLED_IN), with
#      `-m "not tfx and not slow and not source_tree"` unless a -m is given; further arguments
#      go to pytest. `source_tree` marks the tests that read the source files themselves
#      (packaging, mutation anchors, the shim's grep): the other environments run them.
# Usage: bash scripts/wheel_check.sh [PYTEST ARGS]   (scripts/test.sh: the `wheel` environment)
# Needs uv and a Python 3.12: those of .venv-lib/ (scripts/bootstrap.sh lib), or GA_TFX_UV and
# GA_TFX_LIB_PYTHON. GA_TFX_WHEEL_KEEP=1 keeps the temporary folder (its path is printed).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
lib="$root/.venv-lib"
uv="${GA_TFX_UV:-$lib/bin/uv}"
if [ -z "${GA_TFX_LIB_PYTHON:-}" ] && [ -x "$lib/bin/python" ]; then
  GA_TFX_LIB_PYTHON="$("$lib/bin/python" -c 'import sys; print(sys._base_executable)')"
fi
python="${GA_TFX_LIB_PYTHON:-}"
if [ ! -x "$uv" ] || [ -z "$python" ]; then
  echo "error: the wheel check needs uv and Python 3.12: make .venv-lib/ (bash scripts/bootstrap.sh lib)" >&2
  echo "       or set GA_TFX_UV and GA_TFX_LIB_PYTHON (uv='$uv', python='$python')" >&2
  exit 2
fi
lock="$root/requirements/lock-lib.txt"
declared="$(sed -n 's/^ *version="\([^"]*\)".*/\1/p' "$root/setup.py")"

work="$(mktemp -d "${TMPDIR:-/tmp}/ga-tfx-wheel.XXXXXX")"
case "$work/" in "$root"/*) echo "error: the temporary folder $work is inside the clone" >&2; exit 2 ;; esac
if [ "${GA_TFX_WHEEL_KEEP:-0}" = 1 ]; then echo "[wheel] kept: $work"; else trap 'rm -rf "$work"' EXIT; fi
started=$SECONDS
step() { echo "[wheel] $1 ($((SECONDS - started)) s)"; }

# 1. The wheel.
mkdir "$work/src"
cp "$root/setup.py" "$root/pyproject.toml" "$root/LICENSE" "$work/src/"
for folder in ga_tfx components pipelines; do
  cp -r "$root/$folder" "$work/src/$folder"
done
find "$work/src" \( -name __pycache__ -o -name '*.egg-info' \) -prune -exec rm -rf {} +
"$uv" build --quiet --wheel --out-dir "$work/dist" "$work/src"
wheels=("$work"/dist/ga_tfx-*.whl)
wheel="${wheels[0]}"
[ "${#wheels[@]}" = 1 ] && [ -f "$wheel" ] || { echo "error: no single wheel in $work/dist" >&2; exit 1; }
built="$(basename "$wheel" | cut -d- -f2)"
[ "$built" = "$declared" ] || { echo "error: built $built, setup.py declares $declared" >&2; exit 1; }
step "built $(basename "$wheel")"

# 2. The environment.
venv="$work/venv"
"$uv" venv --quiet --python "$python" "$venv"
"$uv" pip install --quiet --python "$venv/bin/python" "$wheel[tuner,test]" -c "$lock"
"$uv" pip check --quiet --python "$venv/bin/python"
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
step "installed into $venv (Python $("$venv/bin/python" -c 'import platform; print(platform.python_version())'))"

# 4's tree: the clone's files (tracked, or new and not ignored) but the packages and setup.py.
tree="$work/tree"
mkdir "$tree"
(cd "$root" && git ls-files --cached --others --exclude-standard -z |
  grep -zvE '^(ga_tfx|components|pipelines)/|^setup\.py$' |
  tar --null --files-from=- --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$tree"
[ ! -e "$tree/ga_tfx" ] && [ -f "$tree/tests/conftest.py" ] || { echo "error: bad test tree" >&2; exit 1; }

# 3. The console script, and where ga_tfx is imported from (in the tree, as pytest runs).
cd "$tree"
version_line="$("$venv/bin/ga-tfx" --version)"
echo "[wheel] ga-tfx --version: $version_line"
case "$version_line" in
  "ga-tfx $declared, TFX not installed,"*) ;;
  *) echo "error: ga-tfx --version should start 'ga-tfx $declared, TFX not installed,'" >&2; exit 1 ;;
esac
imported="$("$venv/bin/python" -c 'import ga_tfx; print(ga_tfx.__file__, ga_tfx.__version__)')"
echo "[wheel] import ga_tfx: $imported"
case "$imported" in
  "$site/ga_tfx/__init__.py $declared") ;;
  *) echo "error: ga_tfx should be $site/ga_tfx/__init__.py, version $declared" >&2; exit 1 ;;
esac

# 4. The library's fast tests against the installed wheel.
default_marker="not tfx and not slow and not source_tree"
for arg in "$@"; do
  case "$arg" in -m|-m?*) default_marker="" ;; esac
done
marker_args=()
[ -z "$default_marker" ] || marker_args=(-m "$default_marker")
step "pytest ${marker_args[*]} $* in $tree"
# Bytecode is written as modules are first imported (uv installs none; where the environment
# sets PYTHONDONTWRITEBYTECODE every process would compile TensorFlow's sources again).
rc=0
env -u PYTHONDONTWRITEBYTECODE GA_TFX_EXPECT_INSTALLED_IN="$site" \
  "$venv/bin/python" -m pytest -p no:cacheprovider "${marker_args[@]}" "$@" || rc=$?
step "pytest exit status $rc"
exit "$rc"
