"""The data plan of a ``--label`` run (``pipelines/tabular/data_plan.py``), from statistics protos.

The statistics are built here the way StatisticsGen writes them for CsvExampleGen's examples (an
empty cell is a feature with no value: ``tot_num_values`` counts the non-empty cells; numbers get
``num_stats`` with a quantiles histogram, text and counted labels ``string_stats``), from plain
Python columns, so every expectation below is computed independently of the code under test
(numpy on the raw values for the baselines).
"""

from ga_tfx.pipelines.tabular import data_plan

import dataclasses
import math

import numpy as np
import pytest
from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2

pytestmark = [pytest.mark.tfx]  # tensorflow_metadata protos (the TFX stack)

INT, FLOAT, STRING = (
    statistics_pb2.FeatureNameStatistics.INT,
    statistics_pb2.FeatureNameStatistics.FLOAT,
    statistics_pb2.FeatureNameStatistics.STRING,
)


def _stats(columns, categorical=()):
    """DatasetFeatureStatistics of ``{name: [value or None, ...]}`` (None: an empty cell)."""
    rows = len(next(iter(columns.values())))
    dataset = statistics_pb2.DatasetFeatureStatistics(num_examples=rows)
    for name, values in columns.items():
        feature = dataset.features.add()
        feature.path.step.append(name)
        present = [v for v in values if v is not None]
        text = name in categorical or any(isinstance(v, str) for v in present)
        if text:
            feature.type = STRING
            stats = feature.string_stats
            counts = {}
            for v in present:
                counts[str(v)] = counts.get(str(v), 0) + 1
            stats.unique = len(counts)
            for value, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
                stats.top_values.add(value=value, frequency=count)
        else:
            feature.type = INT if all(float(v).is_integer() for v in present) else FLOAT
            stats = feature.num_stats
            if present:
                array = np.array(present, dtype=float)
                stats.min, stats.max = array.min(), array.max()
                stats.mean, stats.std_dev = array.mean(), array.std()
                histogram = stats.histograms.add(type=statistics_pb2.Histogram.QUANTILES)
                for q in np.quantile(array, np.linspace(0, 1, 11))[:-1]:
                    histogram.buckets.add(low_value=q, high_value=q, sample_count=1)
        stats.common_stats.num_non_missing = rows
        stats.common_stats.tot_num_values = len(present)
    return dataset


def _schema(columns):
    schema = schema_pb2.Schema()
    for name, values in columns.items():
        present = [v for v in values if v is not None]
        text = any(isinstance(v, str) for v in present)
        feature = schema.feature.add(name=name)
        feature.type = schema_pb2.BYTES if text else schema_pb2.INT
        feature.presence.min_fraction = 1.0
        if len(present) == len(values):
            feature.shape.dim.add(size=1)
    return schema


N_TRAIN, N_EVAL = 300, 120


def _messy(n, offset=0, eval_split=False):
    """A table with every kind of column the plan tells apart."""
    rng = np.random.RandomState(offset)
    return {
        "fare": [None if i % 10 == 0 else round(float(rng.gamma(2, 5)), 2) for i in range(n)],
        "hour": [int(rng.randint(24)) for _ in range(n)],
        "almost_empty": [1.5 if (i == 3 and not eval_split) else None for i in range(n)],
        "constant": [7 for _ in range(n)],
        "passenger": [f"{'Mr' if i % 2 else 'Ms'} Person {offset + i}" for i in range(n)],
        "trip_id": [float(offset + i) for i in range(n)],
        "started": [1_400_000_000 + 3600 * (offset + i) for i in range(n)],
        "tract": [17031080000 + 100 * int(rng.randint(50)) for _ in range(n)],
        "company": [None if i % 4 == 0 else ["Flash", "Yellow", "Blue"][i % 3] for i in range(n)],
    }


