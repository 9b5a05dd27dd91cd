"""``TrainingLoop``'s argument checks: each error names the argument and what is allowed."""

from ga_tfx._keras import keras, tf

from typing import Any, List, Sequence, cast


def trainable_variables(model: Any, variables: Any) -> List[Any]:
    """The variables to train: ``variables`` (a list, or ``model -> list``), default the
    model's trainable variables; ``ValueError`` when there are none."""
    if callable(variables):
        variables = variables(model)
    elif variables is None:  # an unbuilt Sequential raises on trainable_variables
        variables = model.trainable_variables if getattr(model, "built", True) else []
    # A callable `variables` has been called above: a sequence of variables is left.
    variables = list(cast(Sequence[tf.Variable], variables))
    if not variables:
        raise ValueError(
            "The model has no trainable variables: build it first (call it on a batch or "
            "give its Input shapes) and create it under strategy.scope()."
        )
    return variables


def check_scope(strategy: Any, variables: Sequence[Any]) -> None:
    if strategy is tf.distribute.get_strategy() and not tf.distribute.has_strategy():
        return
    for v in variables:
        if not strategy.extended.variable_created_in_scope(v):
            raise ValueError(
                f"Variable {v.name!r} was not created under strategy.scope() of the "
                f"strategy given to TrainingLoop ({type(strategy).__name__}): create "
                "the model and the optimizer inside `with strategy.scope():`."
            )


def check_optimizer(optimizer: Any) -> None:
    if isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer):
        raise TypeError(
            "TrainingLoop does not take a LossScaleOptimizer: it has no loss scaling; its "
            "non-finite guard (nonfinite_policy) handles NaN/inf windows. Pass the inner "
            "optimizer."
        )
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(
            f"optimizer must be a tf-keras optimizer instance (ga_tfx.keras.optimizers.*, "
            f"not keras.optimizers.legacy.*), got {optimizer!r}."
        )


def check_callables(
    loss_fn: Any,
    dataset: Any,
    inputs_fn: Any,
    targets_fn: Any,
    sample_count_fn: Any,
    regularization: Any,
) -> None:
    if not (callable(loss_fn) or isinstance(loss_fn, (list, tuple))):
        raise TypeError(
            f"loss_fn must be callable, or a list of Keras Losses (one per output), got "
            f"{loss_fn!r}."
        )
    for name, value in (("inputs_fn", inputs_fn), ("targets_fn", targets_fn)):
        if not callable(value):
            raise TypeError(f"{name} must be callable, got {value!r}.")
    if sample_count_fn is not None and not callable(sample_count_fn):
        raise TypeError(f"sample_count_fn must be callable or None, got {sample_count_fn!r}.")
    if not (isinstance(dataset, tf.data.Dataset) or callable(dataset)):
        raise TypeError(
            f"dataset must be a tf.data.Dataset of micro-batches or a callable "
            f"epoch -> Dataset, got {dataset!r}."
        )
    if not (isinstance(regularization, bool) or callable(regularization)):
        raise TypeError(
            f"regularization must be True, False or a callable model -> scalar, got "
            f"{regularization!r}."
        )


def loss_weights(loss_fn: Any, weights: Any, sample_count_fn: Any) -> List[float]:
    """The factors of a ``loss_fn`` of one Keras ``Loss`` per output (1 each by default);
    ``[]`` for one ``loss_fn``. Raises a one-line error for anything else."""
    if not isinstance(loss_fn, (list, tuple)):
        if weights is not None:
            raise ValueError(
                f"loss_weights={weights!r} needs a loss_fn of one Keras Loss per output (a "
                f"list), got one loss_fn {loss_fn!r}"
            )
        return []
    others = [loss for loss in loss_fn if not isinstance(loss, keras.losses.Loss)]
    if not loss_fn or others:
        raise TypeError(
            f"a list loss_fn must hold one Keras Loss per output (keras.losses.*), got "
            f"{list(loss_fn)!r}"
        )
    if sample_count_fn is not None:
        raise ValueError(
            "sample_count_fn with a list loss_fn: each Keras Loss's divisor is read as Keras "
            "computes it; give one or the other"
        )
    weights = [1.0] * len(loss_fn) if weights is None else list(weights)
    if len(weights) != len(loss_fn) or not all(isinstance(w, (int, float)) for w in weights):
        raise ValueError(
            f"loss_weights={weights!r} must be {len(loss_fn)} numbers, one per loss of loss_fn"
        )
    return [float(w) for w in weights]
