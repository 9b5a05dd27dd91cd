"""The Trainer's checkpoint cadence, atomic checkpoint writes and stop-on-signal (no TFX).

A small accumulation model trained with ``fit`` and
:class:`~ga_tfx.components.trainer.checkpoints.UpdateCheckpoint`; the process-killing tests on
the full Trainer are in ``tests/test_preemption_kills.py`` (slow tier).
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx import keras, tf
from ga_tfx.components.trainer import checkpoints, preemption

import os
import signal
import time

import numpy as np
import pytest
from tensorflow.python.checkpoint import checkpoint_management

K, MICRO, WINDOWS = 2, 4, 7


def _model(**compile_kwargs):
    keras.utils.set_random_seed(1)
    inputs = keras.Input(shape=(3,))
    hidden = ga_tfx.AccumBatchNormalization()(keras.layers.Dense(4)(inputs))  # the model's K
    model = ga_tfx.wrap_model(keras.Model(inputs, keras.layers.Dense(1)(hidden)), accum_steps=K)
    model.compile(keras.optimizers.SGD(0.1, momentum=0.9), "mse", **compile_kwargs)
    return model


def _data(skip_windows=0):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(WINDOWS * K * MICRO, 3)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, x.sum(axis=1, keepdims=True))).batch(MICRO)
    return dataset.skip(skip_windows * K)


class _Saves(checkpoints.UpdateCheckpoint):
    """Records the update count of every checkpoint written."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.saved = []

    def save(self):
        before = self.saved_at
        super().save()
        if self.saved_at != before:
            self.saved.append(self.saved_at)


class _Before(keras.callbacks.Callback):
    """Runs ``action(n)`` before the n-th call of the train function (1-based; one window per
    call unless ``steps_per_execution`` says more), ahead of the checkpoint callback."""

    def __init__(self, action):
        super().__init__()
        self._action, self._calls = action, 0

    def on_train_batch_begin(self, batch, logs=None):
        self._calls += 1
        self._action(self._calls)


def _fit(model, *callbacks, done=0):
    """Trains the windows after the first ``done`` (the Trainer's resume: the data skips them)."""
    model.fit(
        _data(done),
        epochs=1,
        steps_per_epoch=(WINDOWS - done) * K,
        verbose=0,
        callbacks=list(callbacks),
    )


def _checkpoint(model, directory, kind=checkpoints.UpdateCheckpoint, **kwargs):
    """``kind(model, directory, ...)`` for this module's training: no periodic checkpoint
    unless ``kwargs`` ask for one."""
    kwargs = dict(dict(total_windows=WINDOWS, every_updates=100, every_seconds=1e9), **kwargs)
    return kind(model, str(directory), **kwargs)


def test_checkpoints_every_n_updates_and_at_the_end(tmp_path):
    model = _model(steps_per_execution=K)  # one window per call: the cadence, window by window
    saves = _Saves(model, str(tmp_path), total_windows=WINDOWS, every_updates=3, every_seconds=1e9)
    assert saves.restore() == 0
    _fit(model, saves)
    saves.save_final()
    assert saves.saved == [3, 6, 7]  # mid-epoch (one epoch of 7), then the final state
    state = tf.train.get_checkpoint_state(str(tmp_path))
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == ["ckpt-6", "ckpt-7"]


class _Calls(keras.callbacks.Callback):
    """Counts the calls of the train function without stopping fit's pacing (as the
    Trainer's own callbacks: ``follows_pacing``)."""

    follows_pacing = True

    def __init__(self):
        super().__init__()
        self.calls = 0

    def on_train_batch_end(self, batch, logs=None):
        self.calls += 1


