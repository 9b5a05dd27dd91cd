"""The divisor of a Keras 2 loss, read as tf-keras computes it, and its recording in a step
(docs/exactness.md, "The window's divisor")."""

from ga_tfx import _tf_keras_internals as internals
from ga_tfx._keras import keras, tf
from ga_tfx.divisor_rule import LossTerm, micro_batch_weight

import contextlib
import dataclasses
from typing import Any, Iterator, List, Optional, Tuple


@tf.autograph.experimental.do_not_convert
def loss_divisor(loss: Any, y_true: Any, y_pred: Any, sample_weight: Any = None) -> tf.Tensor:
    """The number a Keras 2 loss divides its weighted element losses by, for one batch.

    What to pass as ``sample_count=`` to :meth:`ga_tfx.GradientAccumulateOptimizer.apply_gradients`
    (and what ``fit`` and :class:`~ga_tfx.TrainingLoop` use themselves), as Hugging Face
    Transformers' ``num_items_in_batch``: with it, a window's gradient is that of one batch of
    all its micro-batches. Read from tf-keras' own reduction (``tf_keras/src/losses.py``,
    ``Loss.__call__``; ``utils/losses_utils.py``, ``apply_valid_mask`` and
    ``compute_weighted_loss``): ``sum_over_batch_size`` (and ``auto``) divides by the number
    of element losses, and a masked loss (``Embedding(mask_zero=True)``, ``Masking``: the mask
    of ``y_pred`` and of the element losses) by its valid elements; sample and class weights
    do not change it.

    Args:
      loss: a ``keras.losses.Loss`` (Keras 2) of a mean reduction, or of ``reduction="none"``
        (as ``tf.distribute`` custom loops need it): then the divisor of its mean.
      y_true: the targets, as given to ``loss``.
      y_pred: the predictions, with the Keras mask the model attached, if any.
      sample_weight: optional sample weights, as given to ``loss``.

    Returns:
      A float32 scalar tensor: the element losses (valid ones when masked) of this batch on
      this replica. Under ``tf.distribute``, pass it as ``sample_count`` with the replica's loss
      ``loss(...) / num_replicas_in_sync`` (Keras' per-replica loss).

    Raises:
      ValueError: ``loss`` is not a Keras 2 ``Loss`` or computes its own reduction (overrides
        ``__call__``); :class:`~ga_tfx.DivisorError` (a ``ValueError``): it reduces by
        ``"sum"``.

    Example::

        # loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            divisor = ga_tfx.loss_divisor(loss, y, y_pred)
            mean = tf.reduce_sum(loss(y, y_pred)) / divisor
        grads = tape.gradient(mean, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables), sample_count=divisor)
    """
    _, term = call_recording(loss, y_true, y_pred, sample_weight)
    if term is None:
        raise ValueError(
            f"ga_tfx.loss_divisor: {loss!r} is not a Keras 2 Loss whose reduction ga_tfx can "
            "read (a keras.losses.Loss that does not override __call__); pass your loss's own "
            "divisor as sample_count"
        )
    return micro_batch_weight([as_mean(term)], None, who="ga_tfx.loss_divisor")


def as_mean(term: LossTerm) -> LossTerm:
    """``term``, a loss of ``reduction="none"`` (as ``tf.distribute`` custom loops need it)
    read as the mean Keras' default reduction would take: the same divisor."""
    if term.reduction == "none":
        return dataclasses.replace(term, reduction="sum_over_batch_size")
    return term


@tf.autograph.experimental.do_not_convert
def call_recording(
    loss: Any, y_true: Any, y_pred: Any, sample_weight: Any = None
) -> Tuple[Any, Optional[LossTerm]]:
    """Calls ``loss(y_true, y_pred, sample_weight)`` and records its divisor.

    The value is tf-keras' own, with one change: a batch whose every element is masked gives
    0 (and a zero gradient), where tf-keras divides by 0 valid elements (NaN); its divisor is
    0, so it adds nothing to its window, as in one batch of the window's samples.

    Args:
      loss: the loss to call (a ``keras.losses.Loss`` is recorded; anything else is only
        called).
      y_true, y_pred, sample_weight: as ``loss`` takes them.

    Returns:
      ``(value, term)``: the loss's value and its :class:`~ga_tfx.divisor_rule.LossTerm`,
      or ``None`` for a loss whose reduction cannot be read (not a ``Loss``, or a ``Loss``
      with its own ``__call__``).
    """
    if not isinstance(loss, keras.losses.Loss) or (
        type(loss).__call__ is not keras.losses.Loss.__call__
    ):
        args = (y_true, y_pred) if sample_weight is None else (y_true, y_pred, sample_weight)
        return loss(*args), None
    in_mask = internals.keras_mask(y_pred) if tf.is_tensor(y_pred) else None
    y_pred, sample_weight = _empty_mask_safe(y_pred, in_mask, sample_weight)
    recorded: List[Any] = []
    with internals.loss_call_recorded(loss, recorded):
        value = loss(y_true, y_pred, sample_weight)
    losses = recorded[-1]
    mask = _combined_mask(in_mask, internals.keras_mask(losses))
    return value, LossTerm(
        name=getattr(loss, "name", type(loss).__name__),
        reduction=internals.loss_reduction(loss),
        divisor=_divisor(losses, mask),
        by_rows=mask is None and losses.shape[1:].is_fully_defined(),
    )


