"""`ga-tfx run --data-root DIR --label COLUMN` on CSV data nobody here shaped.

* scikit-learn's breast-cancer measurements (569 patients, 30 numeric columns, shipped offline
  with scikit-learn) plus a text column (a made-up clinic) and a TEXT label (malignant /
  benign): >= 0.9 eval accuracy with the defaults, through the real pipeline and the quiet
  console;
* a seeded messy version of TFX's Chicago taxi trips (``tests/messy_taxi.py``: blanked cells,
  a constant column, an identifier column, a class only in eval, label cells left empty, an
  absurd value), classification and regression with the defaults: the data summary says what
  was dropped and why, the model trains, beats the trivial baseline (whose metric is checked
  against numpy on the eval rows) and stays within 1.2x of scikit-learn's HistGradientBoosting
  on the same split, is pushed, and serves rows with missing cells (left out of the
  tf.Example); a threshold it misses is explained in one line. The classification run reads the
  table as R's write.csv writes it, the regression run as Excel in Europe saves it
  (``messy_taxi.DIALECTS``): each read as the plain table (same examples, same split), the
  dialect shown as the summary's first line.

The fast tests check the pre-run checks, the training length rule and the pipeline's shape.
"""

from ga_tfx.pipelines.options import TrainingOptions
from ga_tfx.pipelines.tabular import generic

import csv
import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from tests import messy_taxi

pytestmark = [pytest.mark.tfx]

# The expectations, from the manual, not from the code under test (pipelines/run_length.py,
# pipelines/options.py, benchmarks/tabular_baselines.py): a --label run trains "at least 1000
# windows" (docs/pipelines.md, --train-windows), its shuffle holds "up to 1,000,000" training
# rows (docs/pipelines.md: one shuffle over the whole split), and it stays "within 1.2x of
# scikit-learn's HistGradientBoosting" (this module's docstring).
MIN_TRAIN_WINDOWS = 1000
LABEL_SHUFFLE_BUFFER = 1_000_000
MAX_GBT_RATIO = 1.2


def _breast_cancer_csv(directory):
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    rng = random.Random(0)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "patients.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([n.replace(" ", "_") for n in data.feature_names] + ["clinic", "diagnosis"])
        for row, target in zip(data.data, data.target):
            writer.writerow(
                [f"{v:.6g}" for v in row]
                + [rng.choice(["north", "south", "east"]), data.target_names[target]]
            )
    return directory


def test_the_data_check_names_the_missing_label(tmp_path):
    data = _breast_cancer_csv(str(tmp_path / "data"))
    with pytest.raises(
        ValueError, match=r"--label 'diagnosys' is not a column .* closest first: 'diagnosis', "
    ):
        generic.check_csv_dir(data, "diagnosys")
    assert generic.check_csv_dir(data, "diagnosis") == 569


def test_the_data_check_counts_rows_with_a_label_and_refuses_none(tmp_path):
    data = messy_taxi.write(str(tmp_path / "messy"))
    rows = messy_taxi.ROWS + 1  # the extra trip of the unseen class
    assert generic.check_csv_dir(data, "payment_type") == rows - messy_taxi.EMPTY_LABEL_ROWS
    assert generic.check_csv_dir(data, "tips") == rows - messy_taxi.EMPTY_LABEL_ROWS
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "a.csv").write_text("x,y\n1,\n2, \n")
    with pytest.raises(
        ValueError, match=r"label column 'y' is empty or missing \(empty\) in all 2"
    ):
        generic.check_csv_dir(str(empty), "y")


def test_the_training_length_rule():
    # The shipped digits keep their 60 windows, evaluated every 20.
    assert TrainingOptions().windows_plan() == (60, 20)
    assert TrainingOptions.of(train_windows=40).windows_plan() == (40, 20)
    # --label: 20 passes over the training rows (10001 rows / 128 per update: 79 a pass) ...
    assert TrainingOptions.of(label="y").windows_plan(train_rows=10001) == (20 * 79, 79)
    three = TrainingOptions.of(label="y", epochs=3)
    assert three.windows_plan(train_rows=100_000) == (3 * 782, 782)
    # ... and at least MIN_TRAIN_WINDOWS, evaluated 20 times, on small data.
    assert TrainingOptions.of(label="y").windows_plan(train_rows=295) == (MIN_TRAIN_WINDOWS, 50)
    # Given windows win; one evaluation at the end unless windows_per_epoch says otherwise.
    assert TrainingOptions.of(label="y", train_windows=30).windows_plan(None) == (30, 30)
    assert TrainingOptions.of(label="y", train_windows=30, windows_per_epoch=10).windows_plan() == (
        30,
        10,
    )
    with pytest.raises(ValueError, match=r"train_windows \(--train-windows N\) is needed here"):
        TrainingOptions.of(label="y").windows_plan(train_rows=None)


