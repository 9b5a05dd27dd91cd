"""The digits pipeline compiled for Kubeflow Pipelines v2 (``ga_tfx.pipelines.kubeflow``), no
Docker.

1. The PipelineJob parses strictly as KFP protos and holds every step, the ga-tfx Trainer's
   executor, the image and the accumulation settings as they were configured.
2. It equals the committed golden ``tests/golden/digits_pipeline_job.json`` (the same on both
   TFX stacks) once volatile fields are normalised (the TFX/Python version in ``sdkVersion``
   and the labels, paths under the temporary directory or this checkout); a changed
   ``accum_steps`` changes the normalised job, so the comparison can fail. The test never
   writes the golden: after an intended change, regenerate it with
   ``.venv/bin/python scripts/update_golden.py`` (a separate command; review and commit the
   diff it prints), then run this test.
3. The compiled Trainer step runs: its container ``command`` + ``args`` from the compiled
   deployment spec are executed here as a subprocess (``python`` -> this interpreter, the
   ``{{$}}`` placeholder -> an ExecutorInput JSON as Kubeflow v2 passes it, with the compiled
   constant parameters), on real transformed digits made by tf.Transform with the pipeline's
   own ``preprocessing_fn``; it must exit 0, export a SavedModel and write the executor output.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx._keras import tf
from ga_tfx.pipelines import digits, kubeflow
from ga_tfx.pipelines.cli import SHIPPED_DATA
from ga_tfx.pipelines.pipeline import TrainingOptions
from ga_tfx.pipelines.user_code import DIGITS

import copy
import csv
import difflib
import glob
import json
import os
import subprocess
import sys

import apache_beam as beam
import pytest
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2
from tensorflow_transform.tf_metadata import dataset_metadata, metadata_io, schema_utils
from tfx import version as tfx_version

from tests.helpers import PIPELINE_COMPONENTS

# TFX, tensorflow_transform and kfp; the compiler is TFX's own: run on both stacks (`stack`).
pytestmark = [pytest.mark.tfx, pytest.mark.slow, pytest.mark.stack]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# One golden for both TFX stacks: TFX 1.16 and 1.21 compile the same normalised job (compared
# on 2026-11-26); a stack that compiles another job fails here.
GOLDEN = os.path.join(ROOT, "tests", "golden", "digits_pipeline_job.json")
IMAGE = "europe-docker.pkg.dev/example-project/ga-tfx/ga-tfx:test"
NAME = "ga-tfx-digits"
CLUSTER_PATHS = dict(
    pipeline_root="gs://example-bucket/root",
    data_root="gs://example-bucket/digits",
    serving_model_dir="gs://example-bucket/serving",
)
TRAINER = "GradientAccumulationTrainer"
# The golden's options: the defaults of `ga-tfx compile --tune`.
GOLDEN_OPTIONS = TrainingOptions.of(tune=True)


def compile_job(directory, options, name=None, backend="vertex"):
    name = name or ("job.yaml" if backend == "kfp" else "job.json")
    return kubeflow.compile_pipeline(
        os.path.join(directory, name),
        IMAGE,
        NAME,
        CLUSTER_PATHS["pipeline_root"],
        CLUSTER_PATHS["data_root"],
        CLUSTER_PATHS["serving_model_dir"],
        options,
        backend=backend,
    )


@pytest.fixture(scope="module")
def tuned_job(tmp_path_factory):
    directory = tmp_path_factory.mktemp("compiled")
    job = compile_job(str(directory), GOLDEN_OPTIONS)
    with open(directory / "job.json") as f:
        assert json.load(f) == job  # what was written is what was returned
    return job, str(directory)


def parse_strictly(job):
    """(PipelineJob, PipelineSpec) protos; an unknown field anywhere raises ParseError."""
    spec = json_format.ParseDict(
        job["pipelineSpec"], pipeline_spec_pb2.PipelineSpec(), ignore_unknown_fields=False
    )
    whole = json_format.ParseDict(job, pipeline_spec_pb2.PipelineJob(), ignore_unknown_fields=False)
    return whole, spec


def trainer_parameters(spec):
    """{name: python value} of the Trainer task's constant parameters."""
    params = spec.root.dag.tasks[TRAINER].inputs.parameters
    return {
        name: constant_of(param)
        for name, param in params.items()
        if param.WhichOneof("kind") == "runtime_value"
    }


def runtime_inputs(spec):
    """{(task, its input): the root input parameter it reads} over every task."""
    return {
        (name, key): param.component_input_parameter
        for name, task in spec.root.dag.tasks.items()
        for key, param in task.inputs.parameters.items()
        if param.WhichOneof("kind") == "component_input_parameter"
    }


