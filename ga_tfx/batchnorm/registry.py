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
    eagerly on its own (to pass as ``since`` to :func:`layers_trained_with`)."""
    return _EAGER_CALLS[0]


def layers_trained_with(variables: Sequence[Any], since: int) -> List[Any]:
    """The built :class:`AccumBatchNormalization` layers with a trainable weight (``gamma`` or
    ``beta``) among ``variables``: the layers a front-end updating ``variables`` trains, in
    the order of their first such variable. A layer without trainable weights (``center`` and
    ``scale`` both off, or ``trainable=False``) is not found.

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


def register(layer: Any) -> None:
    """Adds a built layer to those :func:`layers_trained_with` searches."""
    _BUILT.add(layer)


def next_eager_call() -> int:
    """The serial of a training call a layer runs eagerly on its own, now."""
    _EAGER_CALLS[0] += 1
    return _EAGER_CALLS[0]
