"""Machine and source facts for the report header."""

import ga_tfx  # first import: selects Keras 2 before TensorFlow is imported
from ga_tfx import tf

import os
import platform
import subprocess

import numpy as np

from benchmarks import frameworks


def machine_facts():
    """CPU, memory, package versions, load average and the ga_tfx source fingerprint."""
    cpu_model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        import tf_keras

        tf_keras_version = tf_keras.__version__
    except Exception:
        tf_keras_version = "?"
    try:
        from importlib.metadata import version

        anchor_version = version("gradient-accumulator")
    except Exception:
        anchor_version = "?"
    mem_total = "?"
    try:
        with open("/proc/meminfo") as f:
            mem_total = f"{int(f.readline().split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "sched_affinity": len(os.sched_getaffinity(0)),
        "cpu_model": cpu_model,
        "memory": mem_total,
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "tf_keras": tf_keras_version,
        "keras3": frameworks.version(frameworks.KERAS3),
        "numpy": np.__version__,
        "gradient_accumulator": anchor_version,
        "ga_tfx": ga_tfx.__version__,
        "kernel": platform.release(),
        "load_avg_start": os.getloadavg(),
        "ga_tfx_source": ga_tfx_source(),
    }


def ga_tfx_source():
    """Fingerprint of the ga_tfx sources (to detect edits while the benchmark runs)."""
    import hashlib

    package = os.path.dirname(os.path.abspath(ga_tfx.__file__))
    digest = hashlib.sha256()
    for folder, _dirs, files in sorted(os.walk(package)):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, "rb") as f:
                    digest.update(os.path.relpath(path, package).encode() + b"\0" + f.read())
    info = {"fingerprint": digest.hexdigest()[:12]}
    try:
        root = os.path.dirname(package)
        info["commit"] = subprocess.run(
            ["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        info["dirty"] = bool(
            subprocess.run(
                ["git", "-C", root, "status", "--porcelain", "--", "ga_tfx"],
                capture_output=True,
                text=True,
            ).stdout.strip()
        )
    except OSError:
        pass
    return info
