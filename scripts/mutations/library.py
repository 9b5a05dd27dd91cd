"""Seeded bugs in the rest of the library (ga_tfx/): the optimizer wrapper, the accumulator,
AccumBatchNormalization, AGC, the config, preemption, the tf-keras shim.
"""

from .mutation import ACCUMULATOR, PREEMPTION, Mutation

MUTATIONS = [
    Mutation(
        "engine.accum_steps_1_agc_ignored",
        "ga_tfx/config.py",
        "for value in (self.clip_global_norm, self.agc_clip_factor, self.gradient_noise)",
        "for value in (self.clip_global_norm, self.gradient_noise)",
        ("tests/test_agc.py", "-k", "accum_steps_one"),
    ),
    Mutation(
        "engine.parameter_server_accepted",
        "ga_tfx/_tf_keras_internals/__init__.py",
        'return bool(getattr(model, "_cluster_coordinator", None))',
        "return False",
        ("tests/test_validation.py", "-k", "parameter_server"),
    ),
    Mutation(
        "accumulator.replica_factor_dropped",
        ACCUMULATOR,
        "tf.cast(replicas, grad_sum.dtype), tf.cast(count, grad_sum.dtype)",
        "tf.cast(1.0, grad_sum.dtype), tf.cast(count, grad_sum.dtype)",
        (
            "tests/test_distribution.py",
            "tests/test_trainer_component.py",
            "-k",
            "match_single_device or big_batch_weights and sgd",
        ),
    ),
    Mutation(
        "accumulator.count_micro_batches_not_samples",
        ACCUMULATOR,
        "self.sample_count.assign_add(tf.cast(weight, tf.float32)),",
        "self.sample_count.assign_add(tf.constant(1.0)),",
        ("tests/test_equivalence.py", "-k", "every_optimizer and sgd_momentum"),
    ),
    Mutation(
        "optimizer.sample_count_ignored",
        "ga_tfx/optimizer.py",
        "weight = 1.0 if sample_count is None else sample_count",
        "weight = 1.0",
        ("tests/test_optimizer_api.py",),
    ),
    Mutation(
        "optimizer.loss_scale_not_unscaled",
        "ga_tfx/optimizer.py",
        "unscaled = self.optimizer.get_unscaled_gradients([g for g, _ in grads_and_vars])",
        "unscaled = [g for g, _ in grads_and_vars]",
        ("tests/test_optimizer_api.py", "-k", "loss_scale"),
    ),
    # issue 45: a schedule is one value (ga_tfx/schedules.py)
    Mutation(
        "schedules.piecewise_first_k_is_the_last",  # K0 of "0:2,500:4" read as 4
        "ga_tfx/schedules.py",
        "        return self.pieces[0][1]\n",
        "        return self.pieces[-1][1]\n",
        ("tests/test_schedule_values.py", "-k", "every_form"),
    ),
    Mutation(
        "schedules.micro_batches_ignore_the_next_piece",  # the Trainer's data position
        "ga_tfx/schedules.py",
        "            end = self.pieces[i + 1][0] if i + 1 < len(self.pieces) else stop\n",
        "            end = stop\n",
        ("tests/test_schedule_values.py", "-k", "micro_batches"),
    ),
    Mutation(  # the Trainer's settings and the CLI's options took any accum_steps beside it
        "schedules.first_k_rule_off",
        "ga_tfx/schedules.py",
        "    if accum_steps is not None and schedule.first_accum_steps != start:\n",
        "    if False:\n",
        ("tests/test_schedule_values.py", "-k", "refuses_an_accum_steps"),
    ),
    Mutation(  # issue 53: accepted, the run stopped in the Trainer minutes in
        "schedules.memory_budget_beside_a_schedule_accepted",
        "ga_tfx/schedules.py",
        "        if budget and isinstance(schedule, PiecewiseSchedule):\n",
        "        if False:\n",
        ("tests/test_settings_schema.py", "-k", "memory_budget_beside_a_piecewise"),
    ),
    Mutation(  # the data check's largest batch read at the first K
        "schedules.most_k_of_a_piecewise_is_its_first",
        "ga_tfx/schedules.py",
        "        return max(k for _, k in self.pieces)\n",
        "        return self.pieces[0][1]\n",
        ("tests/test_bad_data.py", "-k", "schedules_largest_k"),
    ),
    Mutation(
        "bn.between_micro_batch_variance_dropped",
        "ga_tfx/batchnorm/moments.py",
        "between = tf.square(delta) * count_a * tf.math.divide_no_nan(count_b, count)",
        "between = 0.0 * delta",
        ("tests/test_batchnorm.py", "-k", "window_statistics"),
    ),
    Mutation(
        "bn.biased_variance",
        "ga_tfx/batchnorm/layer.py",
        "divisor = tf.maximum(count - 1.0, 1.0) if self.fused else count",
        "divisor = count",
        ("tests/test_batchnorm.py", "-k", "window_statistics or keras_batchnorm"),
    ),
    Mutation(
        "agc.comparison_flipped",
        "ga_tfx/transforms/agc.py",
        "tf.where(grad_norm > max_norm, clipped, g)",
        "tf.where(grad_norm < max_norm, clipped, g)",
        ("tests/test_agc.py",),
    ),
    Mutation(
        "agc.eps_floor_dropped",
        "ga_tfx/transforms/agc.py",
        "param_norm = tf.maximum(unitwise_norm(p, axes), tf.cast(eps, compute_dtype))",
        "param_norm = unitwise_norm(p, axes)",
        ("tests/test_agc.py", "-k", "zero_parameters"),
    ),
    Mutation(
        "agc.rank_6_accepted",
        "ga_tfx/transforms/agc.py",
        "if rank > MAX_SUPPORTED_RANK:",
        "if rank > 6:",
        ("tests/test_agc.py", "-k", "rank"),
    ),
    Mutation(
        "agc.kernel_norm_over_all_axes",
        "ga_tfx/transforms/agc.py",
        "return tuple(range(rank - 1))",
        "return tuple(range(rank))",
        ("tests/test_agc.py",),
    ),
    Mutation(
        "preemption.signal_ends_the_process",
        PREEMPTION,
        "        signal.signal(signum, handle)\n",
        "        pass\n",
        ("tests/test_preemption.py", "-k", "sigterm"),
    ),
    Mutation(
        "preemption.signal_not_recorded",
        PREEMPTION,
        "            stop.request(signum)\n            return\n",
        "            return\n",
        ("tests/test_preemption.py", "-k", "sigterm or second_signal"),
    ),
    Mutation(
        "preemption.second_signal_held_back",
        PREEMPTION,
        "        if not stop.requested:\n",
        "        if True:\n",
        ("tests/test_preemption.py", "-k", "second_signal"),
    ),
    Mutation(
        "preemption.handlers_not_restored",
        PREEMPTION,
        "        for signum, old in previous.items():\n"
        "            signal.signal(signum, old if old is not None else signal.SIG_DFL)\n",
        "        for signum, old in previous.items():\n            pass\n",
        ("tests/test_preemption.py", "-k", "sigterm or second_signal"),
    ),
    Mutation(
        "compat.package_arguments_accepted",
        "ga_tfx/config.py",
        "    foreign = [name for name in given if name in MIGRATION_HINTS]\n",
        "    foreign = []\n",
        ("tests/test_compat_gradient_accumulator.py", "-k", "reject_package_arguments"),
    ),
    Mutation(  # fit's window end is traced without autograph: the user's code in it too
        "engine.user_transform_not_converted",
        "ga_tfx/_tf_internals.py",
        "        return function\n    return autograph_converted(function)\n",
        "        return function\n    return function\n",
        ("tests/test_transforms.py", "-k", "python_control_flow"),
    ),
    Mutation(
        "models.wrap_drops_a_functional_models_compute_loss",
        "ga_tfx/models.py",
        "    if _is_functional(model) and not overridden_step_hooks(model):\n",
        '    if _is_functional(model) and "train_step" not in overridden_step_hooks(model):\n',
        ("tests/test_keras_contract.py", "-k", "compute_loss_and_metrics"),
    ),
    Mutation(
        "settings.route_drops_a_setting",
        "ga_tfx/_schema.py",
        "        if field.metadata.get(SOURCE_KEY, (None,))[0] is cls\n",
        "        if field.metadata.get(SOURCE_KEY, (None,))[0] is cls"
        ' and field.name != "strategy"\n',
        ("tests/test_tune_strategy.py", "-k", "every_option"),
    ),
    Mutation(
        "optimizer.window_layers_ignored",
        "ga_tfx/optimizer.py",
        "variables, self._accumulation, self._transforms, window_layers=given + found",
        "variables, self._accumulation, self._transforms, window_layers=found",
        ("tests/test_batchnorm.py", "-k", "optimizer_wrapper"),
    ),
    # issue 45: the wrapper finds the AccumBN layers it trains, or refuses naming window_layers
    Mutation(
        "optimizer.found_window_layers_ignored",
        "ga_tfx/optimizer.py",
        "window_layers=given + found",
        "window_layers=given",
        ("tests/test_batchnorm.py", "-k", "optimizer_wrapper"),
    ),
    Mutation(
        "batchnorm.eager_first_call_not_refused",
        "ga_tfx/batchnorm/registry.py",
        "if layer._last_eager_call > since and (not layer._accumulates() or replicas > 1):",
        "if layer._last_eager_call > since and not layer._accumulates():",
        ("tests/test_batchnorm.py", "-k", "refused"),
    ),
    # issue 53: a layer with one trainable weight (scale=False or center=False) is found as
    # one with both; one with none refuses, naming window_layers
    Mutation(
        "batchnorm.one_trainable_weight_not_found",
        "ga_tfx/batchnorm/registry.py",
        "        if places:\n",
        "        if len(places) > 1:\n",
        ("tests/test_batchnorm.py", "-k", "one_trainable_weight"),
    ),
    Mutation(
        "batchnorm.no_trainable_weights_not_refused",
        "ga_tfx/batchnorm/registry.py",
        "    _refuse_layers_without_weights(since)\n",
        "",
        ("tests/test_batchnorm.py", "-k", "without_trainable_weights"),
    ),
    Mutation(
        "batchnorm.traced_call_not_recorded",  # only eager calls count: a tf.function step passes
        "ga_tfx/batchnorm/layer.py",
        "            self._last_training_call = registry.next_eager_call()\n",
        "            pass\n",
        ("tests/test_batchnorm.py", "-k", "without_trainable_weights"),
    ),
    Mutation(
        "batchnorm.stale_standalone_graph_runs",  # the compat layer's own clock, then driven
        "ga_tfx/compat/gradient_accumulator/layers.py",
        "steps = self._add_to_window(batch, checks=[self._refuse_if_driven()])",
        "steps = self._add_to_window(batch, checks=[])",
        ("tests/test_batchnorm.py", "-k", "traced_before"),
    ),
    Mutation(
        "optimizer.all_reduce_per_buffer",
        ACCUMULATOR,
        "            values = list(ctx.all_reduce(tf.distribute.ReduceOp.SUM, values))\n",
        "            values = [ctx.all_reduce(tf.distribute.ReduceOp.SUM, v) for v in values]\n",
        ("tests/test_optimizer_distributed.py", "-k", "one_all_reduce_per_update"),
    ),
    Mutation(
        "conversion.weights_not_copied",  # the copy starts from fresh weights and statistics
        "ga_tfx/batchnorm/conversion.py",
        "            _copy_weights(original, copy)\n",
        "            pass\n",
        ("tests/test_batchnorm.py", "-k", "replace_functional"),
    ),
    Mutation(
        "transforms.consecutive_never_reset",  # a finite window does not reset the count
        "ga_tfx/transforms/members.py",
        "self.consecutive_nonfinite.assign((self.consecutive_nonfinite + 1) * step)",
        "self.consecutive_nonfinite.assign_add(step)",
        ("tests/test_transforms.py", "-k", "guard_skip"),
    ),
    # issue 56: the divisor read from a Keras 2 loss
    Mutation(
        "divisor.mask_ignored",
        "ga_tfx/loss_divisors.py",
        "    if mask is None:\n        return size\n",
        "    if True:\n        return size\n",
        ("tests/test_loss_divisor.py", "-k", "what_keras_divides or masked_sequences"),
    ),
    Mutation(
        "divisor.fully_masked_micro_batch_nan",
        "ga_tfx/loss_divisors.py",
        "    return _EmptyMaskSafe()(y_pred), sample_weight",
        "    return y_pred, sample_weight",
        ("tests/test_loss_divisor.py", "-k", "fully_masked"),
    ),
]
