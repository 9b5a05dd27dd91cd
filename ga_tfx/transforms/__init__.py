"""Gradient transforms: one interface, applied once per optimizer update to the window gradient.

A *window gradient* is the gradient of the mean loss over all samples of one accumulation
window (all micro-batches, all replicas), the regularisation gradient included: exactly what
big-batch training would apply. A :class:`GradientChain` maps it through its members, in
order, before the single ``optimizer.apply_gradients`` of the update.

The interface (every member is a :class:`GradientTransform`):

* ``build(variables)``: creates the member's state for the variables it will see (called once,
  outside ``tf.function``, under the distribution strategy's scope). State lives in the member,
  a ``tf.Module``, so a ``tf.train.Checkpoint`` of the chain saves it; checkpoint keys are
  ``members/<member name>/<variable>``, stable across runs.
* ``__call__(grads_and_vars) -> (grads_and_vars, apply)``: maps ``[(g, v), ...]`` (dense
  gradients, identical on every replica: they were all-reduced before) and says whether the
  update may happen: ``apply`` is ``None`` (no opinion) or a scalar bool tensor. Runs in replica
  context, once per window, never per micro-batch.

Members (names are the default checkpoint keys):

=======================  =====================================================================
``nonfinite_guard``      :class:`NonFiniteGuard`: a window whose gradient holds NaN or inf is
                         skipped as a whole (``policy="skip"``) or has those entries zeroed
                         (``policy="zero"``); counts such windows.
``clip_global_norm``     :class:`ClipGlobalNorm`: ``g <- g * min(1, c / ||g||)`` over all
                         gradients together (``tf.clip_by_global_norm``).
``agc``                  :class:`AdaptiveClipping`: adaptive gradient clipping (NFNets), see
                         :mod:`ga_tfx.transforms.agc`.
``gradient_noise``       :class:`GradientNoise`: annealed Gaussian noise added to the window
                         gradient (Neelakantan et al. 2015).
user name                :class:`FunctionTransform`: any callable
                         ``[(g, v), ...] -> [(g, v), ...]``; give it as ``(name, fn)``.
=======================  =====================================================================
"""

from ga_tfx.transforms.base import (
    FunctionTransform,
    GradientTransform,
    GradsAndVars,
    global_norm,
)
from ga_tfx.transforms.chain import GradientChain, Member, chain_for, make_agc, make_chain
from ga_tfx.transforms.members import (
    AdaptiveClipping,
    ClipGlobalNorm,
    GradientNoise,
    NonFiniteGuard,
)

__all__ = [
    "AdaptiveClipping",
    "ClipGlobalNorm",
    "FunctionTransform",
    "GradientChain",
    "GradientNoise",
    "GradientTransform",
    "GradsAndVars",
    "Member",
    "NonFiniteGuard",
    "chain_for",
    "global_norm",
    "make_agc",
    "make_chain",
]
