"""The settings of :class:`GradientAccumulationTrainer`, each declared once (standard library only).

:class:`AccumulationSettings` is the declaration: every field carries its kind, bounds or choices,
default and one line of help (:func:`ga_tfx._schema.setting`). From it derive the component's
``ExecutionParameter``\\ s (``component.py``), the parsing of execution properties and of
``custom_config["ga_tfx"]`` (:func:`from_dict`), the ``ga-tfx`` flags of the Trainer settings
(``ga_tfx.pipelines.options``) and the README's settings table
(``scripts/settings_table.py``). The settings that are the library's
(:class:`ga_tfx.AccumulationConfig`: ``accum_steps``, ``partial_window``, ``agc_clip_factor``,
``clip_global_norm``, ``gradient_noise``, ``log_noise_scale``) are declared there and taken
with their specs and defaults (:func:`ga_tfx._schema.like`); :func:`accumulation_config` turns
the Trainer's settings into the library's config.

Settings travel as primitive execution properties (``int``/``float``/``str``, booleans as 0/1,
``None`` left out) so that pipelines compile for Kubeflow. Every bad value raises
``ValueError`` naming the field, the value and what is allowed.
"""

from ga_tfx._schema import SettingError, Settings, defaults, like, setting, specs, values_for
from ga_tfx.components import keys
from ga_tfx.config import AccumulationConfig
from ga_tfx.schedules import HoldsSchedule

import dataclasses
import re
from typing import Any, Dict, Mapping, Optional

STRATEGIES = ("auto", "mirrored", "none", "multi_worker")
MIXED_PRECISION_POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")


# The Trainer's checkpoint interval where checkpoint_every_seconds is unset.
CHECKPOINT_EVERY_SECONDS = 600.0

# The checkpoint interval of the Trainer in a compiled Kubeflow job (``ga-tfx compile``), in
# place of CHECKPOINT_EVERY_SECONDS. On open-source KFP a preempted Trainer has about
# 1 s before the kernel kills it (Argo's emissary forwards SIGTERM, the KFP launcher dies on
# it; /work/shared/ENGINEERING.md, "What reaches Python when a KFP v2 pod is preempted"), so
# it cannot finish a window and save: a resubmission resumes from the last periodic checkpoint
# and the interval is the work a preemption loses. 60 s loses at most a minute (plus the call
# running, about 0.2 s) where 600 s lost up to ten; a checkpoint of the digits model (174 KB)
# took 0.15 s to save (median of 14, 0.3 s the first, 2-core CPU machine, local disk), 0.25%
# of a 60-second interval; at 1 s a save (a slow object store) it is 1.7%.
KUBEFLOW_CHECKPOINT_EVERY_SECONDS = 60.0


