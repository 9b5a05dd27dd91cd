"""The window's divisor on Keras 2 (issue 56): each micro-batch weighs by what its loss divided by.

Reference: plain big-batch tf-keras training (``fit`` at K·b, one device, SGD with momentum, so a
gradient-scale error moves the weights) on the same data in the same order. The data are
variable-length token sequences padded to one length, whose micro-batches hold very unequal
numbers of valid tokens (:data:`LENGTHS`): weighing a micro-batch by its rows is then as far
from big batch as training moves the weights (each test asserts that the token counts differ,
and that the weights moved). Tolerance 1e-6: float32 round-off of the reordered sums (about
1e-7 relative, 8 updates of weights of order 1).

The divisor is checked once against an independent answer (NumPy's sum of the weighted element
losses over Keras' value), the rest at the weight level.
"""

import ga_tfx
from ga_tfx import keras, tf
from ga_tfx.divisor_rule import DivisorError

import contextlib
import warnings

import numpy as np
import pytest

from tests.helpers import max_weight_diff, train_pair, two_replica_strategy

pytestmark = []  # fast tier; library only (no TFX)

T, VOCAB, CLASSES = 12, 20, 5
MICRO, K = 8, 4
TOLERANCE = 1e-6
MIN_MOVEMENT = 1e-2
# Valid tokens per sequence, one micro-batch of 8 per entry: four micro-batches of a window
# hold 96, 8, 48 and 16 tokens (rows weigh them equally).
LENGTHS = (12, 1, 6, 2, 3, 12, 1, 8)


def sequences(lengths=LENGTHS, seed=0, micro=MICRO):
    """Token ids ``[n, T]`` (0 is padding) and per-token classes; ``micro`` rows per length."""
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.array(lengths), micro)
    x = np.zeros((len(rows), T), "int64")
    for i, length in enumerate(rows):
        x[i, :length] = rng.integers(1, VOCAB, length)
    y = (x * 3 + 1) % CLASSES
    return x, y


def tagger(mask_layer="embedding"):
    """A per-token classifier whose loss Keras masks: ``Embedding(mask_zero=True)`` or a
    ``Masking`` layer over float inputs."""
    keras.utils.set_random_seed(7)
    if mask_layer == "embedding":
        inputs = keras.Input((T,), dtype="int64")
        h = keras.layers.Embedding(VOCAB, 8, mask_zero=True)(inputs)
    else:
        inputs = keras.Input((T, 1))
        h = keras.layers.Masking(mask_value=0.0)(inputs)
        h = keras.layers.Dense(8, activation="tanh")(h)
    h = keras.layers.Dense(8, activation="tanh")(h)
    return keras.Model(inputs, keras.layers.Dense(CLASSES, name="tags")(h))


def sgd(rate=0.5):
    return keras.optimizers.SGD(rate, momentum=0.9)


# The two-output runs at a smaller rate: at 0.5 their weights move by about 1 in 4 updates, and
# float32 round-off of the reordered sums (about 1e-7 relative) then grows past TOLERANCE with
# them (1.5e-6 after 2 epochs, 7e-7 after 1, in proportion to the movement).
TWO_OUTPUT_RATE = 0.1
PREFIX = 2  # the second head's valid tokens: each row's first two


def token_ce():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def tokens_per_micro_batch(x):
    return [int(np.count_nonzero(x[i : i + MICRO])) for i in range(0, len(x), MICRO)]


def tagger_pair(x, y, build=tagger, optimizer=sgd, **kwargs):
    """``train_pair`` of the tagger (or ``build``) with the token loss: (big batch, wrapped)."""
    return train_pair(
        build, optimizer, x, y, MICRO, K, loss=token_ce(), min_movement=MIN_MOVEMENT, **kwargs
    )


def assert_exact(big, acc):
    diff = max_weight_diff(big, acc)
    assert diff <= TOLERANCE, f"max |dw| {diff:.3g} from big batch"


