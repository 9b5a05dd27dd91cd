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

:func:`path_noise_scale` averages a run's per-window estimates into ``B_path``, the noise scale
of the path weighted by each window's progress (the critical batch the model gives that path).
:func:`recommend_accum_steps` turns one measured noise scale into a choice among allowed
``accum_steps`` values: the ideal ``K* = noise scale / micro_batch_size``, then the allowed value
nearest to it on a log2 scale (a tie goes to the smaller value), so a ``K*`` outside the allowed
range gives the range's end. The :class:`Recommendation` keeps the figures and says why, in
words (``reason``), for reports. :class:`ga_tfx.tuning.NoiseScaleProbe` measures ``B_path`` in
one short run and calls it; ``benchmarks/critical_batch.py`` checks the recommendation against
``B_crit`` fitted to a brute-force sweep of effective batches.
"""

import dataclasses
import math
import numbers
from typing import Any, Dict, Optional, Sequence, Tuple, cast

# path_noise_scale smooths each window's estimates over this many windows on each side (a
# centred block of 3): the least smoothing that makes a window's progress weight a ratio of
# sums rather than of one window's noisy estimates (1 / |g_big|² is noisy where the noise
# scale is large against the window). Chosen after seeing the probe curves of digits and
# chicago_taxi in benchmarks/CRITICAL_BATCH.md; checked there on a data set held out from that
# choice (chicago_taxi_payment) too.
PATH_HALF_SPAN = 1


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
      measure: the name of the noise scale it was chosen from (``"B_simple"``, or
        ``"B_path"``: :func:`path_noise_scale`).
    """

    accum_steps: int
    noise_scale: float
    micro_batch_size: int
    ideal_accum_steps: float
    choices: Tuple[int, ...]
    clamped: str
    reason: str
    measure: str = "B_simple"

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
    noise_scale: Optional[float],
    micro_batch_size: int,
    choices: Sequence[int],
    measure: str = "B_simple",
) -> Recommendation:
    """The allowed ``accum_steps`` nearest (log2 scale) to ``noise_scale / micro_batch_size``.

    Args:
      noise_scale: the measured gradient noise scale ``B_simple``, in samples (a finite
        number > 0).
      micro_batch_size: samples per micro-batch (an integer >= 1).
      choices: the allowed ``accum_steps`` values (integers >= 1, e.g. a search's).
      measure: the name of the noise scale given, for the reason (default ``"B_simple"``).

    Raises ``ValueError`` naming the value and what is allowed: a noise scale that is NaN, not
    positive or infinite (no usable estimate: too few windows, or fewer than two small
    gradients per window), a bad micro-batch size or an empty or bad list of choices.
    """
    allowed = _checked_choices(noise_scale, micro_batch_size, choices, measure)
    scale = float(cast(float, noise_scale))  # checked: a finite number > 0
    ideal = scale / int(micro_batch_size)
    target = math.log2(ideal)
    # Nearest on a log2 scale; on a tie the smaller value (fewer samples per update).
    chosen = min(allowed, key=lambda k: (abs(math.log2(k) - target), k))
    figures = (
        f"{measure} / micro-batch = {noise_scale:.4g} / {micro_batch_size} = {ideal:.3g} "
        "micro-batches per update"
    )
    clamped, reason = _clamped_reason(target, chosen, allowed, figures)
    return Recommendation(
        accum_steps=chosen,
        noise_scale=scale,
        micro_batch_size=int(micro_batch_size),
        ideal_accum_steps=ideal,
        choices=allowed,
        clamped=clamped,
        reason=reason + f"; effective batch {chosen * int(micro_batch_size)}.",
        measure=measure,
    )


