"""The container-contract harness itself (``scripts/kfp_harness.py``), without Docker: the order
of the tasks, the ExecutorInput each backend's mode builds in each schema, what it refuses, its
cache, the kfp mode's parameters and retry backoff, the pod stand-ins (``scripts/kfp_pod.py``),
and the entry point's typing of the inputs open-source KFP hands over untyped
(``pipelines/kfp_inputs.py``)."""

import copy
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from google.protobuf import struct_pb2

pytestmark = [pytest.mark.tfx]  # kfp's protos

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from ga_tfx.pipelines import kfp_inputs  # noqa: E402

import harness_base  # noqa: E402
import kfp_harness  # noqa: E402
import yaml  # noqa: E402

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
                if "runtimeValue" not in param:
                    continue  # componentInputParameter: the same in both schemas
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
    assert ei.inputs.parameters["output_data_format"].int_value  # a constant
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


# --- the kfp mode ---------------------------------------------------------------------------


def _bare(tmp_path, edit=None, name="spec.yaml", **kwargs):
    """The golden job's PipelineSpec as the bare YAML open-source KFP uploads, in the kfp mode:
    its ``runtimeConfig`` values as the root parameters' ``defaultValue``, where
    ``ga-tfx compile --backend kfp`` writes them."""
    with open(GOLDEN) as f:
        job = json.load(f)
    spec = job["pipelineSpec"]
    for parameter, value in job["runtimeConfig"]["parameterValues"].items():
        spec["root"]["inputDefinitions"]["parameters"][parameter]["defaultValue"] = value
    if edit is not None:
        edit(spec)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec))
    return kfp_harness.KfpRun(str(path), "img", str(tmp_path / "root"), job_id="run-1", **kwargs)


def _done(run, task):
    run.executor_input(task)
    run.outputs[task] = run.finish(task)


def test_the_kfp_mode_lays_outputs_out_and_hands_them_on_untyped_as_its_driver(tmp_path):
    run = _bare(tmp_path)
    ei = run.executor_input("CsvExampleGen")
    (examples,) = ei.outputs.artifacts["examples"].artifacts
    assert examples.name == "examples"  # driver.go provisionOutputs: Name: name
    task_root = os.path.dirname(examples.uri)
    # <root>/<pipeline name>/<run id>/<task>/<uuid>/<output>
    assert os.path.dirname(task_root) == str(
        tmp_path / "root" / "ga-tfx-digits" / "run-1" / "CsvExampleGen"
    )
    assert ei.outputs.output_file == os.path.join(task_root, "output_metadata.json")
    assert kfp_harness.type_title(examples.type) == "tfx.Examples"  # its own outputs: typed
    _done(run, "CsvExampleGen")
    container = run.container("StatisticsGen")
    command = run.command("StatisticsGen", container.command, container.args, "n")
    payload = json.loads(command[command.index("--json_serialized_invocation_args") + 1])
    (handed,) = payload["inputs"]["artifacts"]["examples"]["artifacts"]
    assert handed["type"] == {"instanceSchema": ""} and handed["uri"] == examples.uri
    # The vertex mode hands the same output on typed.
    vertex = _job(tmp_path)
    _done(vertex, "CsvExampleGen")
    (typed,) = vertex.executor_input("StatisticsGen").inputs.artifacts["examples"].artifacts
    assert kfp_harness.type_title(typed.type) == "tfx.Examples"


def test_the_kfp_mode_runs_the_user_command_under_the_emissary_and_launcher(tmp_path):
    run = _bare(tmp_path)
    container = run.container("CsvExampleGen")
    command = run.command("CsvExampleGen", container.command, container.args, "n")
    image = command.index("img")
    script = "/opt/ga-tfx-harness/kfp_pod.py"
    assert command[image + 1 : image + 8] == [
        script,
        "emissary",
        "--",
        "python",
        script,
        "launcher",
        "--",
    ]
    assert command[image + 8 : image + 11] == ["python", "-m", "ga_tfx.pipelines.kubeflow"]
    assert f"--volume={os.path.join(ROOT, 'scripts', 'kfp_pod.py')}:{script}:ro" in command
    stock = _bare(tmp_path, name="s.yaml", stock_entrypoint=True)
    command = stock.command("CsvExampleGen", container.command, container.args, "n")
    assert harness_base.TFX_ENTRY_POINT in command and "ga_tfx.pipelines.kubeflow" not in command


