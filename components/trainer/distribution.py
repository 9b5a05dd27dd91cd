"""Distribution: the Trainer's tf.distribute strategy. Who writes (the chief, each worker's
write directory) is the library's decision, :mod:`ga_tfx.distribution`, re-exported here."""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx import tf
from ga_tfx.distribution import is_chief, remove_worker_dir, worker_write_dir
from ga_tfx.preemption import causes

import os
import re

__all__ = [
    "is_chief",
    "make_strategy",
    "peer_lost",
    "remove_worker_dir",
    "worker_write_dir",
]

# The errors TensorFlow's collectives end with when another worker of the cluster is gone: its
# health check aborts them (UnavailableError, "... is down"), a peer's connection is refused
# or reset (UnavailableError), or a collective is cancelled or aborted on its behalf.
_PEER_ERRORS = (tf.errors.UnavailableError, tf.errors.CancelledError, tf.errors.AbortedError)
PEER_LOST = (
    "a worker of this multi-worker training stopped ({detail}); this worker stops too: run every "
    "worker again (a retry of the step) to resume from the last checkpoint"
)


def make_strategy(choice):
    """``"none"``: default strategy; ``"mirrored"``: all GPUs, else all logical CPUs;
    ``"auto"``: mirrored when more than one GPU is visible, else none; ``"multi_worker"``:
    MultiWorkerMirroredStrategy over the cluster in ``TF_CONFIG`` (each worker's GPUs, else its
    CPU; a single local worker without ``TF_CONFIG``).

    ``"multi_worker"`` must be created before TensorFlow runs any operation in the process
    (collective ops are configured once, at start-up): keep this the first TensorFlow call.
    """
    if choice == "multi_worker":
        try:
            return tf.distribute.MultiWorkerMirroredStrategy()
        except RuntimeError as error:
            if "program startup" not in str(error):
                raise
            raise RuntimeError(
                "strategy='multi_worker': MultiWorkerMirroredStrategy must be created before "
                "TensorFlow runs any operation in this process, but something already did "
                "(TensorFlow configures collective ops once, at start-up)."
            ) from error
    gpus = tf.config.list_logical_devices("GPU")
    if choice == "mirrored":
        devices = gpus or tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy([device.name for device in devices])
    if choice == "auto" and len(gpus) > 1:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


def peer_lost(error: BaseException):
    """The one line to show when ``error`` (or what caused it) is a collective that failed
    because another worker of a ``TF_CONFIG`` cluster is gone; else ``None``."""
    if not os.environ.get("TF_CONFIG"):
        return None
    for cause in causes(error):
        if isinstance(cause, _PEER_ERRORS):
            text = " ".join(str(getattr(cause, "message", cause)).split())
            who = re.search(
                r"reported from (/job:\w+/[\w:/]*\d)|(/job:\w+/[\w:/]*\d) is down", text
            )
            detail = (
                f"{who.group(1) or who.group(2)} failed"
                if who
                else re.sub(r"\{\{.*?\}\}\s*", "", text)[:160]
            )
            return PEER_LOST.format(detail=detail)
    return None