def constant_of(param):
    """A compiled constant parameter's value: schema 2.1's ``constant`` (a protobuf Value:
    integers as numbers) or 2.0's ``constantValue``."""
    value = param.runtime_value
    if value.WhichOneof("value") == "constant":
        return json_format.MessageToDict(value.constant)
    constant = value.constant_value
    return getattr(constant, constant.WhichOneof("value"))


# ------------------------------------------------------------------ 1. structure


@pytest.mark.parametrize("tune", [True, False])
def test_compiled_job_has_every_step_the_trainer_and_its_settings(tuned_job, tmp_path, tune):
    options = (
        GOLDEN_OPTIONS
        if tune
        else TrainingOptions.of(
            accum_steps=3,
            micro_batch_size=24,
            train_windows=30,
            windows_per_epoch=10,
            eval_steps=5,
            agc_clip_factor=None,
            strategy="mirrored",
        )
    )
    job = tuned_job[0] if tune else compile_job(str(tmp_path), options)
    whole, spec = parse_strictly(job)

    assert whole.display_name == NAME and spec.pipeline_info.name == NAME
    assert spec.schema_version == "2.1.0"  # the default: what open-source KFP reads
    windows = options.windows_plan()[0]
    assert job["runtimeConfig"] == {
        "gcsOutputDirectory": CLUSTER_PATHS["pipeline_root"],
        # The runtime parameters' defaults: the compile's values.
        "parameterValues": {
            "data_root": CLUSTER_PATHS["data_root"],
            "serving_dir": CLUSTER_PATHS["serving_model_dir"],
            "train_windows": windows,
        },
    }
    assert runtime_inputs(spec) == {
        ("CsvExampleGen", "input_base"): "data_root",
        ("Pusher", "serving_dir"): "serving_dir",
        (TRAINER, "train_windows"): "train_windows",
    }
    tasks = spec.root.dag.tasks
    expected = PIPELINE_COMPONENTS if tune else PIPELINE_COMPONENTS - {"Tuner"}
    assert set(tasks) == expected
    assert {task.component_ref.name for task in tasks.values()} == expected
    assert set(spec.components) == expected
    executors = spec.deployment_spec["executors"]
    for step in expected:
        container = executors[spec.components[step].executor_label]["container"]
        assert container["image"] == IMAGE, step
        assert list(container["command"]) == ["python", "-m", "ga_tfx.pipelines.kubeflow"], step
    trainer_container = executors[spec.components[TRAINER].executor_label]["container"]
    args = list(trainer_container["args"])
    assert (
        args[args.index("--executor_class_path") + 1]
        == "ga_tfx.components.trainer.executor.Executor"
    )
    assert args[args.index("--json_serialized_invocation_args") + 1] == "{{$}}"

    trainer = tasks[TRAINER]
    sources = {
        key: (a.task_output_artifact.producer_task, a.task_output_artifact.output_artifact_key)
        for key, a in trainer.inputs.artifacts.items()
    }
    expected_sources = {
        "examples": ("Transform", "transformed_examples"),
        "transform_graph": ("Transform", "transform_graph"),
    }
    if tune:
        expected_sources["hyperparameters"] = ("Tuner", "best_hyperparameters")
    assert sources == expected_sources

    params = trainer_parameters(spec)
    windows, windows_per_epoch = options.windows_plan()  # (None: the digits' defaults)
    run = options.accumulation
    expected_params = dict(
        accum_steps=run.accum_steps,
        micro_batch_size=run.micro_batch_size,
        label_key=digits.LABEL_KEY,
        raw_label_key=digits.RAW_LABEL_KEY,
        model_fn=DIGITS.model_fn,
        strategy=run.strategy,
        windows_per_epoch=windows_per_epoch,
        replace_batchnorm=1,
        mixed_precision="float32",
        partial_window="apply",
        shuffle=1,
        shuffle_seed=0,
    )
    if run.agc_clip_factor is not None:
        expected_params["agc_clip_factor"] = run.agc_clip_factor
    for name, value in expected_params.items():
        assert params.get(name) == value, name
    assert ("agc_clip_factor" in params) == (run.agc_clip_factor is not None)
    assert json.loads(params["train_args"]) == {}  # the length: train_windows, above
    assert json.loads(params["eval_args"]) == {"num_steps": run.eval_steps}
    assert "module_file" not in params  # the model comes from the installed package
    if tune:
        tuner_config = json.loads(constant_of(tasks["Tuner"].inputs.parameters["custom_config"]))
        searched = list(options.tuning.search_accum_steps)
        assert tuner_config["ga_tfx_search"]["accum_steps"] == searched
        assert tuner_config["model_fn"] == DIGITS.model_fn


