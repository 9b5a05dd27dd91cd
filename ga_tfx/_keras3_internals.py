"""The one place ga-tfx reaches Keras 3's private names (keras 3.15.1, the version the keras3
tier proves, requirements/lock-keras3.txt), as :mod:`ga_tfx._tf_keras_internals` is for
tf-keras. Imports ``keras`` (3) only when a function is called.
"""

import contextlib
from typing import Any, Iterator


def keras_variable(optimizer: Any, variable: Any) -> Any:
    """The Keras variable ``optimizer`` was built with whose value is ``variable`` (a
    ``tf.Variable``): Keras 3 keys an optimizer's slots by the variable
    (``BaseOptimizer._get_variable_index``) and keeps the Keras variables it was built with in
    ``_trainable_variables``."""
    return optimizer._trainable_variables[optimizer._get_variable_index(variable)]


def learning_rate_schedule(optimizer: Any) -> Any:
    """The optimizer's ``LearningRateSchedule`` (``None`` for a constant rate): Keras 3's
    ``learning_rate`` property evaluates a schedule, ``_learning_rate`` keeps it. A
    ``LossScaleOptimizer`` answers for its inner optimizer."""
    import keras

    inner = getattr(optimizer, "inner_optimizer", optimizer)
    rate = getattr(inner, "_learning_rate", None)
    return rate if isinstance(rate, keras.optimizers.schedules.LearningRateSchedule) else None


def bn_moments(layer: Any, inputs: Any, mask: Any = None) -> Any:
    """``(mean, variance)`` of ``inputs`` over a Keras 3 ``BatchNormalization`` layer's reduction
    axes, as its ``call`` computes them (``_moments``: the biased variance)."""
    return layer._moments(inputs, mask)


def bn_reduction_axes(layer: Any) -> Any:
    """The axes a Keras 3 ``BatchNormalization`` layer reduces over (``_reduction_axes``)."""
    return layer._reduction_axes


def flatten_layers(model: Any) -> Any:
    """Every layer inside ``model`` (nested ones included), ``model`` left out
    (``Layer._flatten_layers``)."""
    return list(model._flatten_layers(include_self=False, recursive=True))


def own_variables(optimizer: Any) -> Any:
    """The variables an optimizer made itself with ``add_variable`` (``iterations``, its
    learning rate, its slots), in their order: Keras 3's ``BaseOptimizer._variables``, which its
    ``variables`` property returns and ``stateless_apply`` takes in the same order."""
    return optimizer._variables


def called_by_fit(evaluate_kwargs: Any) -> bool:
    """Whether ``Model.evaluate`` was called by ``fit`` for its validation at an epoch's end:
    Keras 3's ``fit`` (TensorFlow and JAX trainers) passes the private keyword
    ``_use_cached_eval_dataset=True`` then, and a user's call does not."""
    return bool(evaluate_kwargs.get("_use_cached_eval_dataset", False))


# The compiled loss and Keras 3's own reduction (ga_tfx.keras3.divisor reads a micro-batch's
# divisor as Keras divides by it).


def compile_loss(model: Any) -> Any:
    """The model's compiled loss (``Trainer._compile_loss``: a ``CompileLoss``, or ``None``
    before ``compile`` or without a ``loss``), which ``Trainer.compute_loss`` calls."""
    return getattr(model, "_compile_loss", None)


def flat_losses(compiled: Any) -> Any:
    """A ``CompileLoss``'s terms, one ``CompileLoss.Loss(path, loss, loss_weights, name)`` per
    output with a loss (``_flat_losses``, made by its ``build``; ``None`` before), in the order
    ``CompileLoss.call`` computes and sums them."""
    return compiled._flat_losses


def loss_weight(entry: Any) -> Any:
    """The ``loss_weights`` factor of one ``_flat_losses`` entry (``None``: none), which
    ``CompileLoss.call`` multiplies the entry's loss by (``keras/src/trainers/compile_utils.py``:
    the entries are ``CompileLoss.Loss(path, loss, loss_weights, name)``)."""
    return entry.loss_weights


def set_flat_losses(compiled: Any, entries: Any) -> None:
    """Sets a ``CompileLoss``'s ``_flat_losses`` (see :func:`flat_losses`)."""
    compiled._flat_losses = entries


