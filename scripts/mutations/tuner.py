"""Seeded bugs in the Tuner (components/tuner/): tuner_fn and its trials."""

from .mutation import Mutation

MUTATIONS = [
    Mutation(
        "tuner.search_restarts",
        "components/tuner/tuner_fn.py",
        "project_name=PROJECT_NAME,\n        overwrite=False,",
        "project_name=PROJECT_NAME,\n        overwrite=True,",
        ("tests/test_tuner_component.py", "-k", "resumes"),
        slow=True,
    ),
    Mutation(
        # A trial's progress line in applied updates, not windows.
        "tuner.progress_in_updates",
        "components/tuner/trials.py",
        "label=self._label, window=self._last.window,",
        "label=self._label, window=self._last.update,",
        ("tests/test_cli_console.py", "-k", "progress_in_windows"),
    ),
    Mutation(
        "tuner.trial_seed_not_applied",
        "components/tuner/trials.py",
        "        keras.utils.set_random_seed(trial_seed(self._ga_seed, trial.trial_id))\n",
        "",
        ("tests/test_tuner_trials.py", "-k", "seeded_before"),
    ),
    Mutation(  # --tuning-target-loss: one evaluation at the cap, so the probe never stops early
        "tune.target_probe_read_only_at_the_cap",
        "components/tuner/tuner_fn.py",
        "        epochs = fn_args.train_steps // probe_check_windows(fn_args.train_steps)\n",
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
    Mutation(
        "heartbeat.live_trials_ended",  # the watch ends the trials it heard of, not the silent
        "components/tuner/heartbeat.py",
        "        if silent < stale_after_seconds:\n",
        "        if silent > stale_after_seconds:\n",
        ("tests/test_tuner_heartbeat.py",),
    ),
]
