"""The Keras 3 model front-end on the JAX backend: what :func:`ga_tfx.keras3.wrap_model` mixes
into a model's class there (the window itself is :mod:`ga_tfx.keras3.jax_step`'s).

- ``compile`` wraps the optimizer in a :class:`~ga_tfx.keras3.jax_step.WindowOptimizer`, and
  builds it when the model is built, so that ``load_weights`` after ``compile`` restores the
  window state (a run resumes inside its window).
- ``train_step`` records the micro-batch's weight for the optimizer's next ``stateless_apply``:
  the divisor its compiled loss was divided by, read from the loss as Keras computes it
  (:func:`~ga_tfx.keras3.divisor.compiled_loss_terms`; a traced scalar: the valid
  elements of a masked loss, ``Σ sample_weight`` for ``mean_with_sample_weight``, the elements
  otherwise), and its rows (the leading dimension of the traced batch's first input, static
  under ``jax.jit``), then runs the model's own ``train_step`` (Keras 3's, or the user's
  override) with the recording on. Under ``DataParallel`` the traced batch is the global one,
  so the divisor is the global batch's, as the gradient Keras hands the optimizer is.
- The data's end inside a window: Keras' JAX ``fit`` syncs the state back into the variables at
  each epoch's end (``jax_state_sync``), then runs validation, then the callbacks'
  ``on_epoch_end``. The short window is applied there, eagerly, as one update of its samples
  (``partial_window="apply"``, what plain Keras at ``K·b`` does with its smaller last batch):
  before validation (fit's ``evaluate``) and, when there is none, by a callback that runs before
  the user's ``on_epoch_end`` callbacks (a checkpoint at the epoch's end sees it applied). An
  epoch cut by ``steps_per_epoch`` ends the same way.
"""

from ga_tfx import _keras3_internals as internals
from ga_tfx.config import AccumulationConfig
from ga_tfx.keras3.batchnorm import fold, mark_windowed, window_layers
from ga_tfx.keras3.compile_checks import check_optimizer
from ga_tfx.keras3.divisor import compiled_loss_terms
from ga_tfx.keras3.jax_step import WindowOptimizer

from typing import Any, Optional

import keras

# The JAX front-end's way out of a loss of several terms with varying divisors.
_SEVERAL = (
    "on the JAX backend the window keeps a sum per term only where compile sees the terms "
    "may vary (a Functional model whose outputs carry a mask or an unknown time axis, or a "
    "'mean_with_sample_weight' loss), and never through a model's own train_step; build it "
    "as a Functional model, or train on the TensorFlow backend (KERAS_BACKEND=tensorflow)"
)


def _parts(model: Any, loss: Any) -> int:
    """How many further parts the window of ``model`` compiled with ``loss`` keeps (0: one
    sum): for several outputs of which one may divide by a count that changes from micro-batch
    to micro-batch (a Keras mask on it, a time axis of unknown length, a weighted mean), one
    less than the outputs with a loss; read from a Functional model's symbolic outputs."""
    if not internals.is_graph_model(model):
        return 0
    try:
        outputs = keras.tree.flatten(model.outputs)
    except (AttributeError, ValueError):  # a Sequential never built: no symbolic outputs yet
        return 0
    losses = keras.tree.flatten(loss) if keras.tree.is_nested(loss) else [loss] * len(outputs)
    losses = [entry for entry in losses if entry is not None]
    if len(outputs) < 2 or len(losses) < 2:
        return 0
    weighted = any(
        getattr(entry, "reduction", None) == "mean_with_sample_weight" for entry in losses
    )
    varies = weighted or any(
        getattr(out, "_keras_mask", None) is not None or None in tuple(out.shape)[1:]
        for out in outputs
    )
    return len(losses) - 1 if varies else 0


