"""The Keras contract on wrapped models: the user's own train_step, run_eagerly, jit_compile.

Weight-level checks against plain Keras big-batch training of the same model with SGD (and
Adam), as everywhere in ga-tfx. Tolerance: 1e-5 absolute on weights of order 1 after 6 float32
updates (the project's contract; float32 round-off of the reordered sums is about 1e-7 per
update, and XLA may fuse and reorder further).
"""

import ga_tfx  # noqa: I001  (first import: selects Keras 2)

import numpy as np
import pytest

from ga_tfx import keras, tf
from tests.helpers import host_op_model

pytestmark = []  # fast tier; library only (no TFX)

K = 4  # micro-batches per update
MICRO = 8  # micro-batch size
N = 64  # samples: 2 windows per epoch
EPOCHS = 3  # 6 updates
TOLERANCE = 1e-5  # float32 weights after 6 updates (see the module docstring)
L2 = 0.01  # the custom loss term of the train_step models


def _data(n=N, features=5, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features)).astype("float32")
    y = (x @ rng.normal(size=(features, 1)) + 0.1 * rng.normal(size=(n, 1))).astype("float32")
    return x, y


def _optimizer(kind):
    if kind == "sgd":
        return keras.optimizers.SGD(0.1)
    if kind == "nesterov":
        return keras.optimizers.SGD(0.05, momentum=0.9, nesterov=True)
    return keras.optimizers.Adam(0.01)


def _max_diff(a, b):
    return max(float(np.max(np.abs(u - v))) for u, v in zip(a.get_weights(), b.get_weights()))


def _kernel_penalty(model):
    return L2 * tf.add_n(
        [tf.reduce_sum(tf.square(v)) for v in model.trainable_variables if "kernel" in v.name]
    )


# --------------------------------------------------------------------------- user's train_step
class PenalisedModel(keras.Model):
    """A subclassed model whose train_step adds a loss term: 0.01 · Σ‖kernel‖²."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(8, activation="tanh", name="hidden")
        self.out = keras.layers.Dense(1, name="out")

    def call(self, x, training=None):
        return self.out(self.hidden(x))

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x, y, y_pred) + _kernel_penalty(self)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return self.compute_metrics(x, y, y_pred, None)


class PenalisedFunctional(keras.Model):
    """A functional model (built from inputs/outputs) whose train_step uses minimize."""

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x, y, y_pred) + _kernel_penalty(self)
        self.optimizer.minimize(loss, self.trainable_variables, tape=tape)
        return self.compute_metrics(x, y, y_pred, None)


def _functional(cls=PenalisedFunctional, **kwargs):
    inputs = keras.Input((5,), name="x")
    hidden = keras.layers.Dense(8, activation="tanh", name="hidden")(inputs)
    return cls(inputs, keras.layers.Dense(1, name="out")(hidden), **kwargs)


class PenalisedAccumulateModel(ga_tfx.GradientAccumulateModel):
    """A subclass of ga-tfx's own functional model with its own train_step."""

    train_step = PenalisedModel.train_step


def _build(kind):
    if kind == "subclassed":
        model = PenalisedModel()
        model.build((None, 5))
        return model
    return _functional()


def _pair(kind, seed=3):
    """Two models of ``kind`` with the same initial weights."""
    keras.utils.set_random_seed(seed)
    first = _build(kind)
    second = _build(kind)
    second.set_weights(first.get_weights())
    return first, second


def _fit_big_batch(model, optimizer, x, y, **compile_kwargs):
    model.compile(optimizer=optimizer, loss="mse", **compile_kwargs)
    model.fit(x, y, batch_size=K * MICRO, epochs=EPOCHS, shuffle=False, verbose=0)


def _fit_accumulated(model, optimizer, x, y, accum_steps=K, **compile_kwargs):
    wrapped = ga_tfx.wrap_model(model, accum_steps=accum_steps)
    wrapped.compile(optimizer=optimizer, loss="mse", **compile_kwargs)
    history = wrapped.fit(x, y, batch_size=MICRO, epochs=EPOCHS, shuffle=False, verbose=0)
    return wrapped, history


