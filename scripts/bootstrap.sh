#!/usr/bin/env bash
# Creates (or reuses) the project's virtual environments at the repo root and installs the locked
# dependency set and ga-tfx (editable) into each:
#   tfx  .venv/      Python 3.10, requirements/lock.txt: TFX 1.16, TF 2.16.2, dev tools (default)
#   lib  .venv-lib/  Python 3.12, requirements/lock-lib.txt: the library alone on TF 2.21.0
# Usage: bootstrap.sh [tfx] [lib]   (no argument: tfx). Safe to re-run: an environment whose lock
# file and setup.py have not changed since its last install is left as it is (a stamp file).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
UV_VERSION="0.13.9"

# find_python MINOR OVERRIDE: the path of a CPython 3.MINOR, trying $OVERRIDE first.
find_python() {
  local minor="$1" override="$2" c
  local candidates=("$override" "python3.$minor")
  candidates+=("$HOME"/.pyenv/versions/3."$minor"*/bin/python3."$minor")
  candidates+=(/usr/local/bin/python3."$minor" /usr/bin/python3."$minor")
  for c in "${candidates[@]}"; do
    [ -n "$c" ] || continue
    if command -v "$c" >/dev/null 2>&1 &&
       "$c" -c "import sys, venv; sys.exit(sys.version_info[:2] != (3, $minor))" 2>/dev/null; then
      command -v "$c"; return 0
    fi
  done
  return 1
}

# setup_env NAME VENV MINOR OVERRIDE_VAR LOCK WHY [EXTRA_NO_DEPS_PACKAGE]
setup_env() {
  local name="$1" venv="$2" minor="$3" override_var="$4" lock="$5" why="$6" extra="${7:-}"
  local stamp python
  stamp="$(cat "$lock" "$root/setup.py" | sha256sum | cut -d' ' -f1)"
  if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.ga_tfx_stamp" 2>/dev/null)" = "$stamp" ]; then
    return 0
  fi
  if [ ! -x "$venv/bin/python" ]; then
    if ! python=$(find_python "$minor" "${!override_var:-}"); then
      echo "error: the $name environment needs a Python 3.$minor interpreter ($why), and none" >&2
      echo "       was found (tried \$$override_var, python3.$minor, ~/.pyenv/versions/3.$minor*)." >&2
      echo "       Install one (e.g. 'pyenv install 3.$minor') or set $override_var=/path/to/python3.$minor." >&2
      exit 1
    fi
    echo "[bootstrap] creating $venv with $python"
    "$python" -m venv "$venv"
  fi
  echo "[bootstrap] installing $(basename "$lock") into $venv (a few minutes on a fresh machine)"
  if [ "$("$venv/bin/uv" --version 2>/dev/null | cut -d' ' -f2)" != "$UV_VERSION" ]; then
    "$venv/bin/python" -m pip --version >/dev/null 2>&1 || "$venv/bin/python" -m ensurepip --upgrade >/dev/null
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
  fi
  # uv resolves and installs the pinned packages in parallel; plain pip backtracks for many
  # minutes over TFX's google-cloud dependencies.
  "$venv/bin/uv" pip install --quiet --python "$venv/bin/python" -r "$lock"
  "$venv/bin/uv" pip install --quiet --python "$venv/bin/python" --no-deps -e "$root"
  if [ -n "$extra" ]; then
    "$venv/bin/uv" pip install --quiet --python "$venv/bin/python" --no-deps "$extra"
  fi
  echo "$stamp" > "$venv/.ga_tfx_stamp"
  echo "[bootstrap] ready: $venv"
}

[ "$#" -gt 0 ] || set -- tfx
for name in "$@"; do
  case "$name" in
    # gradient-accumulator: the anchor the benchmarks compare against; installed without its
    # (conflicting) pins.
    tfx) setup_env tfx "$root/.venv" 10 GA_TFX_PYTHON "$root/requirements/lock.txt" \
           "TFX 1.16 supports Python 3.9-3.10" "gradient-accumulator==0.5.2" ;;
    lib) setup_env lib "$root/.venv-lib" 12 GA_TFX_LIB_PYTHON "$root/requirements/lock-lib.txt" \
           "the newest Keras 2 stack, TF 2.21, is proven on Python 3.12" ;;
    *) echo "error: unknown environment '$name' (allowed: tfx, lib)" >&2; exit 2 ;;
  esac
done
