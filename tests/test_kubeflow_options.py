"""``ga-tfx compile``'s own settings (``ga_tfx.pipelines.kubeflow_options``), without compiling:
resources parsed and refused with the bad value named, each backend's accelerator names, the
schema, output and path checks, Beam's flags per runner; and the two components' routes for a
runtime parameter (the Pusher's folder, the Trainer's length)."""

from ga_tfx.pipelines import beam
from ga_tfx.pipelines.kubeflow_options import (
    Resources,
    beam_args,
    check_cluster_path,
    check_output_file,
    check_schema,
)

import os

import pytest

pytestmark = [pytest.mark.tfx]  # the ga_tfx.pipelines package (installed with the tfx extra)


def test_resources_parse_into_the_pipeline_spec_fields():
    parsed = Resources.parse("cpu=8, memory=32G, accelerator=NVIDIA_TESLA_T4")
    assert parsed == Resources(
        cpu=8.0, memory_gb=32.0, accelerator="NVIDIA_TESLA_T4", accelerator_count=1
    )
    spec = parsed.spec()
    assert (spec.cpu_limit, spec.memory_limit) == (8.0, 32.0)
    assert (spec.accelerator.type, spec.accelerator.count) == ("NVIDIA_TESLA_T4", 1)
    assert Resources.parse("memory=512Mi").memory_gb == pytest.approx(0.536870912)
    assert (
        Resources.parse("accelerator=nvidia.com/gpu,count=2", backend="kfp").accelerator_count == 2
    )
    assert not Resources.parse("cpu=2").spec().HasField("accelerator")


@pytest.mark.parametrize(
    "text, named",
    [
        ("cpu=0", "cpu=0.0 must be positive"),
        ("cpu=many", "'cpu=many' is not valid"),
        ("memory=32GB", "'memory=32GB' is not valid"),
        ("gpus=1", "unknown key 'gpus'"),
        ("accelerator=TESLA", "accelerator='TESLA' is not a known type; allowed: NVIDIA_"),
        ("count=2", "a count needs an accelerator"),
        ("accelerator=NVIDIA_L4,count=0", "count=0"),
    ],
)
def test_a_bad_resource_is_refused_naming_it(text, named):
    with pytest.raises(ValueError, match=r"^--trainer-resources: .*") as error:
        Resources.parse(text, "--trainer-resources")
    assert named in str(error.value)


# Beam's in-process runner, written out here (not read from beam.IN_PROCESS_RUNNER): not
# DirectRunner, which would try Prism first (a download).
IN_PROCESS_RUNNER = "--runner=apache_beam.runners.portability.fn_api_runner.FnApiRunner"


def test_every_beam_step_names_its_runner_and_needs_no_package():
    direct = beam_args("DirectRunner", "reg/img:1", "gs://b/root")
    assert direct[0] == IN_PROCESS_RUNNER
    assert "--sdk_container_image=reg/img:1" in direct  # TFX builds no sdist of itself
    dataflow = beam_args(
        "DataflowRunner", "reg/img:1", "gs://b/root", ["--project=p", "--region=europe-west4"]
    )
    assert dataflow[:3] == [
        "--runner=DataflowRunner",
        "--sdk_container_image=reg/img:1",
        "--temp_location=gs://b/root/beam-temp",
    ]
    with pytest.raises(ValueError, match="DataflowRunner needs --region=..."):
        beam_args("DataflowRunner", "reg/img:1", "gs://b/root", ["--project=p"])
    with pytest.raises(ValueError, match="allowed DirectRunner, DataflowRunner"):
        beam_args("SparkRunner", "reg/img:1", "gs://b/root")


def test_local_runs_name_the_in_process_runner_and_need_no_package():
    from tfx.utils import dependency_utils

    args = beam.in_process_args(1)
    assert args == [
        IN_PROCESS_RUNNER,
        "--direct_running_mode=in_memory",
        "--direct_num_workers=1",
        beam.NO_PACKAGE_FLAG,
    ]
    # What the flag is for, by TFX's own rule rather than the code under test: a Beam dependency
    # flag is set, so TFX adds (and builds) no package of itself.
    assert dependency_utils.make_beam_dependency_flags(args) == args
    assert beam.in_process_args(0)[1] == "--direct_running_mode=multi_processing"


