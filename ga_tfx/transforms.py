"""Gradient transforms: one interface, applied once per optimizer update to the window gradient.

A *window gradient* is the gradient of the mean loss over all samples of one accumulation
window (all micro-batches, all replicas), the regularisation gradient included: exactly what
big-batch training would apply. A :class:`GradientChain` maps it through its members, in
order, before the single ``optimizer.apply_gradients`` of the update.

The interface (every member is a :class:`GradientTransform`):

* ``build(variables)``: creates the member's state for the variables it will see (called once,
  outside ``tf.function``, under the distribution strategy's scope). State lives in the member,
  a ``tf.Module``, so a ``tf.train.Checkpoint`` of the chain saves it; checkpoint keys are
  ``members/<member name>/<variable>``, stable across runs.
* ``__call__(grads_and_vars) -> (grads_and_vars, apply)``: maps ``[(g, v), ...]`` (dense
  gradients, identical on every replica: they were all-reduced before) and says whether the
  update may happen: ``apply`` is ``None`` (no opinion) or a scalar bool tensor. Runs in replica
  context, once per window, never per micro-batch.

Members (names are the default checkpoint keys):

=======================  =====================================================================
``nonfinite_guard``      :class:`NonFiniteGuard`: a window whose gradient holds NaN or inf is
                         skipped as a whole (``policy="skip"``) or has those entries zeroed
                         (``policy="zero"``); counts such windows.
``clip_global_norm``     :class:`ClipGlobalNorm`: ``g <- g * min(1, c / ||g||)`` over all
                         gradients together (``tf.clip_by_global_norm``).
``agc``                  :class:`AdaptiveClipping`: adaptive gradient clipping (NFNets), see
                         :mod:`ga_tfx.agc`.
``gradient_noise``       :class:`GradientNoise`: annealed Gaussian noise added to the window
                         gradient (Neelakantan et al. 2015).
user name                :class:`FunctionTransform`: any callable
                         ``[(g, v), ...] -> [(g, v), ...]``; give it as ``(name, fn)``.
=======================  =====================================================================
"""

from ga_tfx._keras import tf
from ga_tfx._tf_keras_internals import autograph_converted, user_code
from ga_tfx._validation import check_positive_float
from ga_tfx.agc import adaptive_clip_gradients, agc_settings, excluded, unit_axes
from ga_tfx.config import DEFAULTS, NONFINITE_POLICIES, AccumulationConfig

import re
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

GradsAndVars = List[Tuple[tf.Tensor, tf.Variable]]