def test_a_module_file_regression_needs_an_explicit_threshold(tmp_path):
    with pytest.raises(ValueError, match=r"a module_file regression .* give max_rmse"):
        TrainingOptions.of(label="y", task="regression", module_file=str(tmp_path / "m.py"))


def test_the_label_pipeline_scores_the_baseline_beside_the_model(tmp_path):
    from ga_tfx.pipelines import pipeline

    import tensorflow_model_analysis as tfma

    built = pipeline.create_pipeline(
        "p",
        str(tmp_path / "root"),
        str(tmp_path / "data"),
        str(tmp_path / "serving"),
        TrainingOptions.of(label="price", task="regression"),
        train_rows=2000,
    )
    ids = [c.id for c in built.components]
    assert ids == [
        "CsvExampleGen",
        "LabeledExamples",
        "StatisticsGen",
        "SchemaGen",
        "ExampleValidator",
        "DataPlanCheck",
        "Transform",
        "GradientAccumulationTrainer",
        "TrivialBaseline",
        "Evaluator",
        "Pusher",
    ]
    components = dict(zip(ids, built.components))
    # Everything after LabeledExamples reads its examples (rows with a label only).
    labeled = components["LabeledExamples"].outputs["labeled_examples"]
    for name in ("StatisticsGen", "Transform", "Evaluator"):
        assert components[name].inputs["examples"] is labeled, name
    evaluator = components["Evaluator"]
    assert evaluator.inputs["baseline_model"] is components["TrivialBaseline"].outputs["model"]
    config = tfma.EvalConfig()
    from google.protobuf import json_format

    json_format.Parse(evaluator.exec_properties["eval_config"], config)
    assert [(m.name, m.is_baseline) for m in config.model_specs] == [
        ("candidate", False),
        ("baseline", True),
    ]
    rmse = next(
        m for m in config.metrics_specs[0].metrics if m.class_name == "RootMeanSquaredError"
    )
    assert rmse.threshold.change_threshold.direction == tfma.MetricDirection.LOWER_IS_BETTER
    assert rmse.threshold.change_threshold.absolute.value < 0  # strictly better
    assert not rmse.threshold.HasField("value_threshold")  # no --max-rmse: the baseline only
    trainer = components["GradientAccumulationTrainer"]
    assert json.loads(trainer.exec_properties["train_args"]) == {"num_steps": MIN_TRAIN_WINDOWS}
    # Any CSV: one shuffle over the whole training split (a file sorted by its label too).
    assert trainer.exec_properties["shuffle_buffer"] == LABEL_SHUFFLE_BUFFER


@pytest.mark.slow  # a whole pipeline run
def test_a_csv_with_text_columns_trains_with_one_command(tmp_path):
    data = _breast_cancer_csv(str(tmp_path / "data"))
    out = tmp_path / "out"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ga_tfx.pipelines.cli",
            "run",
            "--data-root",
            data,
            "--label",
            "diagnosis",
            "--output-dir",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=1500,
    )
    print(result.stdout[-3000:], result.stderr[-3000:])
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert len(lines) <= 60  # the quiet console
    summary = next(line for line in lines if line.startswith("evaluation (eval split)"))
    accuracy = float(summary.split("sparse_categorical_accuracy=")[1].split(",")[0])
    print(f"eval accuracy on the breast-cancer CSV: {accuracy}")
    assert accuracy >= 0.9
    record = json.load(
        open(
            next(
                os.path.join(root, name)
                for root, _, names in os.walk(out)
                for name in names
                if name == "ga_tfx_run.json"
            )
        )
    )
    assert record["effective_batch_size"] == 128
    assert record["windows"] == MIN_TRAIN_WINDOWS  # 380 training rows: the least a run trains


