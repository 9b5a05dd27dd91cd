"""The accumulation settings of the library, declared once: :class:`AccumulationConfig`.

Every front-end of the window core (:mod:`ga_tfx.window`) takes them: the accumulation models
(:func:`ga_tfx.wrap_model`, :class:`ga_tfx.GradientAccumulateModel`), the optimizer wrapper
(:class:`ga_tfx.GradientAccumulateOptimizer`) and :class:`ga_tfx.TrainingLoop`. Give either a
config (``config=AccumulationConfig(accum_steps=8, agc_clip_factor=0.01)``) or the same names
as keyword arguments (``accum_steps=8, agc_clip_factor=0.01``), never both:
:func:`resolve` builds and checks the config once, as Accelerate's
``GradientAccumulationPlugin`` is validated once. The Trainer's settings reuse these fields'
specs and defaults (``ga_tfx.components.trainer.settings``).

Standard library only (no TensorFlow), like :mod:`ga_tfx._schema`.
"""

from ga_tfx import _validation
from ga_tfx._schema import SettingError, Settings, defaults, setting, specs
from ga_tfx.schedules import AdaptiveSchedule, CallableSchedule, HoldsSchedule

import dataclasses
import warnings
from typing import Any, Dict, Mapping, Optional, Tuple

NONFINITE_POLICIES = ("skip", "zero")
LR_SCALINGS = ("none", "linear", "sqrt")


class _NotGiven:
    """The default of a front-end's positional ``accum_steps``: not given (``None`` is a value,
    and a wrong one)."""

    def __repr__(self) -> str:
        return "<not given>"


NOT_GIVEN: Any = _NotGiven()

# Arguments of other libraries (gradient-accumulator 0.5.2) that a ga-tfx name does not take,
# and what to write instead. ga_tfx.compat.gradient_accumulator takes them as they are.
COMPAT_MODULE = "ga_tfx.compat.gradient_accumulator"
_AGC_INSTEAD = (
    "agc_clip_factor=<factor> (AGC is off while it is None; gradient-accumulator's default "
    "factor is 0.01)"
)
MIGRATION_HINTS = {
    "agc": _AGC_INSTEAD,
    "use_agc": _AGC_INSTEAD,
    "clip_factor": "agc_clip_factor=<factor>",
    "eps": "agc_eps=<eps>",
    "mixed_precision": (
        "no argument: call keras.mixed_precision.set_global_policy('mixed_float16') (or "
        "'mixed_bfloat16') before building the model; compile then wraps the optimizer in a "
        "LossScaleOptimizer (under mixed_float16) and the engine scales the loss whenever the "
        "optimizer is one"
    ),
    "experimental_distributed_support": (
        "no argument: ga-tfx accumulation models always run under tf.distribute strategies"
    ),
    "reduction": "no argument: the applied gradient is always the sample-weighted window mean",
}


