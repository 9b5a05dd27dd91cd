"""Argument checks shared by the public API: clear errors naming the bad value."""

import numbers

PARTIAL_WINDOW_POLICIES = ("apply", "drop", "carry")


def check_accum_steps(accum_steps, name="accum_steps"):
    """Returns ``accum_steps`` as an ``int`` >= 1, or raises naming the bad value.

    Accepts Python and NumPy integers (not bools, not floats such as ``4.0``: a float usually
    means a computed value went wrong, and silently truncating it would train a different
    effective batch size).
    """
    if accum_steps is None or isinstance(accum_steps, bool) or not isinstance(
        accum_steps, numbers.Integral
    ):
        raise TypeError(
            f"{name} must be an integer >= 1 (the number of micro-batches per optimizer "
            f"update), got {accum_steps!r} of type {type(accum_steps).__name__}."
        )
    if accum_steps < 1:
        raise ValueError(
            f"{name} must be an integer >= 1 (the number of micro-batches per optimizer "
            f"update), got {accum_steps!r}."
        )
    return int(accum_steps)


def check_partial_window(policy):
    """Returns the partial-window policy, or raises naming the allowed values."""
    if policy not in PARTIAL_WINDOW_POLICIES:
        raise ValueError(
            f"partial_window must be one of {PARTIAL_WINDOW_POLICIES}, got {policy!r}."
        )
    return policy


def check_positive_float(value, name, allow_none=False, allow_zero=False):
    """Returns ``value`` as a float > 0 (or >= 0 with ``allow_zero``), or raises."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r}.")
    value = float(value)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{name} must be finite, got {value!r}.")
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be {bound}, got {value!r}.")
    return value