def test_each_mode_refuses_the_other_backends_job_and_the_kfp_mode_a_minio_root(tmp_path):
    with pytest.raises(kfp_harness.Unsupported, match="a Vertex PipelineJob .* --backend kfp"):
        kfp_harness.KfpRun(GOLDEN, "img", str(tmp_path / "root"))
    _bare(tmp_path)
    with pytest.raises(kfp_harness.Unsupported, match="not a PipelineJob .* --backend kfp's"):
        kfp_harness.VertexRun(str(tmp_path / "spec.yaml"), "img", str(tmp_path / "root"))

    def as_2_0(spec):
        spec["schemaVersion"] = "2.0.0"

    with pytest.raises(kfp_harness.Unsupported, match="schemaVersion 2.0.0: open-source KFP"):
        _bare(tmp_path, as_2_0, "b.yaml")
    with pytest.raises(
        kfp_harness.Unsupported,
        match=r"'minio://mlpipeline/v2/artifacts': TFX cannot write it .* gs://",
    ):
        kfp_harness.KfpRun(str(tmp_path / "spec.yaml"), "img", "minio://mlpipeline/v2/artifacts")


def _data_root_parameter(default):
    def edit(spec):
        definition = {"parameterType": "STRING"}
        if default is not None:
            definition["defaultValue"] = default
        spec["root"]["inputDefinitions"] = {"parameters": {"data_root": definition}}
        example_gen = spec["root"]["dag"]["tasks"]["CsvExampleGen"]
        example_gen["inputs"]["parameters"]["input_base"] = {"componentInputParameter": "data_root"}

    return edit


def test_the_kfp_mode_passes_the_runs_parameters_and_the_specs_defaults(tmp_path):
    def input_base(run):
        return (
            run.executor_input("CsvExampleGen").inputs.parameter_values["input_base"].string_value
        )

    assert input_base(_bare(tmp_path, _data_root_parameter("/data/a"))) == "/data/a"
    given = _bare(tmp_path, _data_root_parameter("/data/a"), "b.yaml", params={"data_root": "/b"})
    assert input_base(given) == "/b"
    with pytest.raises(kfp_harness.Unsupported, match="--param root: not a parameter .* data_root"):
        _bare(tmp_path, _data_root_parameter("/a"), "c.yaml", params={"root": "/b"})
    no_default = _bare(tmp_path, _data_root_parameter(None), "d.yaml")
    with pytest.raises(kfp_harness.Unsupported, match="pass --param data_root=VALUE"):
        no_default.executor_input("CsvExampleGen")


def _vertex_values(tmp_path, job_edit=None, name="v.json", **kwargs):
    """What the vertex mode hands CsvExampleGen (input_base) and the Trainer (train_windows)."""
    with open(GOLDEN) as f:
        job = json.load(f)
    if job_edit is not None:
        job_edit(job)
    path = tmp_path / name
    path.write_text(json.dumps(job))
    run = kfp_harness.VertexRun(str(path), "img", str(tmp_path / "root"), **kwargs)
    example_gen = run.executor_input("CsvExampleGen")
    # The Trainer's parameter alone (its input artifacts need the upstream tasks run).
    trainer = run.inputs[TRAINER] = kfp_harness.pb.ExecutorInput()
    param = run.spec.root.dag.tasks[TRAINER].inputs.parameters["train_windows"]
    run.input_parameter(TRAINER, "train_windows", param)
    if run.schema_21:
        return (
            example_gen.inputs.parameter_values["input_base"].string_value,
            trainer.inputs.parameter_values["train_windows"].number_value,
        )
    return (
        example_gen.inputs.parameters["input_base"].string_value,
        trainer.inputs.parameters["train_windows"].int_value,
    )


