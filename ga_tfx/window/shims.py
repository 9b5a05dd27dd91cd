"""Optimizer shims: what the core needs to know of Keras' optimizers (loss scaling, applying
gradients already summed over replicas) and of XLA."""

from ga_tfx._keras import keras, tf
from ga_tfx._tf_keras_internals import autograph_converted
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


_LossScaleOptimizers = (keras.mixed_precision.LossScaleOptimizer,)


def is_loss_scale_optimizer(optimizer: Any) -> bool:
    """True for a Keras ``LossScaleOptimizer`` (new or legacy), which scales the loss."""
    return isinstance(optimizer, _LossScaleOptimizers) or hasattr(optimizer, "get_scaled_loss")


def skips_nonfinite_itself(optimizer: Any) -> bool:
    """True for a dynamic ``LossScaleOptimizer``: it skips a non-finite update itself (and
    lowers its loss scale), so the core applies every window and reads its decision."""
    return is_loss_scale_optimizer(optimizer) and bool(getattr(optimizer, "dynamic", False))


def apply_aggregated_gradients(
    optimizer: Any, grads_and_vars: List[Tuple[Any, tf.Variable]]
) -> Any:
    """``optimizer.apply_gradients`` for gradients that are already summed over replicas.

    Under a dynamic ``LossScaleOptimizer`` a non-finite window is skipped as one unit (no weight
    or slot changes, the loss scale decreases once) and, unlike Keras' own skipped steps, does
    not count in ``optimizer.iterations``: iterations (and learning-rate schedules) count
    applied updates only.
    """
    apply_gradients = autograph_converted(optimizer.apply_gradients)  # the user's, maybe
    if isinstance(optimizer, keras.optimizers.Optimizer):
        result = apply_gradients(grads_and_vars, skip_gradients_aggregation=True)
    else:
        result = apply_gradients(grads_and_vars, experimental_aggregate_gradients=False)
    if skips_nonfinite_itself(optimizer):
        # The same decision the LossScaleOptimizer takes: all gradients finite.
        with tf.control_dependencies(as_dependencies(result)):
            result = optimizer.iterations.assign_sub(
                1 - tf.cast(all_finite(grads_and_vars), tf.int64)
            )
    return result


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
    variables only) still create theirs as they first apply. So does Keras' ``Nadam``: its
    update keeps trace-time Python state (``_u_product_counter``, counted as its steps are
    traced), so its graph depends on how many times it was traced; plain Keras traces its
    train function twice (the slots are made in the first trace), and built here it would be
    traced once and update differently from plain Keras (max |Δw| 3.5e-3 after a few updates
    in tests/test_equivalence.py).
    """
    inner = getattr(optimizer, "inner_optimizer", optimizer)  # a LossScaleOptimizer's
    if isinstance(optimizer, keras.optimizers.Optimizer) and not isinstance(
        inner, keras.optimizers.Nadam
    ):
        optimizer.build(list(variables))


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
