"""``gradient_accumulator.agc`` on ga-tfx: unit-wise norms and adaptive gradient clipping.

The unit of a parameter is ga-tfx's (``ga_tfx.transforms.agc``): one output unit on the last axis
(Dense kernels ``(in, out)``: axis 0; Conv1D/2D/3D kernels: all axes but the last; scalars and
vectors: the whole tensor), one row for an ``embeddings`` variable, one input channel and
multiplier for a ``depthwise_kernel``. The package treats every rank-3 tensor as a multi-head
Dense kernel (norm over axis 0), an embedding table column-wise, and a depthwise kernel as a
Conv2D kernel.
Ranks above 5 raise ``ValueError`` in both.
"""

from ga_tfx._keras import tf
from ga_tfx.compat._arguments import PACKAGE_CLIP_FACTOR, PACKAGE_EPS
from ga_tfx.transforms import agc as _agc

from typing import List, Optional, Sequence, Union

Axis = Optional[Union[int, Sequence[int]]]


def compute_norm(x: tf.Tensor, axis: Axis, keepdims: bool) -> tf.Tensor:
    """Euclidean norm of ``x`` over ``axis`` (all axes for ``None``), as the package defines it."""
    return tf.sqrt(tf.reduce_sum(tf.square(x), axis=axis, keepdims=keepdims))


def unitwise_norm(x: Union[tf.Tensor, tf.Variable]) -> tf.Tensor:
    """Norm of each unit of ``x`` (see the module docstring), broadcastable against ``x``.

    Rank 0/1: a scalar (the norm of the whole tensor); higher ranks keep their dims.

    Raises:
      ValueError: for a rank above 5.
    """
    x = x if isinstance(x, tf.Variable) else tf.convert_to_tensor(x)
    axes = _agc.unit_axes(getattr(x, "name", "tensor"), x.shape.rank)
    return compute_norm(x, axes, keepdims=axes is not None)


def adaptive_clip_grad(
    parameters: Sequence,
    gradients: Sequence,
    clip_factor: float = PACKAGE_CLIP_FACTOR,
    eps: float = PACKAGE_EPS,
) -> List[Optional[tf.Tensor]]:
    """AGC (Brock et al. 2021): each unit's gradient scaled down to ``clip_factor`` times the
    unit's parameter norm (at least ``eps``) where it is larger.

    Args:
      parameters: the parameters (variables or tensors), in the order of ``gradients``.
      gradients: their gradients (``None`` entries are returned as ``None``).
      clip_factor: ``λ`` > 0 (default 0.01). eps: >= 0 (default 1e-3).

    Returns:
      The clipped gradients, a list in the order given.
    """
    parameters = [p if isinstance(p, tf.Variable) else tf.convert_to_tensor(p) for p in parameters]
    gradients = [
        g if g is None or isinstance(g, tf.IndexedSlices) else tf.convert_to_tensor(g)
        for g in gradients
    ]
    clipped = _agc.adaptive_clip_gradients(list(zip(gradients, parameters)), clip_factor, eps)
    return [g for g, _ in clipped]
