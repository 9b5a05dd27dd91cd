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
    per call (``total_windows``: the run's length in windows; None: no progress events).
    ``noise_scale`` keeps the latest estimate for the run record, ``schedule_used``
    the windows' K as ``[from_window, K]`` at each change (micro-batches per replica).
    """

    # Its batch hook acts on the window events of a call, however many: fit paces with it
    # (ga_tfx.engine.pacing).
    follows_pacing = True

    def __init__(self, log_dir, total_windows=None, label="Trainer"):
        super().__init__()
        self._total, self._label = total_windows, label
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
        self._write_points = _points_writer(self._writer)

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
        self._write(events, rate)
        last = events[-1]
        if self._total:  # the console's progress line (ga_tfx.components.trainer.progress)
            progress.report(
                label=self._label,
                window=last.window,
                total=self._total,
                loss=last.loss,
                samples_per_second=rate,
            )

    def _write(self, events, rate):
        """One point per window of ``events`` (one call of the train function), in one call of
        a traced writer: eager summary ops cost about 1 ms a window, as much as a small
        model's window (TFX's taxi example: 2.5 s of a 1000-window Trainer, profiled)."""
        rows = []
        for event in events:
            if not math.isnan(event.noise_scale):
                self.noise_scale = event.noise_scale
            rows.append(
                [
                    event.samples,
                    event.update,
                    rate,
                    event.loss,
                    event.window - event.update,
                    event.noise_scale,
                    event.noise_trace,
                    event.noise_grad_sq,
                ]
            )
        steps = tf.constant([event.update for event in events], tf.int64)
        self._write_points(steps, tf.constant(rows, tf.float64))

    def on_epoch_end(self, epoch, logs=None):
        self._writer.flush()  # a crash in a later epoch keeps this epoch's scalars

    def on_train_end(self, logs=None):
        self._writer.flush()
        self._writer.close()
        remove_worker_dir(self._write_dir, self._log_dir)


# The scalars of a window, in the columns of the writer's rows; the noise scale's three only
# where the window gave an estimate (log_noise_scale).
SCALARS = (
    "effective_batch_size",
    "updates",
    "samples_per_second",
    "loss_per_update",
    "skipped_windows",
)
NOISE_SCALARS = ("noise_scale", "noise_trace", "noise_grad_sq")


def _points_writer(writer):
    """A traced function ``(steps[n], rows[n, 8])`` that writes each row's scalars under
    ``ga_tfx/`` at its step (:data:`SCALARS`, then :data:`NOISE_SCALARS` where not NaN)."""

    # What tf.summary.scalar writes, its tag taken as given: inside the loop, scalar() would
    # prefix the loop's name scope ("while/ga_tfx/...").
    metadata = tf.compat.v1.SummaryMetadata()
    metadata.plugin_data.plugin_name = "scalars"  # TensorBoard's scalar dashboard
    metadata = metadata.SerializeToString()

    def scalar(key, value, step):
        tf.summary.write(f"ga_tfx/{key}", tf.cast(value, tf.float32), step, metadata=metadata)

    def noise(row, step):
        for column, key in enumerate(NOISE_SCALARS, start=len(SCALARS)):
            scalar(key, row[column], step)
        return tf.constant(True)

    # The loop and the branch in TensorFlow's own ops, traced without autograph's conversion
    # (a tenth of a second of each Trainer's start-up).
    @tf.function(
        input_signature=(
            tf.TensorSpec([None], tf.int64),
            tf.TensorSpec([None, len(SCALARS) + len(NOISE_SCALARS)], tf.float64),
        ),
        autograph=False,
    )
    def write(steps, rows):
        def point(i):
            row, step = rows[i], steps[i]
            for column, key in enumerate(SCALARS):
                scalar(key, row[column], step)
            estimated = tf.logical_not(tf.math.is_nan(row[len(SCALARS)]))
            tf.cond(estimated, lambda: noise(row, step), lambda: tf.constant(False))
            return i + 1

        with writer.as_default():
            tf.while_loop(lambda i: i < tf.size(steps), point, [tf.constant(0)])
        return tf.constant(True)

    return write
