"""The Trainer's checkpoint interval in a compiled Kubeflow job
(``settings.KUBEFLOW_CHECKPOINT_EVERY_SECONDS``): on open-source KFP a preempted Trainer keeps
only its last periodic checkpoint, so the interval is the work lost; its cost is the save."""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx.components.trainer import checkpoints
from ga_tfx.components.trainer import model as model_lib
from ga_tfx.components.trainer import settings as settings_lib
from ga_tfx.pipelines import digits

import statistics
import time

import numpy as np
import pytest

pytestmark = [pytest.mark.tfx]  # the Trainer's package imports TFX


def test_the_compiled_job_checkpoints_every_minute_unless_the_user_chose_an_interval():
    assert settings_lib.DEFAULTS["checkpoint_every_seconds"] is None  # unset: not a value
    assert settings_lib.kubeflow_checkpoint_every_seconds(None) == 60.0
    assert settings_lib.kubeflow_checkpoint_every_seconds(30.0) == 30.0
    # A user who asks for the local interval gets it (a given 600 once became 60).
    given = settings_lib.CHECKPOINT_EVERY_SECONDS
    assert settings_lib.kubeflow_checkpoint_every_seconds(given) == given == 600.0
    assert settings_lib.KUBEFLOW_CHECKPOINT_EVERY_SECONDS < given


def test_an_unset_interval_is_the_local_600_seconds_outside_kubeflow():
    given = dict(accum_steps=2, micro_batch_size=8, label_key=digits.LABEL_KEY)
    settings = settings_lib.from_dict(given)
    assert settings.checkpoint_every_seconds is None and settings.checkpoint_seconds == 600.0
    chosen = settings_lib.from_dict(dict(given, checkpoint_every_seconds=5))
    assert chosen.checkpoint_seconds == 5.0


def test_a_digits_checkpoint_costs_under_2_percent_of_the_kubeflow_interval(tmp_path):
    settings = settings_lib.from_dict(
        dict(accum_steps=8, micro_batch_size=16, label_key=digits.LABEL_KEY)
    )
    model = model_lib.accumulation_model(
        digits.build_model, {}, settings, base_model_dir=None, transform_output=None
    )
    x = {digits.FEATURES_KEY: np.random.default_rng(0).random((128, 64), dtype=np.float32)}
    model.fit(x, np.arange(128) % 10, batch_size=16, epochs=1, verbose=0)  # slots exist
    saves = checkpoints.UpdateCheckpoint(
        model, str(tmp_path), total_windows=1, every_updates=1, every_seconds=1e9
    )._write_manager
    seconds = []
    for number in range(6):
        began = time.perf_counter()
        saves.save(checkpoint_number=number)
        seconds.append(time.perf_counter() - began)
    median = statistics.median(seconds[1:])
    print(f"digits checkpoint save: median {median:.3f} s (first {seconds[0]:.3f} s)")
    assert median / settings_lib.KUBEFLOW_CHECKPOINT_EVERY_SECONDS < 0.02
