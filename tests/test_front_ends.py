"""One window core, three front-ends: every gradient transform, written once, against big batch.

Each case configures the chain once (an :class:`ga_tfx.AccumulationConfig`, plus a user
transform for the last one) and trains the same model on the same data in the same order with
``fit`` on an accumulation model, the optimizer wrapper in a custom loop, and
``TrainingLoop``. The reference is plain big-batch Keras training with SGD with momentum (a
gradient-scale error moves the weights by that factor): per window, the gradient of the mean
loss over the window's samples, transformed by the same rule written out here with TensorFlow
ops (``tf.clip_by_global_norm``, ``ga_tfx.adaptive_clip_gradients`` -- tested against NumPy in
``test_agc.py`` --, the paper's noise formula, the user's function), then one
``apply_gradients``; a window whose gradient is not finite is not applied.

Tolerance: float32 round-off of the reordered sums (~1e-7 relative on gradients of order 1,
8 updates), 1e-5 on the weights; every case asserts that the weights moved by far more, and
that its transform was active (the clip and AGC shrank the gradient, the guard skipped the
poisoned window, the noise and the user transform changed it).
"""

import ga_tfx
from ga_tfx import keras, tf
from ga_tfx.transforms import GradientNoise
from ga_tfx.window import CHECKPOINT_KEY, WindowCore

import numpy as np
import pytest

from tests.helpers import MIN_MOVEMENT, classification_data, max_weight_diff, mlp, sparse_ce

pytestmark = []  # fast tier; library only (no TFX)

MICRO, K, N, EPOCHS = 8, 4, 64, 2  # two windows of 32 per epoch: 4 updates
LR, MOMENTUM = 0.5, 0.9
POISONED = 40  # a NaN input in the second window of each epoch (with the guard case)


def _halve_first(pairs):
    """The user's transform: halves the first variable's gradient."""
    return [(g * 0.5 if i == 0 else g, v) for i, (g, v) in enumerate(pairs)]


CASES = {
    "clip_global_norm": dict(config=dict(clip_global_norm=0.05)),
    "agc": dict(config=dict(agc_clip_factor=0.02)),
    "gradient_noise": dict(config=dict(gradient_noise=0.01)),
    "nonfinite_guard": dict(config=dict(), poison=True),
    "user_transform": dict(config=dict(), transforms=[("halve_first", _halve_first)]),
}


def _data(poison):
    x, y = classification_data(n=N, seed=3)
    if poison:
        x[POISONED, 0] = np.nan
    return x, y


def _reference(case, x, y):
    """Big-batch SGD, the case's rule applied to each window gradient; returns the model and
    what shows the rule was active."""
    spec = CASES[case]
    model = mlp(seed=5)
    optimizer = keras.optimizers.SGD(LR, momentum=MOMENTUM)
    variables = model.trainable_variables
    noise = GradientNoise(spec["config"].get("gradient_noise", 1.0))
    noise.build(variables)
    active, window = [], 0
    for _ in range(EPOCHS):
        for start in range(0, N, MICRO * K):
            xb, yb = x[start : start + MICRO * K], y[start : start + MICRO * K]
            with tf.GradientTape() as tape:
                loss = sparse_ce()(yb, model(xb, training=True))
            grads = tape.gradient(loss, variables)
            t, window = window, window + 1
            if not all(bool(tf.reduce_all(tf.math.is_finite(g))) for g in grads):
                active.append("skipped")
                continue
            before = tf.linalg.global_norm(grads)
            if case == "clip_global_norm":
                grads, _ = tf.clip_by_global_norm(grads, spec["config"]["clip_global_norm"])
            elif case == "agc":
                pairs = ga_tfx.adaptive_clip_gradients(
                    zip(grads, variables), spec["config"]["agc_clip_factor"]
                )
                grads = [g for g, _ in pairs]
            elif case == "gradient_noise":
                sigma = np.sqrt(spec["config"]["gradient_noise"] / (1.0 + t) ** 0.55)
                grads = [g + sigma * noise.noise(t, i, tf.shape(g)) for i, g in enumerate(grads)]
            elif case == "user_transform":
                grads = [g for g, _ in _halve_first(list(zip(grads, variables)))]
            active.append(float(abs(tf.linalg.global_norm(grads) - before)))
            optimizer.apply_gradients(zip(grads, variables))
    return model, active


