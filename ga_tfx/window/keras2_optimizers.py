"""The window core's optimizer binding for Keras 2 (tf-keras): how it applies a window's
gradient, tells a loss-scale optimizer and builds slots (:mod:`ga_tfx.window.shims` chooses it
for an optimizer whose class comes from tf-keras). Imported only then: it imports tf-keras."""

from ga_tfx import _tf_keras_internals as internals
from ga_tfx._keras import keras, tf
from ga_tfx._tf_internals import autograph_converted

from typing import Any, List, Sequence, Tuple

_LossScaleOptimizers = (keras.mixed_precision.LossScaleOptimizer,)


def is_loss_scale_optimizer(optimizer: Any) -> bool:
    """True for a Keras ``LossScaleOptimizer`` (new or legacy), which scales the loss."""
    return isinstance(optimizer, _LossScaleOptimizers) or hasattr(optimizer, "get_scaled_loss")


def skips_nonfinite_itself(optimizer: Any) -> bool:
    """True for a dynamic ``LossScaleOptimizer``: it skips a non-finite update itself."""
    return is_loss_scale_optimizer(optimizer) and bool(getattr(optimizer, "dynamic", False))


def apply_aggregated_gradients(
    optimizer: Any, grads_and_vars: List[Tuple[Any, tf.Variable]], finite: Any
) -> Any:
    """``apply_gradients`` without Keras' own all-reduce (``skip_gradients_aggregation``); a
    window the dynamic ``LossScaleOptimizer`` skips (``finite`` false) is taken back out of
    ``iterations`` (tf-keras counts its skipped steps)."""
    apply_gradients = autograph_converted(optimizer.apply_gradients)  # the user's, maybe
    if isinstance(optimizer, keras.optimizers.Optimizer):
        result = apply_gradients(grads_and_vars, skip_gradients_aggregation=True)
    else:
        result = apply_gradients(grads_and_vars, experimental_aggregate_gradients=False)
    if skips_nonfinite_itself(optimizer):
        with tf.control_dependencies([] if result is None else [result]):
            result = optimizer.iterations.assign_sub(1 - tf.cast(finite(), tf.int64))
    return result


def build_optimizer(optimizer: Any, variables: Sequence[tf.Variable]) -> None:
    """See :func:`ga_tfx.window.shims.build_optimizer` (Nadam is left to build itself)."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)  # a LossScaleOptimizer's
    if isinstance(optimizer, keras.optimizers.Optimizer) and not isinstance(
        inner, keras.optimizers.Nadam
    ):
        optimizer.build(list(variables))


def learning_rate_schedule(optimizer: Any) -> Any:
    """The optimizer's ``LearningRateSchedule``, or ``None`` for a constant rate."""
    return internals.learning_rate_schedule(optimizer)


def legacy_decay(optimizer: Any) -> float:
    """A legacy optimizer's ``decay`` argument (``keras.optimizers.legacy``), else 0.0."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    if not isinstance(inner, keras.optimizers.legacy.Optimizer):
        return 0.0
    with tf.init_scope():  # its config reads variables: eagerly, once per trace
        return float(inner.get_config().get("decay", 0.0))
