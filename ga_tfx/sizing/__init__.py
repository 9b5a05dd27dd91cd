"""Sizing: the judgment features that recommend a micro-batch size or ``accum_steps`` (K).

* :mod:`ga_tfx.sizing.memory`: the micro-batch fitted to a memory budget, the effective batch
  kept (:func:`~ga_tfx.sizing.memory.fit_micro_batch`, public as ``ga_tfx.fit_micro_batch``).
* :mod:`ga_tfx.sizing.batch_choice`: from a measured gradient noise scale to ``accum_steps``
  (standard library only; the noise-scale probe, :mod:`ga_tfx.tuning.probe`, applies it).

This package imports nothing itself: import the module you need.
"""
