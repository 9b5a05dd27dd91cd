"""K by window as one value: a :class:`Schedule`, parsed once when a config is made.

A window's K (its number of micro-batches) is given by a schedule; the first window's K,
``first_accum_steps`` (K0), is derived from it. The forms users write are turned into a value
once, by :func:`as_schedule` (the library's :class:`~ga_tfx.AccumulationConfig`, the Trainer's
settings and the CLI's options call it when they are made), as optax normalises
``every_k_schedule`` once; nothing parses schedule text later:

===============================  =====================================================
what users write                 the value
===============================  =====================================================
``4``                            ``ConstantSchedule(4)``: K=4 throughout
``[(0, 2), (500, 4)]``,          ``PiecewiseSchedule(((0, 2), (500, 4)))``: K=2 for
``"0:2,500:4"``                  windows 0-499, then 4
``"adaptive"``,                  ``AdaptiveSchedule(2, 64, start)``: K follows the noise
``"adaptive:MIN-MAX"``           scale, powers of two in [MIN, MAX] (default 2-64),
                                 from ``start`` (``accum_steps``, or MIN)
a callable ``fn``                ``CallableSchedule(fn, fn(0))``: ``fn(window index)``,
                                 traced with an int64 tensor
===============================  =====================================================

Standard library only (no TensorFlow), like :mod:`ga_tfx.config`. The K of the current window,
which a schedule changes as training goes, is the window core's ``current_accum_steps``.
"""

from ga_tfx import _validation
from ga_tfx._schema import SettingError

import dataclasses
import operator
from typing import Any, Callable, ClassVar, Optional, Tuple

ADAPTIVE = "adaptive"
# The adaptive schedule's bounds on K when its text gives none ("adaptive" = "adaptive:2-64").
ADAPTIVE_DEFAULT_RANGE = (2, 64)
ALLOWED = (
    "an integer >= 1, a list of (from_window, K) pairs, 'FROM:K,...' text (e.g. '0:2,500:4'), "
    "'adaptive[:MIN-MAX]', or a callable of the window index"
)


@dataclasses.dataclass(frozen=True)
class Schedule:
    """K by window (0-based window index), one value; checked when made.

    Ask a schedule's kind with ``isinstance`` (e.g. ``isinstance(s, AdaptiveSchedule)``), or
    ``varies`` for "may K change"; ``kind`` is its name, for messages and records only.

    Attributes:
      kind: ``"constant"``, ``"piecewise"``, ``"adaptive"`` or ``"callable"``.
      first_accum_steps: K0, the first window's K (an int >= 1).
    """

    kind: ClassVar[str] = ""

    @property
    def first_accum_steps(self) -> int:
        raise NotImplementedError

    @property
    def varies(self) -> bool:
        """Whether K may change between windows (every kind but the constant one)."""
        return True

    @property
    def text(self) -> Optional[str]:
        """The schedule as ``accum_schedule`` text; ``None`` for a constant K (``accum_steps``
        alone says it) and a callable (which has no text form)."""
        return None

    @property
    def most_accum_steps(self) -> int:
        """The largest K a window may take (the largest effective batch is this many
        micro-batches); ``TypeError`` for a callable, whose K is known only when traced."""
        raise TypeError(f"the K of a {self.kind} schedule is known only when traced")

    def micro_batches(self, start: int, stop: int) -> int:
        """Micro-batches in windows ``start .. stop - 1``: their K summed, or, where K is chosen
        as training goes, the most they can be."""
        raise TypeError(f"the micro-batches of a {self.kind} schedule are known only when traced")


@dataclasses.dataclass(frozen=True)
class ConstantSchedule(Schedule):
    """K = ``accum_steps`` for every window."""

    accum_steps: int
    kind: ClassVar[str] = "constant"

    def __post_init__(self) -> None:
        object.__setattr__(self, "accum_steps", _validation.check_accum_steps(self.accum_steps))

    @property
    def first_accum_steps(self) -> int:
        return self.accum_steps

    @property
    def varies(self) -> bool:
        return False

    @property
    def most_accum_steps(self) -> int:
        return self.accum_steps

    def micro_batches(self, start: int, stop: int) -> int:
        return (stop - start) * self.accum_steps


@dataclasses.dataclass(frozen=True)
class PiecewiseSchedule(Schedule):
    """K = ``k`` from window ``from_window`` on, for each ``(from_window, k)`` of ``pieces``: the
    first piece starts at window 0, their windows increase strictly and every K is >= 1."""

    pieces: Tuple[Tuple[int, int], ...]
    kind: ClassVar[str] = "piecewise"

    def __post_init__(self) -> None:
        pieces = tuple((int(w), int(k)) for w, k in self.pieces)
        if not pieces or pieces[0][0] != 0:
            raise SettingError(
                f"a schedule starts at window 0, got {pieces[0][0] if pieces else 'no pieces'}"
            )
        if any(b[0] <= a[0] for a, b in zip(pieces, pieces[1:])):
            raise SettingError(f"the windows of a schedule must increase strictly, got {pieces}")
        if any(k < 1 for _, k in pieces):
            raise SettingError(f"every K of a schedule must be >= 1, got {pieces}")
        object.__setattr__(self, "pieces", pieces)

    @property
    def first_accum_steps(self) -> int:
        return self.pieces[0][1]

    @property
    def text(self) -> Optional[str]:
        return ",".join(f"{w}:{k}" for w, k in self.pieces)

    @property
    def most_accum_steps(self) -> int:
        return max(k for _, k in self.pieces)

    def micro_batches(self, start: int, stop: int) -> int:
        total = 0
        for i, (begin, k) in enumerate(self.pieces):
            end = self.pieces[i + 1][0] if i + 1 < len(self.pieces) else stop
            total += k * max(0, min(end, stop) - max(begin, start))
        return total


