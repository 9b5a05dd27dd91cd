"""The paired Trainer benchmark's digits job (``benchmarks/trainer_pace_digits.py``) pairs the
main job's Trainer, as its pipeline builds it, with a stock module that compiles."""

import json

import pytest

from benchmarks import trainer_pace_digits as digits_job

pytestmark = [pytest.mark.tfx]  # builds the main job's TFX pipeline


def test_the_ga_side_runs_the_main_jobs_trainer_and_the_stock_side_its_effective_batch(tmp_path):
    from ga_tfx.pipelines import cli
    from ga_tfx.pipelines import pipeline as pipeline_lib

    made = pipeline_lib.create_pipeline(
        "p",
        str(tmp_path / "root"),
        cli.SHIPPED_DATA,
        str(tmp_path / "serving"),
        pipeline_lib.TrainingOptions(),
    )
    props = digits_job.trainer_properties(made)
    assert props["model_fn"] == "ga_tfx.pipelines.digits" and "module_file" not in props
    assert json.loads(props["train_args"]) == {"num_steps": 60}
    assert json.loads(props["eval_args"]) == {"num_steps": 8}
    settings = digits_job._settings(props)
    assert digits_job.stock_config(settings) == {
        "batch_size": settings.accum_steps * settings.micro_batch_size,
        "eval_batch_size": settings.micro_batch_size,
        "steps_per_epoch": 20,
    }
    module = {}  # the generated module's text runs (its imports and definitions)
    exec(compile(digits_job.STOCK_MODULE, "digits_stock_module.py", "exec"), module)
    assert callable(module["run_fn"])
    assert (module["BATCH_SIZE"], module["STEPS_PER_EPOCH"]) == digits_job.CONFIG_KEYS[::2]