@pytest.mark.parametrize("optimizer", ["sgd", "nesterov", "adam"])
@pytest.mark.parametrize("kind", ["subclassed", "functional"])
def test_wrapped_train_step_matches_its_big_batch_run(kind, optimizer):
    x, y = _data()
    reference, model = _pair(kind)
    _fit_big_batch(reference, _optimizer(optimizer), x, y)
    wrapped, history = _fit_accumulated(model, _optimizer(optimizer), x, y)
    assert isinstance(wrapped, ga_tfx.AccumulatingModel)  # the train_step is kept
    assert int(wrapped.optimizer.iterations.numpy()) == EPOCHS * N // (K * MICRO)
    assert model.optimizer is wrapped.optimizer  # its train_step found the real one after fit
    assert _max_diff(model, reference) <= TOLERANCE
    assert set(history.history) == {"loss"}  # the logs of its own train_step


def test_own_subclass_of_gradient_accumulate_model_with_train_step():
    x, y = _data()
    keras.utils.set_random_seed(3)
    reference = _functional()
    model = _functional(PenalisedAccumulateModel, accum_steps=K)
    model.set_weights(reference.get_weights())
    _fit_big_batch(reference, _optimizer("sgd"), x, y)
    model.compile(optimizer=_optimizer("sgd"), loss="mse")
    model.fit(x, y, batch_size=MICRO, epochs=EPOCHS, shuffle=False, verbose=0)
    assert _max_diff(model, reference) <= TOLERANCE


def test_train_step_with_accum_steps_one_is_plain_keras_bit_for_bit():
    x, y = _data()
    reference, model = _pair("subclassed")
    reference.compile(optimizer=_optimizer("nesterov"), loss="mse")
    reference.fit(x, y, batch_size=MICRO, epochs=EPOCHS, shuffle=False, verbose=0)
    wrapped = ga_tfx.wrap_model(model, accum_steps=1)
    wrapped.compile(optimizer=_optimizer("nesterov"), loss="mse")
    wrapped.fit(x, y, batch_size=MICRO, epochs=EPOCHS, shuffle=False, verbose=0)
    assert _max_diff(model, reference) == 0.0


class TwoOptimizerModel(PenalisedModel):
    """GAN-like: compile takes two optimizers, train_step updates twice per batch."""

    def compile(self, first_optimizer=None, second_optimizer=None, **kwargs):
        super().compile(**kwargs)
        self.first_optimizer, self.second_optimizer = first_optimizer, second_optimizer


def test_model_overriding_compile_is_refused_at_compile():
    wrapped = ga_tfx.wrap_model(TwoOptimizerModel(), accum_steps=K)
    with pytest.raises(ValueError, match=r"overrides train_step.*GradientAccumulateOptimizer"):
        wrapped.compile(optimizer="sgd", loss="mse")


class TwiceAppliedModel(PenalisedModel):
    def train_step(self, data):
        x, y = data
        for variables in (self.hidden.trainable_variables, self.out.trainable_variables):
            with tf.GradientTape() as tape:
                loss = self.compute_loss(x, y, self(x, training=True))
            self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return {"loss": loss}


class OwnOptimizerModel(PenalisedModel):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(x, y, self(x, training=True))
        self.own_optimizer.apply_gradients(
            zip(tape.gradient(loss, self.trainable_variables), self.trainable_variables)
        )
        return {"loss": loss}


@pytest.mark.parametrize(
    "cls, problem", [(TwiceAppliedModel, "more than once"), (OwnOptimizerModel, "never called")]
)
def test_train_step_that_cannot_be_accumulated_is_an_error(cls, problem):
    x, y = _data()
    keras.utils.set_random_seed(0)
    model = cls()
    model.build((None, 5))
    model.own_optimizer = keras.optimizers.SGD(0.1)
    wrapped = ga_tfx.wrap_model(model, accum_steps=K)
    wrapped.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError, match=f"overrides train_step.*{problem}"):
        wrapped.fit(x, y, batch_size=MICRO, epochs=1, verbose=0)


