"""Seeded bugs in the window core (ga_tfx/window/): chain, guard, events, noise scale, schedules,
the clock.
"""

from .mutation import ACCUMULATOR, CORE, NOISE, SCHEDULE, SPLIT, STEPS, Mutation

MUTATIONS = [
    Mutation(
        "engine.skipped_window_counted",
        "ga_tfx/window/keras2_optimizers.py",
        "1 - tf.cast(finite(), tf.int64)",
        "0 * tf.cast(finite(), tf.int64)",
        ("tests/test_mixed_precision.py", "-k", "non_finite_window"),
    ),
    Mutation(
        "engine.micro_batches_weighted_equally",
        SPLIT,
        "return tf.cast(tf.shape(first)[0], tf.float32)",
        "return tf.constant(1.0)",
        ("tests/test_windows.py", "-k", "uneven"),
    ),
    Mutation(
        "engine.buffers_not_reset",
        CORE,
        "tf.group([self.accumulator.reset()] + [v.assign(0.0) for v in self.noise_sums])",
        "tf.group([v.assign(0.0) for v in self.noise_sums])",
        (
            "tests/test_equivalence.py",
            "tests/test_windows.py",
            "-k",
            "every_optimizer and sgd_momentum or train_on_batch",
        ),
    ),
    Mutation(
        "clock.window_one_too_long",  # the wrapper's windows (fit's and the loop's are sized)
        "ga_tfx/window/clock.py",
        "    return pending >= core.state.current_accum_steps.read_value()",
        "    return pending > core.state.current_accum_steps.read_value()",
        ("tests/test_optimizer_api.py", "-k", "custom_loop_matches_big_batch"),
    ),
    Mutation(
        "oom.window_samples_counted_twice",
        "ga_tfx/window/core.py",
        "        strategy.run(self.accumulator.uncount_window)\n",
        "",
        ("tests/test_oom_recovery.py", "-k", "mid_training_with_the_same_result"),
    ),
    Mutation(
        "clock.drop_applies",
        "ga_tfx/window/clock.py",
        "        return tf.cond(pending, lambda: _drop(core, strategy), none)",
        "        return tf.cond(pending, finish, none)",
        (
            "tests/test_optimizer_api.py",
            "tests/test_training_loop.py",
            "-k",
            "end_of_data or partial_window_policies",
        ),
    ),
    Mutation(
        "clock.carry_drops",
        "ga_tfx/window/clock.py",
        "    return tf.constant(False)  # carry",
        "    return tf.cond(pending, lambda: _drop(core, strategy), none)  # carry",
        (
            "tests/test_optimizer_api.py",
            "tests/test_training_loop.py",
            "-k",
            "end_of_data or partial_window_policies",
        ),
    ),
    Mutation(
        "window.chain_result_dropped",
        STEPS,
        "    pairs, vote = core.chain(pairs)\n",
        "    _, vote = core.chain(pairs)\n",
        ("tests/test_front_ends.py", "-k", "clip_global_norm or user_transform"),
    ),
    Mutation(
        "window.guard_vote_ignored",
        CORE,
        "        elif self.chain.may_skip:\n",
        "        elif False:\n",
        ("tests/test_front_ends.py", "-k", "nonfinite_guard"),
    ),
    Mutation(
        "window.events_lost",
        CORE,
        "        start = max(self._events_seen, written - RECORD_CAPACITY)\n",
        "        start = written\n",
        ("tests/test_schedules.py", "-k", "callable"),
    ),
    Mutation(
        "window.consecutive_skips_off_by_one",
        CORE,
        "        if consecutive >= limit:\n",
        "        if consecutive > limit:\n",
        ("tests/test_training_loop.py", "-k", "max_consecutive_skips"),
    ),
    Mutation(
        "noise.big_batch_term_dropped",
        NOISE,
        '"noise_trace": tf.where(enough, samples * (small_sq - big_sq) / safe, nan),',
        '"noise_trace": tf.where(enough, samples * small_sq / safe, nan),',
        ("tests/test_noise_scale.py", "-k", "closed_form and fit-1"),
    ),
    Mutation(
        "noise.micro_batch_weights_ignored",
        NOISE,
        "sq_sum.assign_add(b * sq)",
        "sq_sum.assign_add(sq * 8.0)",  # every micro-batch weighs the test's mean size
        ("tests/test_noise_scale.py", "-k", "closed_form and fit-1"),
    ),
    Mutation(
        "noise.replica_scale_dropped",
        NOISE,
        "sq = tf.add_n(squares) * replicas * replicas",
        "sq = tf.add_n(squares)",
        ("tests/test_noise_scale.py", "-k", "closed_form and fit-2"),
        slow=True,  # its killer is in the slow tier (tests/tiers.py)
    ),
    Mutation(  # Keras' Nadam counts its traces: built before the first one it would differ
        "engine.nadam_built_before_its_first_trace",
        "ga_tfx/window/keras2_optimizers.py",
        "        inner, keras.optimizers.Nadam\n",
        "        inner, type(None)\n",
        ("tests/test_equivalence.py", "-k", "every_optimizer and nadam"),
        slow=True,  # its killer is in the slow tier
    ),
    Mutation(
        "noise.replica_scale_once_on_workers",
        NOISE,
        "sq = tf.add_n(squares) * replicas * replicas",
        "sq = tf.add_n(squares) * replicas",
        ("tests/test_training_loop_multi_worker.py",),
        slow=True,
    ),
    Mutation(
        "noise.path_window_estimates_not_recorded",
        STEPS,
        "        trace,\n        grad_sq,\n",
        '        float("nan"),\n        float("nan"),\n',  # steps.py does not import math
        ("tests/test_noise_scale_probe.py", "-k", "known_noise_scale"),
    ),
    Mutation(
        "schedule.piecewise_not_followed",
        SCHEDULE,
        "        chosen = tf.gather(values, index)\n",
        "        chosen = current\n",
        ("tests/test_schedules.py", "-k", "piecewise and fit"),
    ),
    Mutation(
        "schedule.learning_rate_not_scaled",
        SCHEDULE,
        'factor = ratio if config.lr_scaling == "linear" else tf.sqrt(ratio)',
        "factor = 1.0",
        ("tests/test_schedules.py", "-k", "piecewise and fit and linear"),
    ),
    Mutation(
        "schedule.adaptive_without_patience",
        SCHEDULE,
        "        switch = streak >= ADAPTIVE_PATIENCE\n",
        "        switch = differs\n",
        ("tests/test_schedules.py", "-k", "adaptive"),
    ),
    Mutation(
        "oom.window_position_not_restored",
        CORE,
        "self.state.micro_batches_done.assign_sub(pending)  # to be read again, not consumed\n",
        "pass\n",
        ("tests/test_oom_recovery.py", "-k", "fit_survives"),
        slow=True,  # its killer is in the slow tier (tests/tiers.py)
    ),
    Mutation(
        "oom.micro_batch_not_split",
        SPLIT,
        "        return step(tf.nest.map_structure(lambda t: _rows(t, start, stop), part))\n",
        "        return step(part)\n",
        ("tests/test_oom_recovery.py", "-k", "fit_survives"),
        slow=True,  # its killer is in the slow tier (tests/tiers.py)
    ),
    # issue 58 item 4: a slice with a remainder (every other OOM test splits 8 rows in two)
    Mutation(
        "oom.slice_size_rounded_down",  # the last rows of a micro-batch never trained
        SPLIT,
        "        size = (samples + split - 1) // split\n",
        "        size = samples // split\n",
        # the slicing counted by hand; the weights after fit: "last_slice_is_smaller" (slow)
        ("tests/test_oom_recovery.py", "-k", "ceil_sized"),
    ),
    # issue 53: the logged learning rate is that of the update just applied, every optimizer kind
    Mutation(
        "lr.legacy_schedule_logged_one_update_ahead",
        SCHEDULE,
        "step = tf.maximum(tf.cast(optimizer.iterations, tf.float64) - 1.0, 0.0)",
        "step = tf.cast(optimizer.iterations, tf.float64)",
        ("tests/test_optimizer_api.py", "-k", "logged_learning_rate and legacy_schedule"),
    ),
    Mutation(
        "lr.legacy_decay_not_logged",
        SCHEDULE,
        "return value / (1.0 + decay * step) if decay > 0 else value",
        "return value",
        ("tests/test_optimizer_api.py", "-k", "logged_learning_rate and legacy_decay"),
    ),
    # issue 56: a micro-batch weighs by its loss's divisor, in the rule and in the core
    Mutation(
        "divisor.weighted_by_rows",
        "ga_tfx/divisor_rule.py",
        "        return terms[0].divisor",
        "        return rows",
        ("tests/test_loss_divisor.py", "-k", "masked_sequences or training_loop_with"),
    ),
    Mutation(
        "divisor.unequal_terms_by_rows",
        "ga_tfx/divisor_rule.py",
        "    if all(term.by_rows for term in terms):",
        "    if True:",
        ("tests/test_loss_divisor.py", "-k", "own_masks_in_a_models_own_train_step"),
    ),
    Mutation(
        "divisor.parts_weighed_as_one",
        "ga_tfx/divisor_rule.py",
        "    return first + [(term.value, term.divisor) for term in alone]",
        "    return [(total, varying[0].divisor)]",
        ("tests/test_loss_divisor.py", "-k", "own_divisors and two_masks and not l2"),
    ),
    Mutation(
        "divisor.rest_weighed_by_a_terms_divisor",
        "ga_tfx/divisor_rule.py",
        "    first = [(rest, rows)] if by_rows else [(rest, varying[0].divisor)]",
        "    first = [(rest, varying[0].divisor)]",
        ("tests/test_loss_divisor.py", "-k", "own_divisors and masked_and_rows"),
    ),
    Mutation(
        "divisor.parts_not_cleared",
        ACCUMULATOR,
        "        ops += [part.reset() for part in self.parts]",
        "        ops += []",
        ("tests/test_loss_divisor.py", "-k", "own_divisors and two_masks and not l2"),
    ),
    Mutation(
        "divisor.parts_not_checkpointed",
        ACCUMULATOR,
        "        self.parts: List[_PartSums] = []",
        '        object.__setattr__(self, "parts", [])',
        ("tests/test_loss_divisor.py", "-k", "resume and each_terms"),
    ),
    Mutation(
        "divisor.wrapper_parts_weighed_by_the_first_divisor",
        "ga_tfx/optimizer.py",
        "terms = [(aligned(part, variables, unknown), count, None) for part, count in parts]",
        "terms = [(aligned(part, variables, unknown), weight, None) for part, count in parts]",
        ("tests/test_loss_divisor.py", "-k", "each_terms_divisor_as_parts and one_device"),
    ),
    Mutation(
        "divisor.term_share_not_over_replicas",
        "ga_tfx/loss_divisors.py",
        "value=share / replicas",
        "value=share",
        ("tests/test_loss_divisor.py", "-k", "own_masks_on_two_replicas"),
    ),
    Mutation(
        "divisor.term_share_without_loss_weight",
        "ga_tfx/loss_divisors.py",
        "share = value if self._loss_weight is None else value * self._loss_weight",
        "share = value",
        ("tests/test_loss_divisor.py", "-k", "own_divisors and two_masks and not l2"),
    ),
    Mutation(
        "noise.rows_as_batch_size",
        CORE,
        "            local = weight if local_weight is None else local_weight",
        "            local = rows",
        ("tests/test_noise_scale.py", "-k", "masked"),
    ),
    Mutation(
        "oom.tokens_uncounted_as_rows",
        ACCUMULATOR,
        "tf.round(tf.cast(self.window_rows, tf.float64))",
        "tf.round(tf.cast(self.sample_count, tf.float64))",
        ("tests/test_oom_recovery.py", "-k", "masked"),
        slow=True,
    ),
]
