"""A killed Trainer's job submitted again, as Vertex and open-source KFP run it: new output
URIs for the same inputs, the module file elsewhere, the killed attempt's lock left behind.
It resumes by content; the same job with one setting changed starts over and says why."""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx._keras import tf
from ga_tfx.components.trainer import Executor, run_record

import glob
import logging
import os
import shutil

import pytest

from tests import test_trainer_component as trainer

pytestmark = [pytest.mark.tfx, pytest.mark.slow]  # a killed Trainer, then two more runs

SETTINGS = dict(
    accum_steps=2,
    micro_batch_size=8,
    num_steps=4,
    windows_per_epoch=1,
    checkpoint_every_updates=1,
    eval_steps=0,
    shuffle=1,
    shuffle_seed=3,
)


def _resubmitted(tmp_path, name, **settings):
    """The Trainer of a job submitted again: its inputs copied to new URIs (the same bytes),
    its module file at a new path (the same source); returns the run's model_run dir."""
    out = str(tmp_path / name)
    inputs, outputs = trainer._artifacts(out)
    for artifacts in inputs.values():
        for artifact in artifacts:
            copy = os.path.join(out, "inputs", os.path.basename(artifact.uri))
            shutil.copytree(artifact.uri, copy)
            artifact.uri = copy
    module = trainer._module(tmp_path, name=f"{name}_module.py")
    Executor().Do(inputs, outputs, trainer._exec_properties(module, **dict(SETTINGS, **settings)))
    return os.path.join(out, "model_run")


def test_a_killed_trainers_resubmitted_job_resumes_by_content_and_a_changed_one_starts_over(
    tmp_path, caplog
):
    trainer._kill_a_trainer(tmp_path, SETTINGS, at_update=2)  # its lock is left behind
    (killed,) = glob.glob(str(tmp_path / ".ga_tfx_resume" / "*"))
    assert os.path.exists(os.path.join(killed, "ga_tfx.lock"))
    assert tf.train.latest_checkpoint(killed).endswith("ckpt-2")

    with caplog.at_level(logging.WARNING):
        changed = _resubmitted(tmp_path, "changed", shuffle_seed=4)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ga-tfx:")]
    assert lines == [
        f"ga-tfx: starting over, not resuming {killed}: the setting shuffle_seed changed (3 -> 4)"
    ]
    assert run_record.read(changed).resumed_from_window is None  # trained all 4 windows
    assert tf.train.latest_checkpoint(killed).endswith("ckpt-2")  # never written by it

    caplog.clear()
    with caplog.at_level(logging.WARNING):
        again = _resubmitted(tmp_path, "again")
    record = run_record.read(again)
    assert (record.resumed_from_window, record.windows_this_run) == (2, 2)
    steps = [s for s, _ in trainer._scalars(os.path.join(again, "ga_tfx"))["ga_tfx/updates"]]
    assert steps == [3, 4]  # the killed attempt's windows are not trained again
    (took_over,) = [r.getMessage() for r in caplog.records if "took over" in r.getMessage()]
    assert "on this machine has ended" in took_over  # the killed attempt's lock, at once
    assert not os.path.exists(killed)  # exported: the folder is deleted