def test_the_trainers_checkpoints_leave_fit_pacing_and_count_every_window(tmp_path):
    """UpdateCheckpoint watches call ends, not micro-batches: with it, ``fit`` still paces
    (several windows per call, the same weights bit for bit as one window per call), and
    every window is counted; a periodic checkpoint comes at the first call end at or past
    its due count."""
    one_per_call = _model(steps_per_execution=K)
    _fit(one_per_call)
    model, calls = _model(), _Calls()
    saves = _Saves(model, str(tmp_path), total_windows=WINDOWS, every_updates=3, every_seconds=1e9)
    saves.restore()
    _fit(model, calls, saves)
    saves.save_final()
    assert calls.calls < WINDOWS  # paced: the first call one window, the next ones more
    assert saves.windows_done == WINDOWS == int(model.optimizer.iterations.numpy())
    assert saves.saved[-1] == WINDOWS and all(n >= 3 for n in saves.saved)
    for a, b in zip(model.weights, one_per_call.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # A callback that watches batches without saying so still gets one window per call.
    watched, calls = _model(), _Calls()
    calls.follows_pacing = False
    _fit(watched, calls)
    assert calls.calls == WINDOWS


def test_several_windows_per_call_are_each_counted_and_resume_exactly(tmp_path):
    # compile(steps_per_execution=2K): calls of 2, 2, 2 and 1 windows (WINDOWS = 7).
    uninterrupted = _model(steps_per_execution=2 * K)
    saves = _checkpoint(uninterrupted, tmp_path / "whole", _Saves, every_updates=3)
    saves.restore()
    _fit(uninterrupted, saves)
    saves.save_final()
    assert saves.windows_done == WINDOWS == int(uninterrupted.optimizer.iterations.numpy())
    assert saves.saved == [4, 7]  # the first call end at or past 3 updates; the end

    # A stop requested as the second call (windows 3 and 4) begins takes effect at its end.
    model, stop = _model(steps_per_execution=2 * K), preemption.StopRequest()
    stopping = _checkpoint(model, tmp_path / "stopped", stop=stop)
    stopping.restore()
    request = _Before(lambda call: call == 2 and stop.request(signal.SIGTERM))
    with pytest.raises(preemption.TrainingInterrupted, match="interrupted at window 4 of 7"):
        _fit(model, request, stopping)
    resumed = _model(steps_per_execution=2 * K)
    again = _checkpoint(resumed, tmp_path / "stopped")
    done = again.restore()
    assert done == 4 == int(resumed.optimizer.iterations.numpy())
    _fit(resumed, again, done=done)
    assert again.windows_done == WINDOWS == int(resumed.optimizer.iterations.numpy())
    diff = max(
        float(np.max(np.abs(a.numpy() - b.numpy())))
        for a, b in zip(resumed.weights, uninterrupted.weights)
    )
    assert diff <= 1e-6, diff  # float32 round-off of the same operations (0 expected)


def test_checkpoints_by_wall_time_whichever_comes_first(tmp_path):
    now = [0.0]
    model = _model()
    saves = _Saves(
        model,
        str(tmp_path),
        total_windows=WINDOWS,
        every_updates=5,
        every_seconds=25.0,
        clock=lambda: now[0],
    )
    saves.restore()

    def tick(window):  # each window takes 10 s
        now[0] += 10.0

    _fit(model, _Before(tick), saves)
    assert saves.saved == [3, 6]  # 30 s at updates 3 and 6, before 5 updates; 7: 10 s
    now[0] = 0.0
    model = _model()
    saves = _Saves(
        model,
        str(tmp_path / "updates_first"),
        total_windows=WINDOWS,
        every_updates=2,
        every_seconds=25.0,
        clock=lambda: now[0],
    )
    saves.restore()
    _fit(model, _Before(tick), saves)
    assert saves.saved == [2, 4, 6]  # the update count comes first here


def test_sigterm_finishes_the_window_saves_and_raises_the_one_line(tmp_path):
    model = _model()
    with preemption.stop_on_signals() as stop:
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        saves = _checkpoint(model, tmp_path, _Saves, stop=stop)
        saves.restore()
        kill = _Before(lambda call: call == 4 and os.kill(os.getpid(), signal.SIGTERM))
        with pytest.raises(preemption.TrainingInterrupted) as raised:
            _fit(model, kill, saves)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored
    assert str(raised.value) == (
        "interrupted at window 4 of 7; checkpoint saved; re-run the same command to resume"
    )
    assert raised.value.exit_code == 128 + signal.SIGTERM
    assert saves.saved == [4]
    # The checkpoint is the state after 4 whole windows: 4 optimizer updates.
    assert int(model.optimizer.iterations.numpy()) == 4
    weights = [w.numpy() for w in model.weights]

    resumed = _model()
    again = _checkpoint(resumed, tmp_path)
    assert again.restore() == 4
    for got, want in zip(resumed.weights, weights):  # weights and AccumBN statistics
        np.testing.assert_array_equal(got.numpy(), want)


def _wait_for(condition, seconds=5.0):
    """Sleeps in short steps until ``condition()`` or ``seconds`` pass. A signal the kernel hands
    to another thread (the full suite leaves TensorFlow and Beam threads running) reaches the
    main thread's Python handler a moment after ``os.kill`` returns; ``time.sleep`` lets it
    in (and a handler's exception then surfaces here)."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_second_signal_is_not_held_back():
    # The previous handler is Python's own (raises KeyboardInterrupt), whatever earlier tests
    # in this process left installed.
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with preemption.stop_on_signals() as stop:
            os.kill(os.getpid(), signal.SIGINT)
            _wait_for(lambda: stop.signum is not None)
            assert stop.signum == signal.SIGINT
            with pytest.raises(KeyboardInterrupt):  # the previous handler runs
                os.kill(os.getpid(), signal.SIGINT)
                _wait_for(lambda: False)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, outer)


def test_interruption_is_found_through_wrapping_errors(capsys):
    cause = preemption.TrainingInterrupted(5, 8, signal.SIGINT)
    try:
        try:
            raise cause
        except preemption.TrainingInterrupted as error:
            raise RuntimeError("component GradientAccumulationTrainer failed") from error
    except RuntimeError as wrapped:
        assert preemption.report_interruption(wrapped) == 130
    assert capsys.readouterr().out.splitlines()[-1] == (
        "interrupted at window 5 of 8; checkpoint saved; re-run the same command to resume"
    )
    with pytest.raises(ValueError, match="other"):
        preemption.report_interruption(ValueError("other"))


def test_a_kill_during_a_checkpoint_write_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    """tf.train.CheckpointManager writes the files, then replaces the index file atomically:
    a torn write of checkpoint 4 (files half written, index not yet updated) restores 2."""
    model = _model()
    saves = checkpoints.UpdateCheckpoint(
        model, str(tmp_path), total_windows=WINDOWS, every_updates=2, every_seconds=1e9
    )
    saves.restore()
    at_two = []
    record = checkpoint_management.update_checkpoint_state_internal

    def killed_before_the_index(save_dir, model_checkpoint_path, *args, **kwargs):
        if model_checkpoint_path.endswith("ckpt-4"):
            for name in os.listdir(save_dir):  # the new files, half written
                if name.startswith("ckpt-4.data"):
                    path = os.path.join(save_dir, name)
                    with open(path, "r+b") as f:
                        f.truncate(os.path.getsize(path) // 2)
            raise SystemExit("killed")  # the process ends here
        return record(save_dir, model_checkpoint_path, *args, **kwargs)

    monkeypatch.setattr(
        checkpoint_management, "update_checkpoint_state_internal", killed_before_the_index
    )
    snapshot = _Before(
        lambda window: window == 3 and at_two.append([w.numpy() for w in model.weights])
    )
    with pytest.raises(SystemExit):
        _fit(model, snapshot, saves)
    monkeypatch.undo()
    assert any(name.startswith("ckpt-4.data") for name in os.listdir(tmp_path))
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-2")

    resumed = _model()
    again = checkpoints.UpdateCheckpoint(
        resumed, str(tmp_path), total_windows=WINDOWS, every_updates=2, every_seconds=1e9
    )
    assert again.restore() == 2
    for got, want in zip(resumed.weights, at_two[0]):
        np.testing.assert_array_equal(got.numpy(), want)


def test_the_interruption_counts_windows():
    error = preemption.TrainingInterrupted(4, 7, signal.SIGTERM)
    assert error.windows_done == 4 and error.exit_code == 128 + signal.SIGTERM
    assert str(error).startswith("interrupted at window 4 of 7;")
    assert not hasattr(error, "updates_done")  # the 0.1.0 alias, removed in 0.2.0


def test_the_trainers_interruption_counts_windows_a_skipped_one_included(tmp_path):
    """The Trainer's message counts windows (its ``num_steps`` unit), not updates: a stop after
    4 windows, the first skipped as non-finite (a NaN target), says window 4 of 7, with 3
    updates applied."""
    x = np.random.default_rng(0).normal(size=(WINDOWS * K * MICRO, 3)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    y[0] = np.nan  # window 1's loss and gradient: skipped
    model, stop = _model(), preemption.StopRequest()
    stopping = _checkpoint(model, tmp_path, stop=stop)
    stopping.restore()
    request = _Before(lambda call: call == 4 and stop.request(signal.SIGTERM))
    with pytest.raises(preemption.TrainingInterrupted) as raised:
        model.fit(
            tf.data.Dataset.from_tensor_slices((x, y)).batch(MICRO),
            epochs=1,
            steps_per_epoch=WINDOWS * K,
            verbose=0,
            callbacks=[request, stopping],
        )
    assert str(raised.value) == (
        "interrupted at window 4 of 7; checkpoint saved; re-run the same command to resume"
    )
    assert raised.value.windows_done == 4 and raised.value.total_windows == WINDOWS
    assert (model.window_core.windows, model.window_core.updates) == (4, 3)


def _weights_diff(a, b):
    return max(float(np.max(np.abs(u.numpy() - v.numpy()))) for u, v in zip(a.weights, b.weights))


class _Counts(keras.callbacks.Callback):
    """Records (the checkpoint's counts, the window core's) at every call end."""

    follows_pacing = True

    def __init__(self, saves):
        super().__init__()
        self._saves, self.pairs = saves, []

    def on_train_batch_end(self, batch, logs=None):
        state = self._saves._ga_model.window_core.state
        self.pairs.append(
            (
                (self._saves.windows_done, self._saves.micro_batches_done),
                (int(state.windows.numpy()), int(state.micro_batches_done.numpy())),
            )
        )


def test_the_counts_are_the_window_cores_and_stored_once(tmp_path):
    """The checkpoint keeps no counter of its own: ``windows_done`` and ``micro_batches_done``
    are the window core's at every call end, windows trained without the callback count too,
    a checkpoint holds them only as the core's state, and a resume reads them from there."""
    uninterrupted = _model()
    _fit(uninterrupted)
    model = _model(steps_per_execution=K)
    model.fit(_data(), epochs=1, steps_per_epoch=2 * K, verbose=0)  # 2 windows, no checkpoint
    saves = _checkpoint(model, tmp_path)
    assert saves.restore() == 2  # no checkpoint: the model's core counted 2 windows
    counts = _Counts(saves)
    model.fit(_data(2), epochs=1, steps_per_epoch=K, verbose=0, callbacks=[saves, counts])
    saves.save_final()
    assert [mine for mine, core in counts.pairs] == [core for mine, core in counts.pairs]
    assert (saves.windows_done, saves.micro_batches_done, saves.saved_at) == (3, 3 * K, 3)
    latest = tf.train.latest_checkpoint(str(tmp_path))
    stored = dict(tf.train.list_variables(latest))
    assert not any(name.startswith(("updates_done/", "micro_batches_done/")) for name in stored)
    assert [
        tf.train.load_variable(latest, k + "/.ATTRIBUTES/VARIABLE_VALUE")
        for k in checkpoints.CORE_KEYS
    ] == [3, 3 * K]

    resumed = _model()
    again = _checkpoint(resumed, tmp_path)
    assert again.restore() == 3 and again.micro_batches_done == 3 * K  # before the core exists
    assert resumed.window_core is None
    _fit(resumed, again, done=3)
    assert (again.windows_done, again.micro_batches_done) == (WINDOWS, WINDOWS * K)
    assert _weights_diff(resumed, uninterrupted) <= 1e-6


def test_the_resume_directory_is_under_resume_root_when_one_is_set():
    """``resume_root`` (the Trainer's setting; the ga-tfx pipelines set one under the pipeline
    root) holds the resume directories; without one they are beside the Trainer's outputs.
    Either way the directory is named by the training's identity."""
    identity = {"model": "m", "windows": 7}
    beside = checkpoints.resume_directory("root/Trainer/model_run/12", identity)
    assert os.path.dirname(beside) == os.path.join("root", "Trainer", ".ga_tfx_resume")
    given = checkpoints.resume_directory("root/Trainer/model_run/12", identity, "gs://b/resume")
    assert given == "gs://b/resume/" + os.path.basename(beside)
