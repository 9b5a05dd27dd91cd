"""Makes the shipped pipeline data: scikit-learn's digits as a CSV (run once; output committed).

1797 real 8x8 grey-level images of handwritten digits (UCI, shipped inside scikit-learn, so no
download). Columns: ``pixel_00`` .. ``pixel_63`` (integers 0-16, row-major) and ``label``
(0-9). Rows keep scikit-learn's order.

    .venv/bin/python pipelines/data/make_digits_csv.py
"""

import csv
import os

from sklearn.datasets import load_digits

OUTPUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "digits", "digits.csv")


def main():
    digits = load_digits()
    header = [f"pixel_{i:02d}" for i in range(64)] + ["label"]
    os.makedirs(os.path.dirname(OUTPUT), exist_ok=True)
    with open(OUTPUT, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        for pixels, label in zip(digits.data.astype(int), digits.target):
            writer.writerow(list(pixels) + [int(label)])
    print(f"wrote {len(digits.target)} rows to {OUTPUT}")


if __name__ == "__main__":
    main()