def test_the_vertex_mode_reads_the_jobs_runtime_config_and_the_creations_values(tmp_path):
    with open(GOLDEN) as f:
        config = json.load(f)["runtimeConfig"]["parameterValues"]
    assert _vertex_values(tmp_path) == (config["data_root"], config["train_windows"])
    # Values given at job creation (the SDK's parameter_values) go over the runtimeConfig's.
    given = {"data_root": "/data/b", "train_windows": "7"}
    assert _vertex_values(tmp_path, name="b.json", params=given) == ("/data/b", 7)

    def as_2_0_config(job):  # schema 2.0: root `type`, runtimeConfig.parameters typed
        job["pipelineSpec"]["schemaVersion"] = "2.0.0"
        types = {"STRING": "STRING", "NUMBER_INTEGER": "INT"}
        for definition in job["pipelineSpec"]["root"]["inputDefinitions"]["parameters"].values():
            definition["type"] = types[definition.pop("parameterType")]
        job["runtimeConfig"]["parameters"] = {
            "data_root": {"stringValue": "/data/c"},
            "serving_dir": {"stringValue": "/serving"},
            "train_windows": {"intValue": "11"},
        }
        del job["runtimeConfig"]["parameterValues"]

    assert _vertex_values(tmp_path, as_2_0_config, "c.json") == ("/data/c", 11)
    given_2_0 = _vertex_values(tmp_path, as_2_0_config, "c2.json", params={"train_windows": "9"})
    assert given_2_0 == ("/data/c", 9)
    with pytest.raises(kfp_harness.Unsupported, match="--param root: not a parameter .* data_root"):
        _vertex_values(tmp_path, name="d.json", params={"root": "/b"})
    with pytest.raises(kfp_harness.Unsupported, match="train_windows='x': not a NUMBER_INT"):
        _vertex_values(tmp_path, name="e.json", params={"train_windows": "x"})

    def no_value(job):
        del job["runtimeConfig"]["parameterValues"]["data_root"]

    with pytest.raises(kfp_harness.Unsupported, match="pass --param data_root=VALUE"):
        _vertex_values(tmp_path, no_value, "f.json")


def test_only_the_vertex_mode_runs_the_example_gen_hook(tmp_path, monkeypatch):
    for run, wanted in ((_bare(tmp_path), ["executor"]), (_job(tmp_path), ["driver", "executor"])):
        calls = []
        monkeypatch.setattr(
            run, "_run", lambda task, c, a, suffix, calls=calls: calls.append(suffix)
        )
        monkeypatch.setattr(
            harness_base, "read_output", lambda path: kfp_harness.pb.ExecutorOutput()
        )
        run.run_task("CsvExampleGen")
        assert calls == wanted, (run.backend, calls)


TRAINER = "GradientAccumulationTrainer"


def test_the_kfp_mode_waits_as_argo_waits_with_the_compiled_backoff(tmp_path):
    run = _bare(tmp_path)
    policy = run.spec.root.dag.tasks[TRAINER].retry_policy  # 30 s, factor 2, 600 s, 3 retries
    assert [run.retry_wait(policy, n, 0.0) for n in range(4)] == [30, 60, 120, None]
    assert run.retry_wait(policy, 2, 481.0) is None  # the wait would end past maxDuration
    assert run.retry_wait(policy, 2, 470.0) == 120
    policy.backoff_factor = 2.9  # container.go: int32(factor)
    assert run.retry_wait(policy, 1, 0.0) == 60
    vertex = _job(tmp_path)
    assert [vertex.retry_wait(policy, n, 0.0) for n in range(4)] == [
        30,
        30 * 2.9,
        30 * 2.9**2,
        None,
    ]


def test_a_failing_container_is_retried_after_each_backoff_on_a_scaled_clock(tmp_path, monkeypatch):
    def retried(spec):  # the Trainer's compiled policy on a task that reads nothing
        tasks = spec["root"]["dag"]["tasks"]
        tasks["CsvExampleGen"]["retryPolicy"] = tasks[TRAINER]["retryPolicy"]

    lines = []
    run = _bare(tmp_path, retried, backoff_scale=0.001, log=lines.append)
    codes = iter([143, 1, 0])
    monkeypatch.setattr(
        harness_base.subprocess,
        "run",
        lambda *a, **k: subprocess.CompletedProcess(a, next(codes), stdout="log\n"),
    )
    started = time.time()
    run._run("CsvExampleGen", ["python"], [], "executor")
    assert run.waits == [30, 60] and time.time() - started < 5
    assert lines[0].endswith("exit 143; retry 1 of 3 after 30 s (clock scaled by 0.001)")
    codes = iter([1, 1, 1, 1])
    again = _bare(tmp_path, retried, name="x.yaml", backoff_scale=0.0, log=lines.append)
    with pytest.raises(harness_base.TaskFailed, match="task CsvExampleGen exited 1"):
        again._run("CsvExampleGen", ["python"], [], "e")
    assert again.waits == [30, 60, 120]  # 3 retries, then failed


