"""`ga-tfx run --data-root DIR --label COLUMN` on CSV data nobody here shaped.

The data: scikit-learn's breast-cancer measurements (569 patients, 30 numeric columns, shipped
offline with scikit-learn) plus a text column (a made-up clinic) and a TEXT label (malignant /
benign). The generic module must reach >= 0.9 eval accuracy with the defaults, through the real
pipeline (ExampleGen .. Pusher) and the quiet console.
"""

from ga_tfx.pipelines import tabular

import csv
import json
import os
import random
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.tfx]


def _breast_cancer_csv(directory):
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    rng = random.Random(0)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "patients.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([n.replace(" ", "_") for n in data.feature_names] + ["clinic", "diagnosis"])
        for row, target in zip(data.data, data.target):
            writer.writerow(
                [f"{v:.6g}" for v in row]
                + [rng.choice(["north", "south", "east"]), data.target_names[target]]
            )
    return directory


def test_the_data_check_names_the_missing_label(tmp_path):
    data = _breast_cancer_csv(str(tmp_path / "data"))
    with pytest.raises(ValueError, match=r"has no label column 'diagnosys'; its columns: "):
        tabular.check_csv_dir(data, "diagnosys")
    assert tabular.check_csv_dir(data, "diagnosis") == 569


@pytest.mark.slow  # a whole pipeline run
def test_a_csv_with_text_columns_trains_with_one_command(tmp_path):
    data = _breast_cancer_csv(str(tmp_path / "data"))
    out = tmp_path / "out"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ga_tfx.pipelines.cli",
            "run",
            "--data-root",
            data,
            "--label",
            "diagnosis",
            "--output-dir",
            str(out),
            "--train-updates",
            "40",
            "--updates-per-epoch",
            "20",
        ],
        capture_output=True,
        text=True,
        timeout=1500,
    )
    print(result.stdout[-3000:], result.stderr[-3000:])
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert len(lines) <= 60  # the quiet console
    summary = next(line for line in lines if line.startswith("evaluation (eval split)"))
    accuracy = float(summary.split("sparse_categorical_accuracy=")[1].split(",")[0])
    print(f"eval accuracy on the breast-cancer CSV: {accuracy}")
    assert accuracy >= 0.9
    record = json.load(
        open(
            next(
                os.path.join(root, name)
                for root, _, names in os.walk(out)
                for name in names
                if name == "ga_tfx_run.json"
            )
        )
    )
    assert record["effective_batch_size"] == 128
