"""Accumulation state kept beside Keras' weights: in checkpoints, never in ``get_weights()``."""

from ga_tfx._tf_internals import tf

from typing import Any, Dict, Sequence

# The suffix tf.train.Checkpoint gives a variable's value under its object path.
_VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"


class Untracked:
    """A plain holder: Keras does not track what it holds as layer weights.

    Assigning a ``tf.Module`` (or a variable) to a Keras layer attribute makes its variables
    layer weights: they would appear in ``get_weights()``, in ``save_weights`` files and in
    exported models. Holding the module through this object avoids that.
    """

    def __init__(self, value: Any = None) -> None:
        self.value = value


def attach_state(owner: Any, holder: Untracked, module: Any, name: str) -> None:
    """Puts ``module`` in ``holder`` and makes it a checkpoint dependency of ``owner``.

    ``tf.train.Checkpoint`` and Keras' ``BackupAndRestore`` then save and restore it (deferred
    restoration included), while ``owner.weights`` stays unchanged.
    """
    from ga_tfx import _tf_keras_internals  # Keras 2's owners (a Keras 2 front-end's call)

    holder.value = module
    _tf_keras_internals.track_trackable(owner, module, name)


def holds_under(path: str, prefix: str) -> bool:
    """Whether the checkpoint ``path`` holds a variable whose object path starts with
    ``prefix`` (e.g. ``"ga_window_core/"``): how a layout is told from another."""
    return any(name.startswith(prefix) for name, _ in tf.train.list_variables(path))


def stored_values(path: str, keys: Sequence[str]) -> Dict[str, int]:
    """The integers the checkpoint ``path`` holds under ``keys`` (object paths, as
    ``tf.train.Checkpoint`` names them: ``model/ga_window_core/state/windows``); keys it does not
    hold are left out (checkpoints of older layouts)."""
    names = {name for name, _ in tf.train.list_variables(path)}
    return {
        key: int(tf.train.load_variable(path, key + _VALUE))
        for key in keys
        if key + _VALUE in names
    }