def _checked_choices(
    noise_scale: Any, micro_batch_size: Any, choices: Sequence[Any], measure: str
) -> Tuple[int, ...]:
    """The allowed ``accum_steps``, sorted and without repeats, once the arguments of
    :func:`recommend_accum_steps` are checked (``ValueError`` naming the bad one)."""
    if (
        isinstance(noise_scale, bool)
        or not isinstance(noise_scale, numbers.Real)
        or not math.isfinite(noise_scale)
        or noise_scale <= 0
    ):
        raise ValueError(
            f"noise_scale must be a finite number > 0 (the measured {measure}, in samples), got "
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
    return tuple(sorted({int(c) for c in choices}))


def _clamped_reason(
    target: float, chosen: int, allowed: Tuple[int, ...], figures: str
) -> Tuple[str, str]:
    """(``clamped``, reason) of a recommendation whose ideal ``accum_steps`` is ``2**target``:
    ``"below"``/``"above"`` when it lies more than half an octave past an end of ``allowed``
    (nearer a value outside the range), else ``""``; ``figures`` opens the reason."""
    if target < math.log2(allowed[0]) - 0.5:
        return "below", (
            f"{figures}, below the smallest allowed accum_steps {allowed[0]}: took "
            f"{allowed[0]} (a smaller micro-batch would follow the noise scale more closely)"
        )
    if target > math.log2(allowed[-1]) + 0.5:
        return "above", (
            f"{figures}, above the largest allowed accum_steps {allowed[-1]}: took "
            f"{allowed[-1]} (allow larger values to follow the noise scale)"
        )
    return "", (
        f"{figures}: the nearest allowed accum_steps on a log2 scale is {chosen} "
        f"(allowed: {', '.join(str(k) for k in allowed)})"
    )


def path_noise_scale(
    windows: Sequence[Tuple[float, Optional[float], Optional[float]]],
    half_span: int = PATH_HALF_SPAN,
) -> float:
    """``B_path``: the noise scale of a training path, each window weighted by its progress.

    The paper's per-step model: an update of ``B`` samples makes
    ``w = |G|² / (|G|² + tr(Σ)/B) = 1 / (1 + B_noise / B)`` of an infinite batch's progress
    (``B_simple`` standing in for ``B_noise``). The path's windows are then worth
    ``S_min = Σ w_t`` infinite-batch steps, and ``S = S_min (1 + B_crit / B)`` gives the
    path's critical batch ``Σ B_t (1 - w_t) / Σ w_t`` (``= Σ w_t B_noise,t / Σ w_t``): the
    noise scale averaged over the path, each window weighted by its progress. For a constant
    noise scale it is that noise scale. ``benchmarks/critical_batch.py`` checks it, computed
    from exact gradients, against a brute-force sweep.

    Args:
      windows: per window, in order, ``(B, S, G²)``: its samples and its own, unsmoothed,
        unbiased estimates of ``tr(Σ)`` and ``|G_true|²`` (:mod:`ga_tfx.window`'s
        ``noise_trace_window`` and ``noise_grad_sq_window``). Windows without an estimate
        (None or NaN) are left out.
      half_span: each window's weight is ``Σ G² / Σ (G² + S/B)`` over the windows
        ``t - half_span .. t + half_span`` (fewer at the ends), clipped to ``[0, 1]``.

    Returns ``B_path`` in samples; ``inf`` when no window made measurable progress (every
    weight 0: the gradient was not told apart from its noise), NaN when no window has an
    estimate.
    """
    kept = []
    for b, s, g in windows:
        if s is not None and g is not None and b and b > 0:
            if math.isfinite(s) and math.isfinite(g):
                kept.append((float(b), float(s), float(g)))
    if not kept:
        return math.nan
    signal = noise = 0.0
    for t, (b, _, _) in enumerate(kept):
        block = kept[max(0, t - half_span) : t + half_span + 1]
        grad_sq = sum(g for _, _, g in block)
        total = sum(g + s / bj for bj, s, g in block)
        w = min(max(grad_sq / total, 0.0), 1.0) if total > 0 else 0.0
        signal += w
        noise += b * (1.0 - w)
    return noise / signal if signal > 0 else math.inf
