"""Distribution: the Trainer's tf.distribute strategy. Who writes (the chief, each worker's
write directory) is the library's decision, :mod:`ga_tfx.distribution`, re-exported here."""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx import tf
from ga_tfx.distribution import is_chief, remove_worker_dir, worker_write_dir

__all__ = ["is_chief", "make_strategy", "remove_worker_dir", "worker_write_dir"]


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
