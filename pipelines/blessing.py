"""Why a model was blessed (or not), in one line, from the Evaluator's own output.

:func:`read` loads the evaluation (the trained model's metrics, and the trivial baseline's when
the Evaluator scored one) and TFMA's validation result; :func:`verdict` turns them into the
summary's ``blessed:`` line and, when nothing is pushed, the reason: the metric, its value, the
threshold or the baseline's value it missed.
"""

import dataclasses
from typing import Any, Dict, List, Optional

CANDIDATE, BASELINE = "candidate", "baseline"  # the pipeline's TFMA model names
# Where each threshold comes from (for the reason line).
THRESHOLD_FLAGS = {
    "sparse_categorical_accuracy": "--min-accuracy",
    "root_mean_squared_error": "--max-rmse",
}


@dataclasses.dataclass(frozen=True)
class Failure:
    """One threshold the model missed (from TFMA's ``ValidationResult``)."""

    metric: str
    value: float
    is_diff: bool  # a change threshold: the model against the baseline
    bound: Optional[float] = None  # the value threshold (lower or upper)
    lower: bool = True  # a lower bound (the value must be at least ``bound``)


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """The Evaluator's output, read back."""

    metrics: Dict[str, float]
    baseline_metrics: Dict[str, float]
    validated: bool  # a threshold was configured, so TFMA validated the model
    failures: List[Failure]


def _overall(result) -> Dict[str, float]:
    """Overall-slice metrics of one model: ``{name: value}`` (diffs left out)."""
    found = {}
    for _, per_output in result.slicing_metrics:
        for per_class in per_output.values():
            for values in per_class.values():
                for name, value in values.items():
                    if "doubleValue" in value and not name.endswith("_diff"):
                        found[name] = value["doubleValue"]
    return found


def read(uri: str, validated: bool) -> Evaluation:
    """The evaluation written by the Evaluator at ``uri`` (a ModelEvaluation artifact);
    ``validated``: the Evaluator validated the model (its blessing says blessed or not)."""
    import tensorflow_model_analysis as tfma

    try:
        candidate = tfma.load_eval_result(uri, model_name=CANDIDATE)
        baseline: Optional[Any] = tfma.load_eval_result(uri, model_name=BASELINE)
    except (KeyError, ValueError, IndexError):
        candidate, baseline = tfma.load_eval_result(uri), None
    metrics = _overall(candidate)
    if not metrics:  # one model, no name
        candidate, baseline = tfma.load_eval_result(uri), None
        metrics = _overall(candidate)
    baseline_metrics = _overall(baseline) if baseline is not None else {}
    failures = []
    if validated:
        validation = tfma.load_validation_result(uri)
        for per_slice in validation.metric_validations_per_slice:
            for failure in per_slice.failures:
                threshold = failure.metric_threshold
                value_threshold = threshold.value_threshold
                lower = value_threshold.HasField("lower_bound")
                bound = (
                    value_threshold.lower_bound.value
                    if lower
                    else value_threshold.upper_bound.value
                    if value_threshold.HasField("upper_bound")
                    else None
                )
                failures.append(
                    Failure(
                        metric=failure.metric_key.name,
                        value=failure.metric_value.double_value.value,
                        is_diff=failure.metric_key.is_diff,
                        bound=None if failure.metric_key.is_diff else bound,
                        lower=lower,
                    )
                )
    return Evaluation(metrics, baseline_metrics, validated, failures)


def reason(failure: Failure, evaluation: Evaluation, baseline_name: str = "") -> str:
    """One failure in words."""
    name = failure.metric
    if failure.is_diff:
        model = evaluation.metrics.get(name)
        base = evaluation.baseline_metrics.get(name)
        shown = f" ({baseline_name})" if baseline_name else ""
        if model is None or base is None:
            return f"{name} does not beat the baseline{shown}"
        return f"{name} {model:.4g} does not beat the baseline's {base:.4g}{shown}"
    flag = THRESHOLD_FLAGS.get(name, "the threshold")
    if failure.lower:
        return f"{name} {failure.value:.4g} is below {flag} {failure.bound:.4g}"
    return f"{name} {failure.value:.4g} is above {flag} {failure.bound:.4g}"


def verdict(
    evaluation: Optional[Evaluation],
    blessed: bool,
    pushed: bool,
    baseline_name: str = "",
    key_metric: str = "",
) -> Dict[str, str]:
    """``{"blessed": ..., "pushed": ...}`` texts for the summary (``pushed`` is the reason
    when nothing was pushed, else empty)."""
    if evaluation is None:
        return {"blessed": "no (no evaluation)", "pushed": "not pushed: the Evaluator did not run"}
    if blessed:
        text = "yes"
        model = evaluation.metrics.get(key_metric)
        base = evaluation.baseline_metrics.get(key_metric)
        if model is not None and base is not None:
            text += f": {key_metric} {model:.4g} beats the baseline's {base:.4g}"
            if baseline_name:
                text += f" ({baseline_name})"
        return {
            "blessed": text,
            "pushed": "" if pushed else "not pushed: the Pusher did not push the blessed model",
        }
    if not evaluation.validated:
        why = (
            "no threshold was set, so the Evaluator validated (and blessed) nothing: give "
            "--min-accuracy or --max-rmse"
        )
    elif evaluation.failures:
        why = "; ".join(reason(f, evaluation, baseline_name) for f in evaluation.failures)
    else:
        why = "the Evaluator's validation failed (see the log)"
    return {"blessed": "no", "pushed": f"not pushed: {why}"}
