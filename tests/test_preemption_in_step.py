"""SIGTERM while a training step is running (issue 28): the step finishes, a checkpoint is
saved, the run stops with the one line, and a new run resumes to the uninterrupted weights.

The signal is sent from inside the step: the model's first layer is the identity through a
host function (``tf.numpy_function``) that, on its n-th call, sends SIGTERM to the process and
then sleeps 0.2 s, so the signal arrives while TensorFlow runs the step (Python's handler
runs in the main thread once the step returns). The reference is the same training without
the signal; one device, deterministic ops: the weights must be equal (max |dw| == 0).
"""

import ga_tfx
from ga_tfx import keras, tf
from ga_tfx.preemption import TrainingInterrupted

import os
import signal
import time

import numpy as np
import pytest

from tests.helpers import classification_data, max_weight_diff

pytestmark = []  # fast tier (the loop); the Trainer's case is marked tfx


class SignalDuringStep:
    """The identity as a host function; sends SIGTERM during its ``at_call``-th call."""

    def __init__(self, at_call):
        self.at_call, self.calls, self.sent = at_call, 0, False

    def __call__(self, array):
        self.calls += 1
        if self.calls == self.at_call:
            os.kill(os.getpid(), signal.SIGTERM)
            self.sent = True
            time.sleep(0.2)  # the step is still running when the signal arrives
        return array


def through_host(hook, t):
    """``t`` through the host function ``hook``, the identity for gradients."""

    @tf.custom_gradient
    def identity(value):
        out = tf.ensure_shape(tf.numpy_function(hook, [value], tf.float32), value.shape)
        return out, lambda grad: grad

    return identity(t)


def _model(hook=None):
    keras.utils.set_random_seed(5)
    inputs = keras.Input((8,))
    h = inputs
    if hook is not None:
        h = keras.layers.Lambda(lambda t: through_host(hook, t))(h)
    h = keras.layers.Dense(16, activation="tanh", name="hidden")(h)
    return keras.Model(inputs, keras.layers.Dense(3, name="logits")(h))


def _loop(model, checkpoint_dir=None):
    x, y = classification_data(n=96, seed=3)
    return ga_tfx.TrainingLoop(
        model,
        keras.optimizers.SGD(0.3, momentum=0.9),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none"),
        tf.data.Dataset.from_tensor_slices((x, y)).batch(8),
        4,
        checkpoint_dir=checkpoint_dir,
        verbose=False,
    )


def test_training_loop_stops_after_the_running_step_and_resumes_exactly(tmp_path):
    whole = _loop(_model())
    whole.run(epochs=2)

    hook = SignalDuringStep(at_call=7)  # the 7th micro-batch: window 2, mid-window
    first = _loop(_model(hook), str(tmp_path))
    with pytest.raises(TrainingInterrupted, match=r"interrupted at window 2; checkpoint saved"):
        first.run(epochs=2)
    # the running window finished, then it stopped
    assert hook.sent and first.window_core.windows == 2
    second = _loop(_model(), str(tmp_path))
    second.run(epochs=2)
    assert second.window_core.windows == whole.window_core.windows == 6
    assert max_weight_diff(second.model, whole.model) == 0.0


def test_training_loops_interruption_counts_windows_a_skipped_one_included(tmp_path):
    """TrainingLoop's message counts windows, as the Trainer's: a signal during window 3, the
    first window skipped as non-finite (a NaN input), says window 3 (2 updates applied)."""
    x, y = classification_data(n=96, seed=3)
    x[0] = np.nan  # window 1's gradient: skipped
    hook = SignalDuringStep(at_call=9)  # window 3's first micro-batch
    loop = ga_tfx.TrainingLoop(
        _model(hook),
        keras.optimizers.SGD(0.3),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none"),
        tf.data.Dataset.from_tensor_slices((x, y)).batch(8),
        4,
        checkpoint_dir=str(tmp_path),
        verbose=False,
    )
    with pytest.raises(TrainingInterrupted) as raised:
        loop.run(epochs=2)
    assert str(raised.value) == (
        "interrupted at window 3; checkpoint saved; re-run the same command to resume"
    )
    assert raised.value.windows_done == 3 and raised.value.total_windows is None
    assert (loop.window_core.windows, loop.window_core.updates) == (3, 2)


@pytest.mark.tfx
@pytest.mark.slow  # two Trainer runs: about 17 s
def test_the_trainer_stops_after_the_running_step_and_resumes_exactly(tmp_path):
    from ga_tfx.components.trainer.preemption import interruption

    from tests.taxi import MODEL_MODULE
    from tests.test_trainer_component import (
        BIG_BATCH_TOLERANCE,
        _exported_weights,
        _max_diff,
        _plain_keras_big_batch,
        _run,
    )

    hparams = {"batchnorm": False, "optimizer": "sgd_momentum"}
    module = tmp_path / "signal_module.py"
    # The marker's path is written into the module: TFX loads a module file without __file__
    # on Python 3.12+ (importlib.util.spec_from_loader with an origin; 3.10 set it).
    module.write_text(
        MODEL_MODULE
        + """
import os, signal, time

_calls = [0]
_SENT = SENT_PATH  # once: the re-run (which may import the module again) trains on


def _hook(array):
    _calls[0] += 1
    if _calls[0] == 5 and not os.path.exists(_SENT):  # the 3rd window's first micro-batch
        open(_SENT, "w").close()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)  # the step is still running when the signal arrives
    return array


@tf.custom_gradient
def _through_host(value):
    out = tf.ensure_shape(tf.numpy_function(_hook, [value], tf.float32), value.shape)
    return out, lambda grad: grad


_plain_build = build_model


def build_model(hparams):
    model = _plain_build(hparams)
    slow = keras.layers.Lambda(lambda t: _through_host(t))(model.output)
    wrapped = keras.Model(model.inputs, slow)
    # One window (K=2 micro-batches) per call: "the running step" is then the 3rd window
    # (unset, fit paces its calls and a call holds as many windows as fit in about 0.2 s).
    wrapped.compile(model.optimizer, model.loss, steps_per_execution=2)
    return wrapped
""".replace("SENT_PATH", repr(str(tmp_path / "signal_module.sent")))
    )
    settings = dict(micro_batch_size=8, accum_steps=2, num_steps=4, hyperparameters=hparams)
    with pytest.raises(Exception) as raised:
        _run(tmp_path, "signal", module_file=str(module), **settings)
    stopped = interruption(raised.value)
    assert stopped is not None, raised.value
    assert str(stopped) == (
        "interrupted at window 3 of 4; checkpoint saved; re-run the same command to resume"
    )
    # The re-run (no more signals) resumes from update 3.
    serving_dir, _ = _run(tmp_path, "signal", module_file=str(module), **settings)
    reference = _plain_keras_big_batch(hparams, batch_size=16, updates=4)
    assert _max_diff(_exported_weights(serving_dir), reference.get_weights()) <= BIG_BATCH_TOLERANCE
