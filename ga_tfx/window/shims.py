"""Optimizer shims: what the core needs to know of Keras' optimizers (loss scaling, applying
gradients already summed over replicas, building slots, the learning-rate schedule) and of XLA.

The optimizer calls are the core's one Keras-specific interface: each function here hands the
optimizer to its Keras' binding (:func:`keras_binding`: Keras 2, tf-keras, or Keras 3 on
TensorFlow), so the core itself imports TensorFlow only (:mod:`ga_tfx._tf_internals`).
"""

from ga_tfx._tf_internals import tf
from ga_tfx.config import AccumulationConfig

from typing import Any, Callable, List, Sequence, Tuple


def xla_step(function: Callable) -> Callable:
    """``function`` (a replica-context step) as one XLA computation, as Keras compiles its
    ``train_step`` under ``jit_compile``: an op XLA cannot compile raises when it is traced.

    A ``tf.function`` returns tensors, not ops: a step that returns an op (``tf.group`` of its
    updates) returns ``None`` instead, and its updates run as the function's stateful ops.
    """

    def step(*args: Any) -> Any:
        outputs = function(*args)
        return None if isinstance(outputs, tf.Operation) else outputs

    return tf.function(step, jit_compile=True, reduce_retracing=True)


def keras_binding(optimizer: Any) -> Any:
    """The optimizer binding of ``optimizer``'s Keras: :mod:`ga_tfx.window.keras3_optimizers`
    for a class (or a base) from Keras 3's ``keras`` package, else
    :mod:`ga_tfx.window.keras2_optimizers` (tf-keras). The one place the core tells the two
    apart; each binding is imported only when an optimizer of its Keras is seen, so a Keras 3
    process never imports tf-keras. Both have the same functions: ``is_loss_scale_optimizer``,
    ``skips_nonfinite_itself``, ``apply_aggregated_gradients``, ``build_optimizer``,
    ``learning_rate_schedule``, ``legacy_decay``."""
    if any(cls.__module__.split(".")[0] == "keras" for cls in type(optimizer).__mro__):
        from ga_tfx.window import keras3_optimizers

        return keras3_optimizers
    from ga_tfx.window import keras2_optimizers

    return keras2_optimizers


def is_loss_scale_optimizer(optimizer: Any) -> bool:
    """True for a Keras ``LossScaleOptimizer`` (new or legacy), which scales the loss."""
    return bool(keras_binding(optimizer).is_loss_scale_optimizer(optimizer))


def skips_nonfinite_itself(optimizer: Any) -> bool:
    """True for a dynamic ``LossScaleOptimizer``: it skips a non-finite update itself (and
    lowers its loss scale), so the core applies every window and reads its decision."""
    return bool(keras_binding(optimizer).skips_nonfinite_itself(optimizer))


def apply_aggregated_gradients(
    optimizer: Any, grads_and_vars: List[Tuple[Any, tf.Variable]]
) -> Any:
    """``optimizer.apply_gradients`` for gradients that are already summed over replicas.

    Under a dynamic ``LossScaleOptimizer`` a non-finite window is skipped as one unit (no weight
    or slot changes, the loss scale decreases once) and, unlike Keras 2's own skipped steps,
    does not count in ``optimizer.iterations``: iterations (and learning-rate schedules) count
    applied updates only.
    """
    return keras_binding(optimizer).apply_aggregated_gradients(
        optimizer, grads_and_vars, lambda: all_finite(grads_and_vars)
    )


def learning_rate_schedule(optimizer: Any) -> Any:
    """The optimizer's ``LearningRateSchedule`` (``None`` for a constant learning rate); a
    ``LossScaleOptimizer`` answers for its inner optimizer."""
    return keras_binding(optimizer).learning_rate_schedule(optimizer)


def legacy_decay(optimizer: Any) -> float:
    """A legacy tf-keras optimizer's ``decay`` (its rate divided by ``1 + decay · step``); 0.0
    for every other optimizer (Keras 3 has no legacy optimizers)."""
    return float(keras_binding(optimizer).legacy_decay(optimizer))


def build_optimizer(optimizer: Any, variables: Sequence[tf.Variable]) -> None:
    """Creates ``optimizer``'s variables for ``variables`` now (its slots and ``iterations``),
    as its first ``apply_gradients`` would: host side, under the strategy's scope. Call it
    before the first window end is traced.

    Keras' optimizers build for every variable they are given, connected to the loss or not
    (``apply_gradients`` builds before it drops the ``None`` gradients), so the slots are
    those plain Keras would make for the model's trainable variables. Created inside the
    window end's first trace instead, they make ``tf.function`` trace that function a second
    time (a trace that creates variables is followed by one that may not): 0.5 s of the main
    job's 6 s Trainer. Legacy optimizers (``optimizer_v2``, which build for the connected
    variables only) still create theirs as they first apply. So does Keras 2's ``Nadam``: its
    update keeps trace-time Python state (``_u_product_counter``, counted as its steps are
    traced), so its graph depends on how many times it was traced; plain Keras traces its
    train function twice (the slots are made in the first trace), and built here it would be
    traced once and update differently from plain Keras (max |Δw| 3.5e-3 after a few updates
    in tests/test_equivalence.py).
    """
    keras_binding(optimizer).build_optimizer(optimizer, variables)


def all_finite(grads_and_vars: Sequence[Tuple[Any, Any]]) -> tf.Tensor:
    """A scalar bool: every gradient entry is finite."""
    return tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g, _ in grads_and_vars])


def as_dependencies(result: Any) -> list:
    # apply_gradients returns the iterations variable, an op, or None (LossScaleOptimizer).
    return [] if result is None else [result]


def check_nonfinite_policy(config: AccumulationConfig, optimizer: Any) -> None:
    """Refuses ``nonfinite_policy='zero'`` with an optimizer that skips non-finite updates
    itself (it would never see one)."""
    if skips_nonfinite_itself(optimizer) and config.nonfinite_policy == "zero":
        raise ValueError(
            "nonfinite_policy='zero' cannot be used with a dynamic LossScaleOptimizer: it "
            "must see a non-finite gradient to lower its loss scale. Use "
            "nonfinite_policy='skip' (the default) or None."
        )
