"""The Keras 3 optimizer wrapper on TensorFlow, for custom training loops:
:class:`GradientAccumulateOptimizer` (see :mod:`ga_tfx.keras3`).

As the Keras 2 wrapper (:mod:`ga_tfx.optimizer`) it adds each micro-batch's gradients to the
window core in replica context (:meth:`~ga_tfx.window.WindowCore.add`), then one ``merge_call``
has the core's clock count the micro-step and, when the window is complete, ends it through
:meth:`~ga_tfx.window.WindowCore.finish` with the wrapped Keras 3 optimizer in cross-replica
context: one update per window, its ``iterations`` and schedule counting updates. It is a
``tf.Module``, not a Keras optimizer (use :func:`ga_tfx.keras3.wrap_model` for
``compile``/``fit``): a ``tf.train.Checkpoint(optimizer=wrapper, model=model)`` holds the wrapped
optimizer (``optimizer/optimizer/...``) and the core (``optimizer/ga_window_core/...``, the
layout of the Keras 2 wrapper), so a run killed inside a window resumes it.
"""

from ga_tfx._state import Untracked
from ga_tfx._tf_internals import tf
from ga_tfx.config import NOT_GIVEN, AccumulationConfig, resolve
from ga_tfx.keras3.compile_checks import check_no_own_accumulation
from ga_tfx.window import CHECKPOINT_KEY, WindowCore, clock
from ga_tfx.window.accumulator import aligned, not_a_first_term_variable

from typing import Any, Iterable, Optional, Sequence, Tuple


