"""Seeded bugs in the pipeline, its runners and the CLI (pipelines/, the any-CSV path aside)."""

from .mutation import Mutation

MUTATIONS = [
    Mutation(
        "cli.no_cache_ignored",
        "pipelines/cli.py",
        "enable_cache=not args.no_cache",
        "enable_cache=True",
        ("tests/test_pipeline_e2e.py", "-k", "no_cache"),
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
    Mutation(
        "shuffle.label_run_keeps_the_small_default_buffer",
        "pipelines/parts/training.py",
        'settings["shuffle_buffer"] = LABEL_SHUFFLE_BUFFER',
        'settings["shuffle_buffer"] = None',
        ("tests/test_any_csv.py", "-k", "scores_the_baseline"),
    ),
    Mutation(
        "blessing.bounds_swapped",  # a missed minimum said to be above it
        "pipelines/blessing.py",
        "    if failure.lower:\n",
        "    if not failure.lower:\n",
        ("tests/test_blessing.py", "-k", "missed_threshold"),
    ),
    Mutation(
        "console.cached_shown_as_done",
        "pipelines/console.py",
        'state = "cached" if name in self._cached else "done"',
        'state = "done"',
        ("tests/test_cli_console.py", "-k", "component_lines"),
    ),
    Mutation(
        "digits.top_grey_level_refused",  # 16 (and label 9) out of range
        "pipelines/digits.py",
        "if not low <= number <= high:",
        "if not low <= number < high:",
        ("tests/test_bad_data.py", "-k", "shipped_data_passes"),
    ),
    Mutation(
        "options.windows_per_pass_rounded_down",  # the last rows of a pass never trained on
        "pipelines/run_length.py",
        "per_pass = -(-train_rows // (first_k * run.micro_batch_size))",
        "per_pass = train_rows // (first_k * run.micro_batch_size)",
        ("tests/test_any_csv.py", "-k", "training_length_rule"),
    ),
    Mutation(
        "options.plan_at_the_flags_k",  # B4: --label passes planned at --accum-steps' default
        "pipelines/run_length.py",
        "first_k = run.schedule.first_accum_steps  # the run's first K, its schedule's",
        "first_k = run.DEFAULT_ACCUM_STEPS",
        ("tests/test_settings_schema.py", "-k", "planned_at_the_schedules_first_k"),
    ),
    Mutation(
        "user_code.exclude_columns_dropped",  # --exclude-columns unchecked and not applied
        "pipelines/user_code.py",
        "        exclude=options.exclude_columns,\n",
        "",
        ("tests/test_user_code.py",),
    ),
    Mutation(
        "local.temp_dir_left",  # every run leaves TFX's temporary folders behind
        "pipelines/local.py",
        "        shutil.rmtree(folder, ignore_errors=True)\n",
        "        pass\n",
        ("tests/test_local_runner.py",),
    ),
    Mutation(
        "beam.runner_not_named",  # DirectRunner then tries Prism, downloaded, first
        "pipelines/beam.py",
        "        IN_PROCESS_RUNNER,\n",
        "",
        ("tests/test_kubeflow_options.py", "-k", "runner"),
    ),
    Mutation(
        "kubeflow.retries_not_written",  # the returned job has them, the JSON file not
        "pipelines/kubeflow.py",
        '    with open(output_file, "w") as f:\n'
        "        json.dump(job, f, indent=2, sort_keys=True)\n",
        "    written = json.loads(json.dumps(job))\n"
        '    for task in written["pipelineSpec"]["root"]["dag"]["tasks"].values():\n'
        '        task.pop("retryPolicy", None)\n'
        '    with open(output_file, "w") as f:\n'
        "        json.dump(written, f, indent=2, sort_keys=True)\n",
        ("tests/test_kubeflow_pipeline.py", "-k", "retries"),
        slow=True,
    ),
    # issue 53: three bugs only the slow tier saw, each with a fast killer now
    Mutation(
        "kubeflow.retries_written_one_short",
        "pipelines/kubeflow.py",
        "dict(maxRetryCount=trainer_retries, **RETRY_BACKOFF)",
        "dict(maxRetryCount=trainer_retries - 1, **RETRY_BACKOFF)",
        ("tests/test_kubeflow_compile.py",),
    ),
    Mutation(
        "kubeflow.default_schema_2_0",  # open-source KFP cannot resolve the default job
        "pipelines/kubeflow_options.py",
        'DEFAULT_PIPELINE_SPEC = "2.1"',
        'DEFAULT_PIPELINE_SPEC = "2.0"',
        ("tests/test_kubeflow_compile.py", "-k", "default_job"),
    ),
    Mutation(
        "pipeline.resume_root_without_the_pipeline_name",  # pipelines resume each other's runs
        "pipelines/pipeline.py",
        "resume_root = os.path.join(pipeline_root, RESUME_DIR, pipeline_name)",
        "resume_root = os.path.join(pipeline_root, RESUME_DIR)",
        ("tests/test_pipeline_resume_root.py",),
    ),
]
