"""Runs a compiled TFX PipelineJob step by step in Docker containers, by the KFP v2 container
contract: a test harness for that contract, not a second orchestrator.

For each task of the job's root DAG, in dependency order, it builds the ``ExecutorInput`` a KFP
backend builds -- parameters from the task's constants (schema 2.0: ``inputs.parameters``;
2.1: ``inputs.parameterValues``), input artifacts (type, name, uri, metadata) from the
producers' executor output, output artifact URIs under the pipeline root in Vertex's layout
(``<root>/<project>/<job id>/<task>_<uuid>/<output>``) and the output file -- and runs the
task's own ``command`` + ``args`` in the image, ``{{$}}`` replaced by that JSON as one argument:
``docker run --network none --entrypoint`` (the job's command, not the image's entrypoint),
the host folders it is given mounted at the same paths. A task with a ``lifecycle.preCacheCheck``
hook (TFX's file-based ExampleGen driver) runs the hook first, and its executor output's
parameters and artifact metadata go into the executor's input, as KFP does. A task whose
container fails is retried up to its compiled ``retryPolicy.maxRetryCount`` with the same
ExecutorInput, as a KFP backend retries a failed pod.

What it does not do, and so does not prove: scheduling (one task at a time), Kubernetes
resources (the executors' ``resources`` are read and ignored: see :func:`ignored_resources`),
caching, ML Metadata (Vertex's metadata service; no MLMD is written), importer and resolver
nodes, conditions, loops, runtime parameters and component-input parameters (refused with
:class:`Unsupported`, naming the task and what it needs).

Usage: ``python scripts/kfp_harness.py JOB.json --image IMG --pipeline-root DIR
[--mount DIR ...] [--job-id ID]``; prints one line per task.
"""

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from typing import Callable, Dict, List, Optional

import vertex_standin
from google.protobuf import json_format, struct_pb2
from kfp.pipeline_spec import pipeline_spec_pb2 as pb

PLACEHOLDER = "{{$}}"
SCHEMAS = ("2.0.0", "2.1.0")
# A stand-in for the Google Cloud project in Vertex's output layout.
PROJECT = "harness-project"


class Unsupported(ValueError):
    """The job uses something the harness does not implement (named in the message)."""


class TaskFailed(RuntimeError):
    """A task's container exited non-zero on every attempt."""

    def __init__(self, task: str, code: int, log: str):
        self.task, self.code, self.log = task, code, log
        tail = "\n".join(log.splitlines()[-15:])
        super().__init__(f"task {task} exited {code} (log tail below)\n{tail}")


def load_spec(job_path: str) -> pb.PipelineSpec:
    """The job's PipelineSpec, parsed strictly by kfp's protos (an unknown field is an error)."""
    with open(job_path) as f:
        job = json.load(f)
    spec = pb.PipelineSpec()
    json_format.ParseDict(job["pipelineSpec"], spec)
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