@dataclasses.dataclass(frozen=True)
class AccumulationSettings(HoldsSchedule, Settings):
    """How the Trainer forms batches and updates (checked when created: always valid).

    ``schedule``: K by window (:class:`~ga_tfx.schedules.Schedule`), made once from
    ``accum_steps`` and ``accum_schedule`` by :func:`ga_tfx.schedules.schedule_of` (checked
    when the settings are made: ``accum_steps`` must be a piecewise schedule's first K; an
    adaptive schedule starts at ``accum_steps``)."""

    accum_steps: int = like(AccumulationConfig, "accum_steps", tunable=True)
    micro_batch_size: int = setting(
        kind=int,
        minimum=1,
        tunable=True,
        flag="--micro-batch",
        help="examples per micro-batch (global, split across replicas); the effective batch "
        "is accum_steps x micro_batch_size",
    )
    label_key: str = setting(
        kind=str, flag="", help="the label feature of the (transformed) training examples"
    )
    raw_label_key: Optional[str] = setting(
        None,
        kind=str,
        optional=True,
        flag="",
        help="the label in raw serving examples, left out of serving_default (None: label_key)",
    )
    agc_clip_factor: Optional[float] = like(
        AccumulationConfig, "agc_clip_factor", tunable=True, off_flag="--no-agc"
    )
    accum_schedule: Optional[str] = like(AccumulationConfig, "accum_schedule")
    lr_scaling: str = like(AccumulationConfig, "lr_scaling")
    clip_global_norm: Optional[float] = like(AccumulationConfig, "clip_global_norm")
    gradient_noise: Optional[float] = like(AccumulationConfig, "gradient_noise")
    log_noise_scale: bool = like(AccumulationConfig, "log_noise_scale")
    replace_batchnorm: bool = setting(
        True,
        kind=bool,
        help="replace BatchNormalization by AccumBatchNormalization (moving "
        "statistics of whole windows)",
    )
    mixed_precision: str = setting(
        "float32",
        kind=str,
        choices=MIXED_PRECISION_POLICIES,
        help="Keras dtype policy while the model is built and trained",
    )
    strategy: str = setting(
        "auto",
        kind=str,
        choices=STRATEGIES,
        help="tf.distribute strategy: auto (MirroredStrategy when several GPUs are visible), "
        "mirrored (all GPUs, else all logical CPUs), none, multi_worker (TF_CONFIG "
        "cluster; only the chief writes)",
    )
    partial_window: str = like(AccumulationConfig, "partial_window")
    shuffle: bool = setting(True, kind=bool, help="shuffle the training examples")
    shuffle_seed: int = setting(
        0,
        kind=int,
        minimum=0,
        help="seed of the shuffle: the data order is a function of it, so a resumed run skips "
        "exactly the micro-batches already trained",
    )
    shuffle_buffer: Optional[int] = setting(
        None,
        kind=int,
        minimum=1,
        optional=True,
        help="training examples the shuffle holds (None: tfx_bsl's 10,000); a buffer smaller "
        "than the training split leaves the files' order partly in place, so files sorted by "
        "the label feed drifting batches (the --label pipeline holds up to 1,000,000)",
    )
    windows_per_epoch: Optional[int] = setting(
        None,
        kind=int,
        minimum=1,
        optional=True,
        renamed_from="updates_per_epoch",
        help="windows (an update each, unless skipped) between two evaluations; must divide "
        "train_args.num_steps (None: one epoch)",
    )
    memory_budget: Optional[str] = setting(
        None,
        kind=str,
        optional=True,
        rule=lambda text: _budget_problem(text),
        help="fit the micro-batch to this much memory per device ('2GiB', '512MiB', bytes, or a "
        "fraction of the device memory): the largest divisor of the effective batch whose "
        "training step, as measured times 1 + the probe's margin "
        "(ga_tfx.sizing.memory.PROBE_MARGIN, its worst measured under-read) plus one more input "
        "micro-batch, fits, K adjusted so that the effective batch is kept (None: "
        "micro_batch_size as given)",
    )
    resume_root: Optional[str] = setting(
        None,
        kind=str,
        optional=True,
        flag="",
        help="where every run of this training keeps its resumable checkpoints, in "
        "<resume_root>/<hash of the training's identity: its inputs' and model code's "
        "content, ga-tfx version, settings and hyperparameters, no URI> (None: beside the "
        "Trainer's outputs, "
        "<pipeline_root>/<Trainer>/.ga_tfx_resume); the ga-tfx pipelines set "
        "<pipeline_root>/.ga_tfx_resume/<pipeline name>, so that a job submitted again (new "
        "job id, new output URIs for the same content) resumes",
    )
    checkpoint_every_updates: int = setting(
        100,
        kind=int,
        minimum=1,
        help="write a resumable checkpoint after this many optimizer updates (windows "
        "applied), or after checkpoint_every_seconds, whichever comes first (at window ends, "
        "mid-epoch too)",
    )
    checkpoint_every_seconds: Optional[float] = setting(
        None,
        kind=float,
        above=0,
        optional=True,
        help="write a resumable checkpoint after this many seconds of training, or after "
        "checkpoint_every_updates, whichever comes first (None: "
        f"{CHECKPOINT_EVERY_SECONDS:g} s; in the compiled Kubeflow job "
        f"{KUBEFLOW_CHECKPOINT_EVERY_SECONDS:g} s)",
    )

    @property
    def checkpoint_seconds(self) -> float:
        """``checkpoint_every_seconds``, or :data:`CHECKPOINT_EVERY_SECONDS` where unset."""
        given = self.checkpoint_every_seconds
        return CHECKPOINT_EVERY_SECONDS if given is None else given

    @property
    def effective_batch_size(self) -> int:
        """Samples per update (of the first window, with a schedule)."""
        return self.accum_steps * self.micro_batch_size

    def to_exec_properties(self) -> Dict[str, Any]:
        """Primitive values only (booleans as 0/1, ``None`` left out)."""
        return self.to_primitives()

    def with_hyperparameters(
        self, hyperparameters: Optional[Mapping[str, Any]]
    ) -> "AccumulationSettings":
        """These settings with the tunable ones a Tuner chose (they take precedence).

        A search that turned AGC off (the plugin's ``agc`` hyperparameter is False) turns it
        off here too, whatever the component's ``agc_clip_factor``.
        """
        values = hyperparameter_values(hyperparameters)
        overrides = {name: values[name] for name in TUNABLE if name in values}
        if values.get("agc") is False:
            overrides["agc_clip_factor"] = None
        return dataclasses.replace(self, **overrides) if overrides else self


