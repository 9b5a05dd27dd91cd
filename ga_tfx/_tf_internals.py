"""TensorFlow's internals that the window core uses, with no Keras: importable by the Keras 2
front-ends (through :mod:`ga_tfx._tf_keras_internals`, which re-exports these) and by the Keras 3
one (:mod:`ga_tfx.keras3`) alike. ``tf`` here is TensorFlow itself: the core's modules take it
from here, not from :mod:`ga_tfx._keras` (which selects Keras 2 and imports tf-keras).

A TensorFlow release that moves one of the private names below fails here, at import.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Dict

import tensorflow as tf

_ag_ctx = importlib.import_module("tensorflow.python.autograph.core.ag_ctx")
_function_attributes = importlib.import_module(
    "tensorflow.python.eager.polymorphic_function.attributes"
)
# (owner, attribute) pairs checked here, at import, for every front-end (the tf-keras shim
# checks its own beside these, not these again).
_REQUIRED = (
    (_ag_ctx, "ControlStatusCtx"),
    (_ag_ctx, "Status"),
    (tf.__internal__.autograph, "tf_convert"),
    (_function_attributes, "NO_INLINE"),
)
for _owner, _name in _REQUIRED:
    if not hasattr(_owner, _name):
        raise ImportError(f"ga_tfx needs {_owner.__name__}.{_name}, which this TensorFlow lacks")

__all__ = ["autograph_converted", "local_component", "not_inlined", "tf", "user_code"]


def local_component(variable: Any) -> Any:
    """This replica's copy of a replica-local (``ON_READ``) distributed variable; the variable
    itself when it is not distributed (``scatter_add`` needs the per-device component)."""
    get_local = getattr(variable, "_get_on_device_or_primary", None)
    return get_local() if get_local is not None else variable


def not_inlined() -> Dict[str, Any]:
    """``tf.function``'s ``experimental_attributes`` that keep a function one function in the
    graph, called where it is used, not inlined at each call site (TensorFlow's private
    ``_noinline`` attribute; :class:`ga_tfx.window.runner.WindowRunner`)."""
    return {_function_attributes.NO_INLINE: True}


def autograph_converted(function: Callable) -> Callable:
    """``function`` as a ``tf.function`` with autograph would run it (Python control flow on
    tensors converted), also where its caller is traced without conversion (the window's end,
    :mod:`ga_tfx.window.runner`): for user code called from library code. Unchanged when
    running eagerly."""
    if tf.executing_eagerly():
        return function
    enabled = _ag_ctx.ControlStatusCtx(status=_ag_ctx.Status.ENABLED)

    # Converted through a plain function of ours: tf_convert re-wraps a decorated callable
    # in place (Keras' Layer.__call__), which left a model's call unconverted. Inside it,
    # autograph converts ``function`` unless its module is on autograph's do-not-convert list
    # (tf_keras: Keras then converts each of the user's layers itself, as the status is on).
    def call(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    return tf.__internal__.autograph.tf_convert(call, enabled)


def user_code(owner: Any, function: Callable) -> Callable:
    """``function`` (``owner`` or one of its methods) converted by :func:`autograph_converted`
    when ``owner``'s class is the user's; as it is when it is ga-tfx's own."""
    if type(owner).__module__.startswith("ga_tfx."):
        return function
    return autograph_converted(function)
