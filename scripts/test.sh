#!/usr/bin/env bash
# The test command. Sets up both environments if needed (scripts/bootstrap.sh), runs the lint step
# when it is on, then pytest twice; extra arguments go to both pytest runs:
#   tfx  .venv/      Python 3.10, TFX 1.16, TF 2.16: the whole suite
#   lib  .venv-lib/  Python 3.12, TF 2.21:          the library tier, -m "not tfx and not slow"
# A -m expression given here is combined with "not tfx" for the library tier. GA_TFX_TEST_ENVS
# picks the environments ("tfx lib" by default; e.g. GA_TFX_TEST_ENVS=tfx for a TFX-only file).
# Exit status: 0 only when every run passed; a run that collects no test (pytest's 5) fails.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# The lint step (scripts/lint.sh: ruff check, ruff format --check, mypy on the public API) runs
# first; a finding fails the test command. GA_TFX_LINT=0 skips it for one run.
LINT_DEFAULT=1

read -r -a envs <<< "${GA_TFX_TEST_ENVS:-tfx lib}"
bash "$root/scripts/bootstrap.sh" "${envs[@]}"
cd "$root"

if [ "${GA_TFX_LINT:-$LINT_DEFAULT}" = 1 ]; then
  bash "$root/scripts/lint.sh"
fi

# The arguments for the library tier: every -m EXPR (or -mEXPR) becomes -m "(EXPR) and not tfx".
# Without -m it is the library's fast tier, "not tfx and not slow": the slow multi-process runs
# of the library are the same code on both stacks and run once, in the TFX environment (this
# keeps CI, installation included, well inside its 90 minutes on 2 cores).
lib_args=() marker="not tfx and not slow" expect_marker=0
for arg in "$@"; do
  if [ "$expect_marker" = 1 ]; then marker="($arg) and not tfx"; expect_marker=0
  elif [ "$arg" = "-m" ]; then expect_marker=1
  elif [[ "$arg" == -m?* ]]; then marker="(${arg#-m}) and not tfx"
  else lib_args+=("$arg"); fi
done

reports="$(mktemp -d)"
trap 'rm -rf "$reports"' EXIT
status=0
for name in "${envs[@]}"; do
  case "$name" in
    tfx) python="$root/.venv/bin/python"; args=("$@"); run_env=() ;;
    # The library tier keeps TensorFlow's oneDNN kernels on (tests/conftest.py turns them off
    # unless told): the tfx run covers the Eigen kernels, this one oneDNN's.
    lib) python="$root/.venv-lib/bin/python"; args=(-m "$marker" "${lib_args[@]}")
         run_env=(TF_ENABLE_ONEDNN_OPTS=1) ;;
    *) echo "error: unknown environment '$name' in GA_TFX_TEST_ENVS (allowed: tfx, lib)" >&2; exit 2 ;;
  esac
  echo "== [$name] $("$python" -c 'import platform; print("Python", platform.python_version())') =="
  rc=0
  env "${run_env[@]}" "$python" -m pytest --junitxml="$reports/$name.xml" "${args[@]}" || rc=$?
  echo "== [$name] pytest exit status $rc$([ "$rc" = 5 ] && echo ' (no test collected)') =="
  [ "$rc" = 0 ] || status=1
done

# One closing line for both runs, from their JUnit reports.
"$root/.venv/bin/python" - "$reports" "${envs[@]}" <<'EOF' || status=1
import sys
import xml.etree.ElementTree as ET

folder, names = sys.argv[1], sys.argv[2:]
total = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
for name in names:
    try:
        suite = ET.parse(f"{folder}/{name}.xml").getroot().find("testsuite")
    except (OSError, ET.ParseError):
        print(f"[{name}] no JUnit report")
        sys.exit(1)
    for key in total:
        total[key] += int(suite.get(key, 0))
failed = total["failures"] + total["errors"]
passed = total["tests"] - failed - total["skipped"]
print(f"total: {passed} passed, {failed} failed, {total['skipped']} skipped")
EOF
exit "$status"