class _EndOfEpoch(keras.callbacks.Callback):
    """Applies, at each epoch's end, the window the data's end left short."""

    def __init__(self, owner: Any) -> None:
        super().__init__()
        self._owner = owner

    def on_epoch_end(self, epoch: int, logs: Optional[dict] = None) -> None:
        self._owner.end_pending_window()


class JaxAccumulationMixin:
    """Mixed into a Keras 3 model's class by :func:`ga_tfx.keras3.wrap_model` on JAX."""

    ga_accumulation: AccumulationConfig
    optimizer: Any
    trainable_variables: Any
    non_trainable_variables: Any
    dtype_policy: Any

    def compile(self, optimizer: Any = "rmsprop", *args: Any, **kwargs: Any) -> None:
        # steps_per_execution is kept as given: the window is optimizer state threaded from one
        # train step to the next, so any number of micro-batches per call is exact.
        inner = check_optimizer(optimizer, self.ga_accumulation.accum_steps)
        if isinstance(inner, keras.optimizers.LossScaleOptimizer):
            raise ValueError(
                "ga_tfx.keras3 on the JAX backend: a LossScaleOptimizer is not supported "
                "(allowed: a Keras 3 optimizer without loss scaling; mixed_float16 runs on the "
                "TensorFlow backend)"
            )
        loss = kwargs.get("loss", args[0] if args else None)
        wrapped = WindowOptimizer(inner, self.ga_accumulation.accum_steps, parts=_parts(self, loss))
        super().compile(*args, optimizer=wrapped, **kwargs)  # type: ignore[misc]
        if self.optimizer is not wrapped:  # Keras wrapped it: a mixed_float16 policy
            raise ValueError(
                f"ga_tfx.keras3 on the JAX backend: dtype policy {self.dtype_policy.name!r} "
                "(Keras adds a LossScaleOptimizer) is not supported (allowed: a policy without "
                "loss scaling, e.g. float32; mixed_float16 runs on the TensorFlow backend)"
            )
        if getattr(self, "built", False):
            # Built now (Keras builds it at the first fit): load_weights after compile then
            # restores the window state too (Keras skips an unbuilt optimizer's, with a warning).
            wrapped.build(self.trainable_variables)

    def train_step(self, state: Any, data: Any) -> Any:
        x, _, _ = keras.utils.unpack_x_y_sample_weight(data)
        first = next(t for t in keras.tree.flatten(x) if t is not None)
        rows = int(first.shape[0])
        who = f"model {getattr(self, 'name', '')!r}"
        mark_windowed(window_layers(self))
        if self.optimizer.parts and not internals.overrides_train_step(self):
            return self._batchnorm_window_end(self._parts_step(state, data, rows, who))
        with compiled_loss_terms(self) as terms:
            # Read by stateless_apply, after the loss (inside jax.value_and_grad) is traced.
            self.optimizer.micro_batch_weight = lambda: terms.weight(rows, who, _SEVERAL)
            try:
                logs, state = super().train_step(state, data)  # type: ignore[misc]
            finally:
                self.optimizer.micro_batch_weight = None
        return logs, self._batchnorm_window_end(state)

    def _parts_step(self, state: Any, data: Any, rows: int, who: str) -> Any:
        """Keras' JAX ``train_step`` (``keras/src/backend/jax/trainer.py``) for a loss whose
        terms the window weighs apart (:func:`~ga_tfx.divisor_rule.micro_batch_groups`): one
        forward pass (``jax.vjp`` of ``compute_loss_and_updates``) and one backward pass per
        part, the first part's gradient handed to ``stateless_apply`` as Keras does, the
        others beside it (``WindowOptimizer.micro_batch_parts``)."""
        import jax

        trainable, non_trainable, optimizer_variables, metrics_variables = state
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        with compiled_loss_terms(self) as terms:

            def parts_of(trainable: Any) -> Any:
                loss, aux = self.compute_loss_and_updates(  # type: ignore[attr-defined]
                    trainable,
                    non_trainable,
                    metrics_variables,
                    x,
                    y,
                    sample_weight,
                    training=True,
                    optimizer_variables=optimizer_variables,
                )
                groups = terms.groups(rows, loss, who)
                return [part for part, _ in groups], (aux, [weight for _, weight in groups])

            parts, pullback, (aux, weights) = jax.vjp(parts_of, trainable, has_aux=True)
        if len(parts) - 1 > self.optimizer.parts:
            terms.weight(rows, who, _SEVERAL)  # refuses: more parts than the window holds
        grads = []
        for i in range(len(parts)):
            cotangent = [
                keras.ops.ones_like(p) if j == i else keras.ops.zeros_like(p)
                for j, p in enumerate(parts)
            ]
            grads.append(pullback(cotangent)[0])
        unscaled_loss, y_pred, non_trainable, metrics_variables = aux
        self.optimizer.micro_batch_weight = lambda: weights[0]
        self.optimizer.micro_batch_parts = list(zip(grads[1:], weights[1:]))
        trainable, optimizer_variables = self.optimizer.stateless_apply(
            optimizer_variables, grads[0], trainable
        )
        logs, metrics_variables = internals.update_metrics_variables(
            self, metrics_variables, unscaled_loss, x, y, y_pred, sample_weight
        )
        return logs, (trainable, non_trainable, optimizer_variables, metrics_variables)

    def _batchnorm_window_end(self, state: Any) -> Any:
        """AccumBatchNormalization layers: where the optimizer's window just ended (its
        micro-step count back to 0), their window sums are folded into the moving statistics
        and cleared (:func:`ga_tfx.keras3.batchnorm.fold`), in the returned state."""
        layers = window_layers(self)
        if not layers:
            return state
        ops = keras.ops
        trainable, non_trainable, optimizer_variables, metrics = state
        at_count = [id(v) for v in self.optimizer.variables].index(id(self.optimizer.micro_steps))
        ended = ops.equal(optimizer_variables[at_count], 0)
        non_trainable = list(non_trainable)
        index = {id(v): i for i, v in enumerate(self.non_trainable_variables)}
        for layer in layers:
            moving = [index[id(layer.moving_mean)], index[id(layer.moving_variance)]]
            sums = [index[id(v)] for v in layer.window_sums]
            folded = fold(
                [non_trainable[i] for i in moving], [non_trainable[i] for i in sums], layer.momentum
            )
            for i, value in zip(moving, folded):
                non_trainable[i] = ops.where(ended, value, non_trainable[i])
            for i in sums:
                non_trainable[i] = ops.where(
                    ended, ops.zeros_like(non_trainable[i]), non_trainable[i]
                )
        return trainable, non_trainable, optimizer_variables, metrics

    def end_pending_window(self) -> bool:
        """Eagerly, on synced variables: applies the window in progress as one smaller update
        (``partial_window="apply"``). Returns whether there was one."""
        optimizer = self.optimizer
        if not isinstance(optimizer, WindowOptimizer):
            return False
        if not optimizer.end_window(self.trainable_variables):
            return False
        for layer in window_layers(self):
            moving = [layer.moving_mean, layer.moving_variance]
            folded = fold(
                [v.value for v in moving], [v.value for v in layer.window_sums], layer.momentum
            )
            for variable, value in zip(moving, folded):
                variable.assign(value)
            for variable in layer.window_sums:
                variable.assign(keras.ops.zeros_like(variable.value))
        return True

    def evaluate(self, *args: Any, **kwargs: Any) -> Any:
        if internals.called_by_fit(kwargs):  # fit's validation: the epoch's data has ended
            self.end_pending_window()
        return super().evaluate(*args, **kwargs)  # type: ignore[misc]

    def fit(self, *args: Any, callbacks: Any = None, **kwargs: Any) -> Any:
        callbacks = [_EndOfEpoch(self)] + list(callbacks or [])
        return super().fit(*args, callbacks=callbacks, **kwargs)  # type: ignore[misc]