def _eval_emptied_by_the_label(path, rows=40):
    """Writes a CSV (x int, z float, label y text) whose eval split holds only rows with an
    empty label: TFX's hash split 2:1 (sha256 of each row's tf.Example, as the ExampleGen
    writes it) puts a row in eval or train; a row is kept unlabeled where that places it in
    eval, labeled where that places it in train. Returns (train rows, eval rows)."""
    from ga_tfx.pipelines.tabular import csv_dialect, csv_example_gen

    from tfx.components.example_gen import base_example_gen_executor as example_gen
    from tfx.proto import example_gen_pb2

    columns, types = ("x", "z", "y"), (csv_dialect.INT, csv_dialect.FLOAT, csv_dialect.STRING)

    def split(row):  # 0: train, 1: eval (the buckets of FileBasedExampleGen's default 2:1)
        example = csv_example_gen.to_example(row, columns, types)
        return example_gen._PartitionFn(example, 2, [2, 3], example_gen_pb2.SplitConfig())

    kept = []
    for i in range(rows):
        labeled = [i, i / 8 + 0.5, "ab"[i % 2]]
        unlabeled = labeled[:2] + [None]
        kept += [unlabeled] if split(unlabeled) else [labeled] if not split(labeled) else []
    with open(path, "w") as f:
        f.write("x,z,y\n" + "".join(f"{x},{z},{y or ''}\n" for x, z, y in kept))
    dialect = csv_dialect.read([path])  # read back as the ExampleGen reads it
    assert dialect.types == types
    read = list(csv_dialect.records(path, dialect))
    by_split = [[r for r in read if split(r) == s] for s in (0, 1)]
    assert all(r[2] for r in by_split[0]) and not any(r[2] for r in by_split[1])
    return len(by_split[0]), len(by_split[1])


@pytest.mark.slow  # a pipeline run, up to its data check
def test_an_eval_split_emptied_by_the_label_is_blamed_on_the_label(tmp_path):
    """Rows with an empty label are dropped before the statistics (LabeledExamples): a split
    they empty stops the run at the data check, which names the label, not the data's size."""
    data = tmp_path / "data"
    data.mkdir()
    train_rows, eval_rows = _eval_emptied_by_the_label(str(data / "rows.csv"))
    assert train_rows >= 10 and eval_rows >= 5
    result = _run(str(data), tmp_path / "out", "--label", "y")
    assert result.returncode != 0
    assert (
        f"split 'eval' is empty: the label 'y' was empty or missing in all {eval_rows} of its rows"
        in result.stdout + result.stderr
    )
    assert "give the data more rows" not in result.stdout + result.stderr


# ---------------------------------------------------------------------------- messy taxi, slow
def _run(data, out, *flags):
    result = subprocess.run(
        [sys.executable, "-m", "ga_tfx.pipelines.cli", "run", "--data-root", data]
        + ["--output-dir", str(out), *flags],
        capture_output=True,
        text=True,
        timeout=1500,
    )
    print(result.stdout[-6000:], result.stderr[-3000:])
    return result


def _summary(out):
    """The run's summary read back from its ML Metadata (full-precision metrics)."""
    from ga_tfx.pipelines import local

    from ml_metadata.proto import metadata_store_pb2

    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = str(out / "metadata.db")
    return local.summarize(config)


def _serve(serving_dir, rows):
    """``serving_default`` on rows read in the data's dialect (dicts of int, float or str; a
    missing cell, None, is left out of the tf.Example, as a serving request would leave it)."""
    from ga_tfx import tf

    loaded = tf.saved_model.load(serving_dir)
    types = {
        name: spec.dtype
        for name, spec in loaded.signatures["serving_default"].structured_input_signature[1].items()
    }
    assert types == {"examples": tf.string}
    examples = []
    for row in rows:
        features = {}
        for name, value in row.items():
            if value is None:
                continue
            if isinstance(value, str):
                features[name] = tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[value.encode()])
                )
            elif isinstance(value, int):
                features[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
            else:
                features[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[value]))
        examples.append(
            tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()
        )
    out = loaded.signatures["serving_default"](examples=tf.constant(examples))
    return next(iter(out.values())).numpy()


def _messy_rows(data_dir, label):
    """The rows of ``trips.csv`` read in its dialect, as dicts without the label."""
    from ga_tfx.pipelines.tabular import csv_dialect

    path = os.path.join(data_dir, "trips.csv")
    dialect = csv_dialect.read([path])
    rows = [dict(zip(dialect.columns, r)) for r in csv_dialect.records(path, dialect)]
    for row in rows:
        row.pop(label)
    return rows


@pytest.fixture(scope="module")
def messy_r(tmp_path_factory):
    """The messy trips as R's write.csv writes them (quoted header, row numbers, NA)."""
    return messy_taxi.write(str(tmp_path_factory.mktemp("messy") / "data"), dialect="r")


@pytest.fixture(scope="module")
def messy_eu(tmp_path_factory):
    """The messy trips as Excel in Europe saves them (';', decimal comma, BOM, CRLF)."""
    return messy_taxi.write(str(tmp_path_factory.mktemp("messy") / "data"), dialect="excel_eu")


