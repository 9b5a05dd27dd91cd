#!/usr/bin/env bash
# Creates (or reuses) the project's virtual environments at the repo root and installs a locked
# dependency set and ga-tfx (editable) into each:
#   tfx    .venv/           the TFX stack for this machine (below), with the dev tools (default)
#   lib    .venv-lib/       Python 3.12, requirements/lock-lib.txt: the library alone on TF 2.21.0
#   keras3 .venv-keras3/   Python 3.12, requirements/lock-keras3.txt: the Keras 3 front-end
#                           (keras 3.15.1, TF 2.21, JAX 0.12 CPU, keras-tuner 1.4.8), no tf-keras
#   other  .venv-tfx-1.16/  the stack .venv/ does not hold (CI proves both): TFX 1.16 beside a
#                           native TFX 1.21 (or .venv-tfx-1.21/ if GA_TFX_STACK=1.16 chose 1.16
#                           there); where glibc is too old for TFX 1.21, the other stack runs in a
#                           Debian 13 root instead (scripts/debian13_root.sh), not here
# The TFX stacks (README "Support matrix"; setup.py says why each pin):
#   1.21  Python 3.13 or 3.12, requirements/lock-tfx-1.21.txt: TFX 1.21.0, TF 2.21.0
#   1.16  Python 3.10,         requirements/lock-tfx-1.16.txt: TFX 1.16.0, TF 2.16.2
# .venv/ gets the newest stack this machine runs natively: TFX 1.21 where glibc >= 2.39 (its
# ml-metadata and TFDV wheels are built for it: Debian 13, Ubuntu 24.04), else TFX 1.16. The
# choice is printed in one line; GA_TFX_STACK=1.16 or 1.21 overrides it. GA_TFX_PYTHON names the
# interpreter for .venv/, GA_TFX_LIB_PYTHON the one for .venv-lib/.
# Usage: bootstrap.sh [tfx] [lib] [keras3] [other]   (no argument: tfx). Safe to re-run: an environment
# whose lock file, setup.py and stack have not changed since its last install is left as it is
# (a stamp file); one made for another stack or Python is made anew.
#        bootstrap.sh which   prints, installing nothing: the stack of .venv/, the other stack,
#                             and where the other one runs (host or root), e.g. "1.16 1.21 root"
#        bootstrap.sh check [tfx|other]   that `pip install "ga-tfx[tfx]"` beside the TFX of
#                             that environment resolves (uv, a dry run against the index), and
#                             to what the locked environment would change: one line
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
UV_VERSION="0.13.9"
# The glibc TFX 1.21's ml-metadata and tensorflow-data-validation wheels are built for
# (manylinux_2_39).
TFX_121_GLIBC="2.39"

# glibc_version: e.g. 2.36 (empty where it is not glibc).
glibc_version() {
  getconf GNU_LIBC_VERSION 2>/dev/null | awk '$1 == "glibc" {print $2}'
}

