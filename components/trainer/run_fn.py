"""The ga-tfx ``run_fn``: train a user's Keras model with exact gradient accumulation.

The user's module defines ``build_model(hparams)`` (or ``build_keras_model``) returning a
*compiled* tf.keras model whose inputs are the transformed features by name; ``hparams`` is a
plain ``{name: value}`` dict (the Tuner's best values, else ``{}``). This module does the rest:

1. micro-batches of ``micro_batch_size`` from ``fn_args.data_accessor.tf_dataset_factory``
   (transformed schema when there is a transform graph), repeated endlessly;
2. BatchNormalization -> ``ga_tfx.AccumBatchNormalization`` (``replace_batchnorm``), weights
   copied from ``base_model`` by layer name when the Trainer has one (warm start), then
   ``ga_tfx.wrap_model(accum_steps=K)``, built under the chosen strategy and dtype policy;
3. ``fit`` with ``steps_per_epoch = windows_per_epoch * K`` micro-batches, so that
   ``train_args.num_steps`` counts **windows** (of ``K * micro_batch_size`` samples; an update
   each, unless skipped as non-finite);
   ``eval_args.num_steps`` counts evaluation micro-batches (no evaluation when unset: the
   datasets repeat endlessly);
4. TensorBoard logs in ``model_run_dir`` (Keras' own plus ``ga_tfx/`` scalars per window) and
   resumable checkpoints every ``checkpoint_every_updates`` updates or
   ``checkpoint_every_seconds`` seconds (whichever comes first, mid-epoch too), on SIGTERM or
   SIGINT, and after the last window (:mod:`~ga_tfx.components.trainer.checkpoints`), in a
   directory shared by all attempts of the same training
   (:func:`~ga_tfx.components.trainer.checkpoints.resume_directory`): a Trainer re-run after a
   crash restores the latest one (weights, optimizer, accumulation and AccumBN state) and skips
   the micro-batches it had trained on, so it ends with the weights an uninterrupted run would
   have had; on a signal the run stops at the next window end with
   :class:`~ga_tfx.components.trainer.preemption.TrainingInterrupted`; the checkpoints are
   deleted once the model is exported;
5. exports ``ga_tfx.unwrap_model(model)`` to ``serving_model_dir`` with ``serving_default``
   (serialized raw tf.Example -> transform -> model) and ``transform_features``, and writes the
   run record ``ga_tfx_run.json`` into ``model_run_dir``
   (:mod:`~ga_tfx.components.trainer.run_record`).

Settings precedence, highest first: the Tuner's hyperparameters (only ``accum_steps``,
``agc_clip_factor`` -- ``agc=False`` turns AGC off -- and ``micro_batch_size``, when present in
``fn_args.hyperparameters``), then the component's
settings (its execution properties, or ``custom_config["ga_tfx"]`` with the stock Trainer),
then the defaults of :class:`~ga_tfx.components.trainer.settings.AccumulationSettings`.

With the stock ``tfx.components.Trainer``, pass ``run_fn="ga_tfx.components.trainer.run_fn.run_fn"``
and ``custom_config={"ga_tfx": {...settings...}, "model_fn": "my_pkg.my_module"}``.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx._keras import keras, tf
from ga_tfx.components import keys, stack
from ga_tfx.components.trainer import (
    checkpoints,
    data,
    distribution,
    export,
    fit_windows,
    preemption,
    resume,
    run_log,
    run_record,
    user_module,
)
from ga_tfx.components.trainer import model as model_lib
from ga_tfx.components.trainer import settings as settings_lib
from ga_tfx.window.replay import replay

import contextlib
import dataclasses
import os

from absl import logging
from tfx.dsl.io import fileio


def run_fn(fn_args):
    """TFX entry point for the stock Trainer: settings from ``custom_config``."""
    config = fn_args.custom_config or {}
    if keys.GA_TFX not in config or keys.MODEL_FN not in config:
        raise ValueError(
            f'custom_config needs "{keys.GA_TFX}" (the settings) and '
            f'"{keys.MODEL_FN}" (the module defining build_model), got keys '
            f"{sorted(config)}."
        )
    settings = settings_lib.from_dict(config[keys.GA_TFX])
    build_model = user_module.load_build_model(dotted_path=config[keys.MODEL_FN])
    train_and_export(
        fn_args,
        settings,
        build_model,
        make_serving_fn=user_module.load_optional(
            export.SERVING_FN_NAME, dotted_path=config[keys.MODEL_FN]
        ),
    )


def train_and_export(fn_args, settings, build_model, *, stop=None, make_serving_fn=None):
    """Trains ``build_model``'s model as described in the module docstring; returns it
    (the plain, unwrapped Keras model that was exported).

    Which earlier attempt's checkpoints a run resumes from is decided by the training's
    identity: its inputs' and ``build_model``'s module's content, the ga-tfx version, the
    settings and hyperparameters (:mod:`~ga_tfx.components.trainer.resume`), and the folder
    is locked while the run trains (:mod:`~ga_tfx.components.trainer.resume_lock`).
    ``stop``: a :class:`~ga_tfx.components.trainer.preemption.StopRequest` to use instead of
    SIGTERM/SIGINT handlers (tests); by default the handlers are installed for the call.
    ``make_serving_fn``: the module's own ``make_serving_fn(model, transform_output)`` for
    ``serving_default`` (see :mod:`~ga_tfx.components.trainer.export`), if it has one.
    Raises :class:`~ga_tfx.components.trainer.preemption.TrainingInterrupted` after saving a
    checkpoint when a stop is requested.

    The steps, each a function of its own: :func:`run_settings`, :func:`run_strategy`,
    :func:`fit_memory_budget`, :func:`~ga_tfx.components.trainer.resume.resume_folder`,
    :func:`build_model_in`,
    :func:`train`, :func:`export_model`, :func:`record`.
    """
    run = run_settings(fn_args, settings)
    strategy = run_strategy(run.settings, run.windows)
    schema, transform_output = data.schema_and_transform(fn_args)
    run, choice = fit_memory_budget(fn_args, run, schema, build_model, transform_output, strategy)
    settings = run.settings
    signals = contextlib.nullcontext(stop) if stop is not None else preemption.stop_on_signals()
    with resume.resume_folder(fn_args, run, build_model, strategy) as lock, signals as stop:
        plain, model, logger, resumed, metrics = _train_and_export(
            fn_args,
            run,
            strategy,
            build_model,
            transform_output,
            schema,
            lock,
            stop,
            make_serving_fn,
        )
        lock.stop_heartbeat()  # the folder is deleted next: nothing may write it again
        record(fn_args, run, strategy, lock.folder, model, logger, resumed, metrics, choice)
    return plain


def _train_and_export(
    fn_args, run, strategy, build_model, transform_output, schema, lock, stop, make_serving_fn
):
    """Steps 4 to 6 in the held resume folder (``lock.folder``): returns (the exported plain
    model, the accumulation model, the logger, the windows resumed from, the last metrics)."""
    settings = run.settings
    with model_lib.mixed_precision_policy(settings.mixed_precision):
        model = build_model_in(strategy, build_model, run, fn_args.base_model, transform_output)
        checkpoint = checkpoints.UpdateCheckpoint(
            model,
            lock.folder,
            total_windows=run.windows,
            every_updates=settings.checkpoint_every_updates,
            every_seconds=settings.checkpoint_seconds,
            stop=stop,
            before_save=lock.check,
        )
        logger = run_log.AccumulationLogger(
            os.path.join(fn_args.model_run_dir, "ga_tfx"), total_windows=run.windows
        )
        try:
            resumed, metrics = train(model, fn_args, run, schema, checkpoint, logger)
            checkpoint.save_final()  # the final state: an export killed later re-runs from here
            plain = export_model(
                model, fn_args, settings, schema, transform_output, make_serving_fn
            )
            checkpoint.save_final()  # a stop requested during the export: keep the checkpoints
        finally:
            checkpoint.close()
    return plain, model, logger, resumed, metrics


@dataclasses.dataclass(frozen=True)
class Run:
    """What one Trainer run trains: its ``settings`` (the Tuner's hyperparameters applied),
    the ``hparams`` dict ``build_model`` gets, ``windows`` (``train_args.num_steps``: the run's
    length in windows, an update each unless skipped) and ``per_epoch`` (windows between two
    evaluations)."""

    settings: settings_lib.AccumulationSettings
    hparams: dict
    windows: int
    per_epoch: int


def run_settings(fn_args, settings) -> Run:
    """Step 1, settings: the Tuner's hyperparameters over ``settings`` (precedence in the
    module docstring) and the run's length from ``fn_args.train_steps``; ``SettingError`` when
    ``windows_per_epoch`` does not divide it."""
    settings = settings.with_hyperparameters(fn_args.hyperparameters)
    windows = fn_args.train_steps
    return Run(
        settings=settings,
        hparams=settings_lib.hyperparameter_values(fn_args.hyperparameters),
        windows=windows,
        per_epoch=settings_lib.check_windows_per_epoch(windows, settings.windows_per_epoch),
    )


def run_strategy(settings, windows: int):
    """Step 2, strategy: the ``tf.distribute`` strategy of ``settings.strategy``; ``ValueError``
    when a micro-batch would leave a replica without an example."""
    strategy = distribution.make_strategy(settings.strategy)
    if settings.micro_batch_size < strategy.num_replicas_in_sync:
        raise ValueError(
            f"micro_batch_size={settings.micro_batch_size} is smaller than the "
            f"{strategy.num_replicas_in_sync} replicas of the strategy: every "
            "replica needs at least one example per micro-batch."
        )
    logging.info(
        "ga_tfx: %s, %d replicas, %d windows of %d samples",
        settings,
        strategy.num_replicas_in_sync,
        windows,
        settings.effective_batch_size,
    )
    return strategy


def build_model_in(strategy, build_model, run: Run, base_model_dir, transform_output):
    """Step 4, build: the user's model, AccumBN in, warm-started from ``base_model_dir``,
    wrapped for accumulation, under ``strategy``'s scope
    (:func:`~ga_tfx.components.trainer.model.accumulation_model`)."""
    with strategy.scope():
        return model_lib.accumulation_model(
            build_model,
            run.hparams,
            run.settings,
            base_model_dir=base_model_dir,
            transform_output=transform_output,
        )


def train(model, fn_args, run: Run, schema, checkpoint, logger):
    """Step 5, train: restores the latest checkpoint, then ``fit`` of the windows not done
    (:func:`~ga_tfx.components.trainer.fit_windows.fit_windows`, again after an
    out-of-memory recovery); returns (the windows the resumed checkpoint holds, 0 for none;
    the last epoch's logs)."""
    settings = run.settings
    evaluation = data.micro_batches(fn_args, fn_args.eval_files, settings, schema, False)
    resumed = checkpoint.restore()
    if resumed:
        logging.info("ga_tfx: resuming after window %d of %d", resumed, run.windows)
    callbacks = fit_windows.callbacks_of(fn_args.model_run_dir, logger, checkpoint)
    # After an out-of-memory recovery (the window discarded, the micro-batch halved: same
    # samples per update) fit cannot read the window again: the plan again, from the first
    # window not done (replay).
    metrics = replay(
        lambda: fit_windows.fit_windows(
            model,
            fn_args,
            settings,
            schema,
            evaluation,
            checkpoint,
            run.windows,
            run.per_epoch,
            callbacks,
        ),
        lambda error: logging.warning("ga_tfx: %s", error),
    )
    return resumed, metrics


def export_model(model, fn_args, settings, schema, transform_output, make_serving_fn):
    """Step 6, export: the unwrapped model to ``fn_args.serving_model_dir`` with
    ``serving_default`` (raw tf.Example in) and ``transform_features``; returns it."""
    plain = ga_tfx.unwrap_model(model)
    raw_label_keys = (
        (settings.raw_label_key,)
        if settings.raw_label_key
        else export.label_only_raw_features(transform_output, settings.label_key)
    )
    export.export_serving_model(
        plain, fn_args.serving_model_dir, transform_output, schema, raw_label_keys, make_serving_fn
    )
    return plain


def record(fn_args, run: Run, strategy, resume_dir, model, logger, resumed, metrics, choice):
    """Step 7, record: on the chief (multi-worker: the other workers never wrote there), the
    checkpoints deleted (exported: a later run of the same training starts over) and the run
    record written to ``fn_args.model_run_dir`` (:mod:`~ga_tfx.components.trainer.run_record`).
    ``resumed``: the windows the resumed checkpoint held (0: none; the record's
    ``resumed_from_window``); ``metrics``: the last epoch's logs;
    ``choice``: the memory budget's (None: no budget)."""
    settings, core = run.settings, model.window_core
    if distribution.is_chief(strategy):
        fileio.rmtree(resume_dir)
        run_record.write(
            fn_args.model_run_dir,
            run_record.RunRecord(
                windows=run.windows,
                windows_this_run=run.windows - resumed,
                resumed_from_window=resumed or None,
                effective_batch_size=settings.effective_batch_size,
                micro_batch_size=settings.micro_batch_size,
                accum_steps=settings.accum_steps,
                replicas=strategy.num_replicas_in_sync,
                skipped_windows=core.skipped_windows if core else 0,
                samples_per_second=logger.samples_per_second,
                final_metrics=metrics,
                noise_scale=logger.noise_scale,
                accum_schedule_used=logger.schedule_used or None,
                micro_batch_split=core.micro_batch_split if core else 1,
                micro_batch_choice=choice.explain() if choice is not None else None,
                stack=stack.versions(),
            ),
        )


def fit_memory_budget(fn_args, run: Run, schema, build_model, transform_output, strategy):
    """Step 2b, memory budget: with ``settings.memory_budget``, ``run`` with the micro-batch
    that fits it and the effective batch kept (:func:`ga_tfx.fit_micro_batch`), and the choice;
    else ``(run, None)``. Measured on the first effective batch of training examples with the
    user's model (built once for the probe, under the run's strategy and dtype policy; per
    device)."""
    settings = run.settings
    if not settings.memory_budget:
        return run, None
    examples = data.micro_batches(fn_args, fn_args.train_files, settings, schema, False).take(
        settings.accum_steps
    )
    parts = list(examples)
    x = tf.nest.map_structure(lambda *t: tf.concat(t, 0), *[p[0] for p in parts])
    y = tf.concat([p[1] for p in parts], 0)
    with model_lib.mixed_precision_policy(settings.mixed_precision), strategy.scope():
        probe = user_module.call_build_model(build_model, run.hparams, transform_output)
        choice = ga_tfx.fit_micro_batch(
            probe,
            x,
            y,
            settings.effective_batch_size,
            settings.memory_budget,
            replicas=strategy.num_replicas_in_sync,
        )
    logging.info("ga_tfx: memory budget: %s", choice.explain())
    fitted = dataclasses.replace(
        settings, micro_batch_size=choice.micro_batch, accum_steps=choice.accum_steps
    )
    return dataclasses.replace(run, settings=fitted), choice