def test_the_emissary_stand_in_forwards_sigterm_to_the_group_and_leaves_at_the_launchers_death(
    tmp_path,
):
    """Python gets SIGTERM (through the launcher's group), the launcher dies of it at once, and
    the emissary exits 143 within its 1 s reaping tick, before Python's 3 s handler is done."""
    marks = tmp_path / "marks"
    user = (
        "import signal, sys, time, pathlib\n"
        f"p = pathlib.Path({str(marks)!r})\n"
        "def stop(*_):\n"
        "    p.write_text('sigterm\\n'); time.sleep(3)\n"
        "    p.write_text('sigterm\\ndone\\n'); sys.exit(143)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "p.write_text('ready\\n')\n"
        "time.sleep(60)\n"
    )
    script = os.path.join(ROOT, "scripts", "kfp_pod.py")
    pod = subprocess.Popen(
        [sys.executable, script, "emissary", "--", sys.executable, script, "launcher", "--"]
        + [sys.executable, "-c", user]
    )
    try:
        deadline = time.time() + 30
        while not (marks.exists() and marks.read_text() == "ready\n") and time.time() < deadline:
            time.sleep(0.05)
        pod.send_signal(signal.SIGTERM)
        code = pod.wait(timeout=10)
        assert code == 128 + signal.SIGTERM
        assert marks.read_text() == "sigterm\n"  # Python got it, and was not done when it left
    finally:
        pod.kill()
        time.sleep(3.5)  # the orphaned Python finishes its handler (no PID namespace here)


# --- our entry point types what open-source KFP hands over untyped -----------------------------


def _statistics_gen_argv(tmp_path):
    run = _bare(tmp_path)
    _done(run, "CsvExampleGen")
    container = run.container("StatisticsGen")
    command = run.command("StatisticsGen", container.command, container.args, "n")
    return command[command.index("--executor_class_path") :]


def _input_type(argv):
    ei = json.loads(argv[argv.index(kfp_inputs.INVOCATION_FLAG) + 1])
    return ei["inputs"]["artifacts"]["examples"]["artifacts"][0]["type"]


def test_our_entry_point_types_the_inputs_tfxs_own_cannot_read(tmp_path):
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils as utils

    argv = _statistics_gen_argv(tmp_path)
    untyped = kfp_harness.pb.ArtifactTypeSchema(instance_schema=_input_type(argv)["instanceSchema"])
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'get'"):
        utils._retrieve_class_path(untyped)  # TFX's own reading of it
    typed_argv = kfp_inputs.typed_argv(argv)
    assert (
        typed_argv[: argv.index(kfp_inputs.INVOCATION_FLAG) + 1]
        == argv[: argv.index(kfp_inputs.INVOCATION_FLAG) + 1]
    )
    typed = kfp_harness.pb.ArtifactTypeSchema(
        instance_schema=_input_type(typed_argv)["instanceSchema"]
    )
    assert utils._retrieve_class_path(typed) == "tfx.types.standard_artifacts.Examples"
    assert kfp_inputs.typed_argv(typed_argv) is typed_argv  # typed: passed on as it came


def test_an_untyped_input_with_no_spec_to_type_it_from_is_one_line(tmp_path):
    argv = _statistics_gen_argv(tmp_path)
    at = argv.index(kfp_inputs.INPUTS_SPEC_FLAG)
    without = argv[:at] + argv[at + 2 :]  # the 2.0 form passes no inputs spec
    with pytest.raises(
        kfp_inputs.UntypedInput,
        match=r"input artifact 'examples' came without a type .* no "
        r"--json_serialized_inputs_spec_args: compile the job with --pipeline-spec 2.1$",
    ):
        kfp_inputs.typed_argv(without)


def test_the_steps_entry_point_hands_tfx_the_typed_input_or_ends_with_one_line(
    tmp_path, monkeypatch, capsys
):
    from ga_tfx.pipelines import kubeflow

    argv = _statistics_gen_argv(tmp_path)
    seen = []
    monkeypatch.setattr(kubeflow.runpy, "run_module", lambda *a, **k: seen.append(sys.argv))
    monkeypatch.setattr(sys, "argv", ["kubeflow.py"] + argv)
    kubeflow.main()
    (given,) = seen
    assert (
        kfp_harness.type_title(
            kfp_harness.pb.ArtifactTypeSchema(instance_schema=_input_type(given)["instanceSchema"])
        )
        == "tfx.Examples"
    )
    at = argv.index(kfp_inputs.INPUTS_SPEC_FLAG)
    monkeypatch.setattr(sys, "argv", ["kubeflow.py"] + argv[:at] + argv[at + 2 :])
    with pytest.raises(SystemExit) as stopped:
        kubeflow.main()
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert stopped.value.code == 1 and last.startswith("error: input artifact 'examples' came")
