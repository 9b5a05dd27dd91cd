"""The private names of keras-tuner and TFX that ga-tfx uses: each listed in one place and
checked at import (``ga_tfx/tuning/_keras_tuner_hooks.py``, ``components/_tfx_hooks.py``, by
``ga_tfx/_private_hooks.py``), as the tf-keras ones are (``tests/test_internals_shim.py``)."""

from ga_tfx import _private_hooks

import ast
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRODUCT = ("ga_tfx", "components", "pipelines")
PRIVATE = re.compile(r"^_[A-Za-z][A-Za-z0-9_]*$")  # not a dunder


def _trees():
    for folder in PRODUCT:
        for directory, _, names in os.walk(os.path.join(ROOT, folder)):
            for name in sorted(names):
                if name.endswith(".py"):
                    path = os.path.join(directory, name)
                    with open(path, encoding="utf-8") as f:
                        yield os.path.relpath(path, ROOT), ast.parse(f.read(), path)


def _own_private_names(trees):
    """The private names ga-tfx defines itself: functions, classes, assigned attributes and
    variables (``self._x = ...``, ``_X = ...``), in any product module."""
    own = set()
    for _, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                own.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif isinstance(node, ast.alias):
                own.add(node.asname or node.name.split(".")[-1])
    return own


def _own_classes(trees):
    return {
        node.name for _, tree in trees for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
    }


def _is_own(base, classes):
    """Whether the base class expression ``base`` names a class of ga-tfx's (``Name`` or
    ``ga_tfx.Name``)."""
    if isinstance(base, ast.Name):
        return base.id in classes
    root = base
    while isinstance(root, ast.Attribute):
        root = root.value
    return isinstance(base, ast.Attribute) and isinstance(root, ast.Name) and root.id == "ga_tfx"


def _foreign_private_uses(trees, own):
    """``{name: files}``: private attributes read on ``self`` that no product module defines,
    or on ``super()`` in a class with a base that is not ga-tfx's (a base class's hook, whether
    or not the class overrides it), and the ``keras_tuner.src`` modules imported."""
    classes = _own_classes(trees)
    uses = {}
    for path, tree in trees:
        if path.startswith(os.path.join("ga_tfx", "_tf_keras_internals", "")):
            continue  # tf-keras's shim: tests/test_internals_shim.py
        for cls in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]:
            foreign_base = any(not _is_own(base, classes) for base in cls.bases)
            for node in ast.walk(cls):
                if (
                    foreign_base
                    and isinstance(node, ast.Attribute)
                    and PRIVATE.match(node.attr)
                    and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Name)
                    and node.value.func.id == "super"
                ):
                    uses.setdefault(node.attr, set()).add(path)
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Attribute) and PRIVATE.match(node.attr):
                base = node.value
                if isinstance(base, ast.Name) and base.id == "self" and node.attr not in own:
                    name = node.attr
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "keras_tuner.src"
            ):
                for alias in node.names:
                    uses.setdefault(f"{node.module}.{alias.name}", set()).add(path)
            if name:
                uses.setdefault(name, set()).add(path)
    return uses


@pytest.mark.tfx  # reads components/_tfx_hooks.py's list, which imports TFX
def test_every_private_keras_tuner_and_tfx_name_used_is_checked_at_import():
    """A private hook of a base class (``super()._x``, ``self._x`` that ga-tfx does not define)
    or a ``keras_tuner.src`` module used anywhere in the product is in one of the lists checked
    at import (tf-keras's shim's, keras-tuner's, TFX's)."""
    from ga_tfx import _tf_keras_internals as tf_keras_shim
    from ga_tfx.components import _tfx_hooks
    from ga_tfx.tuning import _keras_tuner_hooks

    trees = list(_trees())
    checked = {attribute for _, _, attribute in _keras_tuner_hooks.REQUIRED + _tfx_hooks.REQUIRED}
    checked |= {module for module, _, _ in _keras_tuner_hooks.REQUIRED}
    checked |= {n for _, n in tf_keras_shim._REQUIRED + tf_keras_shim._REQUIRED_INSTANCE}
    uses = _foreign_private_uses(trees, _own_private_names(trees))
    assert {"_build_and_fit_model", "_GetPreprocessingFn", "_GetFnArgs"} <= set(uses)
    unchecked = {name: sorted(files) for name, files in uses.items() if name not in checked}
    assert unchecked == {}


def test_the_installed_keras_tuner_has_every_listed_name():
    from ga_tfx.tuning import _keras_tuner_hooks

    assert _private_hooks.missing_hooks(_keras_tuner_hooks.REQUIRED) == []


@pytest.mark.tfx
def test_the_installed_tfx_has_every_listed_name():
    from ga_tfx.components import _tfx_hooks

    assert _private_hooks.missing_hooks(_tfx_hooks.REQUIRED) == []


def test_a_missing_name_fails_naming_it_the_installed_version_and_the_tested_ones():
    required = (
        ("keras_tuner", "Tuner", "_build_and_fit_model"),  # there
        ("keras_tuner", "Tuner", "_gone_in_this_release"),
        ("keras_tuner.src.no_such_module", "", "x"),
        ("keras_tuner", "NoSuchClass", "_x"),
    )
    with pytest.raises(_private_hooks.PrivateHookError) as error:
        _private_hooks.check_hooks("keras-tuner", "9.9.9", ("1.4",), required)
    assert str(error.value) == (
        "keras-tuner 9.9.9 lacks private names ga_tfx needs: "
        "keras_tuner:Tuner._gone_in_this_release, keras_tuner.src.no_such_module:x, "
        "keras_tuner:NoSuchClass._x. ga_tfx was tested with keras-tuner 1.4.x."
    )
    _private_hooks.check_hooks("keras-tuner", "9.9.9", ("1.4",), required[:1])  # all there
