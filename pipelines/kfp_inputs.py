"""Types the input artifacts that open-source Kubeflow Pipelines hands a step untyped.

Open-source KFP 2.x's driver builds a task's input artifacts from its metadata store, where the
producer's output was recorded without its type: kubeflow/pipelines
``backend/src/v2/metadata/client.go`` builds each ``OutputArtifact`` with ``Schema: ""``
("TODO(Bobgy): figure out how to get schema", ``GetOutputArtifactsByExecutionId``) and
``OutputArtifact.ToRuntimeArtifact`` puts it in the ExecutorInput as
``"type": {"instanceSchema": ""}``. TFX's entry point then reads the artifact class from that
schema (tensorflow/tfx ``orchestration/kubeflow/v2/container/kubeflow_v2_entrypoint_utils.py``,
``_retrieve_class_path``: ``yaml.safe_load("")`` is ``None`` and ``.get('title')`` raises
``AttributeError``), so the first step that reads another's output (StatisticsGen) fails.
Vertex AI Pipelines passes the type; so does this module, then.

The type is taken from what the task itself carries: TFX's 2.1 form passes the component's
``inputDefinitions`` as ``--json_serialized_inputs_spec_args``
(``kubeflow_v2_run_executor.py``, ``_parse_flags``), whose ``artifacts.<name>.artifactType`` is
the compiled type. Only an empty type is filled (no ``schemaTitle`` and an empty
``instanceSchema``); everything else in the ExecutorInput is passed on as it came. Imports
nothing of TFX (it runs before TFX's entry point is imported).
"""

import json
from typing import Any, Dict, List, Optional

INVOCATION_FLAG = "--json_serialized_invocation_args"
INPUTS_SPEC_FLAG = "--json_serialized_inputs_spec_args"


class UntypedInput(ValueError):
    """An input artifact has no type and the task carries none to give it."""


def _find(argv: List[str], flag: str) -> Optional[int]:
    """The index of ``flag``'s value in ``argv`` (``--flag VALUE`` or ``--flag=VALUE``)."""
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return i + 1
        if arg.startswith(flag + "="):
            return i
    return None


def _value(argv: List[str], index: int, flag: str) -> str:
    arg = argv[index]
    return arg[len(flag) + 1 :] if arg.startswith(flag + "=") else arg


def _untyped(type_schema: Dict[str, Any]) -> bool:
    return not type_schema.get("schemaTitle") and not type_schema.get("instanceSchema")


def fill_types(executor_input: Dict[str, Any], inputs_spec: Optional[Dict[str, Any]]) -> List[str]:
    """Gives every untyped input artifact of ``executor_input`` (the ExecutorInput as JSON) the
    type ``inputs_spec`` (the ComponentInputsSpec as JSON) declares for its input; returns the
    names of the inputs it typed. Raises :class:`UntypedInput` naming the input where the spec
    has no type for it."""
    declared = (inputs_spec or {}).get("artifacts", {})
    typed = []
    for name, listed in executor_input.get("inputs", {}).get("artifacts", {}).items():
        for artifact in listed.get("artifacts", []):
            if not _untyped(artifact.get("type", {})):
                continue
            artifact_type = declared.get(name, {}).get("artifactType")
            if not artifact_type or _untyped(artifact_type):
                where = "its inputs spec has none" if inputs_spec else f"no {INPUTS_SPEC_FLAG}"
                raise UntypedInput(
                    f"input artifact {name!r} came without a type (open-source KFP's driver "
                    f"passes none) and {where}: compile the job with --pipeline-spec 2.1"
                )
            artifact["type"] = dict(artifact_type)
            typed.append(name)
    return typed


def typed_argv(argv: List[str]) -> List[str]:
    """``argv`` with the ExecutorInput of ``--json_serialized_invocation_args`` re-written by
    :func:`fill_types` where one of its inputs is untyped; unchanged (the same list) where none
    is."""
    index = _find(argv, INVOCATION_FLAG)
    if index is None:
        return argv
    executor_input = json.loads(_value(argv, index, INVOCATION_FLAG))
    spec_index = _find(argv, INPUTS_SPEC_FLAG)
    inputs_spec = (
        json.loads(_value(argv, spec_index, INPUTS_SPEC_FLAG)) if spec_index is not None else None
    )
    if not fill_types(executor_input, inputs_spec):
        return argv
    payload = json.dumps(executor_input)
    out = list(argv)
    out[index] = (
        f"{INVOCATION_FLAG}={payload}" if argv[index].startswith(INVOCATION_FLAG) else payload
    )
    return out