class GradientTransform(tf.Module):
    """Base class of the chain's members. See the module docstring for the interface.

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


class NonFiniteGuard(GradientTransform):
    """Handles a window gradient holding NaN or inf.

    Args:
      policy: ``"skip"`` (default): the window is not applied at all: weights, every optimizer
        slot and ``iterations`` stay bitwise unchanged (the chain returns ``apply=False``).
        ``"zero"``: the non-finite entries are set to 0 and the update happens (what the
        tf-custom-multi-gpu-training template does).
      name: checkpoint key (default ``"nonfinite_guard"``).

    State (int64 scalars, checkpointed):
      nonfinite_windows: windows whose gradient had a non-finite entry, since the start.
      consecutive_nonfinite: such windows in a row up to the last one (0 after a finite one).
      last_nonfinite_entries: number of non-finite gradient entries in the last window.
    """

    def __init__(self, policy: str = "skip", name: str = "nonfinite_guard"):
        super().__init__(name=name)
        if policy not in NONFINITE_POLICIES:
            raise ValueError(
                f"nonfinite_policy must be one of {NONFINITE_POLICIES}, got {policy!r}."
            )
        self.policy = policy
        self.may_skip = policy == "skip"
        # int64 scalar variables, created by build().
        self.nonfinite_windows: Any = None
        self.consecutive_nonfinite: Any = None
        self.last_nonfinite_entries: Any = None

    def build(self, variables: Sequence[tf.Variable]) -> None:
        if self.nonfinite_windows is not None:
            return
        # ONLY_FIRST_REPLICA: assigned in replica context with the same value on every replica.
        with tf.init_scope(), tf.name_scope(self.name):

            def counter(name: str) -> Any:
                return tf.Variable(
                    0,
                    dtype=tf.int64,
                    trainable=False,
                    name=name,
                    aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
                )

            self.nonfinite_windows = counter("nonfinite_windows")
            self.consecutive_nonfinite = counter("consecutive_nonfinite")
            self.last_nonfinite_entries = counter("last_nonfinite_entries")

    def __call__(self, grads_and_vars: GradsAndVars) -> Tuple[GradsAndVars, Optional[tf.Tensor]]:
        bad = tf.add_n(
            [
                tf.reduce_sum(tf.cast(tf.logical_not(tf.math.is_finite(g)), tf.int64))
                for g, _ in grads_and_vars
            ]
        )
        finite = tf.equal(bad, 0)
        step = tf.cast(tf.logical_not(finite), tf.int64)
        updates = [
            self.last_nonfinite_entries.assign(bad),
            self.nonfinite_windows.assign_add(step),
            self.consecutive_nonfinite.assign((self.consecutive_nonfinite + 1) * step),
        ]
        with tf.control_dependencies(updates):
            if self.policy == "skip":
                return [(tf.identity(g), v) for g, v in grads_and_vars], finite
            return [
                (tf.where(tf.math.is_finite(g), g, tf.zeros_like(g)), v) for g, v in grads_and_vars
            ], None

    def diagnostics(self) -> Dict[str, Any]:
        return {
            "nonfinite_windows": self.nonfinite_windows,
            "consecutive_nonfinite": self.consecutive_nonfinite,
            "last_nonfinite_entries": self.last_nonfinite_entries,
        }


class ClipGlobalNorm(GradientTransform):
    """Scales all gradients together so that their global L2 norm is at most ``clip_norm``.

    Args:
      clip_norm: > 0, the largest global norm (``sqrt(Σ_v ||g_v||²)``) applied.
      name: checkpoint key (default ``"clip_global_norm"``); stateless.
    """

    def __init__(self, clip_norm: float, name: str = "clip_global_norm"):
        super().__init__(name=name)
        self.clip_norm = check_positive_float(clip_norm, "clip_global_norm")

    def __call__(self, grads_and_vars: GradsAndVars) -> Tuple[GradsAndVars, Optional[tf.Tensor]]:
        grads = [g for g, _ in grads_and_vars]
        clipped, _ = tf.clip_by_global_norm(grads, self.clip_norm)
        return [(g, v) for g, (_, v) in zip(clipped, grads_and_vars)], None


class AdaptiveClipping(GradientTransform):
    """Adaptive gradient clipping (NFNets, see :mod:`ga_tfx.agc` for the units) as a chain
    member: ga-tfx's one AGC class.

    Args:
      clip_factor: ``λ`` in the paper, > 0 (NFNets use 0.01 to 0.16 depending on batch size).
      eps: ``ε``, >= 0, lower bound of the parameter norm (default 1e-3, as NFNets).
      exclude: glob patterns matched against variable names (``"dense_out/*"``, ``"*logits*"``);
        matching parameters are not clipped (NFNets do not clip the final classifier).
      name: checkpoint key (default ``"agc"``); stateless.
    """

    def __init__(
        self,
        clip_factor: float,
        eps: float = DEFAULTS["agc_eps"],
        exclude: Union[str, Iterable[str]] = (),
        name: str = "agc",
    ):
        super().__init__(name=name)
        self.clip_factor, self.eps, self.exclude = agc_settings(clip_factor, eps, exclude)

    def excludes(self, variable: Any) -> bool:
        """Whether ``variable`` is left alone (its name matches a pattern of ``exclude``)."""
        return excluded(variable, self.exclude)

    def check_variables(self, variables: Iterable[Any]) -> None:
        """Raises now (not inside a traced step) for parameters AGC cannot handle."""
        for v in variables:
            if not self.excludes(v):
                unit_axes(v.name, v.shape.rank)

    def build(self, variables: Sequence[tf.Variable]) -> None:
        self.check_variables(variables)  # unsupported ranks fail here, not while tracing

    def __call__(self, grads_and_vars: GradsAndVars) -> Tuple[GradsAndVars, Optional[tf.Tensor]]:
        clipped = adaptive_clip_gradients(grads_and_vars, self.clip_factor, self.eps, self.exclude)
        return clipped, None

    def get_config(self) -> Dict[str, Any]:
        """The settings under their :class:`~ga_tfx.AccumulationConfig` names."""
        return {
            "agc_clip_factor": self.clip_factor,
            "agc_eps": self.eps,
            "agc_exclude": list(self.exclude),
        }


class GradientNoise(GradientTransform):
    """Adds annealed Gaussian noise to the window gradient (Neelakantan et al. 2015, "Adding
    Gradient Noise Improves Learning for Very Deep Networks"): ``g <- g + N(0, σ_t²)`` with
    ``σ_t² = eta / (1 + t)^gamma``, ``t`` the windows this member has seen (0-based).

    The noise is drawn once per window, from a stateless generator keyed by ``seed``, ``t`` and
    the variable's position: the same on every replica and worker (it is added after the
    all-reduce), reproducible, and resumed exactly from a checkpoint (``t`` is state).

    Args:
      eta: > 0, the noise variance at ``t = 0`` (the paper uses 0.01, 0.3 or 1.0).
      gamma: >= 0, the annealing exponent (default 0.55, the paper's).
      seed: an integer seed.
      name: checkpoint key (default ``"gradient_noise"``).

    State (int64 scalar, checkpointed): ``windows_seen``.
    """

    def __init__(
        self, eta: float, gamma: float = 0.55, seed: int = 0, name: str = "gradient_noise"
    ):
        super().__init__(name=name)
        self.eta = check_positive_float(eta, "gradient_noise")
        self.gamma = check_positive_float(gamma, "gradient_noise_gamma", allow_zero=True)
        self.seed = int(seed)
        self.windows_seen: Any = None

    def build(self, variables: Sequence[tf.Variable]) -> None:
        if self.windows_seen is None:
            with tf.init_scope(), tf.name_scope(self.name):
                self.windows_seen = tf.Variable(
                    0,
                    dtype=tf.int64,
                    trainable=False,
                    name="windows_seen",
                    aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
                )

    def stddev(self, t: Any) -> tf.Tensor:
        """``σ_t`` (float32) for window ``t``."""
        t = tf.cast(t, tf.float32)
        return tf.sqrt(self.eta / tf.pow(1.0 + t, self.gamma))

    def noise(self, t: Any, index: int, shape: Any) -> tf.Tensor:
        """The unit-variance draw for window ``t`` and the ``index``-th variable (float32)."""
        seed = tf.stack([tf.constant(self.seed + index, tf.int64), tf.cast(t, tf.int64)])
        return tf.random.stateless_normal(shape, seed=seed, dtype=tf.float32)

    def __call__(self, grads_and_vars: GradsAndVars) -> Tuple[GradsAndVars, Optional[tf.Tensor]]:
        t = self.windows_seen.read_value()
        sigma = self.stddev(t)
        out = []
        for index, (g, v) in enumerate(grads_and_vars):
            g = tf.convert_to_tensor(g)
            noise = sigma * self.noise(t, index, tf.shape(g))
            out.append((g + tf.cast(noise, g.dtype), v))
        with tf.control_dependencies([g for g, _ in out]):
            step = self.windows_seen.assign_add(1)
        with tf.control_dependencies([step]):
            return [(tf.identity(g), v) for g, v in out], None


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


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(
            f"a gradient transform name must be a Python identifier (it is a checkpoint key), "
            f"got {name!r}."
        )


def global_norm(grads_and_vars: GradsAndVars) -> tf.Tensor:
    """``sqrt(Σ ||g||²)`` over the pairs' gradients, float32 (NaN/inf propagate)."""
    return tf.linalg.global_norm([tf.cast(g, tf.float32) for g, _ in grads_and_vars])


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
