"""``ServingDirPusher``: TFX's Pusher with the serving folder as a plain ``str`` property.

The stock Pusher takes its destination as a ``PushDestination`` proto; a compiled job's runtime
parameter (``tfx.dsl.experimental.RuntimeParameter``) holds only an int, a float or a str, so
the stock Pusher could take the destination at run time only as the whole proto's JSON
(``'{"filesystem": {"baseDirectory": ...}}'``). This component takes the folder itself,
``serving_dir``, and its executor builds the filesystem destination from it and then runs TFX's
Pusher executor unchanged (blessing check, versioned copy, ``pushed_model`` output).
:func:`ga_tfx.pipelines.parts.evaluation.pusher` uses it where the serving folder is a runtime
parameter (the compiled Kubeflow job); a local run keeps the stock Pusher.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)

from typing import Union

from google.protobuf import json_format
from tfx import types
from tfx.components.pusher import executor as pusher_executor
from tfx.dsl.components.base import base_component, executor_spec
from tfx.orchestration import data_types
from tfx.proto import pusher_pb2
from tfx.types import standard_artifacts
from tfx.types import standard_component_specs as specs_lib
from tfx.types.component_spec import ExecutionParameter

SERVING_DIR_KEY = "serving_dir"


def push_destination_json(serving_dir: str) -> str:
    """The stock Pusher's ``push_destination`` property for the folder ``serving_dir``."""
    destination = pusher_pb2.PushDestination(
        filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=serving_dir)
    )
    return json_format.MessageToJson(destination, sort_keys=True)


class ServingDirPusherSpec(specs_lib.PusherSpec):
    """PusherSpec plus ``serving_dir`` (a str: a runtime parameter can hold it)."""

    PARAMETERS = dict(
        specs_lib.PusherSpec.PARAMETERS,
        **{SERVING_DIR_KEY: ExecutionParameter(type=str, optional=True)},
    )


class Executor(pusher_executor.Executor):
    """TFX's Pusher executor, its ``push_destination`` made from ``serving_dir``."""

    def Do(self, input_dict, output_dict, exec_properties):
        serving_dir = exec_properties.get(SERVING_DIR_KEY)
        if not serving_dir:
            raise ValueError(f"{SERVING_DIR_KEY} is empty: the Pusher needs a folder to push to")
        exec_properties = dict(
            exec_properties,
            **{specs_lib.PUSH_DESTINATION_KEY: push_destination_json(serving_dir)},
        )
        return super().Do(input_dict, output_dict, exec_properties)


class ServingDirPusher(base_component.BaseComponent):
    """Pushes ``model`` to ``serving_dir/<unix time>`` when ``model_blessing`` blessed it."""

    SPEC_CLASS = ServingDirPusherSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(
        self,
        model: types.BaseChannel,
        model_blessing: types.BaseChannel,
        serving_dir: Union[str, data_types.RuntimeParameter],
    ):
        super().__init__(
            spec=ServingDirPusherSpec(
                model=model,
                model_blessing=model_blessing,
                **{SERVING_DIR_KEY: serving_dir},
                pushed_model=types.Channel(type=standard_artifacts.PushedModel),
            )
        )