# ------------------------------------------------------------------ 2. golden


def normalize(job, paths=()):
    """The job without what changes between machines and TFX patch releases.

    Checks first that the volatile fields hold what they should, so that normalising them
    hides nothing else. ``paths``: local directories (temporary, this checkout) whose
    occurrence in any string is replaced by a placeholder.
    """
    job = copy.deepcopy(job)
    assert job["pipelineSpec"]["sdkVersion"] == f"tfx-{tfx_version.__version__}"
    job["pipelineSpec"]["sdkVersion"] = "tfx-<version>"
    labels = job.get("labels", {})
    assert labels.get("tfx_version") == tfx_version.__version__.replace(".", "-")
    assert labels.get("tfx_py_version") == "{}-{}".format(*sys.version_info[:2])
    labels["tfx_version"] = labels["tfx_py_version"] = "<version>"
    replacements = [(path, f"<path{i}>") for i, path in enumerate(paths)] + [(ROOT, "<checkout>")]

    def strip(value):
        if isinstance(value, dict):
            return {key: strip(item) for key, item in value.items()}
        if isinstance(value, list):
            return [strip(item) for item in value]
        if isinstance(value, str):
            for path, placeholder in replacements:
                value = value.replace(path, placeholder)
        return value

    return strip(job)


def dump(job):
    return json.dumps(job, indent=2, sort_keys=True) + "\n"


