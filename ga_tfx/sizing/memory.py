"""The micro-batch fitted to a memory budget, the effective batch kept.

:func:`fit_micro_batch` measures the peak device memory of one training micro-step (forward,
loss, backward: what a micro-batch of the window costs) at candidate micro-batch sizes, with
TensorFlow's allocator statistics (``tf.config.experimental.get_memory_info``: on a GPU, and on
the CPU when TensorFlow's BFC CPU allocator is on, ``TF_CPU_ALLOCATOR_USE_BFC=true`` before
TensorFlow starts), and picks the largest micro-batch that divides the effective batch and
fits the budget with the probe's margin (:func:`required_bytes`: its reading times ``1 +
margin`` (:data:`PROBE_MARGIN`), plus one more input micro-batch, must be within the budget,
since training runs peaked above the probe's readings); ``K`` is then
``effective_batch_size / micro_batch``, so the updates are the ones asked for. The choice
says why (:class:`MicroBatchChoice`).

What a micro-step costs: the peak of the tensors one micro-step of ga-tfx ``fit`` allocates
(activations, gradients, the batch, the kernels' work space: the allocator's peak minus what
was in use before it; measured by running it, at learning rate 0, the model put back after),
plus what training keeps for the whole run: the model's variables, the optimizer's slots (built
here if they are not yet) and the accumulation buffers (one float32 copy of the trainable
variables). What else the process holds is not counted. The budget is per device: under a
strategy, measure with the replica's share of the micro-batch (``replicas``).

``parse_budget`` reads ``"2GiB"``, ``"512MiB"``, a number of bytes, or a fraction
(``"0.8"``) of the device's memory where TensorFlow reports it.
"""

from ga_tfx import _tf_keras_internals as internals
from ga_tfx._keras import tf
from ga_tfx._validation import check_positive_float

import contextlib
import dataclasses
import re
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, cast

import numpy as np

# The probe's worst measured under-read of a training run's peak, as a fraction of its reading:
# a size fits when its probe reading x (1 + PROBE_MARGIN), plus one more input micro-batch, is
# within the budget (required_bytes). Measured by `python -m benchmarks.micro_batch_memory`
# (the benchmark conv net, SGD with momentum, effective batch 256, on this project's 2-core CPU
# with TensorFlow's BFC allocator; 5 training peaks and 5 probe readings at each of 32, 64, 128
# and 256): the highest training peak over the lowest probe reading of the same size was 1.10
# at d3ffec3, 1.248 and 1.231 at 14be8ab (two runs), and 1.319 at 1081f6e (64: 25.8 MiB
# against 19.6, the machine loaded by two other jobs). The error is run-to-run noise of both
# readings, not a bias (the probe also read above the training peak: 92.0 against at most
# 85.4 at 256); 0.35 is the worst ratio (WORST_UNDER_READ) rounded up: what was measured on
# that conv net, not a bound. A model whose input dominates its memory (the MLP of
# benchmarks/device_check.py: 4096 features, 16 MiB per input micro-batch) trained up to 1.38
# times the probe's reading on this CPU, by about one input micro-batch alive or not as the
# ops were scheduled: required_bytes adds one.
WORST_UNDER_READ = 1.319  # the highest training peak over the lowest probe reading, measured
PROBE_MARGIN = 0.35  # WORST_UNDER_READ - 1, rounded up

_UNITS = {
    "": 1,
    "b": 1,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
}


