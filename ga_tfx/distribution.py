"""Who writes: the chief of a multi-worker run, decided in one place for every front-end.

Under ``MultiWorkerMirroredStrategy`` every worker must take part in saving (reading
distributed variables may run collectives), but only the chief's files are kept: the Trainer's
checkpoints, logs and exports and ``TrainingLoop``'s checkpoints and TensorBoard logs all ask
:func:`is_chief` and write elsewhere through :func:`worker_write_dir`.
"""

from ga_tfx._keras import tf

import os
import shutil
import tempfile
from typing import Any, Optional


def is_chief(strategy: Optional[Any] = None) -> bool:
    """Whether this process writes the run's outputs.

    The task comes from the strategy's cluster resolver (``MultiWorkerMirroredStrategy``: the
    same answer as its ``extended.should_checkpoint``), else from ``TF_CONFIG``: the ``chief``
    task, or worker 0 of a cluster without one (the convention of
    ``MultiWorkerMirroredStrategy`` and Keras). True outside a cluster.
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


def worker_write_dir(path: str, strategy: Optional[Any] = None) -> str:
    """The directory this process writes ``path``'s content to.

    ``path`` itself on the chief (and outside a cluster). Every other worker gets a new local
    temporary directory (``<tmp>/ga_tfx_worker_*/<basename>``), outside the run's outputs:
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


def remove_worker_dir(write_dir: str, path: str) -> None:
    """Removes what :func:`worker_write_dir` created for ``path`` (nothing on the chief)."""
    if write_dir != path:
        shutil.rmtree(os.path.dirname(write_dir), ignore_errors=True)
