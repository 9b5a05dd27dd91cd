"""Shared by the Keras 2 and Keras 3 noise-scale probe tests (tests/test_noise_scale_probe.py,
tests/test_keras3_probe.py): what the probe refuses, as ``(search space, probe_accum_steps,
the error's pattern)``. Standard library only."""

REJECTED = [
    ({}, 1, r"probe_accum_steps=1 on 1 replica: .* at least 2 micro-batch gradients"),
    ({"agc_clip_factor": [0.01, 0.1]}, 8, r"recommends accum_steps only; .*agc_clip_factor"),
    ({"learning_rate": [0.01, 0.1]}, 8, r"recommends accum_steps only; .*learning_rate"),
    ({"micro_batch_size": [4, 8]}, 8, r"micro_batch_size \(several values\)"),
    ({}, 0, r"probe_accum_steps must be an integer >= 1 .*got 0"),
]
