"""``TrainingLoop``'s checkpoints: one ``tf.train.CheckpointManager``, written by the chief."""

from ga_tfx._keras import tf
from ga_tfx._state import holds_under
from ga_tfx.distribution import is_chief
from ga_tfx.window import CHECKPOINT_KEY

import shutil
import tempfile
from typing import Any, Optional


class LoopCheckpoints:
    """Saves and restores the loop's whole state under ``directory``.

    Args:
      checkpoint: the ``tf.train.Checkpoint`` of the state: ``model``, ``optimizer`` and the
        window core under :data:`~ga_tfx.window.CHECKPOINT_KEY` (the loop's counters are its
        ``state``).
      directory: where checkpoints live, or ``None`` (no checkpoints; :meth:`save` and
        :meth:`restore` do nothing).
      strategy: the loop's strategy. Only the chief (:func:`ga_tfx.distribution.is_chief`)
        writes to ``directory``; other workers save the same state to a temporary directory
        they delete at once (saving reads replica-local buffers, which all-reduces them: every
        worker must take part). Every worker restores from ``directory``: under a
        multi-worker strategy it must be shared storage.
      max_to_keep: checkpoints kept (>= 1).
    """

    def __init__(
        self,
        checkpoint: Any,
        directory: Optional[str],
        strategy: Any,
        max_to_keep: int,
    ) -> None:
        self._checkpoint = checkpoint
        self.directory = directory
        self._manager = None
        if directory is not None and is_chief(strategy):
            self._manager = tf.train.CheckpointManager(
                checkpoint, directory, max_to_keep=max_to_keep
            )

    def save(self) -> Optional[str]:
        """Writes a checkpoint now; returns its path (chief) or ``None``."""
        if self._manager is not None:
            return self._manager.save()
        if self.directory is None:
            return None
        temp_dir = tempfile.mkdtemp(prefix="ga_tfx_loop_worker_")
        try:
            tf.train.CheckpointManager(self._checkpoint, temp_dir, max_to_keep=1).save()
        finally:
            shutil.rmtree(temp_dir, ignore_errors=True)
        return None

    def restore(self) -> bool:
        """Restores the latest checkpoint; ``False`` if there is none. ``ValueError`` for one
        without the window core's key (written before 0.2.0, which flattened the core into
        ``accumulator``, ``gradient_chain``, ``loop_state`` and ``noise_sums``)."""
        latest = tf.train.latest_checkpoint(self.directory) if self.directory else None
        if latest is None:
            return False
        prefix = CHECKPOINT_KEY + "/"
        if not holds_under(latest, prefix):
            raise ValueError(
                f"The checkpoint {latest} holds no window core under {prefix!r}: it was "
                "written before ga-tfx 0.2.0, whose TrainingLoop checkpoints keep the core "
                "under that one key; start the run again with a new checkpoint_dir."
            )
        self._checkpoint.restore(latest).assert_existing_objects_matched()
        return True
