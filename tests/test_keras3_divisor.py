"""The window's divisor on Keras 3 (both backends): each micro-batch weighs by the number its
loss was divided by (ga_tfx.keras3.loss_divisor), so masked token losses, temporal and
sample-weighted means, zero-weight and fully masked micro-batches, uneven windows and class
weights train to plain Keras 3's big batch (K=4 micro-batches of 8 against batches of 32, SGD
with momentum, two epochs), on one device and over two replicas (TensorFlow MirroredStrategy
over two logical CPUs, JAX DataParallel over two CPU devices) against the one-device big batch;
a loss without such a divisor is refused in one line; a custom loop passing
``sample_count=loss_divisor(...)`` to the optimizer wrapper does the same (TensorFlow).

Weighing each micro-batch by its rows again (checked on a scratch copy) fails 9 of these
weight-level tests on each backend, by 8e-3 to 9e-2 where big batch moved the weights 3e-2 to
0.3: the masks (both replicas counts), the fully masked micro-batch, the uneven last window,
mean_with_sample_weight (temporal, uneven, a zero-weight micro-batch, class weights). Temporal
and class weights under the default reduction divide by the elements, rows times a constant:
exact either way, kept to show the divisor leaves them so."""

import ga_tfx.keras3 as ga3

import contextlib
import warnings

import keras
import numpy as np
import pytest

from tests.keras3_helpers import TOLERANCE, max_weight_difference, two_replicas

pytestmark = [pytest.mark.keras3]

T, VOCAB, CLASSES, FEATURES = 12, 20, 5, 6
K, MICRO = 4, 8
# Micro-batch i of each window holds sequences of these lengths: a window's four micro-batches
# hold about 85, 15, 60 and 15 valid tokens (rows weigh them alike, Keras' mean does not).
LENGTHS = [(9, 12), (1, 3), (6, 9), (1, 3)]


def _backend():
    return keras.backend.backend()


def _sequences(n=64, seed=0, empty_micro_batch=None):
    """Token sequences padded with 0 to ``T`` and per-token targets; the micro-batch of 8 at
    index ``empty_micro_batch`` holds only padding (every token masked)."""
    rng = np.random.default_rng(seed)
    lengths = np.empty(n, dtype="int64")
    for row in range(n):
        low, high = LENGTHS[(row // MICRO) % len(LENGTHS)]
        lengths[row] = rng.integers(low, high + 1)
    if empty_micro_batch is not None:
        lengths[empty_micro_batch * MICRO : (empty_micro_batch + 1) * MICRO] = 0
    valid = np.arange(T)[None, :] < lengths[:, None]
    x = np.where(valid, rng.integers(1, VOCAB, size=(n, T)), 0).astype("int32")
    y = rng.integers(0, CLASSES, size=(n, T)).astype("int32")
    return x, y, valid


def _embedding_model():
    keras.utils.set_random_seed(1)
    return keras.Sequential(
        [
            keras.Input((T,), dtype="int32"),
            keras.layers.Embedding(VOCAB, 8, mask_zero=True),
            keras.layers.Dense(16, activation="tanh"),
            keras.layers.Dense(CLASSES),
        ]
    )


def _masking_model():
    keras.utils.set_random_seed(1)
    return keras.Sequential(
        [
            keras.Input((T, FEATURES)),
            keras.layers.Masking(0.0),
            keras.layers.Dense(16, activation="tanh"),
            keras.layers.Dense(CLASSES),
        ]
    )


def _timestep_model():
    keras.utils.set_random_seed(1)
    return keras.Sequential(
        [
            keras.Input((T, FEATURES)),
            keras.layers.Dense(16, activation="tanh"),
            keras.layers.Dense(CLASSES),
        ]
    )


def _classifier():
    keras.utils.set_random_seed(1)
    return keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(16, activation="tanh"),
            keras.layers.Dense(CLASSES),
        ]
    )


def _features(x, valid, seed=3):
    """Float features per timestep, 0 at padding (what ``Masking(0.0)`` masks)."""
    rng = np.random.default_rng(seed)
    return np.where(valid[..., None], rng.normal(size=x.shape + (FEATURES,)), 0.0).astype("float32")


def _token_loss(reduction="sum_over_batch_size"):
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=reduction)


@contextlib.contextmanager
def _replicas(count):
    """``count`` 1: one device; 2: the backend's two replicas (yields the TF strategy's scope
    or JAX's DataParallel)."""
    if count == 1:
        yield
        return
    if _backend() == "tensorflow":
        with two_replicas().scope():
            yield
        return
    import jax

    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=jax.devices("cpu")))
    try:
        yield
    finally:
        keras.distribution.set_distribution(None)


