"""ga_tfx.transforms: the gradient chain's interface, members, order and checkpoint keys."""

import ga_tfx
from ga_tfx import tf
from ga_tfx.transforms import (
    AdaptiveClipping,
    ClipGlobalNorm,
    FunctionTransform,
    GradientChain,
    GradientTransform,
    NonFiniteGuard,
    global_norm,
    make_chain,
)

import numpy as np
import pytest

pytestmark = []  # fast tier; library only (no TFX)


def _variables():
    return [
        tf.Variable(np.full((3, 2), 0.5, "float32"), name="dense/kernel"),
        tf.Variable(np.zeros(2, "float32"), name="dense/bias"),
    ]


def _pairs(variables, kernel_grad, bias_grad):
    return [
        (tf.constant(kernel_grad, tf.float32), variables[0]),
        (tf.constant(bias_grad, tf.float32), variables[1]),
    ]


def _values(pairs):
    return [g.numpy() for g, _ in pairs]


def test_guard_skip_votes_no_and_counts_consecutive_windows():
    variables = _variables()
    guard = NonFiniteGuard()
    guard.build(variables)
    finite = _pairs(variables, np.ones((3, 2)), [1.0, 2.0])
    bad = _pairs(variables, np.ones((3, 2)), [np.nan, np.inf])
    counts = []
    for pairs in (bad, bad, finite, bad):
        out, apply = guard(pairs)
        counts.append(
            (
                bool(apply),
                int(guard.nonfinite_windows.numpy()),
                int(guard.consecutive_nonfinite.numpy()),
                int(guard.last_nonfinite_entries.numpy()),
            )
        )
    assert counts == [(False, 1, 1, 2), (False, 2, 2, 2), (True, 2, 0, 0), (False, 3, 1, 2)]
    np.testing.assert_array_equal(_values(out)[0], np.ones((3, 2)))  # passed on unchanged


def test_guard_zero_replaces_only_nonfinite_entries_and_applies():
    variables = _variables()
    guard = NonFiniteGuard("zero")
    guard.build(variables)
    out, apply = guard(_pairs(variables, [[1, np.inf], [2, 3], [-np.inf, 4]], [np.nan, 5.0]))
    assert apply is None
    np.testing.assert_array_equal(_values(out)[0], [[1, 0], [2, 3], [0, 4]])
    np.testing.assert_array_equal(_values(out)[1], [0, 5])
    assert int(guard.nonfinite_windows.numpy()) == 1
    assert int(guard.last_nonfinite_entries.numpy()) == 3


def test_chain_applies_members_in_order_and_combines_votes():
    variables = _variables()
    calls = []

    def double(pairs):
        calls.append("double")
        return [(2.0 * g, v) for g, v in pairs]

    chain = GradientChain([NonFiniteGuard(), ("double", double), ClipGlobalNorm(1.0)])
    chain.build(variables)
    pairs = _pairs(variables, np.full((3, 2), 0.1), [0.1, 0.1])
    out, apply = chain(pairs)
    assert chain.order == ("nonfinite_guard", "double", "clip_global_norm") and calls == ["double"]
    assert bool(apply)
    # 0.1 * 8 entries -> norm 0.283, doubled 0.566: below the clip, so exactly doubled.
    np.testing.assert_allclose(_values(out)[1], [0.2, 0.2], rtol=1e-6)
    out, _ = GradientChain([ClipGlobalNorm(1.0), ("double", double)])(pairs)
    out_other, _ = GradientChain([("double", double), ClipGlobalNorm(0.3)])(pairs)
    assert float(global_norm(out_other)) == pytest.approx(0.3, rel=1e-6)  # order matters
    assert float(global_norm(out)) == pytest.approx(2 * float(global_norm(pairs)), rel=1e-6)
    _, apply = chain(_pairs(variables, np.full((3, 2), np.nan), [0.0, 0.0]))
    assert not bool(apply)


def test_clip_global_norm_and_agc_members_match_their_definitions():
    variables = _variables()
    pairs = _pairs(variables, np.full((3, 2), 3.0), [4.0, 0.0])
    out, apply = ClipGlobalNorm(2.0)(pairs)
    expected, _ = tf.clip_by_global_norm([g for g, _ in pairs], 2.0)
    assert apply is None
    np.testing.assert_array_equal(_values(out)[0], expected[0].numpy())
    assert float(global_norm(out)) == pytest.approx(2.0, rel=1e-6)
    agc = AdaptiveClipping(0.1, exclude=["*bias*"])
    agc.build(variables)
    out, _ = agc(pairs)
    reference = ga_tfx.adaptive_clip_gradients(pairs, 0.1, exclude=["*bias*"])
    for a, b in zip(_values(out), _values(reference)):
        np.testing.assert_array_equal(a, b)
    assert np.all(_values(out)[0] < 3.0)  # the kernel was clipped, the bias excluded
    np.testing.assert_array_equal(_values(out)[1], [4.0, 0.0])


