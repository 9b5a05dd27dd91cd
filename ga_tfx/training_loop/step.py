"""``TrainingLoop``'s steps: one micro-batch's math (inputs, targets, the mean loss,
regularisation) and the end of a window (the window core's, with the regularisation). The
window runner (:class:`~ga_tfx.window.runner.WindowRunner`) traces them and runs the window's
loop, without autograph's conversion of the library's code; the user's functions (the model's
call, ``loss_fn``, ``inputs_fn``, ``targets_fn``, ``sample_count_fn``, a ``regularization``
callable) are converted where they are called (:func:`user_function`). The host loop that
calls the window is ``TrainingLoop.run`` (:mod:`ga_tfx.training_loop.run`)."""

from ga_tfx import _tf_keras_internals as internals
from ga_tfx._keras import keras, tf
from ga_tfx.divisor_rule import micro_batch_groups, micro_batch_weight
from ga_tfx.loss_divisors import as_mean, call_recording
from ga_tfx.window import batch_size

import dataclasses
from typing import Any, Callable, Sequence, Union


def user_function(function: Callable) -> Callable:
    """``function`` as a ``tf.function`` with autograph would run it (Python control flow on
    tensors converted: :func:`ga_tfx._tf_keras_internals.autograph_converted`) when it is the
    user's; ga-tfx's own (the defaults) as it is."""
    if getattr(function, "__module__", "").startswith("ga_tfx."):
        return function
    return internals.autograph_converted(function)


def default_inputs(batch: Any) -> Any:
    return batch[0] if isinstance(batch, (tuple, list)) else batch


def default_targets(batch: Any) -> Any:
    if not isinstance(batch, (tuple, list)) or len(batch) < 2:
        raise ValueError(
            "The default targets_fn takes the second element of an (inputs, targets) batch, got "
            f"a batch of type {type(batch).__name__}. Pass targets_fn=... (e.g. "
            "targets_fn=lambda batch: batch to give loss_fn the whole batch)."
        )
    return batch[1]


def mean_loss(loss: Any, samples: Any) -> Any:
    """The batch's mean loss: ``loss`` itself when scalar, else per-example losses (leading axis
    = samples, other axes averaged) summed and divided by ``samples`` (0 for an empty batch)."""
    loss = tf.cast(loss, tf.float32)
    if loss.shape.rank == 0:
        return tf.where(samples > 0, loss, 0.0)
    if loss.shape.rank is None:
        raise ValueError("loss_fn must return a scalar or per-example losses of known rank.")
    if loss.shape.rank > 1:
        loss = tf.reduce_mean(loss, axis=list(range(1, loss.shape.rank)))
    return tf.math.divide_no_nan(tf.reduce_sum(loss), samples)


def loss_and_divisor(loss_fn: Callable, targets: Any, outputs: Any, rows: Any) -> Any:
    """Replica context: the micro-batch's mean loss and the divisor it was divided by.

    A Keras ``Loss`` (:func:`~ga_tfx.loss_divisors.call_recording`): its value and the divisor
    its reduction used (its element losses, valid ones when masked); with
    ``reduction="none"`` its element losses summed and divided by the divisor Keras' mean would
    use. Any other callable: its value averaged over the ``rows`` (:func:`mean_loss`), divided
    by ``rows``.

    Returns:
      ``(loss, divisor)``: float32 scalars.
    """
    if isinstance(loss_fn, keras.losses.Loss):
        value, term = call_recording(loss_fn, targets, outputs)
    else:
        value, term = user_function(loss_fn)(targets, outputs), None
    if term is None:
        return mean_loss(value, rows), rows
    if term.reduction == "none":
        value = tf.math.divide_no_nan(tf.reduce_sum(tf.cast(value, tf.float32)), term.divisor)
    return tf.cast(value, tf.float32), micro_batch_weight([as_mean(term)], rows, who="loss_fn")


def loss_parts(
    losses: Sequence[Any], weights: Sequence[float], targets: Any, outputs: Any, rows: Any
) -> Any:
    """Replica context: a loss of one Keras ``Loss`` per output (``losses``, each ``weights``
    times its mean, over the replicas as Keras scales it), and its parts with their weights
    (:func:`~ga_tfx.divisor_rule.micro_batch_groups`: each output whose divisor varies from
    micro-batch to micro-batch weighed by its own).

    Returns:
      ``(loss, [(part, weight), ...])``: float32 scalars, the parts summing to ``loss``.
    """
    flat_targets, flat_outputs = tf.nest.flatten(targets), tf.nest.flatten(outputs)
    if not len(flat_targets) == len(flat_outputs) == len(losses):
        raise ValueError(
            f"loss_fn has {len(losses)} losses, for {len(flat_outputs)} outputs and "
            f"{len(flat_targets)} targets: give one Keras Loss per output"
        )
    replicas = float(tf.distribute.get_replica_context().num_replicas_in_sync)
    terms, total = [], 0.0
    for loss, weight, y, out in zip(losses, weights, flat_targets, flat_outputs):
        value, term = call_recording(loss, y, out)
        term = as_mean(term)
        if internals.loss_reduction(loss) == "none":
            value = tf.math.divide_no_nan(tf.reduce_sum(tf.cast(value, tf.float32)), term.divisor)
        share = float(weight) * tf.cast(value, tf.float32) / replicas
        terms.append(dataclasses.replace(term, value=share))
        total = total + share
    return total, micro_batch_groups(terms, rows, total, who="loss_fn")