def _fit(model, x, y, batch, loss, replicas=1, **fit):
    with _replicas(replicas):
        model = model()
        model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss=loss)
        model.fit(x, y, batch_size=batch, epochs=2, shuffle=False, verbose=0, **fit)
    return model


def _difference(model, x, y, loss, replicas=1, **fit):
    """max |Δw| of K micro-batches of 8 (on ``replicas``) against plain batches of 32 on one
    device, and how far big-batch training moved the weights."""
    ours = _fit(lambda: ga3.wrap_model(model(), K), x, y, MICRO, loss(), replicas, **fit)
    plain = _fit(model, x, y, K * MICRO, loss(), **fit)
    start = model()
    return max_weight_difference(ours, plain), max_weight_difference(plain, start)


def _check(difference_and_moved):
    difference, moved = difference_and_moved
    print(f"[{_backend()}] max |dw| {difference:.2e} (big batch moved {moved:.2e})")
    assert moved > 1e-2  # training moved the weights: the comparison means something
    assert difference <= TOLERANCE, (difference, moved)


# ------------------------------------------------------------------ masks


@pytest.mark.parametrize("replicas", [1, 2])
def test_mask_zero_token_loss_matches_one_device_big_batch(replicas):
    x, y, _ = _sequences()
    _check(_difference(_embedding_model, x, y, _token_loss, replicas))


def test_masking_layer_token_loss_matches_big_batch():
    x, y, valid = _sequences(seed=1)
    _check(_difference(_masking_model, _features(x, valid), y, _token_loss))


def test_a_fully_masked_micro_batch_adds_nothing():
    # Micro-batch 1 of the first window is all padding: Keras' loss is 0 there (divide_no_nan)
    # and its divisor 0, as in the big batch, where its tokens are simply not counted.
    x, y, _ = _sequences(empty_micro_batch=1)
    _check(_difference(_embedding_model, x, y, _token_loss))


def test_an_uneven_last_window_matches_big_batch():
    # 85 rows: windows of 4, 4 and 3 micro-batches (the last of 5 rows), batches 32, 32, 21.
    x, y, _ = _sequences(n=85, seed=2)
    _check(_difference(_embedding_model, x, y, _token_loss))


# ------------------------------------------------------------------ sample weights


@pytest.mark.parametrize("reduction", ["sum_over_batch_size", "mean_with_sample_weight"])
def test_temporal_sample_weights_match_big_batch(reduction):
    x, y, valid = _sequences(seed=4)
    rng = np.random.default_rng(5)
    weights = (rng.uniform(0.0, 2.0, size=y.shape) * valid).astype("float32")  # 0 at padding
    features = _features(x, valid)
    loss = lambda: _token_loss(reduction)  # noqa: E731
    _check(_difference(_timestep_model, features, y, loss, sample_weight=weights))


def _rows(n=64, seed=6):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, FEATURES)).astype("float32")
    y = rng.integers(0, CLASSES, size=n).astype("int32")
    return x, y


