"""Bad data is stopped before Transform/Trainer with one line naming what is wrong.

Fast: ``ga-tfx run``'s pre-check on every kind of bad cell (file, line, column, value, what is
allowed), the batch-larger-than-data warning, the curated schema's ranges, and the pipeline
gate's message from ExampleValidator anomalies. Slow: the gate inside a real TFX run on bad
data (nothing after it runs, ``metadata.db`` stays readable) and the re-run on fixed data.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx.pipelines import cli, data_check, digits
from ga_tfx.pipelines.options import TrainingOptions

import json
import os
import re

import pytest
from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import anomalies_pb2, schema_pb2

pytestmark = [pytest.mark.tfx]  # the pipeline's gate is a TFX component

SHIPPED = os.path.join(cli.SHIPPED_DATA, "digits.csv")


def _bad_copy(tmp_path, row, column, value, rows=40):
    """The first ``rows`` shipped rows with ``value`` in data row ``row`` (1-based), ``column``."""
    with open(SHIPPED) as f:
        lines = f.read().splitlines()[: rows + 1]
    header = lines[0].split(",")
    cells = lines[row].split(",")
    cells[header.index(column)] = value
    lines[row] = ",".join(cells)
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "digits.csv").write_text("\n".join(lines) + "\n")
    return str(data)


@pytest.mark.parametrize(
    "column,value,problem,allowed",
    [
        ("pixel_05", "abc", "'abc' is not a number", "integers 0..16"),
        ("pixel_63", "", "empty cell (a value is required)", "integers 0..16"),
        ("pixel_00", "nan", "'nan' is not a finite number", "integers 0..16"),
        ("pixel_10", "inf", "'inf' is not a finite number", "integers 0..16"),
        ("pixel_10", "2.5", "'2.5' is not an integer", "integers 0..16"),
        ("pixel_10", "17", "'17' is out of range", "integers 0..16"),
        (
            "label",
            "10",
            "label '10' is outside the known classes",
            "the known classes, integers 0..9",
        ),
        ("label", "-1", "label '-1' is outside the known classes", "integers 0..9"),
    ],
)
def test_run_stops_before_anything_with_file_line_column_value_allowed(
    tmp_path, capsys, column, value, problem, allowed
):
    data = _bad_copy(tmp_path, 17, column, value)
    out = tmp_path / "out"
    assert cli.main(["run", "--data-root", data, "--output-dir", str(out)]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    path = os.path.join(data, "digits.csv")
    assert last.startswith(
        f"ga-tfx run: error: {path}, line 18, column {column!r}: {problem}; allowed: "
    ), last
    assert allowed in last
    assert not out.exists()  # nothing ran, nothing written


def test_a_short_row_and_an_empty_file_are_named(tmp_path):
    data = tmp_path / "short"
    data.mkdir()
    (data / "d.csv").write_text(",".join(digits.COLUMNS) + "\n" + ",".join(["1"] * 64) + "\n")
    with pytest.raises(ValueError, match=r"d.csv, line 2: 64 cells, expected 65"):
        digits.check_csv_dir(str(data))
    (data / "d.csv").write_text("")
    with pytest.raises(ValueError, match="d.csv is empty"):
        digits.check_csv_dir(str(data))


def test_the_shipped_data_passes_and_is_counted():
    assert digits.check_csv_dir(cli.SHIPPED_DATA) == 1797


def test_an_update_larger_than_the_training_split_is_warned_with_the_numbers(caplog):
    options = TrainingOptions.of(
        micro_batch_size=4096, accum_steps=4, train_windows=2, windows_per_epoch=1
    )
    data_check.warn_before_run(1797, options)
    (line,) = [record.getMessage() for record in caplog.records]
    assert line == (
        "warning: one optimizer update takes 16384 examples (micro-batch x "
        "accum_steps) but the training split has 1198: every update repeats "
        "examples about 13.7 times; lower the micro-batch or accum_steps."
    )
    caplog.clear()
    data_check.warn_before_run(1797, TrainingOptions())  # 4 x 32: fine, silent
    assert not caplog.records
    tuned = TrainingOptions.of(
        micro_batch_size=256, accum_steps=1, tune=True, search_accum_steps=(1, 8)
    )
    assert data_check.largest_effective_batch(tuned) == 2048  # what a trial may train with


def test_the_largest_effective_batch_is_the_schedules_largest_k():
    # A schedule's windows are as large as its largest K, whatever --accum-steps' default says.
    grows = TrainingOptions.of(micro_batch_size=256, accum_schedule="0:2,10:8")
    assert data_check.largest_effective_batch(grows) == 8 * 256
    assert data_check.largest_effective_batch(TrainingOptions.of(accum_schedule="0:2")) == 64
    adaptive = TrainingOptions.of(micro_batch_size=256, accum_schedule="adaptive:2-16")
    assert data_check.largest_effective_batch(adaptive) == 16 * 256


def test_the_curated_schema_allows_what_the_pre_check_allows():
    schema = schema_pb2.Schema()
    with open(digits.SCHEMA_FILE) as f:
        text_format.Parse(f.read(), schema)
    features = {feature.name: feature for feature in schema.feature}
    assert set(features) == set(digits.COLUMNS)
    for name, feature in features.items():
        low, high = digits.LABEL_RANGE if name == digits.RAW_LABEL_KEY else digits.PIXEL_RANGE
        assert (feature.type, feature.int_domain.min, feature.int_domain.max) == (
            schema_pb2.INT,
            low,
            high,
        )
        assert feature.presence.min_fraction == 1.0  # required in every row


def test_gate_lines_name_the_column_what_was_found_and_what_is_allowed():
    schema = schema_pb2.Schema()
    with open(digits.SCHEMA_FILE) as f:
        text_format.Parse(f.read(), schema)
    anomalies = anomalies_pb2.Anomalies()
    info = anomalies.anomaly_info["label"]
    info.reason.add(
        short_description="Out-of-range values", description="Unexpectedly large value: 12."
    )
    anomalies.anomaly_info["colour"].reason.add(description="New column (not in the schema)")
    lines = data_check.anomaly_lines(anomalies, schema, "train")
    assert lines == [
        "split 'train', column 'colour': New column (not in the schema) (allowed: only the "
        "columns " + ", ".join(sorted(digits.COLUMNS)) + ")",
        "split 'train', column 'label': Unexpectedly large value: 12. (allowed: integers "
        "0..9, one in every row)",
    ]


def _gate_inputs(tmp_path, examples, anomalies=None):
    """The DataCheck gate's input artifacts: the curated schema, statistics of ``examples``
    {split: number of examples} (None: a split whose statistics hold no dataset) and
    ExampleValidator's anomalies ({split: Anomalies proto}, none by default)."""
    from tensorflow_metadata.proto.v0 import statistics_pb2
    from tfx.types import artifact_utils, standard_artifacts

    schema_dir = tmp_path / "schema"
    schema_dir.mkdir()
    (schema_dir / data_check.SCHEMA_FILE_NAME).write_text(open(digits.SCHEMA_FILE).read())
    statistics = standard_artifacts.ExampleStatistics()
    statistics.uri = str(tmp_path / "statistics")
    found = standard_artifacts.ExampleAnomalies()
    found.uri = str(tmp_path / "anomalies")
    for artifact in (statistics, found):
        artifact.split_names = artifact_utils.encode_split_names(sorted(examples))
    for split, count in examples.items():
        stats = statistics_pb2.DatasetFeatureStatisticsList()
        if count is not None:
            stats.datasets.add(num_examples=count)
        for artifact, name, proto in (
            (statistics, "FeatureStats.pb", stats),
            (found, "SchemaDiff.pb", (anomalies or {}).get(split, anomalies_pb2.Anomalies())),
        ):
            split_dir = artifact_utils.get_split_uri([artifact], split)
            os.makedirs(split_dir)
            with open(os.path.join(split_dir, name), "wb") as f:
                f.write(proto.SerializeToString())
    return str(schema_dir), statistics, found


