"""The pipeline's options, declared once (standard library only: ``ga-tfx --help`` reads them).

:class:`TrainingOptions` holds what :func:`ga_tfx.pipelines.pipeline.create_pipeline` needs
beyond paths, one frozen dataclass per concern (accumulation, Tuner, CSV data, blessing), each
checking its own rules as it is made; the rules across two concerns are checked by
:class:`TrainingOptions` itself. Options that are Trainer settings or search-space fields reuse
those declarations (:func:`ga_tfx._schema.like`) with the pipeline's own defaults for the shipped
data; the ``ga-tfx`` flags, their help and defaults are generated from these fields
(:func:`add_training_flags`), and :func:`from_flags` hands each flag to its concern. The CSV
data's and the blessing's concerns are declared in :mod:`ga_tfx.pipelines.data_options` (and
re-exported here).
"""

from ga_tfx._schema import (
    SettingError,
    Settings,
    Spec,
    defaults,
    like,
    markdown_table,
    renamed_message,
    setting,
    specs,
    with_new_names,
)
from ga_tfx.components.trainer.settings import AccumulationSettings, check_windows_per_epoch
from ga_tfx.components.tuner.options import TunerOptions
from ga_tfx.pipelines import run_length
from ga_tfx.pipelines.data_options import DEFAULT_MIN_ACCURACY, BlessingOptions, CsvDataOptions
from ga_tfx.pipelines.run_length import (  # re-exported
    DIGITS_TRAIN_WINDOWS,
    DIGITS_WINDOWS_PER_EPOCH,
    MIN_TRAIN_WINDOWS,
)
from ga_tfx.schedules import HoldsSchedule
from ga_tfx.tuning.search_space import AccumulationSearchSpace

import argparse
import dataclasses
import sys
from typing import Any, Optional, Tuple

# A --label run's shuffle buffer (training examples): the whole training split up to this many
# rows, so that a CSV sorted by the label (or by anything) trains on uniformly shuffled batches
# each epoch. tf.data shuffles before it repeats, so the buffer holds at most the split.
LABEL_SHUFFLE_BUFFER = 1_000_000
# --tune-strategy: a Keras Tuner random search, or the noise-scale probe (no search).
TUNE_STRATEGIES = ("search", "noise_scale")


