"""The data check of a pipeline's statistics and anomalies: one line saying why it stops.

:func:`check` reads the schema, the ExampleStatistics and the ExampleAnomalies artifacts of a
run and raises :class:`DataError` (one line) for an empty split (blamed on the label when the
rows dropped for an empty label emptied it) or ExampleValidator's anomalies (each column, what
was found, what the schema allows), and warns when one optimizer update takes more examples than
the training split holds. The digits pipeline's gate (:func:`ga_tfx.pipelines.data_check.DataCheck`)
and the ``--label`` one (:mod:`ga_tfx.pipelines.tabular.plan_check`) both run it.
"""

import os
from typing import Dict, List, Optional

from absl import logging as absl_logging
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