def test_gate_check_passes_good_data_on_with_its_schema(tmp_path):
    schema_dir, statistics, anomalies = _gate_inputs(tmp_path, {"train": 120, "eval": 30})
    assert data_check.check(schema_dir, statistics, anomalies) == os.path.join(
        schema_dir, data_check.SCHEMA_FILE_NAME
    )


def test_gate_check_fails_on_anomalies_naming_the_split_and_column(tmp_path):
    anomalies = anomalies_pb2.Anomalies()
    anomalies.anomaly_info["pixel_07"].reason.add(description="Expected INT but got STRING")
    inputs = _gate_inputs(tmp_path, {"train": 120, "eval": 30}, {"eval": anomalies})
    with pytest.raises(data_check.DataError) as raised:
        data_check.check(*inputs)
    assert str(raised.value) == (
        "bad data, stopped before Transform and training: split 'eval', column 'pixel_07': "
        "Expected INT but got STRING (allowed: integers 0..16, one in every row)"
    )


@pytest.mark.parametrize("empty", [0, None], ids=["no_examples", "no_dataset"])
def test_gate_check_fails_on_an_empty_split(tmp_path, empty):
    inputs = _gate_inputs(tmp_path, {"train": 120, "eval": empty})
    with pytest.raises(data_check.DataError) as raised:
        data_check.check(*inputs)
    assert str(raised.value) == (
        "bad data, stopped before Transform and training: split 'eval' is empty (no examples): "
        "give the data more rows"
    )
    # A split emptied by rows without a label is blamed on the label, not on the data's size.
    with pytest.raises(data_check.DataError) as raised:
        data_check.check(*inputs, unlabeled={"train": 3, "eval": 41}, label="vote")
    assert str(raised.value) == (
        "bad data, stopped before Transform and training: split 'eval' is empty: the label "
        "'vote' was empty or missing in all 41 of its rows"
    )