def _entry_point_exit(monkeypatch, capsys, error, tf_config="{}"):
    """Runs the steps' entry point with TFX's executor replaced by one raising ``error``:
    (exit code, last line printed)."""
    from ga_tfx.pipelines import kubeflow

    def executor(*args, **kwargs):
        raise error

    monkeypatch.setattr(kubeflow.runpy, "run_module", executor)
    monkeypatch.setenv("TF_CONFIG", tf_config)
    with pytest.raises(SystemExit) as stopped:
        kubeflow.main()
    return stopped.value.code, capsys.readouterr().out.strip().splitlines()[-1]


def test_the_entry_point_ends_a_lost_peer_and_a_preemption_with_one_line(monkeypatch, capsys):
    from ga_tfx.preemption import TrainingInterrupted

    import tensorflow as tf

    down = tf.errors.UnavailableError(None, None, "/job:worker/replica:0/task:0 is down")
    with pytest.raises(RuntimeError, match="executor failed"):  # any other error: as it is
        _entry_point_exit(monkeypatch, capsys, RuntimeError("executor failed"))
    with pytest.raises(tf.errors.UnavailableError):  # no cluster: not a lost peer
        _entry_point_exit(monkeypatch, capsys, down, tf_config="")
    try:
        raise RuntimeError("TFX's launcher") from down
    except RuntimeError as wrapped:
        code, last = _entry_point_exit(monkeypatch, capsys, wrapped)
    assert code == 1
    assert last.startswith("a worker of this multi-worker training stopped (")
    assert last == (
        "a worker of this multi-worker training stopped (/job:worker/replica:0/task:0 failed); "
        "this worker stops too: run every worker again (a retry of the step) to resume from the "
        "last checkpoint"
    )
    aborted = tf.errors.CancelledError(
        None,
        None,
        "{{function_node __wrapped__CollectiveReduceV2_device_/job:chief/replica:0/task:0}} "
        "Collective ops is aborted by: Error reported from /job:worker/task:0: The tasks have "
        "crashed.",
    )  # as the chief saw it when the worker's container was killed
    assert _entry_point_exit(monkeypatch, capsys, aborted)[1].startswith(
        "a worker of this multi-worker training stopped (/job:worker/task:0 failed); "
    )
    code, last = _entry_point_exit(monkeypatch, capsys, TrainingInterrupted(317, 4000, 15))
    assert code == 143
    assert last == (
        "interrupted at window 317 of 4000; checkpoint saved; re-run the same command to resume"
    )


# ------------------------------------------------------------------ accelerators per backend


def test_each_backend_takes_its_own_accelerator_names_and_kfp_requests_what_it_limits():
    vertex = Resources.parse("cpu=8,memory=32G,accelerator=NVIDIA_L4,count=2", backend="vertex")
    spec = vertex.spec()
    assert (spec.cpu_limit, spec.memory_limit, spec.cpu_request, spec.memory_request) == (
        8.0,
        32.0,
        0.0,
        0.0,
    )  # Vertex picks the machine from the limits
    assert (spec.accelerator.type, spec.accelerator.count) == ("NVIDIA_L4", 2)
    kfp = Resources.parse("cpu=8,memory=32G,accelerator=nvidia.com/gpu", backend="kfp")
    spec = kfp.spec()
    # The driver writes cpu/memory requests and limits into the pod; the accelerator only as a
    # limit (Kubernetes takes an extended resource's request from its limit).
    assert (spec.cpu_limit, spec.memory_limit, spec.cpu_request, spec.memory_request) == (
        8.0,
        32.0,
        8.0,
        32.0,
    )
    assert (spec.accelerator.type, spec.accelerator.count) == ("nvidia.com/gpu", 1)
    for name in ("amd.com/gpu", "google.com/tpu", "gpu.intel.com/i915", "nvidia.com/mig-1g.5gb"):
        assert Resources.parse(f"accelerator={name}", backend="kfp").accelerator == name


