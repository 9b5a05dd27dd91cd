"""Optimizer-level gradient accumulation for custom training loops and ``compile``/``fit``:
:class:`GradientAccumulateOptimizer` (how it runs under ``tf.distribute``, one ``merge_call``
per micro-step and one all-reduce per update: docs/ARCHITECTURE.md, "The core")."""

from ga_tfx import _tf_keras_internals
from ga_tfx._keras import keras, tf
from ga_tfx._state import Untracked, attach_state
from ga_tfx.batchnorm import eager_calls_so_far, layers_trained_with
from ga_tfx.config import FIELDS, NOT_GIVEN, AccumulationConfig, config_settings, resolve
from ga_tfx.transforms import Member
from ga_tfx.window import CHECKPOINT_KEY, WindowCore, WindowEnd, clock, is_loss_scale_optimizer
from ga_tfx.window.accumulator import aligned, not_a_first_term_variable
from ga_tfx.window.layers import window_layers_of

from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, cast

_OPTIMIZER_TYPES = (keras.optimizers.Optimizer, keras.optimizers.legacy.Optimizer)


@keras.saving.register_keras_serializable(package="ga_tfx")
class GradientAccumulateOptimizer(_tf_keras_internals.DelegatingOptimizer):
    """Accumulates gradients over ``accum_steps`` micro-steps, then applies them once.

    Args:
      optimizer: the optimizer that performs the updates: a tf-keras optimizer instance
        (``tf.keras.optimizers.*`` or ``.legacy.*``, a ``LossScaleOptimizer`` included).
      accum_steps: ``K``, micro-steps per update (int >= 1). It and the other settings of
        :class:`~ga_tfx.AccumulationConfig` (``agc_clip_factor``, ``agc_eps``,
        ``agc_exclude``, ``clip_global_norm``, ``nonfinite_policy``,
        ``max_consecutive_skips``, ``log_noise_scale``, ...) are keyword arguments, or one
        ``config=AccumulationConfig(...)``. The wrapper cannot see an epoch end: call
        :meth:`end_of_data` there, and ``partial_window`` (``"apply"``, ``"drop"`` or
        ``"carry"``) ends the short window it finds; :meth:`flush` applies one whatever the
        policy (at the very end of training).
      config: an :class:`~ga_tfx.AccumulationConfig` instead of the keyword settings.
      transforms: gradient transforms run once per update after the config's (not part of
        ``get_config``).
      window_layers: the model being trained (or a list of its layers), whose layers that keep
        window state (:class:`~ga_tfx.AccumBatchNormalization`) then end their windows with
        the wrapper's from their first training call, a partial window of :meth:`flush`
        included, as under ``fit`` and ``TrainingLoop``. Optional: without it the wrapper
        finds, at its first ``apply_gradients``, the AccumBatchNormalization layers whose
        trainable weights it is given, and refuses with an error naming ``window_layers``
        where that is too late to be exact (see :func:`ga_tfx.batchnorm.layers_trained_with`).
        Needed for such a layer without trainable weights (``center=False, scale=False``).
        Not part of ``get_config``: pass it again after loading.
      name: the wrapper's name.

    ``iterations`` and ``learning_rate`` are the wrapped optimizer's: ``iterations`` counts
    updates, not micro-steps. Create the wrapper (and the model) under ``strategy.scope()``
    when training under a strategy.

    State (checkpointed with the wrapper): the wrapped optimizer (``.optimizer``) and a
    :class:`~ga_tfx.window.WindowCore` (``.window_core``: the accumulator, the chain's state,
    the counters, the pending ``micro_steps``; under the key ``optimizer/ga_window_core/...``),
    made at the first ``apply_gradients`` (or by :meth:`build`). ``model.save("model.keras")``
    and ``load_model`` keep it. A SavedModel (``model.save(dir)``) holds it as well, but
    tf-keras' ``load_model(dir)`` compiles a new optimizer from the training config (as for any
    Keras optimizer); restore the saved state into it with
    ``loaded.load_weights(os.path.join(dir, "variables", "variables"))`` (pending window
    included).
    """

    def __init__(
        self,
        optimizer: Any,
        accum_steps: int = NOT_GIVEN,
        *,
        config: Optional[AccumulationConfig] = None,
        transforms: Sequence[Member] = (),
        window_layers: Any = None,
        name: str = "gradient_accumulate_optimizer",
        **settings: Any,
    ):
        super().__init__(name=name, jit_compile=False)
        if not isinstance(optimizer, _OPTIMIZER_TYPES):
            raise TypeError(
                f"optimizer must be a tf-keras optimizer instance (tf.keras.optimizers.*), got "
                f"{optimizer!r} of type {type(optimizer).__module__}.{type(optimizer).__name__}."
            )
        if isinstance(optimizer, GradientAccumulateOptimizer):
            raise TypeError(
                "optimizer is already a GradientAccumulateOptimizer; wrap the plain "
                "optimizer once, with the accum_steps you want."
            )
        self._accumulation = resolve(
            "ga_tfx.GradientAccumulateOptimizer", config, dict(settings, accum_steps=accum_steps)
        )
        self.optimizer = optimizer
        self._transforms = tuple(transforms)
        self._window_layers = Untracked(window_layers_of(window_layers))
        for layer in self._window_layers.value:  # driven from their first training call
            if hasattr(layer, "ga_attach_to_engine"):
                layer.ga_attach_to_engine()
        self._eager_calls_before = eager_calls_so_far()
        self._core_holder = Untracked()  # the WindowCore, built at the first apply_gradients

    @property
    def accum_steps(self) -> int:
        """Micro-batches per update (``K``; with a schedule, the first window's:
        ``window_core.current_accum_steps`` is the current one). Read-only: the config's."""
        return self._accumulation.accum_steps

    # ------------------------------------------------------------ the wrapped optimizer's state
    @property
    def iterations(self) -> Any:
        """Optimizer updates done (not micro-steps): the wrapped optimizer's counter."""
        return self.optimizer.iterations

    @iterations.setter
    def iterations(self, variable: Any) -> None:
        self.optimizer.iterations = variable

    @property
    def learning_rate(self) -> Any:
        """The wrapped optimizer's learning rate (settable, e.g. by Keras callbacks)."""
        return self.optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, learning_rate: Any) -> None:
        self.optimizer.learning_rate = learning_rate

    @property
    def accumulation(self) -> AccumulationConfig:
        """The :class:`~ga_tfx.AccumulationConfig` of the wrapper."""
        return self._accumulation

    @property
    def window_core(self) -> Optional[WindowCore]:
        """The :class:`~ga_tfx.window.WindowCore` (``None`` before the first
        ``apply_gradients``); the name fit's model and ``TrainingLoop`` use too."""
        return self._core_holder.value

    def window_events(self) -> List[WindowEnd]:
        """Host side: one :class:`~ga_tfx.window.WindowEnd` per window finished since the last
        call (applied or skipped, with its figures: samples, grad norms, the noise scale with
        ``log_noise_scale``); raises :class:`~ga_tfx.NonFiniteGradientError` once
        ``max_consecutive_skips`` windows in a row were skipped."""
        if self.window_core is None:
            return []
        events = self.window_core.poll()
        self.window_core.check_skips()
        return events

    @property
    def variables(self) -> Any:
        """The wrapped optimizer's variables, then the core's (buffers, chain state,
        counters)."""
        inner = self.optimizer.variables
        inner = list(inner() if callable(inner) and not isinstance(inner, list) else inner)
        own: List[Any] = [] if self.window_core is None else list(self.window_core.variables)
        return (
            type(self.optimizer.variables)(inner + own)
            if isinstance(self.optimizer, keras.optimizers.Optimizer)
            else inner + own
        )

    def build(self, var_list: Sequence[tf.Variable]) -> None:
        """Creates the accumulator for ``var_list`` (and the wrapped optimizer's slots).

        Keras calls it before loading saved optimizer state; training calls it on its own.
        """
        if tf.distribute.has_strategy():
            self._build(var_list)
        else:  # the strategy the wrapper was created under
            with _tf_keras_internals.optimizer_strategy(self).scope():
                self._build(var_list)

    def _build(self, var_list: Sequence[tf.Variable]) -> None:
        self._core_for(list(var_list))
        if isinstance(self.optimizer, keras.optimizers.Optimizer):
            self.optimizer.build(var_list)

    def finalize_variable_values(self, var_list: Sequence[tf.Variable]) -> None:
        """Delegates to the wrapped optimizer (its EMA, if any); Keras calls it after ``fit``."""
        if isinstance(self.optimizer, keras.optimizers.Optimizer):
            self.optimizer.finalize_variable_values(var_list)

    def get_config(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "optimizer": keras.optimizers.serialize(self.optimizer),
            **config_settings(self._accumulation, self._transforms),
        }

    @classmethod
    def from_config(
        cls, config: Dict[str, Any], custom_objects: Optional[Dict[str, Any]] = None
    ) -> "GradientAccumulateOptimizer":
        config = dict(config)
        optimizer = keras.optimizers.deserialize(
            config.pop("optimizer"), custom_objects=custom_objects
        )
        settings = {k: config.pop(k) for k in FIELDS if k in config}
        return cls(optimizer, **config, **settings)

    # ------------------------------------------------------------------ micro-steps
    def compute_gradients(
        self, loss: Any, var_list: Any, tape: Optional[tf.GradientTape] = None
    ) -> List[Tuple[Any, tf.Variable]]:
        """One micro-batch's ``[(gradient, variable)]``; unscaled under a LossScaleOptimizer.

        Used by :meth:`minimize` (``Model.train_step`` calls ``minimize``).
        """
        if not is_loss_scale_optimizer(self.optimizer):
            return super().compute_gradients(loss, var_list, tape)
        scale = self.optimizer.get_scaled_loss
        if callable(loss):
            scaled = lambda: scale(loss())  # noqa: E731
        else:
            if tape is None:
                raise ValueError("`tape` is required when a `Tensor` loss is passed.")
            with tape:
                scaled = scale(loss)
        grads_and_vars = super().compute_gradients(scaled, var_list, tape)
        unscaled = self.optimizer.get_unscaled_gradients([g for g, _ in grads_and_vars])
        return list(zip(unscaled, [v for _, v in grads_and_vars]))

    def apply_gradients(
        self,
        grads_and_vars: Iterable[Tuple[Any, tf.Variable]],
        name: Optional[str] = None,
        skip_gradients_aggregation: bool = False,
        sample_count: Any = None,
        parts: Sequence[Tuple[Iterable[Tuple[Any, tf.Variable]], Any]] = (),
        **kwargs: Any,
    ) -> tf.Tensor:
        """Adds one micro-batch's gradients; applies the window when it holds ``K`` of them.

        Call it in replica context: directly without a strategy, inside ``strategy.run``
        under one.

        Args:
          grads_and_vars: ``[(gradient, variable), ...]`` of one micro-batch: this replica's
            gradients, not yet summed over replicas, of its mean loss (see ``sample_count``).
            The same variables, in the same order, on every call. Dense gradients,
            ``tf.IndexedSlices`` or ``None``.
          name: unused (Keras' signature).
          skip_gradients_aggregation: must be ``False`` with several replicas: the wrapper
            sums the replicas' gradients itself, once per window. (Also accepted as
            ``experimental_aggregate_gradients=True``.)
          sample_count: the divisor of the loss ``grads_and_vars`` are the gradient of: the
            number its weighted element losses were summed and divided by, before any
            division by the replicas (``ga_tfx.loss_divisor(loss, y_true, y_pred)`` computes it
            for a Keras loss: the valid elements of a masked loss, the samples of a loss of one
            value per sample), as Hugging Face's ``num_items_in_batch``. Its weight in the
            window mean: the window's gradient is ``Σ D_i g_i / Σ D_i``. Under a strategy,
            either each replica's own divisor with the loss ``sum / divisor / replicas``
            (Keras' per-replica loss), or the global one on every replica with
            ``compute_average_loss(per_example_loss, global_batch_size=divisor)``. Defaults to
            1 (equal weights), right when every micro-batch of a window has one divisor.
          parts: for a loss of several terms with their own divisors (two outputs with their
            own masks): the further terms of this micro-batch, ``[(grads_and_vars,
            sample_count), ...]``, each term's gradient (of its mean, as above) with its
            divisor; ``grads_and_vars`` and ``sample_count`` above are then the first term's.
            Each term is summed over the window with its own divisor: the window gradient is
            ``Σ_j Σ_i D_ij g_ij / Σ_i D_ij``, the big batch's. Pass the same number of terms on
            every call. Variables must be among ``grads_and_vars``'.

        Returns:
          A bool scalar tensor: whether this call updated the variables.
        """
        aggregate = kwargs.pop("experimental_aggregate_gradients", True)
        if kwargs:
            raise TypeError(
                f"Unexpected keyword arguments {sorted(kwargs)}; apply_gradients "
                "takes grads_and_vars, sample_count and Keras' name, "
                "skip_gradients_aggregation, experimental_aggregate_gradients."
            )
        ctx = self._replica_context("apply_gradients")
        if self.window_core is not None and (
            tf.distribute.get_strategy() is not self._accumulation_strategy
        ):
            raise RuntimeError(
                "GradientAccumulateOptimizer.apply_gradients was called outside the distribution "
                f"strategy its accumulator was created in ({self._accumulation_strategy!r}); "
                "call it inside strategy.run."
            )
        if (skip_gradients_aggregation or not aggregate) and ctx.num_replicas_in_sync > 1:
            raise ValueError(
                "GradientAccumulateOptimizer.apply_gradients takes each replica's own gradients "
                "and sums them over replicas once per window; got "
                "skip_gradients_aggregation=True (or experimental_aggregate_gradients=False) "
                f"with {ctx.num_replicas_in_sync} replicas. Pass unaggregated gradients. (Under "
                "the mixed_float16 policy, compile wraps the optimizer in a LossScaleOptimizer "
                "that all-reduces every micro-batch: use ga_tfx.GradientAccumulateModel or "
                "ga_tfx.wrap_model, which scale the loss and skip non-finite windows per update.)"
            )
        grads_and_vars = list(grads_and_vars)
        grads = [g for g, _ in grads_and_vars]
        variables = [v for _, v in grads_and_vars]
        core = self._core_for(variables)
        weight = 1.0 if sample_count is None else sample_count
        # The replica's own samples (for the noise scale): an even share of the global count.
        local = tf.cast(weight, tf.float32) / float(ctx.num_replicas_in_sync)
        unknown = not_a_first_term_variable("GradientAccumulateOptimizer.apply_gradients")
        terms = [(aligned(part, variables, unknown), count, None) for part, count in parts]
        with tf.control_dependencies([core.add(grads, weight, local_weight=local, parts=terms)]):
            return ctx.merge_call(self._end_micro_step)

    def flush(self) -> tf.Tensor:
        """Applies a partial window now (e.g. at the end of the data); no-op when it is empty.
        Call it where ``apply_gradients`` is called (``strategy.run(opt.flush)`` under a
        strategy), or in cross-replica context. Returns a bool scalar tensor: whether an
        update happened."""
        return self._end_of_data_in_context("flush", "apply")

    def end_of_data(self) -> tf.Tensor:
        """The end of the data (an epoch's end): the window still pending, if short, is ended
        by ``partial_window``: applied as a smaller batch (``"apply"``), dropped (``"drop"``),
        or kept to be completed by the next micro-steps (``"carry"``; :meth:`flush` applies
        what is left after the last epoch). Called as :meth:`flush` is (``strategy.run`` under
        a strategy, or cross-replica); no-op without a pending window. Returns a bool scalar
        tensor: whether an update happened."""
        return self._end_of_data_in_context("end_of_data", None)

    # ------------------------------------------------------------------ window ends
    def _end_of_data_in_context(self, method: str, policy: Optional[str]) -> tf.Tensor:
        """The data's end, from ``method`` in replica or cross-replica context: the pending
        window ended by ``policy`` (``None``: ``partial_window``)."""
        if self.window_core is None:
            return tf.constant(False)
        strategy = self._accumulation_strategy
        if tf.distribute.get_replica_context() is None or not tf.distribute.has_strategy():
            # Cross-replica context, or outside any strategy scope (e.g. after `fit`): decide
            # in the accumulator's strategy (reading its replica-local buffers outside it
            # would sum them over replicas).
            with strategy.scope():
                return self._end_of_data(strategy, policy)
        return self._replica_context(method).merge_call(self._end_of_data, args=(policy,))

    def _end_micro_step(self, strategy: Any) -> Any:
        """Cross-replica, once per micro-step: the clock counts it; a complete window ends."""
        core = cast(WindowCore, self.window_core)
        return tf.cond(
            clock.is_complete(core, clock.count(core)),
            lambda: core.finish(strategy, self.optimizer),
            lambda: tf.constant(False),
        )

    def _end_of_data(self, strategy: Any, policy: Optional[str]) -> Any:
        """Cross-replica: the clock ends the pending window by ``policy`` (``flush``: "apply")."""
        core = cast(WindowCore, self.window_core)
        finish = lambda: core.finish(strategy, self.optimizer)  # noqa: E731
        return clock.end_of_data(core, strategy, finish, policy)

    # ------------------------------------------------------------------ helpers
    def _core_for(self, variables: List[Any]) -> WindowCore:
        if self.window_core is None:
            given = self._window_layers.value
            found = layers_trained_with(variables, since=self._eager_calls_before)
            found = [layer for layer in found if layer not in given]
            core = WindowCore(
                variables, self._accumulation, self._transforms, window_layers=given + found
            )
            attach_state(self, self._core_holder, core, CHECKPOINT_KEY)
            self._accumulation_strategy = tf.distribute.get_strategy()
        elif not self.window_core.matches(variables):
            raise ValueError(
                "GradientAccumulateOptimizer.apply_gradients must receive the same variables in "
                "the same order on every call."
            )
        return cast(WindowCore, self.window_core)

    @staticmethod
    def _replica_context(method: str) -> Any:
        ctx = tf.distribute.get_replica_context()
        if ctx is None:
            raise RuntimeError(
                f"GradientAccumulateOptimizer.{method} was called in cross-replica context; "
                f"call it inside strategy.run (e.g. strategy.run(step, args=...))."
            )
        return ctx
