"""The one traced window runner (ga_tfx/window/runner.py), as fit and TrainingLoop use it.

Both front-ends trace the library's window code (its loops, the micro-batch step, the window
end, the end of the data) without autograph's conversion, which was most of a small run's
start-up (benchmarks/TRAINING_LOOP_START.md); the user's code in it (a layer's ``call``, a
loss, ``inputs_fn``) is still converted where it is called, as a ``tf.function`` would.
Numbers: SGD, float32, weights compared to 1e-6 (the same ops in another order: round-off is
~1e-7; a layer whose ``if`` was not taken changes the weights by >= 1e-3 here).
"""

import ga_tfx
from ga_tfx import keras, tf

import pytest

from tests.helpers import classification_data, max_weight_diff, mlp
from tests.test_keras_contract import _HalveIfPositive

pytestmark = []  # fast tier; library only (no TFX)

MICRO, K = 8, 3


_BRIDGES = ("ga_tfx._tf_internals", "ga_tfx._tf_keras_internals")


def _library_conversions(monkeypatch):
    """The functions of ga-tfx (other than its bridge to the user's code,
    ``_tf_internals.autograph_converted``, re-exported by ``_tf_keras_internals``) that
    autograph is asked to convert from here on: a ``tf.function`` traced with autograph on,
    or a ``tf_convert``."""
    from tensorflow.python.autograph.impl import api

    converted = []
    original = api.converted_call

    def recording(f, *args, **kwargs):
        module = getattr(f, "__module__", "") or ""
        if module.startswith("ga_tfx.") and module not in _BRIDGES:
            converted.append(f"{module}.{getattr(f, '__qualname__', f)}")
        return original(f, *args, **kwargs)

    monkeypatch.setattr(api, "converted_call", recording)
    return converted


def _loop(x, y, policy="apply"):
    return ga_tfx.TrainingLoop(
        mlp(),
        keras.optimizers.SGD(0.1),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none"),
        tf.data.Dataset.from_tensor_slices((x, y)).batch(MICRO),
        accum_steps=K,
        partial_window=policy,
        verbose=False,
        stop_on_signals=False,
    )


@pytest.mark.parametrize("policy", ["apply", "drop"])
def test_training_loop_traces_its_window_without_converting_the_library(monkeypatch, policy):
    """A TrainingLoop run (whole windows, the epoch's short last one ended by the policy)
    asks autograph to convert none of the library's functions: its window is the runner's
    written-out ``tf.while_loop`` (reading ``get_next_as_optional``), not an autograph
    ``while`` with ``break``."""
    x, y = classification_data(n=7 * MICRO)  # two windows of K=3, then one of 1
    loop = _loop(x, y, policy)
    converted = _library_conversions(monkeypatch)
    loop.run(epochs=2)
    assert loop.window_core.updates == (
        6 if policy == "apply" else 4
    )  # it did train, ends included
    assert converted == []


def test_fit_traces_its_execution_without_converting_the_library(monkeypatch):
    """The same for fit's train function (several windows per execution, a short last one)."""
    x, y = classification_data(n=7 * MICRO)
    model = ga_tfx.wrap_model(mlp(), accum_steps=K)
    model.compile(keras.optimizers.SGD(0.1), "sparse_categorical_crossentropy")
    converted = _library_conversions(monkeypatch)
    model.fit(x, y, batch_size=MICRO, epochs=2, shuffle=False, verbose=0)
    assert model.window_core.updates == 6
    assert converted == []


def _halving_model(by_tensor_ops):
    keras.utils.set_random_seed(2)
    inputs = keras.Input((8,))
    h = keras.layers.Dense(16, activation="tanh")(inputs)
    h = _HalveIfPositive(by_tensor_ops)(h)
    return keras.Model(inputs, keras.layers.Dense(3)(h))


def _doubled_if_positive_loss(by_tensor_ops):
    per_example = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def loss_fn(targets, outputs):
        loss = tf.reduce_mean(per_example(targets, outputs))
        if by_tensor_ops:
            return tf.where(loss > 0.0, loss * 2.0, loss)
        if loss > 0.0:
            loss = loss * 2.0
        return loss

    return loss_fn


