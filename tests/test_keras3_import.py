"""The Keras 3 front-end imports in a Keras 3 process without selecting Keras 2 (no tf-keras)."""

import subprocess
import sys

import pytest

pytestmark = [pytest.mark.keras3]


def _run(code, path=None):
    env_code = "import os; os.environ.pop('TF_USE_LEGACY_KERAS', None)\n" + code
    if path is not None:  # a folder put first on sys.path
        env_code = f"import sys; sys.path.insert(0, {str(path)!r})\n" + env_code
    return subprocess.run(
        [sys.executable, "-c", env_code], capture_output=True, text=True, timeout=300
    )


def test_import_keeps_tf_keras_keras_3_and_loads_no_tf_keras():
    result = _run(
        "import os, sys\n"
        "import ga_tfx.keras3\n"
        "import keras, tensorflow as tf\n"
        "print(os.environ.get('TF_USE_LEGACY_KERAS'), tf.keras.Model is keras.Model,"
        " 'tf_keras' in sys.modules, keras.__version__)"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["None", "True", "False", "3.15.1"]


def test_a_keras_2_name_is_a_clear_error_without_tf_keras():
    result = _run("import ga_tfx\nga_tfx.wrap_model")
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ga_tfx._keras.KerasVersionError: this part of ga_tfx needs Keras 2")
    # The install line is setup.py's `keras2` extra (the one tf-keras range), not a range here.
    assert 'pip install "ga-tfx[keras2]"' in last
    assert "use ga_tfx.keras3" in last


def test_import_takes_back_the_keras_2_selection_where_tf_keras_is_installed(tmp_path):
    # A package named tf_keras on the path: `import ga_tfx` then selects Keras 2 (as for a
    # Keras 2 user); ga_tfx.keras3, imported before TensorFlow, restores the variable.
    (tmp_path / "tf_keras").mkdir()
    (tmp_path / "tf_keras" / "__init__.py").write_text("")
    result = _run(
        "import os, ga_tfx\n"
        "print(os.environ.get('TF_USE_LEGACY_KERAS'))\n"
        "import ga_tfx.keras3\n"
        "import keras, tensorflow as tf\n"
        "print(os.environ.get('TF_USE_LEGACY_KERAS'), tf.keras.Model is keras.Model)",
        path=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1", "None", "True"]
