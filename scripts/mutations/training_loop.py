"""Seeded bugs in TrainingLoop (ga_tfx/training_loop/): its windows, checkpoints, resume."""

from .mutation import Mutation

MUTATIONS = [
    Mutation(
        "oom.training_loop_replays_a_carried_window",  # the epoch then read from below 0
        "ga_tfx/training_loop/run.py",
        "        spans_epochs = carry and self.runner.pending() > position\n",
        "        spans_epochs = False\n",
        ("tests/test_oom_recovery.py", "-k", "window_carried_across_epochs"),
    ),
    Mutation(
        "oom.training_loop_refuses_every_carry_window",
        "ga_tfx/training_loop/run.py",
        "        spans_epochs = carry and self.runner.pending() > position\n",
        "        spans_epochs = carry\n",
        ("tests/test_oom_recovery.py", "-k", "under_carry_recovers"),
        slow=True,  # its killer is in the slow tier (a real OOM)
    ),
    Mutation(
        "training_loop.jit_compile_ignored",
        "ga_tfx/window/runner.py",
        "        self._step = xla_step(step) if jit_compile else step\n",
        "        self._step = step\n",
        ("tests/test_training_loop.py", "-k", "jit"),
    ),
    Mutation(
        "training_loop.dataset_redistributed_every_epoch",
        "ga_tfx/training_loop/data.py",
        "        return self._whole_epoch\n",
        "        return self._distribute(self._dataset, 0)\n",
        ("tests/test_training_loop.py", "-k", "in_memory"),
    ),
    Mutation(
        "training_loop.signal_not_acted_on",
        "ga_tfx/training_loop/run.py",
        "        self._stop_if_requested()\n",
        "        pass\n",
        ("tests/test_preemption_in_step.py", "-k", "training_loop"),
    ),
    Mutation(
        "training_loop.epoch_start_not_moved",
        "ga_tfx/training_loop/state.py",
        "        self.epoch_start.assign(self.consumed())\n",
        "        pass\n",
        ("tests/test_training_loop.py", "-k", "resume"),
    ),
    Mutation(
        "training_loop.position_without_the_pending_window",
        "ga_tfx/training_loop/state.py",
        "        return done if pending is None else done + pending.read_value()\n",
        "        return done\n",
        ("tests/test_training_loop.py", "-k", "resume_mid_window"),
    ),
    Mutation(
        "training_loop.resume_from_the_start_of_the_epoch",
        "ga_tfx/training_loop/data.py",
        "        dataset = dataset.skip(position) if position else dataset\n",
        "        dataset = dataset\n",
        ("tests/test_training_loop.py", "-k", "resume_mid_window"),
    ),
    Mutation(
        "training_loop.regularization_left_out",  # the model's L2 terms never reach the update
        "ga_tfx/training_loop/step.py",
        "            terms = model.losses\n",
        "            terms = []\n",
        ("tests/test_training_loop.py", "-k", "regularization_counted"),
    ),
    # issue 45: TrainingInterrupted counts windows from every front-end (a skip included)
    Mutation(
        "training_loop.interrupted_at_updates",
        "ga_tfx/training_loop/run.py",
        "raise preemption.TrainingInterrupted(loop.window_core.windows, None, signum)",
        "raise preemption.TrainingInterrupted(loop.window_core.updates, None, signum)",
        ("tests/test_preemption_in_step.py", "-k", "skipped_one_included"),
    ),
    # issue 45: one traced window runner; the library's loop is not converted, the user's code is
    Mutation(
        "runner.library_converted_by_autograph",
        "ga_tfx/window/runner.py",
        "    def trace(self, function: Callable, autograph: bool = False, inline: bool = True)",
        "    def trace(self, function: Callable, autograph: bool = True, inline: bool = True)",
        ("tests/test_window_runner.py", "-k", "without_converting"),
    ),
    Mutation(
        "training_loop.users_layers_not_converted",
        "ga_tfx/training_loop/step.py",
        "internals.autograph_converted(self.model.__call__)(x, training=True)",
        "self.model(x, training=True)",
        ("tests/test_window_runner.py", "-k", "users_code"),
    ),
    Mutation(
        "training_loop.users_loss_not_converted",
        "ga_tfx/training_loop/step.py",
        "user_function(self.loss_fn)(targets, outputs)",
        "self.loss_fn(targets, outputs)",
        ("tests/test_window_runner.py", "-k", "users_code"),
    ),
    # issue 53: K never follows the schedule. The loop asked for no micro-batch for ever (its
    # killers failed only at their time limit); since issue 58 a window that does not end within
    # its K micro-steps is an error (LoopRun._window_not_ended), which fails them in seconds.
    Mutation(
        "training_loop.k_not_from_the_window_event",
        "ga_tfx/training_loop/run.py",
        "self.updates, self.current_accum_steps = event.update, event.next_accum_steps",
        "self.updates, self.current_accum_steps = event.update, self.current_accum_steps",
        ("tests/test_schedules.py", "-k", "checkpoint_in_the_middle_of_a_schedule"),
    ),
    Mutation(
        "training_loop.window_not_ended_ignored",  # a stale K hangs again
        "ga_tfx/training_loop/run.py",
        "        if wanted <= 0:  # the window should have ended: nothing left to take, for ever\n",
        "        if False:\n",
        ("tests/test_schedules.py", "-k", "does_not_end_within_its_k"),
    ),
    # issue 56: TrainingLoop reads a Keras loss's divisor
    Mutation(
        "training_loop.keras_loss_weighted_by_rows",
        "ga_tfx/training_loop/step.py",
        'micro_batch_weight([as_mean(term)], rows, who="loss_fn")',
        "rows",
        ("tests/test_loss_divisor.py", "-k", "training_loop"),
    ),
    Mutation(
        "divisor.loop_parts_weighed_as_one",
        "ga_tfx/training_loop/step.py",
        '    return total, micro_batch_groups(terms, rows, total, who="loss_fn")',
        "    return total, [(total, terms[0].divisor)]",
        ("tests/test_loss_divisor.py", "-k", "one_keras_loss_per_output and one_device"),
    ),
    Mutation(
        "divisor.loop_part_share_not_over_replicas",
        "ga_tfx/training_loop/step.py",
        "        share = float(weight) * tf.cast(value, tf.float32) / replicas",
        "        share = float(weight) * tf.cast(value, tf.float32)",
        ("tests/test_loss_divisor.py", "-k", "one_keras_loss_per_output and mirrored"),
    ),
]
