"""The window core's optimizer binding for Keras 3 on TensorFlow (``import keras``):
:mod:`ga_tfx.window.shims` chooses it for an optimizer whose class comes from Keras 3's package.
Imported only then: it imports ``keras`` (3), never tf-keras.

What differs from Keras 2 (:mod:`ga_tfx.window.keras2_optimizers`), read in keras 3.15.1's
``keras/src/backend/tensorflow/optimizer.py`` (``TFOptimizer._backend_update_step``) and
``keras/src/optimizers/base_optimizer.py`` (``apply``): Keras 3's optimizer always all-reduces
the gradients it is given in replica context (``_all_reduce_sum_gradients``, a SUM; no
``skip_gradients_aggregation``), so the window gradient, already the mean over every replica's
samples, is given as ``g / R`` on each of the ``R`` replicas (their sum is ``g``; exact for
``R`` a power of two). Its optimizers key their slots by the variable, so the core's
``tf.Variable`` (a Keras variable's ``.value``) is given back as the Keras variable the
optimizer was built with (:func:`ga_tfx._keras3_internals.keras_variable`), as weight decay's
exclusions read the Keras variable's path.
"""

from ga_tfx import _keras3_internals as internals
from ga_tfx._tf_internals import autograph_converted, tf

from typing import Any, List, Sequence, Tuple


def _keras() -> Any:
    import keras

    return keras


def is_loss_scale_optimizer(optimizer: Any) -> bool:
    """True for Keras 3's ``LossScaleOptimizer``."""
    return isinstance(optimizer, _keras().optimizers.LossScaleOptimizer)


def skips_nonfinite_itself(optimizer: Any) -> bool:
    """Keras 3's ``LossScaleOptimizer`` is always dynamic: it skips a non-finite update."""
    return is_loss_scale_optimizer(optimizer)


def apply_aggregated_gradients(
    optimizer: Any, grads_and_vars: List[Tuple[Any, Any]], finite: Any
) -> Any:
    """One update with a window gradient already summed over replicas (see the module)."""
    context = tf.distribute.get_replica_context()
    replicas = context.num_replicas_in_sync if context is not None else 1
    pairs = []
    for grad, variable in grads_and_vars:
        if replicas > 1:
            grad = grad / tf.cast(replicas, grad.dtype)
        inner = getattr(optimizer, "inner_optimizer", optimizer)  # built with the variables
        pairs.append((grad, internals.keras_variable(inner, variable)))
    if is_loss_scale_optimizer(optimizer):
        # It unscales what it is given: the window gradient (unscaled) times its scale.
        scale = tf.convert_to_tensor(optimizer.dynamic_scale)
        pairs = [(g * tf.cast(scale, g.dtype), v) for g, v in pairs]
    autograph_converted(optimizer.apply_gradients)(pairs)
    # A tensor to depend on, read after the update (Keras 3 returns its iterations variable).
    return tf.convert_to_tensor(optimizer.iterations)


def build_optimizer(optimizer: Any, variables: Sequence[Any]) -> None:
    """Creates the optimizer's slots for ``variables`` (Keras variables) now, host side."""
    if not optimizer.built:
        optimizer.build(list(variables))


def learning_rate_schedule(optimizer: Any) -> Any:
    """The optimizer's ``LearningRateSchedule``, or ``None`` for a constant rate."""
    return internals.learning_rate_schedule(optimizer)


def legacy_decay(optimizer: Any) -> float:
    """0.0: Keras 3 has no legacy optimizers (see :func:`ga_tfx.window.shims.legacy_decay`)."""
    return 0.0