def test_the_divisor_is_what_keras_divides_the_masked_sum_by():
    x, y = sequences()
    model = tagger()
    logits = model(x[:16], training=False)
    sample_weight = np.linspace(0.0, 2.0, 16).astype("float32")
    loss = token_ce()
    value = float(loss(y[:16], logits, sample_weight))
    divisor = float(ga_tfx.loss_divisor(loss, y[:16], logits, sample_weight))
    # NumPy: per-token cross-entropy, weighted, over the valid tokens.
    z = logits.numpy().astype("float64")
    top = z.max(-1, keepdims=True)
    log_p = z - top - np.log(np.exp(z - top).sum(-1, keepdims=True))
    token_losses = -np.take_along_axis(log_p, y[:16, :, None], -1)[..., 0]
    valid = x[:16] != 0
    weighted_sum = float((token_losses * sample_weight[:, None] * valid).sum())
    assert divisor == valid.sum()
    assert divisor * value == pytest.approx(weighted_sum, rel=1e-5)


@pytest.mark.parametrize("mask_layer", ["embedding", "masking"])
def test_fit_on_masked_sequences_matches_big_batch(mask_layer):
    x, y = sequences()
    assert len(set(tokens_per_micro_batch(x))) > 3
    inputs = x if mask_layer == "embedding" else (x[..., None] / VOCAB).astype("float32")
    big, acc = tagger_pair(inputs, y, build=lambda: tagger(mask_layer))
    assert_exact(big, acc)


def test_adam_on_masked_sequences_matches_big_batch():
    # Adam rescales the gradient, hiding a scale error, not a weighting one: 1e-5 (the
    # tolerance of the other optimizers' comparisons), where rows weighting is far off.
    x, y = sequences()
    big, acc = tagger_pair(x, y, optimizer=lambda: keras.optimizers.Adam(1e-2))
    diff = max_weight_diff(big, acc)
    assert diff <= 1e-5, f"max |dw| {diff:.3g} from big batch"


def test_temporal_sample_weights_and_an_uneven_last_window_match_big_batch():
    x, y = (a[:-4] for a in sequences(LENGTHS + (5,)))
    weights = np.random.default_rng(3).uniform(0.0, 3.0, x.shape).astype("float32")
    assert len(x) % (MICRO * K) != 0  # the last window is short, its last micro-batch too
    big, acc = tagger_pair(x, y, fit_kwargs=dict(sample_weight=weights))
    assert_exact(big, acc)


def test_a_zero_weight_micro_batch_and_a_fully_masked_one_match_big_batch():
    lengths = (12, 0, 6, 2, 3, 12, 1, 8)  # the second micro-batch is padding only
    x, y = sequences(lengths)
    weights = np.ones(len(x), "float32")
    weights[16:24] = 0.0  # the third micro-batch weighs nothing
    big, acc = tagger_pair(x, y, fit_kwargs=dict(sample_weight=weights))
    assert np.isfinite(np.concatenate([w.ravel() for w in acc.get_weights()])).all()
    assert_exact(big, acc)


def test_two_outputs_that_divide_by_their_rows_match_big_batch_with_loss_weights():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(72, 6)).astype("float32")  # 9 micro-batches: the last window short
    y1, y2 = rng.integers(0, 3, 72), rng.normal(size=(72, 2)).astype("float32")

    def build():
        keras.utils.set_random_seed(3)
        inputs = keras.Input((6,))
        h = keras.layers.Dense(8, activation="tanh")(inputs)
        return keras.Model(inputs, [keras.layers.Dense(3)(h), keras.layers.Dense(2)(h)])

    big, acc = train_pair(
        build,
        sgd,
        x,
        [y1, y2],
        MICRO,
        K,
        loss=[token_ce(), "mse"],
        compile_kwargs=dict(loss_weights=[1.0, 0.3]),
        min_movement=MIN_MOVEMENT,
    )
    assert_exact(big, acc)


def two_output_tagger(second="prefix", l2=0.0):
    """The tagger with a second head: on each row's first :data:`PREFIX` valid tokens (its
    divisor is in another ratio to the first head's in every micro-batch: 2 of 12 tokens, 1
    of 1, 2 of 6, ...), or on the pooled sequence without a mask (``second="plain"``, dividing
    by its rows); optional L2 on a kernel (a regularisation loss beside the terms)."""
    keras.utils.set_random_seed(7)
    inputs = keras.Input((T,), dtype="int64")
    h = keras.layers.Embedding(VOCAB, 8, mask_zero=True)(inputs)
    regularizer = keras.regularizers.L2(l2) if l2 else None
    h = keras.layers.Dense(8, activation="tanh", kernel_regularizer=regularizer)(h)
    first = keras.layers.Dense(CLASSES, name="tags")(h)
    if second == "plain":
        pooled = keras.layers.GlobalAveragePooling1D()(h)
        return keras.Model(inputs, [first, keras.layers.Dense(CLASSES, name="kind")(pooled)])
    other = keras.layers.Lambda(
        tf.identity, mask=lambda t, mask: tf.logical_and(mask, tf.range(T) < PREFIX), name="prefix"
    )(keras.layers.Dense(CLASSES)(h))
    return keras.Model(inputs, [first, other])