def _combined_mask(in_mask: Any, out_mask: Any) -> Any:
    """The mask tf-keras' ``Loss.__call__`` applies: the predictions' and the losses'."""
    if in_mask is not None and out_mask is not None:
        return tf.logical_and(tf.cast(in_mask, tf.bool), tf.cast(out_mask, tf.bool))
    return in_mask if in_mask is not None else out_mask


def _divisor(losses: Any, mask: Any) -> Any:
    """``sum(l · w) / divisor`` is tf-keras' mean: ``size(losses)``, times ``valid / size(mask)``
    where a mask is rescaled by ``total / valid`` (``apply_valid_mask``)."""
    size = tf.cast(tf.size(losses), tf.float32)
    if mask is None:
        return size
    mask = tf.cast(mask, tf.float32)
    return tf.reduce_sum(mask) * tf.math.divide_no_nan(size, tf.cast(tf.size(mask), tf.float32))


def _empty_mask_safe(y_pred: Any, mask: Any, sample_weight: Any) -> Tuple[Any, Any]:
    """``y_pred`` and ``sample_weight`` for which a fully masked batch's loss is 0, not NaN
    (``mask``: ``y_pred``'s Keras mask).

    The mask is merged into the sample weights (as tf-keras' compiled loss does before every
    loss; idempotent for a 0/1 mask), and a mask with no valid element is replaced by ones:
    the weights are then all 0, and tf-keras' ``total / valid`` rescaling divides by the
    batch's size instead of by 0. A batch with a valid element computes exactly as before.
    """
    if mask is None:
        return y_pred, sample_weight
    sample_weight = internals.masked_sample_weight(y_pred, sample_weight, mask)
    return _EmptyMaskSafe()(y_pred), sample_weight


class _EmptyMaskSafe(keras.layers.Layer):
    """The identity whose output mask is its input's, or all ones where that has no valid
    element (Keras attaches a layer's ``compute_mask`` to its output)."""

    def __init__(self) -> None:
        super().__init__(name="ga_tfx_empty_mask_safe")
        self.supports_masking = True

    def call(self, inputs: Any) -> Any:
        return tf.identity(inputs)

    def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
        if mask is None:
            return None
        return tf.where(tf.reduce_any(tf.cast(mask, tf.bool)), mask, tf.ones_like(mask))


class _RecordingLoss:
    """Stands for one loss object of a compiled loss: calls it recording its term, with the
    term's share of the compiled loss as tf-keras' ``LossesContainer.__call__`` adds it
    (``tf_keras/src/engine/compile_utils.py``): times its ``loss_weights`` entry, and over
    the replicas for a mean reduction (``scale_loss_for_distribution``)."""

    def __init__(self, loss: Any, loss_weight: Any, terms: List[LossTerm]) -> None:
        self._loss = loss
        self._loss_weight = loss_weight
        self._terms = terms

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loss, name)

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Any:
        value, term = call_recording(self._loss, y_true, y_pred, sample_weight)
        if term is not None:
            share = value if self._loss_weight is None else value * self._loss_weight
            replicas = tf.distribute.get_strategy().num_replicas_in_sync
            self._terms.append(dataclasses.replace(term, value=share / replicas))
        return value


class _RecordingContainer:
    """Stands for ``model.compiled_loss`` in a step: its loss objects record their terms."""

    def __init__(self, container: Any, terms: List[LossTerm]) -> None:
        self._container = container
        self._terms = terms

    def __getattr__(self, name: str) -> Any:
        return getattr(self._container, name)

    def __call__(self, y_true: Any, y_pred: Any, *args: Any, **kwargs: Any) -> Any:
        container = self._container
        recording = [
            None if loss is None else _RecordingLoss(loss, loss_weight, self._terms)
            for loss, loss_weight in internals.compiled_loss_objects(container, y_pred)
        ]
        with internals.compiled_loss_objects_as(container, recording):
            return container(y_true, y_pred, *args, **kwargs)


@contextlib.contextmanager
def recording_compiled_loss(model: keras.Model) -> Iterator[List[LossTerm]]:
    """Inside the block, ``model``'s compiled loss records the terms it computes.

    Args:
      model: a compiled Keras 2 model (without a compiled loss nothing is recorded).

    Yields:
      The list the terms are appended to, one per output loss per call, in order.
    """
    terms: List[LossTerm] = []
    container = getattr(model, "compiled_loss", None)
    if container is None:
        yield terms
        return
    with internals.untracked_attribute(
        model, "compiled_loss", _RecordingContainer(container, terms)
    ):
        yield terms
