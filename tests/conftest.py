"""Test set-up: Keras 2 first, deterministic ops, two logical CPU devices for tf.distribute."""

import ga_tfx  # noqa: F401  (first import: selects Keras 2 before TensorFlow)
from ga_tfx._keras import tf

import importlib.util
import re
import textwrap
import uuid

import pytest

tf.config.experimental.enable_op_determinism()
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
