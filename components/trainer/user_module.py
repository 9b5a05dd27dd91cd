"""Loading the user's model code: ``build_model(hparams)`` from a module file or a dotted path."""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)

import importlib
import inspect

from tfx.components.util import udf_utils
from tfx.utils import import_utils

MODEL_FN_NAMES = ("build_model", "build_keras_model")


def load_build_model(exec_properties=None, dotted_path=None):
    """The user's ``build_model(hparams)`` (or ``build_keras_model``).

    From the component's module file / packaged module path (``exec_properties``), or from a
    dotted ``"package.module.function"`` / ``"package.module"`` path (stock Trainer route).
    Raises ``ValueError`` when the module defines neither name.
    """
    errors = []
    for name in MODEL_FN_NAMES:
        try:
            if dotted_path is not None:
                module, _, attr = dotted_path.rpartition(".")
                if attr in MODEL_FN_NAMES:
                    return import_utils.import_func_from_module(module, attr)
                return import_utils.import_func_from_module(dotted_path, name)
            return udf_utils.get_fn(exec_properties, name)
        except (AttributeError, ImportError) as error:
            errors.append(f"{name}: {error}")
    where = dotted_path or exec_properties.get("module_file") or exec_properties.get("module_path")
    raise ValueError(
        f"The model module {where!r} defines none of {MODEL_FN_NAMES} ({'; '.join(errors)})."
    )


def load_optional(name, exec_properties=None, dotted_path=None):
    """``name`` from the user's module (same module as :func:`load_build_model`), or ``None``
    when the module does not define it (e.g. the optional ``make_serving_fn``)."""
    try:
        if dotted_path is not None:
            module, _, attr = dotted_path.rpartition(".")
            module_name = module if attr in MODEL_FN_NAMES else dotted_path
            return getattr(importlib.import_module(module_name), name, None)
        return udf_utils.get_fn(exec_properties, name)
    except (AttributeError, ImportError):
        return None


def call_build_model(build_model, hparams, transform_output=None):
    """``build_model(hparams)``, or ``build_model(hparams, transform_output)`` when the
    function takes a second parameter (e.g. to read feature widths or a label vocabulary
    from the ``tft.TFTransformOutput``; ``None`` without a transform graph)."""
    try:
        parameters = inspect.signature(build_model).parameters.values()
    except (TypeError, ValueError):  # a callable without a signature: the plain contract
        return build_model(hparams)
    positional = [
        p
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    if len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in positional):
        return build_model(hparams, transform_output)
    return build_model(hparams)