def leaf_differences(a, b, where=""):
    """Paths of the leaves that differ between two JSON values."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [
            path
            for key in sorted(set(a) | set(b))
            for path in leaf_differences(a.get(key), b.get(key), f"{where}/{key}")
        ]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            path
            for i, (x, y) in enumerate(zip(a, b))
            for path in leaf_differences(x, y, f"{where}/{i}")
        ]
    return [] if a == b else [where]


def test_compiled_job_matches_the_golden(tuned_job):
    job, directory = tuned_job
    normalized = dump(normalize(job, [directory]))
    with open(GOLDEN) as f:
        golden = f.read()
    diff = "".join(
        difflib.unified_diff(
            golden.splitlines(True), normalized.splitlines(True), "golden", "compiled", n=2
        )
    )
    assert normalized == golden, (
        f"The compiled Kubeflow job differs from {os.path.relpath(GOLDEN, ROOT)}; if the "
        "change is intended, run scripts/update_golden.py and commit the golden (both TFX "
        "stacks compare with it):\n" + diff[:6000]
    )


def test_the_golden_comparison_sees_a_changed_accum_steps(tuned_job, tmp_path):
    job, directory = tuned_job
    changed = compile_job(
        str(tmp_path),
        TrainingOptions.of(tune=True, accum_steps=GOLDEN_OPTIONS.accumulation.accum_steps + 1),
    )
    before, after = normalize(job, [directory]), normalize(changed, [str(tmp_path)])
    assert dump(before) != dump(after)
    differences = leaf_differences(before, after)
    trainer_accum = (
        "/pipelineSpec/root/dag/tasks/GradientAccumulationTrainer/inputs/"
        "parameters/accum_steps/runtimeValue/constant"
    )
    tuner_config = (
        "/pipelineSpec/root/dag/tasks/Tuner/inputs/parameters/custom_config/"
        "runtimeValue/constant"
    )  # holds the ga_tfx settings
    data_check = (  # the largest effective batch, for the "more rows than the split" check
        "/pipelineSpec/root/dag/tasks/DataCheck/inputs/parameters/effective_batch_size/"
        "runtimeValue/constant"
    )
    assert differences == [data_check, trainer_accum, tuner_config]


# ------------------------------------------------------------------ the kfp file


@pytest.fixture(scope="module")
def kfp_file(tmp_path_factory):
    """``--backend kfp``'s file (the golden's options) and what compile_pipeline returned."""
    directory = tmp_path_factory.mktemp("kfp")
    spec = compile_job(str(directory), GOLDEN_OPTIONS, backend="kfp")
    return str(directory / "job.yaml"), spec


def string_leaves(value, where=""):
    """(path, string) of every string in a JSON value."""
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in string_leaves(v, f"{where}/{k}")]
    if isinstance(value, list):
        return [leaf for i, v in enumerate(value) for leaf in string_leaves(v, f"{where}/{i}")]
    return [(where, value)] if isinstance(value, str) else []


def test_the_kfp_file_is_the_bare_pipeline_spec_that_kfps_client_loads(kfp_file, tuned_job):
    """kfp's own client-side loading code takes the file: ``Client.upload_pipeline`` and
    ``create_run_from_pipeline_package`` read a package with ``_extract_pipeline_yaml``
    (kfp/client/client.py, kfp 2.5 and 2.16), and ``kfp.components.load_component_from_file``
    reads it as a pipeline with the runtime parameters as its inputs, defaults included."""
    import yaml
    from kfp import components
    from kfp.client import client as kfp_client

    path, spec = kfp_file
    with open(path) as f:
        assert yaml.safe_load(f) == spec  # what was written is what was returned
    loaded = kfp_client._extract_pipeline_yaml(path)
    assert json_format.MessageToDict(loaded.pipeline_spec) == spec
    strict = json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec())
    assert strict.pipeline_info.name == NAME and strict.schema_version == "2.1.0"
    # The same PipelineSpec as the Vertex form's, but for the defaults of the root inputs.
    vertex_spec = copy.deepcopy(tuned_job[0]["pipelineSpec"])
    kfp_spec = copy.deepcopy(spec)
    for parameter in kfp_spec["root"]["inputDefinitions"]["parameters"].values():
        del parameter["defaultValue"], parameter["description"]
    assert kfp_spec == vertex_spec
    # No PipelineJob around it, no pipeline root in it.
    assert not {"displayName", "labels", "runtimeConfig", "pipelineSpec"} & set(spec)
    assert "defaultPipelineRoot" not in spec
    # The compiled pipeline root is only in the Trainer's checkpoint root and the Tuner's
    # trials file (compile-time choices, docs/pipelines.md); the runs' outputs go under the
    # pipeline root each run is created with.
    assert {
        where.split("/")[4]
        for where, text in string_leaves(spec)
        if CLUSTER_PATHS["pipeline_root"] in text
    } == {TRAINER, "Tuner"}

    pipeline = components.load_component_from_file(path)
    assert pipeline.name == NAME
    defaults = {name: spec.default for name, spec in pipeline.component_spec.inputs.items()}
    assert defaults == {
        "data_root": CLUSTER_PATHS["data_root"],
        "serving_dir": CLUSTER_PATHS["serving_model_dir"],
        "train_windows": GOLDEN_OPTIONS.windows_plan()[0],
    }
    types = {name: spec.type for name, spec in pipeline.component_spec.inputs.items()}
    assert types == {"data_root": "String", "serving_dir": "String", "train_windows": "Integer"}


def test_the_kfp_tasks_read_the_runtime_parameters_not_constants(kfp_file):
    """ExampleGen's ``input_base``, the Pusher's ``serving_dir`` and the Trainer's
    ``train_windows`` are the root's inputs; no task carries the data root, the serving folder
    or the length as a constant (the defaults are only in the root's input definitions)."""
    _, spec = kfp_file
    strict = json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec())
    assert runtime_inputs(strict) == {
        ("CsvExampleGen", "input_base"): "data_root",
        ("Pusher", "serving_dir"): "serving_dir",
        (TRAINER, "train_windows"): "train_windows",
    }
    assert {
        name: parameter.parameter_type
        for name, parameter in strict.root.input_definitions.parameters.items()
    } == {
        "data_root": pipeline_spec_pb2.ParameterType.STRING,
        "serving_dir": pipeline_spec_pb2.ParameterType.STRING,
        "train_windows": pipeline_spec_pb2.ParameterType.NUMBER_INTEGER,
    }
    leaves = string_leaves(spec)
    for value in (CLUSTER_PATHS["data_root"], CLUSTER_PATHS["serving_model_dir"]):
        assert [where for where, text in leaves if value in text] == [
            f"/root/inputDefinitions/parameters/{name}/defaultValue"
            for name in ("data_root", "serving_dir")
            if spec["root"]["inputDefinitions"]["parameters"][name]["defaultValue"] == value
        ]
    trainer = strict.root.dag.tasks[TRAINER].inputs.parameters
    assert json.loads(constant_of(trainer["train_args"])) == {}  # no compiled num_steps
    pusher = strict.root.dag.tasks["Pusher"].inputs.parameters
    assert "push_destination" not in pusher  # the folder comes from serving_dir alone
    executors = spec["deploymentSpec"]["executors"]
    pusher_executor = executors[spec["components"]["Pusher"]["executorLabel"]]["container"]
    args = pusher_executor["args"]
    assert args[args.index("--executor_class_path") + 1] == (
        "ga_tfx.pipelines.serving_pusher.Executor"
    )


