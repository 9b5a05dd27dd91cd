"""The one place ga-tfx reaches Keras 3's private names (keras 3.15.1, the version the keras3
tier proves, requirements/lock-keras3.txt), as :mod:`ga_tfx._tf_keras_internals` is for
tf-keras. Imports ``keras`` (3) only when a function is called.
"""

from typing import Any


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