@dataclasses.dataclass(frozen=True)
class AdaptiveSchedule(Schedule):
    """K follows the measured noise scale / micro-batch, a power of two in ``[k_min, k_max]``
    (``ga_tfx.window.next_k`` has the rule), from ``start`` (None: ``k_min``)."""

    k_min: int
    k_max: int
    start: Optional[int] = None
    kind: ClassVar[str] = "adaptive"

    def __post_init__(self) -> None:
        if not 1 <= self.k_min <= self.k_max:
            raise SettingError(
                f"the adaptive range needs 1 <= MIN <= MAX, got {self.k_min}-{self.k_max}"
            )
        start = self.k_min if self.start is None else self.start
        object.__setattr__(self, "start", _validation.check_accum_steps(start))

    @property
    def first_accum_steps(self) -> int:
        return int(self.start)  # type: ignore[arg-type]

    @property
    def text(self) -> Optional[str]:
        return f"{ADAPTIVE}:{self.k_min}-{self.k_max}"

    @property
    def most_accum_steps(self) -> int:
        return max(self.first_accum_steps, self.k_max)

    def micro_batches(self, start: int, stop: int) -> int:
        return (stop - start) * self.most_accum_steps


@dataclasses.dataclass(frozen=True)
class CallableSchedule(Schedule):
    """K = ``fn(window)``, traced with an int64 tensor (checked >= 1 when run); its first K is
    ``fn(0)``, called and checked once, when made."""

    fn: Callable[[Any], Any] = dataclasses.field(compare=False)
    first: int = dataclasses.field(init=False)
    kind: ClassVar[str] = "callable"

    def __post_init__(self) -> None:
        first = self.fn(0)
        try:  # an integer tensor too (its __index__); never a float
            first = operator.index(first)
        except TypeError:
            pass  # the check names the bad value
        object.__setattr__(self, "first", _validation.check_accum_steps(first, "accum_steps(0)"))

    @property
    def first_accum_steps(self) -> int:
        return self.first


def parse_schedule(text: str, start: Optional[int] = None) -> Schedule:
    """The :class:`PiecewiseSchedule` of ``"0:2,500:4,2000:8"``, or the :class:`AdaptiveSchedule`
    of ``"adaptive"`` / ``"adaptive:MIN-MAX"`` (from ``start``, None: MIN); ``SettingError``
    naming the problem otherwise."""
    text = text.strip()
    if text == ADAPTIVE or text.startswith(ADAPTIVE + ":"):
        bounds = text[len(ADAPTIVE) + 1 :] if ":" in text else "%d-%d" % ADAPTIVE_DEFAULT_RANGE
        low, _, high = bounds.partition("-")
        try:
            k_min, k_max = int(low), int(high)
        except ValueError:
            raise SettingError(
                f"the adaptive range must be MIN-MAX (e.g. 2-64), got {bounds!r}"
            ) from None
        return AdaptiveSchedule(k_min, k_max, start)
    pairs = []
    for part in text.split(","):
        window, sep, k = part.strip().partition(":")
        try:
            pairs.append((int(window), int(k)))
        except ValueError:
            raise SettingError(
                f"each part must be FROM_WINDOW:K (e.g. 0:2,500:4), or the whole 'adaptive' "
                f"or 'adaptive:MIN-MAX'; got {part.strip()!r}"
            ) from None
        if not sep:
            raise SettingError(f"each part must be FROM_WINDOW:K, got {part.strip()!r}")
    return PiecewiseSchedule(tuple(pairs))


def is_schedule_form(value: Any) -> bool:
    """Whether ``accum_steps=value`` is a schedule (not an integer K): a :class:`Schedule`, a
    list of pairs, schedule text or a callable."""
    return (
        isinstance(value, (Schedule, list, tuple))
        or callable(value)
        or (isinstance(value, str) and (":" in value or value.strip().startswith(ADAPTIVE)))
    )


