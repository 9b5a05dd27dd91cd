"""AccumBatchNormalization and replace_batchnorm_layers for Keras 3 models (TensorFlow backend).

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
"""

from ga_tfx import _keras3_internals as internals
from ga_tfx._state import Untracked
from ga_tfx._tf_internals import local_component, tf

from typing import Any, Optional

import keras

_ON_READ = tf.VariableSynchronization.ON_READ
_SUM = tf.VariableAggregation.SUM


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
        self._window = Untracked(None)

    def build(self, input_shape: Any) -> None:
        super().build(input_shape)
        shape = tuple(self.moving_mean.shape)
        with tf.init_scope():
            self._window.value = [
                tf.Variable(
                    tf.zeros(shape if i else (), tf.float32),
                    trainable=False,
                    synchronization=_ON_READ,
                    aggregation=_SUM,
                    name=f"{self.name}_window_{name}",
                )
                for i, name in enumerate(("count", "sum", "square_sum"))
            ]

    def call(self, inputs: Any, training: Optional[bool] = None, mask: Any = None) -> Any:
        if not (training and self.trainable):
            return super().call(inputs, training=training, mask=mask)
        ops = keras.ops
        x = ops.cast(inputs, "float32")
        mean, variance = internals.bn_moments(self, x, mask)
        count, total, squares = (local_component(v) for v in self._window.value)
        axes = internals.bn_reduction_axes(self)
        n = tf.cast(tf.reduce_prod([tf.shape(x)[a] for a in axes]), tf.float32)
        updates = [
            count.assign_add(n),
            total.assign_add(n * mean),
            squares.assign_add(n * (variance + mean * mean)),
        ]
        with tf.control_dependencies(updates):
            outputs = ops.batch_normalization(
                x=x,
                mean=mean,
                variance=variance,
                axis=self.axis,
                offset=ops.cast(self.beta, "float32") if self.center else None,
                scale=ops.cast(self.gamma, "float32") if self.scale else None,
                epsilon=self.epsilon,
            )
        return ops.cast(outputs, self.compute_dtype)

    def ga_window_end(self, apply: bool) -> Any:
        """Replica context, once per window: folds the window's statistics into the moving
        averages when ``apply`` (a Python bool), then clears the sums."""
        values = [v.read_value() for v in self._window.value]
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            values = context.all_reduce(tf.distribute.ReduceOp.SUM, values)
        count, total, squares = values
        ops = []
        if apply:
            mean = total / count
            variance = squares / count - mean * mean
            m = self.momentum
            ops.append(self.moving_mean.assign(self.moving_mean * m + mean * (1.0 - m)))
            ops.append(self.moving_variance.assign(self.moving_variance * m + variance * (1.0 - m)))
        with tf.control_dependencies(ops):
            return tf.group(
                [local_component(v).assign(tf.zeros_like(v)) for v in self._window.value]
            )


def window_layers(model: Any) -> list:
    """The layers of ``model`` that keep window state (``ga_window_end``)."""
    return [layer for layer in internals.flatten_layers(model) if hasattr(layer, "ga_window_end")]


def replace_batchnorm_layers(model: Any) -> Any:
    """A copy of ``model`` (functional or Sequential) with every ``BatchNormalization`` an
    :class:`AccumBatchNormalization` of the same configuration, its weights (gamma, beta and
    the moving statistics) carried over, every other layer's weights too."""

    def clone(layer: Any) -> Any:
        config = layer.get_config()
        if type(layer) is keras.layers.BatchNormalization:
            return AccumBatchNormalization(**config)
        return layer.__class__.from_config(config)

    copy = keras.models.clone_model(model, clone_function=clone)
    copy.set_weights(model.get_weights())
    return copy
