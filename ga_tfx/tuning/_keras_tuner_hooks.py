"""Every private keras-tuner name ga-tfx uses, checked when this module is imported.

keras-tuner has no public hook for what runs around one trial's fit (the noise-scale probe's
curve and stop: ``Tuner._build_and_fit_model``, :mod:`ga_tfx.tuning.probe_base`, shared by the
Keras 2 probe on keras-tuner 1.4.5 and the Keras 3 one on 1.4.8), nor a public API
for the distributed chief's gRPC service and trial states that the Tuner component watches
(``keras_tuner.src``: ``components/tuner/heartbeat.py``, ``components/tuner/trials.py``). Those
modules import this one first; a keras-tuner release without one of the names below fails
here, naming it (:func:`ga_tfx._private_hooks.check_hooks`). ``tests/test_private_hooks.py``
checks that no private keras-tuner name is used that is not listed here.
"""

from ga_tfx._private_hooks import Hook, check_hooks

from typing import Tuple

import keras_tuner

# keras-tuner major.minor releases the ga-tfx test suite passed on (1.4.5: Keras 2 and TFX;
# 1.4.8: Keras 3, where the probe imports this module and so checks every name below too).
TESTED_VERSIONS: Tuple[str, ...] = ("1.4",)

REQUIRED: Tuple[Hook, ...] = (
    ("keras_tuner", "Tuner", "_build_and_fit_model"),
    ("keras_tuner.src.protos", "", "get_service"),
    ("keras_tuner.src.protos", "", "get_service_grpc"),
    ("keras_tuner.src.distribute.oracle_chief", "", "OracleServicer"),
    ("keras_tuner.src.distribute.oracle_chief", "", "grpc"),
    ("keras_tuner.src.distribute.utils", "", "is_chief_oracle"),
    ("keras_tuner.src.distribute.utils", "", "has_chief_oracle"),
    ("keras_tuner.src.engine.trial", "", "TrialStatus"),
)

check_hooks("keras-tuner", keras_tuner.__version__, TESTED_VERSIONS, REQUIRED)
