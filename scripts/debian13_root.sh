#!/usr/bin/env bash
# A Debian 13 (trixie, glibc 2.41, Python 3.13) root for running this project's own commands on a
# machine whose glibc is older than TFX 1.21's wheels need (ml-metadata and TFDV 1.21 are built
# for glibc 2.39; Debian 12 has 2.36). Inside it, scripts/bootstrap.sh sees glibc 2.41 and picks
# the TFX 1.21 stack natively, exactly as on Ubuntu 24.04 or Debian 13.
#
#   debian13_root.sh build            make the root if it is missing (about 4 minutes), else nothing
#   debian13_root.sh run CMD [ARG..]  copy this work tree into the root and run CMD there, from
#                                     the copy's top (e.g. `run bash scripts/test.sh`)
#   debian13_root.sh path             print where the root lives
# Commands in the root run one at a time (a lock): each replaces the copy of the work tree.
#
# The root is cached outside the clone, in $GA_TFX_ROOT_CACHE (default /var/cache/ga-tfx), so a
# second run on the same machine reuses it, together with the copy's .venv/ and pip/uv caches:
# only the work tree is copied anew. Each `run` mounts /proc, /dev and a /dev/shm of its own in a
# private mount namespace (unshare -m): the kernel removes every mount when the command ends,
# however it ends, so nothing is left mounted on the host. Needs root (debootstrap, chroot).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${GA_TFX_ROOT_CACHE:-/var/cache/ga-tfx}"
dir="$cache/debian13"
# What the root holds beyond debootstrap's minimal base: Python with venv and pip (debootstrap's
# --include), then, through the root's own apt, a compiler and Python's headers (pyfarmhash, a
# TFX dependency, has no wheel for Python 3.13 and compiles) and git (the packaging test builds
# from the tree). debootstrap's --include does not resolve g++'s architecture-specific
# dependencies (gcc-x86-64-linux-gnu: "Couldn't download packages"), apt does. A change here
# rebuilds the root (the stamp).
INCLUDE="python3,python3-venv,python3-pip,ca-certificates"
APT_PACKAGES="g++ python3-dev git"
STAMP="trixie minbase $INCLUDE $APT_PACKAGES"
# The copy of the work tree inside the root.
copy=/srv/ga-tfx

die() { echo "error: $*" >&2; exit 1; }

# The Debian mirror this machine's apt already uses (deb822 or one-line sources).
mirror() {
  local uri
  uri="$(grep -h -m1 -E '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' || true)"
  [ -n "$uri" ] || uri="$(grep -h -m1 -E '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' || true)"
  echo "${uri:-http://deb.debian.org/debian}"
}

build() {
  if [ "$(cat "$dir/.ga_tfx_stamp" 2>/dev/null)" = "$STAMP" ]; then
    return 0
  fi
  [ "$(id -u)" = 0 ] || die "building the Debian 13 root needs root (debootstrap)"
  if ! command -v debootstrap >/dev/null; then
    echo "[debian13] installing debootstrap"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  fi
  local partial="$dir.partial" started=$SECONDS
  rm -rf "$partial" "$dir"
  mkdir -p "$cache"
  echo "[debian13] debootstrap trixie into $dir from $(mirror) (a few minutes, once per machine)"
  debootstrap --variant=minbase --include="$INCLUDE" trixie "$partial" "$(mirror)" \
    > "$cache/debootstrap.log" 2>&1 || {
      tail -20 "$cache/debootstrap.log" >&2
      die "debootstrap failed (full log: $cache/debootstrap.log)"
    }
  echo "[debian13] apt-get install $APT_PACKAGES"
  in_root "$partial" /bin/sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends $APT_PACKAGES >/dev/null && apt-get clean" \
    || die "apt-get install in the root failed"
  # Debian's pip refuses to install into the system Python (PEP 668); everything here goes into
  # a venv, so nothing needs the override.
  echo "$STAMP" > "$partial/.ga_tfx_stamp"
  mv "$partial" "$dir"
  echo "[debian13] root ready in $((SECONDS - started)) s: $dir"
}

