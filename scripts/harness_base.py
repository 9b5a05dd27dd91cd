"""What both backends' harness modes share (``scripts/kfp_harness.py`` is the program): one
submission of a compiled TFX job, run task by task in Docker containers of the project's image,
each task's own ``command`` + ``args`` with ``{{$}}`` replaced by its ExecutorInput as one
argument (``docker run --network none --entrypoint``, the host folders it is given mounted at
the same paths), retried with its compiled ``retryPolicy`` as its backend retries a failed pod.

A backend (``harness_kfp.KfpRun``, ``harness_vertex.VertexRun``) says how the job is read, what
a task's parameters and input artifacts are when it is handed them, where its outputs go, what
runs before it (a driver hook), how its user command is started in the container, and how long
a retry waits. Neither does scheduling (one task at a time), Kubernetes resources (read and
ignored: :func:`ignored_resources`), caching by a backend's own key (:meth:`BaseRun.cache_from`
stands in for a hit), ML Metadata, importer and resolver nodes, conditions or loops: each is
refused with :class:`Unsupported`, naming the task and what it needs.
"""

import json
import os
import subprocess
import time
import uuid
from typing import Callable, Dict, List, Optional, Tuple

from google.protobuf import json_format, struct_pb2
from kfp.pipeline_spec import pipeline_spec_pb2 as pb

PLACEHOLDER = "{{$}}"
SCHEMAS = ("2.0.0", "2.1.0")
# TFX's own entry point: what a step runs without ours (``stock_entrypoint``).
TFX_ENTRY_POINT = "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"
OUR_ENTRY_POINT = "ga_tfx.pipelines.kubeflow"
_TYPES = pb.ParameterType.ParameterTypeEnum
# Schema 2.0's root parameter types (``type``, PrimitiveType) as 2.1's ``parameterType``.
_V20_TYPES = {
    pb.PrimitiveType.INT: _TYPES.NUMBER_INTEGER,
    pb.PrimitiveType.DOUBLE: _TYPES.NUMBER_DOUBLE,
    pb.PrimitiveType.STRING: _TYPES.STRING,
}


class Unsupported(ValueError):
    """The job uses something the harness does not implement (named in the message)."""


class TaskFailed(RuntimeError):
    """A task's container exited non-zero on every attempt."""

    def __init__(self, task: str, code: int, log: str):
        self.task, self.code, self.log = task, code, log
        tail = "\n".join(log.splitlines()[-15:])
        super().__init__(f"task {task} exited {code} (log tail below)\n{tail}")


def checked(spec: pb.PipelineSpec) -> pb.PipelineSpec:
    if spec.schema_version not in SCHEMAS:
        raise Unsupported(
            f"schemaVersion {spec.schema_version!r}: the harness reads {', '.join(SCHEMAS)}"
        )
    return spec


def executors(spec: pb.PipelineSpec) -> Dict[str, pb.PipelineDeploymentConfig.ExecutorSpec]:
    config = pb.PipelineDeploymentConfig()
    json_format.ParseDict(json_format.MessageToDict(spec.deployment_spec), config)
    return dict(config.executors)


def task_order(spec: pb.PipelineSpec) -> List[str]:
    """The root DAG's tasks, each after every task it depends on (ties by name)."""
    tasks = spec.root.dag.tasks
    needs = {name: set(task.dependent_tasks) for name, task in tasks.items()}
    for name, task in tasks.items():
        for art in task.inputs.artifacts.values():
            if art.WhichOneof("kind") == "task_output_artifact":
                needs[name].add(art.task_output_artifact.producer_task)
    order: List[str] = []
    while needs:
        ready = sorted(name for name, deps in needs.items() if deps <= set(order))
        if not ready:
            raise Unsupported(f"the DAG has a cycle among {sorted(needs)}")
        order.append(ready[0])
        del needs[ready[0]]
    return order


def ignored_resources(spec: pb.PipelineSpec) -> Dict[str, str]:
    """The executors whose container asks for resources (the harness gives none): label ->
    the request, for the harness to say it ignored them."""
    found = {}
    for label, ex in executors(spec).items():
        if ex.WhichOneof("spec") == "container" and ex.container.HasField("resources"):
            found[label] = json_format.MessageToJson(ex.container.resources, indent=None)
    return found


