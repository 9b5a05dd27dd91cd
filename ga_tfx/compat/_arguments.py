"""The ``gradient-accumulator`` (0.5.2) defaults, declared once.

Standard library only: :mod:`ga_tfx.compat.gradient_accumulator` uses the defaults below for
its signatures. (The answer to a package-style argument given to a ga-tfx name, ``agc=True``,
``mixed_precision=True``, ..., is the core's: ``ga_tfx.config.MIGRATION_HINTS``; the core never
imports this layer.)
"""

# gradient-accumulator 0.5.2's defaults (GradientAccumulateModel / adaptive_clip_grad).
PACKAGE_CLIP_FACTOR = 0.01
PACKAGE_EPS = 1e-3
PACKAGE_REDUCTION = "MEAN"
