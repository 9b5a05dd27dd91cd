"""The Tuner's own options (``custom_config["tuner"]``), declared once (standard library only)."""

from ga_tfx._schema import Settings, setting

import dataclasses
from typing import Optional

# "noise_scale": no search; one probe run measures the gradient noise scale and accum_steps
# follows from it (ga_tfx.tuning.NoiseScaleProbe).
TUNER_KINDS = ("random", "bayesian", "hyperband", "noise_scale")
DEFAULT_MAX_TRIALS = 10
DEFAULT_MAX_EPOCHS = 3
DEFAULT_STALE_TRIAL_SECONDS = 300.0


@dataclasses.dataclass(frozen=True)
class TunerOptions(Settings):
    """Which Keras Tuner searches, for how long, towards which objective."""

    kind: str = setting(
        "random",
        kind=str,
        choices=TUNER_KINDS,
        help="the Keras Tuner: random, bayesian or hyperband; or noise_scale: one probe run at "
        "the Trainer's accum_steps measures the gradient noise scale of its path, B_path, and "
        "accum_steps is the searched value nearest to B_path / micro-batch",
    )
    objective: Optional[str] = setting(
        None,
        kind=str,
        optional=True,
        help="the metric to optimise (None: val_loss with evaluation, else loss)",
    )
    max_trials: Optional[int] = setting(
        None,
        kind=int,
        minimum=1,
        optional=True,
        help=f"trials of a random or bayesian search (None: {DEFAULT_MAX_TRIALS})",
    )
    max_epochs: Optional[int] = setting(
        None,
        kind=int,
        minimum=1,
        optional=True,
        help=f"epochs of a hyperband search (None: {DEFAULT_MAX_EPOCHS})",
    )
    seed: Optional[int] = setting(
        0,
        kind=int,
        optional=True,
        help="seed of the search: the hyperparameters each trial samples and each trial's "
        "global seed derive from it (None: a new random search every run)",
    )
    trials_file: Optional[str] = setting(
        None,
        kind=str,
        optional=True,
        help="a JSON-lines file where every finished trial (failed ones too) is appended, "
        "with TensorBoard HParams beside it (None: no record)",
    )
    target_loss: Optional[float] = setting(
        None,
        kind=float,
        above=0,
        optional=True,
        help="noise_scale: end the probe at the first evaluation whose val_loss is at or below "
        "this (the loss you aim at; train_args.num_steps windows are then the cap, evaluated "
        "every few windows); None: the probe runs train_args.num_steps windows",
    )
    stale_trial_seconds: float = setting(
        DEFAULT_STALE_TRIAL_SECONDS,
        kind=float,
        above=0,
        help="distributed search: a trial whose worker sent no heartbeat for this many "
        "seconds (killed, out of memory) is ended as failed and the search goes on",
    )

    def __post_init__(self):
        super().__post_init__()
        if self.kind == "hyperband" and self.max_trials is not None:
            raise ValueError('max_trials does not apply to kind "hyperband" (give max_epochs).')
        if self.kind == "noise_scale" and self.max_trials is not None:
            raise ValueError(
                f'max_trials does not apply to kind "noise_scale" (one probe run), got '
                f"max_trials={self.max_trials!r}."
            )
        if self.kind != "noise_scale" and self.target_loss is not None:
            raise ValueError(
                f"target_loss={self.target_loss!r} ends the noise-scale probe: it applies to "
                f'kind "noise_scale" only, not {self.kind!r} (remove target_loss or probe).'
            )
        if self.kind != "hyperband" and self.max_epochs is not None:
            raise ValueError(f'max_epochs only applies to kind "hyperband", not {self.kind!r}.')
