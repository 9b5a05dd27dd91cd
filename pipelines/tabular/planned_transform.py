"""``PlannedTransform``: TFX's Transform, with the data plan in ``preprocessing_fn``'s config.

The plan (:mod:`ga_tfx.pipelines.tabular.data_plan`) is made at run time from the statistics, so it
cannot be part of Transform's ``custom_config``, which is fixed when the pipeline is built. It
travels in the schema Transform reads; this executor reads it from there and adds it to the
``custom_config`` that TFX binds to ``preprocessing_fn`` (key :data:`PLAN_CONFIG`, the plan's
JSON). Everything else is TFX's Transform unchanged (same spec, inputs, outputs, caching).
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx.components import _tfx_hooks  # noqa: F401  (checks _GetPreprocessingFn)
from ga_tfx.pipelines.tabular import data_plan

import json
from typing import Any, Callable, Mapping

from tfx import v1 as tfx
from tfx.components.transform import executor as transform_executor
from tfx.components.transform import labels
from tfx.dsl.components.base import executor_spec

PLAN_CONFIG = "data_plan"  # custom_config key: the plan's JSON


def config_with_plan(custom_config_json: Any, schema_file: str) -> str:
    """``custom_config`` (JSON) plus the plan stored in ``schema_file`` (unchanged when the
    schema carries none)."""
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tfx.utils import io_utils

    config = json.loads(custom_config_json) if custom_config_json else {}
    plan = data_plan.plan_from_schema(io_utils.parse_pbtxt_file(schema_file, schema_pb2.Schema()))
    if plan is not None:
        config = dict(config or {}, **{PLAN_CONFIG: plan.to_json()})
    return json.dumps(config)


class Executor(transform_executor.Executor):
    """Transform's executor; ``preprocessing_fn`` gets the plan in its ``custom_config``."""

    def _GetPreprocessingFn(
        self, inputs: Mapping[str, Any], unused_outputs: Mapping[str, Any]
    ) -> Callable[..., Any]:
        inputs = dict(inputs)
        inputs[labels.CUSTOM_CONFIG] = config_with_plan(
            inputs.get(labels.CUSTOM_CONFIG), inputs[labels.SCHEMA_PATH_LABEL]
        )
        return super()._GetPreprocessingFn(inputs, unused_outputs)


class PlannedTransform(tfx.components.Transform):
    """``tfx.components.Transform`` running :class:`Executor` (give it the id ``Transform``
    with ``.with_id``: the id is the class name otherwise)."""

    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)
