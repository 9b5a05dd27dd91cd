"""Distribution: the tf.distribute strategy, the chief, where each worker writes."""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx import tf

import os
import shutil
import tempfile


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


def is_chief(strategy=None):
    """Whether this process writes the Trainer's outputs.

    The task comes from the strategy's cluster resolver (MultiWorkerMirroredStrategy), else
    from ``TF_CONFIG``: the ``chief`` task, or worker 0 of a cluster without one (the
    convention of MultiWorkerMirroredStrategy and Keras). True outside a cluster.
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    task_type, task_id = resolver.task_type, resolver.task_id
    if not task_type:
        return True
    if task_type == "chief":
        return True
    return (
        task_type == "worker" and not task_id and "chief" not in resolver.cluster_spec().as_dict()
    )


def worker_write_dir(path, strategy=None):
    """The directory this process writes ``path``'s content to.

    ``path`` itself on the chief (and outside a cluster). Every other worker gets a new local
    temporary directory (``<tmp>/ga_tfx_worker_*/<basename>``), outside the Trainer's outputs:
    under MultiWorkerMirroredStrategy all workers must still save models and checkpoints
    (saving reads distributed variables, which may run collective ops), as in the Keras
    multi-worker guide, but only the chief's copy is kept. Remove it with
    :func:`remove_worker_dir`.
    """
    if is_chief(strategy):
        return path
    return os.path.join(
        tempfile.mkdtemp(prefix="ga_tfx_worker_"), os.path.basename(os.path.normpath(path))
    )


def remove_worker_dir(write_dir, path):
    """Removes what :func:`worker_write_dir` created for ``path`` (nothing on the chief)."""
    if write_dir != path:
        shutil.rmtree(os.path.dirname(write_dir), ignore_errors=True)