def keras_mask(tensor: Any) -> Any:
    """The Keras mask a tensor carries (``backend.get_keras_mask``), or ``None``: what
    ``Loss.__call__`` reads of ``y_pred`` (``in_mask``) and of the element losses
    (``out_mask``)."""
    from keras.src import backend

    return backend.get_keras_mask(tensor)


def apply_mask(sample_weight: Any, mask: Any, dtype: Any, reduction: Any) -> Any:
    """Keras 3's ``keras/src/losses/loss.py`` ``apply_mask``: the mask merged into the sample
    weight (rescaled by total/valid for ``sum_over_batch_size`` and ``mean``, as it is for the
    other reductions)."""
    from keras.src.losses import loss

    return loss.apply_mask(sample_weight, mask, dtype=dtype, reduction=reduction)


def squeeze_or_expand_to_same_rank(x1: Any, x2: Any) -> Any:
    """Keras 3's ``keras/src/losses/loss.py`` ``squeeze_or_expand_to_same_rank`` (as
    ``reduce_weighted_values`` calls it on the element losses and the sample weight)."""
    from keras.src.losses import loss

    return loss.squeeze_or_expand_to_same_rank(x1, x2)


def resolve_loss(identifier: Any, y_true: Any, y_pred: Any) -> Any:
    """A ``keras.losses.Loss`` for ``identifier`` as ``compile`` resolves it
    (``keras/src/trainers/compile_utils.py`` ``get_loss``: a name, a function wrapped in a
    ``LossFunctionWrapper``, or the ``Loss`` itself)."""
    from keras.src.trainers import compile_utils

    return compile_utils.get_loss(identifier, y_true, y_pred)


@contextlib.contextmanager
def instance_attribute(owner: Any, name: str, value: Any) -> Iterator[None]:
    """``owner.<name>`` is ``value`` in the block, set in the instance dict (where it wins over
    the class's method: ``Loss.__call__`` reads ``self.call``, ``CompileLoss.__call__`` its
    ``build``), then what it was (the class's again when it had no instance value)."""
    own = vars(owner)
    had, previous = name in own, own.get(name)
    own[name] = value
    try:
        yield
    finally:
        if had:
            own[name] = previous
        else:
            own.pop(name, None)


def is_graph_model(model: Any) -> bool:
    """Functional or Sequential: what ``keras.models.clone_model`` rebuilds layer by layer
    (Keras' ``Functional`` class is private: ``keras/src/models/functional.py``)."""
    import keras
    from keras.src.models.functional import Functional

    return isinstance(model, (keras.Sequential, Functional))


def update_metrics_variables(
    model: Any, metrics_variables: Any, loss: Any, x: Any, y: Any, y_pred: Any, weight: Any
) -> Any:
    """Keras' JAX trainer's ``_update_metrics_variables`` (``keras/src/backend/jax/trainer.py``:
    the loss tracker and ``compute_metrics`` in a stateless scope): ``(logs, new metrics
    variables)``, as its ``train_step`` computes them."""
    return model._update_metrics_variables(metrics_variables, loss, x, y, y_pred, weight)


def overrides_train_step(model: Any) -> bool:
    """True if ``model``'s class (or a class it derives from, below Keras' backend trainer)
    defines its own ``train_step``: ga-tfx's front-end mixins do not count."""
    for cls in type(model).__mro__:
        if "train_step" in vars(cls):
            module = cls.__module__
            return not (module.startswith("keras.") or module.startswith("ga_tfx."))
    return False


def raised_as_is(error: BaseException) -> BaseException:
    """``error``, marked so that Keras' layer call does not append its arguments to it (its
    ``_keras_call_info_injected``, ``keras/src/utils/traceback_utils.py``): its own line stays
    the last the user sees."""
    error._keras_call_info_injected = True  # type: ignore[attr-defined]
    return error


def compile_arguments(model: Any) -> Any:
    """The keyword arguments ``model`` was last compiled with (Keras' ``_compile_config``,
    ``keras/src/trainers/trainer.py`` ``compile``: the optimizer object, loss, metrics and
    settings as given), or ``None`` for a model never compiled."""
    config = getattr(model, "_compile_config", None)
    return None if config is None else config.config
