"""The chain's member interface: :class:`GradientTransform` (see :mod:`ga_tfx.transforms`) and
:class:`FunctionTransform`, a user callable as a member."""

from ga_tfx._tf_internals import autograph_converted, tf

import re
from typing import Any, Callable, List, Optional, Sequence, Tuple

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

GradsAndVars = List[Tuple[tf.Tensor, tf.Variable]]


class GradientTransform(tf.Module):
    """Base class of the chain's members. See :mod:`ga_tfx.transforms` for the interface.

    Args:
      name: the member's name in a chain, its checkpoint key: a Python identifier.
    """

    # Whether the member may veto an update (return ``apply`` other than ``None``): the core
    # then decides the update in cross-replica context, once for all replicas.
    may_skip = False

    def __init__(self, name: str):
        _check_name(name)
        super().__init__(name=name)

    def build(self, variables: Sequence[tf.Variable]) -> None:
        """Creates state for ``variables``; stateless members do nothing."""
        del variables

    def __call__(self, grads_and_vars: GradsAndVars) -> Tuple[GradsAndVars, Optional[tf.Tensor]]:
        raise NotImplementedError

    def diagnostics(self) -> dict:
        """``{metric name: scalar tensor or variable}`` to log after each window (may be empty)."""
        return {}


class FunctionTransform(GradientTransform):
    """A user callable ``fn([(g, v), ...]) -> [(g, v), ...]`` as a (stateless) chain member.

    The callable must return one pair per input pair, same variables, same order.
    """

    def __init__(self, fn: Callable[[GradsAndVars], GradsAndVars], name: str):
        super().__init__(name=name)
        if not callable(fn):
            raise TypeError(f"transform {name!r} must be callable, got {fn!r}.")
        self.fn = fn

    def __call__(self, grads_and_vars: GradsAndVars) -> Tuple[GradsAndVars, Optional[tf.Tensor]]:
        out = list(autograph_converted(self.fn)(list(grads_and_vars)))
        if [v.ref() for _, v in out] != [v.ref() for _, v in grads_and_vars]:
            raise ValueError(
                f"gradient transform {self.name!r} must return one (gradient, variable) pair "
                f"per input pair, same variables in the same order; got {len(out)} pairs for "
                f"{len(grads_and_vars)}."
            )
        return out, None


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(
            f"a gradient transform name must be a Python identifier (it is a checkpoint key), "
            f"got {name!r}."
        )


def global_norm(grads_and_vars: GradsAndVars) -> tf.Tensor:
    """``sqrt(Σ ||g||²)`` over the pairs' gradients, float32 (NaN/inf propagate)."""
    return tf.linalg.global_norm([tf.cast(g, tf.float32) for g, _ in grads_and_vars])