@dataclasses.dataclass(frozen=True)
class AccumulationOptions(HoldsSchedule, Settings):
    """How the Trainer trains: accumulation, length, checkpoints, strategy, seed.

    ``schedule``: K by window (:class:`~ga_tfx.schedules.Schedule`), made once from
    ``accum_steps`` and ``accum_schedule`` by the rule of every holder
    (:func:`ga_tfx.schedules.schedule_of`): ``accum_steps`` left out (None) is
    ``DEFAULT_ACCUM_STEPS`` (4), or a piecewise schedule's first K; given, it must be that
    first K; an adaptive schedule starts at it. Once made, ``accum_steps`` is the run's first
    K (an int).

    ``train_windows`` counts windows (the first of ``accum_steps * micro_batch_size``
    examples; an update each, unless skipped as non-finite: the Trainer's
    ``train_args.num_steps``);
    ``eval_steps`` counts evaluation micro-batches. ``seed`` seeds the data order of the Trainer
    (and the Tuner's search and trials). Defaults suit the shipped data.
    """

    DEFAULT_ACCUM_STEPS = 4
    accum_steps: Optional[int] = like(
        AccumulationSettings,
        "accum_steps",
        None,
        optional=True,
        help="micro-batches per window, an optimizer update each; left out (None): 4, or the "
        "first K of a piecewise --accum-schedule (given beside one, it must be that first K)",
    )
    micro_batch_size: int = like(AccumulationSettings, "micro_batch_size", 32)
    train_windows: Optional[int] = setting(
        None,
        kind=int,
        minimum=1,
        optional=True,
        renamed_from="train_updates",
        help="windows (effective batches; an update each, unless skipped) to train (None: 60 "
        "for the shipped digits; for --label data, epochs passes over the training rows and at "
        f"least {MIN_TRAIN_WINDOWS} windows)",
    )
    epochs: int = setting(
        20,
        kind=int,
        minimum=1,
        help="--label data without --train-windows: passes over the training rows (2/3 of the "
        f"rows with a label) to train, at least {MIN_TRAIN_WINDOWS} windows in all",
    )
    windows_per_epoch: Optional[int] = like(
        AccumulationSettings,
        "windows_per_epoch",
        None,
        help="windows (an update each, unless skipped) between two evaluations; must divide "
        "--train-windows (None: "
        f"{DIGITS_WINDOWS_PER_EPOCH} for the shipped digits; for --label data one pass over "
        f"the training rows, at least {MIN_TRAIN_WINDOWS} // epochs, or one evaluation at the "
        "end when --train-windows is given)",
    )
    checkpoint_every_updates: int = like(  # the Trainer's defaults: one declaration
        AccumulationSettings,
        "checkpoint_every_updates",
        defaults(AccumulationSettings)["checkpoint_every_updates"],
    )
    checkpoint_every_seconds: Optional[float] = like(
        AccumulationSettings,
        "checkpoint_every_seconds",
        defaults(AccumulationSettings)["checkpoint_every_seconds"],
    )
    eval_steps: int = setting(
        8, kind=int, minimum=1, help="evaluation micro-batches after each epoch"
    )
    agc_clip_factor: Optional[float] = like(AccumulationSettings, "agc_clip_factor", 0.08)
    accum_schedule: Optional[str] = like(
        AccumulationSettings,
        "accum_schedule",
        help="K by window, 'FROM:K,...' (e.g. '0:2,20:4': K=2 for windows 0-19, then 4; its "
        "first K is the run's --accum-steps), or 'adaptive[:MIN-MAX]' (from --accum-steps, K "
        "follows the measured noise scale / micro-batch, powers of two in [MIN, MAX], default "
        "2-64); None: --accum-steps throughout",
    )
    lr_scaling: str = like(AccumulationSettings, "lr_scaling")
    log_noise_scale: bool = like(AccumulationSettings, "log_noise_scale")
    memory_budget: Optional[str] = like(AccumulationSettings, "memory_budget")
    strategy: str = like(AccumulationSettings, "strategy", "auto")
    seed: int = like(
        AccumulationSettings,
        "shuffle_seed",
        0,
        help="seed of the run: the Tuner's hyperparameter sampling and trial seeds, and the "
        "data order (shuffle_seed) of the Tuner's trials and of the Trainer",
    )


@dataclasses.dataclass(frozen=True)
class TuningOptions(Settings):
    """The optional Tuner (``tune``) before the Trainer.

    The Tuner searches ``accum_steps`` over ``search_accum_steps`` and the AGC clip factor over
    ``search_agc_clip_factor`` (AGC off included) in ``tuning_trials`` trials of
    ``tuning_windows`` windows, and its best values override ``accum_steps`` and
    ``agc_clip_factor`` in the Trainer. With ``tune_strategy="noise_scale"`` one probe run of
    ``tuning_windows`` windows at ``accum_steps`` measures the gradient noise scale instead,
    and ``accum_steps`` follows from it (:class:`ga_tfx.tuning.NoiseScaleProbe`); with
    ``tuning_target_loss`` the probe ends at the first evaluation at or below that loss,
    ``tuning_windows`` being the cap (:class:`ga_tfx.tuning.StopAtLoss`).
    """

    tune: bool = setting(
        False,
        kind=bool,
        help="add a Tuner searching accum steps and the AGC clip factor; its "
        "best values override --accum-steps/--agc-clip-factor",
    )
    search_accum_steps: Tuple[int, ...] = like(AccumulationSearchSpace, "accum_steps", (1, 2, 4))
    search_agc_clip_factor: Optional[Tuple[float, ...]] = like(
        AccumulationSearchSpace, "agc_clip_factor", (0.01, 0.16)
    )
    tuning_trials: int = setting(3, kind=int, minimum=1, help="Tuner trials")
    tuning_windows: int = setting(
        10,
        kind=int,
        minimum=1,
        renamed_from="tuning_updates",
        help="windows (an update each, unless skipped) of the trial with the largest "
        "effective batch; every trial sees as many examples (noise_scale: windows of the "
        "probe run)",
    )
    tuning_target_loss: Optional[float] = like(
        TunerOptions,
        "target_loss",
        None,
        help="noise_scale: end the probe at the first evaluation whose eval loss is at or "
        "below this (the loss you aim at), --tuning-windows being the cap, evaluated about "
        "10 times over it; None: the probe runs --tuning-windows windows",
    )
    tune_strategy: str = setting(
        "search",
        kind=str,
        choices=TUNE_STRATEGIES,
        help="with --tune: search (a random search of --tuning-trials trials) or noise_scale (no "
        "search: one probe run of --tuning-windows windows at --accum-steps measures the "
        "gradient noise scale of its path, B_path, and accum_steps becomes the "
        "--search-accum-steps value nearest to B_path / micro-batch)",
    )

    def __post_init__(self):
        super().__post_init__()
        if self.tune_strategy != "search" and not self.tune:
            raise SettingError(
                f"tune_strategy={self.tune_strategy!r} applies to a tuned run: add tune (--tune)."
            )
        if self.tuning_target_loss is not None and not self.probes:
            raise SettingError(
                f"tuning_target_loss={self.tuning_target_loss!r} ends the noise-scale probe: "
                f"it applies to --tune --tune-strategy noise_scale only, got tune={self.tune}, "
                f"tune_strategy={self.tune_strategy!r} (remove --tuning-target-loss, or probe)."
            )

    @property
    def probes(self) -> bool:
        """Whether the Tuner runs the noise-scale probe (``tune`` with ``noise_scale``)."""
        return self.tune and self.tune_strategy == "noise_scale"


