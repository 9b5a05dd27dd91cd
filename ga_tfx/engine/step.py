"""The step: what one micro-batch does, and what the end of a window does.

This is the engine's counterpart of Keras' ``train_step``: the math of one micro-batch and of one
update, in replica context, with no ``tf.function`` and no loop. *How* these run (traced or
eager, XLA or not, how many micro-batches per window, when to apply) is decided by
:mod:`ga_tfx.engine.loop`, as Keras' ``make_train_function`` decides for ``train_step``.

* :meth:`WindowStep._accumulate_micro_batch`: forward, loss, backward on one micro-batch of
  ``n`` samples; adds ``n · g`` to the replica-local buffers of the model's
  :class:`~ga_tfx.accumulator.GradientAccumulator`; returns the micro-batch's logs.
* :meth:`WindowStep._apply_window`: all-reduces the buffers once, divides by the window's
  sample count, applies AGC (if on) and one ``optimizer.apply_gradients``, ends the window of
  the layers that keep window state (:class:`~ga_tfx.AccumBatchNormalization`), clears the
  buffers.
* :meth:`WindowStep._discard_window`: clears the window without an update.
"""

from ga_tfx._keras import keras, tf

from tf_keras.src.engine import data_adapter  # pinned tf-keras 2.16 internals

_LossScaleOptimizers = (keras.mixed_precision.LossScaleOptimizer,)


def is_loss_scale_optimizer(optimizer):
    """True for a Keras ``LossScaleOptimizer`` (new or legacy), which scales the loss."""
    return isinstance(optimizer, _LossScaleOptimizers) or hasattr(optimizer, "get_scaled_loss")


def apply_aggregated_gradients(optimizer, grads_and_vars):
    """``optimizer.apply_gradients`` for gradients that are already summed over replicas.

    Under a dynamic ``LossScaleOptimizer`` a non-finite window is skipped as one unit (no weight
    or slot changes, the loss scale decreases once) and, unlike Keras' own skipped steps, does
    not count in ``optimizer.iterations``: iterations (and learning-rate schedules) count
    applied updates only.
    """
    if isinstance(optimizer, keras.optimizers.Optimizer):
        result = optimizer.apply_gradients(grads_and_vars, skip_gradients_aggregation=True)
    else:
        result = optimizer.apply_gradients(grads_and_vars, experimental_aggregate_gradients=False)
    if is_loss_scale_optimizer(optimizer) and getattr(optimizer, "dynamic", False):
        # The same decision the LossScaleOptimizer takes: all gradients finite.
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g, _ in grads_and_vars])
        with tf.control_dependencies(_as_dependencies(result)):
            result = optimizer.iterations.assign_sub(1 - tf.cast(finite, tf.int64))
    return result


def _as_dependencies(result):
    # apply_gradients returns the iterations variable, an op, or None (LossScaleOptimizer).
    return [] if result is None else [result]


def batch_size(x):
    """Number of samples in a (nested) input batch, as float32."""
    first = tf.nest.flatten(x)[0]
    if isinstance(first, tf.SparseTensor):
        return tf.cast(first.dense_shape[0], tf.float32)
    if isinstance(first, tf.RaggedTensor):
        return tf.cast(first.nrows(), tf.float32)
    return tf.cast(tf.shape(first)[0], tf.float32)


class WindowStep:
    """Mixin of :class:`~ga_tfx.engine.AccumulationEngine`: the replica-context step functions.

    Expects ``self.gradient_accumulator`` (built by the engine before the loop runs),
    ``self.optimizer`` and the accumulation settings of the engine (``self.agc``).
    """

    def _accumulate_micro_batch(self, data):
        """Replica context: forward, loss, backward; adds ``n · g`` to the buffers.

        Args:
          data: one micro-batch as the dataset yields it: ``x``, ``(x, y)`` or
            ``(x, y, sample_weight)``; ``n`` is the size of its first axis.

        Returns:
          The micro-batch's logs (``compute_metrics``), after its gradient was added.
        """
        x, y, sample_weight = data_adapter.unpack_x_y_sample_weight(data)
        variables = self.trainable_variables
        optimizer = self.optimizer
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x, y, y_pred, sample_weight)
            if is_loss_scale_optimizer(optimizer):
                loss_to_differentiate = optimizer.get_scaled_loss(loss)
            else:
                loss_to_differentiate = loss
        if hasattr(self, "_validate_target_and_loss"):
            self._validate_target_and_loss(y, loss)
        grads = tape.gradient(loss_to_differentiate, variables)
        self.gradient_accumulator.record_connected(variables, grads)
        if is_loss_scale_optimizer(optimizer):
            grads = optimizer.get_unscaled_gradients(grads)
        with tf.control_dependencies([self.gradient_accumulator.add(grads, batch_size(x))]):
            return self.compute_metrics(x, y, y_pred, sample_weight)

    def _apply_window(self):
        """Replica context: one optimizer update with the window-mean gradient; resets.

        The applied gradient is ``Σ_i n_i g_i / N`` over the window's micro-batches on all
        replicas (``N = Σ n_i``); one batched all-reduce.
        """
        acc = self.gradient_accumulator
        sums, count = acc.reduce_window()
        ctx = tf.distribute.get_replica_context()
        # Keras divides each replica's loss by the number of replicas; undo that factor.
        replicas = ctx.num_replicas_in_sync if ctx is not None else 1
        grads_and_vars = []
        for grad_sum, variable in zip(sums, self.trainable_variables):
            scale = tf.cast(replicas, grad_sum.dtype) / tf.cast(count, grad_sum.dtype)
            grads_and_vars.append((tf.cast(grad_sum * scale, variable.dtype), variable))
        grads_and_vars = acc.connected_only(grads_and_vars)
        if self.agc is not None:
            grads_and_vars = self.agc(grads_and_vars)
        applied = apply_aggregated_gradients(self.optimizer, grads_and_vars)
        with tf.control_dependencies(_as_dependencies(applied)):
            ends = [layer.ga_window_end(apply=True) for layer in self._window_layers()]
            with tf.control_dependencies(ends):
                return acc.reset()

    def _discard_window(self):
        """Replica context: clears the window (buffers and window layers), no update."""
        ends = [layer.ga_window_end(apply=False) for layer in self._window_layers()]
        with tf.control_dependencies(ends):
            return self.gradient_accumulator.reset()

    def _window_layers(self):
        """Layers that keep per-window state (``AccumBatchNormalization``): they implement
        ``ga_window_end(apply)``, called in replica context once per window."""
        return [layer for layer in self._flatten_layers(include_self=False)
                if hasattr(layer, "ga_window_end")]
