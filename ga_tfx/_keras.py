"""The one place that decides Keras 2 (tf-keras) vs Keras 3.

TFX 1.16's Transform only works with Keras 2, so ga-tfx runs on tf-keras. TensorFlow resolves
``tf.keras`` lazily from the ``TF_USE_LEGACY_KERAS`` environment variable, so the variable must
be set before TensorFlow is imported. Importing ``ga_tfx`` (which imports this module first)
sets it, and fails loudly if this process has already bound ``tf.keras`` to Keras 3: mixing a
Keras 3 model with tf-keras layers, optimizers or TFX's transform layer fails later with
confusing errors (e.g. ``inputs not connected to outputs``).

Every other module of ga-tfx gets Keras from here: ``from ga_tfx._keras import keras, tf``.
"""

import importlib.util
import os
import sys

_LEGACY_FLAG = "TF_USE_LEGACY_KERAS"
_TRUE_VALUES = ("1", "true", "True")


class KerasVersionError(ImportError):
    """Raised when this process already uses Keras 3 as ``tf.keras``, or when a Keras 2 part of
    ga_tfx is used where tf-keras is not installed."""


def _tensorflow_already_imported():
    return "tensorflow" in sys.modules


if importlib.util.find_spec("tf_keras") is None:  # a Keras 3 environment: ga_tfx.keras3
    # Checked before anything changes this process (tf.keras stays as it is).
    raise KerasVersionError(
        "this part of ga_tfx needs Keras 2 (tf-keras), which is not installed: "
        'pip install "ga-tfx[keras2]", or on Keras 3 use ga_tfx.keras3'
    )
if not _tensorflow_already_imported():
    # Set before TensorFlow is first imported: tf.keras then resolves to tf-keras (Keras 2).
    os.environ[_LEGACY_FLAG] = "1"
elif os.environ.get(_LEGACY_FLAG) not in _TRUE_VALUES:
    # TensorFlow is imported but tf.keras may still be unresolved; TF 2.16 reads the variable
    # when `tf.keras` is first accessed, so setting it now is still in time in that case.
    os.environ[_LEGACY_FLAG] = "1"

import tensorflow as tf  # noqa: E402  (must follow the environment variable)
import tf_keras as keras  # noqa: E402


def _check_tf_keras_is_keras_2():
    resolved = tf.keras
    module_name = getattr(resolved, "__name__", "")
    # By identity, not by name: once something has run `import tensorflow.keras`, tf-keras'
    # API module is also registered as `tensorflow.keras`.
    if getattr(resolved, "Model", None) is not keras.Model:
        raise KerasVersionError(
            "ga_tfx needs Keras 2 (tf-keras), but tf.keras in this process is already bound to "
            f"{module_name or resolved!r} (Keras 3). Import ga_tfx (or set "
            "TF_USE_LEGACY_KERAS=1) before TensorFlow is first imported, e.g. make "
            "`import ga_tfx` the first import of your script or module file."
        )


_check_tf_keras_is_keras_2()

from ga_tfx import _tf_keras_internals  # noqa: E402  (after TensorFlow and tf-keras)

_tf_keras_internals.leave_tf_keras_unconverted_by_autograph()

__all__ = ["keras", "tf", "KerasVersionError"]
