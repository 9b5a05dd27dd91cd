"""Batch normalization for gradient accumulation: moving statistics of whole windows.

With gradient accumulation a BatchNormalization layer sees ``K`` micro-batches per optimizer
update. :class:`AccumBatchNormalization` keeps Keras' training forward pass (each micro-batch is
normalised with its own mean and variance: *ghost batch norm*, gradients through the batch
statistics exactly as in ``keras.layers.BatchNormalization``), but updates ``moving_mean`` and
``moving_variance`` once per window, with the mean and variance of *all* samples of the window:
the update one Keras BatchNormalization layer would make on the concatenated window (the spread
between micro-batch means included).

How the window statistics are kept
----------------------------------
Per channel, the layer accumulates the sample count ``n``, the sum ``Σx`` and ``M2 = Σ(x - x̄)²``
(the sum of squared deviations from the running mean) in float32 (float64 for float64 layers).
Micro-batches are merged with Chan et al.'s parallel formula::

    M2 = M2_a + M2_b + (x̄_b - x̄_a)² · n_a · n_b / (n_a + n_b)

which stays accurate when micro-batch means differ by orders of magnitude more than their
spread (a plain ``Σx²`` would cancel catastrophically in float32). Replicas merge the same way:
one all-reduce of ``(n, Σx)`` gives the global mean, a second one sums each replica's ``M2``
plus ``n_r · (x̄_r - x̄)²``.

Who ends a window
-----------------
* Trained by a ga-tfx front-end (:func:`ga_tfx.wrap_model`,
  :class:`ga_tfx.GradientAccumulateModel`, ``TrainingLoop``, or
  :class:`ga_tfx.GradientAccumulateOptimizer`, which finds the layers whose ``gamma``/``beta``
  it updates: :func:`layers_trained_with`): the front-end attaches the layer to its core
  (:meth:`AccumBatchNormalization.ga_attach_to_engine`) and calls
  :meth:`AccumBatchNormalization.ga_window_end` once per window, in replica context, after the
  optimizer update. The layer then carries no K: its windows are the front-end's, whatever their
  K (a schedule's included), short last windows too (``partial_window="apply"`` updates with
  the samples it has; ``"drop"`` discards them). Statistics stay replica-local until the window
  ends: one small all-reduce per layer and update.
* Trained by anything else (plain ``fit``, a custom loop without the optimizer wrapper): the
  layer *is* ``keras.layers.BatchNormalization`` (one moving-average update per training call).
  The layer takes no ``accum_steps``. A layer that counts its own windows of K training calls
  (the mode of ``gradient_accumulator.layers.AccumBatchNormalization``) is
  ``ga_tfx.compat.gradient_accumulator.layers.AccumBatchNormalization(accum_steps=K)``.

:func:`ga_tfx.replace_batchnorm_layers` (in :mod:`ga_tfx.batchnorm.conversion`) turns the
BatchNormalization layers of an existing Functional or Sequential model (nested models included)
into :class:`AccumBatchNormalization` layers, keeping all weights and statistics.

Files: ``layer.py`` (the layer), ``moments.py`` (a window's statistics and their merge),
``registry.py`` (the built layers a front-end given variables finds), ``conversion.py``
(:func:`~ga_tfx.batchnorm.conversion.replace_batchnorm_layers`; it imports the front-ends, so
this package does not import it).
"""

from ga_tfx.batchnorm.layer import AccumBatchNormalization
from ga_tfx.batchnorm.moments import WindowMoments
from ga_tfx.batchnorm.registry import eager_calls_so_far, layers_trained_with

__all__ = [
    "AccumBatchNormalization",
    "WindowMoments",
    "eager_calls_so_far",
    "layers_trained_with",
]
