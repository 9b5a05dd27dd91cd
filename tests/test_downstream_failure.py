"""An Evaluator that fails does not lose the trained model: the re-run reuses the Trainer's
cached output (TFX's cache, keyed by the Trainer's unchanged inputs), evaluates and pushes it."""

from ga_tfx.pipelines import cli, local
from ga_tfx.pipelines.options import TrainingOptions

import pytest
from tfx.components.evaluator import executor as evaluator_executor

pytestmark = [pytest.mark.tfx, pytest.mark.slow]  # two pipeline runs

OPTIONS = TrainingOptions.of(
    accum_steps=2,
    micro_batch_size=32,
    train_windows=4,
    windows_per_epoch=4,
    eval_steps=2,
    min_accuracy=0.2,
)


def test_a_failed_evaluator_rerun_reuses_the_trained_model(tmp_path, monkeypatch):
    args = (
        "ga-tfx-downstream",
        str(tmp_path / "root"),
        cli.SHIPPED_DATA,
        str(tmp_path / "serving"),
        OPTIONS,
    )
    kwargs = dict(metadata_path=str(tmp_path / "metadata.db"))

    def fail(self, *unused):
        raise RuntimeError("the Evaluator's machine went away")

    with monkeypatch.context() as patch:
        patch.setattr(evaluator_executor.Executor, "Do", fail)
        with pytest.raises(Exception, match="went away"):
            local.run(*args, **kwargs)
    assert not (tmp_path / "serving").exists()  # nothing pushed by the failed run

    summary = local.run(*args, **kwargs)
    print("\n".join(summary.lines()))
    assert "GradientAccumulationTrainer" in summary.cached_components  # not trained again
    assert "Evaluator" not in summary.cached_components
    assert summary.blessed and summary.pushed_model.startswith(str(tmp_path / "serving"))