def parse_budget(budget: Any, device: str = "GPU:0") -> int:
    """Bytes of a budget: an int, ``"2GiB"``/``"512MiB"``/``"1.5GB"``, or a fraction in (0, 1]
    (``0.8``, ``"0.8"``) of ``device``'s memory as TensorFlow reports it; ``ValueError``
    naming the value and what is allowed otherwise."""
    allowed = (
        "bytes (an integer), '2GiB', '512MiB', '1.5GB', or a fraction in (0, 1] of the device "
        "memory"
    )
    if isinstance(budget, bool):
        raise ValueError(f"memory_budget must be {allowed}, got {budget!r}.")
    if isinstance(budget, (int, float)) and not isinstance(budget, bool):
        value, unit = float(budget), ""
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(budget))
        if not match or match.group(2).lower() not in _UNITS:
            raise ValueError(f"memory_budget must be {allowed}, got {budget!r}.")
        value, unit = float(match.group(1)), match.group(2).lower()
    if value <= 0:
        raise ValueError(f"memory_budget must be {allowed} (> 0), got {budget!r}.")
    if unit == "" and value <= 1:
        total = device_memory(device)
        if total is None:
            raise ValueError(
                f"memory_budget={budget!r} is a fraction of the device memory, but TensorFlow "
                f"reports no total memory for {device}; give bytes or '2GiB'."
            )
        return int(value * total)
    return int(value * _UNITS[unit])


def device_memory(device: str) -> Optional[int]:
    """Total memory of ``device`` (``"GPU:0"``) as TensorFlow reports it, or ``None``."""
    kind, _, index = device.partition(":")
    physical = tf.config.list_physical_devices(kind)
    if not physical:
        return None
    try:
        details = tf.config.experimental.get_device_details(physical[int(index or 0)])
    except (ValueError, IndexError, RuntimeError):
        return None
    limit = details.get("device_memory_limit") if details else None
    return int(limit) if limit else None


def default_device() -> str:
    """``"GPU:0"`` when a GPU is visible, else ``"CPU:0"``."""
    return "GPU:0" if tf.config.list_logical_devices("GPU") else "CPU:0"


@dataclasses.dataclass(frozen=True)
class MicroBatchChoice:
    """What :func:`fit_micro_batch` chose, and why.

    Attributes:
      micro_batch: the chosen micro-batch (global; a divisor of ``effective_batch_size``).
      accum_steps: ``effective_batch_size / micro_batch``.
      effective_batch_size: the effective batch asked for (kept).
      budget_bytes: the budget, per device.
      peaks: ``{micro-batch: bytes of one micro-step, persistent memory included}`` for every
        size measured (largest first): the probe's readings, without the margin.
      persistent_bytes: what each peak counts for the whole run: variables, optimizer slots,
        accumulation buffers.
      device: the device measured.
      margin: the probe's margin applied (:data:`PROBE_MARGIN` by default).
      input_bytes: ``{micro-batch: bytes of one input micro-batch (features and labels) per
        device}``; a size fits when :func:`required_bytes` of its reading is within the
        budget: ``peaks[size] * (1 + margin) + input_bytes[size] <= budget_bytes``.
    """

    micro_batch: int
    accum_steps: int
    effective_batch_size: int
    budget_bytes: int
    peaks: Dict[int, int]
    persistent_bytes: int
    device: str
    margin: float
    input_bytes: Dict[int, int]

    def required(self, size: int) -> int:
        """Bytes the pick requires of micro-batch ``size`` (:func:`required_bytes`)."""
        return required_bytes(self.peaks[size], self.input_bytes[size], self.margin)

    def explain(self) -> str:
        """One line: the choice, its measured peak with the margin, the budget, the sizes that
        did not fit (their reading, and with the margin)."""
        over = [
            f"{size} ({_mib(peak)}, {_mib(self.required(size))} with it)"
            for size, peak in self.peaks.items()
            if self.required(size) > self.budget_bytes
        ]
        chosen = self.peaks[self.micro_batch]
        return (
            f"micro-batch {self.micro_batch} x accum_steps {self.accum_steps} = effective batch "
            f"{self.effective_batch_size}: one micro-step peaks at {_mib(chosen)} on "
            f"{self.device}, {_mib(self.required(self.micro_batch))} with the probe's margin "
            f"of {self.margin:.0%} ("
            + (
                "PROBE_MARGIN, its worst measured under-read"
                if self.margin == PROBE_MARGIN
                else "given"
            )
            + f") and one more input micro-batch ({_mib(self.input_bytes[self.micro_batch])}), "
            f"within the budget of {_mib(self.budget_bytes)}"
            + (f"; over it with the margin: micro-batch {', '.join(over)}" if over else "")
        )