def test_todays_pipeline_job_json_is_refused_by_the_same_loading_code(tuned_job, tmp_path):
    """The Vertex form (``job.json``, what ``ga-tfx compile`` wrote for every backend before
    ``--backend``): kfp's client refuses a ``.json`` package, and the same file named ``.yaml``
    fails on the PipelineJob's own fields."""
    from kfp.client import client as kfp_client

    _, directory = tuned_job
    job_json = os.path.join(directory, "job.json")
    with pytest.raises(ValueError, match=r"should end with one of the following formats"):
        kfp_client._extract_pipeline_yaml(job_json)
    renamed = tmp_path / "job.yaml"
    renamed.write_text(open(job_json).read())
    with pytest.raises(json_format.ParseError, match="displayName"):
        kfp_client._extract_pipeline_yaml(str(renamed))


def test_compile_refuses_what_the_backend_cannot_take_in_one_line(tmp_path, capsys):
    """``--pipeline-spec 2.0`` with ``--backend kfp``, a ``.json`` output under kfp, and a
    ``minio://`` pipeline root: each the command's last line, exit 2, nothing written."""
    from ga_tfx.pipelines import cli

    common = ["compile", "--image", "reg/ga-tfx:1", "--data-root", "gs://b/digits"]
    common += ["--serving-dir", "gs://b/serving", "--backend", "kfp"]
    cases = [
        (
            ["--pipeline-root", "gs://b/r", "--pipeline-spec", "2.0", "--output", "j.yaml"],
            "--pipeline-spec 2.0 with --backend kfp: open-source KFP resolves only 2.1's",
        ),
        (
            ["--pipeline-root", "gs://b/r", "--output", str(tmp_path / "j.json")],
            f"--output {str(tmp_path / 'j.json')!r}: --backend kfp writes the bare "
            f"PipelineSpec as YAML, which kfp's client uploads only from a .yaml file: use "
            f"{tmp_path / 'j'}.yaml",
        ),
        (
            ["--pipeline-root", "minio://mlpipeline/v2/artifacts", "--output", "j.yaml"],
            "--pipeline-root 'minio://mlpipeline/v2/artifacts': minio:// is not implemented "
            "there; TFX's file I/O in the image (tf.io.gfile) writes gs://BUCKET/...",
        ),
    ]
    for flags, line in cases:
        assert cli.main(common + flags) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("ga-tfx compile: error: " + line), err
    assert not os.listdir(tmp_path)


def test_the_compile_command_writes_the_kfp_yaml_with_kubernetes_resources(tmp_path, capsys):
    from ga_tfx.pipelines import cli

    output = tmp_path / "digits.yaml"
    flags = ["compile", "--backend", "kfp", "--image", "reg/ga-tfx:1"]
    flags += ["--pipeline-root", "/mnt/pipeline", "--data-root", "/mnt/data"]
    flags += ["--serving-dir", "/mnt/serving", "--output", str(output), "--train-windows", "40"]
    flags += ["--trainer-resources", "cpu=4,memory=16G,accelerator=nvidia.com/gpu,count=2"]
    assert cli.main(flags) == 0
    out = capsys.readouterr().out
    assert f"wrote {output} (kfp): 9 steps" in out and "runtime_config.pipeline_root" in out
    from kfp.client import client as kfp_client

    spec = kfp_client._extract_pipeline_yaml(str(output)).pipeline_spec
    assert spec.root.input_definitions.parameters["train_windows"].default_value.number_value == 40
    executors = json_format.MessageToDict(spec.deployment_spec)["executors"]
    trainer = executors[spec.components[TRAINER].executor_label]["container"]
    assert trainer["resources"] == {  # what the driver puts into the pod's requests and limits
        "cpuLimit": 4.0,
        "cpuRequest": 4.0,
        "memoryLimit": 16.0,
        "memoryRequest": 16.0,
        "accelerator": {"type": "nvidia.com/gpu", "count": "2"},
    }
    # A Vertex name under kfp: refused, naming the Kubernetes resource.
    flags[-1] = "accelerator=NVIDIA_L4"
    assert cli.main(flags) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.endswith(
        "accelerator='NVIDIA_L4' is Vertex's name (--backend vertex); a Kubernetes pod asks "
        "for the device plugin's resource: nvidia.com/gpu (the model by a node selector)"
    )


# ------------------------------------------------------------------ 3. the Trainer step runs


