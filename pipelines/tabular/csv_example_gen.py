"""An ExampleGen that reads CSV files in their own dialect (R, Excel, pandas, databases).

TFX's ``CsvExampleGen`` reads one dialect: ``,`` separators, ``.`` decimals, UTF-8 without a
byte-order mark, a header whose quotes it keeps in the feature names, and only an empty cell as
missing (``NA`` makes a number column text). :func:`DialectCsvExampleGen` is a
``FileBasedExampleGen`` (same driver, spans, fingerprints, hash split 2:1, component id
``CsvExampleGen``) whose executor decides the dialect of the data root once
(:func:`ga_tfx.pipelines.tabular.csv_dialect.read`, under the ``--csv-*`` overrides carried in
``custom_config``) and writes each row as CsvExampleGen would: an ``int64``, ``float`` or
``bytes`` feature per column, a missing cell an empty list of the column's type, the
row-number column left out. The dialect's one-line description is the output's
:data:`DIALECT_PROPERTY`, which the data summary prints.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx import tf
from ga_tfx.pipelines.tabular import csv_dialect

import io
import os
from typing import Any, Dict, Iterable, List

import apache_beam as beam
from google.protobuf import any_pb2, json_format, struct_pb2
from tfx.components import FileBasedExampleGen
from tfx.components.example_gen.base_example_gen_executor import BaseExampleGenExecutor
from tfx.dsl.components.base import executor_spec
from tfx.dsl.io import fileio
from tfx.proto import example_gen_pb2
from tfx.types import standard_component_specs

DIALECT_PROPERTY = "ga_tfx_csv_dialect"  # the Examples' custom property: Dialect.describe()
COMPONENT_ID = "CsvExampleGen"  # the id TFX's own CSV reader has: runs and docs name it so


def _opener(path: str):
    """A binary file: local paths streamed, others (gs://...) through TFX's file system."""
    if "://" not in path:
        return open(path, "rb")
    with fileio.open(path, "rb") as f:
        return io.BytesIO(f.read())


def reading_config(reading: csv_dialect.CsvReading) -> example_gen_pb2.CustomConfig:
    """The ``custom_config`` that carries ``reading`` to the executor."""
    struct = struct_pb2.Struct()
    struct.update(reading.to_primitives())
    packed = any_pb2.Any()
    packed.Pack(struct)
    return example_gen_pb2.CustomConfig(custom_config=packed)


def reading_from(exec_properties: Dict[str, Any]) -> csv_dialect.CsvReading:
    """The :class:`CsvReading` an execution carries (defaults without one)."""
    text = exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY)
    if not text:
        return csv_dialect.CsvReading()
    config = json_format.Parse(text, example_gen_pb2.CustomConfig())
    struct = struct_pb2.Struct()
    config.custom_config.Unpack(struct)
    values = json_format.MessageToDict(struct)
    if "csv_missing" in values:
        values["csv_missing"] = tuple(values["csv_missing"])
    return csv_dialect.CsvReading.from_mapping(values, "csv reading")


def to_example(row: List[object], columns, types) -> tf.train.Example:
    """One row of typed values (``None``: missing) as CsvExampleGen writes it."""
    feature = {}
    for name, kind, value in zip(columns, types, row):
        values = [] if value is None else [value]
        if kind == csv_dialect.INT:
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        elif kind == csv_dialect.FLOAT:
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
        elif kind == csv_dialect.STRING:
            encoded = [str(v).encode("utf-8") for v in values]
            feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=encoded))
        else:
            feature[name] = tf.train.Feature()
    return tf.train.Example(features=tf.train.Features(feature=feature))


class _FileToExamples(beam.DoFn):
    def __init__(self, dialect: csv_dialect.Dialect, reading: csv_dialect.CsvReading):
        self._dialect, self._reading = dialect, reading

    def process(self, path: str) -> Iterable[tf.train.Example]:
        dialect = self._dialect
        for row in csv_dialect.records(path, dialect, self._reading, _opener):
            yield to_example(row, dialect.columns, dialect.types)


def _files(exec_properties: Dict[str, Any], split_pattern: str) -> List[str]:
    pattern = os.path.join(exec_properties[standard_component_specs.INPUT_BASE_KEY], split_pattern)
    files = sorted(fileio.glob(pattern))
    if not files:
        raise RuntimeError(f"Split pattern {split_pattern} matches no file ({pattern}).")
    return files


class Executor(BaseExampleGenExecutor):
    """ExampleGen executor for CSV files of any dialect (see the module's docstring)."""

    def GetInputSourceToExamplePTransform(self) -> beam.PTransform:
        described = self._described = []

        @beam.ptransform_fn
        @beam.typehints.with_input_types(beam.Pipeline)
        @beam.typehints.with_output_types(tf.train.Example)
        def to_examples(pipeline, exec_properties: Dict[str, Any], split_pattern: str):
            reading = reading_from(exec_properties)
            files = _files(exec_properties, split_pattern)
            dialect = csv_dialect.read(files, reading, _opener)
            described.append(dialect.describe())
            return (
                pipeline
                | "Files" >> beam.Create(files)
                | "ToExamples" >> beam.ParDo(_FileToExamples(dialect, reading))
            )

        return to_examples

    def Do(self, input_dict, output_dict, exec_properties) -> None:
        super().Do(input_dict, output_dict, exec_properties)
        for examples in output_dict[standard_component_specs.EXAMPLES_KEY]:
            examples.set_string_custom_property(DIALECT_PROPERTY, " | ".join(self._described))


def DialectCsvExampleGen(input_base: str, reading: csv_dialect.CsvReading) -> FileBasedExampleGen:
    """The ExampleGen of a ``--label`` pipeline: the CSV files of ``input_base`` read in their
    dialect (``reading``: the ``--csv-*`` overrides), split 2:1 into train and eval."""
    return FileBasedExampleGen(
        input_base=input_base,
        custom_config=reading_config(reading),
        custom_executor_spec=executor_spec.BeamExecutorSpec(Executor),
    ).with_id(COMPONENT_ID)


def dialect_line(examples) -> str:
    """The dialect line recorded on an Examples artifact ('' where none is)."""
    if examples is None or not examples.has_custom_property(DIALECT_PROPERTY):
        return ""
    return examples.get_string_custom_property(DIALECT_PROPERTY)
