"""TensorBoard scalars of the run, one point per window, from the window core's events."""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx import keras, tf
from ga_tfx.components.trainer import progress
from ga_tfx.distribution import remove_worker_dir, worker_write_dir

import math
import time


class AccumulationLogger(keras.callbacks.Callback):
    """TensorBoard scalars per window (:meth:`on_window_end`, the window core's event).

    Under ``ga_tfx/``, at step ``updates`` (``optimizer.iterations`` after the window):
    ``effective_batch_size`` (the window's samples), ``updates``, ``loss_per_update`` (the
    mean loss of the window's samples, as the core computed it), ``skipped_windows``,
    ``samples_per_second`` (host wall time of the call of the train function that ran the
    window, over its samples) and, with ``log_noise_scale``, ``noise_scale``, ``noise_trace``
    and ``noise_grad_sq`` (:mod:`ga_tfx.window`). The console's progress line gets one event
    per call. ``noise_scale`` keeps the latest estimate for the run record, ``schedule_used``
    the windows' K as ``[from_window, K]`` at each change (micro-batches per replica).
    """

    # Its batch hook acts on the window events of a call, however many: fit paces with it
    # (ga_tfx.engine.pacing).
    follows_pacing = True

    def __init__(self, log_dir, total_updates=None, label="Trainer"):
        super().__init__()
        self._total, self._label = total_updates, label
        self._log_dir = log_dir
        self._writer = None
        self.samples, self.train_seconds = 0, 0.0  # over all fits of this process
        self.noise_scale = None  # the latest B_simple estimate (log_noise_scale)
        # [from_window (0-based), K] each time this process saw K change: the schedule used.
        self.schedule_used = []
        self._events = []

    @property
    def samples_per_second(self):
        """Training samples per second of the windows logged so far (``None``: none yet)."""
        return self.samples / self.train_seconds if self.train_seconds > 0 else None

    def on_train_begin(self, logs=None):
        # Multi-worker: only the chief logs to log_dir (see worker_write_dir).
        self._write_dir = worker_write_dir(self._log_dir, self.model.distribute_strategy)
        self._writer = tf.summary.create_file_writer(self._write_dir)

    def on_epoch_begin(self, epoch, logs=None):
        self._time = time.perf_counter()

    def on_window_end(self, event):
        self._events.append(event)
        if not self.schedule_used or self.schedule_used[-1][1] != event.micro_batches:
            self.schedule_used.append([event.window - 1, event.micro_batches])

    def on_train_batch_end(self, batch, logs=None):
        events, self._events = self._events, []
        if not events:
            return
        now = time.perf_counter()
        samples = sum(event.samples for event in events)
        rate = samples / max(now - self._time, 1e-9)
        self.samples += samples
        self.train_seconds += now - self._time
        self._time = now
        for event in events:
            self._write(event, rate)
        last = events[-1]
        if self._total:  # the console's progress line (ga_tfx.components.trainer.progress)
            progress.report(
                label=self._label,
                update=last.window,
                total=self._total,
                loss=last.loss,
                samples_per_second=rate,
            )

    def _write(self, event, rate):
        with self._writer.as_default(step=event.update):
            tf.summary.scalar("ga_tfx/effective_batch_size", event.samples)
            tf.summary.scalar("ga_tfx/updates", event.update)
            tf.summary.scalar("ga_tfx/samples_per_second", rate)
            tf.summary.scalar("ga_tfx/loss_per_update", event.loss)
            tf.summary.scalar("ga_tfx/skipped_windows", event.window - event.update)
            if not math.isnan(event.noise_scale):
                self.noise_scale = event.noise_scale
                for key in ("noise_scale", "noise_trace", "noise_grad_sq"):
                    tf.summary.scalar(f"ga_tfx/{key}", getattr(event, key))

    def on_epoch_end(self, epoch, logs=None):
        self._writer.flush()  # a crash in a later epoch keeps this epoch's scalars

    def on_train_end(self, logs=None):
        self._writer.flush()
        self._writer.close()
        remove_worker_dir(self._write_dir, self._log_dir)
