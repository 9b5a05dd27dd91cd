"""``ga-tfx compile``'s own settings (``ga_tfx.pipelines.kubeflow_options``), without compiling:
resources parsed and refused with the bad value named, Beam's flags per runner."""

from ga_tfx.pipelines import beam
from ga_tfx.pipelines.kubeflow_options import Resources, beam_args

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
    assert Resources.parse("accelerator=nvidia.com/gpu,count=2").accelerator_count == 2
    assert not Resources.parse("cpu=2").spec().HasField("accelerator")


@pytest.mark.parametrize(
    "text, named",
    [
        ("cpu=0", "cpu=0.0 must be positive"),
        ("cpu=many", "'cpu=many' is not valid"),
        ("memory=32GB", "'memory=32GB' is not valid"),
        ("gpus=1", "unknown key 'gpus'"),
        ("accelerator=TESLA", "accelerator='TESLA' is not a known type; allowed: NVIDIA_TESLA_T4"),
        ("count=2", "a count needs an accelerator"),
        ("accelerator=NVIDIA_L4,count=0", "count=0"),
    ],
)
def test_a_bad_resource_is_refused_naming_it(text, named):
    with pytest.raises(ValueError, match=r"^--trainer-resources: .*") as error:
        Resources.parse(text, "--trainer-resources")
    assert named in str(error.value)


def test_every_beam_step_names_its_runner_and_needs_no_package():
    direct = beam_args("DirectRunner", "reg/img:1", "gs://b/root")
    assert direct[0] == beam.IN_PROCESS_RUNNER  # not DirectRunner: it would try Prism first
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
    assert beam.in_process_args(1) == [
        beam.IN_PROCESS_RUNNER,
        "--direct_running_mode=in_memory",
        "--direct_num_workers=1",
        beam.NO_PACKAGE_FLAG,
    ]
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