def test_mean_with_sample_weight_with_uneven_weights_matches_big_batch():
    x, y = _rows()
    # The micro-batches' Σ sample_weight differ a lot: 8·~1.75, 8·~0.1, 8·~1, 8·~0.1.
    scale = np.array([1.75, 0.1, 1.0, 0.1])[(np.arange(64) // MICRO) % K]
    weights = (scale * np.random.default_rng(7).uniform(0.5, 1.5, size=64)).astype("float32")
    loss = lambda: _token_loss("mean_with_sample_weight")  # noqa: E731
    _check(_difference(_classifier, x, y, loss, sample_weight=weights))


def test_a_zero_weight_micro_batch_under_mean_with_sample_weight_adds_nothing():
    x, y = _rows(seed=8)
    weights = np.random.default_rng(9).uniform(0.5, 1.5, size=64).astype("float32")
    weights[2 * MICRO : 3 * MICRO] = 0.0  # Keras' loss is 0 there, its divisor 0
    loss = lambda: _token_loss("mean_with_sample_weight")  # noqa: E731
    _check(_difference(_classifier, x, y, loss, sample_weight=weights))


@pytest.mark.parametrize("reduction", ["sum_over_batch_size", "mean_with_sample_weight"])
def test_class_weight_matches_big_batch(reduction):
    x, y = _rows(seed=10)
    class_weight = {0: 0.2, 1: 3.0, 2: 1.0, 3: 0.5, 4: 2.0}
    loss = lambda: _token_loss(reduction)  # noqa: E731
    _check(_difference(_classifier, x, y, loss, class_weight=class_weight))


# ------------------------------------------------------------------ the divisor itself


def _log_softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _masked_logits():
    """Logits of shape (8, T, CLASSES) computed eagerly through ``Embedding(mask_zero=True)``,
    so that they carry Keras' mask, and the NumPy element losses, targets, valid positions."""
    x, y, valid = _sequences(n=MICRO, seed=11)
    model = _embedding_model()
    logits = model.layers[2](model.layers[1](model.layers[0](keras.ops.convert_to_tensor(x))))
    values = keras.ops.convert_to_numpy(logits).astype("float64")
    elements = -np.take_along_axis(_log_softmax(values), y[..., None], axis=-1)[..., 0]
    return logits, y, valid, elements


CASES = {
    # name: (reduction, sample weight of (y, valid) or None, NumPy divisor of (weight, valid))
    "mask": ("sum_over_batch_size", None, lambda w, valid: valid.sum()),
    "mask_and_temporal_weights": (
        "sum_over_batch_size",
        lambda valid: np.linspace(0.0, 2.0, valid.size).reshape(valid.shape),
        lambda w, valid: valid.sum(),
    ),
    "mean_with_sample_weight_temporal": (
        "mean_with_sample_weight",
        lambda valid: np.linspace(0.0, 2.0, valid.size).reshape(valid.shape),
        lambda w, valid: (w * valid).sum(),
    ),
    # A weight of shape (B, 1) on element losses of (B, T): Keras sums it in its own shape
    # (Σ_b w_b over the valid rows' mask product), not broadcast to (B, T).
    "mean_with_sample_weight_per_row": (
        "mean_with_sample_weight",
        lambda valid: np.linspace(0.5, 1.5, valid.shape[0])[:, None],
        lambda w, valid: (w * valid).sum(),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_loss_divisor_times_the_loss_is_the_sum_of_weighted_element_losses(case):
    reduction, weight_of, divisor_of = CASES[case]
    logits, y, valid, elements = _masked_logits()
    weight = None if weight_of is None else weight_of(valid).astype("float32")
    loss = _token_loss(reduction)
    divisor = float(ga3.loss_divisor(loss, y, logits, sample_weight=weight))
    value = float(loss(y, logits, sample_weight=weight))
    w = np.ones_like(elements) if weight is None else weight.astype("float64")
    expected_sum = float((elements * w * valid).sum())  # NumPy: the weighted valid losses
    np.testing.assert_allclose(divisor, divisor_of(w, valid), rtol=1e-6)
    np.testing.assert_allclose(divisor * value, expected_sum, rtol=1e-5)
    if reduction == "sum_over_batch_size":
        assert divisor == valid.sum() < valid.size  # the valid tokens, not the elements


def test_loss_divisor_without_a_mask_counts_the_elements():
    y = np.ones((4, 3), "float32")
    assert float(ga3.loss_divisor("mse", y, np.zeros((4, 3), "float32"))) == 4.0  # (B,) losses
    tokens = np.zeros((4, T), "int32")
    logits = np.zeros((4, T, CLASSES), "float32")
    assert float(ga3.loss_divisor(_token_loss(), tokens, logits)) == 4.0 * T


def test_loss_divisor_refuses_a_sum_in_one_line():
    loss = keras.losses.MeanSquaredError(reduction="sum")
    with pytest.raises(ga3.DivisorError, match="reduction='sum'") as error:
        ga3.loss_divisor(loss, np.ones((4, 1)), np.zeros((4, 1)))
    assert "\n" not in str(error.value)


# ------------------------------------------------------------------ refused in fit


def _refused_message(model, loss, x, y, **compile):
    model = ga3.wrap_model(model, K)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss, **compile)
    with pytest.raises(ga3.DivisorError) as error:
        model.fit(x, y, batch_size=MICRO, epochs=1, shuffle=False, verbose=0)
    message = str(error.value).strip().splitlines()
    assert message[0].startswith("ga_tfx:")
    return message[0]


def test_a_sum_reduction_is_refused_in_one_line():
    x, y, _ = _sequences()
    line = _refused_message(_embedding_model(), _token_loss("sum"), x, y)
    assert "reduction='sum'" in line and "sum_over_batch_size" in line


def _two_output_model(second, cls=keras.Model):
    """A per-token head (masked: its valid tokens) and a second head: on each row's first two
    valid tokens (``"prefix"``: its divisor in another ratio to the first's in every
    micro-batch) or per sequence (``"sequence"``: no mask, its rows); an L2 kernel
    regulariser beside them."""
    keras.utils.set_random_seed(1)
    tokens = keras.Input((T,), dtype="int32")
    hidden = keras.layers.Embedding(VOCAB, 8, mask_zero=True)(tokens)
    hidden = keras.layers.Dense(8, activation="tanh", kernel_regularizer="l2")(hidden)
    per_token = keras.layers.Dense(CLASSES, name="per_token")(hidden)
    if second == "sequence":
        pooled = keras.layers.GlobalAveragePooling1D()(hidden)
        other = keras.layers.Dense(CLASSES, name="other")(pooled)
    else:
        other = keras.layers.Lambda(
            keras.ops.copy,
            mask=lambda t, mask: keras.ops.logical_and(mask, keras.ops.arange(T) < 2),
            name="other",
        )(keras.layers.Dense(CLASSES)(hidden))
    return cls(tokens, {"per_token": per_token, "other": other})


_TWO_OUTPUT_LOSS = dict(
    loss={"per_token": _token_loss(), "other": _token_loss()},
    loss_weights={"per_token": 1.0, "other": 0.4},
)


@pytest.mark.parametrize("second", ["prefix", "sequence"])
@pytest.mark.parametrize("replicas", [1, 2])
def test_two_outputs_with_their_own_divisors_and_loss_weights_match_big_batch(second, replicas):
    x, y, _ = _sequences()
    if second == "prefix":  # the heads divide by counts in other ratios per micro-batch
        heads = _two_output_model(second)
        ratios = set()
        for i in range(0, len(x), MICRO):
            out = heads(x[i : i + MICRO], training=False)
            d1 = float(ga3.loss_divisor(_token_loss(), y[i : i + MICRO], out["per_token"]))
            d2 = float(
                ga3.loss_divisor(_token_loss(), ((y + 2) % CLASSES)[i : i + MICRO], out["other"])
            )
            ratios.add(round(d2 / d1, 6))
        assert len(ratios) > 3, ratios
    other = (y + 2) % CLASSES if second == "prefix" else y[:, 0]
    targets = {"per_token": y, "other": other}

    def fit(model, batch, count=1):
        with _replicas(count):
            model = model()
            model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), **_TWO_OUTPUT_LOSS)
            model.fit(x, targets, batch_size=batch, epochs=2, shuffle=False, verbose=0)
        return model

    ours = fit(lambda: ga3.wrap_model(_two_output_model(second), K), MICRO, replicas)
    plain = fit(lambda: _two_output_model(second), K * MICRO)
    start = _two_output_model(second)
    _check((max_weight_difference(ours, plain), max_weight_difference(plain, start)))


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="a TensorFlow custom loop")
def test_the_optimizer_wrapper_given_each_terms_divisor_as_parts_matches_big_batch():
    import tensorflow as tf

    x, targets = _two_output_targets()
    model = _two_output_model("prefix")
    opt = ga3.GradientAccumulateOptimizer(keras.optimizers.SGD(0.1, momentum=0.9), K)
    per_token, other = _token_loss(), _token_loss()

    @tf.function
    def step(xb, y1, y2):
        variables = model.trainable_variables
        with tf.GradientTape(persistent=True) as tape:
            out = model(xb, training=True)
            first = per_token(y1, out["per_token"]) + sum(model.losses)
            second = 0.4 * other(y2, out["other"])
        d1 = ga3.loss_divisor(per_token, y1, out["per_token"])
        d2 = ga3.loss_divisor(other, y2, out["other"])
        g1, g2 = tape.gradient(first, variables), tape.gradient(second, variables)
        return opt.apply_gradients(zip(g1, variables), d1, parts=[(zip(g2, variables), d2)])

    for _ in range(2):
        for start in range(0, len(x), MICRO):
            rows = slice(start, start + MICRO)
            step(x[rows], targets["per_token"][rows], targets["other"][rows])
    plain = _two_output_model("prefix")
    plain.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), **_TWO_OUTPUT_LOSS)
    plain.fit(x, targets, batch_size=K * MICRO, epochs=2, shuffle=False, verbose=0)
    start = _two_output_model("prefix")
    _check((max_weight_difference(model, plain), max_weight_difference(plain, start)))


