"""Checkpoints of the training state and the directory shared by all attempts of one training."""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx import keras, tf

import hashlib
import json
import os

from ga_tfx.components.trainer.distribution import remove_worker_dir, worker_write_dir


def resume_directory(model_run_dir, identity):
    """Where the checkpoints of one training live, shared by all attempts to run it.

    TFX gives every execution new output URIs (``<root>/<component>/model_run/<execution>``),
    so a re-run of a failed Trainer cannot find its predecessor's checkpoints in its own
    ``model_run_dir``. They live instead in ``<root>/<component>/.ga_tfx_resume/<digest>``,
    where ``digest`` is a hash of ``identity`` (a JSON-able description of the inputs, model
    code and settings): only a re-run of the same training resumes; any change starts over.
    """
    digest = hashlib.sha256(
        json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:20]
    component_dir = os.path.dirname(os.path.dirname(model_run_dir.rstrip("/")))
    return os.path.join(component_dir, ".ga_tfx_resume", digest)


class EpochCheckpoint(keras.callbacks.Callback):
    """Checkpoints the training state at the end of every epoch, for exact resumption.

    The checkpoint holds the model's weights, the optimizer (slots, ``iterations``, loss
    scale), the accumulation state and the number of epochs done; ``restore()`` loads the latest
    one (call it after building the model, before ``fit``) and returns that number, from which
    the caller skips the micro-batches already trained on. Keeps the two latest checkpoints.
    """

    def __init__(self, model, directory):
        super().__init__()
        self.epochs_done = tf.Variable(0, dtype=tf.int64, trainable=False, name="epochs_done")
        self._checkpoint = tf.train.Checkpoint(model=model, epochs_done=self.epochs_done)
        self._manager = tf.train.CheckpointManager(self._checkpoint, directory, max_to_keep=2)
        # Multi-worker: all workers restore the chief's checkpoints and all save (saving may
        # run collective ops), the non-chief ones to a local temporary directory.
        self._directory = directory
        self._write_dir = worker_write_dir(directory, model.distribute_strategy)
        self._write_manager = self._manager if self._write_dir == directory else (
            tf.train.CheckpointManager(self._checkpoint, self._write_dir, max_to_keep=1))

    def restore(self):
        """Epochs done by the latest checkpoint (0 without one)."""
        if self._manager.latest_checkpoint:
            # Optimizer slots do not exist yet: their values are restored when created.
            self._checkpoint.restore(self._manager.latest_checkpoint)
        return int(self.epochs_done.numpy())

    def on_epoch_end(self, epoch, logs=None):
        self.epochs_done.assign(epoch + 1)
        self._write_manager.save(checkpoint_number=epoch + 1)

    def on_train_end(self, logs=None):
        remove_worker_dir(self._write_dir, self._directory)
