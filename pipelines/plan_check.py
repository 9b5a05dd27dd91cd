"""``DataPlanCheck``: the gate of a ``--label`` pipeline, and its one-screen data summary.

It does what :func:`ga_tfx.pipelines.data_check.DataCheck` does (fails on ExampleValidator
anomalies or an empty split), then makes the data plan from the statistics and the inferred
schema (:func:`ga_tfx.pipelines.data_plan.make_plan`: no second pass over the data), prints the
data summary before Transform and training (on the ``ga-tfx run`` console, and in the step's
log), and passes on the schema carrying the plan (:func:`~ga_tfx.pipelines.data_plan.
annotate_schema`) for Transform.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx.pipelines import csv_example_gen, data_check, data_plan, labeled_examples
from ga_tfx.pipelines.console import USER_LOGGER

import logging
import os

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


def read_schema(uri: str):
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tfx.utils import io_utils

    return io_utils.parse_pbtxt_file(
        os.path.join(uri, data_check.SCHEMA_FILE_NAME), schema_pb2.Schema()
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
) -> None:
    """Fails on anomalies or an empty split; prints the data summary; writes the schema with
    the plan (``edit_columns``: drop and make optional as planned; 0 for a user's module)."""
    unlabeled = labeled_examples.unlabeled_rows(examples)
    data_check.check(
        schema.uri, statistics, anomalies, effective_batch_size, unlabeled=unlabeled, label=label
    )
    plan = data_plan.make_plan(
        load_statistics(statistics), read_schema(schema.uri), label, task, unlabeled_rows=unlabeled
    )
    dialect = csv_example_gen.dialect_line(examples)
    show(([dialect] if dialect else []) + plan.summary_lines())
    annotated = data_plan.annotate_schema(read_schema(schema.uri), plan, bool(edit_columns))
    from tfx.utils import io_utils

    fileio.makedirs(checked_schema.uri)
    io_utils.write_pbtxt_file(
        os.path.join(checked_schema.uri, data_check.SCHEMA_FILE_NAME), annotated
    )