def two_output_pair(second="prefix", l2=0.0, replicas=1, epochs=2, wrapped=True):
    """Big-batch ``fit`` at K·b of :func:`two_output_tagger` (``loss_weights`` 1 and 0.4) and,
    when ``wrapped``, its accumulated ``fit`` at b (on ``replicas``): ``(big, acc)``."""
    x, y = sequences()
    y2 = (y + 2) % CLASSES if second == "prefix" else y[:, 0]
    if second == "prefix":  # the heads divide by counts in other ratios per micro-batch
        heads = two_output_tagger(second, l2)
        ratios = set()
        for i in range(0, len(x), MICRO):
            out1, out2 = heads(x[i : i + MICRO], training=False)
            d1 = float(ga_tfx.loss_divisor(token_ce(), y[i : i + MICRO], out1))
            d2 = float(ga_tfx.loss_divisor(token_ce(), y2[i : i + MICRO], out2))
            ratios.add(d2 / d1)
        assert len(ratios) > 3, ratios
    kwargs = dict(loss_weights=[1.0, 0.4])
    big = two_output_tagger(second, l2)
    initial = big.get_weights()
    big.compile(sgd(TWO_OUTPUT_RATE), [token_ce(), token_ce()], **kwargs)
    big.fit(x, [y, y2], batch_size=MICRO * K, epochs=epochs, shuffle=False, verbose=0)
    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(initial, big.get_weights()))
    assert moved > MIN_MOVEMENT
    if not wrapped:
        return big, None
    scope = two_replica_strategy().scope() if replicas == 2 else contextlib.nullcontext()
    with scope:
        acc = ga_tfx.wrap_model(two_output_tagger(second, l2), K)
        acc.compile(sgd(TWO_OUTPUT_RATE), [token_ce(), token_ce()], **kwargs)
    acc.fit(x, [y, y2], batch_size=MICRO, epochs=epochs, shuffle=False, verbose=0)
    return big, acc


@pytest.mark.parametrize(
    "second,l2",
    [("prefix", 0.0), ("prefix", 1e-2), ("plain", 1e-2)],
    ids=["two_masks", "two_masks_l2", "masked_and_rows_l2"],
)
def test_two_outputs_with_their_own_divisors_and_loss_weights_match_big_batch(second, l2):
    big, acc = two_output_pair(second, l2)
    assert_exact(big, acc)


def test_two_outputs_with_their_own_masks_on_two_replicas_match_the_one_device_big_batch():
    big, acc = two_output_pair(replicas=2)
    assert_exact(big, acc)


class OwnStep(keras.Model):
    """Keras' train_step written out: one gradient of the compiled loss, applied once."""

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(x, y, self(x, training=True))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}


def test_two_outputs_with_their_own_masks_in_a_models_own_train_step_are_refused_in_one_line():
    # A train_step hands the window one gradient per micro-batch: no single weight is exact.
    inner = two_output_tagger()
    model = ga_tfx.wrap_model(OwnStep(inner.inputs, inner.outputs), K)
    model.compile(sgd(), [token_ce(), token_ce()])
    x, y = sequences()
    with pytest.raises(DivisorError, match=r"has 2 loss terms and .* one gradient per micro"):
        model.fit(x, [y, y], batch_size=MICRO, epochs=1, shuffle=False, verbose=0)


def test_a_summed_loss_is_refused_in_one_line_naming_the_reductions_allowed():
    x, y = sequences()
    model = ga_tfx.wrap_model(tagger(), K)
    model.compile(sgd(), keras.losses.SparseCategoricalCrossentropy(True, reduction="sum"))
    with pytest.raises(DivisorError, match=r"reduction='sum'.*'sum_over_batch_size'"):
        model.fit(x, y, batch_size=MICRO, epochs=1, shuffle=False, verbose=0)