def test_training_loop_converts_the_users_code_with_python_control_flow_on_tensors():
    """A user's layer and ``loss_fn`` with ``if`` on a tensor train in TrainingLoop as the
    same model and loss written in tensor ops (the library's window is not converted, the
    user's code is, where it is called)."""
    x, y = classification_data(n=6 * MICRO, seed=4)

    def trained(by_tensor_ops):
        model = _halving_model(by_tensor_ops)
        loop = ga_tfx.TrainingLoop(
            model,
            keras.optimizers.SGD(0.5),
            _doubled_if_positive_loss(by_tensor_ops),
            tf.data.Dataset.from_tensor_slices((x, y)).batch(MICRO),
            accum_steps=K,
            verbose=False,
            stop_on_signals=False,
        )
        loop.run(epochs=2)
        return model

    users, tensor_ops = trained(False), trained(True)
    assert max_weight_diff(users, tensor_ops) <= 1e-6


@pytest.mark.parametrize(
    "policy, ended, windows", [("apply", True, 1), ("drop", True, 0), ("carry", False, 0)]
)
def test_end_pending_window_says_whether_a_window_ended(policy, ended, windows):
    """``end_pending_window`` on a short pending window (2 of K=3) returns whether it ended
    (applied, dropped; not carried), what fit's train function resets its execution by,
    without reading the pending count again; with none pending, ``False``."""
    x, y = classification_data(n=6 * MICRO)
    loop = _loop(x, y, policy)
    loop.run(epochs=1, max_micro_batches=2)
    runner, core = loop._runner, loop.window_core
    assert (core.windows, runner.pending()) == (0, 2)
    assert runner.end_pending_window() is ended
    assert (core.windows, runner.pending()) == (windows, 0 if ended else 2)
    if ended:
        assert runner.end_pending_window("apply") is False  # none pending


class _HostReads:
    """Counts host reads of tensors (``.numpy()``, ``int()``, ``float()``, ``bool()`` of an
    eager tensor or variable: each one copies from the device, and waits for it)."""

    def __init__(self):
        from tensorflow.python.framework import ops

        self._code = ops._EagerTensorBase._numpy.__code__
        self.count = 0

    def __enter__(self):
        import sys

        def profile(frame, event, _):
            if event == "call" and frame.f_code is self._code:
                self.count += 1

        sys.setprofile(profile)
        return self

    def __exit__(self, *_):
        import sys

        sys.setprofile(None)


def test_host_reads_per_call_of_fit_and_per_epoch_of_training_loop(monkeypatch):
    """The host reads of the hot paths, counted. fit, paced (the default): 3 per call of the
    train function (``steps_per_execution`` as Keras' data handler left it, the core's
    ``records_written`` and its records; was 5: K and a read before each write of
    ``steps_per_execution`` too). TrainingLoop: 27 per epoch of 4 windows: per window the
    pending count, the micro-batches taken, ``records_written``, the records and the guard's
    non-finite count (5; was 9: K, the learning rate, windows and updates are in the window
    event); per epoch the call that finds the data's end (pending, taken, the pending count
    again, ``records_written``) and 3 of the epoch and data position (was 44 per epoch)."""
    from ga_tfx.engine.loop import WindowLoop

    x, y = classification_data(n=4 * K * MICRO)  # 4 windows per epoch
    model = ga_tfx.wrap_model(mlp(), accum_steps=K)
    model.compile(keras.optimizers.SGD(0.1), "sparse_categorical_crossentropy")
    model.fit(x, y, batch_size=MICRO, epochs=1, shuffle=False, verbose=0)  # traced
    calls, reads = [], _HostReads()
    original = WindowLoop.__call__

    def counted(self, iterator):
        calls.append(1)
        with reads:
            return original(self, iterator)

    monkeypatch.setattr(WindowLoop, "__call__", counted)
    model.fit(x, y, batch_size=MICRO, epochs=2, shuffle=False, verbose=0)
    assert len(calls) >= 2 and reads.count == 3 * len(calls)

    def loop_reads(epochs):
        loop = _loop(x, y)
        loop.run(epochs=1)  # traced
        with _HostReads() as counted_reads:
            loop.run(epochs=1 + epochs)
        return counted_reads.count

    assert loop_reads(3) - loop_reads(1) == 2 * 27
