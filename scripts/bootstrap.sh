#!/usr/bin/env bash
# Creates (or reuses) the virtual environment .venv/ at the repo root with Python 3.10 and the
# locked dependency set, then installs ga-tfx into it (editable). Safe to re-run: when
# requirements/lock.txt and setup.py have not changed since the last install, it does nothing.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"

find_python310() {
  local candidates=("${GA_TFX_PYTHON:-}" python3.10)
  candidates+=("$HOME"/.pyenv/versions/3.10*/bin/python3.10 /usr/local/bin/python3.10 /usr/bin/python3.10)
  local c
  for c in "${candidates[@]}"; do
    [ -n "$c" ] || continue
    if command -v "$c" >/dev/null 2>&1 &&
       "$c" -c 'import sys, venv; sys.exit(sys.version_info[:2] != (3, 10))' 2>/dev/null; then
      command -v "$c"; return 0
    fi
  done
  return 1
}

stamp_of() { cat "$root/requirements/lock.txt" "$root/setup.py" | sha256sum | cut -d' ' -f1; }

if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.ga_tfx_stamp" 2>/dev/null)" = "$(stamp_of)" ]; then
  exit 0
fi

if [ ! -x "$venv/bin/python" ]; then
  if ! python=$(find_python310); then
    echo "error: ga-tfx needs a Python 3.10 interpreter (TFX 1.16 supports Python 3.9-3.10)," >&2
    echo "       and none was found (tried \$GA_TFX_PYTHON, python3.10, ~/.pyenv/versions/3.10*)." >&2
    echo "       Install one (e.g. 'pyenv install 3.10') or set GA_TFX_PYTHON=/path/to/python3.10." >&2
    exit 1
  fi
  echo "[bootstrap] creating $venv with $python"
  "$python" -m venv "$venv"
fi

echo "[bootstrap] installing the locked dependency set (a few minutes on a fresh machine)"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "uv==0.13.9"
# uv resolves and installs the ~280 pinned packages in parallel; plain pip backtracks for many
# minutes over TFX's google-cloud dependencies.
"$venv/bin/uv" pip install --quiet --python "$venv/bin/python" -r "$root/requirements/lock.txt"
"$venv/bin/uv" pip install --quiet --python "$venv/bin/python" --no-deps -e "$root"
# The anchor the benchmarks compare against; installed without its (conflicting) pins.
"$venv/bin/uv" pip install --quiet --python "$venv/bin/python" --no-deps "gradient-accumulator==0.5.2"
stamp_of > "$venv/.ga_tfx_stamp"
echo "[bootstrap] ready: $venv"
