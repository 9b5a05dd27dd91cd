"""The JAX backend's room: the window as a stateless optimizer step (see docs/ARCHITECTURE.md,
"Keras 3").

Keras 3's JAX trainer (``keras/src/backend/jax/trainer.py``, ``train_step``) is a pure function
of its state (trainable, non-trainable, optimizer and metrics variables) and updates through
``optimizer.stateless_apply(optimizer_variables, grads, trainable_variables)``. The window state
is therefore part of the optimizer's variables, threaded through that function as optax's
``MultiSteps`` threads its ``MultiStepsState`` (read, not copied): :class:`WindowOptimizer`
wraps the user's optimizer as Keras' own ``LossScaleOptimizer`` does (its variables first, the
inner optimizer's after; ``keras/src/optimizers/loss_scale_optimizer.py``), adds each
micro-batch's gradient, weighted by its divisor ``D`` (the number its loss was divided by), to
float32 sums, adds ``D`` to a float32 window divisor and counts the micro-batch; when the
window holds ``K`` it applies the inner optimizer once, with the window gradient, under
``ops.cond`` (``jax.lax.cond``): the inner optimizer's ``iterations`` and its learning-rate
schedule count updates. Under ``keras.distribution.DataParallel`` the gradient Keras hands it is
already the global batch's (XLA all-reduces it), ``D`` is the global batch's (computed on the
traced global batch), and the sums are replicated like the weights.

The numbers are the core's (:class:`ga_tfx.window.accumulator.GradientAccumulator`): the window
gradient is ``Σ D_i g_i / Σ D_i``, ``g_i`` micro-batch ``i``'s loss gradient, the gradient of
the window's loss as one batch (a masked loss's valid elements, ``mean_with_sample_weight``'s
``Σ sample_weight``, a smaller last micro-batch's samples; a window whose divisor is 0 gives a
zero gradient, as Keras' ``divide_no_nan`` a zero loss). ``D_i`` reaches the step from the
model's ``train_step`` (:mod:`ga_tfx.keras3.jax_model`), which records the compiled loss's
terms as the loss is traced (:mod:`ga_tfx.keras3.divisor`) and hands the optimizer a
function of them, read when Keras calls ``stateless_apply`` (a traced scalar, or a Python
number); a window the data's end leaves short is applied by :meth:`WindowOptimizer.end_window`
(eagerly, on the synced variables). Being optimizer variables, the window's sums, divisor and
micro-step count are saved with the optimizer (``model.save_weights``, ``ModelCheckpoint``)
and a run restored from them resumes inside its window.
"""

from ga_tfx import _keras3_internals as internals

from typing import Any, Callable, List, Optional, Tuple

import keras


