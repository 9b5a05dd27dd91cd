"""``TrainingLoop``'s logs of each finished window: history, TensorBoard, console."""

from ga_tfx._keras import tf
from ga_tfx.window import WindowEnd

import math
import time
from typing import Any, Dict, List, Optional

# Metrics of each finished window, in console order (TensorBoard tags are "train/<name>").
LOG_KEYS = (
    "loss",
    "grad_norm",
    "grad_norm_clipped",
    "learning_rate",
    "skipped_windows",
    "samples_per_second",
)
# With log_noise_scale, also (TensorBoard "train/<name>"; NaN until the first estimate).
NOISE_KEYS = ("noise_scale", "noise_trace", "noise_grad_sq")


class LoopLog:
    """Turns each :class:`~ga_tfx.window.WindowEnd` into the loop's logs dict, keeps it in
    ``history`` and writes every ``every_n_windows``-th to TensorBoard and the console.

    Args:
      log_dir: TensorBoard directory, or ``None``; written only where ``writes`` is true
        (the chief).
      every_n_windows: log every N finished windows.
      verbose: print the logs (where ``writes``).
      writes: whether this process writes logs (:func:`ga_tfx.distribution.is_chief`).
      noise_scale: whether the logs have the noise-scale figures.
    """

    def __init__(
        self,
        log_dir: Optional[str],
        every_n_windows: int,
        verbose: bool,
        writes: bool,
        noise_scale: bool,
    ) -> None:
        self.history: List[dict] = []
        self.every_n_windows = every_n_windows
        self._verbose = verbose and writes
        self._keys = LOG_KEYS + (NOISE_KEYS if noise_scale else ())
        self._writer = (
            tf.summary.create_file_writer(log_dir) if log_dir is not None and writes else None
        )
        self._last_time = time.perf_counter()

    def start(self) -> None:
        """A run starts: its first window's samples/s includes tracing."""
        self._last_time = time.perf_counter()

    def window_ended(self, event: WindowEnd, **extra: Any) -> Dict[str, Any]:
        """The logs dict of ``event`` (keys :data:`LOG_KEYS`, ``update``, ``window``,
        ``applied``, ``samples`` and ``extra``); kept in ``history`` and logged."""
        now = time.perf_counter()
        elapsed, self._last_time = now - self._last_time, now
        logs = {
            "update": event.update,
            "window": event.window,
            "applied": event.applied,
            "samples": event.samples,
            "loss": event.loss,
            "grad_norm": event.grad_norm,
            "grad_norm_clipped": event.grad_norm_clipped,
            "samples_per_second": event.samples / max(elapsed, 1e-9),
            **{key: getattr(event, key) for key in NOISE_KEYS if key in self._keys},
            **extra,
        }
        self.history.append(logs)
        if logs["window"] % self.every_n_windows == 0:
            self._write(logs)
        return logs

    def _write(self, logs: Dict[str, Any]) -> None:
        if self._writer is not None:
            with self._writer.as_default():
                for key in self._keys:
                    tf.summary.scalar(f"train/{key}", logs[key], step=logs["update"])
            self._writer.flush()
        if self._verbose:
            skipped = "" if logs["applied"] else "  (window skipped: non-finite gradient)"
            noise = (
                f"  noise_scale {logs['noise_scale']:.4g}"
                if "noise_scale" in logs and not math.isnan(logs["noise_scale"])
                else ""
            )
            print(
                f"update {logs['update']:>6}  loss {logs['loss']:.6g}  "
                f"grad_norm {logs['grad_norm']:.4g} -> {logs['grad_norm_clipped']:.4g}  "
                f"lr {logs['learning_rate']:.4g}  skipped_windows {logs['skipped_windows']}  "
                f"samples/s {logs['samples_per_second']:.1f}{noise}{skipped}",
                flush=True,
            )
