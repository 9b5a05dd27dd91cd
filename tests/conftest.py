"""Test set-up: Keras 2 first, deterministic ops, two logical CPU devices for tf.distribute."""

import os

# TensorFlow's oneDNN kernels off, unless the caller chose (set before TensorFlow is imported):
# on the suite's tiny models their set-up costs more than they save (measured: test_equivalence
# and test_windows, 70 s with them, 54 s without). Numbers are checked against references
# computed in the same process, so both kernel sets are held to the same tolerances;
# scripts/test.sh runs the library tier with oneDNN on, the benchmark and the pipelines keep
# TensorFlow's default (on).
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
# TensorFlow's BFC allocator on the CPU, which counts live tensor bytes (get_memory_info) for the
# memory tests; without oneDNN the default CPU allocator keeps no statistics.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

import ga_tfx  # noqa: E402, F401  (first ga_tfx import: selects Keras 2 before TensorFlow)
from ga_tfx._keras import tf  # noqa: E402

import importlib.util  # noqa: E402
import re  # noqa: E402
import textwrap
import uuid

import pytest

tf.config.experimental.enable_op_determinism()
# Under pytest-xdist (the fast tier's `-n 2` on 2 cores) each worker computes on one thread:
# two processes with a 2-thread pool each fight for the cores (measured on the fast tier:
# 8 min 44 s of CPU for 4 min 55 s of wall time).
if os.environ.get("PYTEST_XDIST_WORKER"):
    tf.config.threading.set_intra_op_parallelism_threads(1)
_cpus = tf.config.list_physical_devices("CPU")
# Two logical CPUs so that MirroredStrategy runs 2 replicas on this machine.
tf.config.set_logical_device_configuration(
    _cpus[0], [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
)

# The library environment (Python 3.12, TF 2.21) has no TFX. Test modules marked `tfx` import
# TFX at their top, so they would fail at collection before `-m "not tfx"` deselects them: there,
# they are not collected at all (their module-level `pytestmark` line is the one declaration).
_HAS_TFX = importlib.util.find_spec("tfx") is not None
_TFX_MARK = re.compile(r"^pytestmark = .*\bpytest\.mark\.tfx\b", re.MULTILINE)


def pytest_ignore_collect(collection_path, config):
    if _HAS_TFX or collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    return True if _TFX_MARK.search(collection_path.read_text()) else None


@pytest.fixture
def model_module(tmp_path, monkeypatch):
    """Writes a model module under a fresh importable name; returns ``write(source) -> name``
    (default source: the taxi test model of ``tests/taxi.py``)."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(source=None):
        if source is None:
            from tests.taxi import MODEL_MODULE as source  # imports TFX: tfx-marked tests only
        name = f"ga_tfx_tuner_model_{uuid.uuid4().hex[:8]}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        return name

    return write
