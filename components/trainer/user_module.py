"""Loading the user's model code: ``build_model(hparams)`` from a module file or a dotted path."""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)

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
    where = dotted_path or exec_properties.get("module_file") or exec_properties.get(
        "module_path")
    raise ValueError(f"The model module {where!r} defines none of {MODEL_FN_NAMES} "
                     f"({'; '.join(errors)}).")