class WindowOptimizer(keras.optimizers.Optimizer):
    """Applies ``inner_optimizer`` once per ``accum_steps`` micro-batches, with their
    divisor-weighted mean gradient.

    Args:
      inner_optimizer: a Keras 3 optimizer.
      accum_steps: ``K``, micro-batches per update (int >= 1).
      parts: further parts of a loss of several terms with their own divisors that the
        window can sum apart (:func:`ga_tfx.divisor_rule.micro_batch_groups`), each with its
        own float32 sums and divisor (default 0).
    """

    def __init__(
        self, inner_optimizer: Any, accum_steps: int, name: Any = None, parts: int = 0
    ) -> None:
        super().__init__(learning_rate=0.0, name=name)
        self.inner_optimizer = inner_optimizer
        self.accum_steps = int(accum_steps)
        self.parts = int(parts)
        # The weight D of the micro-batch being traced: a function the model's train_step sets
        # (of the loss terms it records), called by the next stateless_apply; it returns a
        # scalar (traced under jit: the divisor of the traced loss; or a Python number).
        self.micro_batch_weight: Optional[Callable[[], Any]] = None
        # The further parts of the micro-batch being traced, ``[(grads, weight), ...]`` (at
        # most ``parts``), set by the model's train_step with the weight.
        self.micro_batch_parts: List[Tuple[Any, Any]] = []

    def build(self, var_list: List[Any]) -> None:
        self.micro_steps = self.add_variable(
            shape=(), dtype="int", initializer="zeros", aggregation="none", name="micro_steps"
        )
        # The window's divisor Σ D_i (its checkpoint name from when it counted samples).
        self.window_samples = self.add_variable(
            shape=(), dtype="float32", initializer="zeros", name="window_samples"
        )
        self.window_sums = self._sums(var_list, "window_sum")
        self.part_divisors = [
            self.add_variable(shape=(), dtype="float32", initializer="zeros", name="part_divisor")
            for _ in range(self.parts)
        ]
        self.part_sums = [self._sums(var_list, "part_sum") for _ in range(self.parts)]
        self.inner_optimizer.build(var_list)
        super().build(var_list)

    def _sums(self, var_list: List[Any], name: str) -> List[Any]:
        return [
            self.add_variable(shape=v.shape, dtype="float32", initializer="zeros", name=name)
            for v in var_list
        ]

    @property
    def variables(self) -> List[Any]:
        return internals.own_variables(self) + self.inner_optimizer.variables

    # Read and set on the inner optimizer, as LossScaleOptimizer does: a callback that reads the
    # step or changes the rate (LearningRateScheduler, ReduceLROnPlateau) reaches the optimizer
    # that updates.
    @property
    def iterations(self) -> Any:
        return self.inner_optimizer.iterations

    @property
    def learning_rate(self) -> Any:
        return self.inner_optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, learning_rate: Any) -> None:
        if hasattr(self, "inner_optimizer"):  # Optimizer.__init__ sets its own first
            self.inner_optimizer.learning_rate = learning_rate

    def finalize_variable_values(self, var_list: Any) -> None:
        self.inner_optimizer.finalize_variable_values(var_list)

    def _positions(self) -> Tuple[int, List[Tuple[int, List[int]]], int]:
        """Where the micro-step count is among the own variables; each sum's divisor and sums
        (the window's, then each part's); how many own variables there are."""
        own = internals.own_variables(self)
        position = {id(v): i for i, v in enumerate(own)}
        slots = [(self.window_samples, self.window_sums)]
        slots += list(zip(self.part_divisors, self.part_sums))
        at = [(position[id(d)], [position[id(s)] for s in sums]) for d, sums in slots]
        return position[id(self.micro_steps)], at, len(own)

    def _apply_window(self, inner: Any, slots: Any, trainable: Any) -> Any:
        """The inner optimizer's update with the window gradient, ``Σ sums / divisor`` over the
        ``slots`` (``(divisor, sums)`` each; a slot whose divisor is 0 adds zero)."""
        ops = keras.ops
        window = [ops.zeros_like(v, dtype="float32") for v in trainable]
        for divisor, sums in slots:
            window = [w + ops.divide_no_nan(s, divisor) for w, s in zip(window, sums)]
        window = [ops.cast(w, v.dtype) for w, v in zip(window, trainable)]
        new_trainable, new_inner = self.inner_optimizer.stateless_apply(inner, window, trainable)
        return list(new_trainable), list(new_inner)

    def stateless_apply(
        self,
        optimizer_variables: Any,
        grads: Any,
        trainable_variables: Any,
        sample_count: Any = None,
    ) -> Any:
        """Keras' ``stateless_apply``, adding the micro-batch to the window (and applying it
        when it holds ``K``). ``sample_count``: the divisor of the loss ``grads`` are of, for a
        train_step that divides by hand (:func:`ga_tfx.keras3.loss_divisor` gives it for a
        Keras loss); default: the compiled loss's, as the model's train_step recorded it."""
        weight_of = self.micro_batch_weight
        if sample_count is not None and weight_of is not None:
            weight_of = lambda: sample_count  # noqa: E731
        if weight_of is None:
            raise ValueError(
                "ga_tfx.keras3: WindowOptimizer.stateless_apply needs the micro-batch's weight, "
                "which the wrapped model's train_step records; train through "
                "ga_tfx.keras3.wrap_model(model, K) and fit"
            )
        self.micro_batch_weight = None
        parts, self.micro_batch_parts = self.micro_batch_parts, []
        ops = keras.ops
        at_count, at_slots, own_count = self._positions()
        own = list(optimizer_variables[:own_count])
        inner = list(optimizer_variables[own_count:])
        count = own[at_count] + 1
        added = [(grads, weight_of())] + list(parts)
        added += [(None, 0.0)] * (len(at_slots) - len(added))  # parts this step does not have
        slots = []
        for (at_divisor, at_sums), (part_grads, weight) in zip(at_slots, added):
            n = ops.cast(weight, "float32")
            sums = [own[i] for i in at_sums]
            if part_grads is not None:
                sums = [s + n * ops.cast(g, "float32") for s, g in zip(sums, part_grads)]
            slots.append((own[at_divisor] + n, sums))

        def apply() -> Any:
            new_trainable, new_inner = self._apply_window(inner, slots, trainable_variables)
            zeros = [(ops.zeros_like(d), [ops.zeros_like(s) for s in sums]) for d, sums in slots]
            return new_trainable, new_inner, zeros, ops.zeros_like(count)

        def keep() -> Any:
            return list(trainable_variables), inner, slots, count

        new_trainable, new_inner, new_slots, new_count = ops.cond(
            ops.equal(count, self.accum_steps), apply, keep
        )
        own[at_count] = new_count
        for (at_divisor, at_sums), (divisor, sums) in zip(at_slots, new_slots):
            own[at_divisor] = divisor
            for i, s in zip(at_sums, sums):
                own[i] = s
        return new_trainable, own + list(new_inner)

    def end_window(self, trainable_variables: List[Any]) -> bool:
        """Eagerly, on synced variables: applies a window the data's end left short (its
        micro-batches as one batch) and clears it. Returns whether there was one."""
        if not self.built or int(self.micro_steps.numpy()) == 0:
            return False
        inner_vars = self.inner_optimizer.variables
        slots = [(self.window_samples, self.window_sums)]
        slots += list(zip(self.part_divisors, self.part_sums))
        new_trainable, new_inner = self._apply_window(
            [v.value for v in inner_vars],
            [(d.value, [s.value for s in sums]) for d, sums in slots],
            [v.value for v in trainable_variables],
        )
        updated = list(trainable_variables) + list(inner_vars)
        for variable, value in zip(updated, new_trainable + new_inner):
            variable.assign(value)
        cleared = [self.micro_steps] + [v for d, sums in slots for v in [d] + list(sums)]
        for variable in cleared:
            variable.assign(keras.ops.zeros_like(variable.value))
        return True
