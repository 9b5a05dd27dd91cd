"""``fit``'s out-of-memory recovery: the window again, at half the micro-batch.

The replay itself is every front-end's, beside the window runner (:mod:`ga_tfx.window.replay`:
:func:`~ga_tfx.window.replay.replay`, :class:`~ga_tfx.window.replay.OutOfMemoryRecovered`,
:func:`~ga_tfx.window.replay.refuse_carried_window`). This module is how ``fit`` reads the
window's data again.

``fit`` (:func:`fit_replayed`) continues with the rest of the interrupted epoch (its data from
the window's first micro-batch on) and then the remaining epochs, as two more ``fit`` calls
whose histories are joined to the first's. Every window is the same samples as before, so the
weights are those of a run at the smaller micro-batch from the window on (exact for models
without ghost batch statistics; AccumBatchNormalization's moving statistics are window
statistics either way).

Replayable data: a finite ``tf.data.Dataset`` that gives the same order when iterated again
(``steps_per_epoch`` unset), or arrays (NumPy, tensors, dicts of them) with ``shuffle=False``.
Anything else (a generator, shuffled arrays, ``steps_per_epoch``) cannot be read again from
the window's start: ``fit`` then raises :class:`OutOfMemoryRecovered` (the state is the
window's start, the micro-batch halved), which the TFX Trainer and the Tuner's trials replay
with their own data plan.
"""

from ga_tfx._keras import keras, tf
from ga_tfx.window.replay import OutOfMemoryRecovered, refuse_carried_window, replay

from typing import Any, Callable, Dict, List, Optional, Tuple


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


def fit_replayed(
    model: Any,
    arguments: Dict[str, Any],
    fit_once: Callable[[Dict[str, Any]], Any],
    position: FitPosition,
) -> Any:
    """``fit(**arguments)`` through out-of-memory errors (:func:`replay`): ``fit_once(arguments)``
    runs one Keras ``fit`` (``position`` among its callbacks); after an error the rest of the
    training runs as more of them (:func:`continuation`), and one ``History`` joins theirs."""
    histories: List[Any] = []
    plan = [arguments]
    attempt = arguments

    def run() -> Any:
        nonlocal attempt
        while plan:
            attempt = plan.pop(0)
            histories.append(fit_once(attempt))
        return join_histories(histories)

    def rewind(error: BaseException) -> None:
        failed = getattr(model, "history", None)  # Keras sets it at the fit's start
        if failed is not None and failed.epoch and all(failed is not h for h in histories):
            histories.append(failed)  # the epochs done before the error
        # The failed attempt is already off the plan: the fits after it stay.
        plan[:] = continuation(model, attempt, position, error) + plan

    return replay(
        run, rewind, lambda error: _core_to_recover(model, error), model.distribute_strategy
    )


def _core_to_recover(model: Any, error: BaseException) -> Any:
    """The window core ``fit`` recovers after ``error``; raises ``error`` when the engine has
    none, and a ``RuntimeError`` under ``partial_window="carry"``."""
    core = model.window_core
    if core is None:
        raise error
    # fit does not tell a carried window from the others: under carry it refuses every one.
    refuse_carried_window(error, model.partial_window == "carry", "fit")
    return core


def continuation(
    model: Any, arguments: Dict[str, Any], position: FitPosition, error: BaseException
) -> List[Dict[str, Any]]:
    """After ``error`` in ``fit(**arguments)`` and the window core's recovery: the ``fit``
    arguments that finish the training (the interrupted epoch's rest, then the other epochs);
    raises :class:`OutOfMemoryRecovered` when the data cannot be read again."""
    core = model.window_core
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


__all__: Tuple[str, ...] = (
    "FitPosition",
    "continuation",
    "fit_replayed",
    "join_histories",
)