def _within_the_gbt(out, label, task, ours):
    """Ours within 1.2x of HistGradientBoosting on the pipeline's own split; the trivial
    baseline from numpy on the eval rows."""
    from benchmarks import tabular_baselines as tb

    case = tb.Case("messy_taxi", label, task)
    train, evaluation = tb.read_split(str(out), "train"), tb.read_split(str(out), "eval")
    gbt = tb.gbt(train, evaluation, case)
    print(f"messy taxi {label}: ours {ours:.4g}, GBT best {gbt['error']:.4g}")
    assert ours <= MAX_GBT_RATIO * gbt["error"]
    return gbt, evaluation, train


def test_the_tabular_benchmark_reports_the_trainers_windows(tmp_path, monkeypatch):
    """``benchmarks/tabular_baselines.py`` reads the run summary's fields by name: its row and
    its report's ``windows`` column are the Trainer's length (``RunSummary.windows``); the
    pipeline run and the GBT are stood in for."""
    from ga_tfx.pipelines import local

    import pandas as pd

    from benchmarks import tabular_baselines as tb

    summary = local.RunSummary(
        effective_batch_size=128,
        windows=1234,
        hyperparameters={},
        metrics={"root_mean_squared_error": 2.0},
        blessed=True,
        pushed_model="/serving/1",
        serving_model="/model",
        cached_components=[],
        baseline_metrics={"root_mean_squared_error": 4.0},
    )
    monkeypatch.setattr(tb.tabular_datasets, "write", lambda name, path: path)
    monkeypatch.setattr(
        tb, "run_pipeline", lambda *a: dict(summary=summary, seconds=7.0, command="ga-tfx run")
    )
    monkeypatch.setattr(tb, "read_split", lambda out, split: pd.DataFrame({"y": [1.0]}))
    gbt = dict(error=2.5, median=2.6, baseline=4.0, seconds=0.1)
    monkeypatch.setattr(tb, "gbt", lambda *a: gbt)
    row = tb.measure(tb.Case("wages1", "wage", "regression"), str(tmp_path))
    assert row["windows"] == 1234 and row["ours"] == 2.0 and row["ratio"] == 0.8
    lines = tb.report([row], "c", "abc1234").splitlines()
    header = next(line for line in lines if line.startswith("| data set |"))
    [line] = [line for line in lines if line.startswith("| wages1 |")]
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    assert [cell.strip() for cell in line.strip("|").split("|")][columns.index("windows")] == (
        "1234"
    )


@pytest.mark.slow  # a whole pipeline run on 3000 messy trips
def test_messy_classification_explains_trains_beats_the_baseline_and_serves(messy_r, tmp_path):
    messy = messy_r  # in R's dialect: read as the plain table would be (same examples, split)
    out = tmp_path / "out"
    result = _run(messy, out, "--label", "payment_type")
    assert result.returncode == 0
    text = result.stdout
    # The data summary, before Transform and the Trainer.
    before = text[: text.index("Transform ")]
    assert "\ncsv: comma-separated, decimal point, UTF-8, quoted header; missing: NA " in before
    assert "; row numbers (first column, unnamed) left out" in before
    assert "dropped   trip_id: named like an identifier" in before
    assert "dropped   fleet: constant in the training split: every value is 'city'" in before
    assert "dropped   pickup_census_tract: almost empty" in before
    assert "code      dropoff_census_tract" in before
    assert "timestamp trip_start_timestamp" in before
    assert (
        f"{messy_taxi.EMPTY_LABEL_ROWS} rows with an empty or missing 'payment_type' dropped"
        in before
    )
    assert "empty cells (train): " in before and "fare " in before
    assert "rare (fewer than 10 training rows): " in before
    # The premise: the unseen class is in eval and not in train.
    unseen = next(line for line in before.splitlines() if "not in train" in line)
    assert "their rows count as errors" in unseen
    assert f"{messy_taxi.UNSEEN_CLASS} (eval 1)" in unseen.split(": ", 1)[1].split(", ")
    summary = _summary(out)
    accuracy = summary.metrics["sparse_categorical_accuracy"]
    baseline = summary.baseline_metrics["sparse_categorical_accuracy"]
    assert accuracy > baseline
    assert f"blessed:              yes: sparse_categorical_accuracy {accuracy:.4g} beats" in text
    assert "baseline (eval split):   example_count=" in text
    serving_dir = summary.pushed_model
    assert f"pushed model:         {serving_dir}" in text and os.path.isdir(serving_dir)
    gbt, evaluation, train = _within_the_gbt(out, "payment_type", "classification", 1 - accuracy)
    majority = train["payment_type"].value_counts().index[0]
    assert baseline == pytest.approx(np.mean(evaluation["payment_type"] == majority), abs=1e-6)
    # Serving: rows with missing cells, and a row with every cell missing.
    rows = _messy_rows(messy, "payment_type")
    some = [r for r in rows if r["fare"] is None or r["company"] is None][:20] + [
        {name: None for name in rows[0]}
    ]
    probabilities = _serve(serving_dir, some)
    assert probabilities.shape[0] == len(some) and np.isfinite(probabilities).all()
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)


