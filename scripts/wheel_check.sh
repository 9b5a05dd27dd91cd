#!/usr/bin/env bash
# The wheel as a user gets it: built from this clone, installed into a new virtual environment
# outside it with its dependencies resolved, where the tests run against the installed package,
# not the source tree every other environment imports (editable installs). Two environments
# (GA_TFX_WHEEL_ENV):
#   lib (default)  Keras 2: Python 3.12 and uv of .venv-lib/, the wheel's `keras2,tuner,test`
#       extras at requirements/lock-lib.txt's versions (TensorFlow 2.21, tf-keras, no TFX);
#       pytest -m "not tfx and not slow and not source_tree" unless a -m is given.
#   keras3  Keras 3: Python 3.12 and uv of .venv-keras3/, the wheel's `keras3` extra and the
#       test tools (pytest, pytest-timeout, pytest-xdist) resolved with
#       requirements/lock-keras3.txt as constraints, offline (uv --offline: every package comes
#       from uv's cache, which scripts/bootstrap.sh keras3 filled); then every installed package
#       must be one of the lock's, at its version (nothing the lock does not list, such as
#       tf-keras, came with the wheel) and tf_keras must not be importable; pytest -m keras3
#       unless a -m is given (scripts/test.sh runs it once per KERAS_BACKEND).
# Steps:
#   1. the wheel: `uv build --wheel` (PEP 517, isolated) from a copy of what setup.py reads
#      (setup.py, pyproject.toml, LICENSE, ga_tfx/, components/, pipelines/), so nothing is
#      written into the clone; its version must be setup.py's.
#   2. a new venv (above); uv links the packages from its cache (seconds once the environment
#      named above has been installed).
#   3. `ga-tfx --version` (the console script of the wheel) must print "ga-tfx VERSION," and no
#      TFX.
#   4. pytest, run in a copy of the clone without the three package folders and setup.py (so
#      nothing of the source tree can be imported; tests/conftest.py refuses to run if ga_tfx
#      does not come from the venv's site-packages, GA_TFX_EXPECT_INSTALLED_IN); further
#      arguments go to pytest. `source_tree` marks the tests that read the source files
#      themselves (packaging, mutation anchors, the shim's grep): the other environments run
#      them (the keras3 tier's tests read none: a Keras 3 test marked so would fail here).
# Usage: bash scripts/wheel_check.sh [PYTEST ARGS]   (scripts/test.sh: the `wheel` environment,
# and the `keras3` one with GA_TFX_WHEEL_ENV=keras3)
# Needs uv and a Python 3.12: those of the environment's venv (scripts/bootstrap.sh lib or
# keras3), or GA_TFX_UV and GA_TFX_LIB_PYTHON (GA_TFX_KERAS3_PYTHON). The temporary folder is removed at the end;
# GA_TFX_WHEEL_KEEP=1 keeps it (its path is printed). GA_TFX_WHEEL_DIR=DIR (outside the clone)
# makes steps 1-2 and 4's tree in DIR and keeps them, or, where DIR holds them already for the
# same environment and version, reuses them (scripts/test.sh's second keras3 run); the caller
# removes DIR.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kind="${GA_TFX_WHEEL_ENV:-lib}"
case "$kind" in
  lib) base="$root/.venv-lib"; lock="$root/requirements/lock-lib.txt"
       python_var=GA_TFX_LIB_PYTHON; default_marker="not tfx and not slow and not source_tree" ;;
  keras3) base="$root/.venv-keras3"; lock="$root/requirements/lock-keras3.txt"
       python_var=GA_TFX_KERAS3_PYTHON; default_marker="keras3" ;;
  *) echo "error: unknown GA_TFX_WHEEL_ENV '$kind' (allowed: lib, keras3)" >&2; exit 2 ;;
esac
uv="${GA_TFX_UV:-$base/bin/uv}"
python="${!python_var:-}"
if [ -z "$python" ] && [ -x "$base/bin/python" ]; then
  python="$("$base/bin/python" -c 'import sys; print(sys._base_executable)')"
fi
if [ ! -x "$uv" ] || [ -z "$python" ]; then
  echo "error: the $kind wheel check needs uv and Python 3.12: make ${base##*/}/" \
    "(bash scripts/bootstrap.sh $kind)" >&2
  echo "       or set GA_TFX_UV and $python_var (uv='$uv', python='$python')" >&2
  exit 2
fi
declared="$(sed -n 's/^ *version="\([^"]*\)".*/\1/p' "$root/setup.py")"

if [ -n "${GA_TFX_WHEEL_DIR:-}" ]; then
  mkdir -p "$GA_TFX_WHEEL_DIR"
  work="$(cd "$GA_TFX_WHEEL_DIR" && pwd)"
else
  work="$(mktemp -d "${TMPDIR:-/tmp}/ga-tfx-wheel.XXXXXX")"
fi
case "$work/" in "$root"/*) echo "error: the wheel's folder $work is inside the clone" >&2; exit 2 ;; esac
if [ -n "${GA_TFX_WHEEL_DIR:-}" ] || [ "${GA_TFX_WHEEL_KEEP:-0}" = 1 ]; then
  echo "[wheel] kept: $work"
else
  trap 'rm -rf "$work"' EXIT
fi
started=$SECONDS
step() { echo "[wheel] $1 ($((SECONDS - started)) s)"; }
venv="$work/venv"
tree="$work/tree"
ready="$kind $declared"  # what $work/ready holds once steps 1-2 and the tree are made

# Steps 1, 2 and 4's tree, into $work.
make_environment() {
  rm -rf "${work:?}"/{src,dist,venv,tree,ready}
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
  "$uv" venv --quiet --python "$python" "$venv"
  if [ "$kind" = lib ]; then
    "$uv" pip install --quiet --python "$venv/bin/python" "$wheel[keras2,tuner,test]" -c "$lock"
  else
    # A Keras 3 user's `pip install "ga-tfx[keras3]"`, with the `test` extra's pytest tools (not
    # its scikit-learn, the Keras 2 demo's data), at the lock's versions.
    "$uv" pip install --quiet --offline --python "$venv/bin/python" "$wheel[keras3]" \
      pytest pytest-timeout pytest-xdist -c "$lock"
    # What the wheel brought: the lock's packages only, at its versions, and no tf-keras.
    "$venv/bin/python" "$root/scripts/wheel_env_check.py" "$lock"
  fi
  "$uv" pip check --quiet --python "$venv/bin/python"
  step "installed into $venv (Python $("$venv/bin/python" -c 'import platform; print(platform.python_version())'))"

  # 4's tree: the clone's files (tracked, or new and not ignored) but the packages and setup.py.
  mkdir "$tree"
  (cd "$root" && git ls-files --cached --others --exclude-standard -z |
    grep -zvE '^(ga_tfx|components|pipelines)/|^setup\.py$' |
    tar --null --files-from=- --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$tree"
  [ ! -e "$tree/ga_tfx" ] && [ -f "$tree/tests/conftest.py" ] || { echo "error: bad test tree" >&2; exit 1; }
  echo "$ready" > "$work/ready"
}

if [ "$(cat "$work/ready" 2>/dev/null)" = "$ready" ]; then
  step "reusing the $kind environment made in $work"
else
  make_environment
fi
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"

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

# 4. The tests against the installed wheel.
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