class OwnStep(keras.Model):
    """Keras 3's train_step written out (TensorFlow): one gradient of the whole loss."""

    def train_step(self, data):
        import tensorflow as tf

        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}


def _two_output_targets():
    x, y, _ = _sequences()
    return x, {"per_token": y, "other": (y + 2) % CLASSES}


class _Subclassed(keras.Model):
    """The two-output model of :func:`_two_output_model` as a subclass (no symbolic outputs)."""

    def __init__(self):
        super().__init__()
        self.inner = _two_output_model("prefix")

    def call(self, tokens):
        return self.inner(tokens)


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="JAX only (TensorFlow: exact)")
def test_two_outputs_with_their_own_masks_in_a_subclassed_model_are_refused_on_jax():
    x, targets = _two_output_targets()
    model = _Subclassed()
    model(x[:1])
    line = _refused_message(model, x=x, y=targets, **_TWO_OUTPUT_LOSS)
    assert "2 loss terms" in line and "Functional model" in line


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="a TensorFlow train_step")
def test_two_outputs_with_their_own_masks_in_a_models_own_train_step_are_refused():
    x, targets = _two_output_targets()
    line = _refused_message(
        _two_output_model("prefix", OwnStep), x=x, y=targets, **_TWO_OUTPUT_LOSS
    )
    assert "2 loss terms" in line and "one gradient per micro-batch" in line


