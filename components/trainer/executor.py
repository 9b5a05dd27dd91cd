"""Executor of :class:`GradientAccumulationTrainer`: TFX's GenericExecutor, ga-tfx training.

Everything is checked before any data is read or model built: the settings (execution
properties), ``train_args.num_steps`` and the user module's ``build_model``.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
import ga_tfx.components._tfx_hooks  # noqa: F401  (checks _GetFnArgs, _log_startup)
from ga_tfx.components import keys
from ga_tfx.components.trainer import distribution, export, user_module
from ga_tfx.components.trainer import run_fn as run_fn_lib
from ga_tfx.components.trainer import settings as settings_lib

from absl import logging
from google.protobuf import json_format
from tfx.components.trainer import executor as trainer_executor
from tfx.dsl.io import fileio
from tfx.proto import trainer_pb2


class Executor(trainer_executor.GenericExecutor):
    """Runs :func:`ga_tfx.components.trainer.run_fn.train_and_export` with the component's settings.

    The user's module (``module_file`` / ``module_path``, or the dotted ``model_fn``) provides
    ``build_model(hparams)``;
    the settings are also handed to it as ``fn_args.custom_config["ga_tfx"]``.
    """

    def Do(self, input_dict, output_dict, exec_properties):
        self._log_startup(input_dict, output_dict, exec_properties)
        settings = settings_lib.from_dict(
            {
                name: exec_properties[name]
                for name in settings_lib.accepted_names()  # (a saved pipeline's old names)
                if exec_properties.get(name) is not None
            }
        )
        where = (
            dict(dotted_path=exec_properties[keys.MODEL_FN_PROPERTY])
            if exec_properties.get(keys.MODEL_FN_PROPERTY)
            else dict(exec_properties=exec_properties)
        )
        build_model = user_module.load_build_model(**where)
        make_serving_fn = user_module.load_optional(export.SERVING_FN_NAME, **where)
        windows = exec_properties.get(keys.TRAIN_WINDOWS_PROPERTY)
        if windows is not None:  # the length as an int (a compiled job's runtime parameter)
            exec_properties = dict(
                exec_properties,
                train_args=json_format.MessageToJson(trainer_pb2.TrainArgs(num_steps=int(windows))),
            )
        fn_args = self._GetFnArgs(input_dict, output_dict, exec_properties)
        fn_args.custom_config = dict(
            fn_args.custom_config or {}, **{keys.GA_TFX: settings.to_exec_properties()}
        )
        run_fn_lib.train_and_export(fn_args, settings, build_model, make_serving_fn=make_serving_fn)
        if distribution.is_chief() and not fileio.exists(fn_args.serving_model_dir):
            # (multi-worker: only the chief writes the serving model)
            raise RuntimeError("ga-tfx run_fn failed to generate a model.")
        logging.info(
            "Training complete. Model written to %s. ModelRun written to %s",
            fn_args.serving_model_dir,
            fn_args.model_run_dir,
        )
