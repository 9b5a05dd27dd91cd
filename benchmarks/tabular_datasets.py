"""Real tables shipped inside installed packages, written out as CSV directories (no download).

Nobody on the team shaped them: each is copied, or converted to CSV cell by cell (ARFF's ``?``
becomes an empty cell; the diabetes file's two halves are joined column to column), with no row,
column or value changed. The ``ga-tfx run --data-root DIR --label COLUMN`` benchmark
(``benchmarks/tabular_baselines.py``) and the slow tests read them.

* ``chicago_taxi``: TFX's Chicago taxi example (``tfx/examples/chicago_taxi_pipeline/data/
  simple/data.csv``): 15,002 trips, 18 columns, empty cells in 9 of them, a label with 7
  classes (payment type; 3 with 4 rows or fewer), census-tract codes, Unix timestamps.
* ``titanic``: OpenML 40945 as scikit-learn's test data ships it
  (``sklearn/datasets/tests/data/openml/id_40945``): 1,309 passengers, 14 columns, empty cells
  in 7 (age, fare, cabin, embarked, boat, body, home.dest), names and tickets.
* ``diabetes``: scikit-learn's diabetes table (``sklearn/datasets/data/diabetes_data_raw.csv.gz``
  and ``diabetes_target.csv.gz``): 442 patients, 10 measurements, a numeric target.
"""

import csv
import gzip
import os
import shutil
from typing import Dict, NamedTuple

import sklearn
import tfx


class Dataset(NamedTuple):
    name: str
    source: str  # the shipped file(s), relative to site-packages
    rows: int


def _site(package, *parts):
    return os.path.join(os.path.dirname(package.__file__), *parts)


TAXI_CSV = _site(tfx, "examples", "chicago_taxi_pipeline", "data", "simple", "data.csv")
TITANIC_ARFF = _site(
    sklearn, "datasets", "tests", "data", "openml", "id_40945", "data-v1-dl-16826755.arff.gz"
)
DIABETES_DATA = _site(sklearn, "datasets", "data", "diabetes_data_raw.csv.gz")
DIABETES_TARGET = _site(sklearn, "datasets", "data", "diabetes_target.csv.gz")
DIABETES_COLUMNS = ("age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6", "target")

DATASETS: Dict[str, Dataset] = {
    "chicago_taxi": Dataset(
        "chicago_taxi", "tfx/examples/chicago_taxi_pipeline/data/simple/data.csv", 15002
    ),
    "titanic": Dataset(
        "titanic", "sklearn/datasets/tests/data/openml/id_40945/data-v1-dl-16826755.arff.gz", 1309
    ),
    "diabetes": Dataset(
        "diabetes",
        "sklearn/datasets/data/diabetes_data_raw.csv.gz + diabetes_target.csv.gz",
        442,
    ),
}


def write(name: str, directory: str) -> str:
    """Writes data set ``name`` as ``directory/<name>.csv``; returns ``directory``."""
    os.makedirs(directory, exist_ok=True)
    target = os.path.join(directory, f"{name}.csv")
    if name == "chicago_taxi":
        shutil.copyfile(TAXI_CSV, target)
    elif name == "titanic":
        _arff_to_csv(TITANIC_ARFF, target)
    elif name == "diabetes":
        _diabetes_csv(target)
    else:
        raise ValueError(f"unknown data set {name!r}; known: {sorted(DATASETS)}.")
    return directory


def _arff_to_csv(arff_gz: str, target: str) -> None:
    """The ARFF's data section is CSV already; its ``?`` (missing) becomes an empty cell."""
    names, in_data = [], False
    with gzip.open(arff_gz, "rt") as f, open(target, "w", newline="") as out:
        writer = csv.writer(out)
        for line in f:
            stripped = line.strip()
            if not in_data:
                lowered = stripped.lower()
                if lowered.startswith("@attribute"):
                    rest = stripped.split(None, 1)[1]
                    names.append(next(csv.reader([rest], delimiter=" ", quotechar="'"))[0])
                elif lowered.startswith("@data"):
                    in_data = True
                    writer.writerow(names)
                continue
            if not stripped or stripped.startswith("%"):
                continue
            cells = next(csv.reader([stripped], quotechar='"', skipinitialspace=True))
            writer.writerow(["" if cell == "?" else cell for cell in cells])


def _diabetes_csv(target: str) -> None:
    """The ten measurements (space-separated) and the target, row by row, as shipped."""
    with gzip.open(DIABETES_DATA, "rt") as data, gzip.open(DIABETES_TARGET, "rt") as labels:
        rows = [line.split() + [label.strip()] for line, label in zip(data, labels) if line.strip()]
    with open(target, "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(DIABETES_COLUMNS)
        writer.writerows(rows)