def as_schedule(value: Any, start: Optional[int] = None, name: str = "accum_steps") -> Schedule:
    """The :class:`Schedule` of any form users write (see the module docstring); ``start``: the
    first K of an adaptive schedule (None: its MIN). ``SettingError`` naming the bad value
    and what is allowed."""
    if isinstance(value, Schedule):
        return value
    if isinstance(value, str) and (name != "accum_steps" or is_schedule_form(value)):
        try:
            return parse_schedule(value, start)
        except SettingError as error:
            raise SettingError(f"{name}={value!r} is not a schedule: {error}.") from None
    if callable(value):
        return CallableSchedule(value)
    if isinstance(value, (list, tuple)):
        try:
            pieces = tuple((operator.index(w), operator.index(k)) for w, k in value)
        except (TypeError, ValueError):
            raise SettingError(f"{name} must be {ALLOWED}; got {value!r}.") from None
        try:
            return PiecewiseSchedule(pieces)
        except SettingError as error:
            raise SettingError(f"{name}={value!r} is not a schedule: {error}.") from None
    if name != "accum_steps":
        raise SettingError(
            f"{name} must be 'FROM:K,...' text (e.g. '0:2,500:4'), 'adaptive[:MIN-MAX]', a list "
            f"of (from_window, K) pairs or a callable of the window index; got {value!r}."
        )
    return ConstantSchedule(value)  # checked there, naming accum_steps (e.g. '4', a str)


def schedule_of(
    accum_steps: Any, accum_schedule: Any = None, default_accum_steps: Optional[int] = None
) -> Schedule:
    """The one :class:`Schedule` of a holder of ``accum_steps`` and ``accum_schedule`` (the
    library's config, the Trainer's settings, the CLI's options), and the one rule between
    the two:

    * ``accum_schedule`` None: ``accum_steps`` in any form (see :func:`as_schedule`);
      ``accum_steps`` None: ``default_accum_steps`` (the CLI's 4; None: no default).
    * ``accum_schedule`` given: that schedule. ``accum_steps`` is its first K: given, it must
      equal a piecewise or callable schedule's first K, and an adaptive one starts there; left
      out (None), the schedule's own first K counts (an adaptive one starts at
      ``default_accum_steps``, or at its MIN).

    ``SettingError``, one line naming the values: ``accum_steps`` not the schedule's first K,
    both schedules, or a bad value."""
    given = default_accum_steps if accum_steps is None else accum_steps
    if accum_schedule is None:
        return as_schedule(given)
    if is_schedule_form(accum_steps):
        raise SettingError(
            f"give accum_schedule or a schedule as accum_steps, not both (got "
            f"accum_steps={accum_steps!r} and accum_schedule={accum_schedule!r})."
        )
    start = None if given is None else _validation.check_accum_steps(given)
    schedule = as_schedule(accum_schedule, start, name="accum_schedule")
    if accum_steps is not None and schedule.first_accum_steps != start:
        raise SettingError(
            f"accum_steps={accum_steps!r} is not the first K of accum_schedule="
            f"{accum_schedule!r} (K={schedule.first_accum_steps}): give "
            f"accum_steps={schedule.first_accum_steps} (ga-tfx: or leave --accum-steps out)."
        )
    return schedule


@dataclasses.dataclass(frozen=True)
class HoldsSchedule:
    """Base of a settings dataclass with ``accum_steps`` and ``accum_schedule`` fields (the
    library's config, the Trainer's settings, the CLI's options): its ``schedule``, the
    :class:`Schedule` made once from them by :func:`schedule_of` (its rule), not a declared
    setting. Once made, ``accum_steps`` is the int K0 (the first window's K: the run's first
    K, which everything that plans windows reads) and ``accum_schedule`` the schedule's
    ``text`` (None for a constant K or a callable).

    ``DEFAULT_ACCUM_STEPS``: the K when ``accum_steps`` is left out (None) and no schedule
    says it (None: none; ``accum_steps`` is then required).
    """

    DEFAULT_ACCUM_STEPS: ClassVar[Optional[int]] = None
    schedule: Schedule = dataclasses.field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        # Settings' __post_init__ checks the fields first (accum_steps: an int, or None).
        super().__post_init__()  # type: ignore[misc]
        self.hold_schedule()

    def hold_schedule(self) -> None:
        """Makes ``schedule`` from ``accum_steps`` and ``accum_schedule``, then sets those two
        to K0 and the schedule's text. A holder with a ``memory_budget`` (the Trainer's
        settings, the CLI's options) refuses a piecewise schedule: the memory fit picks the
        micro-batch and so changes K, which the schedule fixes window by window."""
        given = self.accum_steps, self.accum_schedule  # type: ignore[attr-defined]
        schedule = schedule_of(*given, self.DEFAULT_ACCUM_STEPS)
        budget = getattr(self, "memory_budget", None)
        if budget and isinstance(schedule, PiecewiseSchedule):
            raise SettingError(
                f"accum_schedule={schedule.text!r} (--accum-schedule) and memory_budget="
                f"{budget!r} (--memory-budget): the memory fit chooses the micro-batch and "
                "changes K, which a piecewise schedule fixes window by window; give one of them."
            )
        object.__setattr__(self, "schedule", schedule)
        object.__setattr__(self, "accum_steps", schedule.first_accum_steps)
        object.__setattr__(self, "accum_schedule", schedule.text)


__all__ = [
    "ADAPTIVE",
    "AdaptiveSchedule",
    "CallableSchedule",
    "HoldsSchedule",
    "ConstantSchedule",
    "PiecewiseSchedule",
    "Schedule",
    "as_schedule",
    "parse_schedule",
    "schedule_of",
]
