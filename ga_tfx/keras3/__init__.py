"""ga_tfx.keras3: exact gradient accumulation for Keras 3 (``import keras``), outside TFX.

Import it before Keras and TensorFlow in a Keras 3 process: ``import ga_tfx.keras3``. It never
selects Keras 2. ``import ga_tfx`` (which Python runs first) selects Keras 2 only where tf-keras
is installed, by setting ``TF_USE_LEGACY_KERAS=1`` before TensorFlow is imported; this package
takes that back (restores the variable as it was) while TensorFlow is still not imported, so
``tf.keras`` stays Keras 3 for the user. Where tf-keras is not installed, ``import ga_tfx``
selects nothing and a Keras 2 name (``ga_tfx.wrap_model``) raises ``KerasVersionError``.
Imported after TensorFlow in a process that already selected Keras 2, it works the same (it uses
``keras``, the Keras 3 package, never ``tf.keras``).
"""

import ga_tfx
from ga_tfx import _keras3_internals as internals
from ga_tfx.config import NOT_GIVEN, AccumulationConfig, resolve

import sys
from typing import Any

if ga_tfx._SET_LEGACY_FLAG and "tensorflow" not in sys.modules:
    import os

    if ga_tfx._LEGACY_FLAG_BEFORE is None:
        os.environ.pop("TF_USE_LEGACY_KERAS", None)
    else:
        os.environ["TF_USE_LEGACY_KERAS"] = ga_tfx._LEGACY_FLAG_BEFORE
    ga_tfx._SET_LEGACY_FLAG = False


def wrap_model(
    model: Any, accum_steps: Any = NOT_GIVEN, *, config: Any = None, **settings: Any
) -> Any:
    """Makes ``model`` (a Keras 3 model, TensorFlow or JAX backend) train by exact accumulation, in
    place, and returns it: ``fit`` then applies one optimizer update per window of ``K``
    micro-batches of ``batch_size`` samples, the update of one batch of all the window's samples.

    Args:
      model: a Keras 3 ``keras.Model`` (functional, Sequential or subclassed; its own
        ``train_step`` is kept). Compiled before, it is compiled again (the same optimizer,
        loss and metrics) so that its ``compile`` is the wrapper's; compiling after wrapping
        is the same. On TensorFlow ``compile`` sets ``steps_per_execution`` to ``K``; on JAX a
        given ``steps_per_execution`` is kept (exact either way).
      accum_steps: ``K``, micro-batches per update (int >= 1); or give ``config``.
      config: a :class:`ga_tfx.AccumulationConfig` instead of keyword settings.
      **settings: the other :class:`ga_tfx.AccumulationConfig` settings.

    Returns:
      ``model``, whose class is now a subclass of its own with the accumulation mixin.

    Example::

        import ga_tfx.keras3 as ga3
        import keras
        model = ga3.wrap_model(keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)]), 4)
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        # model.fit(x, y, batch_size=8): one update per 4 micro-batches of 8 = batches of 32
    """
    import keras

    resolved = resolve("ga_tfx.keras3.wrap_model", config, dict(settings, accum_steps=accum_steps))
    if keras.backend.backend() == "jax":
        return _wrap_for_jax(model, resolved)
    from ga_tfx.keras3.tf_model import AccumulationMixin

    for name, allowed in (("partial_window", "apply"), ("accum_schedule", None)):
        if getattr(resolved, name) != allowed:
            raise ValueError(
                f"ga_tfx.keras3.wrap_model: {name}={getattr(resolved, name)!r} is not supported "
                f"on Keras 3 yet (allowed: {allowed!r})"
            )
    if isinstance(model, AccumulationMixin):
        name = getattr(model, "name", "")
        raise ValueError(f"model {name!r} is already wrapped; wrap the plain model")
    cls = type(model)
    model.__class__ = type(f"Accumulating{cls.__name__}", (AccumulationMixin, cls), {})
    object.__setattr__(model, "ga_accumulation", resolved)
    object.__setattr__(model, "_ga_trainer", None)
    return _compiled_again(model)


def _compiled_again(model: Any) -> Any:
    """A model compiled before ``wrap_model``: compiled again, with the same optimizer object,
    loss, metrics and settings, through the wrapper's ``compile`` (which the model's first
    ``compile`` did not go through)."""
    arguments = internals.compile_arguments(model)
    if getattr(model, "compiled", False) and arguments is not None:
        model.compile(**arguments)
    return model


def _wrap_for_jax(model: Any, config: AccumulationConfig) -> Any:
    """JAX: the window as a stateless optimizer step (:mod:`ga_tfx.keras3.jax_step`, the model
    side :mod:`ga_tfx.keras3.jax_model`); of the settings, ``accum_steps`` only (the others are
    the core's, on TensorFlow)."""
    from ga_tfx.keras3.jax_model import JaxAccumulationMixin

    if isinstance(model, JaxAccumulationMixin):
        name = getattr(model, "name", "")
        raise ValueError(f"model {name!r} is already wrapped; wrap the plain model")
    default = AccumulationConfig(accum_steps=config.accum_steps)
    changed = [name for name in config.to_dict() if getattr(config, name) != getattr(default, name)]
    if changed:
        raise ValueError(
            f"ga_tfx.keras3.wrap_model on the JAX backend takes accum_steps only; got {changed} "
            "(allowed: accum_steps; the other settings run on the TensorFlow backend)"
        )
    cls = type(model)
    model.__class__ = type(f"Accumulating{cls.__name__}", (JaxAccumulationMixin, cls), {})
    object.__setattr__(model, "ga_accumulation", config)
    return _compiled_again(model)


def __getattr__(name: str) -> Any:
    if name == "GradientAccumulateOptimizer":
        from ga_tfx.keras3.tf_optimizer import GradientAccumulateOptimizer

        return GradientAccumulateOptimizer
    if name == "loss_divisor":
        from ga_tfx.keras3.divisor import loss_divisor

        return loss_divisor
    if name == "DivisorError":
        from ga_tfx.keras3.divisor import DivisorError

        return DivisorError
    if name in ("AccumBatchNormalization", "replace_batchnorm_layers"):
        from ga_tfx.keras3 import batchnorm

        return getattr(batchnorm, name)
    raise AttributeError(f"module 'ga_tfx.keras3' has no attribute {name!r}")


__all__ = [
    "AccumBatchNormalization",
    "AccumulationConfig",
    "DivisorError",
    "GradientAccumulateOptimizer",
    "loss_divisor",
    "replace_batchnorm_layers",
    "wrap_model",
]
