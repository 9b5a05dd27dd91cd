"""The image's smoke check (docker/Dockerfile runs it as the build's last step, and
scripts/build_image.sh again in a container of the built image): every module the compiled
steps import imports from the installed packages, the stack is the one the build argument
named, and Keras is Keras 2. Prints one line; any failure ends the build.

    python smoke_check.py TFX     (TFX: 1.16 or 1.21)
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
import ga_tfx.components.trainer.executor  # noqa: F401
import ga_tfx.components.tuner.tuner_fn  # noqa: F401
import ga_tfx.pipelines.digits  # noqa: F401
import ga_tfx.pipelines.kubeflow  # noqa: F401

import sys

import kfp
import tensorflow as tf
import tfx.version

STACKS = {"1.16": "2.16.", "1.21": "2.21."}  # TFX -> TensorFlow

stack = sys.argv[1]
assert stack in STACKS, f"TFX={stack}: allowed {', '.join(STACKS)}"
assert tfx.version.__version__ == f"{stack}.0", tfx.version.__version__
assert tf.__version__.startswith(STACKS[stack]), tf.__version__
assert tf.keras.Model.__module__.startswith("tf_keras"), tf.keras.Model.__module__
print(
    "ga-tfx image OK: Python",
    sys.version.split()[0],
    "TFX",
    tfx.version.__version__,
    "TF",
    tf.__version__,
    "kfp",
    kfp.__version__,
)
