#!/usr/bin/env bash
# The compiled Kubeflow job, run here as a Kubeflow backend runs it: the image built
# (scripts/build_image.sh), the digits job compiled inside it (`ga-tfx compile`, the image's
# own TFX), then every step run in its own container by that backend's container contract
# (scripts/kfp_harness.py --backend: no network, the pipeline root and the data mounted at the
# same paths). Ends with the evaluation, the blessing and the pushed model.
#
#   container_job.sh [--backend kfp|vertex] [--tfx 1.21|1.16] [--work DIR] [COMPILE FLAGS...]
#     e.g. container_job.sh --backend vertex --pipeline-spec 2.0
#          container_job.sh --tune
# --backend (default kfp): kfp = open-source KFP 2.x (`ga-tfx compile --backend kfp`'s bare
# PipelineSpec YAML, the data and serving folders passed as run parameters, the user
# command under the emissary and launcher stand-ins, upstream artifacts untyped); it first runs
# the job with TFX's stock entry point and requires it to fail at StatisticsGen (AttributeError,
# the untyped input), then runs it with ours. vertex = Vertex AI Pipelines (the PipelineJob).
# DIR (default: a new folder under /tmp) holds data/, root/ (the pipeline root), serving/ and
# the job. Needs root (Docker) and the .venv/ of scripts/bootstrap.sh (the harness reads the
# job with kfp's protos); installs both where missing.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tfx=1.21
work=""
backend=kfp
while [ $# -gt 0 ]; do
  case "$1" in
    --tfx) tfx="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --backend) backend="$2"; shift 2 ;;
    *) break ;;
  esac
done
case "$backend" in
  kfp|vertex) ;;
  *) echo "error: --backend '$backend': allowed kfp or vertex" >&2; exit 2 ;;
esac
work="${work:-$(mktemp -d /tmp/ga-tfx-kubeflow.XXXXXX)}"
mkdir -p "$work"
work="$(cd "$work" && pwd)"
bash "$root/scripts/bootstrap.sh" tfx >/dev/null
image="$(bash "$root/scripts/build_image.sh" --tfx "$tfx" | tail -1)"
mkdir -p "$work/data" "$work/root" "$work/serving"
cp "$root"/pipelines/data/digits/*.csv "$work/data/"
py="$root/.venv/bin/python"
# kfp: the bare PipelineSpec YAML, its data and serving folders runtime parameters whose
# defaults name no folder, given at run creation (--param); vertex: the PipelineJob JSON, its
# runtimeConfig holding them.
if [ "$backend" = kfp ]; then
  job="$work/job.yaml"; data_default=/nonexistent/data; serving_default=/nonexistent/serving
else
  job="$work/job.json"; data_default="$work/data"; serving_default="$work/serving"
fi
docker run --rm --network none --volume "$work:$work" --entrypoint python "$image" \
  -m ga_tfx.pipelines.cli compile --backend "$backend" --image "$image" \
  --pipeline-root "$work/root" --data-root "$data_default" --serving-dir "$serving_default" \
  --output "$job" "$@"
harness=("$py" -u "$root/scripts/kfp_harness.py" "$job" --backend "$backend" --image "$image"
  --pipeline-root "$work/root" --mount "$work/data" --mount "$work/serving")
if [ "$backend" = kfp ]; then
  harness+=(--param "data_root=$work/data" --param "serving_dir=$work/serving")
fi
if [ "$backend" = kfp ]; then
  echo "[kfp] TFX's stock entry point, in the same run setup (must fail at StatisticsGen):"
  if "${harness[@]}" --stock-entrypoint >"$work/stock.log" 2>&1; then
    cat "$work/stock.log"; echo "error: TFX's stock entry point ran the whole job under kfp" >&2; exit 1
  fi
  grep -q "harness: error: task StatisticsGen exited" "$work/stock.log" \
    && grep -q "AttributeError: 'NoneType' object has no attribute 'get'" "$work/stock.log" \
    || { cat "$work/stock.log"; echo "error: the stock entry point failed otherwise" >&2; exit 1; }
  grep -E "^  [A-Za-z]+: ok|harness: error" "$work/stock.log"
  echo "[kfp] ours:"
fi
"${harness[@]}"
