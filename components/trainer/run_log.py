"""TensorBoard scalars of the run, one point per optimizer update."""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx import keras, tf
from ga_tfx.components.trainer import progress
from ga_tfx.components.trainer.distribution import remove_worker_dir, worker_write_dir

import time


class AccumulationLogger(keras.callbacks.Callback):
    """TensorBoard scalars per optimizer update (one train-function call = one window).

    Under ``ga_tfx/``: ``effective_batch_size``, ``updates`` (``optimizer.iterations``),
    ``samples_per_second`` (wall time of the window, host side) and ``loss_per_update``
    (the mean loss of the window's samples, recovered from Keras' running epoch mean, which
    is weighted by samples: exact as all micro-batches are full).
    """

    def __init__(self, log_dir, settings, total_updates=None, label="Trainer"):
        super().__init__()
        self._total, self._label = total_updates, label
        self._log_dir = log_dir
        self._micro = settings.micro_batch_size
        self._effective = settings.effective_batch_size
        self._writer = None
        self.samples, self.train_seconds = 0, 0.0  # over all fits of this process

    @property
    def samples_per_second(self):
        """Training samples per second of the windows logged so far (``None``: none yet)."""
        return self.samples / self.train_seconds if self.train_seconds > 0 else None

    def on_train_begin(self, logs=None):
        # Multi-worker: only the chief logs to log_dir (see worker_write_dir).
        self._write_dir = worker_write_dir(self._log_dir, self.model.distribute_strategy)
        self._writer = tf.summary.create_file_writer(self._write_dir)

    def on_epoch_begin(self, epoch, logs=None):
        self._seen, self._loss_total, self._time = 0, 0.0, time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        seen = batch + 1  # micro-batches so far this epoch (batch is the window's last one)
        now, window = time.perf_counter(), seen - self._seen
        loss_total = float(logs["loss"]) * seen
        step = int(self.model.optimizer.iterations.numpy())
        self.samples += window * self._micro
        self.train_seconds += now - self._time
        with self._writer.as_default(step=step):
            tf.summary.scalar("ga_tfx/effective_batch_size", self._effective)
            tf.summary.scalar("ga_tfx/updates", step)
            tf.summary.scalar(
                "ga_tfx/samples_per_second", window * self._micro / max(now - self._time, 1e-9)
            )
            tf.summary.scalar("ga_tfx/loss_per_update", (loss_total - self._loss_total) / window)
        if self._total:  # the console's progress line (ga_tfx.components.trainer.progress)
            progress.report(
                label=self._label,
                update=step,
                total=self._total,
                loss=(loss_total - self._loss_total) / window,
                samples_per_second=window * self._micro / max(now - self._time, 1e-9),
            )
        self._seen, self._loss_total, self._time = seen, loss_total, now

    def on_epoch_end(self, epoch, logs=None):
        self._writer.flush()  # a crash in a later epoch keeps this epoch's scalars

    def on_train_end(self, logs=None):
        self._writer.flush()
        self._writer.close()
        remove_worker_dir(self._write_dir, self._log_dir)
