"""Which :class:`~ga_tfx.AccumBatchNormalization` layers a front-end trains, when it is given
variables, not a model (the optimizer wrapper): every built layer of the process (weakly held)
and the serial of each one's last eager training call on its own clock."""

from ga_tfx._keras import tf

import weakref
from typing import Any, List, Sequence

# Every built AccumBatchNormalization layer of the process (weakly held): how a front-end that
# is given variables, not a model (the optimizer wrapper), finds the layers it trains.
_BUILT: "weakref.WeakSet[Any]" = weakref.WeakSet()
# Training calls run eagerly by layers on their own, numbered (the last number given).
_EAGER_CALLS = [0]


def eager_calls_so_far() -> int:
    """The serial of the last training call an :class:`AccumBatchNormalization` layer ran
    (eagerly) or traced on its own (to pass as ``since`` to :func:`layers_trained_with`)."""
    return _EAGER_CALLS[0]


def layers_trained_with(variables: Sequence[Any], since: int) -> List[Any]:
    """The built :class:`AccumBatchNormalization` layers with a trainable weight among
    ``variables`` (``gamma``, ``beta`` or both: one is enough, ``scale=False`` or
    ``center=False``): the layers a front-end updating ``variables`` trains, in the order of
    their first such variable.

    A layer without trainable weights (``center`` and ``scale`` both off) cannot be found by
    its variables: one that ran or traced a training call on its own since ``since`` (the
    front-end's creation) would update its moving statistics on Keras' per-call clock, so
    ``RuntimeError`` naming ``window_layers`` (a layer given as ``window_layers`` is driven
    and passes; ``trainable=False`` is inference mode, no training call).

    Called at the front-end's first update, after the layer's first training call: that call
    ran on the layer's own clock. Run eagerly (serial after ``since``, see
    :func:`eager_calls_so_far`), it already updated the moving statistics (Keras' per-call
    update) or, for a layer counting its own windows (``ga_tfx.compat``) under several
    replicas, added all replicas' statistics to each replica's window: then
    ``RuntimeError`` naming ``window_layers``. (Traced, as in a ``tf.function`` step, the
    step is traced again once the layer is found; a graph traced before refuses to run.)
    """
    position = {variable.ref(): i for i, variable in enumerate(variables)}
    found = []
    for layer in list(_BUILT):
        places = [position[w.ref()] for w in layer.trainable_weights if w.ref() in position]
        if places:
            found.append((min(places), layer))
    layers = [layer for _, layer in sorted(found, key=lambda pair: pair[0])]
    _refuse_layers_without_weights(since)
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    for layer in layers:
        if layer._last_eager_call > since and (not layer._accumulates() or replicas > 1):
            raise RuntimeError(
                f"AccumBatchNormalization layer {layer.name!r} trained a micro-batch eagerly "
                "on its own before the GradientAccumulateOptimizer that trains it found it (at "
                "its first apply_gradients), so its moving statistics would not be those of "
                "the windows. Pass the model as GradientAccumulateOptimizer(..., "
                "window_layers=model): its windows then drive the layer from the first call."
            )
    return layers


def _refuse_layers_without_weights(since: int) -> None:
    """``RuntimeError`` naming ``window_layers`` for a layer without trainable weights trained
    on its own clock since ``since`` (see :func:`layers_trained_with`)."""
    for layer in list(_BUILT):
        if not layer.trainable_weights and not layer._driven and layer._last_training_call > since:
            raise RuntimeError(
                f"AccumBatchNormalization layer {layer.name!r} has no trainable weights "
                "(center=False, scale=False), so the GradientAccumulateOptimizer cannot find it "
                "among the variables it updates, and it trained since the optimizer was "
                "created: its moving statistics would advance per micro-batch, not per window. "
                "Pass the model as GradientAccumulateOptimizer(..., window_layers=model)."
            )


def register(layer: Any) -> None:
    """Adds a built layer to those :func:`layers_trained_with` searches."""
    _BUILT.add(layer)


def next_eager_call() -> int:
    """The serial of a training call a layer runs eagerly on its own, now."""
    _EAGER_CALLS[0] += 1
    return _EAGER_CALLS[0]
