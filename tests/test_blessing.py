"""The summary's blessing and not-pushed lines (``pipelines/blessing.py``), from evaluations.

Each case is an Evaluator outcome (the metrics, the baseline's, TFMA's failed thresholds); the
line must name the metric, the model's value and what it missed (the baseline's value, or the
flag's threshold). The pipeline runs that produce them are in ``tests/test_any_csv.py``.
"""

from ga_tfx.pipelines import blessing

import pytest

pytestmark = [pytest.mark.tfx]

RMSE, ACCURACY = "root_mean_squared_error", "sparse_categorical_accuracy"


def _evaluation(failures=(), validated=True, model=0.9553, base=2.159, metric=RMSE):
    return blessing.Evaluation(
        metrics={metric: model, "example_count": 4966.0},
        baseline_metrics={metric: base, "example_count": 4966.0},
        validated=validated,
        failures=list(failures),
    )


def test_a_blessed_model_says_by_how_much_it_beats_the_baseline():
    verdict = blessing.verdict(_evaluation(), True, True, "training mean 1.051", RMSE)
    assert verdict == {
        "blessed": f"yes: {RMSE} 0.9553 beats the baseline's 2.159 (training mean 1.051)",
        "pushed": "",
    }


def test_a_model_that_does_not_beat_the_baseline_says_so_with_both_values():
    failure = blessing.Failure(RMSE, value=0.3, is_diff=True)
    evaluation = _evaluation([failure], model=2.46, base=2.159)
    verdict = blessing.verdict(evaluation, False, False, "training mean 1.051", RMSE)
    assert verdict == {
        "blessed": "no",
        "pushed": f"not pushed: {RMSE} 2.46 does not beat the baseline's 2.159 "
        "(training mean 1.051)",
    }


def test_a_missed_threshold_names_the_flag_and_its_value():
    below = blessing.Failure(ACCURACY, value=0.75, is_diff=False, bound=0.8, lower=True)
    above = blessing.Failure(RMSE, value=3.1, is_diff=False, bound=3.0, lower=False)
    verdict = blessing.verdict(_evaluation([below, above], metric=ACCURACY), False, False)
    assert verdict["pushed"] == (
        f"not pushed: {ACCURACY} 0.75 is below --min-accuracy 0.8; {RMSE} 3.1 is above --max-rmse 3"
    )


def test_without_a_threshold_the_line_says_nothing_was_validated():
    verdict = blessing.verdict(_evaluation(validated=False), False, False)
    assert verdict["pushed"].startswith("not pushed: no threshold was set")
    assert "--min-accuracy or --max-rmse" in verdict["pushed"]


def test_no_evaluation_and_a_pusher_that_did_not_push():
    assert blessing.verdict(None, False, False)["pushed"] == (
        "not pushed: the Evaluator did not run"
    )
    assert blessing.verdict(_evaluation(), True, False, "", RMSE)["pushed"] == (
        "not pushed: the Pusher did not push the blessed model"
    )
