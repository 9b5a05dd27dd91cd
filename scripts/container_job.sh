#!/usr/bin/env bash
# The compiled Kubeflow job, run here as a Kubeflow backend runs it: the image built
# (scripts/build_image.sh), the digits job compiled inside it (`ga-tfx compile`, the image's
# own TFX), then every step run in its own container by the KFP v2 container contract
# (scripts/kfp_harness.py: no network, the pipeline root and the data mounted at the same
# paths). Ends with the evaluation, the blessing and the pushed model.
#
#   container_job.sh [--tfx 1.21|1.16] [--work DIR] [COMPILE FLAGS...]
#     e.g. container_job.sh --pipeline-spec 2.0      (Vertex's form; default 2.1)
#          container_job.sh --tune
# DIR (default: a new folder under /tmp) holds data/, root/ (the pipeline root), serving/ and
# job.json. Needs root (Docker) and the .venv/ of scripts/bootstrap.sh (the harness reads the
# job with kfp's protos); installs both where missing.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tfx=1.21
work=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tfx) tfx="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    *) break ;;
  esac
done
work="${work:-$(mktemp -d /tmp/ga-tfx-kubeflow.XXXXXX)}"
mkdir -p "$work"
work="$(cd "$work" && pwd)"
bash "$root/scripts/bootstrap.sh" tfx >/dev/null
image="$(bash "$root/scripts/build_image.sh" --tfx "$tfx" | tail -1)"
mkdir -p "$work/data" "$work/root" "$work/serving"
cp "$root"/pipelines/data/digits/*.csv "$work/data/"
docker run --rm --network none --volume "$work:$work" --entrypoint python "$image" \
  -m ga_tfx.pipelines.cli compile --image "$image" --pipeline-root "$work/root" \
  --data-root "$work/data" --serving-dir "$work/serving" --output "$work/job.json" "$@"
"$root/.venv/bin/python" -u "$root/scripts/kfp_harness.py" "$work/job.json" --image "$image" \
  --pipeline-root "$work/root" --mount "$work/data" --mount "$work/serving"
