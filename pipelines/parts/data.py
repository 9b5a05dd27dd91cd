"""The data parts of the pipeline: read the CSV files, check them, transform them.

The shipped digits: ``CsvExampleGen`` -> ``StatisticsGen`` -> ``ImportSchemaGen`` (the curated
schema) -> ``ExampleValidator`` -> ``DataCheck`` -> ``Transform``. Any CSV (``--label``):
``DialectCsvExampleGen`` (its own dialect) -> ``LabeledExamples`` (rows without a label dropped
and counted) -> ``StatisticsGen`` (the label's classes counted) -> ``SchemaGen`` (inferred) ->
``ExampleValidator`` -> ``DataPlanCheck`` (also the data plan and its summary) -> Transform
(``PlannedTransform`` for the generic module, which hands it the plan).
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx.pipelines import data_check as data_check_lib
from ga_tfx.pipelines.tabular import data_plan

import json
from typing import Optional

from tfx import v1 as tfx


def is_generic(code) -> bool:
    """Whether ``code`` (a :class:`~ga_tfx.pipelines.user_code.UserCode`) is the generic module
    of any CSV (neither the digits' code nor a ``--module-file``)."""
    return code.curated_schema is None and code.module_file is None


def example_gen(code, data_root: str):
    """The ExampleGen of the CSV files in ``data_root``: TFX's ``CsvExampleGen`` for the digits,
    else ``DialectCsvExampleGen`` reading them in their own dialect (R, Excel, pandas, database
    exports)."""
    if code.reading is None:
        return tfx.components.CsvExampleGen(input_base=data_root)
    from ga_tfx.pipelines.tabular.csv_example_gen import DialectCsvExampleGen

    return DialectCsvExampleGen(data_root, code.reading)


def labeled_examples(code, examples):
    """Any CSV: ``LabeledExamples``, which drops (and counts) the rows of ``examples`` whose
    label cell is empty; None for the digits (whose curated schema requires the label)."""
    if code.curated_schema is not None:
        return None
    from ga_tfx.pipelines.tabular.labeled_examples import LabeledExamples

    return LabeledExamples(examples=examples, label=code.raw_label_key)


def statistics_gen(code, examples):
    """``StatisticsGen`` over ``examples``; for a classification label of any CSV it counts the
    label's values even when they are integers (the data summary's classes per split)."""
    return tfx.components.StatisticsGen(examples=examples, stats_options=_stats_options(code))


def _stats_options(code):
    if code.curated_schema is not None:
        return None
    schema = data_plan.label_stats_options_schema(code.raw_label_key, code.task)
    if schema is None:
        return None
    import tensorflow_data_validation as tfdv

    return tfdv.StatsOptions(schema=schema)


def schema_gen(code, statistics, curated_schema_file: Optional[str] = None):
    """The digits: ``ImportSchemaGen`` of the curated schema (``curated_schema_file``, default
    the file beside the package; anomalies against it stop the run in ``DataCheck``). Any CSV:
    the schema ``SchemaGen`` infers from ``statistics``, written where the user can curate
    it."""
    if code.curated_schema:
        return tfx.components.ImportSchemaGen(
            schema_file=curated_schema_file or code.curated_schema
        )
    return tfx.components.SchemaGen(statistics=statistics, infer_feature_shape=True)


def data_check(code, options, examples, statistics, schema, anomalies):
    """The gate before Transform and training (its ``checked_schema`` output is what they read):
    ``DataCheck`` for the digits, ``DataPlanCheck`` for any CSV (which also makes the data plan
    and prints the data summary). ``statistics``, ``schema``, ``anomalies``: the channels of
    StatisticsGen, the schema gen and ExampleValidator."""
    checked = dict(
        schema=schema,
        statistics=statistics,
        anomalies=anomalies,
        effective_batch_size=data_check_lib.largest_effective_batch(options),
    )
    if code.curated_schema:
        return data_check_lib.DataCheck(**checked)
    from ga_tfx.pipelines.tabular.plan_check import DataPlanCheck

    return DataPlanCheck(
        **checked,
        examples=examples,
        label=code.raw_label_key,
        task=code.task,
        edit_columns=int(is_generic(code)),
        exclude_columns=json.dumps(list(options.csv.exclude_columns)),
    )


def transform(code, examples, checked_schema):
    """Transform (id ``Transform``) of ``examples`` with the user code's ``preprocessing_fn``
    and the schema the check passed on; the generic module's is ``PlannedTransform``, which
    hands it the data plan."""
    if is_generic(code):
        from ga_tfx.pipelines.tabular.planned_transform import PlannedTransform

        transform_class = PlannedTransform
    else:
        transform_class = tfx.components.Transform
    return transform_class(
        examples=examples,
        schema=checked_schema,
        **user_code_args(code, "preprocessing_fn"),
        custom_config=code.transform_config,
        # The data summary reads StatisticsGen's statistics: Transform's own (before and after,
        # one column per feature of a wide vector) would double its time for nothing here.
        disable_statistics=code.curated_schema is None,
    ).with_id("Transform")


def user_code_args(code, dotted_name: str):
    """``{dotted_name: path}`` for installed user code, or ``{"module_file": ...}``."""
    if code.module_file:
        return {"module_file": code.module_file}
    return {dotted_name: getattr(code, dotted_name)}
