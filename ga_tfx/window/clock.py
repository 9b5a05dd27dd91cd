"""The window's clock: micro-steps counted, a window found complete, the data's end by policy.

Every front-end only feeds micro-batches and asks these -- ``fit``'s train function
(:mod:`ga_tfx.engine.loop`), the optimizer wrapper (:mod:`ga_tfx.optimizer`) and
:class:`~ga_tfx.TrainingLoop` -- so each is decided once, here. ``core`` is a
:class:`~ga_tfx.window.WindowCore` (duck-typed: this module does not import it).
"""

from ga_tfx._tf_internals import tf

from typing import Any, Callable, Optional


def count(core: Any) -> tf.Tensor:
    """Counts one more micro-batch in the window; returns the window's count after it (int64
    scalar)."""
    return core.micro_steps.assign_add(tf.constant(1, tf.int64))


def is_complete(core: Any, pending: Any) -> tf.Tensor:
    """Whether a window holding ``pending`` micro-batches is complete: ``K`` of them, the K
    the core holds now (a schedule may change it at a window's end)."""
    return pending >= core.state.current_accum_steps.read_value()


def end_of_data(
    core: Any, strategy: Any, finish: Callable[[], Any], policy: Optional[str] = None
) -> tf.Tensor:
    """Cross-replica context: the data (an epoch) ended; the window still pending, if any, is
    ended by ``policy`` (default the config's ``partial_window``): ``"apply"`` it as a smaller
    batch (``finish()``, the front-end's window end), ``"drop"`` it (the weights do not see
    it), or ``"carry"`` it into the next epoch's first window. Returns a bool scalar tensor:
    whether an update was applied. (The config validated the policy once; ``policy`` is a
    front-end's override, ``"apply"`` for ``train_on_batch``.)"""
    policy = _policy(core, policy)
    pending = core.micro_steps.read_value() > 0
    none = lambda: tf.constant(False)  # noqa: E731
    if policy == "apply":
        return tf.cond(pending, finish, none)
    if policy == "drop":
        return tf.cond(pending, lambda: _drop(core, strategy), none)
    return tf.constant(False)  # carry


def ends_short_window(core: Any, policy: Optional[str] = None) -> bool:
    """Whether :func:`end_of_data` by ``policy`` (default the config's ``partial_window``)
    ends a short pending window (applied or dropped), not keeps it (``"carry"``)."""
    return _policy(core, policy) != "carry"


def _policy(core: Any, policy: Optional[str]) -> str:
    return policy or core.accumulation.partial_window


def _drop(core: Any, strategy: Any) -> tf.Tensor:
    core.discard(strategy)
    return tf.constant(False)