def test_fit_on_two_replicas_matches_the_one_device_big_batch():
    x, y = sequences()
    big = tagger()
    big.compile(sgd(), token_ce())
    big.fit(x, y, batch_size=MICRO * K, epochs=2, shuffle=False, verbose=0)
    with two_replica_strategy().scope():
        acc = ga_tfx.wrap_model(tagger(), K)
        acc.compile(sgd(), token_ce())
    acc.fit(x, y, batch_size=MICRO, epochs=2, shuffle=False, verbose=0)
    assert_exact(big, acc)


def _big_batch(x, y, epochs=2):
    model = tagger()
    model.compile(sgd(), token_ce())
    model.fit(x, y, batch_size=MICRO * K, epochs=epochs, shuffle=False, verbose=0)
    return model


@pytest.mark.parametrize("reduction", ["none", "sum_over_batch_size"])
def test_training_loop_with_a_keras_loss_matches_big_batch(reduction):
    x, y = sequences()
    big = _big_batch(x, y)
    model = tagger()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=reduction)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(MICRO)
    ga_tfx.TrainingLoop(model, sgd(), loss, data, accum_steps=K, regularization=False).run(epochs=2)
    assert_exact(big, model)


def test_training_loop_on_two_replicas_matches_the_one_device_big_batch():
    x, y = sequences()
    big = _big_batch(x, y)
    strategy = two_replica_strategy()
    with strategy.scope():
        model = tagger()
        optimizer = sgd()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(MICRO)
    ga_tfx.TrainingLoop(model, optimizer, loss, data, accum_steps=K, strategy=strategy).run(
        epochs=2
    )
    assert_exact(big, model)


@pytest.mark.parametrize("replicas", [1, 2], ids=["one_device", "mirrored"])
def test_training_loop_with_one_keras_loss_per_output_matches_big_batch(replicas):
    big, _ = two_output_pair(epochs=1, wrapped=False)
    strategy = two_replica_strategy() if replicas == 2 else tf.distribute.get_strategy()
    with strategy.scope():
        model = two_output_tagger()
        optimizer = sgd(TWO_OUTPUT_RATE)
    x, y = sequences()
    data = tf.data.Dataset.from_tensor_slices((x, (y, (y + 2) % CLASSES))).batch(MICRO)
    losses = [keras.losses.SparseCategoricalCrossentropy(True, reduction="none")] * 2
    loop = ga_tfx.TrainingLoop(
        model, optimizer, losses, data, K, strategy=strategy, loss_weights=[1.0, 0.4]
    )
    loop.run(epochs=1)
    assert len(loop.window_core.accumulator.parts) == 1
    assert_exact(big, model)


@pytest.mark.parametrize(
    "loss_fn, weights, match",
    [
        ([token_ce(), "mse"], None, r"one Keras Loss per output .*'mse'"),
        ([token_ce(), token_ce()], [1.0], r"loss_weights=\[1.0\] must be 2 numbers"),
        (token_ce(), [1.0], r"loss_weights=\[1.0\] needs a loss_fn of one Keras Loss per"),
    ],
)
def test_training_loop_refuses_a_bad_list_of_losses_in_one_line(loss_fn, weights, match):
    x, y = sequences()
    data = tf.data.Dataset.from_tensor_slices((x, (y, y))).batch(MICRO)
    with pytest.raises((TypeError, ValueError), match=match):
        ga_tfx.TrainingLoop(two_output_tagger(), sgd(), loss_fn, data, K, loss_weights=weights)


def _optimizer_steps(model, optimizer, loss, strategy=None):
    """A custom loop step: each replica's loss over its divisor (ga_tfx.loss_divisor), as
    Keras scales it for the replicas, and the divisor as ``sample_count``."""

    def replica_step(xb, yb):
        replicas = tf.distribute.get_replica_context().num_replicas_in_sync
        with tf.GradientTape() as tape:
            logits = model(xb, training=True)
            value = tf.reduce_sum(loss(yb, logits))
            divisor = ga_tfx.loss_divisor(loss, yb, logits)
            mean = tf.math.divide_no_nan(value, divisor) / replicas
        grads = tape.gradient(mean, model.trainable_variables)
        return optimizer.apply_gradients(
            zip(grads, model.trainable_variables), sample_count=divisor
        )

    @tf.function
    def step(xb, yb):
        if strategy is None:
            return replica_step(xb, yb)
        return strategy.run(replica_step, (xb, yb))

    return step


