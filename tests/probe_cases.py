"""Shared by the Keras 2 and Keras 3 noise-scale probe tests (tests/test_noise_scale_probe.py,
tests/test_keras3_probe.py): what the probe refuses, and its answer from a curve computed here
with NumPy (not by ga_tfx.sizing.batch_choice), so that both probes are checked against it."""

import numpy as np

REJECTED = [
    ({}, 1, r"probe_accum_steps=1 on 1 replica: .* at least 2 micro-batch gradients"),
    ({"agc_clip_factor": [0.01, 0.1]}, 8, r"recommends accum_steps only; .*agc_clip_factor"),
    ({"learning_rate": [0.01, 0.1]}, 8, r"recommends accum_steps only; .*learning_rate"),
    ({"micro_batch_size": [4, 8]}, 8, r"micro_batch_size \(several values\)"),
    ({}, 0, r"probe_accum_steps must be an integer >= 1 .*got 0"),
]


def numpy_b_path(curve):
    """``B_path`` from the curve's rows, written out here: per window ``w_t = ΣG² / Σ(G² + S/B)``
    over windows t-1..t+1, clipped to [0, 1]; ``Σ B_t (1 - w_t) / Σ w_t``."""
    rows = [
        r
        for r in curve
        if r["noise_trace_window"] is not None and r["noise_grad_sq_window"] is not None
    ]
    b = np.array([r["window_samples"] for r in rows], np.float64)
    s = np.array([r["noise_trace_window"] for r in rows], np.float64)
    g = np.array([r["noise_grad_sq_window"] for r in rows], np.float64)
    grad = np.concatenate([[0.0], np.cumsum(g)])
    total = np.concatenate([[0.0], np.cumsum(g + s / b)])
    t = np.arange(len(rows))
    lo, hi = np.maximum(t - 1, 0), np.minimum(t + 2, len(rows))
    w = np.clip((grad[hi] - grad[lo]) / (total[hi] - total[lo]), 0.0, 1.0)
    return float(np.sum(b * (1 - w)) / np.sum(w))


def numpy_nearest(ideal, choices):
    """The value of ``choices`` nearest to ``ideal`` on a log2 scale (a tie: the smaller)."""
    choices = np.sort(np.asarray(choices))
    return int(choices[np.argmin(np.abs(np.log2(choices) - np.log2(ideal)))])