def test_a_train_step_without_the_compiled_loss_weighs_by_rows_with_a_warning():
    class OwnLoss(keras.Model):
        pass

    x, y = _rows()
    keras.utils.set_random_seed(1)
    inputs = keras.Input((FEATURES,))
    model = OwnLoss(inputs, keras.layers.Dense(CLASSES)(inputs))

    def compute_loss(x=None, y=None, y_pred=None, sample_weight=None, training=True):
        return keras.ops.mean(keras.ops.square(y_pred))  # no compiled loss computed

    model.compute_loss = compute_loss
    model = ga3.wrap_model(model, K)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(x, y, batch_size=MICRO, epochs=1, shuffle=False, verbose=0)
    assert any("weighted by its rows" in str(w.message) for w in caught)


class ByHand(keras.Model):
    """The masked token loss divided by hand (its valid tokens), the divisor passed as
    ``sample_count``: TensorFlow's and JAX's ``train_step``."""

    def _masked_mean(self, x, y, y_pred):
        ops = keras.ops
        losses = keras.losses.sparse_categorical_crossentropy(y, y_pred, from_logits=True)
        valid = ops.cast(ops.not_equal(x, 0), losses.dtype)
        divisor = ops.sum(valid)
        return ops.divide_no_nan(ops.sum(losses * valid), divisor), divisor

    def train_step(self, *args):
        if _backend() == "tensorflow":
            import tensorflow as tf

            x, y = args[0]
            with tf.GradientTape() as tape:
                loss, divisor = self._masked_mean(x, y, self(x, training=True))
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(
                zip(grads, self.trainable_variables), sample_count=divisor
            )
            return {"loss": loss}
        import jax

        (trainable, non_trainable, optimizer_variables, metrics), (x, y) = args

        def loss_of(trainable):
            y_pred, new_non_trainable = self.stateless_call(trainable, non_trainable, x)
            loss, divisor = self._masked_mean(x, y, y_pred)
            return loss, (new_non_trainable, divisor)

        (loss, (non_trainable, divisor)), grads = jax.value_and_grad(loss_of, has_aux=True)(
            trainable
        )
        trainable, optimizer_variables = self.optimizer.stateless_apply(
            optimizer_variables, grads, trainable, sample_count=divisor
        )
        return {"loss": loss}, (trainable, non_trainable, optimizer_variables, metrics)


def test_a_train_step_that_divides_by_hand_and_passes_its_divisor_matches_big_batch():
    x, y, _ = _sequences()

    def by_hand():
        plain = _embedding_model()
        return ByHand(plain.inputs, plain.outputs)

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # given its divisor, nothing is assumed
        ours = _fit(lambda: ga3.wrap_model(by_hand(), K), x, y, MICRO, _token_loss())
    plain = _fit(_embedding_model, x, y, K * MICRO, _token_loss())
    _check((max_weight_difference(ours, plain), max_weight_difference(plain, _embedding_model())))