@pytest.fixture(scope="module")
def classification():
    train = _messy(N_TRAIN)
    train["kind"] = ["Cash"] * 180 + ["Card"] * 112 + ["Pcard"] * 6 + ["Dispute"] * 2
    evaluation = _messy(N_EVAL, offset=10_000, eval_split=True)
    evaluation["kind"] = ["Cash"] * 70 + ["Card"] * 46 + ["Pcard"] * 1 + ["Mystery"] * 3
    stats = {
        "train": _stats(train, categorical=("kind",)),
        "eval": _stats(evaluation, categorical=("kind",)),
    }
    plan = data_plan.make_plan(
        stats, _schema(train), "kind", "classification", {"train": 4, "eval": 1}
    )
    return plan, train, evaluation


def test_columns_are_dropped_with_the_reason(classification):
    plan = classification[0]
    by_name = {c.name: c for c in plan.columns}
    dropped = {c.name: c.reason for c in plan.dropped}
    assert set(dropped) == {"almost_empty", "constant", "passenger", "trip_id"}
    assert "almost empty: 1 of 300 training rows have a value" in dropped["almost_empty"]
    assert "constant in the training split: every value is 7" in dropped["constant"]
    assert "identifier: 300 distinct values in 300 non-empty" in dropped["passenger"]
    assert dropped["trip_id"] == "named like an identifier"
    assert by_name["started"].treatment == data_plan.TIMESTAMP
    assert "Unix seconds (2014-05-13.." in by_name["started"].reason
    assert by_name["tract"].treatment == data_plan.CODE
    assert by_name["company"].treatment == data_plan.CATEGORICAL
    assert by_name["fare"].treatment == data_plan.NUMERIC
    assert by_name["fare"].missing_indicator and not by_name["hour"].missing_indicator
    assert by_name["fare"].empty_cells == {"train": 30, "eval": 12}
    lines = plan.summary_lines()
    for column, reason in dropped.items():
        assert f"  dropped   {column}: {reason}" in lines
    # The columns used that have empty cells, most first (dropped ones and full ones: not).
    assert "empty cells (train): company 75 (25%), fare 30 (10%)" in lines


def test_a_large_number_that_varies_widely_is_a_quantity_not_a_code():
    # Zip-like or price-like numbers: large, but spread over their range.
    values = [100_000 + 997 * i for i in range(200)]
    plan = data_plan.make_plan(
        {"train": _stats({"v": values, "y": [1.0] * 199 + [2.0]})},
        _schema({"v": values, "y": [1.0]}),
        "y",
        "regression",
    )
    assert plan.columns[0].treatment == data_plan.NUMERIC


def test_the_summary_names_rare_classes_and_classes_training_lacks(classification):
    plan = classification[0]
    text = "\n".join(plan.summary_lines())
    assert "rare (fewer than 10 training rows): Pcard 6, Dispute 2" in text
    assert "not in train" in text and "Mystery (eval 3)" in text
    assert "4 classes in train, 4 in eval" in text
    assert "5 rows with an empty or missing 'kind' dropped (train 4, eval 1)" in text
    assert plan.unseen_classes() == [("Mystery", "eval", 3)]


def test_the_summary_fits_one_screen_however_wide_the_table():
    # 60 columns with empty cells and 40 classes: the worst five columns and the twelve most
    # frequent classes per split are named, the rest counted.
    train = {
        f"c{i:02d}": [None if r % (i + 2) == 0 else float(r % 7) for r in range(200)]
        for i in range(60)
    }
    train["y"] = [f"class{r % 40:02d}" for r in range(200)]
    plan = data_plan.make_plan(
        {"train": _stats(train), "eval": _stats(train)}, _schema(train), "y", "classification"
    )
    lines = plan.summary_lines()
    assert len(lines) <= 24 and max(len(line) for line in lines) <= 200
    assert lines[2].startswith("empty cells (train): c00 100 (50%), c01 67 (34%)")
    assert lines[2].endswith(" and 55 more columns")
    assert lines[5].startswith("  train: class00 5, ") and lines[5].endswith(" and 28 more")
    assert lines[7].startswith("  rare (fewer than 10") and lines[7].endswith(" and 28 more")


