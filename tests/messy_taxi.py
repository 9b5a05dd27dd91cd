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
"""

import csv
import os
import random

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


def write(directory, rows=ROWS, unseen_row=UNSEEN_ROW):
    """Writes ``directory/trips.csv``; returns ``directory``."""
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
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "trips.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["trip_id"] + header + ["fleet"])
        for i, row in enumerate(trips):
            writer.writerow([f"T{i:06d}"] + row + ["city"])
    return directory
