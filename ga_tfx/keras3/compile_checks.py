"""What ``compile`` of a wrapped Keras 3 model (TensorFlow and JAX) refuses in one line: an
optimizer that accumulates by itself (Keras' ``gradient_accumulation_steps``: the window would
be accumulated twice) and ga_tfx's custom-loop wrapper (not a Keras optimizer)."""

import sys
from typing import Any


def is_custom_loop_wrapper(optimizer: Any) -> bool:
    """Whether ``optimizer`` is a :class:`ga_tfx.keras3.GradientAccumulateOptimizer` (looked up
    without importing it: on JAX it would import TensorFlow)."""
    module = sys.modules.get("ga_tfx.keras3.tf_optimizer")
    return module is not None and isinstance(optimizer, module.GradientAccumulateOptimizer)


def check_optimizer(optimizer: Any, accum_steps: int) -> Any:
    """``keras.optimizers.get(optimizer)``, refused in one line where it would accumulate twice
    or is the custom-loop wrapper."""
    import keras

    if is_custom_loop_wrapper(optimizer):
        raise TypeError(
            "ga_tfx.keras3: compile(optimizer=GradientAccumulateOptimizer(...)) of a model wrapped "
            "by wrap_model: "
            "GradientAccumulateOptimizer is for custom training loops (allowed here: the Keras 3 "
            f"optimizer itself, e.g. optimizer={type(optimizer.optimizer).__name__}(...); "
            f"wrap_model already accumulates {accum_steps} micro-batches per update)"
        )
    resolved = keras.optimizers.get(optimizer)
    check_no_own_accumulation(
        resolved, "ga_tfx.keras3", f"give K to wrap_model, here {accum_steps}"
    )
    return resolved


def check_no_own_accumulation(optimizer: Any, where: str, instead: str) -> None:
    """Refuses in one line an optimizer (or the one a ``LossScaleOptimizer`` wraps) made with
    Keras' ``gradient_accumulation_steps``: under ga_tfx the window would be accumulated twice.

    Args:
      optimizer: a Keras 3 optimizer.
      where: who refuses (the message's first words).
      instead: where K is given instead (the message's last words).

    Raises:
      ValueError: naming the value and what is allowed.
    """
    for candidate in (optimizer, getattr(optimizer, "inner_optimizer", None)):
        steps = getattr(candidate, "gradient_accumulation_steps", None)
        if steps:
            raise ValueError(
                f"{where}: gradient_accumulation_steps={steps} on the optimizer would "
                f"accumulate twice (allowed: None; {instead})"
            )