# --------------------------------------------------------------------------- run_eagerly
class EagerProbe(keras.layers.Layer):
    """Records, per call, whether it runs eagerly."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.eager_calls = []

    def call(self, inputs):
        self.eager_calls.append(tf.executing_eagerly())
        return inputs


def _probe_model(seed=5):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((5,), name="x")
    probe = EagerProbe(name="probe")
    outputs = keras.layers.Dense(1, name="out")(probe(inputs))
    return keras.Model(inputs, outputs), probe


@pytest.mark.parametrize("partial_window", ["apply", "drop", "carry"])
def test_run_eagerly_runs_every_micro_batch_eagerly(partial_window):
    x, y = _data(n=56)  # 7 micro-batches: one full and one short window per epoch
    eager_model, probe = _probe_model()
    graph_model, graph_probe = _probe_model()
    results = []
    for model, run_eagerly in ((eager_model, True), (graph_model, False)):
        wrapped = ga_tfx.wrap_model(model, accum_steps=K, partial_window=partial_window)
        wrapped.compile(optimizer=_optimizer("sgd"), loss="mse", run_eagerly=run_eagerly)
        results.append(wrapped)
    probe.eager_calls.clear()
    graph_probe.eager_calls.clear()
    for wrapped in results:
        wrapped.fit(x, y, batch_size=MICRO, epochs=2, shuffle=False, verbose=0)
    assert probe.eager_calls == [True] * 14  # every micro-batch of both epochs, eagerly
    assert graph_probe.eager_calls and not any(graph_probe.eager_calls)  # traced only
    assert _max_diff(eager_model, graph_model) <= 1e-6  # same numbers as the traced loop


# --------------------------------------------------------------------------- jit_compile
def test_jit_compile_matches_plain_big_batch_xla_training():
    x, y = _data()
    reference, model = _pair("functional")
    plain_reference = keras.Model(reference.inputs, reference.outputs)  # Keras' own train_step
    plain_model = keras.Model(model.inputs, model.outputs)
    _fit_big_batch(plain_reference, _optimizer("nesterov"), x, y, jit_compile=True)
    wrapped, _ = _fit_accumulated(plain_model, _optimizer("nesterov"), x, y, jit_compile=True)
    assert wrapped.jit_compile
    assert _max_diff(plain_model, plain_reference) <= TOLERANCE


def _host_op_model():
    return host_op_model(features=5, outputs=1)


def test_op_xla_cannot_compile_fails_as_in_plain_keras():
    x, y = _data()
    plain = _host_op_model()
    plain.compile(optimizer="sgd", loss="mse", jit_compile=True)
    with pytest.raises(Exception) as plain_error:
        plain.fit(x, y, batch_size=MICRO, epochs=1, verbose=0)
    wrapped = ga_tfx.wrap_model(_host_op_model(), accum_steps=K)
    wrapped.compile(optimizer="sgd", loss="mse", jit_compile=True)
    with pytest.raises(type(plain_error.value)) as ga_error:
        wrapped.fit(x, y, batch_size=MICRO, epochs=1, verbose=0)
    for error in (plain_error.value, ga_error.value):
        assert "PyFunc" in str(error)  # XLA names the op it cannot compile
    # Without jit_compile the same model trains: the failure is XLA's.
    wrapped = ga_tfx.wrap_model(_host_op_model(), accum_steps=K)
    wrapped.compile(optimizer="sgd", loss="mse")
    wrapped.fit(x, y, batch_size=MICRO, epochs=1, verbose=0)


def test_jit_compile_with_train_step_model():
    x, y = _data()
    reference, model = _pair("subclassed")
    _fit_big_batch(reference, _optimizer("sgd"), x, y, jit_compile=True)
    _fit_accumulated(model, _optimizer("sgd"), x, y, jit_compile=True)
    assert _max_diff(model, reference) <= TOLERANCE


def test_train_step_under_mirrored_strategy_matches_its_big_batch_run():
    # 2 replicas (conftest's two logical CPUs): the global micro-batch of 8 is split 4 + 4.
    # (jit_compile under MirroredStrategy is not checked here: plain Keras itself fails with it
    # on logical CPU devices, "Trying to access resource ... located in device CPU:1".)
    x, y = _data()
    strategy = tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )
    with strategy.scope():
        reference, model = _pair("subclassed")
        _fit_big_batch(reference, _optimizer("nesterov"), x, y)
        _fit_accumulated(model, _optimizer("nesterov"), x, y)
    assert _max_diff(model, reference) <= TOLERANCE


class _HalveIfPositive(keras.layers.Layer):
    """A user's layer written with Python control flow on a tensor (autograph's job)."""

    def __init__(self, by_tensor_ops=False, **kwargs):
        super().__init__(**kwargs)
        self.by_tensor_ops = by_tensor_ops

    def call(self, x):
        if self.by_tensor_ops:
            return tf.where(tf.reduce_sum(x) > 0.0, x * 0.5, x)
        if tf.reduce_sum(x) > 0.0:
            x = x * 0.5
        return x


def _doubled_if_positive(model, loss):
    if model.by_tensor_ops:
        return tf.where(loss > 0.0, loss * 2.0, loss)
    if loss > 0.0:
        loss = loss * 2.0
    return loss


class _DoubledLossIfPositive(keras.Model):
    """A user's train_step and compute_loss, each with Python control flow on a tensor."""

    by_tensor_ops = False

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None):
        return _doubled_if_positive(self, super().compute_loss(x, y, y_pred, sample_weight))

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(x, y, self(x, training=True))
            if self.by_tensor_ops:
                loss = tf.where(loss < 1e6, loss * 0.25, loss)
            elif loss < 1e6:
                loss = loss * 0.25
        self.optimizer.minimize(loss, self.trainable_variables, tape=tape)
        return {"loss": loss}