def _fit(case, x, y):
    spec = CASES[case]
    model = ga_tfx.wrap_model(
        mlp(seed=5), K, transforms=spec.get("transforms", ()), **spec["config"]
    )
    model.compile(keras.optimizers.SGD(LR, momentum=MOMENTUM), sparse_ce())
    model.fit(x, y, batch_size=MICRO, epochs=EPOCHS, shuffle=False, verbose=0)
    return model, model.window_core


def _wrapper(case, x, y):
    spec = CASES[case]
    model = mlp(seed=5)
    optimizer = ga_tfx.GradientAccumulateOptimizer(
        keras.optimizers.SGD(LR, momentum=MOMENTUM),
        K,
        transforms=spec.get("transforms", ()),
        **spec["config"],
    )
    loss_fn = sparse_ce()

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        return optimizer.apply_gradients(
            zip(grads, model.trainable_variables), sample_count=tf.shape(xb)[0]
        )

    for _ in range(EPOCHS):
        for start in range(0, N, MICRO):
            step(x[start : start + MICRO], y[start : start + MICRO])
    return model, optimizer.window_core


def _loop(case, x, y):
    spec = CASES[case]
    model = mlp(seed=5)
    loop = ga_tfx.TrainingLoop(
        model,
        keras.optimizers.SGD(LR, momentum=MOMENTUM),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none"),
        tf.data.Dataset.from_tensor_slices((x, y)).batch(MICRO),
        K,
        transforms=spec.get("transforms", ()),
        verbose=False,
        **spec["config"],
    )
    loop.run(epochs=EPOCHS)
    return model, loop.window_core


FRONT_ENDS = {"fit": _fit, "optimizer_wrapper": _wrapper, "training_loop": _loop}