@pytest.mark.slow  # a whole pipeline run on 3000 messy trips, then the Evaluator again
def test_messy_regression_beats_the_mean_serves_and_explains_a_missed_threshold(messy_eu, tmp_path):
    messy = messy_eu  # as Excel in Europe saves it: read as the plain table would be
    out = tmp_path / "out"
    result = _run(messy, out, "--label", "tips", "--task", "regression")
    assert result.returncode == 0
    text = result.stdout
    assert (
        "csv: semicolon-separated, decimal comma, UTF-8 with a byte-order mark, CRLF lines; "
        "missing: empty " in text
    )
    assert "possible leak" not in text  # payment_type says much of tips, not nearly all
    assert f"{messy_taxi.EMPTY_LABEL_ROWS} rows with an empty or missing 'tips' dropped" in text
    summary = _summary(out)
    rmse = summary.metrics["root_mean_squared_error"]
    baseline = summary.baseline_metrics["root_mean_squared_error"]
    assert rmse < baseline
    assert "blessed:              yes: root_mean_squared_error" in text
    gbt, evaluation, train = _within_the_gbt(out, "tips", "regression", rmse)
    numpy_baseline = np.sqrt(np.mean((evaluation["tips"] - train["tips"].mean()) ** 2))
    assert baseline == pytest.approx(numpy_baseline, rel=1e-4)
    serving_dir = summary.pushed_model
    assert os.path.isdir(serving_dir)
    rows = _messy_rows(messy, "tips")
    some = [r for r in rows if r["fare"] is None or r["trip_seconds"] is None][:20] + [
        {name: None for name in rows[0]}
    ]
    predictions = _serve(serving_dir, some)
    assert predictions.shape == (len(some), 1) and np.isfinite(predictions).all()
    # The same run with a threshold it cannot meet: only the Evaluator and Pusher run again,
    # and the summary says why nothing is pushed.
    again = _run(messy, out, "--label", "tips", "--task", "regression", "--max-rmse", "0.001")
    assert again.returncode == 0
    assert "blessed:              no" in again.stdout
    assert (
        f"pushed model:         not pushed: root_mean_squared_error {rmse:.4g} is above "
        "--max-rmse 0.001"
    ) in again.stdout
    cached = next(x for x in again.stdout.splitlines() if x.startswith("cached components:"))
    assert "GradientAccumulationTrainer" in cached and "Evaluator" not in cached


@pytest.mark.slow  # TFX's Kubeflow compiler (kfp)
def test_the_label_pipeline_compiles_for_kubeflow_with_its_own_steps(tmp_path):
    from ga_tfx.pipelines import kubeflow

    options = TrainingOptions.of(label="payment_type", train_windows=500, windows_per_epoch=50)
    job = kubeflow.compile_pipeline(
        str(tmp_path / "job.json"),
        "gcr.io/example/ga-tfx:1",
        "ga-tfx-csv",
        "gs://bucket/root",
        "gs://bucket/data",
        "gs://bucket/serving",
        options,
    )
    spec = job["pipelineSpec"]
    tasks = spec["root"]["dag"]["tasks"]
    assert {"LabeledExamples", "DataPlanCheck", "Transform", "TrivialBaseline"} <= set(tasks)
    executors = spec["deploymentSpec"]["executors"]
    classes = {}
    for name, task in tasks.items():
        executor = spec["components"][task["componentRef"]["name"]]["executorLabel"]
        args = executors[executor]["container"]["args"]
        classes[name] = args[args.index("--executor_class_path") + 1]
    assert classes["Transform"] == "ga_tfx.pipelines.tabular.planned_transform.Executor"
    for step in ("LabeledExamples", "DataPlanCheck", "TrivialBaseline"):
        assert classes[step].startswith("ga_tfx.pipelines."), classes[step]
    # Without the training rows (nothing is read when compiling) the length must be given.
    with pytest.raises(ValueError, match=r"train_windows \(--train-windows N\) is needed"):
        kubeflow.compile_pipeline(
            str(tmp_path / "job2.json"),
            "gcr.io/example/ga-tfx:1",
            "ga-tfx-csv",
            "gs://bucket/root",
            "gs://bucket/data",
            "gs://bucket/serving",
            TrainingOptions.of(label="payment_type"),
        )
