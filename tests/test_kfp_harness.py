"""The container-contract harness itself (``scripts/kfp_harness.py``), without Docker: the order
of the tasks, the ExecutorInput it builds in each schema, what it refuses, its cache."""

import copy
import json
import os
import sys

import pytest
from google.protobuf import struct_pb2

pytestmark = [pytest.mark.tfx]  # kfp's protos

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import kfp_harness  # noqa: E402

GOLDEN = os.path.join(ROOT, "tests", "golden", "digits_pipeline_job.json")


def _job(tmp_path, edit=None, name="job.json"):
    with open(GOLDEN) as f:
        job = json.load(f)
    if edit is not None:
        edit(job["pipelineSpec"])
    path = tmp_path / name
    path.write_text(json.dumps(job))
    return kfp_harness.JobRun(str(path), "img", str(tmp_path / "root"), job_id="job-1")


def test_tasks_run_after_what_they_read(tmp_path):
    run = _job(tmp_path)
    order = kfp_harness.task_order(run.spec)
    assert order[0] == "CsvExampleGen" and set(order) == set(run.spec.root.dag.tasks)
    for name, task in run.spec.root.dag.tasks.items():
        for art in task.inputs.artifacts.values():
            assert order.index(art.task_output_artifact.producer_task) < order.index(name)


def test_the_executor_input_is_built_as_a_backend_builds_it(tmp_path):
    run = _job(tmp_path)
    ei = run.executor_input("CsvExampleGen")
    assert ei.inputs.parameter_values["input_base"].string_value  # 2.1: parameterValues
    assert not ei.inputs.parameters
    (examples,) = ei.outputs.artifacts["examples"].artifacts
    assert kfp_harness.type_title(examples.type) == "tfx.Examples"
    task_dir = os.path.dirname(examples.uri)
    assert os.path.dirname(task_dir) == str(tmp_path / "root" / kfp_harness.PROJECT / "job-1")
    assert os.path.basename(task_dir).startswith("CsvExampleGen_")
    assert ei.outputs.output_file == os.path.join(task_dir, "executor_output.json")
    assert run.executor_input("CsvExampleGen") is ei  # a retry gets the same input
    # The `{{$}}` placeholder becomes the whole ExecutorInput, one argument.
    container = run.container("CsvExampleGen")
    command = run.command("CsvExampleGen", container.command, container.args, "n")
    assert command[:3] == ["docker", "run", "--rm"] and "--network=none" in command
    payloads = [arg for arg in command if arg.startswith("{")]
    assert any(json.loads(arg).get("outputs", {}).get("outputFile") for arg in payloads)


def test_schema_2_0_parameters_and_the_driver_values(tmp_path):
    def as_2_0(spec):
        spec["schemaVersion"] = "2.0.0"
        for task in spec["root"]["dag"]["tasks"].values():
            for param in task["inputs"].get("parameters", {}).values():
                value = param["runtimeValue"].pop("constant")
                param["runtimeValue"]["constantValue"] = (
                    {"stringValue": value}
                    if isinstance(value, str)
                    else {"intValue": str(int(value))}
                    if value == int(value)
                    else {"doubleValue": value}
                )

    run = _job(tmp_path, as_2_0)
    ei = run.executor_input("CsvExampleGen")
    assert ei.inputs.parameters["input_base"].string_value and not ei.inputs.parameter_values
    assert kfp_harness._as_v20(struct_pb2.Value(number_value=3.0)).int_value == 3
    assert kfp_harness._as_v20(struct_pb2.Value(number_value=0.5)).double_value == 0.5
    assert kfp_harness._as_v20(struct_pb2.Value(string_value="x")).string_value == "x"


def test_what_it_does_not_implement_is_refused_naming_the_task(tmp_path):
    def a_resolver(spec):
        label = spec["components"]["Pusher"]["executorLabel"]
        spec["deploymentSpec"]["executors"][label] = {"resolver": {"outputArtifactQueries": {}}}

    run = _job(tmp_path, a_resolver)
    with pytest.raises(kfp_harness.Unsupported, match="task Pusher: .* is a resolver node"):
        run.container("Pusher")

    def a_condition(spec):
        spec["root"]["dag"]["tasks"]["Pusher"]["triggerPolicy"] = {"condition": "x > 1"}

    with pytest.raises(kfp_harness.Unsupported, match=r"task Pusher: a condition \(x > 1\)"):
        _job(tmp_path, a_condition, "b.json").executor_input("Pusher")


def test_the_cache_takes_only_unchanged_tasks_and_what_follows_them(tmp_path):
    earlier = _job(tmp_path)
    for task in kfp_harness.task_order(earlier.spec):
        earlier.outputs[task] = kfp_harness.pb.ExecutorOutput()

    def other_trainer(spec):
        trainer = spec["root"]["dag"]["tasks"]["GradientAccumulationTrainer"]
        trainer["inputs"]["parameters"]["accum_steps"]["runtimeValue"]["constant"] = 7

    later = _job(tmp_path, other_trainer, "later.json")
    taken = later.cache_from(earlier)
    assert "Transform" in taken and "GradientAccumulationTrainer" not in taken
    assert "Evaluator" not in taken and "Pusher" not in taken  # downstream of the change
    same = _job(tmp_path, copy.deepcopy, "same.json")
    assert set(same.cache_from(earlier)) == set(earlier.outputs)
