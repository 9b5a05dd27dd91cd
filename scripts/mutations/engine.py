"""Seeded bugs in fit's engine (ga_tfx/engine/): mixed precision, weighting, the traced loop,
pacing, the out-of-memory recovery.
"""

from .mutation import ENGINE, LOOP, MIXED_FLOAT16, PACING, RUNNER, STEP, Mutation

MUTATIONS = [
    Mutation(
        "engine.unscale_missing",
        STEP,
        "grads = optimizer.get_unscaled_gradients(grads)",
        "grads = grads",
        MIXED_FLOAT16,
        count=2,
    ),
    Mutation(
        "engine.unscale_twice",
        STEP,
        "grads = optimizer.get_unscaled_gradients(grads)",
        "grads = optimizer.get_unscaled_gradients(optimizer.get_unscaled_gradients(grads))",
        MIXED_FLOAT16,
        count=2,
    ),
    Mutation(
        "engine.ema_per_micro_batch",
        STEP,
        "            grads = tape.gradient(target, variables)\n",
        "            grads = tape.gradient(target, variables)\n"
        "            optimizer._update_model_variables_moving_average(variables)\n",
        ("tests/test_equivalence.py", "-k", "ema"),
    ),
    Mutation(
        "engine.drop_policy_ignored",
        LOOP,
        "        if self.runner.end_pending_window(self._ending):\n",
        '        if self.runner.end_pending_window("apply"):\n',
        ("tests/test_windows.py", "-k", "policies and drop"),
    ),
    Mutation(
        "engine.carry_not_realigned",
        LOOP,
        "                self._ga_model.window_core.current_accum_steps - pending"
        " if pending else None\n",
        "                None\n",
        ("tests/test_windows.py", "-k", "policies or whole_window"),
    ),
    Mutation(
        "engine.windows_inside_an_execution_not_applied",
        RUNNER,
        "                self.finish()\n            count = tf.minimum(window, steps - done)\n",
        "                pass\n            count = tf.minimum(window, steps - done)\n",
        ("tests/test_windows.py", "-k", "several_windows"),
    ),
    Mutation(
        "engine.train_on_batch_follows_the_policy",
        LOOP,
        '        previous, self._ending = self._ending, "apply"\n',
        "        previous, self._ending = self._ending, self._ending\n",
        ("tests/test_windows.py", "-k", "train_on_batch and drop"),
    ),
    Mutation(
        "engine.fill_one_micro_batch_too_many",
        RUNNER,
        "            lambda filled, _: filled < count,\n",
        "            lambda filled, _: filled <= count,\n",
        ("tests/test_windows.py", "-k", "several_windows"),
    ),
    Mutation(
        "engine.data_end_leaves_the_window_pending",
        LOOP,
        "            self._end_pending_window()\n            raise",
        "            raise",
        ("tests/test_windows.py", "-k", "ends_inside"),
    ),
    Mutation(
        "engine.grad_norm_logged_before_the_update",
        LOOP,
        "        return self._figures.logs(logs)",
        "        return self._figures.logs(dict(logs, grad_norm=self._figures.result()))",
        ("tests/test_grad_norm_metric.py",),
    ),
    Mutation(
        "engine.grad_norm_counts_skipped_windows",
        LOOP,
        "        if event.applied and math.isfinite(event.grad_norm):",
        "        if math.isfinite(event.grad_norm) or True:",
        ("tests/test_grad_norm_metric.py", "-k", "skipped"),
    ),
    Mutation(
        "oom.replay_gives_up",  # the one replay (fit, TrainingLoop, the Tuner, the Trainer)
        "ga_tfx/window/replay.py",
        "            core(error).recover_from_oom(strategy, error)\n            rewind(error)\n",
        "            raise\n",
        ("tests/test_oom_recovery.py", "-k", "mid_training_with_the_same_result"),
    ),
    Mutation(
        "pacing.ignores_callbacks_that_watch_batches",
        PACING,
        "        internals.watches_batches(callback)\n",
        "        False\n",
        ("tests/test_pacing.py",),
    ),
    Mutation(
        "pacing.auto_only_where_unwatched",
        PACING,
        "    return model._pacing == ALWAYS or not any(\n",
        "    return not any(\n",
        ("tests/test_pacing.py",),
    ),
    Mutation(
        "pacing.paces_several_workers",
        PACING,
        " or internals.in_multi_worker_mode(model.distribute_strategy):\n",
        ":\n",
        ("tests/test_pacing.py", "-k", "several_workers"),  # 2 worker processes: slow tier
        slow=True,
    ),
    Mutation(
        "pacing.followers_stop_pacing",
        PACING,
        " and not getattr(callback, FOLLOWS_PACING, False)\n",
        "\n",
        ("tests/test_preemption.py", "-k", "leave_fit_pacing"),
    ),
    Mutation(
        "pacing.windows_not_whole",
        LOOP,
        "self.set_steps_per_execution(windows * k)",
        "self.set_steps_per_execution(windows * k + 1)",
        ("tests/test_pacing.py",),
    ),
    Mutation(
        "pacing.left_on_after_fit",
        ENGINE,
        "                self.train_function.stop_pacing()\n",
        "                pass\n",
        ("tests/test_pacing.py",),
    ),
    Mutation(
        "schedule.restored_k_not_in_first_call",
        ENGINE,
        "        self.train_function.follow_schedule()\n",
        "        pass\n",
        ("tests/test_schedules.py", "-k", "restored_from_a_checkpoint"),
    ),
    Mutation(  # fit's micro-batch step too: the user's layers, train_step and compute_loss
        "engine.users_layers_not_converted",
        "ga_tfx/engine/step.py",
        "            y_pred = internals.autograph_converted(self.__call__)(x, training=True)\n",
        "            y_pred = self(x, training=True)\n",
        ("tests/test_keras_contract.py", "-k", "python_control_flow"),
    ),
    Mutation(
        "engine.users_train_step_not_converted",
        "ga_tfx/engine/step.py",
        "            logs = internals.user_code(owner, owner.train_step)(data)\n",
        "            logs = owner.train_step(data)\n",
        ("tests/test_keras_contract.py", "-k", "python_control_flow"),
    ),
    Mutation(
        "engine.users_compute_loss_not_converted",
        "ga_tfx/engine/step.py",
        "            loss = internals.user_code(self, self.compute_loss)"
        "(x, y, y_pred, sample_weight)\n",
        "            loss = self.compute_loss(x, y, y_pred, sample_weight)\n",
        ("tests/test_keras_contract.py", "-k", "python_control_flow"),
    ),
    Mutation(
        "engine.pieces_not_inlined_on_several_replicas",
        RUNNER,
        "        inline = inline or self.strategy.num_replicas_in_sync > 1\n",
        "",
        ("tests/test_oom_recovery.py", "-k", "two_replicas_survives"),
        slow=True,
    ),
    Mutation(
        "oom.second_replay_drops_later_fits",
        "ga_tfx/engine/recovery.py",
        "        plan[:] = continuation(model, attempt, position, error) + plan\n",
        "        plan[:] = continuation(model, attempt, position, error) + plan[1:]\n",
        ("tests/test_oom_recovery.py", "-k", "second_out_of_memory"),
        slow=True,
    ),
    Mutation(
        "divisor.train_step_sample_count_ignored",
        STEP,
        "        if sample_count is None:\n            weight = micro_batch_weight",
        "        if True:\n            weight = micro_batch_weight",
        ("tests/test_loss_divisor.py", "-k", "passes_its_divisor"),
    ),
    # issue 56: fit's step and a model's own train_step weigh by the compiled loss's divisor
    Mutation(
        "engine.own_train_step_weighted_by_rows",
        STEP,
        "        self.ops.append(self._core.add(grads, weight, rows=self._rows))",
        "        self.ops.append(self._core.add(grads, self._rows, rows=self._rows))",
        ("tests/test_loss_divisor.py", "-k", "own_train_step"),
    ),
]
