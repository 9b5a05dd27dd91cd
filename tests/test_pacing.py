"""Call pacing: an unwatched fit runs many windows per call, with the same weights.

With ``steps_per_execution`` unset and no callback watching batches, ``fit`` runs as many whole
windows per call of the train function as take about 0.2 s (``ga_tfx.engine.pacing``). The
windows and their order do not change, so the weights are those of one window per call, bit
for bit, and those of the big batches the windows make up.
"""

import ga_tfx
from ga_tfx import _tf_keras_internals as internals
from ga_tfx._keras import keras, tf
from ga_tfx.engine import pacing

import pytest

from tests.helpers import (
    classification_data,
    iterations,
    max_weight_diff,
    mlp,
    sparse_ce,
    two_replica_strategy,
)
from tests.test_windows import MICRO, TOLERANCE, K, _BatchEnds, _train_on_windows, _windows

EPOCHS = 3


def _make_optimizer():
    return keras.optimizers.SGD(0.1, momentum=0.9)  # sees the gradient's scale


def _fit(policy="apply", callbacks=None, verbose=0, **compile_kwargs):
    """Trains on 86 samples (15 micro-batches per epoch) and returns the model and the
    micro-batches of each call of its train function."""
    x, y = classification_data(n=86)
    model = ga_tfx.wrap_model(mlp(), accum_steps=K, partial_window=policy)
    model.compile(_make_optimizer(), sparse_ce(), **compile_kwargs)
    loop = model.make_train_function()
    calls = []
    run_execution = loop._run_execution

    def counted(iterator):
        calls.append(int(internals.steps_per_execution(model).numpy()))
        return run_execution(iterator)

    loop._run_execution = counted
    history = model.fit(
        x, y, batch_size=MICRO, epochs=EPOCHS, shuffle=False, verbose=verbose, callbacks=callbacks
    )
    return model, calls, history


@pytest.mark.parametrize("policy", ["apply", pytest.param("drop", marks=pytest.mark.slow), "carry"])
def test_an_unwatched_fit_runs_several_windows_per_call_with_the_same_weights(policy):
    x, y = classification_data(n=86)
    windows = _windows(x, y, MICRO, K, epochs=EPOCHS, policy=policy)
    reference = _train_on_windows(windows, _make_optimizer)
    paced, calls, history = _fit(policy)
    one_window, one_window_calls, one_window_history = _fit(policy, steps_per_execution=K)
    # The first call is traced (slow: one window follows); later ones take a few ms a window.
    assert max(calls) > K and len(calls) < len(one_window_calls)
    assert max(one_window_calls) == K
    assert iterations(paced.optimizer) == iterations(reference.optimizer) == len(windows)
    assert max_weight_diff(reference, paced) <= TOLERANCE
    # The same windows in the same order: the same floating-point operations.
    assert max_weight_diff(one_window, paced) == 0.0
    assert history.history["loss"] == one_window_history.history["loss"]
    assert int(internals.steps_per_execution(paced).numpy()) == K  # ready for the next fit
    assert paced.train_function.pacer is None


def test_a_callback_that_watches_batches_sees_every_update():
    ends = _BatchEnds()
    model, calls, _ = _fit(callbacks=[ends])
    assert max(calls) == K
    assert ends.count == iterations(model.optimizer) == EPOCHS * 4


def test_the_progress_bar_does_not_stop_pacing(capsys):
    _, calls, _ = _fit(verbose=1)
    assert max(calls) > K
    assert "15/15" in capsys.readouterr().out  # it still counts every micro-batch


@pytest.mark.parametrize("steps", [K, 2 * K])
def test_an_explicit_steps_per_execution_is_honoured_exactly(steps):
    _, calls, _ = _fit(steps_per_execution=steps)
    assert max(calls) == steps


def test_auto_paces_also_where_a_callback_watches_batches():
    """compile(steps_per_execution="auto"), as Keras' own: batch-level callbacks then run once
    per call, after its last update."""
    ends = _BatchEnds()
    paced, calls, history = _fit(callbacks=[ends], steps_per_execution="auto")
    one_window, _, one_window_history = _fit(steps_per_execution=K)
    assert max(calls) > K
    assert ends.count == len(calls) < iterations(paced.optimizer)
    assert max_weight_diff(one_window, paced) == 0.0
    assert history.history["loss"] == one_window_history.history["loss"]
    assert int(internals.steps_per_execution(paced).numpy()) == K


@pytest.mark.parametrize("value", ["Auto", "8"])
def test_other_strings_are_refused_naming_auto(value):
    model = ga_tfx.wrap_model(mlp(), accum_steps=K)
    with pytest.raises(ValueError, match=f"steps_per_execution='{value}'.*'auto'"):
        model.compile(_make_optimizer(), sparse_ce(), steps_per_execution=value)


def test_several_workers_run_the_compiled_windows(monkeypatch):
    """Under MultiWorkerMirroredStrategy every worker must run the same windows per call;
    timings measured apart need not agree, so fit does not pace."""
    monkeypatch.setattr(pacing.internals, "in_multi_worker_mode", lambda strategy: True)
    _, calls, _ = _fit()
    assert max(calls) == K


def test_one_process_strategies_are_not_multi_worker():
    assert not internals.in_multi_worker_mode(tf.distribute.get_strategy())
    assert not internals.in_multi_worker_mode(two_replica_strategy())
    model = ga_tfx.wrap_model(mlp(), accum_steps=K)
    model.compile(_make_optimizer(), sparse_ce())
    assert pacing.should_pace(model, [])
    assert not pacing.should_pace(model, [_BatchEnds()])
    assert pacing.should_pace(model, [keras.callbacks.ProgbarLogger(), keras.callbacks.History()])


class _Stopped(Exception):
    pass


class _Interrupt(keras.callbacks.Callback):
    """Ends fit with an error at the first epoch end, as Ctrl-C or a failing callback would."""

    def on_epoch_end(self, epoch, logs=None):
        raise _Stopped


def test_an_interrupted_fit_leaves_the_compiled_windows():
    model, calls, _ = _fit()
    x, y = classification_data(n=86)
    with pytest.raises(_Stopped):
        model.fit(x, y, batch_size=MICRO, epochs=2, verbose=0, callbacks=[_Interrupt()])
    assert model.train_function.pacer is None
    assert int(internals.steps_per_execution(model).numpy()) == K
    ends = _BatchEnds()
    model.fit(x, y, batch_size=MICRO, epochs=1, verbose=0, callbacks=[ends])
    assert ends.count == 4


@pytest.mark.parametrize(
    "seconds, windows, expected",
    [
        (0.01, 1, 20),  # 10 ms a window: 20 windows in 0.2 s
        (0.5, 1, 1),  # slower than the target: one window
        (0.01, 0.5, 10),  # a short window counts as its fraction
        (1e-9, 1, 4096),  # a (mis)measured tiny duration: the cap, 4096 windows a call
        (0.0, 1, 1),
    ],
)
def test_the_pacer_fits_whole_windows_into_the_target_duration(seconds, windows, expected):
    assert pacing.CallPacer(call_seconds=0.2).next_windows(seconds, windows) == expected
