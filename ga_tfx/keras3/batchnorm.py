"""AccumBatchNormalization and replace_batchnorm_layers for Keras 3 models (TensorFlow and JAX).

In training each micro-batch is normalised with its own statistics (ghost batch norm, as Keras
2's :class:`ga_tfx.AccumBatchNormalization`); the moving statistics are updated once per window,
with the statistics of the whole window, as big-batch BatchNormalization updates them from one
batch of all the window's samples: the layer adds ``n``, ``n·mean`` and ``n·(variance + mean²)``
of each micro-batch to replica-local sums, and at the window's end (the window core calls
``ga_window_end(apply)``, in replica context) sums them over replicas and folds
``mean = Σ n·mean / N`` and ``variance = Σ n·(variance + mean²) / N - mean²`` (the biased
variance Keras 3's ``BatchNormalization`` uses, between-micro-batch spread included) into the
moving averages with the layer's momentum. A skipped window is dropped. Keras 3's own
``gradient_accumulation_steps`` updates them per micro-batch (measured 1.9 and 2.7 off the big
batch's, ENGINEERING.md).

On JAX (no TensorFlow imported) the three sums are the layer's non-trainable weights, the only
state Keras' stateless forward threads (``stateless_call``); ``n`` is the traced batch's, the
global batch's under ``DataParallel`` (no all-reduce to add), and the model's ``train_step``
folds them (:func:`fold`) when the optimizer's window ends (:mod:`ga_tfx.keras3.jax_model`).
"""

from ga_tfx import _keras3_internals as internals

import math
from typing import Any, List, Optional

import keras

_NAMES = ("count", "sum", "square_sum")


def _on_jax() -> bool:
    return bool(keras.backend.backend() == "jax")


def fold(moving: Any, sums: Any, momentum: float) -> List[Any]:
    """The moving ``[mean, variance]`` with the window of ``sums`` (``[n, Σ n·mean,
    Σ n·(variance + mean²)]``) folded in with ``momentum``, as big-batch BN folds one batch; left
    as they are where the window saw no training call (``n`` 0: a frozen layer)."""
    ops = keras.ops
    count, total, squares = sums
    seen = ops.greater(count, 0.0)
    safe = ops.maximum(count, 1.0)
    mean = total / safe
    variance = squares / safe - mean * mean
    return [
        ops.where(seen, old * momentum + new * (1.0 - momentum), old)
        for old, new in zip(moving, (mean, variance))
    ]


