"""The built-in members of the gradient chain: :class:`NonFiniteGuard`, :class:`ClipGlobalNorm`,
:class:`AdaptiveClipping` and :class:`GradientNoise` (see :mod:`ga_tfx.transforms`)."""

from ga_tfx._tf_internals import tf
from ga_tfx._validation import check_positive_float
from ga_tfx.config import DEFAULTS, NONFINITE_POLICIES
from ga_tfx.transforms.agc import adaptive_clip_gradients, agc_settings, excluded, unit_axes
from ga_tfx.transforms.base import GradientTransform, GradsAndVars

from typing import Any, Dict, Iterable, Optional, Sequence, Tuple, Union


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
    """Adaptive gradient clipping (NFNets, see :mod:`ga_tfx.transforms.agc` for the units) as a
    chain member: ga-tfx's one AGC class.

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
