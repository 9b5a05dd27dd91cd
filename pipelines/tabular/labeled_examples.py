"""Rows whose label cell is empty are dropped, and counted, before anything reads the data.

A regression or classification label left empty in a CSV row cannot be trained on or scored.
:func:`LabeledExamples` (a component between CsvExampleGen and StatisticsGen in a ``--label``
pipeline) copies every split without those rows and records how many it dropped per split on
its output artifact (:data:`UNLABELED_ROWS_PROPERTY`, a JSON ``{split: rows}``), which the data
summary reports. Statistics, Transform, the Trainer and the Evaluator all read its output.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx import tf
from ga_tfx.pipelines.tabular.csv_example_gen import DIALECT_PROPERTY

import json
import os
from typing import Dict, Tuple

from tfx import v1 as tfx
from tfx.types import artifact_utils

UNLABELED_ROWS_PROPERTY = "ga_tfx_unlabeled_rows"
# ExampleGen's properties that readers of Examples need (file and payload format).
# (and the dialect the data summary prints).
_COPIED_PROPERTIES = (
    "payload_format",
    "file_format",
    "span",
    "input_fingerprint",
    DIALECT_PROPERTY,
)
_OUTPUT_FILE = "data_tfrecord-00000-of-00001.gz"


def has_label(serialized: bytes, label: str) -> bool:
    """Whether the tf.Example ``serialized`` has a non-empty value for ``label`` (an empty CSV
    cell is an empty list; blank text counts as empty)."""
    example = tf.train.Example.FromString(serialized)
    feature = example.features.feature.get(label)
    if feature is None:
        return False
    kind = feature.WhichOneof("kind")
    values = list(getattr(feature, kind).value) if kind else []
    if not values:
        return False
    return not (kind == "bytes_list" and not values[0].strip())


def copy_labeled_split(source_dir: str, target_dir: str, label: str) -> Tuple[int, int]:
    """Copies the gzipped TFRecords of one split without unlabeled rows; (kept, dropped)."""
    files = sorted(tf.io.gfile.glob(os.path.join(source_dir, "*")))
    tf.io.gfile.makedirs(target_dir)
    kept = dropped = 0
    with tf.io.TFRecordWriter(
        os.path.join(target_dir, _OUTPUT_FILE), options=tf.io.TFRecordOptions("GZIP")
    ) as writer:
        for record in tf.data.TFRecordDataset(files, compression_type="GZIP"):
            serialized = record.numpy()
            if has_label(serialized, label):
                writer.write(serialized)
                kept += 1
            else:
                dropped += 1
    return kept, dropped


@tfx.dsl.components.component
def LabeledExamples(
    examples: tfx.dsl.components.InputArtifact[tfx.types.standard_artifacts.Examples],
    labeled_examples: tfx.dsl.components.OutputArtifact[tfx.types.standard_artifacts.Examples],
    label: tfx.dsl.components.Parameter[str],
) -> None:
    """Every split of ``examples`` without the rows whose ``label`` is empty; the number
    dropped per split is the output's ``ga_tfx_unlabeled_rows`` property (JSON)."""
    splits = artifact_utils.decode_split_names(examples.split_names)
    dropped: Dict[str, int] = {}
    for split in splits:
        _, dropped[split] = copy_labeled_split(
            artifact_utils.get_split_uri([examples], split),
            os.path.join(labeled_examples.uri, f"Split-{split}"),
            label,
        )
    labeled_examples.split_names = artifact_utils.encode_split_names(splits)
    for name in _COPIED_PROPERTIES:
        if examples.has_custom_property(name):
            value = examples.get_custom_property(name)
            if isinstance(value, int):
                labeled_examples.set_int_custom_property(name, value)
            else:
                labeled_examples.set_string_custom_property(name, str(value))
    labeled_examples.set_string_custom_property(UNLABELED_ROWS_PROPERTY, json.dumps(dropped))


def unlabeled_rows(artifact) -> Dict[str, int]:
    """``{split: rows dropped}`` recorded by :func:`LabeledExamples` (``{}``: none recorded)."""
    if artifact is None or not artifact.has_custom_property(UNLABELED_ROWS_PROPERTY):
        return {}
    return json.loads(artifact.get_string_custom_property(UNLABELED_ROWS_PROPERTY))
