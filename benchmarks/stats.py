"""Spread of measured rates and paired ratios: median, interquartile range, min, max."""

import statistics


def spread(values):
    """``{"median", "q1", "q3", "min", "max", "n"}`` of ``values``.

    q1/q3: the quartiles of ``statistics.quantiles(n=4, method="inclusive")`` (always within
    min..max); equal to the median for a single value.
    """
    values = list(values)
    if not values:
        raise ValueError("spread() of no values")
    median = statistics.median(values)
    q1, _, q3 = (
        statistics.quantiles(values, n=4, method="inclusive") if len(values) >= 2 else (median,) * 3
    )
    return {
        "median": median,
        "q1": q1,
        "q3": q3,
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def paired_ratios(seconds_num, seconds_den):
    """Per-round speed ratios num/den from per-round epoch seconds (the same samples per epoch):
    ``den_seconds / num_seconds``; rounds where either side is missing are left out."""
    return [d / n for n, d in zip(seconds_num, seconds_den) if n and d]
