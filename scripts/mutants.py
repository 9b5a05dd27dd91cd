"""Seeded bugs: applies hand-kept one-line mutations, one at a time, to a COPY of the tree and
runs a targeted subset of the test suite against each; reports which were killed.

Usage (from the project root, with the project's venv)::

    .venv/bin/python scripts/mutants.py --slow          # the whole list, one command
    .venv/bin/python scripts/mutants.py                 # the mutations the fast tier kills
    .venv/bin/python scripts/mutants.py -k agc -k bn    # mutations whose name contains a word
    .venv/bin/python scripts/mutants.py --sample 3      # 3 of them, drawn from the commit
    .venv/bin/python scripts/mutants.py --check         # every anchor in place; nothing run
    .venv/bin/python scripts/mutants.py --list          # the list, nothing run
    .venv/bin/python scripts/mutants.py --slow --commit HEAD --summary /tmp/mutants.md

How it works:

* The tree (without ``.git``, virtual environments, build and pipeline outputs) is copied once
  to a temporary directory: the working tree, or with ``--commit REV`` that commit
  (``git archive``), so that a recorded run names exactly what it ran on. ``ga_tfx.components``
  and ``ga_tfx.pipelines`` are installed from ``components/`` and ``pipelines/`` (setup.py
  ``package_dir``) by an editable install pointing at the original checkout; in the copy,
  ``ga_tfx/components`` and ``ga_tfx/pipelines`` are links to the copy's own folders, and
  pytest runs from the copy with ``PYTHONPATH`` = the copy and ``-p no:cacheprovider``, so every
  ``ga_tfx`` module comes from the copy. A check before the first mutant fails if any of them is
  imported from elsewhere. The original tree is never written.
* A mutation is anchored: it names ONE file (``path``), the code *text* it replaces there
  (``find``, not line numbers: files are being split and moved), how many times that text
  occurs in that file (``count``, default 1; every occurrence is replaced), the bug
  (``replace``) and the tests that must kill it. Before anything runs, every chosen mutation is
  checked against the copy: the file exists, the text occurs exactly ``count`` times, the
  mutated file still compiles. A refactor that moves, rewrites or duplicates a site is an error
  (exit status 2) naming the mutation, never a silent pass; ``tests/test_mutants.py`` runs the
  same check on the checkout in the fast tier.
* The unmutated copy must pass every selected test first (baseline, one pytest run per tier);
  then each mutant runs its tests with ``-x`` (and ``-m "not slow"`` unless it is a slow-tier
  mutation). Killed: pytest reports a failure (exit status 1). Survived: all its tests pass.
  Anything else (collection error, timeout, no test selected) is reported as such.
* ``--sample N`` runs N of the chosen fast-tier mutations, drawn with ``--seed`` (default: the
  commit the run is on, so each commit draws its own deterministic subset), and
  ``--sample-slow M`` adds M slow-tier ones drawn the same way; CI runs such a sample
  (``.ci/run``). ``--summary FILE`` writes the result as Markdown, with the commit it ran on.

Exit status: 0 when every mutant was killed, 1 when some survived (or errored), 2 when a
mutation's anchor is broken (``--keep-going`` runs the others first) or the baseline fails.
"""

import argparse
import dataclasses
import datetime
import fnmatch
import io
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from typing import List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
EXCLUDE = (
    ".git",
    ".venv",
    ".venv-lib",
    ".venv-tfx-*",
    "*.egg-info",
    "__pycache__",
    ".pytest_cache",
    "pipeline_output",
    "build",
    "dist",
)
TIMEOUT_S = 900  # per pytest run


@dataclasses.dataclass(frozen=True)
class Mutation:
    """One seeded bug.

    name: unique id (``area.what``); path: the one file (relative to the root) holding the
    site; find: code text replaced there (every occurrence); replace: the bug; tests: pytest
    arguments (files, node ids, ``-k`` expressions) that must kill it; count: how many times
    ``find`` occurs in ``path`` (anything else is a broken anchor); slow: its tests are in the
    slow tier (run only with ``--slow``, without ``-m "not slow"``).
    """

    name: str
    path: str
    find: str
    replace: str
    tests: Tuple[str, ...]
    count: int = 1
    slow: bool = False


MIXED_FLOAT16 = ("tests/test_mixed_precision.py", "-k", "matches_float32 and float16")
STEP, LOOP, ENGINE = "ga_tfx/engine/step.py", "ga_tfx/engine/loop.py", "ga_tfx/engine/__init__.py"
CONFIG = "ga_tfx/config.py"
# The window core (ga_tfx/window/), one file per concern.
CORE, SHIMS, SPLIT = "ga_tfx/window/core.py", "ga_tfx/window/shims.py", "ga_tfx/window/split.py"
NOISE, SCHEDULE = "ga_tfx/window/noise.py", "ga_tfx/window/schedule.py"
STEPS = "ga_tfx/window/steps.py"
PACING, ACCUMULATOR = "ga_tfx/engine/pacing.py", "ga_tfx/accumulator.py"
PREEMPTION = "ga_tfx/preemption.py"
COMPAT = "ga_tfx/compat/gradient_accumulator/accumulators.py"
DIALECT = "pipelines/csv_dialect.py"

