"""``GradientAccumulationTrainer``: a drop-in ``tfx.components.Trainer`` with ga-tfx training.

Same inputs (examples, transform_graph, schema, base_model, hyperparameters, and from TFX 1.21
statistics) and outputs (model, model_run) as the stock Trainer of the installed TFX; the module
file defines ``build_model(hparams)`` instead of ``run_fn`` (see
:mod:`ga_tfx.components.trainer.run_fn`). The accumulation settings are primitive execution
properties, so the component compiles for Kubeflow.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx._schema import required, specs
from ga_tfx.components import keys
from ga_tfx.components.trainer import executor
from ga_tfx.components.trainer import settings as settings_lib

from typing import Any, Dict, Optional, Union

from tfx import types
from tfx import version as tfx_version
from tfx.components.util import udf_utils
from tfx.dsl.components.base import base_component, executor_spec
from tfx.orchestration import data_types
from tfx.proto import trainer_pb2
from tfx.types import standard_artifacts
from tfx.types import standard_component_specs as specs_lib
from tfx.types.component_spec import ExecutionParameter
from tfx.utils import json_utils

# TFX 1.21's Trainer takes StatisticsGen's output (fn_args.num_examples); 1.16's has no such input.
STATISTICS_KEY: Optional[str] = (
    "statistics" if "statistics" in specs_lib.TrainerSpec.INPUTS else None
)


def _setting_parameters() -> Dict[str, ExecutionParameter]:
    """One ``ExecutionParameter`` per declared setting (its primitive type; required ones are
    not optional), derived from
    :class:`~ga_tfx.components.trainer.settings.AccumulationSettings`."""
    needed = set(required(settings_lib.AccumulationSettings))
    return {
        name: ExecutionParameter(type=spec.exec_property_type, optional=name not in needed)
        for name, spec in specs(settings_lib.AccumulationSettings).items()
    }


class GradientAccumulationTrainerSpec(specs_lib.TrainerSpec):
    """TrainerSpec plus the accumulation settings (required ones are not optional)."""

    PARAMETERS = dict(
        specs_lib.TrainerSpec.PARAMETERS,
        **_setting_parameters(),
        # Dotted path of the module (or function) defining build_model, instead of module_file.
        **{keys.MODEL_FN_PROPERTY: ExecutionParameter(type=str, optional=True)},
        # The length in windows instead of train_args.num_steps: an int, so that a compiled job
        # can take it as a runtime parameter (TFX's RuntimeParameter holds an int, a float or a
        # str; train_args is a TrainArgs proto, which it could only hold as its whole JSON).
        **{keys.TRAIN_WINDOWS_PROPERTY: ExecutionParameter(type=int, optional=True)},
    )


class GradientAccumulationTrainer(base_component.BaseComponent):
    """Trains ``build_model(hparams)`` with exact gradient accumulation.

    The model comes from ``module_file`` (a file, packaged like the stock Trainer's) or from
    ``model_fn``, the dotted path of an installed module defining ``build_model`` (or of the
    function itself): exactly one of them.

    The effective batch is ``accum_steps`` micro-batches of ``micro_batch_size``; give either
    ``accum_steps`` or ``effective_batch_size`` (a multiple of ``micro_batch_size``, from which
    ``accum_steps`` is derived). ``train_args.num_steps`` counts windows of
    ``accum_steps * micro_batch_size`` samples (an update each, unless skipped as non-finite).
    Settings are checked here: a bad value raises ``ValueError`` naming the field.
    """

    SPEC_CLASS = GradientAccumulationTrainerSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

    def __init__(
        self,
        examples: types.BaseChannel,
        *,
        module_file: Optional[Union[str, data_types.RuntimeParameter]] = None,
        model_fn: Optional[str] = None,
        effective_batch_size: Optional[int] = None,
        transform_graph: Optional[types.BaseChannel] = None,
        schema: Optional[types.BaseChannel] = None,
        base_model: Optional[types.BaseChannel] = None,
        hyperparameters: Optional[types.BaseChannel] = None,
        train_args: Optional[trainer_pb2.TrainArgs] = None,
        eval_args: Optional[trainer_pb2.EvalArgs] = None,
        custom_config: Optional[Dict[str, Any]] = None,
        statistics: Optional[types.BaseChannel] = None,
        train_windows: Optional[Union[int, data_types.RuntimeParameter]] = None,
        **settings: Any,
    ):
        """``settings``: the fields of
        :class:`~ga_tfx.components.trainer.settings.AccumulationSettings` (``micro_batch_size``,
        ``label_key`` and ``accum_steps`` -- or ``effective_batch_size`` -- required).
        ``statistics`` (StatisticsGen's output, TFX 1.21 and later, as the stock Trainer):
        ``fn_args.num_examples`` per split for a ``build_model`` module. ``train_windows``:
        the length in windows instead of ``train_args.num_steps`` (an int, or a
        ``tfx.dsl.experimental.RuntimeParameter`` of ``ptype=int`` that a compiled job's run
        sets; not both)."""
        if statistics is not None and STATISTICS_KEY is None:
            raise ValueError(
                "statistics= needs TFX 1.21 or later, whose Trainer takes StatisticsGen's "
                f"output; the installed TFX is {tfx_version.__version__} (allowed here: "
                "statistics=None)."
            )
        if bool(module_file) == bool(model_fn):
            raise ValueError(
                "Give exactly one of module_file (a file defining build_model) and "
                f"model_fn (a dotted path), got module_file={module_file!r}, "
                f"model_fn={model_fn!r}."
            )
        if (settings.get("accum_steps") is None) == (effective_batch_size is None):
            raise ValueError(
                "Give exactly one of accum_steps and effective_batch_size, got "
                f"accum_steps={settings.get('accum_steps')!r}, "
                f"effective_batch_size={effective_batch_size!r}."
            )
        settings = settings_lib.from_dict(
            dict(settings, **{keys.EFFECTIVE_BATCH_SIZE: effective_batch_size})
        )
        train_args = train_args or trainer_pb2.TrainArgs()
        if train_windows is not None and (
            not isinstance(train_args, trainer_pb2.TrainArgs) or train_args.num_steps
        ):
            raise ValueError(
                f"Give the length once: train_windows={train_windows!r} or "
                f"train_args.num_steps, not both (got train_args={train_args})."
            )
        if isinstance(train_windows, int):
            windows: Optional[int] = train_windows
        elif train_windows is None and isinstance(train_args, trainer_pb2.TrainArgs):
            windows = train_args.num_steps
        else:  # a runtime parameter (or a proto's): the run_fn checks it when it runs
            windows = None
        if windows is not None and settings.windows_per_epoch:
            settings_lib.check_windows_per_epoch(windows, settings.windows_per_epoch)
        spec = GradientAccumulationTrainerSpec(
            examples=examples,
            transform_graph=transform_graph,
            schema=schema,
            base_model=base_model,
            hyperparameters=hyperparameters,
            **({STATISTICS_KEY: statistics} if statistics is not None else {}),
            train_args=train_args,
            eval_args=eval_args or trainer_pb2.EvalArgs(),
            module_file=module_file,
            custom_config=json_utils.dumps(custom_config),
            model=types.Channel(type=standard_artifacts.Model),
            model_run=types.Channel(type=standard_artifacts.ModelRun),
            **({keys.MODEL_FN_PROPERTY: model_fn} if model_fn else {}),
            **({keys.TRAIN_WINDOWS_PROPERTY: train_windows} if train_windows is not None else {}),
            **settings.to_exec_properties(),
        )
        super().__init__(spec=spec)
        if module_file and udf_utils.should_package_user_modules():
            udf_utils.add_user_module_dependency(
                self, specs_lib.MODULE_FILE_KEY, specs_lib.MODULE_PATH_KEY
            )