def write_transformed_digits(directory, train_rows=256, eval_rows=128):
    """Transformed examples (Split-train/, Split-eval/) and a transform graph, as the
    pipeline's Transform writes them, from the shipped digits and ``digits.preprocessing_fn``.

    Returns (examples uri, transform graph uri).
    """
    with open(os.path.join(SHIPPED_DATA, "digits.csv"), newline="") as f:
        rows = [{key: int(value) for key, value in row.items()} for row in csv.DictReader(f)]
    splits = {"train": rows[:train_rows], "eval": rows[train_rows : train_rows + eval_rows]}
    raw_metadata = dataset_metadata.DatasetMetadata(
        schema_utils.schema_from_feature_spec(
            {key: tf.io.FixedLenFeature([], tf.int64) for key in digits.COLUMNS}
        )
    )
    examples = os.path.join(directory, "transformed_examples")
    graph = os.path.join(directory, "transform_graph")
    options = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
    with (
        beam.Pipeline(argv=options) as pipeline,
        tft_beam.Context(temp_dir=os.path.join(directory, "tft_tmp"), force_tf_compat_v1=False),
    ):
        raw = {
            split: pipeline | f"Create {split}" >> beam.Create(data)
            for split, data in splits.items()
        }
        transform_fn = (raw["train"], raw_metadata) | tft_beam.AnalyzeDataset(
            digits.preprocessing_fn
        )
        _ = transform_fn | tft_beam.WriteTransformFn(graph)
        for split, data in raw.items():
            transformed, metadata = ((data, raw_metadata), transform_fn) | (
                f"Transform {split}" >> tft_beam.TransformDataset()
            )
            coder = tft.coders.ExampleProtoCoder(metadata.schema)
            _ = (
                transformed
                | f"Encode {split}" >> beam.Map(coder.encode)
                | f"Write {split}"
                >> beam.io.WriteToTFRecord(
                    os.path.join(examples, f"Split-{split}", "transformed_examples"),
                    file_name_suffix=".gz",
                )
            )
    metadata_io.write_metadata(raw_metadata, os.path.join(graph, "metadata"))  # raw schema
    return examples, graph


def executor_input(
    component, task, inputs, outputs, output_file, overrides=None, run_parameters=()
):
    """The ExecutorInput JSON that replaces ``{{$}}``: artifacts typed as the compiled
    component declares them, the task's compiled constants as (schema 2.1.0) parameter
    values, and an input that reads a root input parameter (``componentInputParameter``) with
    the run's value from ``run_parameters``, as KFP's driver resolves it
    (kubeflow/pipelines backend/src/v2/driver/resolve.go)."""
    run_parameters = dict(run_parameters)

    def artifacts(definitions, uris, metadata):
        return {
            key: {
                "artifacts": [
                    {
                        "name": f"projects/example/locations/europe-west4/metadataStores/default/"
                        f"artifacts/{task['taskInfo']['name']}-{key}",
                        "type": definitions[key]["artifactType"],
                        "uri": uri,
                        "metadata": metadata.get(key, {}),
                    }
                ]
            }
            for key, uri in uris.items()
        }

    value = {
        "inputs": {
            "artifacts": artifacts(
                component["inputDefinitions"]["artifacts"],
                inputs,
                {"examples": {"split_names": '["train", "eval"]'}},
            ),
            "parameterValues": dict(
                {
                    name: (
                        run_parameters[param["componentInputParameter"]]
                        if "componentInputParameter" in param
                        else param["runtimeValue"]["constant"]
                    )
                    for name, param in task["inputs"]["parameters"].items()
                },
                **(overrides or {}),
            ),
        },
        "outputs": {
            "artifacts": artifacts(component["outputDefinitions"]["artifacts"], outputs, {}),
            "outputFile": output_file,
        },
    }
    # Strictly valid (the entry point parses leniently and would drop a misspelt field).
    json_format.ParseDict(value, pipeline_spec_pb2.ExecutorInput(), ignore_unknown_fields=False)
    return json.dumps(value)


