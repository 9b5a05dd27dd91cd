"""A Trainer killed at five points, re-run each time, ends with the uninterrupted weights.

One chain of attempts of the same training (taxi testdata, AccumBN, SGD with momentum, shuffled
data, 8 windows of 2 micro-batches, evaluation every 4 windows, a checkpoint every 3 updates):
each attempt is a fresh process, as a retried pod or a re-run ``ga-tfx run`` is, killed at one
point; the next attempt resumes from what the previous one left:

1. SIGKILL during the Trainer's evaluation (after update 4; latest checkpoint: update 3);
2. SIGTERM as window 5 begins: the window runs to its end, a checkpoint is written, the
   process exits with 143 and prints the one line;
3. SIGKILL mid-window (window 7 running; latest checkpoint: update 5);
4. SIGKILL during a checkpoint write (update 8's files half written, index not yet updated);
5. SIGKILL right after a checkpoint (update 8);
6. SIGKILL during the export (the final checkpoint holds all 8 windows);
then a last attempt in this process exports, and its weights, optimizer slots and AccumBN
statistics equal those of an uninterrupted run.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx import tf
from ga_tfx.components.trainer import run_record

import glob
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from tests.test_trainer_component import MODEL_MODULE, _module, _run, _saved_variables

pytestmark = [pytest.mark.tfx, pytest.mark.slow]  # six Trainer processes, one after the other

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETTINGS = dict(
    accum_steps=2,
    micro_batch_size=8,
    num_steps=8,
    windows_per_epoch=4,
    checkpoint_every_updates=3,
    eval_steps=2,
    shuffle=1,
    shuffle_seed=3,
)
# SGD (with momentum, so the optimizer has slots to restore): Adam would hide scale errors.
# One window per call (steps_per_execution = K = 2 micro-batches): the kill points and the
# checkpoints then fall on the windows named above (unset, fit paces its calls, whose windows
# depend on how fast the machine is).
SGD_MODULE = MODEL_MODULE.replace(
    "keras.optimizers.Adam(1e-2)", "keras.optimizers.SGD(0.05, momentum=0.9)"
).replace(
    "keras.losses.SparseCategoricalCrossentropy(from_logits=True))",
    "keras.losses.SparseCategoricalCrossentropy(from_logits=True), steps_per_execution=2)",
)
assert SGD_MODULE.count("steps_per_execution=2") == 1 and "SGD(0.05" in SGD_MODULE

ATTEMPT = """
import json, os, pathlib, signal, sys, threading
import ga_tfx
from ga_tfx import tf
from tensorflow.python.checkpoint import checkpoint_management
from ga_tfx.components.trainer import checkpoints, export, preemption
from tests import test_trainer_component as t

tf.config.experimental.enable_op_determinism()
tmp, name, point, module = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
settings = json.loads(sys.argv[5])
Update = checkpoints.UpdateCheckpoint

def kill(signum=signal.SIGKILL):
    os.kill(os.getpid(), signum)

def at_window(window, action):  # action() as window `window` begins
    begin = Update.on_train_batch_begin
    def patched(self, batch, logs=None):
        if self.windows_done + 1 == window:
            action()
        begin(self, batch, logs)
    Update.on_train_batch_begin = patched

if point == "evaluation":
    Update.on_test_batch_begin = lambda self, batch, logs=None: kill()
elif point == "sigterm_mid_window":  # handled at once: the window then runs to its end
    at_window(5, lambda: kill(signal.SIGTERM))
elif point == "mid_window":  # from another thread, while the window's train function runs
    at_window(7, lambda: threading.Thread(target=kill).start())
elif point == "checkpoint_write":
    record = checkpoint_management.update_checkpoint_state_internal
    def torn(save_dir, model_checkpoint_path, *args, **kwargs):
        if model_checkpoint_path.endswith("ckpt-8"):
            for f in os.listdir(save_dir):
                if f.startswith("ckpt-8.data"):
                    os.truncate(os.path.join(save_dir, f), 100)
            kill()
        return record(save_dir, model_checkpoint_path, *args, **kwargs)
    checkpoint_management.update_checkpoint_state_internal = torn
elif point == "after_checkpoint":
    save = Update.save
    def save_then_die(self):
        save(self)
        if self.saved_at == 8:
            kill()
    Update.save = save_then_die
elif point == "export":
    def half_export(model, serving_model_dir, *args):
        os.makedirs(serving_model_dir)
        open(os.path.join(serving_model_dir, "saved_model.pb"), "w").write("half")
        kill()
    export.export_serving_model = half_export

try:
    t._run(pathlib.Path(tmp), name, module_file=module, **settings)
except Exception as error:
    sys.exit(preemption.report_interruption(error))
"""


def _attempt(tmp_path, module, name, point):
    return subprocess.run(
        [sys.executable, "-c", ATTEMPT, str(tmp_path), name, point, module, json.dumps(SETTINGS)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )


def _latest(tmp_path):
    (resume_dir,) = glob.glob(str(tmp_path / ".ga_tfx_resume" / "*"))
    return int(tf.train.latest_checkpoint(resume_dir).rsplit("-", 1)[1])


def test_killed_at_five_points_the_reruns_end_with_the_uninterrupted_weights(tmp_path):
    module = _module(tmp_path, SGD_MODULE, "sgd_module.py")
    expected = [
        ("evaluation", -signal.SIGKILL, 3),
        ("sigterm_mid_window", 128 + signal.SIGTERM, 5),
        ("mid_window", -signal.SIGKILL, 5),
        ("checkpoint_write", -signal.SIGKILL, 5),
        ("after_checkpoint", -signal.SIGKILL, 8),
        ("export", -signal.SIGKILL, 8),
    ]
    for number, (point, code, latest) in enumerate(expected):
        attempt = _attempt(tmp_path, module, f"attempt{number}", point)
        output = (attempt.stdout + attempt.stderr)[-3000:]
        assert attempt.returncode == code, (point, output)
        assert _latest(tmp_path) == latest, (point, output)
        if point == "sigterm_mid_window":
            assert attempt.stdout.strip().splitlines()[-1] == (
                "interrupted at window 5 of 8; checkpoint saved; re-run the same command to resume"
            ), output
        assert not os.path.exists(
            tmp_path / f"attempt{number}" / "model_run" / run_record.FILE_NAME
        )

    resumed, resumed_run = _run(tmp_path, "last", module_file=module, **SETTINGS)
    assert not glob.glob(str(tmp_path / ".ga_tfx_resume" / "*"))  # done: cleaned up
    record = run_record.read(resumed_run)
    assert (record.resumed_from_window, record.windows, record.windows_this_run) == (8, 8, 0)

    uninterrupted, plain_run = _run(tmp_path, "uninterrupted", module_file=module, **SETTINGS)
    assert run_record.read(plain_run).resumed_from_window is None
    got, want = _saved_variables(resumed), _saved_variables(uninterrupted)
    assert set(got) == set(want) and len(want) >= 8  # weights, AccumBN statistics, ...
    diff = max(float(np.max(np.abs(got[k] - want[k]))) for k in want)
    print(f"max |w_resumed - w_uninterrupted| over {len(want)} tensors = {diff:.3g}")
    # float32 with deterministic ops: the same computations in the same order, so the resumed
    # weights are bitwise those of the uninterrupted run; 1e-6 is the bound.
    assert diff <= 1e-6
