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


def _library_conversions(monkeypatch):
    """The functions of ga-tfx (other than its bridge to the user's code,
    ``_tf_keras_internals.autograph_converted``) that autograph is asked to convert from
    here on: a ``tf.function`` traced with autograph on, or a ``tf_convert``."""
    from tensorflow.python.autograph.impl import api

    converted = []
    original = api.converted_call

    def recording(f, *args, **kwargs):
        module = getattr(f, "__module__", "") or ""
        if module.startswith("ga_tfx.") and module != "ga_tfx._tf_keras_internals":
            converted.append(f"{module}.{getattr(f, '__qualname__', f)}")
        return original(f, *args, **kwargs)

    monkeypatch.setattr(api, "converted_call", recording)
    return converted


@pytest.mark.parametrize("policy", ["apply", "drop"])
def test_training_loop_traces_its_window_without_converting_the_library(monkeypatch, policy):
    """A TrainingLoop run (whole windows, the epoch's short last one ended by the policy)
    asks autograph to convert none of the library's functions: its window is the runner's
    written-out ``tf.while_loop`` (reading ``get_next_as_optional``), not an autograph
    ``while`` with ``break``."""
    x, y = classification_data(n=7 * MICRO)  # two windows of K=3, then one of 1
    model = mlp()
    loop = ga_tfx.TrainingLoop(
        model,
        keras.optimizers.SGD(0.1),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none"),
        tf.data.Dataset.from_tensor_slices((x, y)).batch(MICRO),
        accum_steps=K,
        partial_window=policy,
        verbose=False,
        stop_on_signals=False,
    )
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