# ------------------------------------------------------------------ the noise scale, masked
# The closed form of tests/test_noise_scale.py (linear least squares, x ~ N(0, I_8), noise
# variance 1, the model at |w - w*|² = 1: B_simple = (d(|δ|² + σ²) + |δ|²) / |δ|² = 17), with
# masked time steps: 4 rows a micro-batch, each holding 1 or 3 valid steps (4 and 12 valid
# elements, alternately); the loss divides by the valid elements, so that is each
# micro-batch's batch size in the estimator (its rows, 4 each, bias it as unequal micro-batches
# weighed alike do).
NOISE_D, NOISE_ROWS, NOISE_STEPS, NOISE_WINDOWS, NOISE_K = 8, 4, 3, 400, 8


def _masked_regression(seed=0):
    rng = np.random.default_rng(seed)
    w_star = np.linspace(-1.0, 1.0, NOISE_D)
    n = NOISE_WINDOWS * NOISE_K * NOISE_ROWS
    valid = np.where((np.arange(n) // NOISE_ROWS) % 2 == 0, 1, 3)  # per row
    steps = np.arange(NOISE_STEPS)[None, :] < valid[:, None]
    x = np.where(steps[..., None], rng.normal(size=(n, NOISE_STEPS, NOISE_D)), 0.0)
    y = x @ w_star + rng.normal(size=(n, NOISE_STEPS)) * steps
    return x.astype("float32"), y[..., None].astype("float32"), w_star


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="the noise scale: TensorFlow")
def test_the_noise_scale_of_a_masked_loss_counts_its_valid_elements():
    x, y, w_star = _masked_regression()
    inputs = keras.Input((NOISE_STEPS, NOISE_D))
    dense = keras.layers.Dense(1, use_bias=False)
    model = keras.Model(inputs, dense(keras.layers.Masking(0.0)(inputs)))
    dense.kernel.assign((w_star + 1.0 / np.sqrt(NOISE_D))[:, None])  # |δ|² = 1
    model = ga3.wrap_model(model, NOISE_K, log_noise_scale=True, noise_scale_decay=0.999)
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")

    class Last(keras.callbacks.Callback):
        def on_window_end(self, event):
            self.event = event

    last = Last()
    model.fit(x, y, batch_size=NOISE_ROWS, epochs=1, shuffle=False, verbose=0, callbacks=[last])
    true = (NOISE_D * 2.0 + 1.0) / 1.0
    print(f"keras 3 masked: B_simple {last.event.noise_scale:.3f}, true {true}")
    assert last.event.window == NOISE_WINDOWS
    assert abs(last.event.noise_scale - true) <= 0.10 * true


# ------------------------------------------------------------------ plain Keras, two replicas


def test_plain_keras_over_two_replicas_on_masked_data():
    """Plain Keras 3 at batch 32 over two replicas against one device (the figure of
    docs/keras3.md): on TensorFlow each replica's loss is its own masked mean, scaled by 1/2,
    so the step is the mean of two means, not the big batch's; JAX's DataParallel computes
    the loss on the global batch, so it is the big batch."""
    x, y, _ = _sequences()
    two = _fit(_embedding_model, x, y, K * MICRO, _token_loss(), replicas=2)
    one = _fit(_embedding_model, x, y, K * MICRO, _token_loss())
    difference = max_weight_difference(two, one)
    print(f"plain Keras 3 ({_backend()}), two replicas vs one device: {difference:.2e}")
    if _backend() == "tensorflow":
        assert difference > 1e-3
    else:
        assert difference <= TOLERANCE


@pytest.mark.keras3_backend("tensorflow")
def test_the_optimizer_wrapper_given_loss_divisor_matches_big_batch():
    """A custom loop (TensorFlow) passing ``sample_count=loss_divisor(...)`` per micro-batch."""
    import tensorflow as tf

    x, y, _ = _sequences()
    model = _embedding_model()
    loss_fn = _token_loss()
    opt = ga3.GradientAccumulateOptimizer(keras.optimizers.SGD(0.1, momentum=0.9), K)

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            y_pred = model(xb, training=True)
            loss = loss_fn(yb, y_pred)
        grads = tape.gradient(loss, model.trainable_variables)
        count = ga3.loss_divisor(loss_fn, yb, y_pred)
        return opt.apply_gradients(zip(grads, model.trainable_variables), sample_count=count)

    for _ in range(2):
        for start in range(0, len(x), MICRO):
            step(x[start : start + MICRO], y[start : start + MICRO])
    plain = _fit(_embedding_model, x, y, K * MICRO, _token_loss())
    _check((max_weight_difference(model, plain), max_weight_difference(plain, _embedding_model())))
