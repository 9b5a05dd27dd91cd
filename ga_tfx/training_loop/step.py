"""``TrainingLoop``'s per-micro-batch math: inputs, targets, the mean loss, regularisation."""

from ga_tfx._keras import tf

from typing import Any, Callable, Union


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


def regularization_gradients(
    model: Any, variables: Any, regularization: Union[bool, Callable]
) -> Any:
    """Replica context: ``(R, ∇R)`` of the regularisation (``sum(model.losses)``, a callable
    ``model -> scalar``, or none: ``False``), or ``(None, None)`` when there is none."""
    if regularization is False:
        return None, None
    with tf.GradientTape() as tape:
        if callable(regularization):
            reg = regularization(model)
        else:
            terms = model.losses
            if not terms:
                return None, None
            reg = tf.add_n([tf.cast(t, tf.float32) for t in terms])
    return tf.cast(reg, tf.float32), tape.gradient(reg, variables)
