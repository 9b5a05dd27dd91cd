"""A seeded messy version of a real table: TFX's Chicago taxi trips, damaged on purpose.

From the first ``ROWS`` trips of ``tfx/examples/chicago_taxi_pipeline/data/simple/data.csv``
(real data, with its own empty cells, census-tract codes and Unix timestamps):

* ``trip_id`` (``T000000``...): an identifier column (dropped: named like one, all distinct);
* ``fleet``: the same value in every row (dropped: constant);
* cells blanked at random (seeded): ``BLANKED`` fraction of ``fare``, ``trip_seconds`` and
  ``company``;
* ``payment_type`` (the classification label) left empty in ``EMPTY_LABEL_ROWS`` rows, and
  ``tips`` (the regression label) in another ``EMPTY_LABEL_ROWS``;
* one extra trip whose payment type is ``UNSEEN_CLASS``, a class no other row has; it lands in
  CsvExampleGen's eval split (its hash bucket), so it is a class the training split lacks (the
  tests check that premise through the data plan);
* one trip of ``EXTREME_MILES`` miles (an absurd value, to be clipped).

:func:`write` writes it plain (commas, empty cells) or as others would (``dialect``): R's
``write.csv`` (quoted header and text, an unnamed first column of row numbers, ``NA``) or
Excel in Europe (``;``, decimal comma, a UTF-8 byte-order mark, CRLF lines). The pipeline must
read each as the same table, so the three give the same examples and split.
"""

import csv
import os
import random
import re

from benchmarks import tabular_datasets

ROWS = 3000
SEED = 27
BLANKED = 0.15
BLANKED_COLUMNS = ("fare", "trip_seconds", "company")
EMPTY_LABEL_ROWS = 5
UNSEEN_CLASS = "Mystery"
UNSEEN_ROW = 20  # the trip copied (with UNSEEN_CLASS) into the extra row; chosen so that
# CsvExampleGen's hash split puts that row in eval
EXTREME_MILES = "987654321"
CLASSIFICATION_LABEL, REGRESSION_LABEL = "payment_type", "tips"


DIALECTS = ("plain", "r", "excel_eu")
_DECIMAL = re.compile(r"-?\d+\.\d+")


def write(directory, rows=ROWS, unseen_row=UNSEEN_ROW, dialect="plain"):
    """Writes ``directory/trips.csv`` in ``dialect`` (:data:`DIALECTS`); returns ``directory``."""
    with open(tabular_datasets.TAXI_CSV, newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        trips = [row for _, row in zip(range(rows), reader)]
    rng = random.Random(SEED)
    index = {name: i for i, name in enumerate(header)}
    for name in BLANKED_COLUMNS:
        for row in trips:
            if rng.random() < BLANKED:
                row[index[name]] = ""
    for label, start in ((CLASSIFICATION_LABEL, 10), (REGRESSION_LABEL, 40)):
        for row in trips[start : start + EMPTY_LABEL_ROWS]:
            row[index[label]] = ""
    trips[100][index["trip_miles"]] = EXTREME_MILES
    unseen = list(trips[unseen_row])
    unseen[index[CLASSIFICATION_LABEL]] = UNSEEN_CLASS
    unseen[index[REGRESSION_LABEL]] = unseen[index[REGRESSION_LABEL]] or "0"
    trips.append(unseen)
    table = [["trip_id"] + header + ["fleet"]]
    table += [[f"T{i:06d}"] + row + ["city"] for i, row in enumerate(trips)]
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "trips.csv")
    if dialect == "plain":
        with open(path, "w", newline="") as f:
            csv.writer(f).writerows(table)
    elif dialect == "r":  # write.csv(df): quoted names and text, row names, NA, numbers bare
        with open(path, "w", newline="") as f:
            f.write(",".join(f'"{n}"' for n in [""] + table[0]) + "\n")
            for i, row in enumerate(table[1:], 1):
                cells = [f'"{i}"'] + [
                    "NA" if not c else c if _number(c) else '"' + c.replace('"', '""') + '"'
                    for c in row
                ]
                f.write(",".join(cells) + "\n")
    elif dialect == "excel_eu":  # Excel (de_DE, fr_FR): ';', decimal comma, BOM, CRLF
        with open(path, "w", newline="", encoding="utf-8-sig") as f:
            writer = csv.writer(f, delimiter=";", lineterminator="\r\n")
            writer.writerow(table[0])
            for row in table[1:]:
                writer.writerow([c.replace(".", ",") if _DECIMAL.fullmatch(c) else c for c in row])
    else:
        raise ValueError(f"dialect must be one of {DIALECTS}, got {dialect!r}.")
    return directory


def _number(cell):
    try:
        float(cell)
    except ValueError:
        return False
    return True
