"""The divisor of a Keras 3 loss (:func:`loss_divisor`, exported as
``ga_tfx.keras3.loss_divisor``): the number Keras' own reduction divided its weighted element
losses by, read as Keras computes it (TensorFlow and JAX backends).

A micro-batch's weight in its window is that divisor ``D`` (the rule is backend-neutral:
:func:`ga_tfx.divisor_rule.micro_batch_weight`), so that the window gradient
``Σ_i D_i g_i / Σ_i D_i`` is the gradient of the window's loss taken as one batch: the sum of
all its weighted element losses over its total divisor. What Keras 3.15 divides by
(``keras/src/losses/loss.py``):

- ``Loss.__call__`` computes the element losses with ``self.call(y_true, y_pred)`` and a mask
  from ``y_pred``'s Keras mask (``in_mask``) and the element losses' (``out_mask``), both when
  both exist, then ``reduce_weighted_values``;
- ``reduce_weighted_values`` merges the mask into the sample weight (``apply_mask``: for
  ``sum_over_batch_size`` and ``mean`` each valid element weighs ``total/valid``, a masked one
  0; for ``mean_with_sample_weight`` the mask is the weight as it is), brings weight and element
  losses to one rank (``squeeze_or_expand_to_same_rank``), multiplies them and calls
  ``reduce_values``;
- ``reduce_values`` sums and, for ``sum_over_batch_size``/``mean``, divides by the number of
  elements of the weighted element losses; for ``mean_with_sample_weight`` by the sum of the
  sample weight in its own shape (after ``apply_mask`` and the rank change, not broadcast to
  the losses': a weight of shape ``(B, 1)`` on losses of ``(B, T)`` sums to ``Σ_b w_b``), or by
  the elements when there is no weight; ``divide_no_nan`` makes a zero divisor a zero loss;
  ``sum`` and ``none`` do not divide. ``scale_loss_for_distribution`` then multiplies by ``1/R``
  under ``tf.distribute`` (not part of ``D``: the window core expects that share).

So ``D`` is: the elements; with a mask, the valid elements (the total/valid rescaling divided
by the elements); for ``mean_with_sample_weight`` ``Σ sample_weight`` as Keras sums it. The
model's compiled loss (``keras/src/trainers/compile_utils.py`` ``CompileLoss.call``, called by
``keras/src/trainers/trainer.py`` ``Trainer.compute_loss``) computes one such ``Loss`` per
output with a loss, from its ``_flat_losses`` entries ``(path, loss, loss_weights, name)``,
multiplies each by its ``loss_weights`` and sums them: each entry is one
:class:`~ga_tfx.divisor_rule.LossTerm`. Regularisation losses (``model.losses``) are not
terms: they do not depend on the micro-batch (the weights are fixed through a window), so any
weighted mean of them over the window is themselves.

The element losses are taken as Keras computes them: while the real ``Loss.__call__`` runs,
the loss object's ``call`` is stood in for by an instance attribute that calls the real one
and keeps its output; the divisor is then computed from them with Keras' own ``apply_mask``
and ``squeeze_or_expand_to_same_rank`` (``ga_tfx._keras3_internals``). It is a scalar float32
tensor under ``stop_gradient``: it depends on the data, masks and sample weights only, and under
``jax.value_and_grad`` (Keras' JAX ``train_step``) it is then a value of the enclosing trace,
never the differentiating one, so the optimizer step after it may read it.
"""

from ga_tfx import _keras3_internals as internals
from ga_tfx.divisor_rule import (
    MEAN_REDUCTIONS,
    ONE_GRADIENT,
    DivisorError,
    LossTerm,
    micro_batch_groups,
    micro_batch_weight,
)

import contextlib
import dataclasses
import math
from typing import Any, Iterator, List, Optional, Tuple

import keras


class LossTerms:
    """The loss terms recorded for one micro-batch (:func:`compiled_loss_terms`).

    Attributes:
      terms: the :class:`~ga_tfx.divisor_rule.LossTerm` of each compiled-loss entry computed,
        in order.
      unknown: names of entries whose divisor could not be read (a ``Loss`` with its own
        ``__call__``, or a ``call`` that returns a scalar, which Keras does not divide).
    """

    def __init__(self) -> None:
        self.terms: List[LossTerm] = []
        self.unknown: List[str] = []

    def weight(self, rows: Any, who: str, several: str = ONE_GRADIENT) -> Any:
        """The micro-batch's weight ``D`` from the recorded terms
        (:func:`~ga_tfx.divisor_rule.micro_batch_weight`, ``several`` its refusal's way out;
        with an unknown entry, as if none was recorded: its rows, with the rule's warning)."""
        return micro_batch_weight([] if self.unknown else self.terms, rows, who, several)

    def groups(self, rows: Any, total: Any, who: str) -> List[Tuple[Any, Any]]:
        """The parts of the micro-batch's loss ``total`` the window weighs apart, each with its
        weight (:func:`~ga_tfx.divisor_rule.micro_batch_groups`; with an unknown entry, one
        part weighed as :meth:`weight` does)."""
        if self.unknown:
            return [(total, self.weight(rows, who))]
        return micro_batch_groups(self.terms, rows, total, who)


