"""``DataPlanCheck``: the gate of a ``--label`` pipeline, and its one-screen data summary.

It does what :func:`ga_tfx.pipelines.data_check.DataCheck` does (fails on ExampleValidator
anomalies or an empty split: :func:`ga_tfx.pipelines.common.statistics_check.check`), then
makes the data plan from the statistics and the inferred schema
(:func:`ga_tfx.pipelines.tabular.data_plan.make_plan`), reads the columns used of the train and
eval splits once to name the columns that alone give the label away
(:func:`ga_tfx.pipelines.tabular.leaks.scan`), prints the data summary before Transform and
training (on the ``ga-tfx run`` console, and in the step's log), and passes on the schema
carrying the plan (:func:`~ga_tfx.pipelines.tabular.data_plan.annotate_schema`) for Transform.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx.pipelines.common import statistics_check
from ga_tfx.pipelines.common.user_log import USER_LOGGER
from ga_tfx.pipelines.tabular import csv_example_gen, data_plan, labeled_examples, leaks

import dataclasses
import json
import logging
import os
from typing import Dict, List, Sequence

from absl import logging as absl_logging
from tfx import v1 as tfx
from tfx.dsl.io import fileio
from tfx.types import artifact_utils


def load_statistics(statistics):
    """``{split: DatasetFeatureStatistics}`` of an ExampleStatistics artifact."""
    from tfx.components.statistics_gen import stats_artifact_utils

    out = {}
    for split in artifact_utils.decode_split_names(statistics.split_names):
        proto = stats_artifact_utils.load_statistics(statistics, split).proto()
        if proto.datasets:
            out[split] = proto.datasets[0]
    return out


def read_columns(examples, split: str, names: Sequence[str]) -> Dict[str, List[object]]:
    """``{column: values}`` of one split of an Examples artifact (an empty cell: None)."""
    from ga_tfx import tf

    files = sorted(fileio.glob(os.path.join(artifact_utils.get_split_uri([examples], split), "*")))
    columns: Dict[str, List[object]] = {name: [] for name in names}
    for record in tf.data.TFRecordDataset(files, compression_type="GZIP"):
        feature = tf.train.Example.FromString(record.numpy()).features.feature
        for name in names:
            kind = feature[name].WhichOneof("kind") if name in feature else None
            values = getattr(feature[name], kind).value if kind else []
            value = values[0] if len(values) else None
            columns[name].append(
                value.decode("utf-8", "replace")
                if kind == "bytes_list" and value is not None
                else value
            )
    return columns


def with_leaks(plan: data_plan.DataPlan, examples) -> data_plan.DataPlan:
    """``plan`` with the columns it uses that give the label away (:mod:`leaks`)."""
    splits = artifact_utils.decode_split_names(examples.split_names)
    if data_plan.TRAIN not in splits or data_plan.EVAL not in splits:
        return plan
    names = [c.name for c in plan.used] + [plan.label]
    train = read_columns(examples, data_plan.TRAIN, names)
    evaluation = read_columns(examples, data_plan.EVAL, names)
    found = leaks.scan(train, evaluation, plan.label, plan.task, names[:-1])
    return dataclasses.replace(plan, leaks=tuple((x.column, x.error, x.baseline) for x in found))


def read_schema(uri: str):
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tfx.utils import io_utils

    return io_utils.parse_pbtxt_file(
        os.path.join(uri, statistics_check.SCHEMA_FILE_NAME), schema_pb2.Schema()
    )


def show(lines) -> None:
    """The summary on the console (``ga-tfx run``) and in the log."""
    user = logging.getLogger(USER_LOGGER)
    for line in lines:
        user.info("%s", line)
        absl_logging.info("ga_tfx data: %s", line)


@tfx.dsl.components.component
def DataPlanCheck(
    schema: tfx.dsl.components.InputArtifact[tfx.types.standard_artifacts.Schema],
    statistics: tfx.dsl.components.InputArtifact[tfx.types.standard_artifacts.ExampleStatistics],
    anomalies: tfx.dsl.components.InputArtifact[tfx.types.standard_artifacts.ExampleAnomalies],
    examples: tfx.dsl.components.InputArtifact[tfx.types.standard_artifacts.Examples],
    checked_schema: tfx.dsl.components.OutputArtifact[tfx.types.standard_artifacts.Schema],
    label: tfx.dsl.components.Parameter[str],
    task: tfx.dsl.components.Parameter[str],
    edit_columns: tfx.dsl.components.Parameter[int] = 1,
    effective_batch_size: tfx.dsl.components.Parameter[int] = 0,
    exclude_columns: tfx.dsl.components.Parameter[str] = "[]",
) -> None:
    """Fails on anomalies or an empty split; prints the data summary; writes the schema with
    the plan (``edit_columns``: drop and make optional as planned; 0 for a user's module;
    ``exclude_columns``: a JSON list of columns to drop, ``--exclude-columns``)."""
    unlabeled = labeled_examples.unlabeled_rows(examples)
    statistics_check.check(
        schema.uri, statistics, anomalies, effective_batch_size, unlabeled=unlabeled, label=label
    )
    plan = data_plan.make_plan(
        load_statistics(statistics),
        read_schema(schema.uri),
        label,
        task,
        unlabeled_rows=unlabeled,
        exclude=json.loads(exclude_columns),
    )
    plan = with_leaks(plan, examples)
    dialect = csv_example_gen.dialect_line(examples)
    show(([dialect] if dialect else []) + plan.summary_lines())
    annotated = data_plan.annotate_schema(read_schema(schema.uri), plan, bool(edit_columns))
    from tfx.utils import io_utils

    fileio.makedirs(checked_schema.uri)
    io_utils.write_pbtxt_file(
        os.path.join(checked_schema.uri, statistics_check.SCHEMA_FILE_NAME), annotated
    )
