"""Which user code a pipeline runs: the shipped digits code, the generic CSV code, or a module
file of the user's own (standard library only; the pipeline and the CLI's data check read it)."""

from ga_tfx.pipelines import digits
from ga_tfx.pipelines.options import CsvDataOptions
from ga_tfx.pipelines.tabular import generic
from ga_tfx.pipelines.tabular.csv_dialect import CsvReading

import dataclasses
from typing import Any, Dict, Optional, Tuple


@dataclasses.dataclass(frozen=True)
class UserCode:
    """The code a pipeline's Transform and Trainer run, and how the label is named.

    Attributes:
      preprocessing_fn: dotted path of Transform's ``preprocessing_fn`` (None with
        ``module_file``).
      model_fn: dotted path of the module defining ``build_model`` (None with
        ``module_file``).
      module_file: a user's TFX module file defining both (None: the dotted paths).
      label_key: the transformed label (the Trainer's ``label_key``).
      raw_label_key: the label column of the CSV files.
      task: ``"classification"`` or ``"regression"``.
      transform_config: Transform's ``custom_config`` (None: none).
      curated_schema: a schema file for ImportSchemaGen (None: SchemaGen infers it).
      reading: how the CSV files are read (the ``--csv-*`` options; None: the digits' CSV).
      exclude: columns the generic model leaves out (``--exclude-columns``).
    """

    label_key: str
    raw_label_key: str
    task: str = "classification"
    preprocessing_fn: Optional[str] = None
    model_fn: Optional[str] = None
    module_file: Optional[str] = None
    transform_config: Optional[Dict[str, Any]] = None
    curated_schema: Optional[str] = None
    reading: Optional[CsvReading] = None
    exclude: Tuple[str, ...] = ()

    def check_data(self, data_root: str) -> int:
        """The CLI's pre-check of the CSV files (``ValueError`` naming what is wrong);
        returns the number of data rows."""
        if self.curated_schema is not None:
            return digits.check_csv_dir(data_root)
        return generic.check_csv_dir(data_root, self.raw_label_key, self.reading, self.exclude)


DIGITS = UserCode(
    label_key=digits.LABEL_KEY,
    raw_label_key=digits.RAW_LABEL_KEY,
    preprocessing_fn="ga_tfx.pipelines.digits.preprocessing_fn",
    model_fn="ga_tfx.pipelines.digits",
    curated_schema=digits.SCHEMA_FILE,
)


def for_options(options: CsvDataOptions) -> UserCode:
    """The digits code without ``options.label``; else the generic code (or the user's
    ``options.module_file``) for the CSV column ``options.label``. (``options``: the CSV
    concern of the pipeline's options, ``TrainingOptions.csv``.)"""
    if options.label is None:
        return DIGITS
    config = {generic.LABEL_CONFIG: options.label, generic.TASK_CONFIG: options.task}
    if options.module_file:
        return UserCode(
            label_key=_module_label_key(options.module_file),
            raw_label_key=options.label,
            task=options.task,
            module_file=options.module_file,
            transform_config=config,
            reading=options.csv_reading(),
        )
    return UserCode(
        label_key=generic.LABEL_KEY,
        raw_label_key=options.label,
        task=options.task,
        preprocessing_fn="ga_tfx.pipelines.tabular.generic.preprocessing_fn",
        model_fn="ga_tfx.pipelines.tabular.generic",
        transform_config=config,
        reading=options.csv_reading(),
        exclude=options.exclude_columns,
    )


def _module_label_key(module_file: str) -> str:
    """The transformed label a user's module produces: its ``LABEL_KEY`` constant, else
    ``generic.LABEL_KEY`` (``"label_xf"``)."""
    import importlib.util
    import os

    if not os.path.isfile(module_file):
        raise ValueError(f"module_file {module_file!r} does not exist (or is not a file).")
    spec = importlib.util.spec_from_file_location("ga_tfx_user_module", module_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in ("preprocessing_fn", "build_model"):
        if not callable(getattr(module, name, None)):
            raise ValueError(
                f"module_file {module_file!r} defines no {name}(): the ga-tfx "
                "pipeline needs preprocessing_fn(inputs[, custom_config]) for "
                "Transform and build_model(hparams[, transform_output]) returning "
                "a compiled tf.keras model for the Trainer."
            )
    return getattr(module, "LABEL_KEY", generic.LABEL_KEY)
