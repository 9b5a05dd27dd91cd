# A local stand-in for TFX's published image (gcr.io/tfx-oss-public/tfx), for machines that
# reach no registry: scripts/build_image.sh imports the Debian 13 root of
# scripts/debian13_root.sh as ROOTFS and builds this on it. `python` is the stack's Python in a
# virtual environment at /opt/python, as `python` is conda's in TFX's image (Python 3.13 from
# the root for TFX 1.21; pyenv's 3.10, copied into the root at the same path, for TFX 1.16).
# TFX itself is not installed here: docker/Dockerfile installs the locked stack on top.
ARG ROOTFS
FROM ${ROOTFS}
# Another interpreter, if any, at the path PYTHON names (the folder is empty for TFX 1.21).
COPY python/ /
ARG PYTHON=/usr/bin/python3
RUN ${PYTHON} -m venv /opt/python
ENV PATH=/opt/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    UV_PYTHON_DOWNLOADS=never