@pytest.mark.parametrize("replicas", [1, 2], ids=["one_device", "mirrored"])
def test_the_optimizer_wrapper_given_loss_divisor_matches_big_batch(replicas):
    x, y = sequences()
    big = _big_batch(x, y)
    strategy = two_replica_strategy() if replicas == 2 else tf.distribute.get_strategy()
    with strategy.scope():
        model = tagger()
        optimizer = ga_tfx.GradientAccumulateOptimizer(sgd(), accum_steps=K)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    step = _optimizer_steps(model, optimizer, loss, strategy if replicas == 2 else None)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(MICRO)
    if replicas == 2:
        data = strategy.experimental_distribute_dataset(data)
    for _ in range(2):
        for xb, yb in data:
            step(xb, yb)
    assert_exact(big, model)


def _two_term_step(model, optimizer, strategy):
    """A custom loop step for :func:`two_output_tagger`: each head's mean over its own divisor
    (ga_tfx.loss_divisor), as Keras scales it for the replicas and by its ``loss_weights``
    (1, 0.4), the second head's gradient and divisor passed as ``parts=``."""
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def replica_step(xb, y1, y2):
        count = tf.distribute.get_replica_context().num_replicas_in_sync
        variables = model.trainable_variables
        with tf.GradientTape(persistent=True) as tape:
            out1, out2 = model(xb, training=True)
            d1, d2 = ga_tfx.loss_divisor(loss, y1, out1), ga_tfx.loss_divisor(loss, y2, out2)
            m1 = tf.math.divide_no_nan(tf.reduce_sum(loss(y1, out1)), d1) / count
            m2 = 0.4 * tf.math.divide_no_nan(tf.reduce_sum(loss(y2, out2)), d2) / count
        g1, g2 = tape.gradient(m1, variables), tape.gradient(m2, variables)
        return optimizer.apply_gradients(
            zip(g1, variables), sample_count=d1, parts=[(zip(g2, variables), d2)]
        )

    @tf.function
    def step(xb, y1, y2):
        return strategy.run(replica_step, (xb, y1, y2))

    return step


def _two_term_batches():
    x, y = sequences()
    return tf.data.Dataset.from_tensor_slices((x, y, (y + 2) % CLASSES)).batch(MICRO)


@pytest.mark.parametrize("replicas", [1, 2], ids=["one_device", "mirrored"])
def test_the_optimizer_wrapper_given_each_terms_divisor_as_parts_matches_big_batch(replicas):
    big, _ = two_output_pair(epochs=1, wrapped=False)
    strategy = two_replica_strategy() if replicas == 2 else tf.distribute.get_strategy()
    with strategy.scope():
        model = two_output_tagger()
        optimizer = ga_tfx.GradientAccumulateOptimizer(sgd(TWO_OUTPUT_RATE), accum_steps=K)
    step = _two_term_step(model, optimizer, strategy)
    data = _two_term_batches()
    if replicas == 2:
        data = strategy.experimental_distribute_dataset(data)
    for batch in data:
        step(*batch)
    assert_exact(big, model)


def test_a_resume_in_the_middle_of_a_window_keeps_each_terms_divisor(tmp_path):
    # Checkpointed after 2 of a window's 4 micro-batches, restored into a new model and
    # optimizer (its parts made by a first step, then restored), then the rest of the data.
    big, _ = two_output_pair(epochs=1, wrapped=False)
    batches = list(_two_term_batches())
    strategy = tf.distribute.get_strategy()

    def fresh():
        model = two_output_tagger()
        optimizer = ga_tfx.GradientAccumulateOptimizer(sgd(TWO_OUTPUT_RATE), accum_steps=K)
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
        return model, optimizer, checkpoint, _two_term_step(model, optimizer, strategy)

    model, optimizer, checkpoint, step = fresh()
    for batch in batches[:6]:
        step(*batch)
    assert int(optimizer.window_core.micro_steps.numpy()) == 2
    assert len(optimizer.window_core.accumulator.parts) == 1
    prefix = checkpoint.save(str(tmp_path / "ckpt"))
    model, optimizer, checkpoint, step = fresh()
    step(*batches[0])  # builds the accumulator and its part (the restore replaces their sums)
    checkpoint.restore(prefix)
    for batch in batches[6:]:
        step(*batch)
    assert_exact(big, model)