class AccumBatchNormalization(keras.layers.BatchNormalization):
    """``keras.layers.BatchNormalization`` whose moving statistics are the window's (see the
    module); the same arguments (``renorm`` not supported). Train it through
    :func:`ga_tfx.keras3.wrap_model`, which ends its windows."""

    def __init__(self, **kwargs: Any) -> None:
        if kwargs.get("renorm"):
            raise ValueError(
                "AccumBatchNormalization: renorm=True is not supported (allowed: False)"
            )
        super().__init__(**kwargs)
        if not _on_jax():  # the TensorFlow backend's window sums (JAX's: weights, in build)
            from ga_tfx._state import Untracked

            self._window = Untracked(None)

    def build(self, input_shape: Any) -> None:
        super().build(input_shape)
        shape = tuple(self.moving_mean.shape)
        if _on_jax():
            # JAX's stateless forward threads non-trainable weights only: the sums are weights
            # there (saved with the model, so a run resumes inside its window), ended by the
            # model's train_step when the optimizer's window ends (ga_tfx.keras3.jax_model).
            self.window_sums = [
                self.add_weight(
                    shape=shape if i else (),
                    initializer="zeros",
                    trainable=False,
                    dtype="float32",
                    name=f"window_{name}",
                )
                for i, name in enumerate(_NAMES)
            ]
            return
        from ga_tfx._tf_internals import tf

        with tf.init_scope():
            self._window.value = [
                tf.Variable(
                    tf.zeros(shape if i else (), tf.float32),
                    trainable=False,
                    synchronization=tf.VariableSynchronization.ON_READ,
                    aggregation=tf.VariableAggregation.SUM,
                    name=f"{self.name}_window_{name}",
                )
                for i, name in enumerate(_NAMES)
            ]

    def call(self, inputs: Any, training: Optional[bool] = None, mask: Any = None) -> Any:
        if not (training and self.trainable):
            return super().call(inputs, training=training, mask=mask)
        if not getattr(self, "_ga_windowed", False):
            # Nothing would ever fold the window's sums: the moving statistics would stay at
            # their initial values, silently.
            error = ValueError(
                f"AccumBatchNormalization {self.name!r} trained outside a model wrapped by "
                "ga_tfx.keras3.wrap_model, where its moving statistics would never move "
                "(allowed: fit of ga_tfx.keras3.wrap_model(model, K); for training without "
                "wrap_model, keras.layers.BatchNormalization)"
            )
            raise internals.raised_as_is(error)
        ops = keras.ops
        x = ops.cast(inputs, "float32")
        mean, variance = internals.bn_moments(self, x, mask)
        if _on_jax():  # static shapes under jit: n is the (global) batch's
            n = float(math.prod(x.shape) // math.prod(mean.shape))
            count, total, squares = self.window_sums
            count.assign(count + n)
            total.assign(total + n * mean)
            squares.assign(squares + n * (variance + mean * mean))
            return ops.cast(self._normalized(x, mean, variance), self.compute_dtype)
        from ga_tfx._tf_internals import local_component, tf

        count, total, squares = (local_component(v) for v in self._window.value)
        axes = internals.bn_reduction_axes(self)
        n = tf.cast(tf.reduce_prod([tf.shape(x)[a] for a in axes]), tf.float32)
        updates = [
            count.assign_add(n),
            total.assign_add(n * mean),
            squares.assign_add(n * (variance + mean * mean)),
        ]
        with tf.control_dependencies(updates):
            outputs = self._normalized(x, mean, variance)
        return ops.cast(outputs, self.compute_dtype)

    def _normalized(self, x: Any, mean: Any, variance: Any) -> Any:
        ops = keras.ops
        return ops.batch_normalization(
            x=x,
            mean=mean,
            variance=variance,
            axis=self.axis,
            offset=ops.cast(self.beta, "float32") if self.center else None,
            scale=ops.cast(self.gamma, "float32") if self.scale else None,
            epsilon=self.epsilon,
        )

    def ga_window_end(self, apply: bool) -> Any:
        """Replica context, once per window: folds the window's statistics into the moving
        averages when ``apply`` (a Python bool), then clears the sums."""
        from ga_tfx._tf_internals import local_component, tf

        values = [v.read_value() for v in self._window.value]
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            values = context.all_reduce(tf.distribute.ReduceOp.SUM, values)
        ops = []
        if apply:
            moving = fold([self.moving_mean, self.moving_variance], values, self.momentum)
            ops.append(self.moving_mean.assign(moving[0]))
            ops.append(self.moving_variance.assign(moving[1]))
        with tf.control_dependencies(ops):
            return tf.group(
                [local_component(v).assign(tf.zeros_like(v)) for v in self._window.value]
            )


def window_layers(model: Any) -> list:
    """The layers of ``model`` that keep window state (``ga_window_end``)."""
    return [layer for layer in internals.flatten_layers(model) if hasattr(layer, "ga_window_end")]


def mark_windowed(layers: List[Any]) -> None:
    """Marks ``layers`` (:func:`window_layers`) as trained by a front-end that ends their
    windows; an :class:`AccumBatchNormalization` refuses to train unmarked."""
    for layer in layers:
        object.__setattr__(layer, "_ga_windowed", True)


def replace_batchnorm_layers(model: Any) -> Any:
    """A copy of ``model`` (functional or Sequential, nested functional or Sequential models
    included) with every ``BatchNormalization`` an :class:`AccumBatchNormalization` of the same
    configuration, its weights (gamma, beta and the moving statistics) carried over, every other
    layer's weights too. A subclassed model (or one nested inside) is refused: build it with
    :class:`AccumBatchNormalization` in place of ``BatchNormalization``."""

    def is_plain_bn(layer: Any) -> bool:
        return type(layer) is keras.layers.BatchNormalization

    def clone(layer: Any) -> Any:
        config = layer.get_config()
        if is_plain_bn(layer):
            return AccumBatchNormalization(**config)
        return layer.__class__.from_config(config)

    def refuse(what: Any) -> Any:
        return ValueError(
            f"ga_tfx.keras3.replace_batchnorm_layers: {what} (allowed: a functional or "
            "Sequential model, nested ones included; for a subclassed model, build it with "
            "ga_tfx.keras3.AccumBatchNormalization in place of keras.layers.BatchNormalization)"
        )

    if not internals.is_graph_model(model):
        raise refuse(f"{type(model).__name__} {getattr(model, 'name', '')!r} is subclassed")
    for layer in internals.flatten_layers(model):
        if isinstance(layer, keras.Model) and not internals.is_graph_model(layer):
            raise refuse(f"nested model {layer.name!r} ({type(layer).__name__}) is subclassed")
    copy = keras.models.clone_model(model, clone_function=clone, recursive=True)
    left = [layer.name for layer in internals.flatten_layers(copy) if is_plain_bn(layer)]
    if left:
        raise refuse(f"BatchNormalization {left} could not be replaced")
    if not _on_jax():
        copy.set_weights(model.get_weights())
        return copy
    # On JAX an AccumBatchNormalization has its window sums as weights after BN's own four:
    # each layer's weights are carried over, its window sums left at zero.
    for old, new in zip(internals.flatten_layers(model), internals.flatten_layers(copy)):
        if not internals.flatten_layers(old):  # leaves only: a container's weights are theirs
            for source, target in zip(old.weights, new.weights):
                target.assign(keras.ops.convert_to_numpy(source))  # a copy: not a shared buffer
    return copy
