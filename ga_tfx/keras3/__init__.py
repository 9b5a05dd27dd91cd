"""ga_tfx.keras3: exact gradient accumulation for Keras 3 (``import keras``), outside TFX.

Import it before Keras and TensorFlow in a Keras 3 process: ``import ga_tfx.keras3``. It never
selects Keras 2. ``import ga_tfx`` (which Python runs first) selects Keras 2 only where tf-keras
is installed, by setting ``TF_USE_LEGACY_KERAS=1`` before TensorFlow is imported; this package
takes that back (restores the variable as it was) while TensorFlow is still not imported, so
``tf.keras`` stays Keras 3 for the user. Where tf-keras is not installed, ``import ga_tfx``
selects nothing and a Keras 2 name (``ga_tfx.wrap_model``) raises ``KerasVersionError``.
Imported after TensorFlow in a process that already selected Keras 2, it works the same (it uses
``keras``, the Keras 3 package, never ``tf.keras``).
"""

import ga_tfx

import sys

if ga_tfx._SET_LEGACY_FLAG and "tensorflow" not in sys.modules:
    import os

    if ga_tfx._LEGACY_FLAG_BEFORE is None:
        os.environ.pop("TF_USE_LEGACY_KERAS", None)
    else:
        os.environ["TF_USE_LEGACY_KERAS"] = ga_tfx._LEGACY_FLAG_BEFORE
    ga_tfx._SET_LEGACY_FLAG = False
