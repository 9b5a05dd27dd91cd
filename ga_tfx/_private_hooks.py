"""One check, at import, of the private names ga-tfx uses from a package it extends.

Where a package has no public hook, ga-tfx overrides or calls a private one (a method such as
keras-tuner's ``Tuner._build_and_fit_model``, a module under ``keras_tuner.src``). Each package
names those in one place, a tuple of ``(module, owner, attribute)`` (``owner``: a dotted path in
the module, or ``""`` for the module itself), and checks them with :func:`check_hooks` when that
place is imported: a release that renames one fails at import, with an error naming the name,
the installed version and the versions ga-tfx was tested with, instead of an
``AttributeError`` in the middle of a run. The tf-keras names have their own shim
(:mod:`ga_tfx._tf_keras_internals`); keras-tuner's are :mod:`ga_tfx.tuning._keras_tuner_hooks`,
TFX's ``ga_tfx.components._tfx_hooks`` (the library never imports TFX).

Standard library only.
"""

import importlib
from typing import Iterable, List, Tuple

Hook = Tuple[str, str, str]  # (module, owner in it or "", attribute)


class PrivateHookError(ImportError):
    """A private name ga-tfx needs is missing in the installed package."""


def missing_hooks(required: Iterable[Hook]) -> List[str]:
    """The names (``module:owner.attribute``) of ``required`` that the installation lacks: its
    module does not import, or the owner or the attribute is not there."""
    missing = []
    for module, owner, attribute in required:
        name = f"{module}:{owner + '.' if owner else ''}{attribute}"
        try:
            found = importlib.import_module(module)
            for part in owner.split(".") if owner else ():
                found = getattr(found, part)
        except (ImportError, AttributeError):
            missing.append(name)
            continue
        if not hasattr(found, attribute):
            missing.append(name)
    return missing


def check_hooks(
    package: str, version: str, tested: Iterable[str], required: Iterable[Hook]
) -> None:
    """Raises :class:`PrivateHookError` naming every name of ``required`` that ``package``
    (installed: ``version``; ga-tfx tested with ``tested``, ``major.minor`` releases) lacks."""
    missing = missing_hooks(required)
    if missing:
        raise PrivateHookError(
            f"{package} {version} lacks private names ga_tfx needs: {', '.join(missing)}. "
            f"ga_tfx was tested with {package} {', '.join(v + '.x' for v in tested)}."
        )
