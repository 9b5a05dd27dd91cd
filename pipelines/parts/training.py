"""The training parts of the pipeline: the Trainer's settings, the optional Tuner, the Trainer.

The Trainer (:class:`~ga_tfx.components.trainer.GradientAccumulationTrainer`) trains the user
code's model on Transform's output with the options' accumulation settings; with ``tune``, the
stock TFX Tuner (:mod:`ga_tfx.components.tuner.tuner_fn`) first searches ``accum_steps`` and the
AGC clip factor (or runs the noise-scale probe) and its best values override the Trainer's.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx._schema import values_for
from ga_tfx.components import keys
from ga_tfx.components.trainer import GradientAccumulationTrainer
from ga_tfx.components.trainer.settings import AccumulationSettings
from ga_tfx.components.tuner import tuner_fn
from ga_tfx.components.tuner.options import TunerOptions
from ga_tfx.pipelines.options import LABEL_SHUFFLE_BUFFER
from ga_tfx.pipelines.parts.data import user_code_args

import os
from typing import Any, Dict

from tfx import v1 as tfx

TUNER_FN = "ga_tfx.components.tuner.tuner_fn.tuner_fn"
TUNER_OBJECTIVE = "val_accuracy"


def trials_file(pipeline_root: str) -> str:
    """Where the Tuner appends its finished trials (read by the tuning report)."""
    return os.path.join(pipeline_root, "Tuner", "trials.jsonl")


def trainer_settings(code, run, windows_per_epoch: int) -> Dict[str, Any]:
    """The Trainer's settings: those the accumulation options ``run`` carry (each declared
    ``like()`` a Trainer setting: ``accum_steps`` is the run's first K), the label and the
    epoch (``windows_per_epoch`` windows)."""
    settings = dict(
        values_for(run, AccumulationSettings),
        label_key=code.label_key,
        raw_label_key=code.raw_label_key,
        windows_per_epoch=windows_per_epoch,
    )
    if code.curated_schema is None:  # any CSV: one shuffle over the whole training split
        settings["shuffle_buffer"] = LABEL_SHUFFLE_BUFFER
    return settings


def tuner(code, run, tuning, settings: Dict[str, Any], transform, pipeline_root: str):
    """The stock TFX Tuner over Transform's output: a search of ``tuning.tuning_trials`` trials
    or the noise-scale probe (``tuning.tune_strategy``), seeded by ``run.seed``, its trials
    appended to :func:`trials_file`. ``run``, ``tuning``: the :class:`AccumulationOptions` and
    :class:`TuningOptions`; ``settings``: the Trainer's (:func:`trainer_settings`)."""
    if code.model_fn is None:
        raise ValueError(
            "tune searches with the model of an installed module (model_fn); "
            f"a module_file ({code.module_file!r}) cannot be tuned here."
        )
    config = tuner_config(code, run, tuning, settings, pipeline_root)
    # Checked now, so that a bad search space fails when the pipeline is built.
    parsed = tuner_fn.parse_config(config, eval_steps=run.eval_steps)
    tuner_fn.trial_budget(tuning.tuning_windows, parsed.search_space)
    return tfx.components.Tuner(
        examples=transform.outputs["transformed_examples"],
        transform_graph=transform.outputs["transform_graph"],
        tuner_fn=TUNER_FN,
        train_args=tfx.proto.TrainArgs(num_steps=tuning.tuning_windows),
        eval_args=tfx.proto.EvalArgs(num_steps=run.eval_steps),
        custom_config=config,
    )


def tuner_config(code, run, tuning, settings: Dict[str, Any], pipeline_root: str):
    """The Tuner's ``custom_config``: the model, the Trainer's settings a trial uses, the search
    space and the Tuner's own options."""
    probe = tuning.probes
    # The same search every run of the same command: its seed is the run's (--seed).
    tuner_options = {
        "objective": TUNER_OBJECTIVE,
        "seed": run.seed,
        "trials_file": trials_file(pipeline_root),
    }
    if probe:  # one probe run of the Trainer's settings (its AGC factor included)
        tuner_options["kind"] = "noise_scale"
    else:
        tuner_options["max_trials"] = tuning.tuning_trials
    # The Tuner's own options (e.g. the probe's target loss), when given.
    tuner_options.update(
        {k: v for k, v in values_for(tuning, TunerOptions).items() if v is not None}
    )
    search_agc = (
        None
        if probe or tuning.search_agc_clip_factor is None
        else list(tuning.search_agc_clip_factor)
    )
    # A trial trains tuning_windows, not the Trainer's epochs; a search sets the AGC factor.
    ga_settings = dict(settings)
    del ga_settings["windows_per_epoch"]
    if not probe:
        del ga_settings["agc_clip_factor"]
    return {
        keys.MODEL_FN: code.model_fn,
        keys.GA_TFX: ga_settings,
        keys.GA_TFX_SEARCH: {
            "accum_steps": list(tuning.search_accum_steps),
            "agc_clip_factor": search_agc,
            "micro_batch_size": run.micro_batch_size,
        },
        keys.TUNER: tuner_options,
    }


def trainer(
    code, run, settings: Dict[str, Any], transform, tuner, windows, resume_root, vertex=None
):
    """The ga-tfx Trainer: ``windows`` windows over Transform's output with ``settings``
    (:func:`trainer_settings`), evaluated on ``run.eval_steps`` micro-batches, the Tuner's best
    hyperparameters when ``tuner`` is not None, its resumable checkpoints under
    ``resume_root``; a Vertex AI custom job of several replicas when ``vertex`` (a
    :class:`~ga_tfx.components.trainer.vertex_training.VertexTraining`) is given.
    ``windows``: an int (``train_args.num_steps``), or a compiled job's
    ``tfx.dsl.experimental.RuntimeParameter`` (the Trainer's int ``train_windows``: a runtime
    parameter cannot be a field of the ``TrainArgs`` proto)."""
    length = (
        dict(train_windows=windows)
        if isinstance(windows, tfx.dsl.experimental.RuntimeParameter)
        else dict(train_args=tfx.proto.TrainArgs(num_steps=windows))
    )
    make = GradientAccumulationTrainer if vertex is None else vertex.trainer
    return make(
        examples=transform.outputs["transformed_examples"],
        transform_graph=transform.outputs["transform_graph"],
        hyperparameters=tuner.outputs["best_hyperparameters"] if tuner is not None else None,
        **user_code_args(code, "model_fn"),
        **length,
        eval_args=tfx.proto.EvalArgs(num_steps=run.eval_steps),
        resume_root=resume_root,
        **settings,
    )
