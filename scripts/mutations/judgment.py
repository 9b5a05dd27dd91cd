"""Seeded bugs in the judgment features (ga_tfx/): the memory probe, the batch choice, tuning, the
hypermodel and search space.
"""

from .mutation import Mutation

MUTATIONS = [
    Mutation(
        "tuning.out_of_memory_not_caught",
        "ga_tfx/tuning/hypermodel.py",
        "except (tf.errors.ResourceExhaustedError, RuntimeError) as error:",
        "except (tf.errors.CancelledError, ValueError) as error:",
        ("tests/test_tuning.py", "-k", "out_of_memory"),
        slow=True,  # its killer is in the slow tier (tests/tiers.py)
    ),
    Mutation(
        "tuning.steps_per_epoch_off_by_one",
        "ga_tfx/tuning/hypermodel.py",
        'kwargs["steps_per_epoch"] = samples_per_epoch // micro',
        'kwargs["steps_per_epoch"] = samples_per_epoch // micro + 1',
        ("tests/test_tuner_component.py", "-k", "searches_accum_steps"),
        slow=True,
    ),
    Mutation(
        "tuner.budget_from_smallest_micro_batch",
        "ga_tfx/tuning/search_space.py",
        "return max(self.accum_steps) * max(self.micro_batch_size)",
        "return max(self.accum_steps) * min(self.micro_batch_size)",
        ("tests/test_tuner_component.py", "-k", "budget"),
    ),
    Mutation(
        "tune.recommend_from_the_last_b_simple",
        "ga_tfx/tuning/probe_base.py",
        '                value, space.micro_batch_size[0], space.accum_steps, measure="B_path"\n',
        '                curve[-1]["noise_scale"], space.micro_batch_size[0], space.accum_steps,\n'
        '                measure="B_path",\n',
        ("tests/test_tune_strategy.py", "-k", "stock_tuner_probes_once"),
    ),
    # plan's column rules and the tabular features
    Mutation(
        "choice.rounds_linearly",
        "ga_tfx/sizing/batch_choice.py",
        "chosen = min(allowed, key=lambda k: (abs(math.log2(k) - target), k))",
        "chosen = min(allowed, key=lambda k: (abs(k - ideal), k))",
        ("tests/test_noise_scale_probe.py", "tests/test_tune_strategy.py"),
    ),
    Mutation(
        "choice.tie_to_the_larger",
        "ga_tfx/sizing/batch_choice.py",
        "chosen = min(allowed, key=lambda k: (abs(math.log2(k) - target), k))",
        "chosen = min(allowed, key=lambda k: (abs(math.log2(k) - target), -k))",
        ("tests/test_noise_scale_probe.py", "tests/test_tune_strategy.py"),
    ),
    Mutation(
        "memory.mib_in_decimal",
        "ga_tfx/sizing/memory.py",
        '"mib": 2**20,',
        '"mib": 10**6,',
        ("tests/test_memory.py",),
    ),
    Mutation(
        "memory.model_not_restored",
        "ga_tfx/sizing/memory.py",
        "            variable.assign(value)\n",
        "            pass\n",
        ("tests/test_memory.py",),
    ),
    Mutation(
        "memory.persistent_not_counted",
        "ga_tfx/sizing/memory.py",
        "            peaks[size] += persistent\n",
        "            peaks[size] += 0\n",
        ("tests/test_memory.py", "-k", "whole_run"),
    ),
    Mutation(
        "memory.smallest_first",
        "ga_tfx/sizing/memory.py",
        "for size in sorted(set(sizes), reverse=True):",
        "for size in sorted(set(sizes)):",
        ("tests/test_memory.py",),
        slow=True,
    ),
    Mutation(
        "memory.no_margin",  # the pick ignores the probe's margin (PROBE_MARGIN)
        "ga_tfx/sizing/memory.py",
        "    return int(reading * (1 + margin)) + input_bytes\n",
        "    return int(reading) + input_bytes\n",
        ("tests/test_memory.py", "-k", "margin"),
    ),
    Mutation(
        "memory.no_input_micro_batch",  # the pick leaves out one more input micro-batch
        "ga_tfx/sizing/memory.py",
        "    return int(reading * (1 + margin)) + input_bytes\n",
        "    return int(reading * (1 + margin))\n",
        ("tests/test_memory.py", "-k", "margin"),
    ),
    Mutation(
        "noise.path_weight_not_clipped",
        "ga_tfx/sizing/batch_choice.py",
        "        w = min(max(grad_sq / total, 0.0), 1.0) if total > 0 else 0.0\n",
        "        w = grad_sq / total if total > 0 else 0.0\n",
        ("tests/test_noise_scale_probe.py", "-k", "b_path"),
    ),
    Mutation(
        "noise.path_weights_of_one_window",
        "ga_tfx/sizing/batch_choice.py",
        "        block = kept[max(0, t - half_span) : t + half_span + 1]\n",
        "        block = kept[t : t + 1]\n",
        ("tests/test_noise_scale_probe.py", "-k", "b_path"),
    ),
    Mutation(
        "oom.tuner_trial_not_retried",
        "ga_tfx/tuning/hypermodel.py",
        "    if (recovered.epoch, recovered.position) != (0, 0):\n",
        "    if True:\n",
        ("tests/test_tuning.py", "-k", "retried_at_half"),
        slow=True,  # its killer is in the slow tier (tests/tiers.py)
    ),
    Mutation(
        "memory.margin_below_the_under_read",  # below the probe's worst measured under-read
        "ga_tfx/sizing/memory.py",
        "PROBE_MARGIN = 0.35 ",
        "PROBE_MARGIN = 0.2 ",
        ("tests/test_memory.py", "-k", "margin_covers"),
    ),
]
