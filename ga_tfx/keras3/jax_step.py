"""The JAX backend's room: the window as a stateless optimizer step (see docs/ARCHITECTURE.md,
"Keras 3").

Keras 3's JAX trainer (``keras/src/backend/jax/trainer.py``, ``train_step``) is a pure function
of its state (trainable, non-trainable, optimizer and metrics variables) and updates through
``optimizer.stateless_apply(optimizer_variables, grads, trainable_variables)``. The window state
is therefore part of the optimizer's variables, threaded through that function as optax's
``MultiSteps`` threads its ``MultiStepsState`` (read, not copied): :class:`WindowOptimizer`
wraps the user's optimizer as Keras' own ``LossScaleOptimizer`` does (its variables first, the
inner optimizer's after; ``keras/src/optimizers/loss_scale_optimizer.py``), adds each
micro-batch's gradient to float32 sums and counts it, and when the window holds ``K`` applies
the inner optimizer once, with the window gradient, under ``ops.cond`` (``jax.lax.cond``): the
inner optimizer's ``iterations`` and its learning-rate schedule count updates. Under
``keras.distribution.DataParallel`` the gradient Keras hands it is already the global batch's
(XLA all-reduces it), and the sums are replicated like the weights.

The numbers are the core's: the window gradient is the mean of the window's micro-batch
gradients (``Σ n_i g_i / Σ n_i`` with equal ``n_i``: every micro-batch of a window the same
size, as ``fit(batch_size=b)`` gives while the data lasts).
"""

from ga_tfx import _keras3_internals as internals

from typing import Any, List

import keras


class WindowOptimizer(keras.optimizers.Optimizer):
    """Applies ``inner_optimizer`` once per ``accum_steps`` calls, with their mean gradient.

    Args:
      inner_optimizer: a Keras 3 optimizer.
      accum_steps: ``K``, micro-batches per update (int >= 1).
    """

    def __init__(self, inner_optimizer: Any, accum_steps: int, name: Any = None) -> None:
        super().__init__(learning_rate=0.0, name=name)
        self.inner_optimizer = inner_optimizer
        self.accum_steps = int(accum_steps)

    def build(self, var_list: List[Any]) -> None:
        self.micro_steps = self.add_variable(
            shape=(), dtype="int", initializer="zeros", aggregation="none", name="micro_steps"
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

    def stateless_apply(
        self, optimizer_variables: Any, grads: Any, trainable_variables: Any
    ) -> Any:
        ops = keras.ops
        own_count = len(internals.own_variables(self))
        own, inner = list(optimizer_variables[:own_count]), list(optimizer_variables[own_count:])
        position = {id(v): i for i, v in enumerate(internals.own_variables(self))}
        at_count = position[id(self.micro_steps)]
        at_sums = [position[id(s)] for s in self.window_sums]
        count = own[at_count] + 1
        sums = [own[i] + ops.cast(g, "float32") for i, g in zip(at_sums, grads)]
        k = self.accum_steps

        def apply() -> Any:
            window = [ops.cast(s / k, v.dtype) for s, v in zip(sums, trainable_variables)]
            new_trainable, new_inner = self.inner_optimizer.stateless_apply(
                inner, window, trainable_variables
            )
            zeros = [ops.zeros_like(s) for s in sums]
            return list(new_trainable), list(new_inner), zeros, ops.zeros_like(count)

        def keep() -> Any:
            return list(trainable_variables), inner, sums, count

        new_trainable, new_inner, new_sums, new_count = ops.cond(ops.equal(count, k), apply, keep)
        own[at_count] = new_count
        for i, s in zip(at_sums, new_sums):
            own[i] = s
        return new_trainable, own + list(new_inner)


class JaxAccumulationMixin:
    """Mixed into a Keras 3 model's class by :func:`ga_tfx.keras3.wrap_model` on JAX:
    ``compile`` wraps the optimizer in a :class:`WindowOptimizer`."""

    ga_accumulation: Any

    def compile(self, *args: Any, optimizer: Any = "rmsprop", **kwargs: Any) -> None:
        inner = keras.optimizers.get(optimizer)
        wrapped = WindowOptimizer(inner, self.ga_accumulation.accum_steps)
        super().compile(*args, optimizer=wrapped, **kwargs)  # type: ignore[misc]