@dataclasses.dataclass(frozen=True)
class AccumulationConfig(HoldsSchedule, Settings):
    """How gradients are accumulated, transformed and applied, once per window.

    A *window* is K micro-batches; it ends in one optimizer *update* (the sample-weighted mean
    gradient of the window, through the gradient chain) or, when the non-finite guard vetoes
    it, in a *skipped window* (nothing changes). Checked when created: an instance is always
    valid.

    K by window is ``schedule``, one :class:`~ga_tfx.schedules.Schedule` made when the config
    is made from ``accum_steps`` in any form users write (an int, a list of
    ``(from_window, K)`` pairs, ``"0:2,500:4"``, ``"adaptive[:MIN-MAX]"``, a callable) or from
    ``accum_steps`` with ``accum_schedule`` (whose first K ``accum_steps`` must be:
    :func:`ga_tfx.schedules.schedule_of`, the rule of every holder). Afterwards
    ``accum_steps`` is the int K0, the first window's K, and ``accum_schedule`` the schedule's
    text (``None`` for a constant K or a callable).
    """

    accum_steps: int = setting(spec=_validation.ACCUM_STEPS)
    accum_schedule: Optional[str] = setting(
        None,
        kind=str,
        optional=True,
        help="K by window: 'FROM:K,...' (e.g. '0:2,500:4,2000:8': K=2 for windows 0-499, ...), "
        "or 'adaptive[:MIN-MAX]' (K follows the measured noise scale / micro-batch, powers of "
        "two in [MIN, MAX], default 2-64); None: accum_steps throughout",
    )
    lr_scaling: str = setting(
        "none",
        kind=str,
        choices=LR_SCALINGS,
        help="when the schedule changes K, the learning rate follows: none, linear (x K/K0) or "
        "sqrt (x sqrt(K/K0)), K0 the first window's K",
    )
    partial_window: str = setting("apply", spec=_validation.PARTIAL_WINDOW)
    agc_clip_factor: Optional[float] = setting(None, spec=_validation.AGC_CLIP_FACTOR)
    agc_eps: float = setting(1e-3, spec=_validation.AGC_EPS)
    agc_exclude: Tuple[str, ...] = setting(
        (),
        kind=str,
        many=True,
        empty=True,
        help="glob patterns of variable names AGC leaves alone (e.g. the classifier)",
    )
    clip_global_norm: Optional[float] = setting(
        None,
        kind=float,
        above=0,
        optional=True,
        help="clip each update's gradient to this global L2 norm (off: None)",
    )
    gradient_noise: Optional[float] = setting(
        None,
        kind=float,
        above=0,
        optional=True,
        help="eta of annealed Gaussian gradient noise, variance eta / (1 + t)^0.55 at window t "
        "(Neelakantan et al. 2015; off: None)",
    )
    nonfinite_policy: Optional[str] = setting(
        "skip",
        kind=str,
        optional=True,
        rule=lambda value: (
            None if value in NONFINITE_POLICIES else f"must be one of {NONFINITE_POLICIES} or None"
        ),
        help="a window whose gradient holds NaN/inf: 'skip' it whole, 'zero' those entries, or "
        "None: apply it as plain Keras does",
    )
    max_consecutive_skips: Optional[int] = setting(
        None,
        kind=int,
        minimum=1,
        optional=True,
        help="stop with NonFiniteGradientError after this many skipped windows in a row "
        "(None: never)",
    )
    log_grad_norm: bool = setting(False, spec=_validation.LOG_GRAD_NORM)
    oom_recovery: bool = setting(
        True,
        kind=bool,
        help="on an out-of-memory error in a training step, discard the window, halve the "
        "micro-batch, double K and train that window again (same samples per update); off "
        "under jit_compile",
    )
    log_noise_scale: bool = setting(
        False,
        kind=bool,
        help="estimate the gradient noise scale B_simple from each window's micro-batch "
        "gradients and log it as noise_scale",
    )
    noise_scale_decay: float = setting(
        0.95,
        kind=float,
        minimum=0,
        maximum=0.999999,
        help="decay of the moving averages of the noise-scale estimates (0: the last window alone)",
    )

    def __post_init__(self) -> None:
        # accum_steps takes every form of a schedule: the schedule (``schedule``, not a
        # declared setting; to_dict() has accum_steps, its K0, and accum_schedule, its text)
        # is made before the fields are checked.
        self.hold_schedule()
        Settings.__post_init__(self)
        if isinstance(self.schedule, AdaptiveSchedule) and not self.log_noise_scale:
            object.__setattr__(self, "log_noise_scale", True)  # adaptive K reads it

    def transforms_gradients(self) -> bool:
        """Whether the gradient chain does more than the non-finite guard: clipping, AGC,
        noise (a front-end may then not step aside for plain Keras at ``accum_steps=1``)."""
        return any(
            value is not None
            for value in (self.clip_global_norm, self.agc_clip_factor, self.gradient_noise)
        )

    def to_dict(self) -> Dict[str, Any]:
        """``{name: value}`` of every field (tuples as lists): constructor keyword arguments,
        JSON-able (``get_config``). A callable schedule is written as its first K: see
        :func:`config_settings`."""
        return {
            name: list(value) if isinstance(value, tuple) else value
            for name, value in ((n, getattr(self, n)) for n in FIELDS)
        }