def test_compiled_trainer_container_runs_and_exports_a_model(tmp_path):
    options = TrainingOptions.of(
        accum_steps=2,
        micro_batch_size=16,
        train_windows=6,  # the compiled default; the run below sets 4
        windows_per_epoch=2,
        eval_steps=2,
        agc_clip_factor=0.05,
    )
    job = compile_job(str(tmp_path), options)
    spec = job["pipelineSpec"]
    assert job["runtimeConfig"]["parameterValues"]["train_windows"] == 6
    assert spec["schemaVersion"] == "2.1.0"  # parameters travel as inputs.parameterValues
    task = spec["root"]["dag"]["tasks"][TRAINER]
    component = spec["components"][task["componentRef"]["name"]]
    container = spec["deploymentSpec"]["executors"][component["executorLabel"]]["container"]

    examples, graph = write_transformed_digits(str(tmp_path / "transform"))
    task_root = tmp_path / "root" / "123" / "job-1" / f"{TRAINER}_0001"  # as Vertex lays it out
    model_uri, model_run_uri = str(task_root / "model"), str(task_root / "model_run")
    output_file = str(task_root / "executor_output.json")
    invocation = executor_input(
        component,
        task,
        {"examples": examples, "transform_graph": graph},
        {"model": model_uri, "model_run": model_run_uri},
        output_file,
        # The compiled resume root is under the cluster's pipeline root (gs://...): here, a
        # local folder, as a cluster's bucket would be for its pods.
        {"resume_root": str(tmp_path / "resume")},
        # The run's own length (a runtime parameter), not the compiled default.
        run_parameters=dict(job["runtimeConfig"]["parameterValues"], train_windows=4),
    )
    assert task["inputs"]["parameters"]["resume_root"]["runtimeValue"]["constant"] == (
        CLUSTER_PATHS["pipeline_root"] + "/.ga_tfx_resume/" + NAME
    )
    assert "{{$}}" in container["args"]
    command = [sys.executable if part == "python" else part for part in container["command"]]
    command += [invocation if arg == "{{$}}" else arg for arg in container["args"]]
    assert command[1:3] == ["-m", "ga_tfx.pipelines.kubeflow"]

    # The image sets no TF_USE_LEGACY_KERAS: the entry point must select Keras 2 by itself
    # (this test process has it set, as it imported ga_tfx).
    env = {key: value for key, value in os.environ.items() if key != "TF_USE_LEGACY_KERAS"}
    env.update({item["name"]: item["value"] for item in container.get("env", [])})
    work_dir = tmp_path / "cwd"  # not the checkout: the code comes from the installed package
    work_dir.mkdir()
    result = subprocess.run(
        command, env=env, cwd=str(work_dir), capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-8000:]

    assert os.path.isfile(os.path.join(model_uri, "Format-Serving", "saved_model.pb"))
    with open(output_file) as f:
        output = json_format.Parse(
            f.read(), pipeline_spec_pb2.ExecutorOutput(), ignore_unknown_fields=False
        )
    assert {key: [a.uri for a in value.artifacts] for key, value in output.artifacts.items()} == {
        "model": [model_uri],
        "model_run": [model_run_uri],
    }
    # The compiled settings and the run's length reached the training: 4 windows (the run's
    # train_windows, not the compiled 6) of 2 x 16 examples, each an update.
    scalars = {}
    for path in glob.glob(os.path.join(model_run_uri, "ga_tfx", "events*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append(
                    (event.step, float(tf.make_ndarray(value.tensor)))
                )
    assert [step for step, _ in scalars["ga_tfx/updates"]] == [1, 2, 3, 4]
    assert {value for _, value in scalars["ga_tfx/effective_batch_size"]} == {32.0}


# ------------------------------------------------------------------ the image's definition


def test_dockerfile_builds_on_the_tfx_image_of_the_locked_tfx():
    """docker/Dockerfile (not built here: no Docker engine) starts from TFX's image of the stack
    its build argument names (TFX 1.21 by default, 1.16 on request), installs that stack's lock
    and the three packages the compiled steps import; the installed TFX is one of the two."""
    with open(os.path.join(ROOT, "docker", "Dockerfile")) as f:
        dockerfile = f.read()
    lines = dockerfile.splitlines()
    assert "ARG TFX=1.21" in lines
    # TFX's image by default; scripts/build_image.sh passes a local stand-in as BASE.
    assert "ARG BASE=gcr.io/tfx-oss-public/tfx:${TFX}.0" in lines
    froms = [line.split()[1] for line in lines if line.startswith("FROM ")]
    assert froms == ["${BASE}"]
    stacks = {"1.16", "1.21"}
    for stack in stacks:  # each value of the build argument has its lock, of that TFX
        with open(os.path.join(ROOT, "requirements", f"lock-tfx-{stack}.txt")) as f:
            assert f"tfx=={stack}.0" in f.read().splitlines(), stack
    assert ".".join(tfx_version.__version__.split(".")[:2]) in stacks
    for line in (
        "COPY requirements/lock-tfx-${TFX}.txt requirements/lock.txt",
        "COPY ga_tfx ga_tfx",
        "COPY components components",
        "COPY pipelines pipelines",
    ):
        assert line in lines, line
    assert "-r requirements/lock.txt" in dockerfile
    # The smoke check (also run by scripts/build_image.sh on the built image) checks the stack.
    assert "RUN python /opt/ga-tfx-check/smoke_check.py ${TFX}" in lines
    with open(os.path.join(ROOT, "docker", "smoke_check.py")) as f:
        assert 'assert tfx.version.__version__ == f"{stack}.0"' in f.read()


def test_compile_command_writes_the_job_with_the_flags(tmp_path, capsys):
    from ga_tfx.pipelines import cli

    output = tmp_path / "job.json"
    assert (
        cli.main(
            [
                "compile",
                "--image",
                "registry/ga-tfx:1",
                "--pipeline-root",
                "gs://b/r",
                "--data-root",
                "gs://b/digits",
                "--serving-dir",
                "gs://b/serving",
                "--accum-steps",
                "8",
                "--micro-batch",
                "16",
                "--no-agc",
                "--output",
                str(output),
            ]
        )
        == 0
    )
    assert "9 steps" in capsys.readouterr().out  # no Tuner without --tune
    job = json.loads(output.read_text())
    spec = pipeline_spec_pb2.PipelineSpec()
    json_format.ParseDict(job["pipelineSpec"], spec, ignore_unknown_fields=False)
    assert TRAINER in spec.root.dag.tasks and "Tuner" not in spec.root.dag.tasks
    values = trainer_parameters(spec)
    assert values["accum_steps"] == 8 and values["micro_batch_size"] == 16
    assert "agc_clip_factor" not in values
    assert job["runtimeConfig"]["gcsOutputDirectory"] == "gs://b/r"
    with pytest.raises(SystemExit):
        cli.main(["compile", "--pipeline-root", "gs://b/r"])  # --image etc. are required
    assert "required: --image" in capsys.readouterr().err


def test_compile_flags_set_the_schema_retries_resources_and_beam(tmp_path, capsys):
    from ga_tfx.pipelines import cli

    common = ["compile", "--image", "reg/ga-tfx:1", "--pipeline-root", "gs://b/r"]
    common += ["--data-root", "gs://b/digits", "--serving-dir", "gs://b/serving"]
    output = tmp_path / "job.json"
    flags = ["--pipeline-spec", "2.0", "--trainer-retries", "5", "--output", str(output)]
    flags += ["--trainer-resources", "cpu=4,memory=16G,accelerator=NVIDIA_L4,count=2"]
    flags += ["--beam-runner", "DataflowRunner", "--beam-arg=--project=p", "--beam-arg=--region=r"]
    assert cli.main(common + flags) == 0
    assert "pipeline spec 2.0.0 (Vertex AI Pipelines" in capsys.readouterr().out
    job = json.loads(output.read_text())
    _, spec = parse_strictly(job)  # the retry policy and resources are kfp's own fields
    assert spec.schema_version == "2.0.0"
    # 2.0: the runtime parameters' defaults in TFX's legacy form.
    assert job["runtimeConfig"]["parameters"] == {
        "data_root": {"stringValue": "gs://b/digits"},
        "serving_dir": {"stringValue": "gs://b/serving"},
        "train_windows": {"intValue": str(TrainingOptions().windows_plan()[0])},
    }
    task = spec.root.dag.tasks[TRAINER]
    assert task.retry_policy.max_retry_count == 5
    assert task.retry_policy.backoff_duration.seconds == 30
    executors = json_format.MessageToDict(spec.deployment_spec)["executors"]
    trainer = executors[spec.components[TRAINER].executor_label]["container"]
    assert trainer["resources"] == {
        "cpuLimit": 4.0,
        "memoryLimit": 16.0,
        "accelerator": {"type": "NVIDIA_L4", "count": "2"},
    }
    assert sum("resources" in e.get("container", {}) for e in executors.values()) == 1
    example_gen = executors[spec.components["CsvExampleGen"].executor_label]["container"]
    for args in (example_gen["args"], example_gen["lifecycle"]["preCacheCheck"]["args"]):
        assert "--runner=DataflowRunner" in args and "--sdk_container_image=reg/ga-tfx:1" in args
    # No retry policy on request; a bad value: the command's last line names it.
    assert cli.main(common + ["--trainer-retries", "0", "--output", str(output)]) == 0
    _, spec = parse_strictly(json.loads(output.read_text()))
    assert not spec.root.dag.tasks[TRAINER].HasField("retry_policy")
    assert cli.main(common + ["--tuner-resources", "cpu=2", "--output", str(output)]) == 2
    assert "has no tuner step" in capsys.readouterr().err
    assert cli.main(common + ["--trainer-resources", "cpu=-1", "--output", str(output)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("ga-tfx compile: error: --trainer-resources: cpu=-1.0 must be positive")