def required_bytes(reading: int, input_bytes: int, margin: float = PROBE_MARGIN) -> int:
    """What a micro-batch size must find in the budget: the probe's ``reading`` of it times
    ``1 + margin`` (its worst measured under-read), plus ``input_bytes``, one more input
    micro-batch (a training run may hold the next one already: measured on an MLP whose input
    dominates, benchmarks/device_check.py)."""
    return int(reading * (1 + margin)) + input_bytes


def input_bytes(x: Any, y: Any, samples: int) -> int:
    """Bytes of ``samples`` rows of the features ``x`` and labels ``y`` (nested arrays)."""
    return sum(int(np.asarray(array[:samples]).nbytes) for array in tf.nest.flatten((x, y)))


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def step_peak(step: Callable[[], Any], device: str) -> int:
    """Peak bytes ``step()`` allocates on ``device`` above what was in use before it
    (TensorFlow's allocator statistics); ``RuntimeError`` naming the fix when the device keeps
    none."""
    try:
        before = int(tf.config.experimental.get_memory_info(device)["current"])
        tf.config.experimental.reset_memory_stats(device)
        step()
        return int(tf.config.experimental.get_memory_info(device)["peak"]) - before
    except ValueError as error:
        raise RuntimeError(
            f"TensorFlow keeps no memory statistics for {device} ({error}). On the CPU set "
            "TF_CPU_ALLOCATOR_USE_BFC=true before TensorFlow starts; on a GPU they are always "
            "kept."
        ) from error


