"""``tuner_fn`` for the stock ``tfx.components.Tuner``: search accumulation settings.

Use it with TFX's own Tuner component (no custom component needed)::

    tuner = tfx.components.Tuner(
        tuner_fn="ga_tfx.components.tuner.tuner_fn.tuner_fn",   # or a module_file re-exporting it
        examples=transform.outputs["transformed_examples"],
        transform_graph=transform.outputs["transform_graph"],
        train_args=tfx.proto.TrainArgs(num_steps=100),   # windows, see below
        eval_args=tfx.proto.EvalArgs(num_steps=10),      # evaluation batches
        custom_config={
            "model_fn": "my_pkg.my_model",               # same module as the ga-tfx Trainer's
            "ga_tfx": {"micro_batch_size": 32, "label_key": "tips_xf"},
            "ga_tfx_search": {"accum_steps": [1, 2, 4, 8], "agc_clip_factor": [0.01, 0.1]},
            "tuner": {"kind": "random", "max_trials": 8, "objective": "val_loss"},
        })
    trainer = GradientAccumulationTrainer(..., hyperparameters=tuner.outputs[
        "best_hyperparameters"])

``custom_config`` keys (any other key is a ``ValueError`` naming it, raised before any trial):

``model_fn``       (required) dotted path of the module the ga-tfx Trainer also uses. If it
                   defines ``build_tunable_model(hp)`` that is called with the Keras Tuner
                   ``hp`` (it may declare its own hyperparameters); otherwise its
                   ``build_model(hparams)`` (or ``build_keras_model``) is called with the plain
                   ``{name: value}`` dict of the trial's values, exactly what the Trainer hands
                   it from the best hyperparameters. ``"pkg.module.build_model"`` also works.
``ga_tfx``         (required) the Trainer's settings dict (stock-Trainer ``custom_config``
                   route), checked the same way: ``label_key`` is required; ``accum_steps``
                   may be left out (it is searched). Used here: ``label_key``,
                   ``micro_batch_size`` (the search's micro-batch size unless
                   ``ga_tfx_search`` gives one), ``agc_clip_factor`` (a fixed factor for every
                   trial when AGC is not searched), ``replace_batchnorm``, ``partial_window``,
                   ``mixed_precision``, ``strategy`` and ``shuffle``.
``ga_tfx_search``  (optional) :class:`ga_tfx.tuning.AccumulationSearchSpace` arguments
                   (default: ``accum_steps`` in 1, 2, 4).
``tuner``          (optional) ``kind`` (``"random"`` (default), ``"bayesian"``,
                   ``"hyperband"``, or ``"noise_scale"``: no search, see below),
                   ``objective`` (default ``"val_loss"`` when ``eval_args.num_steps`` is set,
                   else ``"loss"``), ``max_trials`` (random and bayesian, default 10),
                   ``max_epochs`` (hyperband, default 3), ``seed`` (default 0: the same
                   search every run), ``trials_file``, ``stale_trial_seconds``,
                   ``target_loss`` (``noise_scale`` only; see ``options.py``).

Every trial logs the gradient noise scale (``log_noise_scale``): its ``noise_scale`` (B_simple at
the trial's end, in samples; none for ``accum_steps=1`` on one device) is recorded beside its
score in ``trials_file``.

``kind: "noise_scale"`` replaces the trials by one probe run
(:class:`ga_tfx.tuning.NoiseScaleProbe`): the Trainer's settings (``ga_tfx``: its
``accum_steps``, >= 2, default the largest searched, ``micro_batch_size`` and
``agc_clip_factor``) train for ``train_args.num_steps`` windows while the noise scale is
measured, and the best hyperparameters are ``accum_steps`` = the ``ga_tfx_search`` value
nearest (log2 scale) to ``B_simple / micro_batch_size``. The search space may then list
``accum_steps`` and one ``micro_batch_size`` only. ``trials_file`` gets the probe's curve and
the recommendation with its reason (``"probe"``). With ``target_loss`` the probe ends at
the first evaluation whose ``val_loss`` is at or below it (:class:`ga_tfx.tuning.StopAtLoss`),
``train_args.num_steps`` windows being the cap: it is evaluated about
:data:`PROBE_TARGET_CHECKS` times, every :func:`probe_check_windows` windows (short epochs),
and its record says whether it reached the target.

The budget rule (``train_args.num_steps``)
------------------------------------------
As for the Trainer, ``train_args.num_steps`` counts **windows** (an update each, unless
skipped as non-finite); here they are the windows of the trial with the *largest* effective
batch of the search space,
``B_max = max(accum_steps) * max(micro_batch_size)``. Every trial gets the same budget in
samples, ``S = num_steps * B_max`` per epoch (one epoch, or Hyperband's epochs): a trial with
micro-batch ``b`` trains ``S / b`` micro-batches and so makes ``S / (accum_steps * b)``
windows (``num_steps`` for the largest effective batch, ``4 * num_steps`` for one four times
smaller). ``S`` must be a whole number of micro-batches for every micro-batch size searched, a
``ValueError`` otherwise; when ``accum_steps`` does not divide ``S / b`` the trial's last
window is partial and follows ``partial_window``. Trials record ``effective_batch_size``,
``samples_seen`` and ``updates`` (applied windows) in their metrics.

``eval_args.num_steps`` counts evaluation batches of the largest micro-batch size searched
(the Trainer's evaluation micro-batches when one size is searched), the same examples for
every trial; without it there is no evaluation (the datasets repeat endlessly).

Data: micro-batches made exactly as the Trainer makes them
(:func:`ga_tfx.components.trainer.data.micro_batches`:
``fn_args.data_accessor.tf_dataset_factory`` with the transformed schema when there is a
``transform_graph``, else the ``schema`` input; the order fixed by ``shuffle_seed``), built per
trial at the trial's micro-batch size. The tuner writes into ``fn_args.working_dir`` under the
project ``ga_tfx_tuner`` (not overwritten: a re-run resumes the search). Distributed Keras Tuner
works as usual through ``KERASTUNER_TUNER_ID`` / ``KERASTUNER_ORACLE_IP`` /
``KERASTUNER_ORACLE_PORT``; a killed worker's trial is ended as failed after
``stale_trial_seconds`` without a heartbeat and the other workers spend the budget
(:mod:`ga_tfx.components.tuner.heartbeat`).

Failed trials: a trial whose model building or training raises (out of memory,
``tf.errors.ResourceExhaustedError``, included) or whose loss is not finite is ended as failed
(recorded with ``"status": "failed"`` in ``trials_file``) and the search goes on; the best
*completed* trial is written to ``best_hyperparameters.txt``. Keras Tuner stops the search
after 3 consecutive failed trials.

The ga-tfx Trainer takes ``accum_steps``, ``agc_clip_factor`` (and "AGC off" when the search
chose it) and ``micro_batch_size`` from the best hyperparameters (see
:mod:`ga_tfx.components.trainer.run_fn`); every value, ``learning_rate`` included, also reaches its
``build_model(hparams)``. ``lr_scaling`` is not re-applied by the Trainer: scale the rate in
``build_model`` if you search with it.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx.components import keys
from ga_tfx.components.trainer import data, distribution, user_module
from ga_tfx.components.trainer import settings as settings_lib
from ga_tfx.components.trainer.model import mixed_precision_policy
from ga_tfx.components.tuner import trials
from ga_tfx.components.tuner.config import (  # re-exported: the custom_config, checked
    CONFIG_KEYS,
    TunerConfig,
    parse_config,
)
from ga_tfx.tuning import AccumulationHyperModel, AccumulationSearchSpace, NoiseScaleProbe

import dataclasses
import importlib
import numbers
import os
from typing import Any, Dict, Optional

import keras_tuner
from tfx.components.tuner.component import TunerFnResult

PROJECT_NAME = "ga_tfx_tuner"
# A probe with a target loss is evaluated about this many times over its cap (short epochs).
PROBE_TARGET_CHECKS = 10
TUNABLE_MODEL_FN = "build_tunable_model"


def trial_budget(num_steps: Optional[int], search_space: AccumulationSearchSpace) -> int:
    """Samples per epoch of every trial: ``num_steps * max effective batch`` (module docstring).

    ``num_steps`` (``train_args.num_steps``) is the number of windows of the trial with the
    largest effective batch. Raises ``ValueError`` when it is unset or the budget is not a
    whole number of micro-batches for every micro-batch size searched.
    """
    if (
        isinstance(num_steps, bool)
        or not isinstance(num_steps, numbers.Integral)
        or (num_steps < 1)
    ):
        raise ValueError(
            "train_args.num_steps (windows of the trial with the largest "
            f"effective batch) must be set and > 0, got {num_steps!r}."
        )
    samples = int(num_steps) * search_space.max_effective_batch_size
    uneven = [b for b in search_space.micro_batch_size if samples % b]
    if uneven:
        raise ValueError(
            f"The trial budget of {samples} samples (train_args.num_steps="
            f"{num_steps} x largest effective batch "
            f"{search_space.max_effective_batch_size}) is not a whole number of "
            f"micro-batches of {uneven}: trials would not see equal samples. "
            "Change num_steps or the micro-batch sizes."
        )
    return samples


def probe_check_windows(num_steps: int) -> int:
    """Windows between two evaluations of a probe with a ``target_loss``: the largest divisor
    of ``num_steps`` (the cap) not above ``num_steps / PROBE_TARGET_CHECKS`` (rounded up), so
    that the probe is evaluated about ``PROBE_TARGET_CHECKS`` times and its epochs add up to
    the cap exactly."""
    most = max(1, -(-num_steps // PROBE_TARGET_CHECKS))
    return max(d for d in range(1, most + 1) if num_steps % d == 0)


def load_hp_build_model(model_fn: str, transform_output=None):
    """``build(hp) -> compiled keras.Model`` from the ``model_fn`` module (docstring)."""
    module_name, _, attr = model_fn.rpartition(".")
    if attr == TUNABLE_MODEL_FN:
        return _import(module_name, attr)
    if attr not in user_module.MODEL_FN_NAMES:
        try:
            module = importlib.import_module(model_fn)
        except ImportError as error:
            raise ValueError(
                f"custom_config model_fn {model_fn!r} cannot be imported: {error}"
            ) from error
        if hasattr(module, TUNABLE_MODEL_FN):
            return getattr(module, TUNABLE_MODEL_FN)
    build_model = user_module.load_build_model(dotted_path=model_fn)

    def build_from_values(hp):
        # What the Trainer passes: {name: value} (and the Transform output when it is asked).
        return user_module.call_build_model(build_model, dict(hp.values), transform_output)

    return build_from_values


def tuner_fn(fn_args) -> TunerFnResult:
    """The TFX Tuner entry point: a Keras Tuner over :class:`AccumulationHyperModel`."""
    config = parse_config(fn_args.custom_config, fn_args.eval_steps)
    space, settings = config.search_space, config.settings
    probe = config.kind == "noise_scale"
    # The probe's budget: num_steps windows of the Trainer's effective batch; with a target
    # loss, the cap, in short epochs read by StopAtLoss.
    samples = trial_budget(
        fn_args.train_steps,
        dataclasses.replace(space, accum_steps=(settings.accum_steps,)) if probe else space,
    )
    epochs = 1
    if config.target_loss is not None:
        epochs = fn_args.train_steps // probe_check_windows(fn_args.train_steps)
        samples //= epochs
    schema, transform_output = data.schema_and_transform(fn_args)
    build = load_hp_build_model(config.model_fn, transform_output)
    strategy = distribution.make_strategy(settings.strategy)
    replicas = strategy.num_replicas_in_sync
    if min(space.micro_batch_size) < replicas:
        raise ValueError(
            f"micro_batch_size={min(space.micro_batch_size)} is smaller than the "
            f"{replicas} replicas of the strategy."
        )

    hypermodel = _PolicyHyperModel(
        build,
        space,
        replace_batchnorm=settings.replace_batchnorm,
        partial_window=settings.partial_window,
        agc_clip_factor=None if space.searches_agc() else settings.agc_clip_factor,
        mixed_precision=settings.mixed_precision,
        log_noise_scale=True,
    )
    common = dict(
        objective=config.objective,
        directory=fn_args.working_dir,
        project_name=PROJECT_NAME,
        overwrite=False,
        distribution_strategy=strategy if replicas > 1 else None,
        samples_per_trial=samples,
        trials_file=config.trials_file,
        stale_trial_seconds=config.stale_trial_seconds,
        run_id=os.path.basename(os.path.normpath(fn_args.working_dir or "")),
    )
    tuner = build_tuner(config, hypermodel, **common)

    def batches(files, micro_batch_size, shuffle):  # the Trainer's data path, any batch size
        return data.micro_batches(
            fn_args,
            files,
            dataclasses.replace(settings, micro_batch_size=micro_batch_size),
            schema,
            shuffle,
        )

    def train_micro_batches(micro_batch_size):
        return batches(fn_args.train_files, micro_batch_size, settings.shuffle)

    fit_kwargs: Dict[str, Any] = dict(
        x=train_micro_batches, samples_per_epoch=samples, epochs=epochs, verbose=2
    )
    if fn_args.eval_steps:
        fit_kwargs.update(
            validation_data=batches(fn_args.eval_files, max(space.micro_batch_size), False),
            validation_steps=fn_args.eval_steps,
        )
    return TunerFnResult(tuner=tuner, fit_kwargs=fit_kwargs)


def build_tuner(config: TunerConfig, hypermodel: AccumulationHyperModel, **kwargs: Any) -> Any:
    """The recording Keras Tuner of ``config.kind`` over ``hypermodel``, its oracle seeded from
    ``config.seed`` (:func:`trials.oracle_seed`: the same hyperparameters every run, seed 0
    included). ``kwargs``: the other ``keras_tuner.Tuner`` and recording arguments."""
    seed = trials.oracle_seed(config.seed)
    kwargs.setdefault("search_seed", config.seed)
    if config.kind == "noise_scale":
        return trials.recording_tuner(NoiseScaleProbe)(
            hypermodel,
            probe_accum_steps=config.settings.accum_steps,
            seed=seed,
            target_loss=config.target_loss,
            **kwargs,
        )
    if config.kind == "hyperband":
        return trials.recording_tuner(keras_tuner.Hyperband)(
            hypermodel, max_epochs=config.max_epochs, seed=seed, **kwargs
        )
    base = {"random": keras_tuner.RandomSearch, "bayesian": keras_tuner.BayesianOptimization}
    return trials.recording_tuner(base[config.kind])(
        hypermodel, max_trials=config.max_trials, seed=seed, **kwargs
    )


class _PolicyHyperModel(AccumulationHyperModel):
    """Builds each trial's model under the settings' Keras dtype policy."""

    def __init__(self, *args, mixed_precision="float32", **kwargs):
        super().__init__(*args, **kwargs)
        self.mixed_precision = mixed_precision

    def build(self, hp):
        with mixed_precision_policy(self.mixed_precision):
            return super().build(hp)


def _import(module_name, attr):
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as error:
        raise ValueError(
            f"custom_config model_fn: cannot load {attr} from {module_name!r}: {error}"
        ) from error
