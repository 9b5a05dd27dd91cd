"""Resumable checkpoints of the training state, by optimizer updates and by wall time.

What one checkpoint holds: the model's weights (AccumBatchNormalization's moving statistics
included), the optimizer (slots, ``iterations``, loss scale) and the window core (accumulator,
gradient chain state, and its state: among them the two counters a resume reads). Those
counters are the core's, stored once (``model/ga_window_core/state/...``): ``windows`` (windows
finished, applied as updates or skipped) and ``micro_batches_done`` (the micro-batches those
windows consumed: the data position, the sum of their K -- ``windows x accum_steps`` without a
schedule; an adaptive schedule's K is known only as the training goes -- counted in the data's
micro-batches, also after an out-of-memory split made each of them several slices). This
module keeps no copy of them. Checkpoints are written at window ends -- one call of the
engine's train function runs whole windows (one; several where ``steps_per_execution`` is a
multiple of ``K`` or ``"auto"``), so Keras' ``on_train_batch_end`` is a window end, where the
accumulation buffers are empty and the AccumBN window statistics have been folded into the
moving ones -- which may be mid-epoch. The data order is a function of ``shuffle_seed``, so the
resumed run skips ``micro_batches_done`` micro-batches and continues as the uninterrupted run
would.

Writes are atomic: ``tf.train.CheckpointManager.save`` writes the new checkpoint's files, then
replaces the ``checkpoint`` index file (an atomic rename), then deletes checkpoints beyond
``max_to_keep``. A kill at any point leaves the index naming a complete checkpoint, and
:meth:`UpdateCheckpoint.restore` reads only what the index names.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx import keras, tf
from ga_tfx._state import holds_under, stored_values
from ga_tfx.components.trainer.preemption import StopRequest, TrainingInterrupted
from ga_tfx.distribution import remove_worker_dir, worker_write_dir
from ga_tfx.window import CHECKPOINT_KEY

import hashlib
import json
import os
import time
from typing import Callable, Optional, Tuple

# Where 0.1.0 (never released) kept the model's window core: a checkpoint with it is refused.
# Its weights and optimizer would restore, its counters (under another key) would not, and the
# run would train again from window 0 on top of trained weights.
PRE_0_2_CORE = "model/ga_window/"

# The core's counters in a checkpoint of ``tf.train.Checkpoint(model=...)``.
CORE_KEYS = tuple(
    f"model/{CHECKPOINT_KEY}/state/{name}" for name in ("windows", "micro_batches_done")
)


def resume_directory(model_run_dir, identity, resume_root=None):
    """Where the checkpoints of one training live, shared by all attempts to run it.

    TFX gives every execution new output URIs (``<root>/<component>/model_run/<execution>``;
    on Vertex, ``<root>/<project>/<job id>/<task>_<uuid>/...``), so a re-run of a failed Trainer
    cannot find its predecessor's checkpoints in its own ``model_run_dir``. They live instead
    in ``<resume_root>/<digest>`` (default ``resume_root``: ``<root>/<component>/.ga_tfx_resume``,
    beside the component's outputs; the ga-tfx pipelines set
    ``<pipeline_root>/.ga_tfx_resume/<pipeline name>``), where ``digest`` is a hash of
    ``identity``, a JSON-able description of the training: the Trainer's holds its inputs and
    model code by content, the ga-tfx version, its settings and hyperparameters, and no URI
    (:func:`ga_tfx.components.trainer.resume.identity_of`). Only a run of the same training
    resumes; any change starts over.
    """
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[
        :20
    ]
    if resume_root is None:
        component_dir = os.path.dirname(os.path.dirname(model_run_dir.rstrip("/")))
        resume_root = os.path.join(component_dir, ".ga_tfx_resume")
    return os.path.join(resume_root, digest)


class UpdateCheckpoint(keras.callbacks.Callback):
    """Saves the training state every ``every_updates`` optimizer updates (windows applied; a
    window skipped as non-finite is not an update) or ``every_seconds`` seconds (whichever
    comes first), on a stop request, and at the end (:meth:`save_final`). Counts are the window
    core's (its state; the events of :meth:`on_window_end` pace the periodic checkpoints); the
    decision to save is taken at the end of each call of the train function, where the state
    is whole windows: where a call runs several windows, a periodic checkpoint comes at the
    first call end at or past its due count.

    Args:
      model: the (compiled) accumulation model.
      directory: the resume directory (:func:`resume_directory`), shared by all attempts.
      total_windows: windows the whole training makes (``train_args.num_steps``; an update
        each, unless skipped), the total :class:`TrainingInterrupted` reports.
      every_updates: optimizer updates between two periodic checkpoints (>= 1).
      every_seconds: seconds between two periodic checkpoints (> 0), measured with ``clock``.
      stop: the :class:`~ga_tfx.components.trainer.preemption.StopRequest` of the run; when it
        is set, the next window end (or evaluation batch) saves and raises
        :class:`~ga_tfx.components.trainer.preemption.TrainingInterrupted`.
      clock: seconds, monotonic (tests pass a fake one).
      before_save: called before each checkpoint is written; raises to prevent it (the
        Trainer's: the resume lock's
        :meth:`~ga_tfx.components.trainer.resume_lock.ResumeLock.check`).

    Call :meth:`restore` after the model is built and before ``fit``: it returns the windows
    already trained. Keeps the two latest checkpoints. ``windows_done`` is the number of windows
    trained and ``micro_batches_done`` the micro-batches they consumed (the data position), both
    read from the model's window core (``model.window_core.state``; before the core exists,
    i.e. before the first ``fit``, the values the restored checkpoint holds for it);
    ``saved_at`` is the number of windows the latest checkpoint holds. Under ``multi_worker`` every
    decision to save or stop is agreed by all workers (one small all-reduce per window), since
    all of them must save together; only the chief's files are kept.
    """

    # Its batch hook acts on the window events of a call, however many: fit paces with it
    # (ga_tfx.engine.pacing).
    follows_pacing = True

    def __init__(
        self,
        model,
        directory: str,
        *,
        total_windows: int,
        every_updates: int,
        every_seconds: float,
        stop: Optional[StopRequest] = None,
        clock: Callable[[], float] = time.monotonic,
        before_save: Callable[[], None] = lambda: None,
    ):
        super().__init__()
        self._ga_model = model
        # The core's state is the model's checkpoint dependency: the counters travel with it.
        self._checkpoint = tf.train.Checkpoint(model=model)
        self._manager = tf.train.CheckpointManager(self._checkpoint, directory, max_to_keep=2)
        self._directory = directory
        self._write_dir = worker_write_dir(directory, model.distribute_strategy)
        self._write_manager = (
            self._manager
            if self._write_dir == directory
            else (tf.train.CheckpointManager(self._checkpoint, self._write_dir, max_to_keep=1))
        )
        self._strategy = model.distribute_strategy
        self._multi_worker = isinstance(self._strategy, tf.distribute.MultiWorkerMirroredStrategy)
        self._total, self._every, self._seconds = total_windows, every_updates, every_seconds
        self._stop = stop or StopRequest()
        self._clock = clock
        self._before_save = before_save
        self.saved_at = 0
        # (windows, micro-batches) the restored checkpoint holds, read while the core does not
        # exist yet.
        self._stored: Tuple[int, int] = (0, 0)
        # Updates (applied windows) since the latest checkpoint.
        self._updates_since_save = 0
        self._has_checkpoint = False  # (not read from the index: the same on every worker)
        self._saved_time = clock()

    @property
    def windows_done(self) -> int:
        """Windows trained (applied or skipped): the window core's ``state.windows``."""
        return self._counts()[0]

    @property
    def micro_batches_done(self) -> int:
        """Micro-batches the ``windows_done`` windows consumed (the data position): the window
        core's ``state.micro_batches_done``."""
        return self._counts()[1]

    def _counts(self) -> Tuple[int, int]:
        core = self._ga_model.window_core
        if core is None:  # before the first fit: what the checkpoint holds for the core
            return self._stored
        return int(core.state.windows.numpy()), int(core.state.micro_batches_done.numpy())

    @property
    def latest(self) -> Optional[str]:
        """The checkpoint the index file names (``None``: none yet)."""
        return self._manager.latest_checkpoint

    def restore(self) -> int:
        """Restores the latest checkpoint, if any; returns ``windows_done``: the windows it holds
        (without one, those the model has trained: 0 for a new model)."""
        if self.latest:
            refuse_pre_0_2_layout(self.latest)
            # Optimizer slots and accumulation buffers do not exist yet: their values are
            # restored when they are created (deferred restoration).
            self._checkpoint.restore(self.latest).expect_partial()
            self._has_checkpoint = True
            self._stored = stored_counts(self.latest)
        self.saved_at = self.windows_done
        self._updates_since_save = 0
        self._saved_time = self._clock()
        return self.windows_done

    def save(self) -> None:
        """Writes a checkpoint of the state after ``windows_done`` windows (once per count)."""
        if self._has_checkpoint and self.saved_at == self.windows_done:
            return
        self._before_save()
        self._write_manager.save(checkpoint_number=self.windows_done)
        self.saved_at, self._saved_time = self.windows_done, self._clock()
        self._updates_since_save = 0
        self._has_checkpoint = True

    def _poll(self, periodic: bool):
        """(stop, due) agreed by all workers: stop requested, periodic checkpoint due."""
        stop = self._stop.requested
        due = periodic and (
            self._updates_since_save >= self._every
            or self._clock() - self._saved_time >= self._seconds
        )
        if self._multi_worker:  # any worker's request counts for all
            flags = self._strategy.run(lambda: tf.constant([int(stop), int(due)], tf.int32))
            stop, due = (
                bool(v)
                for v in self._strategy.reduce(tf.distribute.ReduceOp.SUM, flags, axis=None).numpy()
            )
        return stop, due

    def _interrupt(self):
        self.save()
        raise TrainingInterrupted(self.windows_done, self._total, self._stop.signum or 0)

    def on_window_end(self, event):
        """The window core's event: one more window trained (the core counts it); an update
        unless skipped, for the periodic checkpoints' cadence."""
        self._updates_since_save += int(event.applied)

    def on_train_batch_end(self, batch, logs=None):
        # After a call of the train function: whole windows, each counted by on_window_end.
        stop, due = self._poll(periodic=True)
        if stop:
            self._interrupt()
        if due:
            self.save()

    def on_test_batch_end(self, batch, logs=None):
        if self._poll(periodic=False)[0]:  # evaluation changes no state: save, stop
            self._interrupt()

    def save_final(self) -> None:
        """After the last window: saves the final state (an export killed later re-runs from
        here without training); raises ``TrainingInterrupted`` if a stop was requested."""
        self.save()
        if self._poll(periodic=False)[0]:
            self._interrupt()

    def close(self) -> None:
        """Removes a non-chief worker's temporary checkpoint directory."""
        remove_worker_dir(self._write_dir, self._directory)


def refuse_pre_0_2_layout(path: str) -> None:
    """``ValueError`` naming the key and what to do if the checkpoint ``path`` keeps the window
    core under 0.1.0's key (:data:`PRE_0_2_CORE`)."""
    if holds_under(path, PRE_0_2_CORE):
        raise ValueError(
            f"The checkpoint {path} keeps the window core under {PRE_0_2_CORE!r}: it was "
            "written before ga-tfx 0.2.0, whose checkpoints keep it under "
            f"'model/{CHECKPOINT_KEY}/'. Resuming would train again from window 0 on top of "
            "its trained weights: remove that checkpoint directory to start the run over."
        )


def stored_counts(path: str) -> Tuple[int, int]:
    """The (windows, micro-batches) the checkpoint ``path`` holds: the window core's counters
    (:data:`CORE_KEYS`). A checkpoint without a window core (nothing trained) holds (0, 0)."""
    values = stored_values(path, CORE_KEYS)
    windows, micro_batches = (values.get(key, 0) for key in CORE_KEYS)
    return windows, micro_batches
