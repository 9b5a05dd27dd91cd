"""Which user code a pipeline runs (``ga_tfx.pipelines.user_code``): the digits code, the
generic CSV code with the run's reading and excluded columns, or a user's module file with its
own label name; and the CLI's data check each of them runs."""

from ga_tfx.pipelines import cli, digits, user_code
from ga_tfx.pipelines.options import TrainingOptions
from ga_tfx.pipelines.tabular import generic as tabular

import pytest

pytestmark = [pytest.mark.tfx]  # the ga_tfx.pipelines package (installed with the tfx extra)


def test_without_a_label_the_digits_code_checks_the_digits_rules():
    code = user_code.for_options(TrainingOptions().csv)
    assert code is user_code.DIGITS and code.curated_schema == digits.SCHEMA_FILE
    assert code.check_data(cli.SHIPPED_DATA) == 1797


def test_the_generic_code_reads_and_checks_as_the_options_say(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.csv").write_text("x;fare;y\n1;2,5;a\n2;3,5;\n3;4,5;b\n")
    options = TrainingOptions.of(
        label="y", task="classification", csv_delimiter="semicolon", exclude_columns=("fare",)
    )
    code = user_code.for_options(options.csv)
    assert (code.model_fn, code.label_key, code.raw_label_key) == (
        "ga_tfx.pipelines.tabular.generic",
        tabular.LABEL_KEY,
        "y",
    )
    assert code.reading == options.csv.csv_reading() and code.exclude == ("fare",)
    assert code.transform_config == {
        tabular.LABEL_CONFIG: "y",
        tabular.TASK_CONFIG: "classification",
    }
    assert code.check_data(str(data)) == 2  # the rows with a label
    misspelt = user_code.for_options(
        TrainingOptions.of(label="y", csv_delimiter="semicolon", exclude_columns=("fair",)).csv
    )
    with pytest.raises(ValueError, match=r"^--exclude-columns 'fair' is not a column .* 'fare'"):
        misspelt.check_data(str(data))


def test_a_module_file_names_its_own_label_or_is_refused(tmp_path):
    module = tmp_path / "m.py"
    functions = "def preprocessing_fn(inputs):\n    pass\n\ndef build_model(hparams):\n    pass\n"
    module.write_text(functions + "LABEL_KEY = 'target_xf'\n")
    code = user_code.for_options(TrainingOptions.of(label="target", module_file=str(module)).csv)
    assert (code.module_file, code.label_key, code.raw_label_key) == (
        str(module),
        "target_xf",
        "target",
    )
    assert code.preprocessing_fn is None and code.model_fn is None
    module.write_text(functions)
    options = TrainingOptions.of(label="t", module_file=str(module))
    assert user_code.for_options(options.csv).label_key == tabular.LABEL_KEY
    module.write_text("def preprocessing_fn(inputs):\n    pass\n")
    with pytest.raises(ValueError, match=r"m.py' defines no build_model\(\)"):
        user_code.for_options(TrainingOptions.of(label="t", module_file=str(module)).csv)
