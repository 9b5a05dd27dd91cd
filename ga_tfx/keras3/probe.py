"""The noise-scale probe for Keras 3 (keras-tuner 1.4.8, TensorFlow backend).

:class:`NoiseScaleProbe` and :class:`StopAtLoss` (public as ``ga_tfx.keras3.tuning.*``) are the
Keras 2 probe's (:mod:`ga_tfx.tuning.probe`) on Keras 3: the same rules, curve file
(``noise_scale_probe.json`` in the trial's directory), ``B_path``, recommendation and report,
from one implementation (:mod:`ga_tfx.tuning.probe_base`) mixed here with Keras 3's classes.
The curve's rows come from the window core's :class:`~ga_tfx.window.WindowEnd` records, which
a model of :func:`ga_tfx.keras3.wrap_model` hands to ``fit``'s callbacks with
``on_window_end`` (:mod:`ga_tfx.keras3.tf_model`). The JAX front-end measures no noise scale:
on JAX the probe is refused.
"""

from ga_tfx.keras3.tuning import AccumulationHyperModel
from ga_tfx.tuning import probe_base

from typing import Any

import keras


class StopAtLoss(probe_base.StopRule, keras.callbacks.Callback):
    """Ends training at the end of the first epoch whose ``monitor`` (default ``val_loss``) is
    at or below ``target``: the noise-scale probe's length rule (as
    :class:`ga_tfx.tuning.StopAtLoss`, on Keras 3). Give the probe short epochs and, as
    ``epochs``, a cap. ``stopped_epoch`` is the epoch it stopped at (0-based), None while the
    loss is above."""


class _ProbeCurve(probe_base.CurveRule, keras.callbacks.Callback):
    """Collects one row per window from the window core's events (``on_window_end``)."""


class NoiseScaleProbe(probe_base.ProbeTuner):
    """One short run measures the gradient noise scale, and ``accum_steps`` follows from it:
    :class:`ga_tfx.tuning.NoiseScaleProbe` (whose docstring says what it measures and
    recommends) for a :class:`ga_tfx.keras3.tuning.AccumulationHyperModel`.

    ``search(x, y, epochs=..., ...)`` trains the hypermodel once at ``probe_accum_steps``, at
    the search space's micro-batch (``fit``'s ``batch_size``), with the noise scale measured;
    :meth:`recommendation`, :meth:`probe_report` and :meth:`get_best_hyperparameters` are the
    Keras 2 probe's. Arguments as the Keras 2 probe's (``hypermodel``, ``objective``,
    ``probe_accum_steps``, ``seed``, ``target_loss``, the others to ``keras_tuner.Tuner``).
    TensorFlow backend only.
    """

    _hypermodel_class = AccumulationHyperModel
    _stop_class = StopAtLoss
    _curve_class = _ProbeCurve

    def __init__(self, hypermodel: Any, *args: Any, **kwargs: Any) -> None:
        backend = keras.backend.backend()
        if backend != "tensorflow":
            raise ValueError(
                f"ga_tfx.keras3.tuning.NoiseScaleProbe needs the TensorFlow backend "
                f"(KERAS_BACKEND=tensorflow), got {backend!r}: the {backend} front-end does not "
                "measure the noise scale (log_noise_scale)."
            )
        super().__init__(hypermodel, *args, **kwargs)