class JobRun:
    """One submission of the job: a job id and its output folders under the pipeline root.

    Args:
      job_path: the PipelineJob JSON (``ga-tfx compile``'s output).
      image: the image to run every task in (the job's own image names are not pulled: none
        is reachable; each must equal this one or be mapped by ``images``).
      pipeline_root: a host folder, mounted at the same path; the job must have been compiled
        with it as its pipeline root.
      mounts: more host folders mounted at the same paths (data, serving directory).
      job_id: the run's id (default: a new one), as a resubmission gets a new one.
      network: ``docker run --network`` (default ``none``: no step may reach anything).
      log: where each task's line goes (default: print).
    """

    def __init__(
        self,
        job_path: str,
        image: str,
        pipeline_root: str,
        mounts: tuple = (),
        job_id: Optional[str] = None,
        network: str = "none",
        log: Callable[[str], None] = print,
    ):
        self.spec = load_spec(job_path)
        self.schema_21 = self.spec.schema_version == "2.1.0"
        self.executors = executors(self.spec)
        self.image = image
        self.pipeline_root = os.path.abspath(pipeline_root)
        self.mounts = [self.pipeline_root] + [os.path.abspath(m) for m in mounts]
        self.job_id = job_id or f"job-{uuid.uuid4().hex[:8]}"
        self.network = network
        self.log = log
        self.outputs: Dict[str, pb.ExecutorOutput] = {}
        self.inputs: Dict[str, pb.ExecutorInput] = {}
        self.logs: Dict[str, str] = {}
        self.run_dir = os.path.join(self.pipeline_root, PROJECT, self.job_id)
        # More variables of every task container (a stand-in's: scripts/vertex_standin.py).
        self.env: Dict[str, str] = {}

    # --- the ExecutorInput a KFP backend builds ---------------------------------------------
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
        for name, param in spec.inputs.parameters.items():
            kind = param.WhichOneof("kind")
            value_kind = (
                param.runtime_value.WhichOneof("value") if kind == "runtime_value" else None
            )
            if value_kind == "constant":  # schema 2.1
                ei.inputs.parameter_values[name].CopyFrom(param.runtime_value.constant)
            elif value_kind == "constant_value":  # schema 2.0
                ei.inputs.parameters[name].CopyFrom(param.runtime_value.constant_value)
            else:
                raise Unsupported(
                    f"task {task}: parameter {name} is a {value_kind or kind}; the harness "
                    "passes constants only"
                )
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
            ei.inputs.artifacts[name].CopyFrom(produced)
        task_dir = os.path.join(self.run_dir, f"{task}_{uuid.uuid4().hex[:8]}")
        for name, definition in component.output_definitions.artifacts.items():
            art = ei.outputs.artifacts[name].artifacts.add()
            art.name = f"{self.job_id}/{task}/{name}"
            art.type.CopyFrom(definition.artifact_type)
            art.uri = os.path.join(task_dir, name)
        ei.outputs.output_file = os.path.join(task_dir, "executor_output.json")
        self.inputs[task] = ei
        return ei

    def _apply_driver_output(self, task: str, driver_output: pb.ExecutorOutput):
        ei = self.inputs[task]
        for name, value in driver_output.parameter_values.items():
            if self.schema_21:
                ei.inputs.parameter_values[name].CopyFrom(value)
            else:
                ei.inputs.parameters[name].CopyFrom(_as_v20(value))
        for name, arts in driver_output.artifacts.items():
            for ours, theirs in zip(ei.outputs.artifacts[name].artifacts, arts.artifacts):
                ours.metadata.CopyFrom(theirs.metadata)

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
        volumes = [f"--volume={m}:{m}" for m in self.mounts]
        return (
            ["docker", "run", "--rm" if not detach else "--detach", f"--name={name}"]
            + [f"--network={network or self.network}", f"--entrypoint={command[0]}"]
            + [f"--env={key}={value}" for key, value in {**self.env, **(env or {})}.items()]
            + volumes
            + [self.image]
            + list(command[1:])
            + [payload if arg == PLACEHOLDER else arg for arg in args]
        )

    def _run(self, task: str, command, args, suffix: str) -> None:
        name = f"{self.job_id}-{task}-{suffix}".lower()
        attempts = 1 + self.spec.root.dag.tasks[task].retry_policy.max_retry_count
        for attempt in range(1, attempts + 1):
            proc = subprocess.run(
                self.command(task, command, args, name),
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
            if attempt < attempts:
                self.log(
                    f"  {task} {suffix}: exit {proc.returncode}; retry {attempt} of {attempts - 1}"
                )
        raise TaskFailed(task, proc.returncode, proc.stdout)

    def run_task(self, task: str) -> pb.ExecutorOutput:
        """Runs one task (its driver hook first, if any); returns its executor output."""
        started = time.time()
        container = self.container(task)
        ei = self.executor_input(task)
        if container.HasField("lifecycle") and container.lifecycle.HasField("pre_cache_check"):
            hook = container.lifecycle.pre_cache_check
            executor_file = ei.outputs.output_file
            ei.outputs.output_file = os.path.join(
                os.path.dirname(executor_file), "driver_output.json"
            )
            self._run(task, hook.command, hook.args, "driver")
            self._apply_driver_output(task, _read_output(ei.outputs.output_file))
            ei.outputs.output_file = executor_file
        self._run(task, container.command, container.args, "executor")
        self.outputs[task] = self.finish(task)
        self.log(f"  {task}: ok ({time.time() - started:.0f} s)")
        return self.outputs[task]

    def finish(self, task: str) -> pb.ExecutorOutput:
        """The task's outputs as KFP records them: name, uri and metadata from its executor
        output (the ones it was given where it wrote none), the type from the component's
        output definition (TFX's executor output names none; KFP keeps it in its store)."""
        ei = self.inputs[task]
        out = pb.ExecutorOutput()
        if os.path.exists(ei.outputs.output_file):
            out = _read_output(ei.outputs.output_file)
        for name, given in ei.outputs.artifacts.items():
            if name not in out.artifacts or not out.artifacts[name].artifacts:
                out.artifacts[name].CopyFrom(given)
            for art in out.artifacts[name].artifacts:
                art.type.CopyFrom(given.artifacts[0].type)
        self.outputs[task] = out
        return out

    def _task_key(self, task: str) -> str:
        """What KFP's cache keys a task by: its task spec, component and executor."""
        spec = self.spec.root.dag.tasks[task]
        component = self.spec.components[spec.component_ref.name]
        return "\n".join(
            json_format.MessageToJson(message, sort_keys=True)
            for message in (spec, component, self.executors[component.executor_label])
        )

    def cache_from(self, earlier: "JobRun") -> List[str]:
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


EVALUATION_SCRIPT = """
import json, sys
import tensorflow_model_analysis as tfma
result = tfma.load_eval_result(sys.argv[1])
overall = dict(result.slicing_metrics)[()]
print(json.dumps({name: value.get("doubleValue") for name, value in overall[""][""].items()}))
"""


def type_title(schema: pb.ArtifactTypeSchema) -> str:
    """An artifact type's title: ``schemaTitle``, or the ``title:`` of an ``instanceSchema``
    (TFX compiles its types as instance schemas: ``title: tfx.Model``)."""
    if schema.WhichOneof("kind") == "instance_schema":
        for line in schema.instance_schema.splitlines():
            if line.startswith("title:"):
                return line.split(":", 1)[1].strip()
    return schema.schema_title


def artifacts_of_type(run: JobRun, title: str) -> List[pb.RuntimeArtifact]:
    """Every output artifact of the run whose type's title is ``title`` (e.g. ``tfx.Model``)."""
    return [
        art
        for out in run.outputs.values()
        for arts in out.artifacts.values()
        for art in arts.artifacts
        if type_title(art.type) == title
    ]


def summary(run: JobRun) -> Dict[str, object]:
    """What the run ended with: the overall evaluation metrics (read by TFMA in the image),
    whether the model was blessed, and where it was pushed."""
    result: Dict[str, object] = {}
    for art in artifacts_of_type(run, "tfx.ModelEvaluation"):
        proc = subprocess.run(
            [
                "docker",
                "run",
                "--rm",
                "--network=none",
                f"--volume={run.pipeline_root}:{run.pipeline_root}",
            ]
            + ["--entrypoint=python", run.image, "-c", EVALUATION_SCRIPT, art.uri],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            check=True,
        )
        result["evaluation"] = json.loads(proc.stdout.strip().splitlines()[-1])
    for art in artifacts_of_type(run, "tfx.ModelBlessing"):
        result["blessed"] = bool(art.metadata["blessed"])
    for art in artifacts_of_type(run, "tfx.PushedModel"):
        result["pushed"] = bool(art.metadata["pushed"])
        result["pushed_destination"] = (
            art.metadata["pushed_destination"] if result["pushed"] else None
        )
    return result


def _read_output(path: str) -> pb.ExecutorOutput:
    out = pb.ExecutorOutput()
    with open(path) as f:
        json_format.Parse(f.read(), out, ignore_unknown_fields=True)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("job")
    parser.add_argument("--image", required=True)
    parser.add_argument("--pipeline-root", required=True)
    parser.add_argument("--mount", action="append", default=[])
    parser.add_argument("--job-id")
    parser.add_argument("--network", default="none")
    args = parser.parse_args(argv)
    run = JobRun(
        args.job, args.image, args.pipeline_root, tuple(args.mount), args.job_id, args.network
    )
    vertex_standin.attach(run)  # Vertex's job API, for a Trainer compiled with --trainer-workers
    print(f"harness: job {run.job_id}, schema {run.spec.schema_version}, image {args.image}")
    for label, request in ignored_resources(run.spec).items():
        print(f"  (resources of {label} ignored: {request})")
    try:
        run.run()
    except (Unsupported, TaskFailed) as error:
        print(f"harness: error: {error}", file=sys.stderr)
        return 1
    print(f"harness: {len(run.outputs)} tasks done under {run.run_dir}")
    for key, value in summary(run).items():
        print(f"  {key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
