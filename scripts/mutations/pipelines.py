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
        "pipelines/pipeline.py",
        'settings["shuffle_buffer"] = LABEL_SHUFFLE_BUFFER',
        'settings["shuffle_buffer"] = None',
        ("tests/test_any_csv.py", "-k", "scores_the_baseline"),
    ),
]
