#!/usr/bin/env bash
# Builds the image every step of the compiled Kubeflow job runs in (docker/Dockerfile), here,
# with no registry: the Dockerfile's base (TFX's published image in production) is a local
# stand-in made from the Debian 13 root of scripts/debian13_root.sh (docker/base.Dockerfile).
#
#   build_image.sh [--tfx 1.21|1.16] [--tag NAME]    (default: --tfx 1.21 --tag ga-tfx:TFX-local)
# GA_TFX_IMAGE_TAG, when set, is the default tag (two work trees on one machine, each its own image).
#
# Installs Debian's docker.io and starts dockerd where they are missing (root needed; a one-line
# error where that is impossible). Cached outside the clone, in Docker's own store: the root
# (/var/cache/ga-tfx), the base image (tagged by the root's stamp and the Python) and the
# locked-dependency layer (Docker's build cache, keyed by the lock file), so a second build on
# the same machine rebuilds only the ga-tfx layer. Ends with the Dockerfile's smoke check
# ("ga-tfx image OK: ..."), and prints the image's name as its last line.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tfx=1.21
tag=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tfx) tfx="${2:-}"; shift 2 ;;
    --tag) tag="${2:-}"; shift 2 ;;
    *) echo "error: unknown argument '$1' (allowed: --tfx 1.21|1.16, --tag NAME)" >&2; exit 2 ;;
  esac
done
die() { echo "error: $*" >&2; exit 1; }
case "$tfx" in
  1.21) python=/usr/bin/python3 ;;
  # TFX 1.16 supports Python 3.9-3.10 and Debian 13 has 3.13: pyenv's 3.10 goes into the root.
  1.16) python="$(ls -d /root/.pyenv/versions/3.10.*/bin/python3.10 2>/dev/null | sort -V | tail -1)"
        [ -n "$python" ] || die "--tfx 1.16 needs pyenv's Python 3.10 (/root/.pyenv/versions/3.10.*)" ;;
  *) die "--tfx '$tfx': allowed 1.21 or 1.16" ;;
esac
tag="${tag:-${GA_TFX_IMAGE_TAG:-ga-tfx:$tfx-local}}"

ensure_docker() {
  if ! command -v dockerd >/dev/null 2>&1; then
    [ "$(id -u)" = 0 ] || die "Docker is not installed and installing it needs root (apt-get install docker.io)"
    echo "[image] installing Debian's docker.io"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null; } \
      || die "apt-get install docker.io failed"
  fi
  docker info >/dev/null 2>&1 && return 0
  [ "$(id -u)" = 0 ] || die "no Docker engine answers and starting dockerd needs root"
  echo "[image] starting dockerd (log: /var/log/ga-tfx-dockerd.log)"
  nohup dockerd >/var/log/ga-tfx-dockerd.log 2>&1 &
  local i
  for i in $(seq 60); do docker info >/dev/null 2>&1 && return 0; sleep 1; done
  die "dockerd did not answer within 60 s (log: /var/log/ga-tfx-dockerd.log)"
}

# The base: the root imported once per root stamp, then the stack's Python as `python`.
ensure_base() {
  bash "$root/scripts/debian13_root.sh" build
  local dir stamp rootfs
  dir="$(bash "$root/scripts/debian13_root.sh" path)"
  stamp="$(cat "$dir/.ga_tfx_stamp" "$root/docker/base.Dockerfile" <(echo "$python") | sha256sum | cut -c1-12)"
  rootfs="ga-tfx-rootfs:$(cat "$dir/.ga_tfx_stamp" | sha256sum | cut -c1-12)"
  base="ga-tfx-base:$tfx-$stamp"
  docker image inspect "$base" >/dev/null 2>&1 && return 0
  if ! docker image inspect "$rootfs" >/dev/null 2>&1; then
    echo "[image] importing the Debian 13 root as $rootfs"
    # Not the copy of the work tree (/srv) nor what the host mounts at run time.
    tar -C "$dir" --exclude=./proc --exclude=./dev --exclude=./sys --exclude=./srv \
        --exclude=./root/.pyenv --exclude=./root/.cache --exclude=./var/cache/apt -cf - . |
      docker import \
        -c "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt" \
        -c "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt" \
        -c "ENV REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt" - "$rootfs" >/dev/null
  fi
  local context
  context="$(mktemp -d)"
  trap 'rm -rf "$context"' RETURN
  cp "$root/docker/base.Dockerfile" "$context/Dockerfile"
  mkdir -p "$context/python"
  if [ "$tfx" = 1.16 ]; then  # pyenv's interpreter, at the same path as on the host
    local prefix
    prefix="$(dirname "$(dirname "$python")")"
    mkdir -p "$context/python$(dirname "$prefix")"
    cp -a "$prefix" "$context/python$prefix"
  fi
  echo "[image] building the base $base (Python: $python)"
  docker build -q --network host --build-arg ROOTFS="$rootfs" --build-arg PYTHON="$python" \
    -t "$base" "$context" >/dev/null || die "building the base image failed"
}

ensure_docker
ensure_base
echo "[image] docker build -f docker/Dockerfile --build-arg TFX=$tfx --build-arg BASE=$base -t $tag"
started=$SECONDS
docker build --network host -f "$root/docker/Dockerfile" --build-arg TFX="$tfx" \
  --build-arg BASE="$base" -t "$tag" "$root" | grep --line-buffered -E '^(Step|Successfully)|rror' \
  || die "docker build failed (re-run: docker build --network host -f docker/Dockerfile --build-arg TFX=$tfx --build-arg BASE=$base .)"
docker image inspect "$tag" >/dev/null 2>&1 || die "docker build did not produce $tag"
echo "[image] built in $((SECONDS - started)) s"
# The smoke check again, in a container of the image (a cached build does not print it).
docker run --rm --network none --entrypoint python "$tag" /opt/ga-tfx-check/smoke_check.py "$tfx" 2>/dev/null \
  | tail -1 || die "the smoke check failed in $tag (docker run --entrypoint python $tag /opt/ga-tfx-check/smoke_check.py $tfx)"
echo "$tag"
