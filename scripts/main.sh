#!/usr/bin/env bash
# The main job: sets up .venv/ if needed, then runs the digits TFX pipeline on this machine
# (`ga-tfx run`; arguments are passed on, e.g. --tune, --accum-steps 8, --output-dir DIR).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/bootstrap.sh"
cd "$root"
exec "$root/.venv/bin/ga-tfx" run "$@"
