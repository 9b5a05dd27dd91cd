"""Adaptive gradient clipping (AGC), Brock et al. 2021, "High-Performance Large-Scale Image
Recognition Without Normalization" (NFNets).

For every *unit* ``i`` of a parameter ``W`` with gradient ``G``::

    max_norm_i = clip_factor * max(||W_i||, eps)
    G_i <- G_i * min(1, max_norm_i / ||G_i||)

A unit is one output unit of a layer. Keras stores output units on the last axis, so:

==========================================  ===================  =========================
parameter (Keras layout)                    shape                norm taken over axes
==========================================  ===================  =========================
scalar, bias, BN gamma/beta (rank 0/1)      ``()``, ``(n,)``     all (one unit, as NFNets)
Dense kernel                                ``(in, out)``        ``(0,)``
Conv1D / Conv2D / Conv3D kernel             ``(*k, in, out)``    all but the last
DepthwiseConv kernel (``depthwise_kernel``)  ``(kh, kw, in, m)``  ``(0, 1)``: one unit per
                                                                 input channel and multiplier
Embedding (``embeddings``)                  ``(vocab, dim)``     ``(1,)``: one unit per row
==========================================  ===================  =========================

Ranks above 5 are rejected. In ga-tfx AGC runs once per optimizer update on the accumulated
(window-mean) gradient, never per micro-batch, so it equals AGC on big-batch training.

The one AGC class is the chain member :class:`ga_tfx.transforms.AdaptiveClipping` (what
``agc_clip_factor`` builds); :func:`adaptive_clip_gradients` is the same rule as a function.
"""

from ga_tfx._tf_internals import tf
from ga_tfx._validation import check_positive_float
from ga_tfx.config import DEFAULTS

import fnmatch
from typing import Any, Iterable, List, Optional, Tuple, Union, cast

MAX_SUPPORTED_RANK = 5


def unit_axes(variable_name: str, rank: int) -> Optional[Tuple[int, ...]]:
    """Returns the axes the unit-wise norm reduces over for a parameter, or ``None`` for all.

    Args:
      variable_name: the variable's name (``.../depthwise_kernel:0`` and ``.../embeddings:0``
        select the depthwise and embedding layouts).
      rank: the parameter's rank.

    Raises:
      ValueError: for ranks above :data:`MAX_SUPPORTED_RANK`.
    """
    if rank > MAX_SUPPORTED_RANK:
        raise ValueError(
            f"Adaptive gradient clipping supports parameters of rank 0 to {MAX_SUPPORTED_RANK} "
            f"(scalars, biases, Dense, Conv1D/2D/3D, depthwise and embedding kernels); "
            f"{variable_name!r} has rank {rank}. Exclude it with agc_exclude=[...]."
        )
    short_name = variable_name.split("/")[-1].split(":")[0]
    if rank <= 1:
        return None
    if short_name == "depthwise_kernel" and rank == 4:
        return (0, 1)
    if short_name == "embeddings" and rank == 2:
        return (1,)
    return tuple(range(rank - 1))


def unitwise_norm(x: Any, axes: Optional[Tuple[int, ...]]) -> Any:
    """L2 norm of ``x`` over ``axes`` (all axes if ``None``), keeping dims for broadcasting."""
    return tf.sqrt(tf.reduce_sum(tf.square(x), axis=axes, keepdims=axes is not None))


def clip_gradient(
    gradient: Any,
    parameter: Any,
    clip_factor: float,
    eps: float = DEFAULTS["agc_eps"],
    name: Optional[str] = None,
) -> Any:
    """AGC for one parameter. ``gradient`` may be dense or ``tf.IndexedSlices`` (densified)."""
    name = name if name is not None else getattr(parameter, "name", "parameter")
    if isinstance(gradient, tf.IndexedSlices):
        gradient = tf.convert_to_tensor(gradient)
    axes = unit_axes(name, parameter.shape.rank)
    compute_dtype = tf.float32 if gradient.dtype != tf.float64 else tf.float64
    g = tf.cast(gradient, compute_dtype)
    p = tf.cast(tf.convert_to_tensor(parameter), compute_dtype)
    param_norm = tf.maximum(unitwise_norm(p, axes), tf.cast(eps, compute_dtype))
    grad_norm = unitwise_norm(g, axes)
    max_norm = param_norm * tf.cast(clip_factor, compute_dtype)
    # As the NFNets reference: the 1e-6 floor only guards the division; where it matters the
    # gradient norm is below max_norm and the gradient is returned unchanged.
    clipped = g * (max_norm / tf.maximum(grad_norm, tf.cast(1e-6, compute_dtype)))
    return tf.cast(tf.where(grad_norm > max_norm, clipped, g), gradient.dtype)


def agc_settings(
    clip_factor: float,
    eps: float = DEFAULTS["agc_eps"],
    exclude: Union[str, Iterable[str]] = (),
) -> Tuple[float, float, Tuple[str, ...]]:
    """``(clip_factor, eps, exclude)`` checked: ``clip_factor`` > 0, ``eps`` >= 0, both finite
    real numbers; ``exclude`` a glob pattern or several, as a tuple.

    Raises:
      TypeError, ValueError: naming ``agc_clip_factor`` or ``agc_eps`` and the value.
    """
    # Without allow_none the checks never return None.
    clip_factor = cast(float, check_positive_float(clip_factor, "agc_clip_factor"))
    eps = cast(float, check_positive_float(eps, "agc_eps", allow_zero=True))
    return clip_factor, eps, (exclude,) if isinstance(exclude, str) else tuple(exclude)


def excluded(variable: Any, exclude: Tuple[str, ...]) -> bool:
    """Whether ``variable``'s name matches one of the glob patterns ``exclude``."""
    return any(fnmatch.fnmatch(variable.name, pattern) for pattern in exclude)


def adaptive_clip_gradients(
    grads_and_vars: Iterable[Tuple[Any, Any]],
    clip_factor: float,
    eps: float = DEFAULTS["agc_eps"],
    exclude: Union[str, Iterable[str]] = (),
) -> List[Tuple[Any, Any]]:
    """Standalone AGC: ``[(g, v), ...] -> [(clipped g, v), ...]``; ``None`` gradients and the
    variables ``exclude`` matches pass unchanged. The chain member is
    :class:`ga_tfx.transforms.AdaptiveClipping`."""
    clip_factor, eps, exclude = agc_settings(clip_factor, eps, exclude)
    return [
        (g if g is None or excluded(v, exclude) else clip_gradient(g, v, clip_factor, eps), v)
        for g, v in grads_and_vars
    ]
