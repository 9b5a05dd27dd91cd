"""Keras 2 is chosen in one place: importing ga_tfx, before TensorFlow resolves tf.keras."""

import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow]  # every test starts Python processes that import TensorFlow


def _run(code):
    env_code = "import os; os.environ.pop('TF_USE_LEGACY_KERAS', None)\n" + code
    return subprocess.run(
        [sys.executable, "-c", env_code], capture_output=True, text=True, timeout=300
    )


def test_importing_ga_tfx_first_selects_tf_keras():
    result = _run("import ga_tfx\nimport tensorflow as tf\nprint(tf.keras.__name__)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1].startswith("tf_keras")


def test_tensorflow_imported_first_but_tf_keras_unresolved_is_still_fine():
    result = _run("import tensorflow as tf\nimport ga_tfx\nprint(tf.keras.__name__)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1].startswith("tf_keras")


def test_keras_3_already_bound_is_a_clear_error():
    result = _run("import tensorflow as tf\ntf.keras.Model\nimport ga_tfx")
    assert result.returncode != 0
    assert "KerasVersionError" in result.stderr
    assert "Import ga_tfx (or set TF_USE_LEGACY_KERAS=1) before TensorFlow" in result.stderr


def test_the_library_does_not_import_tfx():
    # Every module of the library proper (not the components/pipelines under its namespace).
    result = _run(
        "import sys, pkgutil, importlib, ga_tfx\n"
        "names = [m.name for m in pkgutil.walk_packages(ga_tfx.__path__, 'ga_tfx.')]\n"
        "assert len(names) > 5, names\n"
        "[importlib.import_module(n) for n in names]\n"
        "print(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('tfx', 'tensorflow_transform', 'kfp')))"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("argv", [["demo", "--accum-steps", "0"], ["demo", "--bogus"], []])
def test_cli_rejects_bad_arguments(argv):
    result = subprocess.run(
        [sys.executable, "-m", "ga_tfx.pipelines.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "usage: ga-tfx" in result.stderr