@pytest.mark.parametrize(
    "backend, text, line",
    [
        (
            "kfp",
            "accelerator=NVIDIA_TESLA_T4",
            "accelerator='NVIDIA_TESLA_T4' is Vertex's name (--backend vertex); a Kubernetes "
            "pod asks for the device plugin's resource: nvidia.com/gpu",
        ),
        (
            "kfp",
            "accelerator=TPU_V3",
            "accelerator='TPU_V3' is Vertex's name (--backend vertex); a Kubernetes pod asks "
            "for the device plugin's resource: google.com/tpu",
        ),
        (
            "vertex",
            "accelerator=nvidia.com/gpu",
            "accelerator='nvidia.com/gpu' is a Kubernetes resource name (--backend kfp); Vertex "
            "names the device model: one of NVIDIA_",
        ),
        ("kfp", "accelerator=gpu", "accelerator='gpu' is not a Kubernetes resource name"),
        (
            "kfp",
            "accelerator=kubernetes.io/gpu",  # the reserved domain: no device plugin's
            "accelerator='kubernetes.io/gpu' is not a Kubernetes resource name",
        ),
        ("vertex", "accelerator=T4", "accelerator='T4' is not a known type; allowed: NVIDIA_"),
    ],
)
def test_the_other_backends_accelerator_name_is_refused_naming_the_equivalent(backend, text, line):
    with pytest.raises(ValueError) as error:
        Resources.parse(text, "--trainer-resources", backend)
    assert str(error.value).startswith("--trainer-resources: " + line)
    assert "\n" not in str(error.value)


# ------------------------------------------------------------------ what compile checks first


def test_compile_checks_the_schema_the_output_and_the_paths_per_backend():
    assert check_schema("2.1", "kfp") == "2.1" and check_schema("2.0", "vertex") == "2.0"
    with pytest.raises(ValueError, match=r"^--pipeline-spec 2.0 with --backend kfp: "):
        check_schema("2.0", "kfp")
    assert check_output_file("a/job.yaml", "kfp") == "a/job.yaml"
    assert check_output_file("a/job.json", "vertex") == "a/job.json"
    with pytest.raises(ValueError, match=r"as YAML, .*: use a/job\.yaml$"):
        check_output_file("a/job.json", "kfp")
    with pytest.raises(ValueError, match=r"as JSON: use a/job\.json$"):
        check_output_file("a/job.yaml", "vertex")
    for good in ("gs://b/root", "/mnt/pipeline"):
        assert check_cluster_path("--pipeline-root", good, "kfp") == good
    for bad, what in [
        ("minio://mlpipeline/v2/artifacts", "minio:// is not implemented there"),
        ("s3://b/root", "s3:// is not implemented there"),
        ("root", "a relative path"),
    ]:
        with pytest.raises(ValueError) as error:
            check_cluster_path("--pipeline-root", bad, "kfp")
        assert str(error.value).startswith(f"--pipeline-root {bad!r}: {what}; ")
        assert str(error.value).endswith("runtime_config.pipeline_root)")
    with pytest.raises(ValueError) as error:
        check_cluster_path("--data-root", "minio://b/data", "vertex")
    assert str(error.value).endswith("mounted in every pod (e.g. /mnt/pipeline)")


def test_tf_io_gfile_here_opens_what_the_path_check_allows():
    """The rule of :func:`check_cluster_path` against this stack's ``tf.io.gfile``: the
    schemes it refuses are not implemented; a path and ``gs://`` are (``gs://`` is not reached
    here: no network, so only the scheme's lookup is checked)."""
    import tensorflow as tf

    for scheme in ("minio", "s3", "hdfs"):
        with pytest.raises(tf.errors.UnimplementedError, match=f"scheme '{scheme}' not impl"):
            tf.io.gfile.exists(f"{scheme}://bucket/x")
    try:
        tf.io.gfile.exists("gs://bucket-that-is-not-reached/x")
    except tf.errors.UnimplementedError:  # pragma: no cover (what would fail the rule)
        pytest.fail("gs:// is not implemented by this stack's tf.io.gfile")
    except tf.errors.OpError:
        pass  # no network here: the scheme is there, the bucket is not reached
    assert tf.io.gfile.exists("/") is True


# ------------------------------------------------------------------ the runtime-parameter routes


