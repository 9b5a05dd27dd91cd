"""Bad input fails early with an error naming the bad value and what is allowed."""

import ga_tfx
from ga_tfx import _tf_keras_internals as internals
from ga_tfx._keras import keras

import numpy as np
import pytest

from tests.helpers import mlp


@pytest.mark.parametrize(
    "value, error, match",
    [
        (0, ValueError, r"accum_steps must be an integer >= 1 .* got 0"),
        (-3, ValueError, r"got -3"),
        (2.5, TypeError, r"got 2.5 of type float"),
        (4.0, TypeError, r"got 4.0 of type float"),
        (None, TypeError, r"got None of type NoneType"),
        (True, TypeError, r"got True of type bool"),
        ("4", TypeError, r"got '4' of type str"),
    ],
)
def test_bad_accum_steps_everywhere(value, error, match):
    with pytest.raises(error, match=match):
        ga_tfx.wrap_model(mlp(), accum_steps=value)
    with pytest.raises(error, match=match):
        ga_tfx.GradientAccumulateOptimizer(keras.optimizers.SGD(), accum_steps=value)
    inputs = keras.Input((2,))
    with pytest.raises(error, match=match):
        ga_tfx.GradientAccumulateModel(
            accum_steps=value, inputs=inputs, outputs=keras.layers.Dense(1)(inputs)
        )


def test_numpy_integers_are_accepted():
    import numpy as np

    assert ga_tfx.wrap_model(mlp(), accum_steps=np.int64(3)).accum_steps == 3


@pytest.mark.parametrize("optimizer", ["adam", None, object(), keras.losses.MeanSquaredError()])
def test_optimizer_that_is_not_an_optimizer(optimizer):
    with pytest.raises(TypeError, match="optimizer must be a tf-keras optimizer instance"):
        ga_tfx.GradientAccumulateOptimizer(optimizer, accum_steps=2)


@pytest.mark.parametrize("model", [None, "model.h5", keras.layers.Dense(3), object()])
def test_model_that_is_not_a_model(model):
    with pytest.raises(TypeError, match="Expected a tf.keras .Keras 2. Model"):
        ga_tfx.wrap_model(model, accum_steps=2)


def test_a_keras_3_model_is_rejected_by_name():
    import keras as keras3  # Keras 3 is installed beside tf-keras

    model = keras3.Sequential([keras3.Input((2,)), keras3.layers.Dense(1)])
    with pytest.raises(TypeError, match="Keras 3 `keras.Model` is not supported"):
        ga_tfx.wrap_model(model, accum_steps=2)


def test_bad_partial_window_policy():
    with pytest.raises(ValueError, match=r"partial_window must be one of .*'apply'.*got 'keep'"):
        ga_tfx.wrap_model(mlp(), accum_steps=2, partial_window="keep")


def test_wrapping_twice_is_refused():
    model = ga_tfx.wrap_model(mlp(), accum_steps=2)
    with pytest.raises(ValueError, match="already a gradient accumulation model"):
        ga_tfx.wrap_model(model, accum_steps=2)


@pytest.mark.parametrize("bad", [3, 6, 0, -4, 8.0, True, "8"])
def test_steps_per_execution_must_be_whole_windows(bad):
    model = ga_tfx.wrap_model(mlp(), accum_steps=4)
    with pytest.raises(ValueError, match=rf"steps_per_execution={bad!r} .* a multiple of 4 \(4, 8"):
        model.compile("sgd", "mse", steps_per_execution=bad)


@pytest.mark.parametrize("steps, expected", [(None, 4), (1, 4), (4, 4), (8, 8), (np.int64(12), 12)])
def test_steps_per_execution_counts_micro_batches_in_whole_windows(steps, expected):
    model = ga_tfx.wrap_model(mlp(), accum_steps=4)
    model.compile("sgd", "mse", steps_per_execution=steps)
    assert int(internals.steps_per_execution(model).numpy()) == expected


def test_model_without_trainable_variables():
    import numpy as np

    model = mlp()
    model.trainable = False
    wrapped = ga_tfx.wrap_model(model, accum_steps=2)
    wrapped.compile("sgd", "mse")
    with pytest.raises(ValueError, match="no trainable variables"):
        wrapped.fit(
            np.zeros((4, 8), "float32"), np.zeros((4, 3), "float32"), batch_size=2, verbose=0
        )


def test_parameter_server_training_is_refused_by_name():
    """Under ParameterServerStrategy Keras gives the model a ``ClusterCoordinator`` at
    ``compile`` (``model._cluster_coordinator``) and dispatches its train function to workers;
    the engine's train function refuses it before building anything. (A real parameter-server
    cluster needs server processes; the attribute is what Keras' compile sets, and
    ``make_train_function`` is what ``fit`` calls.)"""
    model = ga_tfx.wrap_model(mlp(), accum_steps=2)
    model.compile("sgd", "mse")
    model._cluster_coordinator = object()
    with pytest.raises(NotImplementedError, match="ParameterServerStrategy is not supported"):
        model.make_train_function()
    assert model.window_core is None  # refused before the buffers were built