# The options' concerns: TrainingOptions' field -> its class (the flags' order and groups).
CONCERNS = {
    "accumulation": AccumulationOptions,
    "tuning": TuningOptions,
    "csv": CsvDataOptions,
    "blessing": BlessingOptions,
}


@dataclasses.dataclass(frozen=True)
class TrainingOptions:
    """What :func:`ga_tfx.pipelines.pipeline.create_pipeline` needs beyond paths, by concern:
    :class:`AccumulationOptions`, :class:`TuningOptions`, :class:`CsvDataOptions`,
    :class:`BlessingOptions` (each checks its own settings and rules as it is made). Checked
    here: the rules across two concerns. :meth:`of` makes one from flat setting names (the
    ``ga-tfx`` flags)."""

    accumulation: AccumulationOptions = AccumulationOptions()
    tuning: TuningOptions = TuningOptions()
    csv: CsvDataOptions = CsvDataOptions()
    blessing: BlessingOptions = BlessingOptions()

    def __post_init__(self):
        accumulation, tuning, csv = self.accumulation, self.tuning, self.csv
        if accumulation.train_windows is not None:  # the digits evaluate every 20 windows
            check_windows_per_epoch(
                accumulation.train_windows,
                accumulation.windows_per_epoch
                if accumulation.windows_per_epoch is not None or csv.label is not None
                else DIGITS_WINDOWS_PER_EPOCH,
            )
        if tuning.probes and accumulation.schedule.first_accum_steps < 2:
            raise SettingError(
                f"accum_steps={accumulation.accum_steps}: tune_strategy 'noise_scale' probes at "
                "accum_steps (--accum-steps), which must be >= 2 (the noise scale needs at least "
                "2 micro-batch gradients per update)."
            )
        if tuning.tune and accumulation.accum_schedule:
            raise SettingError(
                f"accum_schedule={accumulation.accum_schedule!r} and tune: the Tuner sets "
                "accum_steps, a schedule sets K by window; give one of them."
            )
        if csv.module_file and csv.task == "regression" and self.blessing.max_rmse is None:
            raise SettingError(
                "a module_file regression is blessed only past an explicit threshold: give "
                "max_rmse (--max-rmse RMSE), the eval RMSE at or below which the model is "
                "pushed."
            )

    @classmethod
    def of(cls, **values: Any) -> "TrainingOptions":
        """The options of flat setting names (``accum_steps=2, label="y"``), each handed to
        its concern; ``SettingError`` naming an unknown name and the known ones."""
        for concern in CONCERNS.values():
            values = with_new_names(concern, values, "options")
        known = {name: field for field, concern in CONCERNS.items() for name in specs(concern)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise SettingError(f"Unknown option(s) {unknown}; known: {sorted(known)}.")
        return cls(
            **{
                field: concern(**{k: v for k, v in values.items() if known[k] == field})
                for field, concern in CONCERNS.items()
            }
        )

    def windows_plan(self, train_rows: Optional[int] = None) -> Tuple[int, int]:
        """(windows to train, windows per epoch) of the run: the Trainer's
        ``train_args.num_steps`` and ``windows_per_epoch``, both in windows (an update each,
        unless skipped).

        The shipped digits: ``train_windows`` (default ``DIGITS_TRAIN_WINDOWS``) and
        ``windows_per_epoch`` (default ``DIGITS_WINDOWS_PER_EPOCH``). ``--label`` data with
        ``train_windows`` given: that, and ``windows_per_epoch`` (default: one evaluation at
        the end). Otherwise from ``train_rows`` (the training split's rows): ``epochs`` passes
        of ``ceil(train_rows / effective batch)`` windows (the first window's: the schedule's
        first K times the micro-batch), at least ``MIN_TRAIN_WINDOWS``,
        evaluated every pass (or every ``MIN_TRAIN_WINDOWS // epochs`` windows when a pass is
        shorter), rounded up to whole epochs. ``ValueError`` when the rows are needed and not
        known (e.g. compiling for Kubeflow: give ``train_windows``).
        """
        return run_length.windows_plan(self, train_rows)


# ---------------------------------------------------------------------- command-line flags
def flag_type(name: str, spec: Spec):
    def parse(text: str) -> Any:
        try:
            return spec.parse(name, text)
        except SettingError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    parse.__name__ = spec.kind.__name__  # argparse names the type in its messages
    return parse


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
    return "off" if value is None else str(value)


def add_training_flags(group: Any) -> None:
    """Adds the flags of every concern of :class:`TrainingOptions` (:data:`CONCERNS` order)."""
    for concern in CONCERNS.values():
        add_flags(group, concern)


def add_flags(group: Any, cls: type) -> None:
    """Adds one flag per declared field of ``cls`` (dest = the field's name; help, default and
    check from its spec; booleans as ``--x/--no-x``; an ``off_flag`` sets it to None)."""
    values = defaults(cls)
    for name, spec in specs(cls).items():
        flag = spec.cli_flag(name)
        if flag is None:
            continue
        default = values.get(name)
        if spec.kind is bool and not spec.many:  # argparse adds "(default: ...)" itself
            group.add_argument(
                flag,
                dest=name,
                default=default,
                action=argparse.BooleanOptionalAction,
                help=spec.help,
            )
            continue
        help_text = f"{spec.help} (default {_shown(default)})"
        metavar = None if spec.choices else f"{name.upper()},..." if spec.many else name.upper()
        group.add_argument(
            flag,
            dest=name,
            default=default,
            metavar=metavar,
            choices=spec.choices,
            type=flag_type(name, spec),
            help=help_text,
        )
        if spec.off_flag:
            group.add_argument(
                spec.off_flag, dest=name, action="store_const", const=None, help=f"turn {name} off"
            )
        if spec.renamed_from:  # the flag before 0.3.0: hidden, one line on stderr when used
            group.add_argument(
                "--" + spec.renamed_from.replace("_", "-"),
                dest=name,
                default=argparse.SUPPRESS,
                type=flag_type(name, spec),
                action=_renamed_flag(flag),
                help=argparse.SUPPRESS,
            )


def _renamed_flag(new_flag: str) -> type:
    """An argparse action storing an old flag's value under its new one's, with
    :func:`~ga_tfx._schema.renamed_message` as one ``PROG: warning: ...`` line on stderr."""

    class Renamed(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            message = renamed_message(str(option_string), new_flag)
            sys.stderr.write(f"{parser.prog}: warning: {message}\n")
            setattr(namespace, self.dest, values)

    return Renamed


def from_flags(args: argparse.Namespace) -> TrainingOptions:
    """The options the parsed flags describe, each handed to its concern
    (:meth:`TrainingOptions.of`; checked again as a whole, e.g. windows)."""
    return TrainingOptions.of(
        **{
            name: getattr(args, name)
            for concern in CONCERNS.values()
            for name in specs(concern)
            if hasattr(args, name)
        }
    )


def flags_table() -> str:
    """The manual's table of the ``ga-tfx`` training flags, every concern's in one table."""
    tables = [markdown_table(concern, flags=True).split("\n") for concern in CONCERNS.values()]
    return "\n".join(tables[0] + [row for table in tables[1:] for row in table[2:]])