def test_the_serving_dir_pusher_pushes_a_blessed_model_to_its_str_folder(tmp_path):
    """``ServingDirPusher``'s executor: TFX's Pusher with the destination made from the str
    ``serving_dir`` (what a runtime parameter holds); a model not blessed is not pushed."""
    from ga_tfx.pipelines.serving_pusher import Executor, push_destination_json

    import json

    from tfx.types import standard_artifacts

    model = standard_artifacts.Model()
    model.uri = str(tmp_path / "model")
    (tmp_path / "model" / "Format-Serving").mkdir(parents=True)
    (tmp_path / "model" / "Format-Serving" / "saved_model.pb").write_bytes(b"model")
    for blessed in (1, 0):
        blessing = standard_artifacts.ModelBlessing()
        blessing.uri = str(tmp_path / f"blessing{blessed}")
        blessing.set_int_custom_property("blessed", blessed)
        pushed = standard_artifacts.PushedModel()
        pushed.uri = str(tmp_path / f"pushed{blessed}")
        serving = tmp_path / f"serving{blessed}"
        Executor().Do(
            {"model": [model], "model_blessing": [blessing]},
            {"pushed_model": [pushed]},
            {"serving_dir": str(serving), "custom_config": "null"},
        )
        assert pushed.get_int_custom_property("pushed") == blessed
        versions = os.listdir(serving) if serving.exists() else []
        assert len(versions) == blessed
        if blessed:
            assert (serving / versions[0] / "saved_model.pb").read_bytes() == b"model"
    assert json.loads(push_destination_json("gs://b/s")) == {
        "filesystem": {"baseDirectory": "gs://b/s"}
    }
    with pytest.raises(ValueError, match="serving_dir is empty"):
        Executor().Do({}, {}, {"serving_dir": ""})


def test_the_trainer_takes_its_length_as_an_int_property_or_a_runtime_parameter():
    """``train_windows``: an int execution property (a runtime parameter can hold it; the
    ``TrainArgs`` proto it replaces could only be held whole, as JSON); an int is checked as
    ``train_args.num_steps`` is; both at once are refused."""
    from ga_tfx.components import keys
    from ga_tfx.components.trainer import GradientAccumulationTrainer

    from tfx import v1 as tfx
    from tfx.types import standard_artifacts

    examples = tfx.dsl.Channel(type=standard_artifacts.Examples)
    common = dict(model_fn="ga_tfx.pipelines.digits", micro_batch_size=8, accum_steps=2)
    common.update(label_key="label_xf", windows_per_epoch=5)
    parameter = tfx.dsl.experimental.RuntimeParameter(name="train_windows", ptype=int, default=10)
    trainer = GradientAccumulationTrainer(examples, train_windows=parameter, **common)
    assert trainer.exec_properties[keys.TRAIN_WINDOWS_PROPERTY] is parameter
    assert trainer.exec_properties["train_args"] in ("{}", tfx.proto.TrainArgs())  # no length
    assert (
        GradientAccumulationTrainer(examples, train_windows=10, **common).exec_properties[
            keys.TRAIN_WINDOWS_PROPERTY
        ]
        == 10
    )
    with pytest.raises(ValueError, match=r"windows_per_epoch=5 must divide .*=7"):
        GradientAccumulationTrainer(examples, train_windows=7, **common)
    with pytest.raises(ValueError, match="Give the length once"):
        GradientAccumulationTrainer(
            examples, train_windows=10, train_args=tfx.proto.TrainArgs(num_steps=10), **common
        )


def test_vertex_accelerators_are_the_client_librarys_enum_one_declaration():
    # Vertex's names are its API's AcceleratorType enum, read where the Vertex Trainer reads
    # them: --trainer-resources and --trainer-workers take and name the same set.
    from ga_tfx.components.trainer.vertex_training import ACCELERATOR_TYPES

    from google.cloud.aiplatform_v1.types import AcceleratorType

    assert set(ACCELERATOR_TYPES) == set(AcceleratorType.__members__) - {
        "ACCELERATOR_TYPE_UNSPECIFIED"
    }
    newest = ACCELERATOR_TYPES[-1]  # a name a hand-kept list would lag behind
    assert Resources.parse(f"accelerator={newest}", backend="vertex").accelerator == newest
    with pytest.raises(ValueError) as error:
        Resources.parse("accelerator=T4", "--trainer-resources", "vertex")
    assert str(error.value).endswith("allowed: " + ", ".join(ACCELERATOR_TYPES))
