"""The ``gradient-accumulator`` (0.5.2) arguments and their ga-tfx equivalents, declared once.

Standard library only: :mod:`ga_tfx.models` uses :func:`reject_package_arguments` to answer a
package-style argument given to a ga-tfx name (``agc=True``, ``mixed_precision=True``, ...)
with an error naming the ga-tfx way, and :mod:`ga_tfx.compat.gradient_accumulator` uses the
defaults below for its signatures.
"""

from typing import Any, Mapping

# gradient-accumulator 0.5.2's defaults (GradientAccumulateModel / adaptive_clip_grad).
PACKAGE_CLIP_FACTOR = 0.01
PACKAGE_EPS = 1e-3
PACKAGE_REDUCTION = "MEAN"

COMPAT_MODULE = "ga_tfx.compat.gradient_accumulator"

_AGC = (
    f"agc_clip_factor=<factor> (AGC is off while it is None; gradient-accumulator's "
    f"default factor is {PACKAGE_CLIP_FACTOR})"
)

# package argument -> what to write with the ga-tfx names instead.
GA_TFX_EQUIVALENT = {
    "agc": _AGC,
    "use_agc": _AGC,
    "clip_factor": "agc_clip_factor=<factor>",
    "eps": "agc_eps=<eps>",
    "mixed_precision": (
        "no argument: call keras.mixed_precision.set_global_policy('mixed_float16') (or "
        "'mixed_bfloat16') before building the model; compile then wraps the optimizer in a "
        "LossScaleOptimizer (under mixed_float16) and the engine scales the loss whenever the "
        "optimizer is one"
    ),
    "experimental_distributed_support": (
        "no argument: ga-tfx accumulation models always run under tf.distribute strategies"
    ),
    "reduction": "no argument: the applied gradient is always the sample-weighted window mean",
}


def reject_package_arguments(kwargs: Mapping[str, Any], where: str) -> None:
    """Raises ``TypeError`` if ``kwargs`` holds a ``gradient-accumulator``-only argument.

    Args:
      kwargs: keyword arguments given to a ga-tfx name.
      where: the name that received them, for the message (e.g. ``"ga_tfx.wrap_model"``).

    Raises:
      TypeError: naming each such argument, its ga-tfx equivalent, and the compat module that
        accepts the package's arguments as they are.
    """
    found = [name for name in kwargs if name in GA_TFX_EQUIVALENT]
    if not found:
        return
    lines = "; ".join(f"{name}={kwargs[name]!r} -> {GA_TFX_EQUIVALENT[name]}" for name in found)
    raise TypeError(
        f"{where} does not take the gradient-accumulator argument(s) {found}. With ga-tfx's "
        f"own names: {lines}. To keep gradient-accumulator's arguments unchanged, import "
        f"{COMPAT_MODULE} instead."
    )