class GradientAccumulateOptimizer(tf.Module):
    """Accumulates ``accum_steps`` micro-batches' gradients, then applies them once.

    Args:
      optimizer: a Keras 3 optimizer (TensorFlow backend), e.g. ``keras.optimizers.Adam()``.
      accum_steps: ``K``, micro-batches per update (int >= 1); or ``config``.
      config: a :class:`ga_tfx.AccumulationConfig` instead of keyword settings.
      **settings: the other :class:`ga_tfx.AccumulationConfig` settings.

    Example::

        opt = GradientAccumulateOptimizer(keras.optimizers.SGD(0.1), accum_steps=4)
        loss_fn = keras.losses.MeanSquaredError()
        for x, y in micro_batches:
            with tf.GradientTape() as tape:
                y_pred = model(x, training=True)
                loss = loss_fn(y, y_pred)
            grads = tape.gradient(loss, model.trainable_variables)
            # The divisor Keras divided this loss by: its weight in the window.
            count = ga_tfx.keras3.loss_divisor(loss_fn, y, y_pred)
            opt.apply_gradients(zip(grads, model.trainable_variables), sample_count=count)
        opt.flush()  # a short last window, as a smaller batch
    """

    def __init__(
        self,
        optimizer: Any,
        accum_steps: Any = NOT_GIVEN,
        *,
        config: Optional[AccumulationConfig] = None,
        **settings: Any,
    ) -> None:
        super().__init__(name="ga_keras3_optimizer")
        where = "ga_tfx.keras3.GradientAccumulateOptimizer"
        self.accumulation = resolve(where, config, dict(settings, accum_steps=accum_steps))
        check_no_own_accumulation(
            optimizer, where, f"give K here, accum_steps={self.accumulation.accum_steps}"
        )
        self.optimizer = optimizer
        # Held untracked: the checkpoint dependency is the core under CHECKPOINT_KEY only.
        self._core_holder = Untracked(None)
        self._strategy: Any = None

    def __repr__(self) -> str:
        # Keras' compile names it in its one-line refusal ("Could not interpret optimizer
        # identifier: ..."): this says what compile takes instead.
        inner = type(self.optimizer).__name__
        k = self.accumulation.accum_steps
        return (
            f"GradientAccumulateOptimizer({inner}, accum_steps={k}), a custom-loop wrapper, not "
            f"a Keras optimizer; for compile/fit: ga_tfx.keras3.wrap_model(model, {k}), then "
            f"compile(optimizer={inner}(...))"
        )

    @property
    def window_core(self) -> Optional[WindowCore]:
        """The window core (``None`` before the first ``apply_gradients``)."""
        return self._core_holder.value

    @property
    def _core(self) -> Optional[WindowCore]:
        return self._core_holder.value

    @property
    def iterations(self) -> Any:
        """The wrapped optimizer's ``iterations``: updates applied."""
        return self.optimizer.iterations

    def apply_gradients(
        self,
        grads_and_vars: Iterable[Tuple[Any, Any]],
        sample_count: Any = None,
        parts: Sequence[Tuple[Iterable[Tuple[Any, Any]], Any]] = (),
    ) -> Any:
        """Adds one micro-batch's gradients (replica context: directly, or inside
        ``strategy.run``); applies the window when it holds ``K`` of them.

        Args:
          grads_and_vars: ``(gradient, variable)`` pairs of one micro-batch, the same
            variables in the same order on every call (Keras variables).
          sample_count: the micro-batch's weight in the window mean: the divisor its loss was
            normalised by (on this replica), so that the window gradient
            ``Σ_i D_i g_i / Σ_i D_i`` is the gradient of the window's loss as one batch. For a
            Keras loss, :func:`ga_tfx.keras3.loss_divisor` computes it as Keras divides (the
            rows of a loss averaged over rows; the valid elements of a masked loss;
            ``Σ sample_weight`` for ``mean_with_sample_weight``), as Hugging Face Transformers'
            ``num_items_in_batch``; a loss that divides by hand passes its own divisor. Default
            1, right when every micro-batch of a window has one divisor (one size, no mask).
            It is also what ``samples_seen`` counts.
          parts: for a loss of several terms with their own divisors (two outputs with their
            own masks): the further terms, ``[(grads_and_vars, sample_count), ...]``, each
            term's gradient (of its mean) with its divisor, ``grads_and_vars`` and
            ``sample_count`` above being the first term's; each is summed over the window with
            its own divisor (``Σ_j Σ_i D_ij g_ij / Σ_i D_ij``, the big batch's gradient).

        Returns:
          A bool scalar tensor: whether this call applied an update.
        """
        pairs = list(grads_and_vars)
        core = self._core_for([v for _, v in pairs])
        weight = 1.0 if sample_count is None else sample_count
        context = tf.distribute.get_replica_context()
        if context is None:
            raise RuntimeError(
                "ga_tfx.keras3.GradientAccumulateOptimizer.apply_gradients was called in "
                "cross-replica context; call it inside strategy.run"
            )
        variables = core.accumulator.accumulated_variables
        unknown = not_a_first_term_variable("ga_tfx.keras3.GradientAccumulateOptimizer")
        terms = [
            (aligned([(g, getattr(v, "value", v)) for g, v in part], variables, unknown), d, None)
            for part, d in parts
        ]
        with tf.control_dependencies([core.add([g for g, _ in pairs], weight, parts=terms)]):
            return context.merge_call(self._end_micro_step)

    def flush(self) -> Any:
        """Applies a short pending window now (the data's end); no-op without one."""
        core = self._core
        if core is None:
            return tf.constant(False)
        with self._strategy.scope():
            finish = lambda: core.finish(self._strategy, self.optimizer)  # noqa: E731
            return clock.end_of_data(core, self._strategy, finish, "apply")

    def _end_micro_step(self, strategy: Any) -> Any:
        core = self._core
        assert core is not None
        return tf.cond(
            clock.is_complete(core, clock.count(core)),
            lambda: core.finish(strategy, self.optimizer),
            lambda: tf.constant(False),
        )

    def _core_for(self, variables: list) -> WindowCore:
        if self._core is None:
            with tf.init_scope():
                if not self.optimizer.built:
                    self.optimizer.build(variables)
                core = WindowCore([getattr(v, "value", v) for v in variables], self.accumulation)
            self._core_holder.value = core
            setattr(self, CHECKPOINT_KEY, core)  # a checkpoint dependency (deferred restore)
            self._strategy = tf.distribute.get_strategy()
            return core
        elif not self._core.matches([getattr(v, "value", v) for v in variables]):
            raise ValueError(
                "ga_tfx.keras3.GradientAccumulateOptimizer.apply_gradients must receive the same "
                "variables in the same order on every call"
            )
        return self._core_holder.value
