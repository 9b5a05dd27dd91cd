"""Seeded bugs in the Trainer (components/trainer/, components/stack.py): checkpoints, stop on a
signal, resume, warm start, export, its logs.
"""

from .mutation import Mutation

MUTATIONS = [
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
        "trainer.resume_does_not_skip_trained_data",
        "components/trainer/fit_windows.py",
        ".skip(data_position(checkpoint, settings, skip))",
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
        "components/trainer/fit_windows.py",
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
    Mutation(
        "trainer.adaptive_position_from_the_bound",
        "components/trainer/fit_windows.py",
        "    return checkpoint.micro_batches_done\n",
        "    return settings.schedule.micro_batches(0, windows)\n",
        ("tests/test_trainer_component.py", "-k", "adaptive_accum_schedule"),
    ),
    Mutation(
        "trainer.adaptive_fit_not_stopped",
        "components/trainer/fit_windows.py",
        "            self.model.stop_training = True\n",
        "            pass\n",
        ("tests/test_trainer_component.py", "-k", "adaptive_accum_schedule"),
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
        "shuffle.buffer_setting_ignored",
        "components/trainer/data.py",
        "        **buffer,\n",
        "",
        ("tests/test_trainer_data.py",),
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
        "oom.trainer_replans_from_the_start",
        "components/trainer/fit_windows.py",
        "plan = fit_plan(checkpoint.windows_done, total_windows, per_epoch, schedule.varies)",
        "plan = fit_plan(0, total_windows, per_epoch, schedule.varies)",
        ("tests/test_trainer_component.py", "-k", "survives_an_out_of_memory"),
        slow=True,
    ),
    # ---- the guards issue 45 added (what only benchmarks guarded)
    Mutation(
        "trainer.logger_stops_pacing",  # fit then runs one window per call (512 for 512)
        "components/trainer/run_log.py",
        "    follows_pacing = True\n",
        "    follows_pacing = False\n",
        ("tests/test_trainer_callbacks.py",),
    ),
    Mutation(
        # The progress line in applied updates, not windows (a skipped window not counted).
        "run_log.progress_in_updates",
        "components/trainer/run_log.py",
        "                window=last.window,",
        "                window=last.update,",
        ("tests/test_cli_console.py", "-k", "progress_in_windows"),
    ),
    Mutation(
        "trainer.checkpoint_stops_pacing",
        "components/trainer/checkpoints.py",
        "    follows_pacing = True\n",
        "    follows_pacing = False\n",
        ("tests/test_trainer_callbacks.py",),
    ),
    Mutation(
        "trainer.tensorboard_steps_per_second",  # Keras' TensorBoard then watches every batch
        "components/trainer/fit_windows.py",
        'keras.callbacks.TensorBoard(log_dir=model_run_dir, update_freq="epoch")',
        'keras.callbacks.TensorBoard(model_run_dir, update_freq="epoch", write_steps_per_second=1)',
        ("tests/test_trainer_callbacks.py",),
    ),
    Mutation(
        "settings.agc_off_ignored",  # a search that turned AGC off trains with it
        "components/trainer/settings.py",
        '            overrides["agc_clip_factor"] = None\n',
        "            pass\n",
        ("tests/test_trainer_component.py", "-k", "tuner_overrides"),
    ),
    Mutation(
        "checkpoints.resume_root_ignored",  # a job submitted again starts over
        "components/trainer/checkpoints.py",
        "    if resume_root is None:\n",
        "    if True:\n",
        ("tests/test_preemption.py", "-k", "resume_root"),
    ),
    # ---- issue 51 item 5 / issue 53 item 3: the resume identity by content, the lock
    Mutation(
        "resume.settings_out_of_the_identity",  # another agc_clip_factor resumes the old run
        "components/trainer/resume.py",
        "        settings=settings,\n",
        "        settings={},\n",
        ("tests/test_trainer_resume_identity.py",),
    ),
    Mutation(
        "resume.examples_by_uri",  # changed data at the old URIs resumes; new URIs start over
        "components/trainer/resume.py",
        "        train_examples=content.files_digest(fn_args.train_files),\n",
        "        train_examples=fn_args.train_files,\n",
        ("tests/test_trainer_resume_identity.py",),
    ),
    Mutation(
        "resume.code_not_in_the_identity",  # a rebuilt image's changed module resumes
        "components/trainer/resume.py",
        "        code=content.code_digest(build_model),\n",
        "",
        ("tests/test_trainer_resume_identity.py",),
    ),
    # issue 58 item 4: expectations of the resume identity stated by the tests, not read back
    Mutation(
        "resume.clip_factor_and_policy_not_identity",  # another clip factor resumes the old run
        "components/trainer/resume.py",
        '    "checkpoint_every_seconds": "how often checkpoints are written",\n}\n',
        '    "checkpoint_every_seconds": "how often checkpoints are written",\n'
        '    "agc_clip_factor": "planted",\n'
        '    "partial_window": "planted",\n}\n',
        ("tests/test_trainer_resume_identity.py", "-k", "every_setting"),
    ),
    Mutation(
        "resume.code_digest_of_build_model_only",  # a changed helper or constant resumes
        "components/trainer/content.py",
        '    for path in (namespace.get("__file__"), getattr(spec, "origin", None)):\n',
        "    for path in ():\n",
        ("tests/test_trainer_resume_identity.py", "-k", "model_code or model_module"),
    ),
    Mutation(
        "resume_lock.no_exclusive_create",  # two runs at once both write the folder
        "components/trainer/resume_lock.py",
        "os.O_CREAT | os.O_EXCL | os.O_WRONLY",
        "os.O_CREAT | os.O_WRONLY",
        ("tests/test_trainer_resume_lock.py",),
    ),
    Mutation(
        "resume_lock.stamped_at_the_runs_start",  # a fresh lock reads as old as its wait
        "components/trainer/resume_lock.py",
        "        self.me.beat = self._clock()\n        return json.dumps",
        "        return json.dumps",
        ("tests/test_trainer_resume_lock.py",),
    ),
    Mutation(
        "settings.kubeflow_interval_overrides_a_given_600",  # the user's 600 s became 60
        "components/trainer/settings.py",
        "    return KUBEFLOW_CHECKPOINT_EVERY_SECONDS if given is None else given\n",
        "    return KUBEFLOW_CHECKPOINT_EVERY_SECONDS if given in (None, 600.0) else given\n",
        ("tests/test_trainer_kubeflow_interval.py",),
    ),
]