def fit_micro_batch(
    model: Any,
    x: Any,
    y: Any,
    effective_batch_size: int,
    memory_budget: Any,
    *,
    candidates: Optional[Sequence[int]] = None,
    replicas: int = 1,
    device: Optional[str] = None,
    margin: float = PROBE_MARGIN,
) -> MicroBatchChoice:
    """The largest micro-batch whose training micro-step fits ``memory_budget``.

    Args:
      model: a compiled Keras model (its loss is differentiated; nothing is updated).
      x, y: at least ``effective_batch_size`` samples (arrays or nested arrays); the first
        ``micro-batch`` of them are measured at each size.
      effective_batch_size: the samples of a complete window (one update) to keep.
      memory_budget: see :func:`parse_budget` (per device).
      candidates: micro-batch sizes to try, each a divisor of ``effective_batch_size``
        (default: the effective batch, then halved while it divides evenly).
      replicas: devices the global micro-batch is split over (each measures its share).
      device: the device whose statistics are read (default :func:`default_device`).
      margin: a size fits when its probe reading x ``(1 + margin)``, plus one more input
        micro-batch, is within the budget (:func:`required_bytes`; default
        :data:`PROBE_MARGIN`, the probe's worst measured under-read; a number >= 0).

    Raises ``ValueError`` when even the smallest candidate does not fit (naming its peak, the
    margin and the budget), a candidate does not divide the effective batch, or ``margin`` is
    not a number >= 0.
    """
    margin = cast(float, check_positive_float(margin, "margin", allow_zero=True))  # not None
    device = device or default_device()
    budget = parse_budget(memory_budget, device)
    sizes = _candidate_sizes(candidates, effective_batch_size)
    persistent = _persistent_bytes(model)
    peaks: Dict[int, int] = {}
    inputs: Dict[int, int] = {}
    with _variables_restored(model):
        for size in sorted(set(sizes), reverse=True):
            share = max(1, size // replicas)
            peaks[size] = _micro_step_peak(model, x, y, share, device)
            peaks[size] += persistent
            inputs[size] = input_bytes(x, y, share)
            if required_bytes(peaks[size], inputs[size], margin) <= budget:
                return MicroBatchChoice(
                    size,
                    effective_batch_size // size,
                    effective_batch_size,
                    budget,
                    peaks,
                    persistent,
                    device,
                    margin,
                    inputs,
                )
    smallest = min(peaks)
    raise ValueError(
        f"No micro-batch fits memory_budget={memory_budget!r} ({_mib(budget)} per device): the "
        f"smallest tried, {smallest}, peaks at {_mib(peaks[smallest])} on {device}, "
        f"{_mib(required_bytes(peaks[smallest], inputs[smallest], margin))} with the probe's "
        f"margin of {margin:.0%} and one more input micro-batch. "
        "Raise the budget or make the model smaller."
    )


def _candidate_sizes(candidates: Optional[Sequence[int]], effective_batch_size: int) -> List[int]:
    """The micro-batch sizes to try: ``candidates``, or the effective batch halved while it
    divides evenly; ``ValueError`` naming those that do not divide ``effective_batch_size``."""
    sizes = list(candidates) if candidates is not None else list(_halvings(effective_batch_size))
    bad = [size for size in sizes if size < 1 or effective_batch_size % size]
    if bad:
        raise ValueError(
            f"micro-batch candidates {bad} do not divide effective_batch_size="
            f"{effective_batch_size} (the effective batch must be whole micro-batches)."
        )
    return sizes


def _persistent_bytes(model: Any) -> int:
    """Bytes training holds whatever the micro-batch: the model's and its optimizer's
    variables (the optimizer built on the trainable ones, so that its slots count) and a
    float32 accumulation buffer per trainable weight."""
    trainable = model.trainable_variables
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and hasattr(optimizer, "build"):
        optimizer.build(trainable)  # its slots exist during training: count them
    optimizer_variables = list(optimizer.variables) if optimizer is not None else []
    return (
        sum(_bytes(v) for v in model.variables + optimizer_variables)
        + sum(int(v.shape.num_elements()) for v in trainable) * 4  # float32 accumulation
    )


@contextlib.contextmanager
def _variables_restored(model: Any) -> Iterator[None]:
    """Puts every variable of ``model`` back as it was on exit, and clears AccumBN's window
    statistics: the probe trains (at learning rate 0) through the engine itself, and
    BatchNormalization statistics move."""
    kept = [(v, v.numpy()) for v in model.variables]
    try:
        yield
    finally:
        for variable, value in kept:
            variable.assign(value)
        for layer in internals.flatten_layers(model):
            if hasattr(layer, "ga_window_end"):  # AccumBatchNormalization's window
                layer.ga_window_end(apply=False)


def _bytes(variable: Any) -> int:
    return int(variable.shape.num_elements()) * variable.dtype.size


def _halvings(n: int) -> Tuple[int, ...]:
    sizes = [n]
    while sizes[-1] % 2 == 0:
        sizes.append(sizes[-1] // 2)
    return tuple(sizes)


def _rows(data: Any, n: int) -> Any:
    return tf.nest.map_structure(lambda a: tf.convert_to_tensor(a[:n]), data)


def _micro_step_peak(model: Any, x: Any, y: Any, samples: int, device: str) -> int:
    """Peak bytes a ga-tfx ``fit`` window of micro-batches of ``samples`` allocates (two
    micro-batches when ``x`` holds them, as training runs them back to back; learning rate 0),
    measured on its second run (the first traces)."""
    from ga_tfx._keras import keras
    from ga_tfx.models import wrap_model

    rows = int(tf.nest.flatten(x)[0].shape[0])
    k = 2 if rows >= 2 * samples else 1
    probe = wrap_model(model, k, oom_recovery=False)
    probe.use_engine_always()  # the engine's own step, also at K=1
    arguments = dict(internals.compile_args(model), optimizer=keras.optimizers.SGD(0.0))
    probe.compile(**arguments)
    xs, ys = _rows(x, k * samples), _rows(y, k * samples)

    def train() -> None:
        probe.fit(xs, ys, batch_size=samples, epochs=1, shuffle=False, verbose=0)

    train()
    return step_peak(train, device)