class _AccumulatingDoubledLoss(ga_tfx.GradientAccumulateModel):
    """A user's subclass of the library's model with its own compute_loss (Python control
    flow on a tensor) and Keras' train_step: the engine calls the loss itself."""

    by_tensor_ops = False

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None):
        return _doubled_if_positive(self, super().compute_loss(x, y, y_pred, sample_weight))


def test_a_users_layer_train_step_and_loss_with_python_control_flow_on_tensors_train_in_fit():
    """fit traces the library's micro-batch step without autograph's conversion (its
    start-up: ga_tfx.engine.loop); the user's code in it still is converted, as a tf.function
    would: a layer's ``call``, a model's ``train_step`` and ``compute_loss``, each with ``if``
    on a tensor, train as the same model written in tensor ops, to float32 round-off (SGD)."""
    from tests.helpers import classification_data, max_weight_diff, sparse_ce

    x, y = classification_data(n=64, seed=4)

    def trained(by_tensor_ops, model_class):
        keras.utils.set_random_seed(2)
        inputs = keras.Input((8,))
        h = keras.layers.Dense(16, activation="tanh")(inputs)
        h = _HalveIfPositive(by_tensor_ops)(h)
        if issubclass(model_class, ga_tfx.GradientAccumulateModel):
            wrapped = model_class(inputs, keras.layers.Dense(3)(h), accum_steps=4)
        else:
            wrapped = ga_tfx.wrap_model(model_class(inputs, keras.layers.Dense(3)(h)), 4)
        wrapped.by_tensor_ops = getattr(wrapped, "model", wrapped).by_tensor_ops = by_tensor_ops
        wrapped.compile(keras.optimizers.SGD(0.5), sparse_ce())
        wrapped.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        return wrapped

    plain = trained(True, keras.Model)
    for model_class in (keras.Model, _DoubledLossIfPositive, _AccumulatingDoubledLoss):
        users, tensor_ops = trained(False, model_class), trained(True, model_class)
        assert max_weight_diff(users, tensor_ops) <= 1e-6, model_class
        if model_class is not keras.Model:  # the train_step and the loss did act
            assert max_weight_diff(users, plain) > 1e-3, model_class


class _PenalizedModel(keras.Model):
    """A functional model whose class overrides compute_loss (a kernel penalty) and
    compute_metrics (a figure of its own), not train_step."""

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None):
        return super().compute_loss(x, y, y_pred, sample_weight) + _kernel_square(self)

    def compute_metrics(self, x, y, y_pred, sample_weight):
        results = super().compute_metrics(x, y, y_pred, sample_weight)
        results["kernel_square"] = _kernel_square(self)
        return results


def _kernel_square(model):
    return 0.05 * tf.add_n(
        [tf.reduce_sum(w * w) for w in model.trainable_weights if w.shape.rank == 2]
    )


def test_wrap_model_trains_a_functional_models_own_compute_loss_and_metrics():
    """``wrap_model`` keeps a functional model's own ``compute_loss`` and ``compute_metrics``
    (its class is trained through Keras' train_step): the weights follow the same class's
    big-batch training (SGD, float32 round-off), and its metric is logged."""
    from tests.helpers import classification_data, max_weight_diff, train_pair

    x, y = classification_data(n=64, seed=5)

    def build(model_class):
        def made():
            keras.utils.set_random_seed(3)
            inputs = keras.Input((8,))
            h = keras.layers.Dense(16, activation="tanh")(inputs)
            return model_class(inputs, keras.layers.Dense(3)(h))

        return made

    big, acc = train_pair(build(_PenalizedModel), lambda: keras.optimizers.SGD(0.3), x, y, 8, 4)
    assert max_weight_diff(big, acc) <= 1e-6
    _, unpenalized = train_pair(build(keras.Model), lambda: keras.optimizers.SGD(0.3), x, y, 8, 4)
    assert max_weight_diff(acc, unpenalized) > 1e-3  # the penalty did act
    history = acc.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0).history
    assert history["kernel_square"][0] > 0.0
