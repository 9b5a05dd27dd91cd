"""From a measured gradient noise scale to ``accum_steps`` (standard library only).

McCandlish et al. 2018 ("An Empirical Model of Large-Batch Training") model the cost of reaching
a given loss at effective batch ``B``: ``S = S_min (1 + B_noise / B)`` optimizer steps and
``E = E_min (1 + B / B_noise)`` samples. Below ``B_noise`` a bigger batch saves steps almost
for free (perfect scaling); above it, it mostly spends samples. The critical batch
``B_crit = E_min / S_min`` (equal to ``B_noise`` under the model) is the balance: twice the
fewest steps for twice the fewest samples. The gradient noise scale
``B_simple = tr(Σ) / |G|²`` that :mod:`ga_tfx.window` measures from each window's micro-batch
gradients (``log_noise_scale``) estimates ``B_noise`` (exactly so when the Hessian is a
multiple of the identity).

:func:`recommend_accum_steps` turns one measured ``B_simple`` into a choice among allowed
``accum_steps`` values: the ideal ``K* = B_simple / micro_batch_size``, then the allowed value
nearest to it on a log2 scale (a tie goes to the smaller value), so a ``K*`` outside the allowed
range gives the range's end. The :class:`Recommendation` keeps the figures and says why, in
words (``reason``), for reports. :class:`ga_tfx.tuning.NoiseScaleProbe` measures ``B_simple`` in
one short run and calls it; ``benchmarks/critical_batch.py`` checks the recommendation against
``B_crit`` fitted to a brute-force sweep of effective batches.
"""

import dataclasses
import math
import numbers
from typing import Any, Dict, Optional, Sequence, Tuple


@dataclasses.dataclass(frozen=True)
class Recommendation:
    """A choice of ``accum_steps`` from a measured noise scale, with its evidence.

    Attributes:
      accum_steps: the recommended micro-batches per update.
      noise_scale: the measured ``B_simple``, in samples.
      micro_batch_size: samples per micro-batch (global).
      ideal_accum_steps: ``noise_scale / micro_batch_size`` before rounding.
      choices: the allowed ``accum_steps`` values, ascending.
      clamped: ``"below"`` / ``"above"`` when ``ideal_accum_steps`` lies more than half an
        octave outside the allowed range (the smallest / largest value was taken, though a
        value outside the range would be nearer), else ``""``.
      reason: one sentence saying how ``accum_steps`` was chosen.
    """

    accum_steps: int
    noise_scale: float
    micro_batch_size: int
    ideal_accum_steps: float
    choices: Tuple[int, ...]
    clamped: str
    reason: str

    @property
    def effective_batch_size(self) -> int:
        return self.accum_steps * self.micro_batch_size

    def to_dict(self) -> Dict[str, Any]:
        out = dataclasses.asdict(self)
        out["choices"] = list(self.choices)
        out["effective_batch_size"] = self.effective_batch_size
        return out

    @classmethod
    def from_dict(cls, values: Dict[str, Any]) -> "Recommendation":
        fields = {f.name for f in dataclasses.fields(cls)}
        kept = {k: v for k, v in values.items() if k in fields}
        kept["choices"] = tuple(kept["choices"])
        return cls(**kept)


def recommend_accum_steps(
    noise_scale: Optional[float], micro_batch_size: int, choices: Sequence[int]
) -> Recommendation:
    """The allowed ``accum_steps`` nearest (log2 scale) to ``noise_scale / micro_batch_size``.

    Args:
      noise_scale: the measured gradient noise scale ``B_simple``, in samples (a finite
        number > 0).
      micro_batch_size: samples per micro-batch (an integer >= 1).
      choices: the allowed ``accum_steps`` values (integers >= 1, e.g. a search's).

    Raises ``ValueError`` naming the value and what is allowed: a noise scale that is NaN, not
    positive or infinite (no usable estimate: too few windows, or fewer than two small
    gradients per window), a bad micro-batch size or an empty or bad list of choices.
    """
    if (
        isinstance(noise_scale, bool)
        or not isinstance(noise_scale, numbers.Real)
        or not math.isfinite(noise_scale)
        or noise_scale <= 0
    ):
        raise ValueError(
            "noise_scale must be a finite number > 0 (the measured B_simple, in samples), got "
            f"{noise_scale!r}: no usable estimate (the estimate needs at least 2 micro-batch "
            "gradients per window and enough windows for its moving averages; a negative value "
            "means the gradient was not told apart from its noise: measure longer)."
        )
    if (
        isinstance(micro_batch_size, bool)
        or not isinstance(micro_batch_size, numbers.Integral)
        or micro_batch_size < 1
    ):
        raise ValueError(f"micro_batch_size must be an integer >= 1, got {micro_batch_size!r}.")
    bad = [
        c for c in choices if isinstance(c, bool) or not isinstance(c, numbers.Integral) or c < 1
    ]
    if not choices or bad:
        raise ValueError(
            "choices (the allowed accum_steps) must be a non-empty list of integers >= 1, got "
            f"{list(choices)!r}."
        )
    allowed = tuple(sorted({int(c) for c in choices}))
    ideal = float(noise_scale) / int(micro_batch_size)
    target = math.log2(ideal)
    # Nearest on a log2 scale; on a tie the smaller value (fewer samples per update).
    chosen = min(allowed, key=lambda k: (abs(math.log2(k) - target), k))
    figures = (
        f"B_simple / micro-batch = {noise_scale:.4g} / {micro_batch_size} = {ideal:.3g} "
        "micro-batches per update"
    )
    # Clamped: more than half an octave past an end (nearer a value outside the range).
    if target < math.log2(allowed[0]) - 0.5:
        clamped = "below"
        reason = (
            f"{figures}, below the smallest allowed accum_steps {allowed[0]}: took "
            f"{allowed[0]} (a smaller micro-batch would follow the noise scale more closely)"
        )
    elif target > math.log2(allowed[-1]) + 0.5:
        clamped = "above"
        reason = (
            f"{figures}, above the largest allowed accum_steps {allowed[-1]}: took "
            f"{allowed[-1]} (allow larger values to follow the noise scale)"
        )
    else:
        clamped = ""
        reason = (
            f"{figures}: the nearest allowed accum_steps on a log2 scale is {chosen} "
            f"(allowed: {', '.join(str(k) for k in allowed)})"
        )
    return Recommendation(
        accum_steps=chosen,
        noise_scale=float(noise_scale),
        micro_batch_size=int(micro_batch_size),
        ideal_accum_steps=ideal,
        choices=allowed,
        clamped=clamped,
        reason=reason + f"; effective batch {chosen * int(micro_batch_size)}.",
    )
