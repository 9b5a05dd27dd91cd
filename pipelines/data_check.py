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

The check itself (:func:`check`, :class:`DataError` and the lines it writes) lives below, in
:mod:`ga_tfx.pipelines.common.statistics_check`, which the ``--label`` pipeline's gate runs too;
its names are re-exported here.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx.pipelines import digits
from ga_tfx.pipelines.common.statistics_check import (
    SCHEMA_FILE_NAME,
    DataError,
    anomaly_lines,
    check,
    empty_split,
    update_warning,
)
from ga_tfx.pipelines.common.user_log import USER_LOGGER

import logging
import os

from tfx import v1 as tfx
from tfx.dsl.io import fileio

__all__ = [
    "SCHEMA_FILE_NAME",
    "DataCheck",
    "DataError",
    "anomaly_lines",
    "check",
    "empty_split",
    "largest_effective_batch",
    "update_warning",
    "warn_before_run",
]


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
        logging.getLogger(USER_LOGGER).warning(warning)


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