def config_settings(config: AccumulationConfig, transforms: Tuple[Any, ...]) -> Dict[str, Any]:
    """A front-end's accumulation settings for its ``get_config``: ``config.to_dict()``.

    A config holds no functions: a callable ``accum_steps`` schedule is written as its first K
    and ``transforms`` are left out, so a model loaded from it predicts as saved but would
    train a constant K without the transforms. That is said in a ``UserWarning`` when the
    config is written (a model loaded for training is wrapped again with them)."""
    left_out = [f"transforms={list(transforms)!r}"] if transforms else []
    if isinstance(config.schedule, CallableSchedule):
        left_out.insert(0, f"the callable schedule accum_steps={config.schedule.fn!r}")
    if left_out:
        warnings.warn(
            f"This accumulation model's or optimizer's config leaves out {' and '.join(left_out)}"
            f" (functions): loaded from it, it trains accum_steps={config.accum_steps} "
            "constant without them. To train a loaded model, wrap it again with them.",
            UserWarning,
            stacklevel=3,
        )
    return config.to_dict()


FIELDS = tuple(specs(AccumulationConfig))
DEFAULTS = defaults(AccumulationConfig)


def resolve(
    where: str,
    config: Optional[AccumulationConfig],
    settings: Mapping[str, Any],
) -> AccumulationConfig:
    """The one config of a front-end, from ``config`` or keyword ``settings`` (not both).

    Args:
      where: the front-end, for messages (``"ga_tfx.wrap_model"``).
      config: an :class:`AccumulationConfig`, or ``None``.
      settings: the keyword arguments given instead (``NOT_GIVEN`` values are left out;
        ``None`` is a value, e.g. ``nonfinite_policy=None``).

    Raises:
      TypeError: both given; an argument that is not a setting (with the ga-tfx way to
        write a gradient-accumulator argument); ``config`` of the wrong type.
      SettingError: a bad value, naming it and what is allowed.
    """
    given = {name: value for name, value in settings.items() if value is not NOT_GIVEN}
    foreign = [name for name in given if name in MIGRATION_HINTS]
    if foreign:
        lines = "; ".join(f"{name}={given[name]!r} -> {MIGRATION_HINTS[name]}" for name in foreign)
        raise TypeError(
            f"{where} does not take the gradient-accumulator argument(s) {foreign}. With "
            f"ga-tfx's own names: {lines}. To keep gradient-accumulator's arguments unchanged, "
            f"import {COMPAT_MODULE} instead."
        )
    unknown = sorted(set(given) - set(FIELDS))
    if unknown:
        raise TypeError(
            f"{where} got unexpected keyword argument(s) {unknown}; the accumulation "
            f"settings are {list(FIELDS)} (ga_tfx.AccumulationConfig)."
        )
    if config is not None:
        if not isinstance(config, AccumulationConfig):
            raise TypeError(f"{where}: config must be a ga_tfx.AccumulationConfig, got {config!r}.")
        if given:
            raise TypeError(
                f"{where}: give config=AccumulationConfig(...) or the settings as keyword "
                f"arguments, not both (got config and {sorted(given)})."
            )
        return config
    if "accum_steps" not in given:
        raise SettingError(
            f"{where} needs accum_steps (the number of micro-batches per optimizer update), "
            "or config=ga_tfx.AccumulationConfig(accum_steps=...)."
        )
    return AccumulationConfig(**given)


__all__ = [
    "AccumulationConfig",
    "DEFAULTS",
    "FIELDS",
    "MIGRATION_HINTS",
    "LR_SCALINGS",
    "NONFINITE_POLICIES",
    "NOT_GIVEN",
    "SettingError",
    "resolve",
]
