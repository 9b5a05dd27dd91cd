"""The steps of ``train_and_export`` (``components/trainer/run_fn.py``), each alone, without a
TFX run: settings, strategy, resume, record. (Build, train and export run in the Trainer's own
tests, ``tests/test_trainer_component.py``.)"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx import tf
from ga_tfx._schema import SettingError
from ga_tfx.components.trainer import resume, run_fn, run_record
from ga_tfx.components.trainer import settings as settings_lib

import os
import types

import pytest

pytestmark = [pytest.mark.tfx]  # the Trainer's modules import TFX

SETTINGS = dict(accum_steps=2, micro_batch_size=4, label_key="y", windows_per_epoch=5)


def _fn_args(tmp_path, hyperparameters=None, train_steps=20):
    return types.SimpleNamespace(
        hyperparameters=hyperparameters,
        train_steps=train_steps,
        model_run_dir=str(tmp_path / "Trainer" / "model_run" / "7"),
        train_files=["train/*"],
        eval_files=["eval/*"],
        transform_graph_path="graph",
        schema_path="schema",
        base_model=None,
        eval_steps=3,
    )


def test_settings_step_applies_the_tuners_values_and_the_length(tmp_path):
    tuned = {"space": [], "values": {"accum_steps": 8, "agc": False, "learning_rate": 0.1}}
    settings = settings_lib.from_dict(dict(SETTINGS, agc_clip_factor=0.05))
    run = run_fn.run_settings(_fn_args(tmp_path, tuned), settings)
    assert run.settings.accum_steps == 8  # the Tuner's value wins
    assert run.settings.agc_clip_factor is None  # a search that turned AGC off
    assert run.hparams == tuned["values"]  # what build_model gets
    assert (run.windows, run.per_epoch) == (20, 5)
    with pytest.raises(SettingError, match=r"windows_per_epoch=5 must divide .*=12"):
        run_fn.run_settings(_fn_args(tmp_path, train_steps=12), settings)


def test_strategy_step_refuses_a_micro_batch_smaller_than_the_replicas():
    two = settings_lib.from_dict(dict(SETTINGS, strategy="mirrored", micro_batch_size=2))
    assert run_fn.run_strategy(two, 20).num_replicas_in_sync == 2  # conftest: two CPUs
    one = settings_lib.from_dict(dict(SETTINGS, strategy="mirrored", micro_batch_size=1))
    with pytest.raises(ValueError, match=r"micro_batch_size=1 is smaller than the 2 replicas"):
        run_fn.run_strategy(one, 20)


def _model_code(source):
    """A ``build_model`` whose code is ``source`` (its compiled code is its identity: no file)."""
    namespace = {}
    exec(f"def build_model(hparams):\n    return {source!r}", namespace)
    return namespace["build_model"]


def test_resume_step_shares_a_directory_only_with_the_same_training(tmp_path):
    settings = settings_lib.from_dict(SETTINGS)
    run = run_fn.run_settings(_fn_args(tmp_path), settings)
    model = _model_code("model")
    first = resume.resume_directory_of(_fn_args(tmp_path), run, model)
    # A re-run of the same training (another execution's model_run_dir) finds it ...
    again = _fn_args(tmp_path)
    again.model_run_dir = str(tmp_path / "Trainer" / "model_run" / "8")
    assert resume.resume_directory_of(again, run, _model_code("model")) == first
    assert first.startswith(str(tmp_path / "Trainer" / ".ga_tfx_resume"))
    # ... any change of the model code, the settings or the length starts over (the inputs'
    # content: tests/test_trainer_resume_identity.py).
    longer = run_fn.run_settings(_fn_args(tmp_path, train_steps=40), settings)
    assert first != resume.resume_directory_of(_fn_args(tmp_path), run, _model_code("other"))
    assert first != resume.resume_directory_of(_fn_args(tmp_path), longer, model)


def test_record_step_writes_the_run_record_and_deletes_the_checkpoints(tmp_path):
    settings = settings_lib.from_dict(SETTINGS)
    fn_args = _fn_args(tmp_path)
    run = run_fn.run_settings(fn_args, settings)
    resume_dir = tmp_path / "resume"
    resume_dir.mkdir()
    (resume_dir / "checkpoint").write_text("state")
    model = types.SimpleNamespace(window_core=None)
    logger = types.SimpleNamespace(samples_per_second=12.5, noise_scale=None, schedule_used=[])
    strategy = tf.distribute.get_strategy()  # one replica: the chief
    run_fn.record(
        fn_args,
        run,
        strategy,
        str(resume_dir),
        model,
        logger,
        8,  # resumed from update 8
        {"loss": 0.5},
        None,  # no memory budget
    )
    assert not os.path.exists(resume_dir)  # exported: a later run starts over
    record = run_record.read(fn_args.model_run_dir)
    assert (record.windows, record.windows_this_run, record.resumed_from_window) == (20, 12, 8)
    assert (record.effective_batch_size, record.accum_steps, record.replicas) == (8, 2, 1)
    assert record.final_metrics == {"loss": 0.5} and record.samples_per_second == 12.5
    assert record.stack  # the versions the run used
