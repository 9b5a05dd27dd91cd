"""Bad data stops the pipeline before Transform and the Trainer, with one line saying why.

Two layers:

- In the pipeline (every orchestrator, Kubeflow included): the curated schema of the shipped
  data (``pipelines/data/digits_schema.pbtxt``, loaded by ``ImportSchemaGen``: every column an
  integer, present in every row, pixels 0..16, labels 0..9) and TFX's ``ExampleValidator``,
  whose anomalies :func:`DataCheck` turns into a failed step. ``DataCheck`` also fails on an
  empty split and warns when one optimizer update takes more examples than the training split
  holds. Its output is the schema it checked, which Transform and the Trainer read, so nothing
  downstream can start before the check passed.
- Before anything runs, for ``ga-tfx run``: :func:`ga_tfx.pipelines.digits.check_csv_dir`
  names the file, line, column, value and what is allowed (the statistics the pipeline's
  check reads have no row numbers).
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx.pipelines import digits

import logging
import os
from typing import Dict, List, Optional

from absl import logging as absl_logging
from tfx import v1 as tfx
from tfx.dsl.io import fileio
from tfx.types import artifact_utils

# The file name ImportSchemaGen and SchemaGen give the schema (tfx.components.schema_gen).
SCHEMA_FILE_NAME = "schema.pbtxt"


class DataError(ValueError):
    """Bad data, found before training (the message is one line)."""


def _allowed(feature) -> str:
    """What the curated schema allows for ``feature`` (a schema_pb2.Feature), in words."""
    if feature.HasField("int_domain"):
        return f"integers {feature.int_domain.min}..{feature.int_domain.max}, one in every row"
    return "values of the schema's type, one in every row"


def anomaly_lines(anomalies, schema, split: str) -> List[str]:
    """One line per anomalous column of ``split``: the column, what was found, what is allowed.

    ``anomalies``: the ``tensorflow_metadata`` ``Anomalies`` proto of the split;
    ``schema``: the curated ``Schema`` proto.
    """
    features = {feature.name: feature for feature in schema.feature}
    lines = []
    for column, info in sorted(anomalies.anomaly_info.items()):
        found = (
            "; ".join(reason.description or reason.short_description for reason in info.reason)
            or info.description
        )
        allowed = (
            _allowed(features[column])
            if column in features
            else (f"only the columns {', '.join(sorted(features))}")
        )
        lines.append(f"split {split!r}, column {column!r}: {found} (allowed: {allowed})")
    if anomalies.HasField("dataset_anomaly_info"):
        lines.append(f"split {split!r}: {anomalies.dataset_anomaly_info.description}")
    return lines


def check(
    schema_uri: str,
    statistics,
    anomalies,
    effective_batch_size: int = 0,
    *,
    unlabeled: Optional[Dict[str, int]] = None,
    label: str = "",
) -> str:
    """Raises :class:`DataError` (one line) for anomalies or an empty split; returns the
    schema file checked. Logs a warning when ``effective_batch_size`` exceeds the training
    split's examples.

    ``statistics``/``anomalies``: the ExampleStatistics and ExampleAnomalies artifacts;
    ``unlabeled``: ``{split: rows}`` dropped for an empty ``label`` before the statistics (a
    split they emptied is blamed on the label, not on the data's size).
    """
    from tensorflow_data_validation.utils import anomalies_util
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tfx.components.statistics_gen import stats_artifact_utils
    from tfx.utils import io_utils

    schema_file = os.path.join(schema_uri, SCHEMA_FILE_NAME)
    schema = io_utils.parse_pbtxt_file(schema_file, schema_pb2.Schema())
    problems = []
    counts = {}
    for split in artifact_utils.decode_split_names(statistics.split_names):
        view = stats_artifact_utils.load_statistics(statistics, split)
        counts[split] = view.proto().datasets[0].num_examples if view.proto().datasets else 0
        if not counts[split]:
            problems.append(empty_split(split, (unlabeled or {}).get(split, 0), label))
    for split in artifact_utils.decode_split_names(anomalies.split_names):
        path = os.path.join(artifact_utils.get_split_uri([anomalies], split), "SchemaDiff.pb")
        problems += anomaly_lines(anomalies_util.load_anomalies_binary(path), schema, split)
    if problems:
        raise DataError(
            f"bad data, stopped before Transform and training: {problems[0]}"
            + (
                f" (and {len(problems) - 1} more: {'; '.join(problems[1:])})"
                if len(problems) > 1
                else ""
            )
        )
    warning = update_warning(counts.get("train"), effective_batch_size)
    if warning:
        absl_logging.warning("%s", warning)
    return schema_file


def empty_split(split: str, unlabeled: int, label: str) -> str:
    """Why split ``split`` has no examples (``unlabeled``: its rows dropped for their label)."""
    if unlabeled:
        return (
            f"split {split!r} is empty: the label {label!r} was empty or missing in all "
            f"{unlabeled} of its rows"
        )
    return f"split {split!r} is empty (no examples): give the data more rows"


def update_warning(train_examples: Optional[int], effective_batch_size: int) -> Optional[str]:
    """One line when one update takes more examples than the training split has."""
    if not train_examples or effective_batch_size <= train_examples:
        return None
    return (
        f"warning: one optimizer update takes {effective_batch_size} examples (micro-batch "
        f"x accum_steps) but the training split has {train_examples}: every update "
        f"repeats examples about {effective_batch_size / train_examples:.1f} times; lower "
        "the micro-batch or accum_steps."
    )


def largest_effective_batch(options) -> int:
    """The largest effective batch the run can train with: its schedule's largest K (the
    Tuner may pick a larger ``accum_steps`` than that) times the micro-batch."""
    run, tuning = options.accumulation, options.tuning
    accum = run.schedule.most_accum_steps
    if tuning.tune:
        accum = max(accum, *tuning.search_accum_steps)
    return accum * run.micro_batch_size


def warn_before_run(rows: int, options) -> None:
    """``ga-tfx run``: logs :func:`update_warning` for the CSV's ``rows`` (about
    ``digits.TRAIN_FRACTION`` of them train) to the ``ga_tfx.user`` logger."""
    warning = update_warning(int(rows * digits.TRAIN_FRACTION), largest_effective_batch(options))
    if warning:  # shown on the ga-tfx console (pipelines/console.py), else on stderr
        logging.getLogger("ga_tfx.user").warning(warning)


@tfx.dsl.components.component
def DataCheck(
    schema: tfx.dsl.components.InputArtifact[tfx.types.standard_artifacts.Schema],
    statistics: tfx.dsl.components.InputArtifact[tfx.types.standard_artifacts.ExampleStatistics],
    anomalies: tfx.dsl.components.InputArtifact[tfx.types.standard_artifacts.ExampleAnomalies],
    checked_schema: tfx.dsl.components.OutputArtifact[tfx.types.standard_artifacts.Schema],
    effective_batch_size: tfx.dsl.components.Parameter[int] = 0,
) -> None:
    """The pipeline's gate: fails on ExampleValidator anomalies or an empty split (see
    :func:`check`); passes the checked schema on (``checked_schema``) for Transform and the
    Trainer."""
    schema_file = check(schema.uri, statistics, anomalies, effective_batch_size)
    fileio.makedirs(checked_schema.uri)  # (gs:// under Kubeflow)
    fileio.copy(schema_file, os.path.join(checked_schema.uri, SCHEMA_FILE_NAME), overwrite=True)
