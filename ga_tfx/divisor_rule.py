"""The rule that weighs a micro-batch in its window: by the divisor its loss was normalised by.

Backend-neutral (no TensorFlow, no Keras): each front-end records the terms of a micro-batch's
loss as Keras computed them (``ga_tfx.loss_divisor`` on Keras 2, ``ga_tfx.keras3.loss_divisor``
on Keras 3) and this module turns them into the micro-batch's weight ``D_i``, or refuses in one
line. docs/exactness.md, "The window's divisor", says why and what is exact.
"""

import dataclasses
import warnings
from typing import Any, Sequence

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
    """

    name: str
    reduction: str
    divisor: Any
    by_rows: bool


class DivisorError(ValueError):
    """A loss whose micro-batches cannot be weighed exactly in a window."""


def micro_batch_weight(terms: Sequence[LossTerm], rows: Any, who: str = "the model") -> Any:
    """The weight ``D_i`` of one micro-batch in the window mean, from its recorded loss terms.

    Args:
      terms: the :class:`LossTerm` of each loss computed for the micro-batch (the compiled
        loss's outputs, in order); empty when no Keras loss was computed (a ``train_step``
        that divides by hand, a ``Loss`` with its own ``__call__``).
      rows: scalar tensor, the micro-batch's rows (samples) on this replica.
      who: names the model or loss in messages.

    Returns:
      The one term's divisor; ``rows`` when every term divides by its rows (several outputs
      without masks) or when no term was recorded (then one warning line says so).

    Raises:
      DivisorError: a term reduced by ``"sum"`` or ``"none"``, or several terms whose
        divisors differ from micro-batch to micro-batch (a masked or weighted-mean output
        beside another output): one line naming the terms and what to do.
    """
    for term in terms:
        if term.reduction not in MEAN_REDUCTIONS:
            raise DivisorError(
                f"ga_tfx: the loss {term.name!r} of {who} has reduction={term.reduction!r}; "
                "accumulation weighs each micro-batch by the divisor of a mean loss, so use "
                "reduction 'sum_over_batch_size' (Keras' default) or Keras 3's "
                "'mean_with_sample_weight'"
            )
    if not terms:
        warnings.warn(
            f"ga_tfx: {who} computed no Keras loss that ga_tfx could read its divisor from; each "
            "micro-batch is weighted by its rows, which is exact when the loss is divided by "
            "its rows (pass the divisor where the front-end takes it: docs/exactness.md)",
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
        "single weight per micro-batch is exact; accumulate one such term per model, or give "
        "every output the same divisor (no mask, reduction 'sum_over_batch_size')"
    )
