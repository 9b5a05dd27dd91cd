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
    """

    def __init__(self, inner_optimizer: Any, accum_steps: int, name: Any = None) -> None:
        super().__init__(learning_rate=0.0, name=name)
        self.inner_optimizer = inner_optimizer
        self.accum_steps = int(accum_steps)
        # The weight D of the micro-batch being traced: a function the model's train_step sets
        # (of the loss terms it records), called by the next stateless_apply; it returns a
        # scalar (traced under jit: the divisor of the traced loss; or a Python number).
        self.micro_batch_weight: Optional[Callable[[], Any]] = None

    def build(self, var_list: List[Any]) -> None:
        self.micro_steps = self.add_variable(
            shape=(), dtype="int", initializer="zeros", aggregation="none", name="micro_steps"
        )
        # The window's divisor Σ D_i (its checkpoint name from when it counted samples).
        self.window_samples = self.add_variable(
            shape=(), dtype="float32", initializer="zeros", name="window_samples"
        )
        self.window_sums = [
            self.add_variable(
                shape=v.shape, dtype="float32", initializer="zeros", name="window_sum"
            )
            for v in var_list
        ]
        self.inner_optimizer.build(var_list)
        super().build(var_list)

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

    def _positions(self) -> Tuple[int, int, List[int], int]:
        """Where the micro-step count, the sample count and the sums are among the own
        variables, and how many own variables there are."""
        own = internals.own_variables(self)
        position = {id(v): i for i, v in enumerate(own)}
        sums = [position[id(s)] for s in self.window_sums]
        return position[id(self.micro_steps)], position[id(self.window_samples)], sums, len(own)

    def _apply_window(self, inner: Any, sums: Any, samples: Any, trainable: Any) -> Any:
        """The inner optimizer's update with the window gradient ``sums / samples`` (zero
        where the window's divisor ``samples`` is 0)."""
        ops = keras.ops
        window = [ops.cast(ops.divide_no_nan(s, samples), v.dtype) for s, v in zip(sums, trainable)]
        new_trainable, new_inner = self.inner_optimizer.stateless_apply(inner, window, trainable)
        return list(new_trainable), list(new_inner)

    def stateless_apply(
        self, optimizer_variables: Any, grads: Any, trainable_variables: Any
    ) -> Any:
        weight_of = self.micro_batch_weight
        if weight_of is None:
            raise ValueError(
                "ga_tfx.keras3: WindowOptimizer.stateless_apply needs the micro-batch's weight, "
                "which the wrapped model's train_step records; train through "
                "ga_tfx.keras3.wrap_model(model, K) and fit"
            )
        self.micro_batch_weight = None
        ops = keras.ops
        at_count, at_samples, at_sums, own_count = self._positions()
        own = list(optimizer_variables[:own_count])
        inner = list(optimizer_variables[own_count:])
        n = ops.cast(weight_of(), "float32")
        count = own[at_count] + 1
        samples = own[at_samples] + n
        sums = [own[i] + n * ops.cast(g, "float32") for i, g in zip(at_sums, grads)]

        def apply() -> Any:
            new_trainable, new_inner = self._apply_window(inner, sums, samples, trainable_variables)
            zeros = [ops.zeros_like(s) for s in sums]
            return new_trainable, new_inner, zeros, ops.zeros_like(samples), ops.zeros_like(count)

        def keep() -> Any:
            return list(trainable_variables), inner, sums, samples, count

        new_trainable, new_inner, new_sums, new_samples, new_count = ops.cond(
            ops.equal(count, self.accum_steps), apply, keep
        )
        own[at_count], own[at_samples] = new_count, new_samples
        for i, s in zip(at_sums, new_sums):
            own[i] = s
        return new_trainable, own + list(new_inner)

    def end_window(self, trainable_variables: List[Any]) -> bool:
        """Eagerly, on synced variables: applies a window the data's end left short (its
        micro-batches as one batch) and clears it. Returns whether there was one."""
        if not self.built or int(self.micro_steps.numpy()) == 0:
            return False
        inner_vars = self.inner_optimizer.variables
        new_trainable, new_inner = self._apply_window(
            [v.value for v in inner_vars],
            [s.value for s in self.window_sums],
            self.window_samples.value,
            [v.value for v in trainable_variables],
        )
        updated = list(trainable_variables) + list(inner_vars)
        for variable, value in zip(updated, new_trainable + new_inner):
            variable.assign(value)
        for variable in [self.micro_steps, self.window_samples] + self.window_sums:
            variable.assign(keras.ops.zeros_like(variable.value))
        return True
