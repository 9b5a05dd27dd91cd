"""The event "a window ended": the figures of one finished window (:data:`RECORD_FIELDS`), as
the core records them and :meth:`~ga_tfx.window.WindowCore.poll` returns them
(:class:`WindowEnd`), and the error raised after too many skipped windows."""

import dataclasses
import math
from typing import Any, Dict, Sequence

# The figures of one finished window, in record order (float64 in the record).
RECORD_FIELDS = (
    "window",  # windows finished so far, this one included (1-based index)
    "update",  # updates applied so far, this one included when applied
    "applied",  # 1: applied as an update; 0: skipped
    "samples",  # samples in the window, all replicas
    "micro_batches",  # micro-batches in the window (per replica)
    "loss",  # the window's mean loss (NaN where the front-end has no loss: the wrapper)
    "grad_norm",  # global L2 norm of the window gradient, before the chain
    "grad_norm_clipped",  # ... after the chain (what the optimizer was given)
    "noise_scale",  # B_simple = EMA(S) / EMA(G²) (NaN: log_noise_scale off or no estimate yet)
    "noise_trace",  # EMA(S): the smoothed estimate of tr(Σ), the per-sample gradient covariance
    "noise_grad_sq",  # EMA(G²): the smoothed estimate of |G_true|²
    "noise_small_batch",  # B_small = B / m: the samples of one replica micro-batch
    "noise_trace_window",  # S of this window alone (unsmoothed; NaN: no estimate)
    "noise_grad_sq_window",  # G² of this window alone (unsmoothed; NaN: no estimate)
    "next_accum_steps",  # K of the next window (the schedule's choice at this window end)
    "learning_rate",  # the learning rate of this window's update (lr_scaling: before the next K's)
)
# Windows whose records one poll can return: enough for the most windows one call of the
# engine's train function runs (ga_tfx.engine.pacing caps it here).
RECORD_CAPACITY = 256


class NonFiniteGradientError(RuntimeError):
    """Raised when ``max_consecutive_skips`` windows in a row had a non-finite gradient."""


@dataclasses.dataclass(frozen=True)
class WindowEnd:
    """The event "a window ended", one per finished window (:meth:`WindowCore.poll`).

    Attributes: those of :data:`RECORD_FIELDS`; ``window``, ``update`` and ``micro_batches``
    are ints, ``applied`` a bool, the others floats (NaN where not measured).
    """

    window: int
    update: int
    applied: bool
    samples: float
    micro_batches: int
    loss: float
    grad_norm: float
    grad_norm_clipped: float
    noise_scale: float
    noise_trace: float
    noise_grad_sq: float
    noise_small_batch: float
    noise_trace_window: float
    noise_grad_sq_window: float
    next_accum_steps: int
    learning_rate: float

    @classmethod
    def from_row(cls, row: Sequence[float]) -> "WindowEnd":
        values: Dict[str, Any] = dict(zip(RECORD_FIELDS, (float(v) for v in row)))
        for name in ("window", "update", "micro_batches", "next_accum_steps"):
            values[name] = int(values[name])
        values["applied"] = bool(values["applied"])
        return cls(**values)

    def figures(self) -> Dict[str, float]:
        """The measured figures as ``{name: float}`` (NaN ones left out)."""
        return {
            name: float(value)
            for name, value in dataclasses.asdict(self).items()
            if not (isinstance(value, float) and math.isnan(value))
        }
