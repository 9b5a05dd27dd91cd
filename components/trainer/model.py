"""The accumulation model: built under a dtype policy, BN replaced, warm-started, wrapped."""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx import _tf_keras_internals, keras
from ga_tfx.components.trainer import user_module
from ga_tfx.components.trainer.settings import accumulation_config

import contextlib


@contextlib.contextmanager
def mixed_precision_policy(name):
    """Keras' global dtype policy set to ``name`` inside the block, restored after."""
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(name)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)


def accumulation_model(build_model, hparams, settings, base_model_dir=None, transform_output=None):
    """``build_model(hparams)`` (compiled), BN replaced if asked, warm-started from
    ``base_model_dir`` when given (see :func:`warm_start`), wrapped (trained through the window
    core at every ``accum_steps``, 1 included), compiled again.
    ``build_model`` may take the ``transform_output`` as a second argument
    (:func:`~ga_tfx.components.trainer.user_module.call_build_model`).

    The user's model must be compiled; its optimizer, losses and metrics compile the
    accumulation model (the original model is only a graph of layers afterwards), with its
    ``steps_per_execution``, ``jit_compile`` and ``run_eagerly``: a ``steps_per_execution``
    that is not a multiple of ``accum_steps`` is refused there (ValueError naming it).
    """
    model = user_module.call_build_model(build_model, hparams, transform_output)
    if not isinstance(model, keras.Model) or model.optimizer is None:
        raise ValueError(
            f"build_model(hparams) must return a compiled tf.keras Model, got {model!r}."
        )
    # What clone_and_build uses, and how the user asked the model to run (XLA, eager, calls).
    compile_args = dict(
        _tf_keras_internals.compile_args(model), **_tf_keras_internals.execution_args(model)
    )
    if settings.replace_batchnorm:
        model = ga_tfx.replace_batchnorm_layers(model)  # the model's windows, no K of its own
    if base_model_dir:
        warm_start(model, base_model_dir)
    wrapped = ga_tfx.wrap_model(model, config=accumulation_config(settings))
    # Through the window core also at accum_steps=1: checkpoints, logs and the run record
    # count its window events.
    wrapped.use_engine_always()
    wrapped.compile(**compile_args)
    return wrapped


def warm_start(model, base_model_dir):
    """Copies the weights of the SavedModel at ``base_model_dir`` into ``model``, by layer name.

    ``base_model_dir`` is a previous Trainer's serving model (``fn_args.base_model``). Every
    layer of ``model`` that has weights must exist in the base model with weights of the same
    shapes; otherwise ``ValueError`` names the layer. Returns the names of the layers copied.
    """
    base = keras.models.load_model(base_model_dir, compile=False)
    base_layers = {layer.name: layer for layer in base.layers}
    copied = []
    for layer in model.layers:
        if not layer.weights:
            continue
        source = base_layers.get(layer.name)
        shapes = [tuple(w.shape) for w in layer.weights]
        if source is None or [tuple(w.shape) for w in source.weights] != shapes:
            raise ValueError(
                f"Cannot warm-start layer {layer.name!r} (weights {shapes}) from base model "
                f"{base_model_dir}: it has "
                + (
                    "no layer of that name."
                    if source is None
                    else f"weights {[tuple(w.shape) for w in source.weights]}."
                )
            )
        layer.set_weights(source.get_weights())
        copied.append(layer.name)
    return copied
