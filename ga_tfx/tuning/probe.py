"""The noise-scale probe: one short run that measures the gradient noise scale and recommends K.

:class:`NoiseScaleProbe` replaces a Keras Tuner search by one short run: it trains an
:class:`~ga_tfx.tuning.hypermodel.AccumulationHyperModel` once at ``probe_accum_steps``, measures
the noise scale over its updates (``B_path``, each window weighted by its progress) and
recommends the allowed ``accum_steps`` nearest to ``B_path / micro_batch_size``
(:mod:`ga_tfx.sizing.batch_choice`). :class:`StopAtLoss` ends a run at a target loss.

Public as ``ga_tfx.tuning.NoiseScaleProbe`` and ``ga_tfx.tuning.StopAtLoss``. This module imports
``keras_tuner``; ``import ga_tfx`` does not import it. What does not depend on the Keras version
(the probe's rules, its curve and report) is :mod:`ga_tfx.tuning.probe_base`, shared with the
Keras 3 probe (:mod:`ga_tfx.keras3.probe`); this module mixes it with Keras 2's classes.
"""

from ga_tfx._keras import keras
from ga_tfx.tuning import probe_base
from ga_tfx.tuning.hypermodel import AccumulationHyperModel
from ga_tfx.tuning.probe_base import CURVE_FIELDS, PROBE_FILE, NoiseScaleOracle

__all__ = ["CURVE_FIELDS", "PROBE_FILE", "NoiseScaleOracle", "NoiseScaleProbe", "StopAtLoss"]


class StopAtLoss(probe_base.StopRule, keras.callbacks.Callback):
    """Ends training at the end of the first epoch whose ``monitor`` (default ``val_loss``) is
    at or below ``target``: the noise-scale probe's length rule. The critical batch is that of
    a target loss, and the probe's ``B_path`` grows as the loss falls, so probe until the loss
    you aim at (``benchmarks/CRITICAL_BATCH.md``). The loss is read at epochs' ends: give the
    probe short epochs (``samples_per_epoch`` of a few windows) and, as ``epochs``, a cap.
    ``stopped_epoch`` is the epoch it stopped at (0-based), None while the loss is above."""


class _ProbeCurve(probe_base.CurveRule, keras.callbacks.Callback):
    """Collects one row per window from the window core's events (``on_window_end``)."""


class NoiseScaleProbe(probe_base.ProbeTuner):
    """A search that needs no grid: one short run measures the gradient noise scale, and
    ``accum_steps`` follows from it (McCandlish et al. 2018; :mod:`ga_tfx.sizing.batch_choice`).

    ``search`` trains the hypermodel once (one trial, the *probe*) with ``accum_steps =
    probe_accum_steps`` (default: the largest of the search space's), every other
    hyperparameter at its default, and the noise scale logged; give it the budget as for any
    trial (e.g. ``samples_per_epoch``, one epoch). From every window's own estimates it
    measures ``B_path`` (:func:`ga_tfx.sizing.batch_choice.path_noise_scale`): the noise scale of
    the probe's path, each window weighted by its progress, in samples; the critical batch the
    model gives that path. :meth:`get_best_hyperparameters` returns the probe's
    hyperparameters with ``accum_steps`` replaced by :meth:`recommendation`: the search
    space's ``accum_steps`` value nearest (log2 scale) to ``B_path / micro_batch_size``.
    :meth:`probe_report` holds the evidence: the curve of every window (update, samples, loss,
    the noise scale ``B_simple`` with its moving averages, the window's own estimates) and the
    recommendation with its reason.

    Args:
      hypermodel: an :class:`AccumulationHyperModel` with one micro-batch size, not searching
        the AGC clip factor or the learning rate (the probe recommends ``accum_steps`` only;
        give a fixed ``agc_clip_factor``); its ``log_noise_scale`` is turned on.
      objective: as for any Keras Tuner (the probe trial's score is reported).
      probe_accum_steps: ``accum_steps`` of the probe run (default: the largest searched). With
        one replica it must be >= 2: one small gradient per window measures no noise.
      seed: the oracle's seed. Other keyword arguments go to ``keras_tuner.Tuner``.
      target_loss: None, or the loss you aim at: the probe ends at the first epoch whose
        ``val_loss`` is at or below it (:class:`StopAtLoss`; give it short epochs, and as
        ``epochs`` the cap), and :meth:`probe_report` says whether it got there.

    The estimate depends on where training is: the noise scale grows as the loss falls, and a
    learning rate far below the one a batch would be trained with measures it larger
    (``benchmarks/CRITICAL_BATCH.md``). Probe at the learning rate you train with, until the
    loss you aim at: :class:`StopAtLoss` ends the probe there.
    """

    _hypermodel_class = AccumulationHyperModel
    _stop_class = StopAtLoss
    _curve_class = _ProbeCurve