def test_state_checkpoints_under_stable_keys(tmp_path):
    variables = _variables()
    chain = make_chain(
        "skip",
        clip_global_norm=1.0,
        transforms=[AdaptiveClipping(0.1), ("user", lambda pairs: pairs)],
    )
    chain.build(variables)
    assert chain.order == ("nonfinite_guard", "clip_global_norm", "agc", "user")
    chain(_pairs(variables, np.full((3, 2), np.nan), [0.0, 0.0]))
    path = tf.train.Checkpoint(chain=chain).write(str(tmp_path / "ckpt"))
    keys = {name for name, _ in tf.train.list_variables(path)}
    assert "chain/members/nonfinite_guard/nonfinite_windows/.ATTRIBUTES/VARIABLE_VALUE" in keys
    restored = make_chain("skip")
    restored.build(variables)
    tf.train.Checkpoint(chain=restored).read(path).assert_existing_objects_matched()
    assert int(restored.members["nonfinite_guard"].nonfinite_windows.numpy()) == 1
    assert int(restored.members["nonfinite_guard"].consecutive_nonfinite.numpy()) == 1


def test_bad_members_and_names_are_rejected():
    with pytest.raises(ValueError, match="nonfinite_policy must be one of"):
        NonFiniteGuard("ignore")
    with pytest.raises(ValueError, match="Python identifier.*'my clip'"):
        FunctionTransform(lambda p: p, "my clip")
    with pytest.raises(TypeError, match="must be callable"):
        FunctionTransform(3, "three")
    with pytest.raises(TypeError, match="GradientTransform or a .name, callable. pair"):
        GradientChain([lambda pairs: pairs])
    with pytest.raises(ValueError, match=r"\['agc'\] appear more than once"):
        GradientChain([AdaptiveClipping(0.1), AdaptiveClipping(0.2)])
    with pytest.raises(ValueError, match="clip_global_norm must be > 0, got 0.0"):
        ClipGlobalNorm(0)
    with pytest.raises(NotImplementedError):
        GradientTransform("base")([])
    variables = _variables()
    dropping = FunctionTransform(lambda pairs: pairs[:1], "dropping")
    with pytest.raises(ValueError, match="'dropping' must return one .gradient, variable. pair"):
        dropping(_pairs(variables, np.ones((3, 2)), [1.0, 1.0]))
    with pytest.raises(ValueError, match="rank 0 to 5"):
        AdaptiveClipping(0.1).build([tf.Variable(tf.zeros([1] * 6), name="big")])


def _halve_where_finite(grads_and_vars):
    """A user's transform written with Python control flow on a tensor (autograph's job)."""
    out = []
    for g, v in grads_and_vars:
        if tf.reduce_all(tf.math.is_finite(g)):
            g = g * 0.5
        out.append((g, v))
    return out


class _HalveWhereFinite(GradientTransform):
    """The same as a user's own GradientTransform subclass."""

    def __call__(self, grads_and_vars):
        return _halve_where_finite(grads_and_vars), None


def test_a_users_transforms_with_python_control_flow_on_tensors_train_in_fit():
    """fit traces the window's end without autograph's conversion (ga_tfx.engine.loop: its
    start-up); the user's code in it still is converted: a transform given as a function and a
    GradientTransform subclass, each with ``if`` on a tensor, train as the same transform in
    tensor ops (each halves: a quarter in all), to float32 round-off, with SGD."""
    from tests.helpers import classification_data, max_weight_diff, mlp, sparse_ce

    x, y = classification_data(n=64, seed=4)

    def trained(transforms):
        model = ga_tfx.wrap_model(mlp(seed=2), 4, transforms=transforms)
        model.compile(ga_tfx.keras.optimizers.SGD(0.5), sparse_ce())
        model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        return model

    users = trained([("by_function", _halve_where_finite), _HalveWhereFinite("by_class")])
    quarter = trained([("quarter", lambda pairs: [(g * 0.25, v) for g, v in pairs])])
    untouched = trained([])
    assert max_weight_diff(users, quarter) <= 1e-6
    assert max_weight_diff(users, untouched) > 1e-3  # the transforms did act
