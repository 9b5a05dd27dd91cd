"""The gradient chain: :class:`GradientChain` (members applied in order, once per update) and
the functions that make the documented one (:func:`make_chain`, :func:`chain_for`)."""

from ga_tfx._tf_internals import tf, user_code
from ga_tfx.config import DEFAULTS, AccumulationConfig
from ga_tfx.transforms.base import FunctionTransform, GradientTransform, GradsAndVars
from ga_tfx.transforms.members import (
    AdaptiveClipping,
    ClipGlobalNorm,
    GradientNoise,
    NonFiniteGuard,
)

from typing import Any, Callable, Iterable, Optional, Sequence, Tuple, Union

Member = Union[GradientTransform, Tuple[str, Callable[[GradsAndVars], GradsAndVars]]]


class GradientChain(tf.Module):
    """Members applied in order, once per update; the update happens only if no member vetoes.

    Args:
      members: :class:`GradientTransform` instances, or ``(name, callable)`` pairs (wrapped
        in :class:`FunctionTransform`). Names must be unique Python identifiers: they are the
        checkpoint keys.

    Attributes:
      members: ``{name: member}`` (checkpoint key ``members/<name>``).
      order: the member names in application order.
    """

    def __init__(self, members: Sequence[Member] = (), name: str = "gradient_chain"):
        super().__init__(name=name)
        built = [_as_member(m) for m in members]
        names = [m.name for m in built]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(
                f"gradient transform names must be unique (they are checkpoint keys); "
                f"{duplicates} appear more than once in {names}."
            )
        self.members = {m.name: m for m in built}
        self.order = tuple(names)
        self.may_skip = any(m.may_skip for m in built)

    def build(self, variables: Sequence[tf.Variable]) -> None:
        for name in self.order:
            self.members[name].build(variables)

    def __call__(self, grads_and_vars: GradsAndVars) -> Tuple[GradsAndVars, tf.Tensor]:
        """Returns the transformed pairs and a scalar bool: apply this update?"""
        grads_and_vars = list(grads_and_vars)
        apply = tf.constant(True)
        for name in self.order:
            member = self.members[name]
            grads_and_vars, vote = user_code(member, member)(grads_and_vars)
            if vote is not None:
                apply = tf.logical_and(apply, vote)
        return grads_and_vars, apply

    def member(self, kind: type) -> Optional[GradientTransform]:
        """The first member of type ``kind``, or ``None``."""
        return next(
            (self.members[n] for n in self.order if isinstance(self.members[n], kind)), None
        )

    def diagnostics(self) -> dict:
        out = {}
        for name in self.order:
            out.update(self.members[name].diagnostics())
        return out


def _as_member(member: Any) -> GradientTransform:
    if isinstance(member, GradientTransform):
        return member
    if isinstance(member, tuple) and len(member) == 2 and isinstance(member[0], str):
        return FunctionTransform(member[1], member[0])
    raise TypeError(
        "a gradient transform must be a ga_tfx.transforms.GradientTransform or a "
        f"(name, callable) pair, got {member!r}."
    )


def make_chain(
    nonfinite_policy: Optional[str] = "skip",
    clip_global_norm: Optional[float] = None,
    transforms: Sequence[Member] = (),
    agc: Optional[AdaptiveClipping] = None,
    gradient_noise: Optional[float] = None,
) -> GradientChain:
    """The chain in its documented order: non-finite guard (unless ``nonfinite_policy`` is
    ``None``), global-norm clipping (if ``clip_global_norm`` is not ``None``), AGC (if ``agc``
    is given), gradient noise (if ``gradient_noise``, its ``eta``, is given), then
    ``transforms`` in order."""
    members: list = [] if nonfinite_policy is None else [NonFiniteGuard(nonfinite_policy)]
    if clip_global_norm is not None:
        members.append(ClipGlobalNorm(clip_global_norm))
    if agc is not None:
        members.append(agc)
    if gradient_noise is not None:
        members.append(GradientNoise(gradient_noise))
    members.extend(transforms)
    return GradientChain(members)


def make_agc(
    clip_factor: Optional[float],
    eps: float = DEFAULTS["agc_eps"],
    exclude: Union[str, Iterable[str]] = (),
) -> Optional[AdaptiveClipping]:
    """``None`` when AGC is off (``clip_factor`` is ``None``), else :class:`AdaptiveClipping`."""
    return None if clip_factor is None else AdaptiveClipping(clip_factor, eps, exclude)


def chain_for(config: AccumulationConfig, transforms: Sequence[Member] = ()) -> GradientChain:
    """The chain of a front-end: the members ``config`` asks for, in the documented order,
    then ``transforms``. A new configurable member is one line here (and its config field)."""
    return make_chain(
        config.nonfinite_policy,
        config.clip_global_norm,
        transforms,
        agc=make_agc(config.agc_clip_factor, config.agc_eps, config.agc_exclude),
        gradient_noise=config.gradient_noise,
    )
