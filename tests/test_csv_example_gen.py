"""The ExampleGen of a ``--label`` pipeline against TFX's own ``CsvExampleGen``.

On a plain comma-separated file (the dialect TFX reads) both executors must write the same
tf.Examples into the same split (the split hashes each example's bytes); R's and Excel's (cp1252)
files of the table of ``tests/test_csv_dialect.py`` must then give those very examples too (where
TFX's reader keeps the header's quotes, reads ``NA`` as text and a decimal comma as a string). The
other dialects read back as that table through ``csv_dialect`` alone, in
``tests/test_csv_dialect.py``.
"""

from ga_tfx.pipelines.tabular import csv_dialect, csv_example_gen

import os

import pytest
import tensorflow as tf
from tfx.components.example_gen import utils
from tfx.components.example_gen.csv_example_gen import executor as tfx_csv
from tfx.proto import example_gen_pb2
from tfx.types import standard_artifacts
from tfx.utils import proto_utils

from tests import test_csv_dialect

pytestmark = [pytest.mark.tfx]


def run(executor_class, input_base, out, reading=None):
    """``{split: [tf.Example, canonically serialized]}`` an ExampleGen executor writes, and
    its artifact."""
    examples = standard_artifacts.Examples()
    examples.uri = out
    input_config = utils.make_default_input_config()
    properties = {
        "input_base": input_base,
        "input_config": proto_utils.proto_to_json(input_config),
        "output_config": proto_utils.proto_to_json(utils.make_default_output_config(input_config)),
        "output_data_format": example_gen_pb2.FORMAT_TF_EXAMPLE,
        "output_file_format": example_gen_pb2.FORMAT_TFRECORDS_GZIP,
    }
    if reading is not None:
        config = csv_example_gen.reading_config(reading)
        properties["custom_config"] = proto_utils.proto_to_json(config)
    executor_class().Do({}, {"examples": [examples]}, properties)
    splits = {}
    for split in ("train", "eval"):
        files = tf.io.gfile.glob(os.path.join(out, f"Split-{split}", "*"))
        records = tf.data.TFRecordDataset(files, compression_type="GZIP")
        splits[split] = sorted(  # map order aside (the bytes of a proto map are not canonical)
            tf.train.Example.FromString(r.numpy()).SerializeToString(deterministic=True)
            for r in records
        )
    return splits, examples


def _plain(path):
    """The ground-truth table as TFX's reader wants it: commas, an empty cell for missing."""
    names, rows = test_csv_dialect.table()
    lines = [",".join(names)] + [
        ",".join("" if v is None else repr(v) if isinstance(v, float) else str(v) for v in row)
        for row in rows
    ]
    os.makedirs(os.path.dirname(path))
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def theirs(tmp_path_factory):
    """What TFX's own CsvExampleGen writes for the plain table (once for the module)."""
    tmp_path = tmp_path_factory.mktemp("theirs")
    _plain(str(tmp_path / "plain" / "data.csv"))
    return run(tfx_csv.Executor, str(tmp_path / "plain"), str(tmp_path / "out"))[0]


def test_plain_csv_gives_the_examples_and_split_of_tfx_csv_example_gen(tmp_path, theirs):
    _plain(str(tmp_path / "plain" / "data.csv"))
    ours, artifact = run(
        csv_example_gen.Executor,
        str(tmp_path / "plain"),
        str(tmp_path / "ours"),
        csv_dialect.CsvReading(),
    )
    assert ours == theirs
    assert len(ours["train"]) + len(ours["eval"]) == test_csv_dialect.ROWS
    assert csv_example_gen.dialect_line(artifact).startswith("csv: comma-separated, decimal point")


# Two dialects that differ from plain CSV in every rule (the others read back as the same table
# in test_csv_dialect.py; each executor run costs a Beam pipeline, about 2 s).
@pytest.mark.parametrize("name", ["r", "excel_cp1252"])
def test_dialects_give_the_plain_files_examples(tmp_path, name, theirs):
    expected = theirs
    test_csv_dialect.write(str(tmp_path / name / "data.csv"), name)
    got, artifact = run(
        csv_example_gen.Executor, str(tmp_path / name), str(tmp_path / "ours"), None
    )
    assert got == expected
    assert csv_example_gen.dialect_line(artifact) == (
        csv_dialect.read([str(tmp_path / name / "data.csv")]).describe()
    )


def test_the_overrides_travel_in_custom_config(tmp_path):
    reading = csv_dialect.CsvReading(
        csv_delimiter="semicolon", csv_missing=("-", "?!"), csv_encoding="cp1252"
    )
    config = csv_example_gen.reading_config(reading)
    properties = {"custom_config": proto_utils.proto_to_json(config)}
    assert csv_example_gen.reading_from(properties) == reading
    assert csv_example_gen.reading_from({}) == csv_dialect.CsvReading()
