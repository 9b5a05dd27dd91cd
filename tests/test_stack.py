"""The stack is visible: ``ga-tfx --version`` and the Trainer's run record name the versions
that actually import (TFX, TensorFlow, the Keras ``tf.keras`` resolves to, Python)."""

import ga_tfx
from ga_tfx.components import stack
from ga_tfx.pipelines import cli

import platform
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.tfx]  # the ga-tfx command (the tfx extra)


def _imported_versions():
    """The versions as the imported modules report them (not the metadata that stack reads)."""
    import tensorflow as tf
    import tf_keras
    from tfx import version as tfx_version

    # ga-tfx runs on Keras 2: tf.keras must be the tf-keras whose version is shown.
    assert tf.keras.Model.__module__.startswith("tf_keras"), tf.keras.Model.__module__
    return {
        "ga-tfx": ga_tfx.__version__,
        "TFX": tfx_version.__version__,
        "TensorFlow": tf.__version__,
        "Keras": tf_keras.__version__,
        "Python": platform.python_version(),
    }


def test_version_prints_the_stack_that_imports(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    found = _imported_versions()
    assert capsys.readouterr().out == (
        f"ga-tfx {found['ga-tfx']}, TFX {found['TFX']}, TensorFlow {found['TensorFlow']}, "
        f"Keras {found['Keras']} (tf-keras), Python {found['Python']}\n"
    )


def test_the_installed_command_answers_without_importing_tensorflow():
    """``ga-tfx --version`` reads package metadata: it answers in a fresh interpreter without
    TensorFlow or TFX ever being imported."""
    code = (
        "import sys\n"
        "from ga_tfx.pipelines import cli\n"
        "try:\n"
        "    cli.main(['--version'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in ('tensorflow', 'tfx', 'tf_keras') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0].startswith("ga-tfx ") and "TFX " in out[0]
    assert out[-1] == "[]", out


def test_a_missing_package_reads_not_installed(monkeypatch):
    real = stack.metadata.version

    def version(name):
        if name == "tfx":
            raise stack.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(stack.metadata, "version", version)
    found = stack.versions()
    assert found["TFX"] == "not installed" and found["TensorFlow"] != "not installed"
    assert "TFX not installed, TensorFlow " in stack.line(found)


def test_the_line_keeps_its_order_whatever_the_dicts():
    """A run record's JSON is written with sorted keys: read back, its stack still prints in
    the order of ``ga-tfx --version``."""
    found = stack.versions()
    assert stack.line(dict(sorted(found.items()))) == stack.line(found) == stack.line()
    assert stack.line().startswith("ga-tfx ") and stack.line().split(", ")[-1].startswith("Python")