# version_at_least A B: A >= B for dotted versions.
version_at_least() {
  [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$2" ]
}

# native_stack: the newest TFX stack whose wheels run on this machine.
native_stack() {
  local glibc
  glibc="$(glibc_version)"
  if [ -n "$glibc" ] && version_at_least "$glibc" "$TFX_121_GLIBC"; then echo 1.21; else echo 1.16; fi
}

# find_python "MINORS" OVERRIDE: the path of a CPython 3.MINOR for the first MINOR that has one
# (e.g. "13 12"), trying $OVERRIDE first.
find_python() {
  local minors="$1" override="$2" c minor
  local candidates=("$override")
  for minor in $minors; do
    candidates+=("python3.$minor" "$HOME"/.pyenv/versions/3."$minor"*/bin/python3."$minor")
    candidates+=(/usr/local/bin/python3."$minor" /usr/bin/python3."$minor")
  done
  for c in "${candidates[@]}"; do
    [ -n "$c" ] || continue
    command -v "$c" >/dev/null 2>&1 || continue
    for minor in $minors; do
      if "$c" -c "import sys, venv; sys.exit(sys.version_info[:2] != (3, $minor))" 2>/dev/null; then
        command -v "$c"; return 0
      fi
    done
  done
  return 1
}

# setup_env NAME VENV "MINORS" OVERRIDE_VAR LOCK WHY [EXTRA_NO_DEPS_PACKAGE]
setup_env() {
  local name="$1" venv="$2" minors="$3" override_var="$4" lock="$5" why="$6" extra="${7:-}"
  local stamp python have
  # The third field names how it was installed (bytecode: compiled below), so an environment
  # installed before that step gets it.
  stamp="$(cat "$lock" "$root/setup.py" | sha256sum | cut -d' ' -f1) $name bytecode"
  if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.ga_tfx_stamp" 2>/dev/null)" = "$stamp" ]; then
    return 0
  fi
  # An environment of another stack or Python (e.g. after GA_TFX_STACK changed) is made anew.
  if [ -x "$venv/bin/python" ]; then
    have="$("$venv/bin/python" -c 'import sys; print(sys.version_info[1])' 2>/dev/null || true)"
    if [[ " $minors " != *" $have "* ]] || { [ -f "$venv/.ga_tfx_stamp" ] &&
         [ "$(cut -d' ' -f2 "$venv/.ga_tfx_stamp")" != "$name" ]; }; then
      echo "[bootstrap] $venv holds another stack or Python (3.$have): making it anew"
      rm -rf "$venv"
    fi
  fi
  if [ ! -x "$venv/bin/python" ]; then
    local wanted="3.${minors// / or 3.}"
    if ! python=$(find_python "$minors" "${!override_var:-}"); then
      echo "error: the $name environment needs a Python $wanted interpreter ($why), and none" >&2
      echo "       was found (tried \$$override_var, python$wanted, ~/.pyenv/versions)." >&2
      echo "       Install one (e.g. 'pyenv install ${wanted%% *}') or set $override_var=/path/to/python." >&2
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
  # Bytecode for every installed module, once: uv installs none, and where the environment
  # sets PYTHONDONTWRITEBYTECODE (these machines do) Python never caches it, so each process
  # compiled TensorFlow's and TFX's sources again: 19 s to import ga_tfx and tfx.components,
  # 6.5 s with this (about a minute, once). A file that does not compile (a package's
  # Python 2 template) is left to Python, as before.
  "$venv/bin/python" -m compileall -q -j 0 \
    "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
    >/dev/null 2>&1 || true
  echo "$stamp" > "$venv/.ga_tfx_stamp"
  echo "[bootstrap] ready: $venv"
}

# setup_stack STACK VENV: one TFX stack into VENV.
setup_stack() {
  local stack="$1" venv="$2" glibc
  glibc="$(glibc_version)"
  # gradient-accumulator: the anchor the benchmarks compare against; installed without its
  # (conflicting) pins.
  case "$stack" in
    1.16) setup_env tfx-1.16 "$venv" 10 GA_TFX_PYTHON "$root/requirements/lock-tfx-1.16.txt" \
            "TFX 1.16 supports Python 3.9-3.10" "gradient-accumulator==0.5.2" ;;
    1.21)
      if [ "$(native_stack)" != 1.21 ]; then
        echo "error: the TFX 1.21 stack needs glibc >= $TFX_121_GLIBC (its ml-metadata and" >&2
        echo "       tensorflow-data-validation wheels are built for it); this machine has" >&2
        echo "       glibc ${glibc:-unknown}. Run it in a Debian 13 root instead:" >&2
        echo "       bash scripts/debian13_root.sh run bash scripts/main.sh" >&2
        echo "error: GA_TFX_STACK=1.21 is not installable here (allowed here: 1.16)" >&2
        exit 1
      fi
      setup_env tfx-1.21 "$venv" "13 12" GA_TFX_PYTHON "$root/requirements/lock-tfx-1.21.txt" \
        "TFX 1.21 is proven on Python 3.12 and 3.13" "gradient-accumulator==0.5.2" ;;
    *) echo "error: unknown TFX stack GA_TFX_STACK='$stack' (allowed: 1.16, 1.21)" >&2; exit 2 ;;
  esac
}

# resolve_check VENV: a user's `pip install "ga-tfx[tfx]" tfx==X` beside the installed TFX X,
# resolved by uv against the index (nothing installed); one line with what would change in the
# locked environment besides ga-tfx itself (an editable install here).
resolve_check() {
  local venv="$1" tfx out changes
  tfx="$("$venv/bin/python" -c 'from importlib.metadata import version; print(version("tfx"))')"
  if ! out="$("$venv/bin/uv" pip install --dry-run --python "$venv/bin/python" \
                "$root[tfx]" "tfx==$tfx" 2>&1)"; then
    echo "$out" | grep -v '^WARNING' | tail -8 >&2
    echo "error: pip install \"ga-tfx[tfx]\" beside tfx==$tfx does not resolve" >&2
    return 1
  fi
  changes="$(echo "$out" | grep -E '^ [-+] ' | grep -v ' ga-tfx[ =@]' | tr -s ' ' | paste -sd, - || true)"
  echo "[bootstrap] pip install \"ga-tfx[tfx]\" beside tfx==$tfx resolves" \
    "($(echo "$out" | grep -o 'Resolved [0-9]* packages' || echo resolved));" \
    "the locked $(basename "$venv")/ would change: ${changes:-nothing}"
}

