"""Two concerns of the pipeline's options: your CSV data, and when a trained model is blessed.

:class:`CsvDataOptions` (the label, the task, how the files are read, the columns left out, a
module file of your own) and :class:`BlessingOptions` (the Evaluator's thresholds), each
checking its own rules as it is made; :class:`ga_tfx.pipelines.options.TrainingOptions` holds
them beside the accumulation and Tuner concerns (and re-exports them). Standard library only.
"""

from ga_tfx._schema import SettingError, Settings, defaults, like, setting, specs
from ga_tfx.pipelines.tabular.csv_dialect import CsvReading

import dataclasses
from typing import Optional, Tuple

DEFAULT_MIN_ACCURACY = 0.8  # the digits' and a --module-file's blessing threshold


@dataclasses.dataclass(frozen=True)
class CsvDataOptions(Settings):
    """Your own CSV data (``label``; None: the shipped digits): the task, how its files are read
    (the ``csv_*`` fields, :class:`~ga_tfx.pipelines.tabular.csv_dialect.CsvReading`), the
    columns the generic model leaves out, or a module file of your own."""

    label: Optional[str] = setting(
        None,
        kind=str,
        optional=True,
        help="the label column of your own CSV files (--data-root): trains the generic "
        "model of ga_tfx.pipelines.tabular.generic; None: the shipped digits pipeline",
    )
    task: str = setting(
        "classification",
        kind=str,
        choices=("classification", "regression"),
        help="what --label is: classes (accuracy) or a number (RMSE, MAE)",
    )
    exclude_columns: Tuple[str, ...] = setting(
        (),
        kind=str,
        many=True,
        empty=True,
        help="--label data: columns the generic model leaves out (e.g. one the data summary "
        "names as a possible leak, known only after the outcome)",
    )
    csv_delimiter: str = like(CsvReading, "csv_delimiter")
    csv_decimal: str = like(CsvReading, "csv_decimal")
    csv_missing: Tuple[str, ...] = like(CsvReading, "csv_missing")
    csv_row_numbers: str = like(CsvReading, "csv_row_numbers")
    csv_encoding: str = like(CsvReading, "csv_encoding")
    module_file: Optional[str] = setting(
        None,
        kind=str,
        optional=True,
        help="your own TFX module file for --label data: preprocessing_fn(inputs[, "
        "custom_config]) and build_model(hparams[, transform_output]) (None: the "
        "generic module)",
    )

    def __post_init__(self):
        super().__post_init__()
        if self.label is None and (self.module_file or self.task != "classification"):
            raise SettingError(
                "module_file and task apply to your own CSV data: give its "
                "label column with label (--label COLUMN)."
            )
        if self.exclude_columns and (self.label is None or self.module_file):
            raise SettingError(
                f"exclude_columns {list(self.exclude_columns)} applies to the generic model of "
                "your own CSV data (--label COLUMN without --module-file; a module file "
                "chooses its own columns)."
            )
        if self.label is not None and self.label in self.exclude_columns:
            raise SettingError(
                f"exclude_columns {list(self.exclude_columns)} holds the label {self.label!r}: "
                "the label is never an input; name other columns."
            )
        reading = self.csv_reading()  # checks the encoding's name
        if self.label is None and reading != CsvReading():
            changed = [k for k, v in defaults(CsvReading).items() if getattr(reading, k) != v]
            raise SettingError(
                f"{', '.join(changed)} appl{'ies' if len(changed) == 1 else 'y'} to your own CSV "
                "data: give its label column with label (--label COLUMN)."
            )

    def csv_reading(self) -> CsvReading:
        """How the CSV files of ``--data-root`` are read (the ``csv_*`` fields)."""
        return CsvReading(**{name: getattr(self, name) for name in specs(CsvReading)})


@dataclasses.dataclass(frozen=True)
class BlessingOptions(Settings):
    """When the Evaluator blesses (and the Pusher pushes) the trained model."""

    min_accuracy: Optional[float] = setting(
        None,
        kind=float,
        above=0,
        maximum=1,
        optional=True,
        help="the Evaluator blesses (and the Pusher pushes) a model whose eval accuracy is at "
        f"least this (None: {DEFAULT_MIN_ACCURACY} for the shipped digits and a --module-file; "
        "the generic --label model needs only to beat the majority class)",
    )
    max_rmse: Optional[float] = setting(
        None,
        kind=float,
        above=0,
        optional=True,
        help="regression: the Evaluator blesses a model whose eval RMSE is at most this "
        "(None: the generic model needs only to beat the training mean; a --module-file "
        "regression needs it)",
    )