@pytest.mark.parametrize("front_end", ["training_loop", "optimizer_wrapper"])
def test_a_fully_masked_micro_batch_and_an_uneven_last_window_match_big_batch(front_end):
    # 9 micro-batches: the second all padding, the third window one micro-batch (applied as
    # plain fit applies its smaller last batch).
    x, y = sequences((12, 0, 6, 2, 3, 12, 1, 8, 5))
    big = _big_batch(x, y)
    model = tagger()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(MICRO)
    if front_end == "training_loop":
        ga_tfx.TrainingLoop(model, sgd(), loss, data, accum_steps=K, verbose=False).run(epochs=2)
    else:
        optimizer = ga_tfx.GradientAccumulateOptimizer(sgd(), accum_steps=K)
        step = _optimizer_steps(model, optimizer, loss)
        for _ in range(2):
            for xb, yb in data:
                step(xb, yb)
            optimizer.flush()
    assert np.isfinite(np.concatenate([w.ravel() for w in model.get_weights()])).all()
    assert_exact(big, model)


def test_a_resume_in_the_middle_of_a_window_keeps_its_divisor(tmp_path):
    # The optimizer wrapper checkpointed after 2 of a window's 4 micro-batches (96 and 8
    # tokens), restored into a new model and optimizer, then the rest of the data.
    x, y = sequences()
    big = _big_batch(x, y, epochs=1)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    batches = list(tf.data.Dataset.from_tensor_slices((x, y)).batch(MICRO))

    def restored(prefix=None):
        model = tagger()
        optimizer = ga_tfx.GradientAccumulateOptimizer(sgd(), accum_steps=K)
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
        return model, optimizer, checkpoint

    model, optimizer, checkpoint = restored()
    step = _optimizer_steps(model, optimizer, loss)
    for xb, yb in batches[:6]:
        step(xb, yb)
    assert int(optimizer.window_core.micro_steps.numpy()) == 2
    prefix = checkpoint.save(str(tmp_path / "ckpt"))
    model, optimizer, checkpoint = restored()
    step = _optimizer_steps(model, optimizer, loss)
    step(*batches[0])  # builds the accumulator (a micro-batch whose sums the restore replaces)
    checkpoint.restore(prefix)
    for xb, yb in batches[6:]:
        step(xb, yb)
    assert_exact(big, model)


def test_a_models_own_train_step_through_the_compiled_loss_matches_big_batch():
    def build():
        inner = tagger()
        return OwnStep(inner.inputs, inner.outputs)

    x, y = sequences()
    big, acc = tagger_pair(x, y, build=build)
    assert_exact(big, acc)


def test_a_train_step_that_divides_by_hand_is_weighted_by_rows_and_says_so():
    class ByHand(keras.Model):
        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                losses = keras.losses.sparse_categorical_crossentropy(y, self(x), True)
                loss = tf.reduce_mean(losses)
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            return {"loss": loss}

    x, y = sequences()
    inner = tagger()
    model = ga_tfx.wrap_model(ByHand(inner.inputs, inner.outputs), K)
    model.compile(sgd())
    with pytest.warns(UserWarning, match="weighted by its rows"):
        model.fit(x, y, batch_size=MICRO, epochs=1, shuffle=False, verbose=0)


def test_a_train_step_that_divides_by_hand_and_passes_its_divisor_matches_big_batch():
    class ByHand(keras.Model):
        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                losses = keras.losses.sparse_categorical_crossentropy(y, self(x), True)
                valid = tf.cast(tf.not_equal(x, 0), losses.dtype)
                divisor = tf.reduce_sum(valid)
                loss = tf.math.divide_no_nan(tf.reduce_sum(losses * valid), divisor)
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(
                zip(grads, self.trainable_variables), sample_count=divisor
            )
            return {"loss": loss}

    def build():
        inner = tagger()
        return ByHand(inner.inputs, inner.outputs)

    x, y = sequences()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # given its divisor, nothing is assumed
        big, acc = tagger_pair(x, y, build=build)
    assert_exact(big, acc)