@pytest.mark.parametrize("front_end", sorted(FRONT_ENDS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_each_transform_matches_big_batch_in_every_front_end(case, front_end):
    x, y = _data(CASES[case].get("poison", False))
    reference, active = _reference(case, x, y)
    model, core = FRONT_ENDS[front_end](case, x, y)

    diff = max_weight_diff(model, reference)
    moved = max_weight_diff(model, mlp(seed=5))
    print(f"{case} / {front_end}: max |dw| {diff:.2e}, moved {moved:.3f}, active {active}")
    assert diff <= 1e-5
    assert moved > MIN_MOVEMENT
    if CASES[case].get("poison"):
        assert active.count("skipped") == EPOCHS  # the reference skipped the poisoned windows
        assert (core.windows, core.updates) == (2 * EPOCHS, EPOCHS)
    else:
        # The rule changed every window's gradient by far more than the tolerance.
        assert min(active) > 1e-3
        assert (core.windows, core.updates) == (2 * EPOCHS, 2 * EPOCHS)


@pytest.mark.tfx
def test_a_transform_setting_reaches_the_trainers_model():
    """The Trainer's settings take the library's (one declaration): a chain setting declared
    in AccumulationConfig reaches the model the Trainer trains, and its chain."""
    from ga_tfx.components.trainer import model as model_lib
    from ga_tfx.components.trainer import settings as settings_lib

    settings = settings_lib.from_dict(
        dict(accum_steps=2, micro_batch_size=4, label_key="y", gradient_noise=0.3)
    )

    def build_model(hparams):
        model = mlp(seed=5)
        model.compile(keras.optimizers.SGD(LR), sparse_ce())
        return model

    model = model_lib.accumulation_model(build_model, {}, settings)
    assert model.accumulation == ga_tfx.AccumulationConfig(accum_steps=2, gradient_noise=0.3)
    x, y = _data(False)
    model.fit(x, y, batch_size=MICRO, epochs=1, verbose=0)
    assert model.window_core.chain.order == ("nonfinite_guard", "gradient_noise")


# What the front-ends stopped forwarding in 0.2.0 (CHANGELOG.md): read them on ``window_core``.
REMOVED = {
    "fit": ("gradient_accumulator",),
    "optimizer_wrapper": ("core", "accumulator", "micro_steps"),
    "training_loop": ("core", "config", "accumulator", "chain", "updates", "windows"),
}


def _core_paths(names, prefix):
    """The object paths below ``prefix`` (``.../ga_window_core/``) of a checkpoint's names."""
    return {name[len(prefix) :] for name in names if name.startswith(prefix)}


def test_every_front_end_checkpoints_its_window_core_under_one_key_in_one_layout(tmp_path):
    """One core surface: fit's model, the optimizer wrapper and TrainingLoop each expose their
    :class:`~ga_tfx.window.WindowCore` as ``window_core`` (and their config as
    ``accumulation``, the core's), forward none of its parts, and checkpoint it under
    :data:`ga_tfx.window.CHECKPOINT_KEY` with the same object paths below it
    (``TrainingLoop``'s state adds its epoch); no part of the core is stored elsewhere. The
    wrapper's checkpoint restores the window in progress."""
    x, y = _data(False)
    key = CHECKPOINT_KEY
    assert key == "ga_window_core"  # not the property name: a loaded SavedModel sets it
    config = dict(CASES["clip_global_norm"]["config"], accum_steps=K)
    model = ga_tfx.wrap_model(mlp(seed=5), **config)
    model.compile(keras.optimizers.SGD(LR), sparse_ce())
    model.fit(x, y, batch_size=MICRO, epochs=1, shuffle=False, verbose=0)
    fit_path = tf.train.Checkpoint(model=model).save(str(tmp_path / "fit" / "ckpt"))

    plain = mlp(seed=5)
    optimizer = ga_tfx.GradientAccumulateOptimizer(keras.optimizers.SGD(LR), **config)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(plain(x[:MICRO]))
    optimizer.apply_gradients(
        zip(tape.gradient(loss, plain.trainable_variables), plain.trainable_variables)
    )
    wrapper_path = tf.train.Checkpoint(model=plain, optimizer=optimizer).save(
        str(tmp_path / "wrapper" / "ckpt")
    )

    loop = ga_tfx.TrainingLoop(
        mlp(seed=5),
        keras.optimizers.SGD(LR),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none"),
        tf.data.Dataset.from_tensor_slices((x, y)).batch(MICRO),
        checkpoint_dir=str(tmp_path / "loop"),
        verbose=False,
        **config,
    )
    loop.run(epochs=1)
    loop_path = tf.train.latest_checkpoint(str(tmp_path / "loop"))

    front_ends = {
        "fit": (model, fit_path, f"model/{key}/"),
        "optimizer_wrapper": (optimizer, wrapper_path, f"optimizer/{key}/"),
        "training_loop": (loop, loop_path, f"{key}/"),
    }
    layouts = {}
    for name, (front_end, path, prefix) in front_ends.items():
        core = front_end.window_core
        assert isinstance(core, WindowCore), name
        assert front_end.accumulation is core.accumulation, name
        assert not [attr for attr in REMOVED[name] if hasattr(front_end, attr)], name
        names = [n for n, _ in tf.train.list_variables(path)]
        layouts[name] = _core_paths(names, prefix)
        # Nothing of the core outside its key (0.1.0's TrainingLoop flattened it into four).
        parts = ("accumulator/", "nonfinite_guard/", "state/windows", "noise_sums")
        assert not [n for n in names if not n.startswith(prefix) and any(p in n for p in parts)]
    expected = {
        "accumulator/micro_steps/.ATTRIBUTES/VARIABLE_VALUE",
        "accumulator/sums/0/.ATTRIBUTES/VARIABLE_VALUE",
        "chain/members/nonfinite_guard/consecutive_nonfinite/.ATTRIBUTES/VARIABLE_VALUE",
        "state/windows/.ATTRIBUTES/VARIABLE_VALUE",
        "state/micro_batches_done/.ATTRIBUTES/VARIABLE_VALUE",
        # The current K (accum_steps is always the first K; the 0.2.0 layout renamed it).
        "state/current_accum_steps/.ATTRIBUTES/VARIABLE_VALUE",
    }
    assert expected <= layouts["fit"], sorted(layouts["fit"])
    assert "state/accum_steps/.ATTRIBUTES/VARIABLE_VALUE" not in layouts["fit"]
    assert layouts["optimizer_wrapper"] == layouts["fit"]
    loop_own = {f"state/{v}/.ATTRIBUTES/VARIABLE_VALUE" for v in ("epoch", "epoch_start")}
    assert layouts["training_loop"] == layouts["fit"] | loop_own

    restored = ga_tfx.GradientAccumulateOptimizer(keras.optimizers.SGD(LR), **config)
    tf.train.Checkpoint(model=mlp(seed=6), optimizer=restored).restore(wrapper_path)
    restored.build(plain.trainable_variables)  # the core is made: the deferred restore fills it
    assert int(restored.window_core.micro_steps.numpy()) == 1
