"""The window core: what one accumulation window is, for every front-end.

A *window* is the micro-batches of one optimizer step. :class:`WindowCore` owns everything a
window is, once, for the three front-ends that run windows:

* ``fit`` on an accumulation model and the TFX Trainer (:mod:`ga_tfx.engine`),
* the optimizer wrapper for custom loops and ``compile`` (:mod:`ga_tfx.optimizer`),
* :class:`ga_tfx.TrainingLoop` (:mod:`ga_tfx.training_loop`).

They differ only in how micro-batches reach the core and who runs the host loop (Keras' data
handler, the user's own loop, ``TrainingLoop.run``), as tf-keras' ``make_train_function``
differs from ``train_step``. The core, in order:

1. :meth:`WindowCore.add` (replica context, once per micro-batch and replica): adds
   ``w · g`` (and ``w · loss``) to replica-local float32 buffers of a
   :class:`~ga_tfx.window.accumulator.GradientAccumulator`; nothing crosses devices. With
   ``log_noise_scale`` it also adds the micro-batch gradient's squared norm (below).
2. :meth:`WindowCore.finish` (cross-replica context, once per window): one batched
   all-reduce of the buffers; the window gradient ``Σ_i n_i g_i / Σ_i n_i`` over all replicas
   (plus, for ``TrainingLoop``, the regularisation gradient once); the gradient chain
   (:mod:`ga_tfx.transforms`: non-finite guard, ``clip_global_norm``, AGC, gradient noise,
   the user's transforms, in that order); one ``optimizer.apply_gradients``, or none when the chain
   vetoes it (decided in cross-replica context, the same on every replica, so no
   ``merge_call`` ever runs inside a replica-context conditional); the end of the window for
   layers that keep window state (:class:`~ga_tfx.AccumBatchNormalization`: the window's
   statistics are folded in when it is applied, dropped when it is skipped); the buffers
   cleared; the window counted (``windows``; ``updates`` when applied); its figures written to
   a record.
3. :meth:`WindowCore.discard`: clears a window without an update (``partial_window="drop"``).
4. Host side, :meth:`WindowCore.poll` returns one :class:`WindowEnd` per window finished since
   the last poll: *the* event "a window ended" (applied as an update, or skipped), which
   checkpoints, logs, progress and the noise scale subscribe to, whichever front-end ran it.

Counting, in every front-end and in every name: an **update** is an applied optimizer step
(``optimizer.iterations`` moves; learning-rate schedules see it); a **window** is a finished
window, applied or skipped (non-finite gradient). ``windows - updates`` windows were skipped.
Data positions count windows; "every N updates" counts updates.

The gradient noise scale (``log_noise_scale``; McCandlish et al. 2018, "An Empirical Model of
Large-Batch Training", appendix A.1). Per window, from the ``m = micro-batches × replicas``
replica micro-batch gradients ``ĝ_j`` of ``b_j`` samples (the gradient of each replica's own
mean loss) and the window gradient ``G`` of ``B = Σ b_j`` samples: with
``|g_small|² = Σ_j (b_j / B)·|ĝ_j|²`` (expected ``|G_true|² + m·tr(Σ)/B``, uneven micro-batches
included) and ``|g_big|² = |G|²`` (expected ``|G_true|² + tr(Σ)/B``), the unbiased estimates are
``tr(Σ) ≈ S = B·(|g_small|² - |g_big|²)/(m - 1)`` and
``|G_true|² ≈ G² = (m·|g_big|² - |g_small|²)/(m - 1)``. Each is smoothed by an exponential
moving average (``noise_scale_decay``) and the noise scale is the ratio of the two averages,
``B_simple = EMA(S) / EMA(G²)``, as the paper does (a ratio of averages: the ratio of one
window's noisy estimates is heavily biased). ``B_small = B / m`` is the replica's
micro-batch: under ``R`` replicas each window gives ``K·R`` small gradients, so the estimate
exists from ``K = 1`` on with two replicas or more; on one device it needs ``K >= 2``.

The package, one concern per file; ``core`` imports the others, none of them imports ``core``
(the moved logic is functions of the core, duck-typed, whose ``accumulation``, ``state``,
``accumulator``, ``chain`` and ``noise_sums`` they read as one state, as optax's ``MultiSteps``
keeps one ``MultiStepsState``; or of the config and the state alone): ``events``
(:class:`WindowEnd`, :data:`RECORD_FIELDS`, :class:`NonFiniteGradientError`), ``state``
(:class:`WindowState`, its records), ``accumulator``
(:class:`~ga_tfx.window.accumulator.GradientAccumulator`, the window's gradient sums),
``core`` (:class:`WindowCore`, :data:`CHECKPOINT_KEY`), ``clock`` (micro-steps counted, a
window found complete, the data's end by policy), ``steps`` (a window end's gradient, layers
and accounting), ``next_k`` (the next window's K by the schedule's rule, ``lr_scaling``; the
schedule itself is a value of :mod:`ga_tfx.schedules`), ``noise`` (the noise scale),
``split`` (the out-of-memory split), ``shims`` (loss-scale optimizers, applying summed
gradients, XLA); beside the core, ``runner`` (the traced window runner of ``fit`` and
``TrainingLoop``) and ``replay`` (the out-of-memory replay of every front-end).
"""

from ga_tfx.window import clock
from ga_tfx.window.core import CHECKPOINT_KEY, WindowCore
from ga_tfx.window.events import (
    RECORD_CAPACITY,
    RECORD_FIELDS,
    NonFiniteGradientError,
    WindowEnd,
)
from ga_tfx.window.next_k import ADAPTIVE_PATIENCE, ADAPTIVE_WARMUP
from ga_tfx.window.shims import (
    all_finite,
    apply_aggregated_gradients,
    is_loss_scale_optimizer,
    skips_nonfinite_itself,
    xla_step,
)
from ga_tfx.window.split import MAX_SPLIT, batch_size
from ga_tfx.window.state import WindowState

__all__ = [
    "ADAPTIVE_PATIENCE",
    "ADAPTIVE_WARMUP",
    "CHECKPOINT_KEY",
    "MAX_SPLIT",
    "RECORD_CAPACITY",
    "RECORD_FIELDS",
    "NonFiniteGradientError",
    "WindowCore",
    "WindowEnd",
    "WindowState",
    "all_finite",
    "apply_aggregated_gradients",
    "batch_size",
    "clock",
    "is_loss_scale_optimizer",
    "skips_nonfinite_itself",
    "xla_step",
]