# The work tree as git sees it (tracked and untracked-but-not-ignored files), into $dir$copy;
# the copy's environments (.venv/, .venv-tfx-1.16/) are kept: their stamps decide whether to
# reinstall.
sync_tree() {
  mkdir -p "$dir$copy"
  find "$dir$copy" -mindepth 1 -maxdepth 1 ! -name ".venv*" -exec rm -rf {} +
  if git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
    (cd "$root" && git ls-files -z --cached --others --exclude-standard |
       xargs -0 -r tar --no-recursion --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$dir$copy"
    # The history too, for tests and tools that read it (e.g. the mutants' --commit).
    cp -a "$root/.git" "$dir$copy/.git"
  else
    tar -C "$root" --exclude='./.venv*' -cf - . | tar -xf - -C "$dir$copy"
  fi
}

# in_root DIR CMD [ARG..]: CMD in the root at DIR, with a clean environment
# and /proc, /dev and a /dev/shm of its own, mounted in a private mount namespace: they exist
# only for this command and vanish with it, however it ends.
in_root() {
  local target="$1"; shift
  cp /etc/resolv.conf "$target/etc/resolv.conf"
  # The host's CA bundle, where pip is told to look for it (PIP_CERT), so that apt, pip and uv
  # reach the registries exactly as they do on the host.
  if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    mkdir -p "$target/etc/ssl/certs"
    cp /etc/ssl/certs/ca-certificates.crt "$target/etc/ssl/certs/ca-certificates.crt"
  fi
  # A clean environment: the host's pip settings point at folders that do not exist in the root.
  # uv never downloads an interpreter: the root's Python is the one under test.
  local -a keep=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
                 LANG=C.UTF-8 TERM="${TERM:-dumb}" UV_PYTHON_DOWNLOADS=never)
  local var
  for var in $(compgen -e); do
    case "$var" in
      # The project's own settings, CI, the registries' proxies and the CA bundle's path in the
      # variables that pip, uv (SSL_CERT_FILE), git and requests read.
      CI|GA_TFX_*|PIP_DEFAULT_TIMEOUT|PIP_CERT|*_proxy|*_PROXY|SSL_CERT_*|*CA_BUNDLE|*_CAINFO)
        keep+=("$var=${!var}") ;;
    esac
  done
  unshare --mount --propagation private -- /bin/bash -c '
    set -e
    target="$1"; shift
    mount -t proc proc "$target/proc"
    mount --rbind /dev "$target/dev"
    mount -t tmpfs -o size=50% shm "$target/dev/shm"
    # pyenv'"'"'s interpreters, read-only, where the host has them: in the root as on a Debian 13 or
    # Ubuntu 24.04 machine with pyenv, e.g. Python 3.10 for TFX 1.16 or 3.12 for TFX 1.21.
    if [ -d /root/.pyenv/versions ]; then
      mkdir -p "$target/root/.pyenv"
      mount --bind /root/.pyenv "$target/root/.pyenv"
      mount -o remount,bind,ro "$target/root/.pyenv"
    fi
    exec chroot "$target" /usr/bin/env -i "$@"
  ' bash "$target" "${keep[@]}" "$@"
}

run() {
  [ "$#" -gt 0 ] || die "run needs a command (e.g. run bash scripts/test.sh)"
  [ "$(id -u)" = 0 ] || die "running in the Debian 13 root needs root (chroot)"
  build
  # One command at a time: each run replaces the copy of the work tree that another would be
  # running from.
  exec 9> "$cache/run.lock"
  if ! flock -n 9; then
    echo "[debian13] another command runs in the root; waiting for it to end"
    flock 9
  fi
  sync_tree
  local quoted
  quoted="$(printf '%q ' "$@")"
  in_root "$dir" /bin/bash -c "cd $copy && exec $quoted"
}

case "${1:-}" in
  build) build ;;
  run) shift; run "$@" ;;
  path) echo "$dir" ;;
  *) die "unknown command '${1:-}' (allowed: build, run CMD..., path)" ;;
esac
