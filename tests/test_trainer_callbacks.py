"""The Trainer's ``fit`` callbacks leave fit's pacing: a call of the train function runs
several windows (``ga_tfx.engine.pacing``), not one per window, with every callback the
Trainer installs (``fit_windows.callbacks_of`` and, with an adaptive K, ``StopAfterWindows``).

Fast tier: the Trainer's own callbacks on a small accumulation model, no TFX pipeline run.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx import keras, tf
from ga_tfx.components.trainer import checkpoints, fit_windows, run_log

import numpy as np
import pytest

pytestmark = [pytest.mark.tfx]  # run_fn imports the Trainer's TFX data layer

K, MICRO, WINDOWS = 2, 4, 64


class _Calls(keras.callbacks.Callback):
    """Counts the calls of the train function (one batch end each) without stopping fit's
    pacing itself (``follows_pacing``)."""

    follows_pacing = True

    def __init__(self):
        super().__init__()
        self.calls = 0

    def on_train_batch_end(self, batch, logs=None):
        self.calls += 1


def test_every_callback_the_trainer_installs_leaves_fit_pacing(tmp_path):
    keras.utils.set_random_seed(1)
    inputs = keras.Input(shape=(3,))
    model = ga_tfx.wrap_model(keras.Model(inputs, keras.layers.Dense(1)(inputs)), accum_steps=K)
    model.compile(keras.optimizers.SGD(0.01), "mse")  # steps_per_execution unset: fit may pace
    x = np.random.default_rng(0).normal(size=(WINDOWS * K * MICRO, 3)).astype("float32")
    data = tf.data.Dataset.from_tensor_slices((x, x.sum(axis=1, keepdims=True))).batch(MICRO)
    logger = run_log.AccumulationLogger(str(tmp_path / "run" / "ga_tfx"), total_windows=WINDOWS)
    checkpoint = checkpoints.UpdateCheckpoint(
        model,
        str(tmp_path / "resume"),
        total_windows=WINDOWS,
        every_updates=WINDOWS,
        every_seconds=1e9,
    )
    assert checkpoint.restore() == 0
    installed = fit_windows.callbacks_of(str(tmp_path / "run"), logger, checkpoint)
    calls = _Calls()
    try:
        model.fit(
            data,
            epochs=1,
            steps_per_epoch=WINDOWS * K,
            verbose=2,  # as the Trainer's fit: the display-only progress bar
            callbacks=installed + [fit_windows.StopAfterWindows(WINDOWS), calls],
        )
    finally:
        checkpoint.close()
    assert int(model.optimizer.iterations.numpy()) == checkpoint.windows_done == WINDOWS
    assert logger.schedule_used == [[0, K]] and logger.samples == WINDOWS * K * MICRO
    # Paced: the first call (traced) and the next run a window each, then each call as many as
    # take about 0.2 s (a few ms a window here); one window per call would be WINDOWS calls.
    assert calls.calls <= WINDOWS // 4, calls.calls


def test_a_checkpoint_of_the_pre_0_2_layout_is_refused_naming_its_key(tmp_path):
    """0.1.0 kept the model's window core under ``ga_window``: restored, its weights and
    optimizer would load and its counters would not (the run would start again from window 0
    on top of trained weights). The Trainer refuses it with the key and what to do."""
    old = tf.Module()
    old.ga_window = tf.Module()
    old.ga_window.windows = tf.Variable(5, dtype=tf.int64)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=old), str(tmp_path), 1).save()
    inputs = keras.Input(shape=(3,))
    model = ga_tfx.wrap_model(keras.Model(inputs, keras.layers.Dense(1)(inputs)), accum_steps=K)
    checkpoint = checkpoints.UpdateCheckpoint(
        model, str(tmp_path), total_windows=WINDOWS, every_updates=WINDOWS, every_seconds=1e9
    )
    with pytest.raises(
        ValueError, match=r"keeps the window core under 'model/ga_window/'.* remove"
    ):
        checkpoint.restore()
