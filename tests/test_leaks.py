"""The leak rule (``ga_tfx.pipelines.tabular.leaks``) against known leaks and honest features.

* The Titanic's ``boat`` (a lifeboat number, recorded only for those who got into one) is a
  known leak of ``survived``: it is named, and no other column of that table is (``sex`` is the
  strongest honest feature). On TFX's taxi trips, ``tips`` gives ``payment_type`` away (cash
  tips are not recorded), but ``payment_type`` does not give the amount of ``tips`` away.
* Built cases: an exact copy of the label is a leak; a column of noise is not; a copy with 15%
  of its cells changed is not (90% of the error removed is the bar).
* The one-column model and the baseline agree with a count done by hand.
"""

from ga_tfx.pipelines.tabular import csv_dialect, leaks

import random

import pytest

from benchmarks import tabular_datasets

pytestmark = [pytest.mark.tfx]  # benchmarks.tabular_datasets imports TFX (its taxi table)


def _split(tmp_path, name, label):
    """The rows with a label of a development table: every third row eval, the rest train."""
    directory = tabular_datasets.write(name, str(tmp_path / name))
    path = f"{directory}/{name}.csv"
    dialect = csv_dialect.read([path])
    index = dialect.columns.index(label)
    rows = [r for r in csv_dialect.records(path, dialect) if r[index] is not None]
    train = {c: [r[i] for k, r in enumerate(rows) if k % 3] for i, c in enumerate(dialect.columns)}
    evaluation = {
        c: [r[i] for k, r in enumerate(rows) if not k % 3] for i, c in enumerate(dialect.columns)
    }
    return train, evaluation


def test_the_titanics_boat_is_named_and_nothing_else(tmp_path):
    train, evaluation = _split(tmp_path, "titanic", "survived")
    found = leaks.scan(train, evaluation, "survived", "classification")
    assert [leak.column for leak in found] == ["boat"]
    assert found[0].error <= 0.1 * found[0].baseline  # the bar: 90% of the error removed


def test_tips_give_the_payment_type_away_not_the_reverse(tmp_path):
    train, evaluation = _split(tmp_path, "chicago_taxi", "payment_type")
    assert [x.column for x in leaks.scan(train, evaluation, "payment_type", "classification")] == [
        "tips"
    ]
    train, evaluation = _split(tmp_path, "chicago_taxi", "tips")
    assert leaks.scan(train, evaluation, "tips", "regression") == []


def _built(n, noise_share, seed=0):
    rng = random.Random(seed)
    label = [rng.choice("abc") for _ in range(n)]
    copy = [y if rng.random() >= noise_share else rng.choice("abc") for y in label]
    return {"y": label, "copy": copy, "noise": [rng.random() for _ in range(n)]}


@pytest.mark.parametrize(
    "noise_share, leak", [(0.0, True), (0.05, True), (0.25, False)], ids=["exact", "5%", "25%"]
)
def test_built_copies_and_noise(noise_share, leak):
    train, evaluation = _built(3000, noise_share, 1), _built(1500, noise_share, 2)
    found = [x.column for x in leaks.scan(train, evaluation, "y", "classification")]
    assert found == (["copy"] if leak else [])


def test_a_regression_leak_and_a_strong_honest_feature():
    rng = random.Random(3)
    x = [rng.uniform(0, 10) for _ in range(4000)]
    strong = [v + rng.gauss(0, 3) for v in x]  # R^2 about 0.5 with y = x
    table = {"y": x, "copy": [v + rng.gauss(0, 0.01) for v in x], "strong": strong}
    train = {k: v[:3000] for k, v in table.items()}
    evaluation = {k: v[3000:] for k, v in table.items()}
    assert [leak.column for leak in leaks.scan(train, evaluation, "y", "regression")] == ["copy"]


def test_the_one_column_model_by_hand():
    train_x = ["a", "a", "a", "b", "b", None, None]
    train_y = ["1", "1", "0", "0", "0", "1", "1"]
    eval_x = ["a", "b", None, "c"]  # 'c': unseen -> the training majority ('1': 4 of 7)
    eval_y = ["1", "1", "1", "0"]
    # predictions: a->1, b->0, None->1, c->1: right, wrong, right, wrong
    assert leaks.one_column_error(train_x, train_y, eval_x, eval_y, "classification") == 0.5
    assert leaks.baseline_error(train_y, eval_y, "classification") == 0.25
    # regression on numbers: bins of the training quantiles; here each value its own bin
    xs, ys = [1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]
    assert leaks.one_column_error(xs, ys, [2.0, None], [20.0, 25.0], "regression") == 0.0
