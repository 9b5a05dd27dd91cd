"""The library's argument rules, each declared once as a :class:`~ga_tfx._schema.Spec`.

The Trainer's settings (``ga_tfx.components.trainer.settings``), the tuning search space and
the CLI reuse these specs, so a rule such as "accum_steps is an integer >= 1" is written here
only. Errors name the bad value and what is allowed (:class:`~ga_tfx._schema.SettingError`, a
``ValueError`` that is also a ``TypeError`` for a value of the wrong type).
"""

from ga_tfx._schema import SettingError, Spec

from typing import Any, Optional

PARTIAL_WINDOW_POLICIES = ("apply", "drop", "carry")

ACCUM_STEPS = Spec(int, "the number of micro-batches per optimizer update", minimum=1)
PARTIAL_WINDOW = Spec(
    str,
    "what happens to an epoch's last window of fewer than accum_steps micro-batches",
    choices=PARTIAL_WINDOW_POLICIES,
)
AGC_CLIP_FACTOR = Spec(
    float, "adaptive gradient clipping factor (off: None)", above=0, optional=True
)
AGC_EPS = Spec(float, "AGC's lower bound on parameter norms", minimum=0)
STEPS_PER_EXECUTION = Spec(
    int,
    "micro-batches per call of a wrapped model's train function (unset: one window, paced "
    "where no callback watches batches; the engine also takes 'auto'); a multiple of "
    "accum_steps, checked against the model's",
    minimum=1,
    optional=True,
)
LOG_GRAD_NORM = Spec(bool, "log each update's global gradient norm as the fit metric grad_norm")
# Counts of the training loop, each with its own meaning in errors (optional: None is "off").
UPDATES = Spec(int, "a number of optimizer updates", minimum=1, optional=True)
WINDOWS = Spec(int, "a number of windows", minimum=1)
EPOCHS = Spec(int, "the number of epochs to train, counted from the start", minimum=1)
MICRO_BATCHES = Spec(int, "a number of micro-batches", minimum=1, optional=True)
SAMPLES = Spec(int, "a number of samples", minimum=1)
CHECKPOINTS_KEPT = Spec(int, "the number of checkpoints kept", minimum=1)
_POSITIVE = Spec(float, "a positive number", above=0)

__all__ = [
    "ACCUM_STEPS",
    "AGC_CLIP_FACTOR",
    "AGC_EPS",
    "CHECKPOINTS_KEPT",
    "EPOCHS",
    "MICRO_BATCHES",
    "SAMPLES",
    "UPDATES",
    "WINDOWS",
    "LOG_GRAD_NORM",
    "PARTIAL_WINDOW",
    "PARTIAL_WINDOW_POLICIES",
    "STEPS_PER_EXECUTION",
    "SettingError",
    "check_accum_steps",
    "check_partial_window",
    "check_positive_float",
]


def check_accum_steps(accum_steps: Any, name: str = "accum_steps") -> int:
    """Returns ``accum_steps`` as an ``int`` >= 1, or raises naming the bad value.

    Accepts Python and NumPy integers (not bools, not floats such as ``4.0``).
    """
    return ACCUM_STEPS.check(name, accum_steps)


def check_partial_window(policy: Any) -> str:
    """Returns the partial-window policy, or raises naming the allowed values."""
    return PARTIAL_WINDOW.check("partial_window", policy)


def check_positive_float(
    value: Any, name: str, allow_none: bool = False, allow_zero: bool = False
) -> Optional[float]:
    """Returns ``value`` as a float > 0 (or >= 0 with ``allow_zero``), or raises."""
    spec = AGC_EPS if allow_zero else _POSITIVE
    if allow_none:
        spec = Spec(spec.kind, spec.help, minimum=spec.minimum, above=spec.above, optional=True)
    return spec.check(name, value)
