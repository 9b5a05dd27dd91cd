"""Crash and resume, SavedModel export and reload of accumulation models."""

import ga_tfx
from ga_tfx._keras import keras, tf

import numpy as np
import pytest

from tests.helpers import classification_data, iterations, max_weight_diff, mlp, sparse_ce

MICRO, K = 6, 4


class _Crash(keras.callbacks.Callback):
    """Raises once training reaches ``epoch``/``batch`` (a simulated preemption)."""

    def __init__(self, epoch, batch):
        super().__init__()
        self.epoch, self.batch, self.current_epoch = epoch, batch, 0

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if self.current_epoch == self.epoch and batch >= self.batch:
            raise RuntimeError("simulated preemption")


def _accumulating(policy):
    model = ga_tfx.wrap_model(mlp(), accum_steps=K, partial_window=policy)
    model.compile(keras.optimizers.Adam(1e-2), sparse_ce())
    return model


@pytest.mark.parametrize("policy", ["apply", "carry"])
def test_crash_and_resume_with_backup_and_restore(tmp_path, policy):
    # 86 samples: 15 micro-batches per epoch, so "carry" has a window pending across epochs,
    # which the backup must contain for the resumed run to be exact.
    x, y = classification_data(n=86)
    uninterrupted = _accumulating(policy)
    uninterrupted.fit(x, y, batch_size=MICRO, epochs=3, shuffle=False, verbose=0)

    backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
    crashed = _accumulating(policy)
    with pytest.raises(RuntimeError, match="preemption"):
        crashed.fit(
            x,
            y,
            batch_size=MICRO,
            epochs=3,
            shuffle=False,
            verbose=0,
            callbacks=[backup, _Crash(epoch=1, batch=0)],
        )
    if policy == "carry":  # the backup of epoch 0 holds a window of 3 pending micro-batches
        assert int(crashed.window_core.micro_steps.numpy()) == 3

    resumed = _accumulating(policy)  # a new process: fresh model, same backup directory
    resumed.fit(x, y, batch_size=MICRO, epochs=3, shuffle=False, verbose=0, callbacks=[backup])
    assert iterations(resumed.optimizer) == iterations(uninterrupted.optimizer)
    assert max_weight_diff(uninterrupted, resumed) == 0.0


def test_saved_model_serves_the_in_memory_outputs_and_reloads_for_training(tmp_path):
    x, y = classification_data(n=96)
    model = _accumulating("apply")
    model.fit(x, y, batch_size=MICRO, epochs=1, shuffle=False, verbose=0)
    path = str(tmp_path / "saved_model")
    model.save(path, save_format="tf")

    served = tf.saved_model.load(path).signatures["serving_default"]
    assert set(served.structured_input_signature[1]) == {"x"}  # no accumulation inputs
    outputs = served(x=tf.constant(x))
    (served_logits,) = outputs.values()
    np.testing.assert_allclose(served_logits.numpy(), model.predict(x, verbose=0), atol=1e-6)

    keras_path = str(tmp_path / "model.keras")  # Keras format: weights + optimizer state
    model.save(keras_path)
    reloaded = keras.models.load_model(keras_path)
    assert isinstance(reloaded, ga_tfx.GradientAccumulateModel)
    assert reloaded.accum_steps == K
    assert max_weight_diff(model, reloaded) == 0.0
    # Both continue for another epoch: same updates, same weights.
    model.fit(x, y, batch_size=MICRO, epochs=1, shuffle=False, verbose=0)
    reloaded.fit(x, y, batch_size=MICRO, epochs=1, shuffle=False, verbose=0)
    assert iterations(reloaded.optimizer) == iterations(model.optimizer) == 8
    assert max_weight_diff(model, reloaded) <= 1e-6


def test_unwrapped_export_has_no_accumulation_state(tmp_path):
    x, y = classification_data(n=48)
    model = _accumulating("apply")
    model.fit(x, y, batch_size=MICRO, epochs=1, shuffle=False, verbose=0)
    plain = ga_tfx.unwrap_model(model)
    assert not isinstance(plain, ga_tfx.GradientAccumulateModel)
    path = str(tmp_path / "plain")
    tf.saved_model.save(plain, path)
    loaded = tf.saved_model.load(path)
    saved_variables = {v.name for v in loaded.variables}
    assert saved_variables == {v.name for v in plain.variables}
    assert not any("gradient_accumulator" in name for name in saved_variables)
    np.testing.assert_allclose(
        loaded(tf.constant(x)).numpy(), model.predict(x, verbose=0), atol=1e-6
    )


def test_gradient_accumulate_model_config_round_trip():
    inputs = keras.Input((8,))
    outputs = keras.layers.Dense(3)(inputs)
    model = ga_tfx.GradientAccumulateModel(
        accum_steps=3,
        partial_window="drop",
        agc_clip_factor=0.02,
        agc_exclude=["*dense*"],
        inputs=inputs,
        outputs=outputs,
    )
    clone = ga_tfx.GradientAccumulateModel.from_config(model.get_config())
    assert clone.accumulation_config() == model.accumulation_config()
    assert clone.accumulation_config()["agc_clip_factor"] == 0.02


def test_a_config_that_leaves_out_functions_says_so_when_written():
    """A config holds no functions: a callable schedule is written as its first K and
    ``transforms`` are left out, with a warning naming them (a model loaded from it predicts as
    saved; trained, it would be a constant K without them). A config of settings alone warns
    nothing."""
    import warnings

    def schedule(window):
        return tf.where(window < 2, 2, 4)

    def halve(pairs):
        return [(g * 0.5, v) for g, v in pairs]

    model = ga_tfx.wrap_model(mlp(seed=1), schedule)
    with pytest.warns(UserWarning, match=r"leaves out the callable schedule accum_steps=<func"):
        config = model.get_config()
    assert config["accum_steps"] == 2 and config["accum_schedule"] is None
    optimizer = ga_tfx.GradientAccumulateOptimizer(
        keras.optimizers.SGD(0.1), accum_steps=3, transforms=[("halve", halve)]
    )
    with pytest.warns(UserWarning, match=r"leaves out transforms=\[\('halve', <function"):
        assert optimizer.get_config()["accum_steps"] == 3
    plain = ga_tfx.wrap_model(mlp(seed=1), 3, accum_schedule="0:3,5:6")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        assert plain.get_config()["accum_schedule"] == "0:3,5:6"
