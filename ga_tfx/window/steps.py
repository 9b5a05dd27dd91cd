"""The steps of a window's end, as functions of the core (a :class:`~ga_tfx.window.WindowCore`,
duck-typed: this module does not import it; its ``accumulation`` config, ``state``,
``accumulator``, ``chain`` and ``noise_sums`` are the one state these read): the window
gradient (replica context: the all-reduced mean, the extra gradient, norms, the noise
estimates, the chain), the end of the window layers in the branch the update took, and the
window's accounting (cross-replica: counters, noise-scale averages, the next K and learning
rate, the record)."""

from ga_tfx._tf_internals import tf
from ga_tfx.transforms import global_norm
from ga_tfx.window import next_k, noise
from ga_tfx.window.accumulator import GradientAccumulator
from ga_tfx.window.shims import all_finite
from ga_tfx.window.state import write_record

from typing import Any, Callable, Dict, List, Optional, Tuple


def window_gradient(
    core: Any, extra_gradient: Optional[Callable]
) -> Tuple[Dict[str, Any], List[tf.Variable]]:
    """Replica context: one batched all-reduce of ``core``'s buffers; the window gradient
    (their sample-weighted mean, plus ``extra_gradient()`` once when given); its norms; the
    noise-scale estimates; ``core.chain``.

    Returns the window's figures (``grads``: the chained gradient, one per variable the chain
    returned; ``apply``: the chain's vote; ``finite``; float64 scalars ``samples``, ``loss``,
    ``grad_norm``, ``grad_norm_clipped`` and the noise estimates) and those variables, aligned
    with ``grads``.
    """
    config, state, acc = core.accumulation, core.state, core.accumulator
    extra = [v.read_value() for v in core.noise_sums] if config.log_noise_scale else []
    pairs, samples, loss, extra_sums = acc.window_mean(extra)
    data_norm = global_norm(pairs)
    if extra_gradient is not None:
        pairs, loss = add_extra_gradient(pairs, loss, extra_gradient, acc)
    norm = global_norm(pairs) if extra_gradient is not None else data_norm
    small = acc.micro_steps.read_value() * state.micro_batch_split.read_value()
    estimates = noise.window_estimates(config, extra_sums, data_norm, small)
    finite = all_finite(pairs)
    pairs, vote = core.chain(pairs)
    out = {
        "grads": [g for g, _ in pairs],
        "apply": vote,
        "finite": finite,
        "samples": tf.cast(samples, tf.float64),
        "loss": tf.cast(loss, tf.float64),
        "grad_norm": tf.cast(norm, tf.float64),
        "grad_norm_clipped": tf.cast(global_norm(pairs), tf.float64),
        **estimates,
    }
    return out, [v for _, v in pairs]


def add_extra_gradient(
    pairs: List[Tuple[Any, Any]], loss: Any, extra_gradient: Callable, acc: GradientAccumulator
) -> Tuple[List[Tuple[Any, Any]], Any]:
    """Adds ``extra_gradient()``'s loss and gradients once (replica context)."""
    extra_loss, extra_grads = extra_gradient()
    if extra_grads is None:
        return pairs, loss
    given = {v.ref(): g for g, v in pairs}
    out = []
    for variable, extra in zip(acc.accumulated_variables, extra_grads):
        grad = given.get(variable.ref())
        if grad is None and extra is None:
            continue
        if grad is None:
            grad = tf.cast(extra, variable.dtype)
        elif extra is not None:
            grad = grad + tf.cast(extra, grad.dtype)
        out.append((tf.cast(grad, variable.dtype), variable))
    return out, loss + tf.cast(extra_loss, loss.dtype)


def end_window_layers(strategy: Any, end_fn: Callable, applied: Any, may_skip: bool) -> None:
    """Cross-replica: ``end_fn(apply)`` in replica context, in the branch the update took
    (``may_skip``: the window may have been skipped): it ends the window layers (statistics
    folded in if applied) and clears the buffers."""
    if not may_skip:
        strategy.run(end_fn, args=(True,))
        return

    def end(apply: bool) -> Callable[[], tf.Tensor]:
        def branch() -> tf.Tensor:
            strategy.run(end_fn, args=(apply,))
            return tf.constant(apply)

        return branch

    tf.cond(applied, end(True), end(False))


def count_window(
    core: Any, optimizer: Any, applied: Any, out: Dict[str, Any], first: Callable[[Any], Any]
) -> None:
    """Cross-replica, after the update (or skip; ``applied``: bool scalar): counts the window
    in ``core.state`` (``windows``; ``updates`` when applied), folds its noise-scale estimates
    into the averages, sets the next window's K and ``optimizer``'s learning rate and writes
    the window's record. ``out``: :func:`window_gradient`'s figures as ``strategy.run``
    returned them, ``first`` picks the first replica's value of one. The buffers are not
    touched (the pending micro-steps are read, not reset)."""
    config, state = core.accumulation, core.state
    micro = tf.cast(core.micro_steps.read_value(), tf.float64)
    trace, grad_sq = first(out["noise_trace"]), first(out["noise_grad_sq"])  # S, G²: unsmoothed
    averages = noise.update_noise_averages(config, state, trace, grad_sq)
    windows = state.windows.assign_add(1)
    updates = state.updates.assign_add(tf.cast(applied, tf.int64))
    micro_batch = first(out["samples"]) / micro
    k = next_k.next_accum_steps(config, state, windows, micro_batch, averages[0])
    learning_rate = next_k.scale_learning_rate(config, state, optimizer, k)
    row = [
        windows,
        updates,
        applied,
        first(out["samples"]),
        micro,
        first(out["loss"]),
        first(out["grad_norm"]),
        first(out["grad_norm_clipped"]),
        *averages,
        first(out["noise_small_batch"]),
        trace,
        grad_sq,
        k,
        learning_rate,
    ]
    write_record(state, row)
