#!/usr/bin/env bash
# The main job: sets up .venv/ if needed, then runs `ga-tfx demo` (arguments are passed on).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/bootstrap.sh"
cd "$root"
exec "$root/.venv/bin/ga-tfx" demo "$@"
