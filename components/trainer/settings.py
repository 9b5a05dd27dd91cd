"""The accumulation settings of :class:`GradientAccumulationTrainer`, checked in one place.

Settings travel as primitive execution properties (``int``/``float``/``str``, booleans as 0/1)
so that pipelines compile for Kubeflow; :func:`from_dict` turns them back into a checked
:class:`AccumulationSettings`. Every bad value raises ``ValueError`` naming the field.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)

import dataclasses
import numbers
from typing import Any, Dict, Mapping, Optional

STRATEGIES = ("auto", "mirrored", "none", "multi_worker")
PARTIAL_WINDOW_POLICIES = ("apply", "drop", "carry")
MIXED_PRECISION_POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")
# Settings a Tuner's best hyperparameters may override (see run_fn's docstring).
TUNABLE = ("accum_steps", "agc_clip_factor", "micro_batch_size")


@dataclasses.dataclass(frozen=True)
class AccumulationSettings:
    """How the trainer forms batches and updates.

    Attributes:
      accum_steps: micro-batches per optimizer update (``K`` >= 1).
      micro_batch_size: samples per micro-batch (global, split across replicas); the
        effective batch is ``accum_steps * micro_batch_size``.
      label_key: the label feature of the (transformed) training examples.
      raw_label_key: the label in raw serving examples, left out of ``serving_default``
        (default: ``label_key``).
      agc_clip_factor: adaptive gradient clipping factor, or ``None`` for no AGC.
      replace_batchnorm: replace BatchNormalization by ``AccumBatchNormalization`` (moving
        statistics of whole windows).
      mixed_precision: Keras global policy while the model is built and trained.
      strategy: ``"auto"`` (MirroredStrategy when more than one GPU is visible, else none),
        ``"mirrored"`` (MirroredStrategy over all GPUs, or over all logical CPUs without
        GPUs), ``"none"`` or ``"multi_worker"`` (MultiWorkerMirroredStrategy over the
        cluster in the ``TF_CONFIG`` environment variable, every worker running the Trainer
        with the same inputs and outputs; ``micro_batch_size`` is then global, split across
        all replicas of all workers, and only the chief writes the outputs).
      partial_window: what happens to a window of fewer than ``K`` micro-batches.
      shuffle: shuffle the training examples (``False`` keeps file order).
      shuffle_seed: seed of the shuffle. Training data order is a function of it, so a
        resumed run skips exactly the micro-batches it had already trained on.
      updates_per_epoch: optimizer updates between two checkpoints/evaluations; must divide
        ``train_args.num_steps`` (default: all of them, one epoch).
    """

    accum_steps: int
    micro_batch_size: int
    label_key: str
    raw_label_key: Optional[str] = None
    agc_clip_factor: Optional[float] = None
    replace_batchnorm: bool = True
    mixed_precision: str = "float32"
    strategy: str = "auto"
    partial_window: str = "apply"
    shuffle: bool = True
    shuffle_seed: int = 0
    updates_per_epoch: Optional[int] = None

    def __post_init__(self):
        _positive_int(self.accum_steps, "accum_steps")
        _positive_int(self.micro_batch_size, "micro_batch_size")
        _non_empty_str(self.label_key, "label_key")
        if self.raw_label_key is not None:
            _non_empty_str(self.raw_label_key, "raw_label_key")
        if self.agc_clip_factor is not None:
            value = self.agc_clip_factor
            if (isinstance(value, bool) or not isinstance(value, numbers.Real)
                    or not 0 < float(value) < float("inf")):
                raise ValueError(f"agc_clip_factor must be a finite number > 0 or None, "
                                 f"got {value!r}.")
        _bool(self.replace_batchnorm, "replace_batchnorm")
        _bool(self.shuffle, "shuffle")
        _positive_int(self.shuffle_seed, "shuffle_seed", minimum=0)
        _choice(self.mixed_precision, "mixed_precision", MIXED_PRECISION_POLICIES)
        _choice(self.strategy, "strategy", STRATEGIES)
        _choice(self.partial_window, "partial_window", PARTIAL_WINDOW_POLICIES)
        if self.updates_per_epoch is not None:
            _positive_int(self.updates_per_epoch, "updates_per_epoch")

    @property
    def effective_batch_size(self) -> int:
        return self.accum_steps * self.micro_batch_size

    @property
    def serving_label_key(self) -> str:
        return self.raw_label_key or self.label_key

    def to_exec_properties(self) -> Dict[str, Any]:
        """Primitive values only (booleans as 0/1, ``None`` left out)."""
        return {name: int(value) if isinstance(value, bool) else value
                for name, value in dataclasses.asdict(self).items() if value is not None}

    def with_hyperparameters(self, hyperparameters: Optional[Mapping[str, Any]]):
        """These settings with the ``TUNABLE`` ones a Tuner chose (they take precedence).

        A search that turned AGC off (the plugin's ``agc`` hyperparameter is False) turns it
        off here too, whatever the component's ``agc_clip_factor``.
        """
        values = hyperparameter_values(hyperparameters)
        overrides = {name: values[name] for name in TUNABLE if name in values}
        if values.get("agc") is False:
            overrides["agc_clip_factor"] = None
        return dataclasses.replace(self, **overrides) if overrides else self


def field_names():
    return tuple(field.name for field in dataclasses.fields(AccumulationSettings))


def from_dict(values: Mapping[str, Any]) -> AccumulationSettings:
    """Checked settings from a dict (exec properties or ``custom_config['ga_tfx']``).

    Unknown keys raise ``ValueError`` (a misspelt setting must not be silently ignored);
    booleans may be given as 0/1.
    """
    if not isinstance(values, Mapping):
        raise ValueError(f"ga_tfx settings must be a dict, got {values!r}.")
    known = field_names() + ("effective_batch_size",)
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ValueError(f"Unknown ga_tfx setting(s) {unknown}; known: {list(known)}.")
    values = dict(values)
    if values.get("effective_batch_size") is not None:
        if values.get("accum_steps") is not None:
            raise ValueError("Give accum_steps or effective_batch_size, not both (got "
                             f"{values['accum_steps']!r} and {values['effective_batch_size']!r}).")
        values["accum_steps"] = accum_steps_for(values.pop("effective_batch_size"),
                                                values.get("micro_batch_size"))
    values.pop("effective_batch_size", None)
    missing = [name for name in ("accum_steps", "micro_batch_size", "label_key")
               if values.get(name) is None]
    if missing:
        raise ValueError(f"Missing required ga_tfx setting(s) {missing}.")
    for name in ("replace_batchnorm", "shuffle"):
        if values.get(name) in (0, 1) and not isinstance(values[name], float):
            values[name] = bool(values[name])
    return AccumulationSettings(**values)


def accum_steps_for(effective_batch_size, micro_batch_size) -> int:
    """``accum_steps`` that makes ``effective_batch_size`` out of micro-batches.

    ``ValueError`` when the micro-batch is larger than the effective batch or does not divide
    it (no partial windows are made up silently).
    """
    _positive_int(effective_batch_size, "effective_batch_size")
    _positive_int(micro_batch_size, "micro_batch_size")
    if micro_batch_size > effective_batch_size:
        raise ValueError(f"micro_batch_size={micro_batch_size} is larger than "
                         f"effective_batch_size={effective_batch_size}: a micro-batch is a part "
                         "of the effective batch.")
    if effective_batch_size % micro_batch_size:
        raise ValueError(f"effective_batch_size={effective_batch_size} is not a multiple of "
                         f"micro_batch_size={micro_batch_size}.")
    return effective_batch_size // micro_batch_size


def hyperparameter_values(hyperparameters: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """Plain ``{name: value}`` from a hyperparameters dict or a keras_tuner config.

    ``fn_args.hyperparameters`` is either a plain dict or ``HyperParameters.get_config()``
    (``{"space": [...], "values": {...}}``, what the Tuner's best_hyperparameters holds).
    """
    if not hyperparameters:
        return {}
    if "values" in hyperparameters and "space" in hyperparameters:
        return dict(hyperparameters["values"])
    return dict(hyperparameters)


def _positive_int(value, name, minimum=1):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")


def _non_empty_str(value, name):
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string, got {value!r}.")


def _bool(value, name):
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False (or 0/1), got {value!r}.")


def _choice(value, name, allowed):
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}.")
