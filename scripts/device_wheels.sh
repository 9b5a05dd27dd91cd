#!/usr/bin/env bash
# The wheels benchmarks/device_check_jax.py needs on the lent GPU machine (Python 3.12, JAX 0.11.2,
# no keras, no package index), downloaded into .whl/ of the repo root (git-ignored), for the
# device call's `carry: [".whl"]` (/work/.library/device/README.md's recipe). keras 3.15.1's
# other needs (absl-py, h5py, ml-dtypes, numpy, packaging, rich) are on that image
# (/work/.library/device/KINDS.md); namex and optree are not. About 2 MiB in all.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${GA_TFX_PYTHON:-$root/.venv-keras3/bin/python}"
rm -rf "$root/.whl"
"$python" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  -d "$root/.whl" keras==3.15.1 namex==0.1.0 optree==0.20.0
ls -l "$root/.whl"
du -sh "$root/.whl"