def test_the_label_pipelines_gate_blames_a_split_emptied_by_the_label_on_it(tmp_path):
    """The ``--label`` pipeline's gate (``DataPlanCheck``, its executor's function on
    hand-made artifacts) hands the check the rows LabeledExamples dropped for an empty label,
    so an eval split they emptied is blamed on the label, not on the data's size (issue 53:
    only a slow pipeline run saw the count dropped)."""
    from ga_tfx.pipelines.tabular import labeled_examples, plan_check

    from tfx.types import standard_artifacts

    schema_dir, statistics, anomalies = _gate_inputs(tmp_path, {"train": 120, "eval": 0})
    schema = standard_artifacts.Schema()
    schema.uri = schema_dir
    examples = standard_artifacts.Examples()
    examples.set_string_custom_property(
        labeled_examples.UNLABELED_ROWS_PROPERTY, json.dumps({"train": 3, "eval": 41})
    )
    gate = plan_check.DataPlanCheck.EXECUTOR_SPEC.executor_class._FUNCTION
    with pytest.raises(ValueError) as raised:  # the check's DataError
        gate(
            schema=schema,
            statistics=statistics,
            anomalies=anomalies,
            examples=examples,
            checked_schema=standard_artifacts.Schema(),
            label="vote",
            task="classification",
        )
    assert str(raised.value) == (
        "bad data, stopped before Transform and training: split 'eval' is empty: the label "
        "'vote' was empty or missing in all 41 of its rows"
    )


@pytest.mark.slow  # a TFX run (ExampleGen, StatisticsGen, ExampleValidator): minutes
def test_the_pipeline_gate_stops_bad_data_and_a_fixed_rerun_passes(tmp_path):
    from ml_metadata import metadata_store
    from ml_metadata.proto import metadata_store_pb2
    from tfx import v1 as tfx

    def run(data):
        example_gen = tfx.components.CsvExampleGen(input_base=data)
        statistics = tfx.components.StatisticsGen(examples=example_gen.outputs["examples"])
        schema = tfx.components.ImportSchemaGen(schema_file=digits.SCHEMA_FILE)
        validator = tfx.components.ExampleValidator(
            statistics=statistics.outputs["statistics"], schema=schema.outputs["schema"]
        )
        gate = data_check.DataCheck(
            schema=schema.outputs["schema"],
            statistics=statistics.outputs["statistics"],
            anomalies=validator.outputs["anomalies"],
        )
        pipeline = tfx.dsl.Pipeline(
            pipeline_name="bad-data",
            pipeline_root=str(tmp_path / "root"),
            components=[example_gen, statistics, schema, validator, gate],
            metadata_connection_config=config,
            beam_pipeline_args=["--direct_running_mode=in_memory", "--direct_num_workers=1"],
        )
        tfx.orchestration.LocalDagRunner().run(pipeline)

    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = str(tmp_path / "metadata.db")
    config.sqlite.connection_mode = config.sqlite.READWRITE_OPENCREATE
    data = _bad_copy(tmp_path, 5, "pixel_07", "abc", rows=120)
    with pytest.raises(data_check.DataError) as raised:
        run(data)
    message = str(raised.value)
    assert "\n" not in message
    assert re.search(
        r"column 'pixel_07': Expected data of type: INT but got STRING.*\"abc\".*"
        r"\(allowed: integers 0\.\.16, one in every row\)",
        message,
    ), message
    store = metadata_store.MetadataStore(config)  # still readable
    assert not [a for a in store.get_artifacts_by_type("Schema") if "DataCheck" in a.uri]

    _bad_copy(tmp_path, 5, "pixel_07", "3", rows=120)  # fixed in place: the same run again
    run(data)
    schemas = store.get_artifacts_by_type("Schema")
    assert any("DataCheck" in artifact.uri for artifact in schemas)