def _element_losses(loss: Any, y_true: Any, y_pred: Any, sample_weight: Any) -> Tuple[Any, Any]:
    """Runs ``loss(y_true, y_pred, sample_weight)`` (Keras' own ``Loss.__call__``) and returns
    its value and the element losses its ``call`` returned (``None`` when ``call`` did not run
    exactly once)."""
    seen: List[Any] = []
    real = loss.call

    def recording(*args: Any, **kwargs: Any) -> Any:
        values = real(*args, **kwargs)
        seen.append(values)
        return values

    with internals.instance_attribute(loss, "call", recording):
        value = loss(y_true, y_pred, sample_weight)
    return value, (seen[0] if len(seen) == 1 else None)


def _count(shape: Tuple[Any, ...]) -> Any:
    """The number of elements of ``shape`` (a Python int where static), float32."""
    if all(isinstance(d, int) for d in shape):
        return keras.ops.convert_to_tensor(float(math.prod(shape)), dtype="float32")
    dims = keras.ops.convert_to_tensor(shape, dtype="int32")
    return keras.ops.cast(keras.ops.prod(dims), "float32")


def _term(
    name: str, reduction: Any, dtype: Any, losses: Any, sample_weight: Any, mask: Any
) -> Optional[LossTerm]:
    """The :class:`LossTerm` of one ``Loss`` call whose element losses were ``losses``
    (``None``: its divisor cannot be read), as ``reduce_weighted_values`` divides."""
    ops = keras.ops
    reduction = "none" if reduction is None else str(reduction).lower()
    if reduction not in MEAN_REDUCTIONS:
        return LossTerm(name, reduction, None, False)
    values = ops.convert_to_tensor(losses, dtype=dtype)
    if sample_weight is not None:
        sample_weight = ops.convert_to_tensor(sample_weight, dtype=dtype)
    if mask is not None:
        mask = ops.convert_to_tensor(mask, dtype=dtype)
    weights = internals.apply_mask(sample_weight, mask, dtype=values.dtype, reduction=reduction)
    if weights is not None:
        weights = ops.cast(weights, values.dtype)
        values, weights = internals.squeeze_or_expand_to_same_rank(values, weights)
        values = values * weights  # its shape is what reduce_values divides by
    static = tuple(values.shape)
    if static in ((), (0,)):
        return None  # reduce_values returns such values as they are: no divisor of Keras'
    shape = tuple(ops.shape(values))
    if reduction == "mean_with_sample_weight" and weights is not None:
        divisor = ops.cast(ops.sum(weights), "float32")  # in its own shape, as Keras sums it
        by_rows = False
    elif mask is not None:
        # Each valid element weighs total/valid and the sum is divided by the elements:
        # D = elements * valid / total, the valid elements when the mask has the losses' shape.
        valid = ops.cast(ops.sum(ops.cast(mask, values.dtype)), "float32")
        mask_shape = tuple(ops.shape(mask))
        known = all(isinstance(d, int) for d in shape + mask_shape)
        if known and mask_shape == shape:
            divisor = valid
        else:
            divisor = ops.divide_no_nan(_count(shape) * valid, _count(mask_shape))
        by_rows = False
    else:
        divisor = _count(shape)
        by_rows = all(isinstance(d, int) for d in static[1:])
    return LossTerm(name, reduction, ops.stop_gradient(divisor), by_rows)


def _record(
    loss: Any, name: str, y_true: Any, y_pred: Any, sample_weight: Any
) -> Tuple[Any, Optional[LossTerm]]:
    """``loss(y_true, y_pred, sample_weight)`` as Keras computes it, and its term."""
    in_mask = internals.keras_mask(y_pred)
    value, losses = _element_losses(loss, y_true, y_pred, sample_weight)
    if losses is None:
        return value, None
    out_mask = internals.keras_mask(losses)
    if in_mask is not None and out_mask is not None:
        mask = in_mask & out_mask
    else:
        mask = in_mask if in_mask is not None else out_mask
    dtype = getattr(loss, "dtype", None)
    term = _term(name, getattr(loss, "reduction", None), dtype, losses, sample_weight, mask)
    return value, term


