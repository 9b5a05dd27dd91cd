"""``fit`` after an out-of-memory error: the window again, at half the micro-batch.

When a training step runs out of memory (``tf.errors.ResourceExhaustedError``) the window core
discards the window in progress and doubles its micro-batch split
(:meth:`ga_tfx.window.WindowCore.recover_from_oom`): weights, optimizer and AccumBN statistics
are those of the window's start. ``fit`` then has to read that window's micro-batches again:
it continues with the rest of the interrupted epoch (its data from the window's first
micro-batch on) and then the remaining epochs, as two more ``fit`` calls whose histories are
joined to the first's. Every window is the same samples as before, so the weights are those
of a run at the smaller micro-batch from the window on (exact for models without ghost batch
statistics; AccumBatchNormalization's moving statistics are window statistics either way).

Replayable data: a finite ``tf.data.Dataset`` that gives the same order when iterated again
(``steps_per_epoch`` unset), or arrays (NumPy, tensors, dicts of them) with ``shuffle=False``.
Anything else (a generator, shuffled arrays, ``steps_per_epoch``) cannot be read again from
the window's start: ``fit`` then raises :class:`OutOfMemoryRecovered` (the state is the
window's start, the micro-batch halved), which the TFX Trainer catches to re-plan its data.
"""

from ga_tfx._keras import keras, tf

from typing import Any, Dict, List, Optional, Tuple


class OutOfMemoryRecovered(RuntimeError):
    """The window in progress was discarded and the micro-batch halved after an out-of-memory
    error, but ``fit`` cannot read the window's data again; continue from ``epoch`` with the
    data from micro-batch ``position`` of that epoch on (the model is ready for it)."""

    def __init__(self, message: str, epoch: int, position: int) -> None:
        super().__init__(message)
        self.epoch, self.position = epoch, position


class FitPosition(keras.callbacks.Callback):
    """For one ``fit``: the epoch and the window core's ``micro_batches_done`` at its start, so
    that the data position of a discarded window is known."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self._ga_model = model
        self.epoch, self.start = 0, 0

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        core = self._ga_model.window_core
        self.epoch = epoch
        self.start = 0 if core is None else int(core.state.micro_batches_done.numpy())


def continuation(
    model: Any, arguments: Dict[str, Any], position: FitPosition, error: BaseException
) -> List[Dict[str, Any]]:
    """After ``error`` in ``fit(**arguments)``: recovers the window core and returns the
    ``fit`` arguments that finish the training (the interrupted epoch's rest, then the other
    epochs); raises ``error`` when the engine has no window core, or
    :class:`OutOfMemoryRecovered` when the data cannot be read again."""
    core = model.window_core
    if core is None:
        raise error
    if model.partial_window == "carry":
        raise RuntimeError(
            "Out of memory in a training step with partial_window='carry': a carried window "
            "spans epochs, so fit cannot read it again; use 'apply' or 'drop' for out-of-"
            "memory recovery, or a smaller micro-batch."
        ) from error
    core.recover_from_oom(model.distribute_strategy, error)
    model.train_function = None  # made again, with the split micro-batch step
    epoch = position.epoch
    consumed = int(core.state.micro_batches_done.numpy()) - position.start
    rest = _rest_of_epoch(arguments, consumed)
    if rest is None:
        raise OutOfMemoryRecovered(
            f"Out of memory in a training step at epoch {epoch}, micro-batch {consumed}: the "
            f"window in progress was discarded and the micro-batch split into "
            f"{core.micro_batch_split} slices (same samples per update), but fit cannot read "
            "that window's data again (a generator, shuffled arrays or steps_per_epoch). Call "
            f"fit again from epoch {epoch} with the data from micro-batch {consumed} of that "
            "epoch on, or pass a tf.data.Dataset (or arrays with shuffle=False).",
            epoch,
            consumed,
        ) from error
    epochs = arguments.get("epochs", 1)
    plan = [dict(arguments, **rest, initial_epoch=epoch, epochs=epoch + 1)]
    if epoch + 1 < epochs:
        plan.append(dict(arguments, initial_epoch=epoch + 1))
    return plan


def _rest_of_epoch(arguments: Dict[str, Any], consumed: int) -> Optional[Dict[str, Any]]:
    """The data arguments of the epoch's rest after ``consumed`` micro-batches, or ``None``."""
    x = arguments.get("x")
    if arguments.get("steps_per_epoch") is not None:
        return None
    if isinstance(x, tf.data.Dataset):
        return {"x": x.skip(consumed)}
    if arguments.get("shuffle", True) or not _is_array_data(x):
        return None
    rows = consumed * (arguments.get("batch_size") or 32)  # Keras' default batch size
    cut = lambda value: tf.nest.map_structure(lambda a: a[rows:], value)  # noqa: E731
    return {
        key: cut(arguments[key])
        for key in ("x", "y", "sample_weight")
        if arguments.get(key) is not None
    }


def _is_array_data(x: Any) -> bool:
    leaves = tf.nest.flatten(x)
    return bool(leaves) and all(
        hasattr(leaf, "shape") and hasattr(leaf, "__getitem__") for leaf in leaves
    )


def join_histories(histories: List[Any]) -> Any:
    """One ``History``: the first's, extended by the epochs and logs of the others."""
    first = histories[0]
    for other in histories[1:]:
        first.epoch.extend(other.epoch)
        for key, values in other.history.items():
            first.history.setdefault(key, []).extend(values)
    return first


__all__: Tuple[str, ...] = ("FitPosition", "OutOfMemoryRecovered", "continuation", "join_histories")