def kubeflow_checkpoint_every_seconds(given: Optional[float]) -> float:
    """The compiled Kubeflow job's ``checkpoint_every_seconds``: ``given`` when the user set
    it (whatever its value, 600 included), else :data:`KUBEFLOW_CHECKPOINT_EVERY_SECONDS`."""
    return KUBEFLOW_CHECKPOINT_EVERY_SECONDS if given is None else given


def _budget_problem(text: str) -> Optional[str]:
    """A budget's form (its bytes, for a fraction, are known only on the device)."""
    if re.fullmatch(r"\s*[0-9]*\.?[0-9]+\s*([KMG]i?B|B)?\s*", text, re.IGNORECASE):
        return None
    return "must be bytes, '2GiB', '512MiB', '1.5GB' or a fraction such as '0.8'"


def accumulation_config(settings: AccumulationSettings) -> AccumulationConfig:
    """The library's :class:`~ga_tfx.AccumulationConfig` of the Trainer's settings."""
    return AccumulationConfig(**values_for(settings, AccumulationConfig))


# Settings a Tuner's best hyperparameters may override (see run_fn's docstring).
TUNABLE = tuple(name for name, spec in specs(AccumulationSettings).items() if spec.tunable)
DEFAULTS = defaults(AccumulationSettings)


def field_names():
    return tuple(specs(AccumulationSettings))


def accepted_names():
    """:func:`field_names` and the settings' names before 0.3.0 (``renamed_from``), which a
    saved pipeline's execution properties may still carry (:func:`from_dict` renames them)."""
    olds = (spec.renamed_from for spec in specs(AccumulationSettings).values())
    return field_names() + tuple(old for old in olds if old)


def from_dict(values: Mapping[str, Any]) -> AccumulationSettings:
    """Checked settings from a dict (exec properties or ``custom_config['ga_tfx']``).

    ``effective_batch_size`` may stand for ``accum_steps`` (see :func:`accum_steps_for`).
    Unknown keys raise ``ValueError`` (a misspelt setting must not be silently ignored);
    booleans may be given as 0/1.
    """
    if not isinstance(values, Mapping):
        raise SettingError(f"ga_tfx settings must be a dict, got {values!r}.")
    values = dict(values)
    effective = values.pop(keys.EFFECTIVE_BATCH_SIZE, None)
    if effective is not None:
        if values.get("accum_steps") is not None:
            raise SettingError(
                "Give accum_steps or effective_batch_size, not both (got "
                f"{values['accum_steps']!r} and {effective!r})."
            )
        values["accum_steps"] = accum_steps_for(effective, values.get("micro_batch_size"))
    return AccumulationSettings.from_mapping(values, where=keys.GA_TFX)


def accum_steps_for(effective_batch_size: Any, micro_batch_size: Any) -> int:
    """``accum_steps`` that makes ``effective_batch_size`` out of micro-batches.

    ``ValueError`` when the micro-batch is larger than the effective batch or does not divide
    it (no partial windows are made up silently).
    """
    micro_spec = specs(AccumulationSettings)["micro_batch_size"]
    effective_batch_size = micro_spec.check(keys.EFFECTIVE_BATCH_SIZE, effective_batch_size)
    micro_batch_size = micro_spec.check("micro_batch_size", micro_batch_size)
    if micro_batch_size > effective_batch_size:
        raise SettingError(
            f"micro_batch_size={micro_batch_size} is larger than "
            f"effective_batch_size={effective_batch_size}: a micro-batch is a "
            "part of the effective batch."
        )
    if effective_batch_size % micro_batch_size:
        raise SettingError(
            f"effective_batch_size={effective_batch_size} is not a multiple of "
            f"micro_batch_size={micro_batch_size}."
        )
    return effective_batch_size // micro_batch_size


def check_windows_per_epoch(windows: int, windows_per_epoch: Optional[int]) -> int:
    """Windows per epoch (``windows_per_epoch``, or all of them);
    ``ValueError`` unless it divides ``windows`` (``train_args.num_steps``: windows, an update
    each unless skipped)."""
    if not windows:
        raise SettingError(f"train_args.num_steps (windows) must be set and > 0, got {windows!r}.")
    per_epoch = windows_per_epoch or windows
    if windows % per_epoch:
        raise SettingError(
            f"windows_per_epoch={per_epoch} must divide train_args.num_steps={windows} (windows)."
        )
    return per_epoch


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