def test_the_majority_class_baseline_matches_counting_the_eval_labels(classification):
    plan, train, evaluation = classification
    majority = max(set(train["kind"]), key=train["kind"].count)
    expected = np.mean(np.array(evaluation["kind"]) == majority)
    assert plan.majority_class == majority == "Cash"
    assert plan.baseline_metric == pytest.approx(expected, abs=1e-12)


def test_the_mean_baseline_rmse_matches_numpy_on_the_eval_values():
    rng = np.random.RandomState(1)
    train = {"x": list(rng.normal(size=400)), "y": list(rng.gamma(2.0, 3.0, size=400) + 5)}
    evaluation = {"x": list(rng.normal(size=150)), "y": list(rng.gamma(2.5, 3.0, size=150))}
    plan = data_plan.make_plan(
        {"train": _stats(train), "eval": _stats(evaluation)}, _schema(train), "y", "regression"
    )
    expected = math.sqrt(np.mean((np.array(evaluation["y"]) - np.mean(train["y"])) ** 2))
    assert plan.baseline_metric == pytest.approx(expected, rel=1e-9)
    assert plan.baseline_name == f"training mean {np.mean(train['y']):.4g}"


def test_the_plan_travels_in_the_schema_and_edits_it(classification):
    plan, train, _ = classification
    schema = _schema(dict(train, kind=train["kind"]))
    annotated = data_plan.annotate_schema(schema, plan)
    assert data_plan.plan_from_schema(annotated) == plan
    assert data_plan.plan_from_schema(schema) is None
    features = {f.name: f for f in annotated.feature}
    for column in plan.dropped:
        assert features[column.name].lifecycle_stage == schema_pb2.DEPRECATED
        assert list(features[column.name].annotation.comment) == [column.reason]
    for column in plan.used:  # a serving request may leave any of them empty
        feature = features[column.name]
        assert not feature.HasField("shape") and feature.presence.min_fraction == 0.0
    assert features["kind"] == {f.name: f for f in schema.feature}["kind"]  # the label: as is
    kept = data_plan.annotate_schema(schema, plan, edit_columns=False)
    assert [f for f in kept.feature] == [f for f in schema.feature]
    assert data_plan.plan_from_schema(kept) == plan


def test_a_plan_refuses_a_missing_label_and_a_bad_task(classification):
    _, train, _ = classification
    stats = {"train": _stats(train)}
    with pytest.raises(ValueError, match=r"the label 'knd' is not a column of the data"):
        data_plan.make_plan(stats, _schema(train), "knd", "classification")
    with pytest.raises(ValueError, match=r"task must be one of .*got 'ranking'"):
        data_plan.make_plan(stats, _schema(train), "fare", "ranking")


def test_the_label_is_counted_as_categories_for_classification_only():
    schema = data_plan.label_stats_options_schema("survived", "classification")
    assert [(f.name, f.int_domain.is_categorical) for f in schema.feature] == [("survived", True)]
    assert data_plan.label_stats_options_schema("price", "regression") is None


def test_excluded_columns_are_dropped_and_leaks_are_warned_of(classification):
    _, train, evaluation = classification
    stats = {
        "train": _stats(train, categorical=("kind",)),
        "eval": _stats(evaluation, categorical=("kind",)),
    }
    plan = data_plan.make_plan(
        stats, _schema(train), "kind", "classification", exclude=("fare", "company")
    )
    dropped = {c.name: c.reason for c in plan.dropped}
    assert dropped["fare"] == dropped["company"] == "left out by --exclude-columns"
    assert "hour" not in dropped
    assert "  dropped   fare: left out by --exclude-columns" in plan.summary_lines()
    leaky = dataclasses.replace(plan, leaks=(("tips", 0.012, 0.38),))
    assert leaky.summary_lines()[-1] == (
        "warning: possible leak: 'tips' alone predicts 'kind' with eval error 0.012 (the "
        "baseline's: 0.38); a column known only after the outcome inflates the eval metric: "
        "--exclude-columns tips leaves it out"
    )
    assert data_plan.DataPlan.from_json(leaky.to_json()) == leaky