def loss_divisor(loss: Any, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Any:
    """The number Keras 3 divides ``loss(y_true, y_pred, sample_weight)``'s weighted element
    losses by: a micro-batch's weight in its window.

    For a custom training loop with :class:`ga_tfx.keras3.GradientAccumulateOptimizer`, pass it
    as ``sample_count=`` for each micro-batch (as Hugging Face Transformers'
    ``num_items_in_batch``): the window gradient is then ``Σ_i D_i g_i / Σ_i D_i``, the gradient
    of the window's loss as one batch, also when masks or sample-weighted means give the
    micro-batches unequal divisors. ``loss_divisor(...) * loss(...)`` is the sum of the weighted
    element losses (see the module docstring for what Keras divides by, per reduction).

    Args:
      loss: a ``keras.losses.Loss`` (its ``reduction`` is read), or what ``compile`` takes as
        ``loss`` (a name such as ``"sparse_categorical_crossentropy"``, a function ``(y_true,
        y_pred) -> element losses``), resolved as ``compile`` does with the default reduction.
      y_true: the targets, as the loss takes them.
      y_pred: the predictions; a Keras mask on them (``Embedding(mask_zero=True)``,
        ``Masking``) counts as it does for Keras' loss.
      sample_weight: ``None``, or weights of the rows (``(B,)``) or of the elements
        (``(B, T)``), as the loss takes them.

    Returns:
      A scalar float32 tensor (no gradient): the elements of the element losses
      (``sum_over_batch_size``, ``mean``); with a mask the valid elements; for
      ``mean_with_sample_weight`` ``Σ sample_weight`` (masked elements left out), or the
      elements without weights. 0 when every element is masked or weighted 0 (Keras' loss is
      then 0, by ``divide_no_nan``).

    Raises:
      DivisorError: ``loss`` has ``reduction="sum"`` or ``"none"`` (Keras divides by
        nothing), or Keras does not reduce its element losses (a ``call`` returning a
        scalar, or a ``Loss`` with its own ``__call__``).

    Example::

        import ga_tfx.keras3 as ga3
        import keras
        import numpy as np
        y_true = np.array([[1, 2, 0], [3, 0, 0]])  # 2 rows, 3 valid tokens of 6
        y_pred = keras.ops.zeros((2, 3, 5))  # logits, (B, T, classes)
        loss = keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="mean_with_sample_weight"
        )
        float(ga3.loss_divisor(loss, y_true, y_pred, sample_weight=y_true != 0))  # 3.0
        # The default reduction divides by the valid tokens of a Keras mask on y_pred
        # (Embedding(mask_zero=True), Masking), but by all 6 elements for a sample_weight.
    """
    loss_object = loss
    if not isinstance(loss, keras.losses.Loss):
        loss_object = internals.resolve_loss(loss, y_true, y_pred)
    name = getattr(loss_object, "name", repr(loss))
    _, term = _record(loss_object, name, y_true, y_pred, sample_weight)
    if term is None:
        raise DivisorError(
            f"ga_tfx.keras3.loss_divisor: Keras does not divide the loss {name!r} (its "
            "element losses are a scalar, or the Loss computes its own __call__), so its "
            "divisor is the one its code divides by: pass that as sample_count="
        )
    return micro_batch_weight([term], None, who="ga_tfx.keras3.loss_divisor")


class _RecordingLoss:
    """Stands for one compiled-loss entry's ``Loss`` during a micro-batch: computes it as
    Keras does and records its :class:`LossTerm`; every other attribute is the loss's."""

    def __init__(self, loss: Any, name: str, loss_weight: Any, recorder: LossTerms) -> None:
        self._loss = loss
        self._name = name
        self._loss_weight = loss_weight
        self._recorder = recorder

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loss, name)

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Any:
        value, term = _record(self._loss, self._name, y_true, y_pred, sample_weight)
        if term is None:
            self._recorder.unknown.append(self._name)
        else:
            # Its share of the compiled loss, as CompileLoss.call adds it (the Loss's value
            # is already over the replicas: reduce_values' scale_loss_for_distribution).
            share = value if self._loss_weight is None else value * self._loss_weight
            self._recorder.terms.append(dataclasses.replace(term, value=share))
        return value


@contextlib.contextmanager
def compiled_loss_terms(model: Any) -> Iterator[LossTerms]:
    """Records the :class:`LossTerm` of each entry of ``model``'s compiled loss computed inside
    (one micro-batch's ``train_step``).

    Inside, each ``CompileLoss.Loss`` entry of the compiled loss stands for a recorder of its
    ``Loss`` (its ``_flat_losses``; when the compiled loss is not built yet, its ``build`` is
    stood in for by one that builds and then stands them in); on leaving, the entries and
    ``build`` are Keras' again. A model without a compiled loss, or a ``train_step`` that does
    not call it, records nothing (the weight is then the rows, with a warning:
    :meth:`LossTerms.weight`).

    Args:
      model: a compiled Keras 3 model.

    Yields:
      The :class:`LossTerms` being recorded.
    """
    recorder = LossTerms()
    compiled = internals.compile_loss(model)
    if compiled is None:
        yield recorder
        return
    originals: List[Any] = []

    def stand_in() -> None:
        entries = internals.flat_losses(compiled)
        originals[:] = list(entries)
        internals.set_flat_losses(
            compiled,
            [
                e._replace(loss=_RecordingLoss(e.loss, e.name, internals.loss_weight(e), recorder))
                for e in entries
            ],
        )

    with contextlib.ExitStack() as stack:
        if internals.flat_losses(compiled) is not None:
            stand_in()
        else:
            real_build = compiled.build

            def build(*args: Any, **kwargs: Any) -> Any:
                out = real_build(*args, **kwargs)
                stand_in()
                return out

            stack.enter_context(internals.instance_attribute(compiled, "build", build))
        try:
            yield recorder
        finally:
            if originals:
                internals.set_flat_losses(compiled, originals)