def _as_v20(value: struct_pb2.Value) -> pb.Value:
    kind = value.WhichOneof("kind")
    if kind == "number_value":
        number = value.number_value
        return (
            pb.Value(int_value=int(number))
            if number == int(number)
            else pb.Value(double_value=number)
        )
    if kind == "string_value":
        return pb.Value(string_value=value.string_value)
    raise Unsupported(f"a driver parameter of kind {kind}: schema 2.0 holds numbers and strings")


def from_v20(value: pb.Value) -> struct_pb2.Value:
    """A schema-2.0 value (``intValue``, ``doubleValue``, ``stringValue``) as 2.1's."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return struct_pb2.Value(string_value=value.string_value)
    return struct_pb2.Value(number_value=getattr(value, kind or "int_value"))


def parse_param(name: str, text: str, ptype: int) -> struct_pb2.Value:
    """``--param NAME=VALUE``'s value as the parameter's declared type (2.1's
    ``parameterType``)."""
    try:
        if ptype == _TYPES.STRING:
            return struct_pb2.Value(string_value=text)
        if ptype in (_TYPES.NUMBER_INTEGER, _TYPES.NUMBER_DOUBLE):
            number = int(text) if ptype == _TYPES.NUMBER_INTEGER else float(text)
            return struct_pb2.Value(number_value=number)
        if ptype == _TYPES.BOOLEAN and text in ("true", "false"):
            return struct_pb2.Value(bool_value=text == "true")
        value = struct_pb2.Value()
        json_format.Parse(json.dumps(json.loads(text)), value)
        return value
    except ValueError:
        kind = _TYPES.Name(ptype)
        raise Unsupported(f"--param {name}={text!r}: not a {kind}") from None


def root_values(
    spec: pb.PipelineSpec, defaults: Dict[str, struct_pb2.Value], given: Dict[str, str]
) -> Dict[str, struct_pb2.Value]:
    """A run's values of the pipeline's root ``inputDefinitions.parameters``: ``given`` (the
    run's ``--param NAME=VALUE``, parsed as each one's declared type) over ``defaults`` (the
    backend's: the spec's ``defaultValue``, Vertex's ``runtimeConfig``); a name the pipeline
    does not declare is refused. A parameter with neither is absent (refused by the task that
    reads it)."""
    declared = spec.root.input_definitions.parameters
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise Unsupported(
            f"--param {unknown[0]}: not a parameter of the pipeline (it has "
            f"{', '.join(sorted(declared)) or 'none'})"
        )
    values = {name: value for name, value in defaults.items() if name in declared}
    for name, text in given.items():
        ptype = declared[name].parameter_type or _V20_TYPES.get(declared[name].type, 0)
        values[name] = parse_param(name, text, ptype)
    return values


def backoff_wait(
    policy: pb.PipelineTaskSpec.RetryPolicy, retries_done: int, factor: float
) -> float:
    """Seconds before retry ``retries_done + 1``: ``backoffDuration * factor ** retries_done``
    (the first retry waits ``backoffDuration``); the backend gives ``factor``."""
    return policy.backoff_duration.ToTimedelta().total_seconds() * factor**retries_done


class BaseRun:
    """One submission of the job: a run id and its output folders under the pipeline root.

    Args:
      job_path: the compiled job (the backend's form).
      image: the image to run every task in (the job's own image names are not pulled).
      pipeline_root: a host folder, mounted at the same path.
      mounts: more host folders mounted at the same paths (data, serving directory).
      job_id: the run's id (default: a new one), as a resubmission gets a new one.
      network: ``docker run --network`` (default ``none``: no step may reach anything).
      log: where each task's line goes (default: print).
      backoff_scale: multiplies every retry's wait (default 1: the compiled backoff; a test's
        0.01 waits 0.3 s where the job says 30 s, and says so in its log line).
      stock_entrypoint: run TFX's own entry point instead of ours (``python -m``
        :data:`TFX_ENTRY_POINT`), to show what a step does without it.
      params: the run's parameters, ``name -> text`` (``--param NAME=VALUE``), each a root
        ``inputDefinitions.parameters`` entry, over the backend's defaults
        (:meth:`parameter_defaults`); a task reads them as ``componentInputParameter``.
    """

    backend = "?"

    def __init__(
        self,
        job_path: str,
        image: str,
        pipeline_root: str,
        mounts: tuple = (),
        job_id: Optional[str] = None,
        network: str = "none",
        log: Callable[[str], None] = print,
        backoff_scale: float = 1.0,
        stock_entrypoint: bool = False,
        params: Optional[Dict[str, str]] = None,
    ):
        self.spec = checked(self.load(job_path))
        self.given = dict(params or {})
        self.root_values = root_values(self.spec, self.parameter_defaults(), self.given)
        self.schema_21 = self.spec.schema_version == "2.1.0"
        self.executors = executors(self.spec)
        self.image = image
        self.pipeline_root = os.path.abspath(pipeline_root)
        self.mounts = [self.pipeline_root] + [os.path.abspath(m) for m in mounts]
        self.job_id = job_id or f"job-{uuid.uuid4().hex[:8]}"
        self.network = network
        self.log = log
        self.backoff_scale = backoff_scale
        self.stock_entrypoint = stock_entrypoint
        self.outputs: Dict[str, pb.ExecutorOutput] = {}
        self.inputs: Dict[str, pb.ExecutorInput] = {}
        self.logs: Dict[str, str] = {}
        # More variables of every task container (a stand-in's: scripts/vertex_standin.py).
        self.env: Dict[str, str] = {}
        self.waits: List[float] = []  # each retry's wait, in the job's clock (unscaled)
        self.run_dir = self.layout_root()

    # --- what a backend says ----------------------------------------------------------------
    def load(self, job_path: str) -> pb.PipelineSpec:
        raise NotImplementedError

    def layout_root(self) -> str:
        """The folder of this run's outputs (and the harness's logs)."""
        raise NotImplementedError

    def task_root(self, task: str) -> str:
        raise NotImplementedError

    def parameter_defaults(self) -> Dict[str, struct_pb2.Value]:
        """The values a run's parameters take where the run gives none; default: each root
        parameter's ``defaultValue``."""
        declared = self.spec.root.input_definitions.parameters
        return {n: p.default_value for n, p in declared.items() if p.HasField("default_value")}

    def input_parameter(self, task: str, name: str, param) -> None:
        """A task's parameter that is not a constant: the run's value of the root parameter it
        reads (``componentInputParameter``), in the schema's form; anything else is refused."""
        if param.WhichOneof("kind") != "component_input_parameter":
            raise Unsupported(
                f"task {task}: parameter {name} is a {param.WhichOneof('kind')}; the "
                f"{self.backend} mode passes constants and the run's parameters only"
            )
        root_name = param.component_input_parameter
        if root_name not in self.root_values:
            raise Unsupported(
                f"task {task}: parameter {name} reads the pipeline's {root_name}, which has "
                f"no value: pass --param {root_name}=VALUE"
            )
        value = self.root_values[root_name]
        if self.schema_21:
            self.inputs[task].inputs.parameter_values[name].CopyFrom(value)
        else:
            self.inputs[task].inputs.parameters[name].CopyFrom(_as_v20(value))

    def handed(self, produced: pb.ArtifactList) -> pb.ArtifactList:
        """An upstream output as the next task is handed it."""
        return produced

    def before(self, task: str) -> None:
        """What runs in the task's pod before its user command (a driver hook)."""

    def pod(self, command: List[str], args: List[str]) -> Tuple[List[str], List[str], List[str]]:
        """How the backend's pod starts a user command: (command, args, extra ``docker run``
        flags); default: the command as the container's first process."""
        return command, args, []

    def retry_wait(self, policy, retries_done: int, elapsed: float) -> Optional[float]:
        """Seconds to wait before the next retry, or None where the backend retries no more;
        ``elapsed``: seconds since the first attempt started, in the job's clock."""
        raise NotImplementedError

    # --- the ExecutorInput ------------------------------------------------------------------
    def container(self, task: str) -> pb.PipelineDeploymentConfig.PipelineContainerSpec:
        spec = self.spec.root.dag.tasks[task]
        label = self.spec.components[spec.component_ref.name].executor_label
        ex = self.executors[label]
        kind = ex.WhichOneof("spec")
        if kind != "container":
            raise Unsupported(
                f"task {task}: its executor {label} is a {kind} node; the harness runs "
                "container executors only (open-source KFP has no TFX resolver either)"
            )
        return ex.container

    def executor_input(self, task: str) -> pb.ExecutorInput:
        """Built once per task; a retry re-uses it unchanged."""
        if task in self.inputs:
            return self.inputs[task]
        spec = self.spec.root.dag.tasks[task]
        if spec.HasField("trigger_policy") and spec.trigger_policy.condition:
            raise Unsupported(f"task {task}: a condition ({spec.trigger_policy.condition})")
        if spec.WhichOneof("iterator"):
            raise Unsupported(f"task {task}: a loop ({spec.WhichOneof('iterator')})")
        component = self.spec.components[spec.component_ref.name]
        ei = pb.ExecutorInput()
        self.inputs[task] = ei
        for name, param in spec.inputs.parameters.items():
            value_kind = (
                param.runtime_value.WhichOneof("value")
                if param.WhichOneof("kind") == "runtime_value"
                else None
            )
            if value_kind == "constant":  # schema 2.1
                ei.inputs.parameter_values[name].CopyFrom(param.runtime_value.constant)
            elif value_kind == "constant_value":  # schema 2.0
                ei.inputs.parameters[name].CopyFrom(param.runtime_value.constant_value)
            else:
                self.input_parameter(task, name, param)
        for name, art in spec.inputs.artifacts.items():
            if art.WhichOneof("kind") != "task_output_artifact":
                raise Unsupported(
                    f"task {task}: input artifact {name} is a {art.WhichOneof('kind')}"
                )
            producer = art.task_output_artifact.producer_task
            key = art.task_output_artifact.output_artifact_key
            produced = self.outputs[producer].artifacts.get(key)
            if produced is None or not produced.artifacts:
                raise TaskFailed(producer, 0, f"its executor output has no artifact {key}")
            ei.inputs.artifacts[name].CopyFrom(self.handed(produced))
        task_dir = self.task_root(task)
        for name, definition in component.output_definitions.artifacts.items():
            art = ei.outputs.artifacts[name].artifacts.add()
            art.name = self.output_name(task, name)
            art.type.CopyFrom(definition.artifact_type)
            art.uri = os.path.join(task_dir, name)
        ei.outputs.output_file = os.path.join(task_dir, self.output_file_name)
        return ei

    output_file_name = "executor_output.json"

    def output_name(self, task: str, name: str) -> str:
        return f"{self.job_id}/{task}/{name}"

    # --- containers --------------------------------------------------------------------------
    def command(
        self, task: str, command, args, name: str, detach=False, env=None, network=None
    ) -> List[str]:
        """The ``docker run`` of one container of ``task``: ``env`` (e.g. a worker's
        ``TF_CONFIG``) and ``network`` (default: the run's) as a worker pool's replica gets."""
        payload = json_format.MessageToJson(self.executor_input(task), indent=None)
        for arg in args:
            if "{{$" in arg and arg != PLACEHOLDER:
                raise Unsupported(f"task {task}: placeholder {arg!r} (the harness fills {{{{$}}}})")
        command = list(command)
        if self.stock_entrypoint and command[1:] == ["-m", OUR_ENTRY_POINT]:
            command = [command[0], "-m", TFX_ENTRY_POINT]
        args = [payload if arg == PLACEHOLDER else arg for arg in args]
        command, args, flags = self.pod(command, args)
        return (
            ["docker", "run", "--rm" if not detach else "--detach", f"--name={name}"]
            + [f"--network={network or self.network}", f"--entrypoint={command[0]}"]
            + [f"--env={key}={value}" for key, value in {**self.env, **(env or {})}.items()]
            + [f"--volume={m}:{m}" for m in self.mounts]
            + flags
            + [self.image]
            + command[1:]
            + args
        )

    def _run(self, task: str, command, args, suffix: str) -> None:
        name = f"{self.job_id}-{task}-{suffix}".lower()
        policy = self.spec.root.dag.tasks[task].retry_policy
        first_start, attempt, waited_real, waited_job = time.time(), 0, 0.0, 0.0
        while True:
            attempt += 1
            proc = subprocess.run(
                self.command(task, command, args, f"{name}-{attempt}"),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            self.logs[f"{task}/{suffix}/{attempt}"] = proc.stdout
            log_dir = os.path.join(self.run_dir, "logs")
            os.makedirs(log_dir, exist_ok=True)
            with open(os.path.join(log_dir, f"{task}.{suffix}.{attempt}.log"), "w") as f:
                f.write(proc.stdout)
            if proc.returncode == 0:
                return
            elapsed = time.time() - first_start - waited_real + waited_job
            wait = self.retry_wait(policy, attempt - 1, elapsed)
            if wait is None:
                raise TaskFailed(task, proc.returncode, proc.stdout)
            self.waits.append(wait)
            scaled = wait * self.backoff_scale
            clock = "" if self.backoff_scale == 1 else f" (clock scaled by {self.backoff_scale})"
            self.log(
                f"  {task} {suffix}: exit {proc.returncode}; retry {attempt} of "
                f"{policy.max_retry_count} after {wait:g} s{clock}"
            )
            time.sleep(scaled)
            waited_real, waited_job = waited_real + scaled, waited_job + wait

    def run_task(self, task: str) -> pb.ExecutorOutput:
        """Runs one task (what runs before it first); returns its executor output."""
        started = time.time()
        container = self.container(task)
        self.executor_input(task)
        self.before(task)
        self._run(task, container.command, container.args, "executor")
        self.outputs[task] = self.finish(task)
        self.log(f"  {task}: ok ({time.time() - started:.0f} s)")
        return self.outputs[task]

    def finish(self, task: str) -> pb.ExecutorOutput:
        """The task's outputs as its backend records them: name, uri and metadata from its
        executor output (the ones it was given where it wrote none), the type from the
        component's output definition (:meth:`handed` says what the next task sees of it)."""
        ei = self.inputs[task]
        out = pb.ExecutorOutput()
        if os.path.exists(ei.outputs.output_file):
            out = read_output(ei.outputs.output_file)
        for name, given in ei.outputs.artifacts.items():
            if name not in out.artifacts or not out.artifacts[name].artifacts:
                out.artifacts[name].CopyFrom(given)
            for art in out.artifacts[name].artifacts:
                art.type.CopyFrom(given.artifacts[0].type)
        self.outputs[task] = out
        return out

    def _task_key(self, task: str) -> str:
        """What a cache keys a task by: its task spec, component and executor."""
        spec = self.spec.root.dag.tasks[task]
        component = self.spec.components[spec.component_ref.name]
        return "\n".join(
            json_format.MessageToJson(message, sort_keys=True)
            for message in (spec, component, self.executors[component.executor_label])
        )

    def cache_from(self, earlier: "BaseRun") -> List[str]:
        """Takes the outputs of ``earlier``'s tasks that this job would run unchanged (the same
        task, component and executor, all upstream tasks taken too), as a backend's cache
        does; returns their names."""
        taken: List[str] = []
        for task in task_order(self.spec):
            spec = self.spec.root.dag.tasks[task]
            upstream = set(spec.dependent_tasks) | {
                art.task_output_artifact.producer_task for art in spec.inputs.artifacts.values()
            }
            if (
                task in earlier.outputs
                and task in earlier.spec.root.dag.tasks
                and upstream <= set(taken)
                and self._task_key(task) == earlier._task_key(task)
            ):
                self.outputs[task] = earlier.outputs[task]
                taken.append(task)
        return taken

    def run(self, until: Optional[str] = None) -> Dict[str, pb.ExecutorOutput]:
        """Every task in order not yet done (taken from a cache), or those before ``until``."""
        for task in task_order(self.spec):
            if task == until:
                break
            if task not in self.outputs:
                self.run_task(task)
        return self.outputs


def read_output(path: str) -> pb.ExecutorOutput:
    out = pb.ExecutorOutput()
    with open(path) as f:
        json_format.Parse(f.read(), out, ignore_unknown_fields=True)
    return out


def load_json(path: str) -> dict:
    with open(path) as f:
        return json.load(f)