def regularization_gradients(
    model: Any, variables: Any, regularization: Union[bool, Callable]
) -> Any:
    """Replica context: ``(R, ∇R)`` of the regularisation (``sum(model.losses)``, a callable
    ``model -> scalar``, or none: ``False``), or ``(None, None)`` when there is none."""
    if regularization is False:
        return None, None
    with tf.GradientTape() as tape:
        if callable(regularization):
            reg = user_function(regularization)(model)
        else:
            terms = model.losses
            if not terms:
                return None, None
            reg = tf.add_n([tf.cast(t, tf.float32) for t in terms])
    return tf.cast(reg, tf.float32), tape.gradient(reg, variables)


class LoopSteps:
    """Mixin of :class:`~ga_tfx.TrainingLoop`: the steps its window runner traces, one
    micro-batch's and the window's end. Expects the loop's ``window_core``, ``strategy``,
    ``model``, ``optimizer``, ``variables`` and its user functions."""

    window_core: Any
    strategy: Any
    model: Any
    optimizer: Any
    variables: Any
    jit_compile: bool
    inputs_fn: Callable
    targets_fn: Callable
    loss_fn: Any
    loss_weights: Sequence[float]
    sample_count_fn: Any
    _regularization: Any

    def _finish_window(self) -> tf.Tensor:
        """Cross-replica: the window core ends the window (an update, or a skip), the
        regularisation gradient added once; returns whether it was applied."""
        return self.window_core.finish(
            self.strategy,
            self.optimizer,
            jit_compile=self.jit_compile,
            extra_gradient=self._regularization_gradients,
        )

    def _micro_step(self, batch: Any) -> Any:
        """Replica context: forward, loss, backward; adds ``D · g`` and ``D · loss`` to the
        window (the replica's mean loss over the number of replicas, as Keras scales it; ``D``
        the divisor of that mean: :func:`loss_and_divisor`, or ``sample_count_fn``'s).
        Returns that loss (a float32 scalar), once it is added."""
        x = user_function(self.inputs_fn)(batch)
        rows = batch_size(x)
        if isinstance(self.loss_fn, (list, tuple)):
            return self._micro_step_of_parts(batch, x, rows)
        replicas = float(tf.distribute.get_replica_context().num_replicas_in_sync)
        with tf.GradientTape() as tape:
            outputs, targets = self._forward(batch, x)
            if self.sample_count_fn is None:
                mean, divisor = loss_and_divisor(self.loss_fn, targets, outputs, rows)
            else:
                divisor = tf.cast(user_function(self.sample_count_fn)(batch), tf.float32)
                mean = mean_loss(user_function(self.loss_fn)(targets, outputs), divisor)
            loss = mean / replicas
        grads = tape.gradient(loss, self.variables)
        add = self.window_core.add(grads, divisor, loss, rows=rows)
        with tf.control_dependencies([add]):
            return tf.identity(loss)

    def _forward(self, batch: Any, x: Any) -> Any:
        """The model's training-mode outputs on ``x`` and the batch's targets."""
        # The model's layers are converted by Keras as under a tf.function with autograph.
        outputs = internals.autograph_converted(self.model.__call__)(x, training=True)
        return outputs, user_function(self.targets_fn)(batch)

    def _micro_step_of_parts(self, batch: Any, x: Any, rows: Any) -> Any:
        """:meth:`_micro_step` for a ``loss_fn`` of one Keras ``Loss`` per output: each part
        of the loss (:func:`loss_parts`) differentiated apart and added with its weight."""
        with tf.GradientTape(persistent=True) as tape:
            outputs, targets = self._forward(batch, x)
            loss, groups = loss_parts(self.loss_fn, self.loss_weights, targets, outputs, rows)
        parts = [(tape.gradient(part, self.variables), weight, part) for part, weight in groups]
        del tape
        (grads, weight, first), rest = parts[0], parts[1:]
        add = self.window_core.add(grads, weight, first, rows=rows, parts=rest)
        with tf.control_dependencies([add]):
            return tf.identity(loss)

    def _regularization_gradients(self) -> Any:
        """Replica context: ``(R, ∇R)`` of the regularisation, or ``(None, None)``."""
        return regularization_gradients(self.model, self.variables, self._regularization)