# other_stack SELECTED: the stack .venv/ does not hold.
other_stack() {
  if [ "$1" = 1.16 ]; then echo 1.21; else echo 1.16; fi
}

# selected_stack: GA_TFX_STACK, or the native one; prints the choice and why, in one line.
selected_stack() {
  local native glibc
  native="$(native_stack)"
  glibc="$(glibc_version)"
  if [ -n "${GA_TFX_STACK:-}" ]; then
    echo "[bootstrap] TFX ${GA_TFX_STACK} stack in .venv/: chosen by GA_TFX_STACK (this machine's glibc ${glibc:-unknown} would pick TFX $native)" >&2
    echo "$GA_TFX_STACK"
  elif [ "$native" = 1.21 ]; then
    echo "[bootstrap] TFX 1.21 stack in .venv/ (Python 3.13/3.12, TF 2.21): glibc $glibc >= $TFX_121_GLIBC runs its wheels natively (GA_TFX_STACK=1.16 for the other)" >&2
    echo 1.21
  else
    echo "[bootstrap] TFX 1.16 stack in .venv/ (Python 3.10, TF 2.16): glibc ${glibc:-unknown} < $TFX_121_GLIBC, which TFX 1.21's ml-metadata and TFDV wheels need (TFX 1.21 here: scripts/debian13_root.sh)" >&2
    echo 1.16
  fi
}

# placement: "SELECTED OTHER WHERE": the stack of .venv/, the other one, and where the other
# runs (root: TFX 1.21 on a glibc too old for it; host otherwise).
placement() {
  local selected other where=host
  selected="$(selected_stack 2>/dev/null)"
  other="$(other_stack "$selected")"
  if [ "$other" = 1.21 ] && [ "$(native_stack)" != 1.21 ]; then where=root; fi
  echo "$selected $other $where"
}

if [ "${1:-}" = which ]; then
  placement
  exit 0
fi

if [ "${1:-}" = check ]; then
  case "${2:-tfx}" in
    tfx) resolve_check "$root/.venv" ;;
    other) read -r _ other _ <<< "$(placement)"
           resolve_check "$root/.venv-tfx-$other" ;;
    *) echo "error: unknown environment '${2}' for check (allowed: tfx, other)" >&2; exit 2 ;;
  esac
  exit
fi

[ "$#" -gt 0 ] || set -- tfx
for name in "$@"; do
  case "$name" in
    tfx) setup_stack "$(selected_stack)" "$root/.venv" ;;
    lib) setup_env lib "$root/.venv-lib" 12 GA_TFX_LIB_PYTHON "$root/requirements/lock-lib.txt" \
           "the newest Keras 2 stack, TF 2.21, is proven on Python 3.12" ;;
    other)
      read -r _ other where <<< "$(placement)"
      if [ "$where" = root ]; then
        echo "error: the other stack here is TFX $other, which runs in the Debian 13 root" >&2
        echo "       (bash scripts/debian13_root.sh run bash scripts/bootstrap.sh)" >&2
        exit 2
      fi
      setup_stack "$other" "$root/.venv-tfx-$other" ;;
    # Keras 3 (ga_tfx.keras3): keras 3.15.1, TF 2.21, JAX 0.12 CPU, keras-tuner 1.4.8, no tf-keras
    # (ga-tfx goes in editable with --no-deps, as in every environment here: for development;
    # the keras3 tier installs the built wheel with its dependencies in a new venv, with this
    # environment's Python and uv, scripts/wheel_check.sh).
    keras3) setup_env keras3 "$root/.venv-keras3" 12 GA_TFX_KERAS3_PYTHON \
              "$root/requirements/lock-keras3.txt" "keras 3.15.1 with TF 2.21 and JAX 0.12 is proven on Python 3.12" ;;
    *) echo "error: unknown environment '$name' (allowed: tfx, lib, other, keras3)" >&2; exit 2 ;;
  esac
done
