"""The Tuner's ``custom_config``, checked: :func:`parse_config` makes a :class:`TunerConfig`.

The keys and what each holds are documented in :mod:`ga_tfx.components.tuner.tuner_fn` (the
function TFX's Tuner calls, which re-exports these names); every problem is a ``ValueError``
(or ``TypeError``) naming the key, raised before any trial.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx.components import keys
from ga_tfx.components.trainer import settings as settings_lib
from ga_tfx.components.tuner.options import (
    DEFAULT_MAX_EPOCHS,
    DEFAULT_MAX_TRIALS,
    DEFAULT_STALE_TRIAL_SECONDS,
    TunerOptions,
)
from ga_tfx.tuning import AccumulationSearchSpace

import dataclasses
from typing import Any, Mapping, Optional

CONFIG_KEYS = (keys.MODEL_FN, keys.GA_TFX, keys.GA_TFX_SEARCH, keys.TUNER)


@dataclasses.dataclass(frozen=True)
class TunerConfig:
    """``custom_config``, checked (see the module docstring)."""

    model_fn: str
    settings: settings_lib.AccumulationSettings
    search_space: AccumulationSearchSpace
    kind: str = "random"
    objective: str = "loss"
    max_trials: Optional[int] = None
    max_epochs: Optional[int] = None
    seed: Optional[int] = 0
    trials_file: Optional[str] = None
    stale_trial_seconds: float = DEFAULT_STALE_TRIAL_SECONDS
    target_loss: Optional[float] = None


def parse_config(
    custom_config: Optional[Mapping[str, Any]], eval_steps: Optional[int] = None
) -> TunerConfig:
    """Checks ``custom_config``; every problem is a ``ValueError`` (or ``TypeError``) naming
    the key."""
    if not isinstance(custom_config, Mapping):
        raise ValueError(
            'The ga-tfx tuner_fn needs custom_config with "model_fn" and "ga_tfx", '
            f"got {custom_config!r}."
        )
    unknown = sorted(set(custom_config) - set(CONFIG_KEYS))
    if unknown:
        raise ValueError(f"Unknown custom_config key(s) {unknown}; allowed: {list(CONFIG_KEYS)}.")
    missing = [key for key in (keys.MODEL_FN, keys.GA_TFX) if custom_config.get(key) is None]
    if missing:
        raise ValueError(
            f"custom_config is missing {missing} (model_fn: the module defining "
            "build_model; ga_tfx: the settings, at least label_key)."
        )
    model_fn = custom_config[keys.MODEL_FN]
    if not isinstance(model_fn, str) or not model_fn:
        raise ValueError(f"custom_config model_fn must be a dotted module path, got {model_fn!r}.")
    settings = dict(_mapping(custom_config[keys.GA_TFX], keys.GA_TFX))
    search = dict(_mapping(custom_config.get(keys.GA_TFX_SEARCH) or {}, keys.GA_TFX_SEARCH))
    if "micro_batch_size" not in search and settings.get("micro_batch_size") is not None:
        search["micro_batch_size"] = settings["micro_batch_size"]
    try:
        space = AccumulationSearchSpace.from_config(search)
    except (TypeError, ValueError) as error:
        raise type(error)(f"custom_config {keys.GA_TFX_SEARCH}: {error}") from error
    tuner = _mapping(custom_config.get(keys.TUNER) or {}, keys.TUNER)
    try:
        options = TunerOptions.from_mapping(tuner, where=f"custom_config {keys.TUNER}")
    except ValueError as error:
        raise type(error)(f"custom_config {keys.TUNER}: {error}") from error
    # Searched: a placeholder; the noise-scale probe runs at it (default: the largest searched).
    settings.setdefault(
        "accum_steps",
        max(space.accum_steps) if options.kind == "noise_scale" else space.accum_steps[0],
    )
    settings.setdefault("micro_batch_size", space.micro_batch_size[0])
    settings = settings_lib.from_dict(settings)
    objective = options.objective or ("val_loss" if eval_steps else "loss")
    if objective.startswith("val_") and not eval_steps:
        raise ValueError(
            f"custom_config tuner objective {objective!r} needs evaluation: set "
            "eval_args.num_steps."
        )
    if options.target_loss is not None and not eval_steps:
        raise ValueError(
            f"custom_config {keys.TUNER} target_loss={options.target_loss!r} is read from the "
            "probe's val_loss: set eval_args.num_steps."
        )
    if options.kind == "hyperband":
        max_trials, max_epochs = None, options.max_epochs or DEFAULT_MAX_EPOCHS
    elif options.kind == "noise_scale":
        max_trials, max_epochs = 1, None
        _check_probe(space, settings)
    else:
        max_trials, max_epochs = options.max_trials or DEFAULT_MAX_TRIALS, None
    return TunerConfig(
        model_fn=model_fn,
        settings=settings,
        search_space=space,
        kind=options.kind,
        objective=objective,
        max_trials=max_trials,
        max_epochs=max_epochs,
        seed=options.seed,
        trials_file=options.trials_file,
        stale_trial_seconds=options.stale_trial_seconds,
        target_loss=options.target_loss,
    )


def _check_probe(space: AccumulationSearchSpace, settings) -> None:
    """The noise-scale probe's rules: it recommends ``accum_steps`` only, and runs at the
    Trainer's ``accum_steps``, which must give 2 micro-batch gradients per window."""
    other = [
        f"{name}={value!r}"
        for name, value in (
            ("agc_clip_factor", space.agc_clip_factor),
            ("learning_rate", space.learning_rate),
        )
        if value is not None
    ]
    if len(space.micro_batch_size) > 1:
        other.append(f"micro_batch_size={list(space.micro_batch_size)!r}")
    if other:
        raise ValueError(
            f'custom_config {keys.GA_TFX_SEARCH}: tuner kind "noise_scale" chooses accum_steps '
            f"only; remove {', '.join(other)} (the probe runs the Trainer's settings: give "
            f"them in {keys.GA_TFX})."
        )
    if settings.accum_steps < 2:
        raise ValueError(
            f"custom_config {keys.GA_TFX} accum_steps={settings.accum_steps}: tuner kind "
            '"noise_scale" probes at the Trainer\'s accum_steps, which must be >= 2 (the noise '
            "scale needs at least 2 micro-batch gradients per update)."
        )


def _mapping(value, name):
    if not isinstance(value, Mapping):
        raise ValueError(f"custom_config {name} must be a dict, got {value!r}.")
    return value