MUTATIONS: List[Mutation] = [
    # ---- the engine (ga_tfx/engine): mixed precision, weighting, windows
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
        "engine.skipped_window_counted",
        SHIMS,
        "1 - tf.cast(all_finite(grads_and_vars), tf.int64)",
        "0 * tf.cast(all_finite(grads_and_vars), tf.int64)",
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
        "engine.accum_steps_1_agc_ignored",
        "ga_tfx/config.py",
        "for value in (self.clip_global_norm, self.agc_clip_factor, self.gradient_noise)",
        "for value in (self.clip_global_norm, self.gradient_noise)",
        ("tests/test_agc.py", "-k", "accum_steps_one"),
    ),
    Mutation(
        "engine.parameter_server_accepted",
        "ga_tfx/_tf_keras_internals.py",
        'return bool(getattr(model, "_cluster_coordinator", None))',
        "return False",
        ("tests/test_validation.py", "-k", "parameter_server"),
    ),
    Mutation(
        "engine.ema_per_micro_batch",
        STEP,
        "grads = tape.gradient(loss_to_differentiate, variables)",
        "grads = tape.gradient(loss_to_differentiate, variables); "
        "optimizer._update_model_variables_moving_average(variables)",
        ("tests/test_equivalence.py", "-k", "ema"),
    ),
    Mutation(
        "engine.drop_policy_ignored",
        LOOP,
        "            self._end_of_data(self._ending)\n",
        '            self._end_of_data("apply")\n',
        ("tests/test_windows.py", "-k", "policies and drop"),
    ),
    Mutation(
        "engine.carry_not_realigned",
        LOOP,
        "model, model.window_core.accum_steps - pending if pending else model._steps_per_call()",
        "model, model._steps_per_call()",
        ("tests/test_windows.py", "-k", "policies or whole_window"),
    ),
    Mutation(
        "engine.windows_inside_an_execution_not_applied",
        LOOP,
        "                self._finish()\n",
        "                pass\n",
        ("tests/test_windows.py", "-k", "several_windows"),
    ),
    Mutation(
        "engine.train_on_batch_follows_the_policy",
        ENGINE,
        "            with loop.one_window_per_call():\n",
        "            if True:\n",
        ("tests/test_windows.py", "-k", "train_on_batch and drop"),
    ),
    Mutation(
        "engine.fill_one_micro_batch_too_many",
        LOOP,
        "            lambda filled, _: filled < count,\n",
        "            lambda filled, _: filled <= count,\n",
        ("tests/test_windows.py", "-k", "several_windows"),
    ),
    Mutation(
        "engine.data_end_leaves_the_window_pending",
        LOOP,
        "            self._end_last_window()\n            raise",
        "            raise",
        ("tests/test_windows.py", "-k", "ends_inside"),
    ),
    Mutation(
        "engine.grad_norm_logged_before_the_update",
        LOOP,
        "        return model._figures.logs(logs)",
        "        return model._figures.logs(dict(logs, grad_norm=model._figures.result()))",
        ("tests/test_grad_norm_metric.py",),
    ),
    Mutation(
        "engine.grad_norm_counts_skipped_windows",
        LOOP,
        "        if event.applied and math.isfinite(event.grad_norm):",
        "        if math.isfinite(event.grad_norm) or True:",
        ("tests/test_grad_norm_metric.py", "-k", "skipped"),
    ),
    # ---- the accumulator (its replica factor: every strategy, the Trainer's too)
    Mutation(
        "accumulator.replica_factor_dropped",
        ACCUMULATOR,
        "scale = tf.cast(replicas, grad_sum.dtype) / tf.cast(count, grad_sum.dtype)",
        "scale = 1.0 / tf.cast(count, grad_sum.dtype)",
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
    # ---- the optimizer wrapper
    Mutation(
        "clock.window_one_too_long",  # the wrapper's windows (fit's and the loop's are sized)
        "ga_tfx/window/clock.py",
        "    return pending >= core.state.accum_steps.read_value()",
        "    return pending > core.state.accum_steps.read_value()",
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
        "oom.replay_gives_up",  # the one replay (fit, TrainingLoop, the Tuner, the Trainer)
        "ga_tfx/engine/recovery.py",
        "            rewind(error, core(error).recover_from_oom(strategy, error))\n",
        "            raise\n",
        ("tests/test_oom_recovery.py", "-k", "mid_training_with_the_same_result"),
    ),
    Mutation(
        "oom.training_loop_replays_a_carried_window",  # the epoch then read from below 0
        "ga_tfx/training_loop/run.py",
        "        spans_epochs = carry and loop._pending() > int(loop.state.position.numpy())\n",
        "        spans_epochs = False\n",
        ("tests/test_oom_recovery.py", "-k", "window_carried_across_epochs"),
    ),
    Mutation(
        "oom.training_loop_refuses_every_carry_window",
        "ga_tfx/training_loop/run.py",
        "        spans_epochs = carry and loop._pending() > int(loop.state.position.numpy())\n",
        "        spans_epochs = carry\n",
        ("tests/test_oom_recovery.py", "-k", "under_carry_recovers"),
        slow=True,  # its killer is in the slow tier (a real OOM)
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
    # ---- AccumBatchNormalization
    Mutation(
        "bn.between_micro_batch_variance_dropped",
        "ga_tfx/batchnorm.py",
        "between = tf.square(delta) * count_a * tf.math.divide_no_nan(count_b, count)",
        "between = 0.0 * delta",
        ("tests/test_batchnorm.py", "-k", "window_statistics"),
    ),
    Mutation(
        "bn.biased_variance",
        "ga_tfx/batchnorm.py",
        "divisor = tf.maximum(count - 1.0, 1.0) if self.fused else count",
        "divisor = count",
        ("tests/test_batchnorm.py", "-k", "window_statistics or keras_batchnorm"),
    ),
    # ---- AGC
    Mutation(
        "agc.comparison_flipped",
        "ga_tfx/agc.py",
        "tf.where(grad_norm > max_norm, clipped, g)",
        "tf.where(grad_norm < max_norm, clipped, g)",
        ("tests/test_agc.py",),
    ),
    Mutation(
        "agc.eps_floor_dropped",
        "ga_tfx/agc.py",
        "param_norm = tf.maximum(unitwise_norm(p, axes), tf.cast(eps, compute_dtype))",
        "param_norm = unitwise_norm(p, axes)",
        ("tests/test_agc.py", "-k", "zero_parameters"),
    ),
    Mutation(
        "agc.rank_6_accepted",
        "ga_tfx/agc.py",
        "if rank > MAX_SUPPORTED_RANK:",
        "if rank > 6:",
        ("tests/test_agc.py", "-k", "rank"),
    ),
    Mutation(
        "agc.kernel_norm_over_all_axes",
        "ga_tfx/agc.py",
        "return tuple(range(rank - 1))",
        "return tuple(range(rank))",
        ("tests/test_agc.py",),
    ),
    # ---- TrainingLoop
    Mutation(
        "training_loop.jit_compile_ignored",
        "ga_tfx/training_loop/__init__.py",
        "xla_step(self._micro_step) if self.jit_compile else self._micro_step\n",
        "self._micro_step\n",
        ("tests/test_training_loop.py", "-k", "jit"),
    ),
    Mutation(
        "training_loop.dataset_redistributed_every_epoch",
        "ga_tfx/training_loop/data.py",
        "        return self._whole_epoch\n",
        "        return self._distribute(self._dataset, 0)\n",
        ("tests/test_training_loop.py", "-k", "in_memory"),
    ),
    # ---- call pacing (ga_tfx/engine/pacing.py)
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
        "internals.set_steps_per_execution(model, windows * k)",
        "internals.set_steps_per_execution(model, windows * k + 1)",
        ("tests/test_pacing.py",),
    ),
    Mutation(
        "pacing.left_on_after_fit",
        ENGINE,
        "                self.train_function.stop_pacing()\n",
        "                pass\n",
        ("tests/test_pacing.py",),
    ),
    # ---- the Trainer: checkpoints, stop on a signal, resume, warm start, export
    Mutation(
        # The checkpoint's counts a copy beside the core's (the restored values, never moved
        # on): what the Trainer kept before the core's state was the one store.
        "checkpoints.counts_not_the_cores",
        "components/trainer/checkpoints.py",
        "        if core is None:  # before the first fit",
        "        if True:  # before the first fit",
        ("tests/test_preemption.py",),
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
        "trainer.resume_does_not_skip_trained_data",
        "components/trainer/run_fn.py",
        ".skip(_data_position(checkpoint, settings, skip))",
        ".skip(0)",
        ("tests/test_trainer_component.py", "-k", "killed"),
        slow=True,
    ),
    Mutation(
        "trainer.base_model_ignored",
        "components/trainer/model.py",
        "    if base_model_dir:\n        warm_start(model, base_model_dir)",
        "    if base_model_dir:\n        pass",
        ("tests/test_trainer_component.py", "-k", "warm_starts"),
        slow=True,
    ),
    Mutation(
        "trainer.stock_route_settings_ignored",
        "components/trainer/run_fn.py",
        "settings = settings_lib.from_dict(config[keys.GA_TFX])",
        "settings = settings_lib.from_dict(dict(config[keys.GA_TFX], accum_steps=1))",
        ("tests/test_trainer_component.py", "-k", "stock_trainer_runs"),
        slow=True,
    ),
    Mutation(
        "trainer.trains_on_the_eval_split",
        "components/trainer/run_fn.py",
        "fn_args, fn_args.train_files, settings, schema, settings.shuffle",
        "fn_args, fn_args.eval_files, settings, schema, settings.shuffle",
        ("tests/test_trainer_component.py", "-k", "big_batch_weights and sgd"),
    ),
    Mutation(
        "export.serving_in_training_mode",
        "components/trainer/export.py",
        "        outputs = model(features)\n",
        "        outputs = model(features, training=True)\n",
        ("tests/test_trainer_component.py", "-k", "in_memory"),
        slow=True,  # its killer is in the slow tier (tests/tiers.py)
    ),
    Mutation(
        "export.serving_default_is_the_transform",
        "components/trainer/export.py",
        '        "serving_default": serving,\n',
        '        "serving_default": transform_features_fn,\n',
        ("tests/test_trainer_serving.py", "-k", "serving_default"),
        slow=True,  # its killer is in the slow tier (tests/tiers.py)
    ),
    # ---- the pipeline's data gate and the CLI
    Mutation(
        "data_check.empty_split_passes",
        "pipelines/data_check.py",
        "        if not counts[split]:\n",
        "        if False:\n",
        ("tests/test_bad_data.py", "-k", "empty_split"),
    ),
    Mutation(
        "data_check.anomalies_pass",
        "pipelines/data_check.py",
        "    if problems:\n",
        "    if False:\n",
        ("tests/test_bad_data.py", "-k", "gate_check"),
    ),
    Mutation(
        "cli.no_cache_ignored",
        "pipelines/cli.py",
        "enable_cache=not args.no_cache",
        "enable_cache=True",
        ("tests/test_pipeline_e2e.py", "-k", "no_cache"),
    ),
    # ---- tuning: the library, the Tuner's tuner_fn and trials, the report
    Mutation(
        "tuning.out_of_memory_not_caught",
        "ga_tfx/hypermodel.py",
        "except (tf.errors.ResourceExhaustedError, RuntimeError) as error:",
        "except (tf.errors.CancelledError, ValueError) as error:",
        ("tests/test_tuning.py", "-k", "out_of_memory"),
        slow=True,  # its killer is in the slow tier (tests/tiers.py)
    ),
    Mutation(
        "tuning.steps_per_epoch_off_by_one",
        "ga_tfx/hypermodel.py",
        'kwargs["steps_per_epoch"] = samples_per_epoch // micro',
        'kwargs["steps_per_epoch"] = samples_per_epoch // micro + 1',
        ("tests/test_tuner_component.py", "-k", "searches_accum_steps"),
        slow=True,
    ),
    Mutation(
        "tuner.search_restarts",
        "components/tuner/tuner_fn.py",
        "project_name=PROJECT_NAME,\n        overwrite=False,",
        "project_name=PROJECT_NAME,\n        overwrite=True,",
        ("tests/test_tuner_component.py", "-k", "resumes"),
        slow=True,
    ),
    Mutation(
        "tuner.budget_from_smallest_micro_batch",
        "ga_tfx/search_space.py",
        "return max(self.accum_steps) * max(self.micro_batch_size)",
        "return max(self.accum_steps) * min(self.micro_batch_size)",
        ("tests/test_tuner_component.py", "-k", "budget"),
    ),
    Mutation(
        "tuner.trial_seed_not_applied",
        "components/tuner/trials.py",
        "            keras.utils.set_random_seed(trial_seed(self._ga_seed, trial.trial_id))\n",
        "",
        ("tests/test_tuner_trials.py", "-k", "seeded_before"),
    ),
    Mutation(
        "tuning_report.best_last",
        "pipelines/tuning_report.py",
        'scored.sort(key=lambda r: r["score"], reverse=maximize)',
        'scored.sort(key=lambda r: r["score"], reverse=not maximize)',
        ("tests/test_cli_console.py", "-k", "tuning_report"),
    ),
    Mutation(
        "tuning_report.loss_maximized",
        "pipelines/tuning_report.py",
        'maximize = not any(word in objective for word in ("loss", "error"))',
        "maximize = True",
        ("tests/test_cli_console.py", "-k", "tuning_report"),
    ),
    Mutation(
        "tuning_report.older_searches_mixed_in",
        "pipelines/tuning_report.py",
        'by_id = {r["trial_id"]: r for r in records if r.get("run") == latest}',
        'by_id = {r["trial_id"]: r for r in records}',
        ("tests/test_cli_console.py", "-k", "tuning_report"),
    ),
    # ---- ga_tfx.compat: gradient-accumulator's arguments mapped onto ga-tfx's
    Mutation(
        "compat.agc_alias_ignored",
        COMPAT,
        "        )\n    return agc\n",
        "        )\n    return use_agc\n",
        ("tests/test_compat_gradient_accumulator.py", "-k", "agc_clips"),
    ),
    Mutation(
        "compat.eps_not_passed_on",
        COMPAT,
        "            agc_eps=eps,\n",
        "            agc_eps=PACKAGE_EPS,\n",
        ("tests/test_compat_gradient_accumulator.py", "-k", "agc_clips"),
    ),
    Mutation(
        "compat.clip_keywords_dropped",
        COMPAT,
        "            _set_clipping(self.optimizer, key, value)\n",
        "            pass\n",
        ("tests/test_compat_gradient_accumulator.py", "-k", "clipping_keywords_clip"),
    ),
    Mutation(
        "compat.package_arguments_accepted",
        "ga_tfx/config.py",
        "    foreign = [name for name in given if name in MIGRATION_HINTS]\n",
        "    foreign = []\n",
        ("tests/test_compat_gradient_accumulator.py", "-k", "reject_package_arguments"),
    ),
    # ---- the window core (ga_tfx/window/): chain, guard, events, noise scale, schedules
    Mutation(
        "window.chain_result_dropped",
        STEPS,
        "    pairs, vote = chain(pairs)\n",
        "    _, vote = chain(pairs)\n",
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
    Mutation(
        "schedule.restored_k_not_in_first_call",
        ENGINE,
        "        self.train_function.follow_schedule()\n",
        "        pass\n",
        ("tests/test_schedules.py", "-k", "restored_from_a_checkpoint"),
    ),
    Mutation(
        "trainer.adaptive_position_from_the_bound",
        "components/trainer/run_fn.py",
        "    return checkpoint.micro_batches_done\n",
        "    return settings.micro_batches(0, windows)\n",
        ("tests/test_trainer_component.py", "-k", "adaptive_accum_schedule"),
    ),
    Mutation(
        "trainer.adaptive_fit_not_stopped",
        "components/trainer/run_fn.py",
        "            self.model.stop_training = True\n",
        "            pass\n",
        ("tests/test_trainer_component.py", "-k", "adaptive_accum_schedule"),
    ),
    Mutation(
        "tune.recommend_from_the_last_b_simple",
        "ga_tfx/tuning.py",
        '                value, space.micro_batch_size[0], space.accum_steps, measure="B_path"\n',
        '                curve[-1]["noise_scale"], space.micro_batch_size[0], space.accum_steps,\n'
        '                measure="B_path",\n',
        ("tests/test_tune_strategy.py", "-k", "stock_tuner_probes_once"),
    ),
    Mutation(  # --tuning-target-loss: one evaluation at the cap, so the probe never stops early
        "tune.target_probe_read_only_at_the_cap",
        "components/tuner/tuner_fn.py",
        "        epochs = fn_args.train_steps // probe_check_updates(fn_args.train_steps)\n",
        "        epochs = 1\n",
        ("tests/test_tune_strategy.py", "-k", "easy_target"),
    ),
    Mutation(  # the parsed target never reaches the probe tuner
        "tune.target_loss_not_given_to_the_probe",
        "components/tuner/tuner_fn.py",
        "            target_loss=config.target_loss,\n",
        "            target_loss=None,\n",
        ("tests/test_tune_strategy.py", "-k", "tuner_option_reaches_the_probe"),
    ),
    Mutation(  # fit's window end is traced without autograph: the user's code in it too
        "engine.user_transform_not_converted",
        "ga_tfx/_tf_keras_internals.py",
        "        return function\n    return autograph_converted(function)\n",
        "        return function\n    return function\n",
        ("tests/test_transforms.py", "-k", "python_control_flow"),
    ),
    Mutation(  # Keras' Nadam counts its traces: built before the first one it would differ
        "engine.nadam_built_before_its_first_trace",
        "ga_tfx/window/shims.py",
        "        inner, keras.optimizers.Nadam\n",
        "        inner, type(None)\n",
        ("tests/test_equivalence.py", "-k", "every_optimizer and nadam"),
        slow=True,  # its killer is in the slow tier
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
        "models.wrap_drops_a_functional_models_compute_loss",
        "ga_tfx/models.py",
        "    if _is_functional(model) and not overridden_step_hooks(model):\n",
        '    if _is_functional(model) and "train_step" not in overridden_step_hooks(model):\n',
        ("tests/test_keras_contract.py", "-k", "compute_loss_and_metrics"),
    ),
    Mutation(
        "engine.pieces_not_inlined_on_several_replicas",
        "ga_tfx/engine/loop.py",
        "        inline = inline or self._model.distribute_strategy.num_replicas_in_sync > 1\n",
        "",
        ("tests/test_oom_recovery.py", "-k", "two_replicas_survives"),
        slow=True,
    ),
    Mutation(
        "run_log.noise_written_without_estimate",
        "components/trainer/run_log.py",
        "            estimated = tf.logical_not(tf.math.is_nan(row[len(SCALARS)]))\n",
        "            estimated = tf.constant(True)\n",
        ("tests/test_trainer_component.py", "-k", "run_log"),
    ),
    Mutation(
        "run_log.one_point_per_call",
        "components/trainer/run_log.py",
        "            tf.while_loop(lambda i: i < tf.size(steps), point, [tf.constant(0)])\n",
        "            tf.while_loop(lambda i: i < tf.size(steps), point, [tf.size(steps) - 1])\n",
        ("tests/test_trainer_component.py", "-k", "run_log"),
    ),
    Mutation(
        "settings.route_drops_a_setting",
        "ga_tfx/_schema.py",
        "        if field.metadata.get(SOURCE_KEY, (None,))[0] is cls\n",
        "        if field.metadata.get(SOURCE_KEY, (None,))[0] is cls"
        ' and field.name != "strategy"\n',
        ("tests/test_tune_strategy.py", "-k", "every_option"),
    ),
    # ---- judgment rules (issue 34): the recommendation's rounding, the memory probe, the data
    # plan's column rules and the tabular features
    Mutation(
        "choice.rounds_linearly",
        "ga_tfx/batch_choice.py",
        "chosen = min(allowed, key=lambda k: (abs(math.log2(k) - target), k))",
        "chosen = min(allowed, key=lambda k: (abs(k - ideal), k))",
        ("tests/test_noise_scale_probe.py", "tests/test_tune_strategy.py"),
    ),
    Mutation(
        "choice.tie_to_the_larger",
        "ga_tfx/batch_choice.py",
        "chosen = min(allowed, key=lambda k: (abs(math.log2(k) - target), k))",
        "chosen = min(allowed, key=lambda k: (abs(math.log2(k) - target), -k))",
        ("tests/test_noise_scale_probe.py", "tests/test_tune_strategy.py"),
    ),
    Mutation(
        "memory.mib_in_decimal",
        "ga_tfx/memory.py",
        '"mib": 2**20,',
        '"mib": 10**6,',
        ("tests/test_memory.py",),
    ),
    Mutation(
        "memory.model_not_restored",
        "ga_tfx/memory.py",
        "            variable.assign(value)\n",
        "            pass\n",
        ("tests/test_memory.py",),
    ),
    Mutation(
        "memory.persistent_not_counted",
        "ga_tfx/memory.py",
        "            peaks[size] += persistent\n",
        "            peaks[size] += 0\n",
        ("tests/test_memory.py", "-k", "whole_run"),
    ),
    Mutation(
        "memory.smallest_first",
        "ga_tfx/memory.py",
        "for size in sorted(set(sizes), reverse=True):",
        "for size in sorted(set(sizes)):",
        ("tests/test_memory.py",),
        slow=True,
    ),
    Mutation(
        "memory.no_margin",  # the pick ignores the probe's margin (PROBE_MARGIN)
        "ga_tfx/memory.py",
        "    return int(reading * (1 + margin)) + input_bytes\n",
        "    return int(reading) + input_bytes\n",
        ("tests/test_memory.py", "-k", "margin"),
    ),
    Mutation(
        "memory.no_input_micro_batch",  # the pick leaves out one more input micro-batch
        "ga_tfx/memory.py",
        "    return int(reading * (1 + margin)) + input_bytes\n",
        "    return int(reading * (1 + margin))\n",
        ("tests/test_memory.py", "-k", "margin"),
    ),
    Mutation(
        "plan.identifier_rule_off",
        "pipelines/data_plan.py",
        "if distinct >= IDENTIFIER_MIN_DISTINCT and distinct >= IDENTIFIER_DISTINCT_FRACTION"
        " * present:",
        "if False:",
        ("tests/test_data_plan.py",),
    ),
    Mutation(
        "plan.codes_are_quantities",
        "pipelines/data_plan.py",
        "            and (stats.max - stats.min) < CODE_MAX_RELATIVE_SPREAD * size\n",
        "            and False\n",
        ("tests/test_data_plan.py",),
    ),
    Mutation(
        "plan.no_timestamps",
        "pipelines/data_plan.py",
        "            if whole and low <= stats.min and stats.max <= high:\n",
        "            if False:\n",
        ("tests/test_data_plan.py",),
    ),
    Mutation(
        "plan.almost_empty_kept",
        "pipelines/data_plan.py",
        "if feature is None or present < max(1, MIN_PRESENT_FRACTION * rows):",
        "if feature is None or present < 1:",
        ("tests/test_data_plan.py",),
    ),
    Mutation(
        "tabular.not_clipped",
        "pipelines/tabular.py",
        "parts = [tf.clip_by_value((x - median) / scale, -CLIP, CLIP)]",
        "parts = [(x - median) / scale]",
        ("tests/test_tabular_features.py",),
    ),
    Mutation(
        "tabular.scaled_by_the_iqr_itself",
        "pipelines/tabular.py",
        "scale = tf.where(iqr > 0, iqr / 1.349, tf.where(std > 0, std, 1.0))",
        "scale = tf.where(iqr > 0, iqr, tf.where(std > 0, std, 1.0))",
        ("tests/test_tabular_features.py",),
    ),
    Mutation(
        "optimizer.window_layers_ignored",
        "ga_tfx/optimizer.py",
        "variables, self._accumulation, self._transforms, window_layers=given + found",
        "variables, self._accumulation, self._transforms, window_layers=found",
        ("tests/test_batchnorm.py", "-k", "optimizer_wrapper"),
    ),
    # issue 45: TrainingInterrupted counts windows from every front-end (a skip included)
    Mutation(
        "training_loop.interrupted_at_updates",
        "ga_tfx/training_loop/run.py",
        "raise preemption.TrainingInterrupted(loop.windows, None, signum)",
        "raise preemption.TrainingInterrupted(loop.updates, None, signum)",
        ("tests/test_preemption_in_step.py", "-k", "skipped_one_included"),
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
        "ga_tfx/batchnorm.py",
        "if layer._last_eager_call > since and (not layer._accumulates() or replicas > 1):",
        "if layer._last_eager_call > since and not layer._accumulates():",
        ("tests/test_batchnorm.py", "-k", "refused"),
    ),
    Mutation(
        "batchnorm.stale_standalone_graph_runs",
        "ga_tfx/batchnorm.py",
        "            checks.append(self._refuse_if_driven())\n",
        "",
        ("tests/test_batchnorm.py", "-k", "traced_before"),
    ),
    # ---- any CSV (issue 33): each rule of the dialect, the messages, the leak rule
    Mutation(
        "csv.delimiter_not_sniffed",
        DIALECT,
        "            best, best_cells = candidate, widths[0]\n",
        "            pass\n",
        ("tests/test_csv_dialect.py",),
    ),
    Mutation(
        "csv.decimal_comma_never",
        DIALECT,
        'decimal = "," if comma and delimiter != "," else "."',
        'decimal = "."',
        ("tests/test_csv_dialect.py",),
    ),
    Mutation(
        "csv.thousands_mark_kept",
        DIALECT,
        'cell = cell.replace(".", "").replace(",", ".")',
        'cell = cell.replace(",", ".")',
        ("tests/test_csv_dialect.py", "-k", "decimal_mark"),
    ),
    Mutation(
        "csv.only_empty_cells_missing",
        DIALECT,
        "return MISSING_TOKENS | frozenset(self.csv_missing)",
        'return frozenset(("",)) | frozenset(self.csv_missing)',
        ("tests/test_csv_dialect.py",),
    ),
    Mutation(
        "csv.row_numbers_kept",
        DIALECT,
        "row_numbers = row_numbers and names[0].lower() in ROW_NUMBER_NAMES",
        "row_numbers = False",
        ("tests/test_csv_dialect.py",),
    ),
    Mutation(
        "csv.any_first_column_is_row_numbers",
        DIALECT,
        "row_numbers = number in starts if starts else number == str(expected)",
        "row_numbers = True",
        ("tests/test_csv_dialect.py", "-k", "row_numbers"),
    ),
    Mutation(
        "csv.byte_order_mark_kept",
        DIALECT,
        'return _read(files, reading, "utf-8-sig", opener)',
        'return _read(files, reading, "utf-8", opener)',
        ("tests/test_csv_dialect.py",),
    ),
    Mutation(
        "csv.no_cp1252_fallback",
        DIALECT,
        'return _read(files, reading, "cp1252", opener)',
        "raise",
        ("tests/test_csv_dialect.py", "-k", "encoding"),
    ),
    Mutation(
        "csv.files_not_compared",
        DIALECT,
        "elif names != header:",
        "elif False:",
        ("tests/test_csv_dialect.py", "-k", "agree"),
    ),
    Mutation(
        "csv.example_gen_ignores_the_dialect",
        "pipelines/csv_example_gen.py",
        "            dialect = csv_dialect.read(files, reading, _opener)\n",
        "            dialect = csv_dialect.read(files, csv_dialect.CsvReading("
        "csv_delimiter='comma', csv_decimal='point', csv_row_numbers='keep'), _opener)\n",
        ("tests/test_csv_example_gen.py",),
    ),
    Mutation(
        "csv.label_columns_not_closest_first",
        "pipelines/tabular.py",
        "return [repr(n) for n in sorted(names, key=lambda n: -likeness(n))]",
        "return [repr(n) for n in names]",
        ("tests/test_csv_dialect.py", "-k", "label_check"),
    ),
    Mutation(
        "csv.empty_split_blamed_on_size",
        "pipelines/data_check.py",
        "    if unlabeled:\n",
        "    if False:\n",
        ("tests/test_bad_data.py", "-k", "empty_split"),
    ),
    Mutation(
        "shuffle.buffer_setting_ignored",
        "components/trainer/data.py",
        "        **buffer,\n",
        "",
        ("tests/test_trainer_data.py",),
    ),
    Mutation(
        "shuffle.label_run_keeps_the_small_default_buffer",
        "pipelines/pipeline.py",
        'settings["shuffle_buffer"] = LABEL_SHUFFLE_BUFFER',
        'settings["shuffle_buffer"] = None',
        ("tests/test_any_csv.py", "-k", "scores_the_baseline"),
    ),
    Mutation(
        "leaks.bar_too_low",
        "pipelines/leaks.py",
        "LEAK_SHARE = 0.1  #",
        "LEAK_SHARE = 0.5  #",
        ("tests/test_leaks.py",),
    ),
    Mutation(
        "leaks.never_reported",
        "pipelines/leaks.py",
        "if error <= LEAK_SHARE * baseline:",
        "if error < 0:",
        ("tests/test_leaks.py",),
    ),
    Mutation(
        "leaks.numbers_as_categories",
        "pipelines/leaks.py",
        "    if not numeric:\n",
        "    if True:\n",
        ("tests/test_leaks.py",),
    ),
    Mutation(
        "leaks.excluded_columns_kept",
        "pipelines/data_plan.py",
        "        if feature.name in exclude:\n",
        "        if False:\n",
        ("tests/test_data_plan.py", "-k", "excluded"),
    ),
    Mutation(
        "stack.statistics_passed_to_a_spec_without_it",
        "components/trainer/component.py",
        "if statistics is not None and STATISTICS_KEY is None:",
        "if False:",
        ("tests/test_trainer_component.py", "-k", "statistics_input"),
    ),
    Mutation(
        "stack.line_in_the_dicts_order",
        "components/stack.py",
        "        for label in labels\n",
        "        for label in found\n",
        ("tests/test_stack.py", "-k", "order"),
    ),
    Mutation(
        "stack.version_reads_the_wrong_package",
        "components/stack.py",
        '("Keras", "tf-keras"),',
        '("Keras", "keras"),',
        ("tests/test_stack.py", "-k", "version_prints"),
    ),
    Mutation(
        "stack.not_in_the_run_record",
        "components/trainer/run_fn.py",
        "                stack=stack.versions(),\n",
        "",
        ("tests/test_main_job.py",),
        slow=True,
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
        "noise.path_weight_not_clipped",
        "ga_tfx/batch_choice.py",
        "        w = min(max(grad_sq / total, 0.0), 1.0) if total > 0 else 0.0\n",
        "        w = grad_sq / total if total > 0 else 0.0\n",
        ("tests/test_noise_scale_probe.py", "-k", "b_path"),
    ),
    Mutation(
        "noise.path_weights_of_one_window",
        "ga_tfx/batch_choice.py",
        "        block = kept[max(0, t - half_span) : t + half_span + 1]\n",
        "        block = kept[t : t + 1]\n",
        ("tests/test_noise_scale_probe.py", "-k", "b_path"),
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
        "optimizer.all_reduce_per_buffer",
        ACCUMULATOR,
        "            values = list(ctx.all_reduce(tf.distribute.ReduceOp.SUM, values))\n",
        "            values = [ctx.all_reduce(tf.distribute.ReduceOp.SUM, v) for v in values]\n",
        ("tests/test_optimizer_distributed.py", "-k", "one_all_reduce_per_update"),
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
    Mutation(
        "oom.tuner_trial_not_retried",
        "ga_tfx/hypermodel.py",
        "    if (recovered.epoch, recovered.position) != (0, 0):\n",
        "    if True:\n",
        ("tests/test_tuning.py", "-k", "retried_at_half"),
        slow=True,  # its killer is in the slow tier (tests/tiers.py)
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
        "oom.trainer_replans_from_the_start",
        "components/trainer/run_fn.py",
        "_fit_plan(checkpoint.windows_done, updates,",
        "_fit_plan(0, updates,",
        ("tests/test_trainer_component.py", "-k", "survives_an_out_of_memory"),
        slow=True,
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
        "ga_tfx/training_loop/__init__.py",
        "        self.epoch_start.assign(self.consumed())\n",
        "        pass\n",
        ("tests/test_training_loop.py", "-k", "resume"),
    ),
    Mutation(
        "training_loop.position_without_the_pending_window",
        "ga_tfx/training_loop/__init__.py",
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
]


# ---------------------------------------------------------------------- anchors
def list_problems(mutations: Sequence[Mutation] = MUTATIONS) -> List[str]:
    """What is wrong with the list itself: names not unique or not ``area.what``, a bug
    listed twice (the same file, text and replacement), a no-op, no test file named."""
    problems = []
    seen_names, seen_bugs = set(), {}
    for m in mutations:
        if m.name in seen_names:
            problems.append(f"{m.name}: the name is listed twice")
        seen_names.add(m.name)
        area, _, what = m.name.partition(".")
        if not area or not what:
            problems.append(f"{m.name}: name it area.what")
        bug = (m.path, m.find, m.replace)
        if bug in seen_bugs:
            problems.append(f"{m.name}: the same bug as {seen_bugs[bug]}")
        seen_bugs.setdefault(bug, m.name)
        if m.find == m.replace or not m.find:
            problems.append(f"{m.name}: find and replace must differ, find must not be empty")
        if m.count < 1:
            problems.append(f"{m.name}: count must be >= 1")
        if not any(t.startswith("tests/") for t in m.tests):
            problems.append(f"{m.name}: names no test file")
    return problems


def selected(m: Mutation, node_ids: Sequence[str]) -> List[str]:
    """The node ids (``tests/file.py::test[param]``) of ``node_ids`` that ``m.tests`` selects:
    its files or node ids, then its ``-k`` expression, matched as pytest's ``-k`` matches
    names (a case-insensitive substring of the test's file or name; markers not counted)."""
    from _pytest.mark.expression import Expression  # pytest's own -k grammar

    paths, expressions, args = [], [], list(m.tests)
    while args:
        arg = args.pop(0)
        if arg == "-k":
            expressions.append(Expression.compile(args.pop(0)))
        elif not arg.startswith("-"):
            paths.append(arg)
    chosen = []
    for node in node_ids:
        if not any(node == p or node.startswith(p + "::") for p in paths):
            continue
        names = [node.split("::")[0].rsplit("/", 1)[-1], *node.split("::")[1:]]
        text = " ".join(names).lower()
        if all(e.evaluate(lambda sub, text=text: sub.lower() in text) for e in expressions):
            chosen.append(node)
    return chosen


def anchor_problems(tree: str, m: Mutation) -> List[str]:
    """Why ``m`` cannot be applied to ``tree`` as listed ([] when it can): its file is
    missing, its text occurs other than ``count`` times there, the mutated file does not
    compile, or a test file it names is missing."""
    path = os.path.join(tree, m.path)
    if not os.path.isfile(path):
        return [f"{m.name}: {m.path} does not exist"]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    found = text.count(m.find)
    problems = []
    if found != m.count:
        problems.append(
            f"{m.name}: its text occurs {found} times in {m.path}, listed {m.count} "
            f"(the site moved or changed: update the mutation): {m.find!r}"
        )
    elif m.path.endswith(".py"):
        try:
            compile(text.replace(m.find, m.replace), m.path, "exec")
        except SyntaxError as error:
            problems.append(f"{m.name}: the mutated {m.path} does not compile: {error}")
    for test in m.tests:
        if test.startswith("tests/") and not os.path.exists(
            os.path.join(tree, test.split("::")[0])
        ):
            problems.append(f"{m.name}: test file {test} does not exist")
    return problems


# ---------------------------------------------------------------------- the copy
def _ignore(directory, names):
    return {n for n in names for pattern in EXCLUDE if fnmatch.fnmatch(n, pattern)}


def _git(*args: str, cwd: str = ROOT) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout.strip()


def _link_namespaces(tree: str) -> None:
    for name in ("components", "pipelines"):
        link = os.path.join(tree, "ga_tfx", name)
        if not os.path.lexists(link):
            os.symlink(os.path.join("..", name), link)


def make_copy(destination: str, source: str = ROOT) -> str:
    """Copies the tree to ``destination/tree``; links the namespace packages into ga_tfx/."""
    tree = os.path.join(destination, "tree")
    shutil.copytree(source, tree, ignore=_ignore, symlinks=True)
    _link_namespaces(tree)
    return tree


def export_commit(destination: str, commit: str) -> str:
    """The files of ``commit`` (``git archive``) in ``destination/tree``, namespaces linked."""
    tree = os.path.join(destination, "tree")
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tree)
    _link_namespaces(tree)
    return tree


def describe_source(source: str, commit: Optional[str]) -> Tuple[str, str]:
    """(commit hash, words saying what was run: the commit, or the working tree on it)."""
    if commit:
        full = _git("rev-parse", "--verify", f"{commit}^{{commit}}")
        return full, f"commit {full[:10]}"
    try:
        full = _git("rev-parse", "HEAD", cwd=source)
        dirty = _git("status", "--porcelain", "--untracked-files=no", cwd=source)
    except (subprocess.CalledProcessError, OSError):
        return "unknown", f"the tree at {source} (no git history)"
    if dirty:
        return full, f"the working tree on {full[:10]} (with uncommitted changes)"
    return full, f"commit {full[:10]} (clean working tree)"


def environment(tree: str) -> dict:
    return dict(os.environ, PYTHONPATH=tree, PYTHONDONTWRITEBYTECODE="1", TF_CPP_MIN_LOG_LEVEL="2")


def check_imports(tree: str) -> None:
    """Fails unless ga_tfx and its namespace packages are imported from the copy."""
    code = (
        "import ga_tfx, ga_tfx.engine, ga_tfx.components.trainer.run_fn, "
        "ga_tfx.components.tuner.tuner_fn, ga_tfx.pipelines.cli, sys\n"
        "print('\\n'.join('GA_TFX_MODULE ' + m.__file__ for n, m in sorted(sys.modules.items()) "
        "if n.startswith('ga_tfx') and getattr(m, '__file__', None)))"
    )
    out = subprocess.run(
        [PYTHON, "-c", code],
        cwd=tree,
        env=environment(tree),
        capture_output=True,
        text=True,
        timeout=600,
    )
    files = [
        line.split(" ", 1)[1]
        for line in out.stdout.splitlines()
        if line.startswith("GA_TFX_MODULE ")
    ]
    real_tree = os.path.realpath(tree)
    outside = [f for f in files if not os.path.realpath(f).startswith(real_tree + os.sep)]
    if out.returncode or not files or outside:
        raise SystemExit(
            f"import check failed (exit {out.returncode}); modules outside the "
            f"copy: {outside}\n{out.stderr[-2000:]}"
        )
    print(f"import check: {len(files)} ga_tfx modules, all from {tree}", flush=True)


# ---------------------------------------------------------------------- running
def baseline_selection(selections) -> List[str]:
    """One pytest argument list selecting (a superset of) the union of ``selections``.

    Each selection is ``(file, ..., ["-k", expr])``; pytest's ``-k`` also matches the module
    names, so ``(test_x and (expr)) or (test_y)`` selects file by file.
    """
    files, terms = [], []
    for selection in selections:
        paths = [a for a in selection if a.startswith("tests/")]
        expression = selection[selection.index("-k") + 1] if "-k" in selection else None
        modules = " or ".join(os.path.splitext(os.path.basename(p))[0] for p in paths)
        terms.append(f"(({modules}) and ({expression}))" if expression else f"({modules})")
        files += [p for p in paths if p not in files]
    return files + ["-k", " or ".join(dict.fromkeys(terms))]


def run_pytest(tree: str, args, timeout=TIMEOUT_S, slow=False) -> Tuple[Optional[int], float, str]:
    tier = [] if slow else ["-m", "not slow"]
    command = [
        PYTHON,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "-x",
        *tier,
        "-W",
        "ignore",
        *args,
    ]
    start = time.monotonic()
    try:
        out = subprocess.run(
            command,
            cwd=tree,
            env=environment(tree),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return None, time.monotonic() - start, "timeout"
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    summary = lines[-1] if lines else out.stderr[-300:]
    failed = [line.split(" - ")[0] for line in lines if line.startswith("FAILED ")]
    return out.returncode, time.monotonic() - start, " ".join([summary] + failed[:1])


def draw_sample(chosen: Sequence[Mutation], size: int, seed: str) -> List[Mutation]:
    """``size`` of ``chosen``, drawn by ``seed`` (the same seed, the same draw), list order."""
    if size >= len(chosen):
        return list(chosen)
    names = set(random.Random(seed).sample(sorted(m.name for m in chosen), size))
    return [m for m in chosen if m.name in names]


def write_summary(path: str, command: str, what: str, results, baselines, seconds: float) -> str:
    """The run as Markdown (returned, and written to ``path`` if given)."""
    killed = sum(verdict == "killed" for _, verdict, _ in results)
    broken = [name for name, verdict, _ in results if verdict == "anchor broken"]
    others = [
        f"{name} {verdict}"
        for name, verdict, _ in results
        if verdict not in ("killed", "anchor broken")
    ]
    date = datetime.date.today().isoformat()
    lines = [
        f"`{command}` on {what}, {date}, {seconds / 60:.0f} min: "
        f"**{killed} of {len(results) - len(broken)} run killed**"
        + (f" (not killed: {', '.join(others)})" if others else "")
        + (f"; {len(broken)} not run, anchor broken: {', '.join(broken)}" if broken else "")
        + "".join(f"; baseline, {tier}: {summary}" for tier, summary in baselines)
        + ".",
        "",
        "| mutation | verdict | seconds |",
        "| --- | --- | --- |",
    ]
    lines += [f"| `{name}` | {verdict} | {secs:.0f} |" for name, verdict, secs in results]
    text = "\n".join(lines) + "\n"
    if path:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "-k",
        action="append",
        default=[],
        help="run only mutations whose name contains this (repeatable)",
    )
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument(
        "--check",
        action="store_true",
        help="check the list and every chosen mutation's anchor in the source tree; run nothing",
    )
    parser.add_argument(
        "--slow", action="store_true", help="also the mutations whose tests are in the slow tier"
    )
    parser.add_argument(
        "--sample", type=int, default=0, metavar="N", help="run N of the chosen mutations"
    )
    parser.add_argument(
        "--sample-slow",
        type=int,
        default=0,
        metavar="M",
        help="with --sample: also M of the slow-tier mutations (their slow tests run), drawn "
        "the same way",
    )
    parser.add_argument(
        "--seed",
        default=None,
        help="the seed of --sample (default: the commit the run is on)",
    )
    parser.add_argument(
        "--commit",
        default=None,
        metavar="REV",
        help="run on this commit of the checkout (git archive), not on the working tree",
    )
    parser.add_argument(
        "--summary", default=None, metavar="FILE", help="write the result as Markdown to FILE"
    )
    parser.add_argument(
        "--keep-going",
        action="store_true",
        help="run the mutations whose anchors hold when some are broken (those are reported "
        "as 'anchor broken'; the exit status is still 2)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the copy (path printed)")
    parser.add_argument(
        "--no-baseline",
        action="store_true",
        help="skip the unmutated run (only when the selections are known to "
        "pass on this tree: a failing selection would read as killed)",
    )
    parser.add_argument(
        "--source",
        default=ROOT,
        help="the tree to copy (default: this checkout's working tree)",
    )
    args = parser.parse_args(argv)
    problems = list_problems()
    if problems:
        print("ERROR: the mutation list:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    chosen = [
        m
        for m in MUTATIONS
        if (not args.k or any(k in m.name for k in args.k)) and (args.slow or not m.slow)
    ]
    if args.list:
        for m in chosen:
            print(f"{m.name:48s} {m.path:44s} {' '.join(m.tests)}")
        return 0
    source = os.path.abspath(args.source)
    if args.check:
        broken = [p for m in chosen for p in anchor_problems(source, m)]
        for line in broken:
            print(f"ERROR: {line}", file=sys.stderr)
        print(
            f"{len(chosen) - len({b.split(':')[0] for b in broken})}/{len(chosen)} anchors in place"
        )
        return 2 if broken else 0

    started = time.monotonic()
    commit, what = describe_source(source, args.commit)
    if args.sample:
        seed = args.seed if args.seed is not None else commit
        slow = [m for m in MUTATIONS if m.slow and (not args.k or any(k in m.name for k in args.k))]
        chosen = draw_sample([m for m in chosen if not m.slow], args.sample, seed) + (
            draw_sample(slow, args.sample_slow, seed) if args.sample_slow else []
        )
        print(f"sample of {len(chosen)} (seed {seed!r}): {', '.join(m.name for m in chosen)}")
    work = tempfile.mkdtemp(prefix="ga_tfx_mutants_")
    try:
        tree = export_commit(work, commit) if args.commit else make_copy(work, source)
        print(f"running on {what}", flush=True)
        broken = {m.name: anchor_problems(tree, m) for m in chosen}
        broken = {name: problems for name, problems in broken.items() if problems}
        if broken:
            print(
                "ERROR: broken anchors (update the mutation list):\n  "
                + "\n  ".join(p for problems in broken.values() for p in problems),
                file=sys.stderr,
            )
            if not args.keep_going:
                return 2
            chosen = [m for m in chosen if m.name not in broken]
        check_imports(tree)
        # Baseline: the unmutated copy passes every selected test (one pytest run per tier).
        baselines = []
        for slow in sorted({m.slow for m in chosen} if not args.no_baseline else ()):
            selection = baseline_selection([m.tests for m in chosen if m.slow == slow])
            code, seconds, summary = run_pytest(tree, selection, slow=slow)
            tier = "slow tier" if slow else "fast tier"
            baselines.append((tier, summary))
            print(f"baseline   {'(' + tier + ')':48s} {seconds:5.0f}s  {summary}", flush=True)
            if code != 0:
                print("ERROR: the unmutated copy fails selected tests", file=sys.stderr)
                return 2

        results = [(name, "anchor broken", 0.0) for name in broken]
        for m in chosen:
            path = os.path.join(tree, m.path)
            with open(path, encoding="utf-8") as f:
                saved = f.read()
            try:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(saved.replace(m.find, m.replace))
                code, seconds, summary = run_pytest(tree, m.tests, slow=m.slow)
            finally:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(saved)
            verdict = {0: "SURVIVED", 1: "killed"}.get(code, f"error (exit {code})")
            results.append((m.name, verdict, seconds))
            print(f"{verdict:10s} {m.name:48s} {seconds:5.0f}s  [{m.path}]  {summary}", flush=True)
        killed = sum(v == "killed" for _, v, _ in results)
        print(f"\n{killed}/{len(results)} mutants killed")
        for name, verdict, _ in results:
            if verdict != "killed":
                print(f"  {verdict}: {name}")
        command = "scripts/mutants.py " + " ".join(argv if argv is not None else sys.argv[1:])
        text = write_summary(
            args.summary, command.strip(), what, results, baselines, time.monotonic() - started
        )
        if args.summary:
            print(f"summary written to {args.summary}:\n{text.splitlines()[0]}")
        return 2 if broken else 0 if killed == len(results) else 1
    finally:
        if args.keep:
            print(f"copy kept at {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
