"""The rule that weighs a micro-batch in its window: by the divisor its loss was normalised by.

Backend-neutral (no TensorFlow, no Keras): each front-end records the terms of a micro-batch's
loss as Keras computed them (``ga_tfx.loss_divisor`` on Keras 2, ``ga_tfx.keras3.loss_divisor``
on Keras 3) and this module turns them into the micro-batch's weight ``D_i``, or refuses in one
line. docs/exactness.md, "The window's divisor", says why and what is exact.
"""

import dataclasses
import warnings
from typing import Any, List, Sequence, Tuple

# The reductions whose loss is a sum divided by a divisor: the window's gradient is
# Σ_i D_i g_i / Σ_i D_i, the gradient of the big batch's loss.
MEAN_REDUCTIONS = ("sum_over_batch_size", "auto", "mean", "mean_with_sample_weight")


@dataclasses.dataclass(frozen=True)
class LossTerm:
    """One term of a micro-batch's loss, as Keras' own reduction computed it.

    Attributes:
      name: the loss's name (for messages).
      reduction: the loss's reduction, lower case (``"sum_over_batch_size"``, ``"sum"``, ...).
      divisor: scalar tensor, the number the term's weighted element losses were summed and
        divided by (its elements; its valid elements when masked; ``Σ sample_weight`` for
        ``mean_with_sample_weight``).
      by_rows: ``True`` when the divisor is known at trace time to be the rows times a
        constant (no mask, no weighted mean, static element shape): such terms can share the
        rows as their weight.
      value: scalar tensor, the term's share of the loss that is differentiated (its value
        times its ``loss_weights`` entry, divided by the replicas as Keras divides it), or
        ``None`` where the front-end does not record it; needed only to split a loss of
        several terms into :func:`micro_batch_groups`.
    """

    name: str
    reduction: str
    divisor: Any
    by_rows: bool
    value: Any = None


class DivisorError(ValueError):
    """A loss whose micro-batches cannot be weighed exactly in a window."""

    # Exception's own constructor: autograph then re-raises it from the user's converted
    # train_step as a DivisorError (tensorflow/python/autograph/pyct/error_utils.py,
    # ``create_exception``), not as a StagingError that a caller's ``except`` misses.
    __init__ = Exception.__init__


def _check_reductions(terms: Sequence[LossTerm], who: str) -> None:
    for term in terms:
        if term.reduction not in MEAN_REDUCTIONS:
            raise DivisorError(
                f"ga_tfx: the loss {term.name!r} of {who} has reduction={term.reduction!r}; "
                "accumulation weighs each micro-batch by the divisor of a mean loss, so use "
                "reduction 'sum_over_batch_size' (Keras' default) or Keras 3's "
                "'mean_with_sample_weight'"
            )


# What a front-end that weighs one gradient per micro-batch says to do with a loss of several
# terms whose divisors vary (micro_batch_weight's refusal).
ONE_GRADIENT = (
    "this front-end takes one gradient per micro-batch (a model's own train_step, a custom "
    "loop); train with fit and Keras' train_step (which weighs each term by its own divisor)"
)


def micro_batch_weight(
    terms: Sequence[LossTerm], rows: Any, who: str = "the model", several: str = ONE_GRADIENT
) -> Any:
    """The weight ``D_i`` of one micro-batch in the window mean, from its recorded loss terms.

    Args:
      terms: the :class:`LossTerm` of each loss computed for the micro-batch (the compiled
        loss's outputs, in order); empty when no Keras loss was computed (a ``train_step``
        that divides by hand, a ``Loss`` with its own ``__call__``).
      rows: scalar tensor, the micro-batch's rows (samples) on this replica.
      who: names the model or loss in messages.
      several: the refusal's way out for several terms with varying divisors (default
        :data:`ONE_GRADIENT`).

    Returns:
      The one term's divisor; ``rows`` when every term divides by its rows (several outputs
      without masks) or when no term was recorded (then one warning line says so).

    Raises:
      DivisorError: a term reduced by ``"sum"`` or ``"none"``, or several terms whose
        divisors differ from micro-batch to micro-batch (a masked or weighted-mean output
        beside another output): one line naming the terms and what to do.
    """
    _check_reductions(terms, who)
    if not terms:
        warnings.warn(
            f"ga_tfx: {who} computed no Keras loss that ga_tfx could read its divisor from; each "
            "micro-batch is weighted by its rows, which is exact when the loss is divided by "
            "its rows (else pass the divisor: apply_gradients(..., sample_count=D) in a "
            "train_step, sample_count_fn in TrainingLoop; docs/exactness.md)",
            stacklevel=3,
        )
        return rows
    if len(terms) == 1:
        return terms[0].divisor
    if all(term.by_rows for term in terms):
        return rows
    names = ", ".join(repr(term.name) for term in terms if not term.by_rows)
    raise DivisorError(
        f"ga_tfx: {who} has {len(terms)} loss terms and {names} divides by a count that "
        "changes from micro-batch to micro-batch (a mask or sample-weighted mean), so no "
        f"single weight per micro-batch is exact, and {several}, or give every output the "
        "same divisor (no mask, reduction 'sum_over_batch_size')"
    )


def micro_batch_groups(
    terms: Sequence[LossTerm], rows: Any, total: Any, who: str = "the model"
) -> List[Tuple[Any, Any]]:
    """The parts of one micro-batch's loss that the window weighs apart, each with its weight.

    A loss of several terms whose divisors differ from micro-batch to micro-batch (two outputs
    with their own masks, or a masked output beside an unmasked one) is exact in a window only
    when each term is weighed by its own divisor: the window gradient is
    ``Σ_j Σ_i D_ij g_ij / Σ_i D_ij``, the gradient of the big batch's loss
    ``Σ_j w_j Σ_i S_ij / Σ_i D_ij``. The parts are: one per such term (its ``value``, weighed
    by its divisor), and the rest of the loss (the terms that divide by their rows, weighed by
    the rows, and the regularisation losses, which any weighted mean over a window leaves as
    they are). Without a term that divides by its rows the rest rides with the first varying
    term: one part fewer, one backward pass fewer.

    Args:
      terms: as :func:`micro_batch_weight` takes them; each term that does not divide by its
        rows must carry its ``value`` when there are several terms.
      rows: scalar tensor, the micro-batch's rows on this replica.
      total: scalar tensor, the whole loss that would be differentiated (Keras' per-replica
        loss: every term's share and the regularisation losses).
      who: names the model or loss in messages.

    Returns:
      A list of ``(loss_part, weight)``: the parts sum to ``total``; ``[(total, D)]`` whenever
      :func:`micro_batch_weight` gives one exact weight ``D``.

    Raises:
      DivisorError: as :func:`micro_batch_weight`, for ``"sum"`` and ``"none"``.
    """
    _check_reductions(terms, who)
    varying = [term for term in terms if not term.by_rows]
    if len(terms) <= 1 or not varying:
        return [(total, micro_batch_weight(terms, rows, who))]
    if any(term.value is None for term in varying):
        micro_batch_weight(terms, rows, who)  # refuses: no value to split the loss by
    by_rows = len(varying) < len(terms)
    alone = varying if by_rows else varying[1:]
    rest = total
    for term in alone:
        rest = rest - term.value
    first = [(rest, rows)] if by_rows else [(rest, varying[0].divisor)]
    return first + [(term.value, term.divisor) for term in alone]
