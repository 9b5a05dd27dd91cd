"""The step: what one micro-batch does, and what the end of a window does.

This is the engine's counterpart of Keras' ``train_step``: the math of one micro-batch and of one
update, in replica context, with no ``tf.function`` and no loop. *How* these run (traced or
eager, XLA or not, how many micro-batches per window, when to apply) is decided by
:mod:`ga_tfx.engine.loop`, as Keras' ``make_train_function`` decides for ``train_step``.

* :meth:`WindowStep._accumulate_micro_batch`: forward, loss, backward on one micro-batch of
  ``n`` samples; adds ``n · g`` to the replica-local buffers of the model's
  :class:`~ga_tfx.accumulator.GradientAccumulator`; returns the micro-batch's logs.
* :meth:`WindowStep._apply_window`: all-reduces the buffers once, divides by the window's
  sample count, applies AGC (if on) and one ``optimizer.apply_gradients``, ends the window of
  the layers that keep window state (:class:`~ga_tfx.AccumBatchNormalization`), clears the
  buffers.
* :meth:`WindowStep._discard_window`: clears the window without an update.
"""

from ga_tfx import _tf_keras_internals as internals
from ga_tfx._keras import keras, tf
from ga_tfx.transforms import global_norm

import contextlib
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, List, Optional, Tuple

_LossScaleOptimizers = (keras.mixed_precision.LossScaleOptimizer,)


def is_loss_scale_optimizer(optimizer: Any) -> bool:
    """True for a Keras ``LossScaleOptimizer`` (new or legacy), which scales the loss."""
    return isinstance(optimizer, _LossScaleOptimizers) or hasattr(optimizer, "get_scaled_loss")


def apply_aggregated_gradients(
    optimizer: Any, grads_and_vars: List[Tuple[Any, tf.Variable]]
) -> Any:
    """``optimizer.apply_gradients`` for gradients that are already summed over replicas.

    Under a dynamic ``LossScaleOptimizer`` a non-finite window is skipped as one unit (no weight
    or slot changes, the loss scale decreases once) and, unlike Keras' own skipped steps, does
    not count in ``optimizer.iterations``: iterations (and learning-rate schedules) count
    applied updates only.
    """
    if isinstance(optimizer, keras.optimizers.Optimizer):
        result = optimizer.apply_gradients(grads_and_vars, skip_gradients_aggregation=True)
    else:
        result = optimizer.apply_gradients(grads_and_vars, experimental_aggregate_gradients=False)
    if is_loss_scale_optimizer(optimizer) and getattr(optimizer, "dynamic", False):
        # The same decision the LossScaleOptimizer takes: all gradients finite.
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g, _ in grads_and_vars])
        with tf.control_dependencies(_as_dependencies(result)):
            result = optimizer.iterations.assign_sub(1 - tf.cast(finite, tf.int64))
    return result


def apply_window_gradients(
    optimizer: Any, accumulator: Any, agc: Any, observe: Optional[Callable] = None
) -> list:
    """One update with the window's mean gradient (replica context), for the model engine and
    the optimizer wrapper alike: ``accumulator.window_gradients()`` (one all-reduce), then AGC
    (``agc``, or ``None``), then :func:`apply_aggregated_gradients`. ``observe(grads_and_vars)``,
    if given, sees the window gradient before AGC; its op is one of the returned dependencies.

    Returns:
      The update as a list of control dependencies (empty when there is nothing to wait for).
    """
    grads_and_vars = accumulator.window_gradients()
    observed = [] if observe is None else [observe(grads_and_vars)]
    if agc is not None:
        grads_and_vars = agc(grads_and_vars)
    return observed + _as_dependencies(apply_aggregated_gradients(optimizer, grads_and_vars))


def _as_dependencies(result: Any) -> list:
    # apply_gradients returns the iterations variable, an op, or None (LossScaleOptimizer).
    return [] if result is None else [result]


def batch_size(x: Any) -> tf.Tensor:
    """Number of samples in a (nested) input batch, as float32."""
    first = tf.nest.flatten(x)[0]
    if isinstance(first, tf.SparseTensor):
        return tf.cast(first.dense_shape[0], tf.float32)
    if isinstance(first, tf.RaggedTensor):
        return tf.cast(first.nrows(), tf.float32)
    return tf.cast(tf.shape(first)[0], tf.float32)


# The mixins are bases of keras.Model subclasses: type-check them as models.
_ModelBase: Any = keras.Model if TYPE_CHECKING else object


class WindowStep(_ModelBase):
    """Mixin of :class:`~ga_tfx.engine.AccumulationEngine`: the replica-context step functions.

    Expects ``self.gradient_accumulator`` (built by the engine before the loop runs),
    ``self.optimizer`` and the accumulation settings of the engine (``self.agc``).
    """

    def _accumulate_micro_batch(self, data: Any) -> Any:
        """Replica context: forward, loss, backward; adds ``n · g`` to the buffers.

        With a model whose own ``train_step`` defines a batch (:meth:`_train_step_model`), that
        ``train_step`` runs on the micro-batch, its ``optimizer.apply_gradients`` (or
        ``minimize``) adding to the buffers instead of updating; otherwise the compiled loss is
        differentiated here.

        Args:
          data: one micro-batch as the dataset yields it: ``x``, ``(x, y)`` or
            ``(x, y, sample_weight)``; ``n`` is the size of its first axis.

        Returns:
          The micro-batch's logs, after its gradient was added.
        """
        owner = self._train_step_model()
        if owner is not None:
            return self._accumulate_through_train_step(owner, data)
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        variables = self.trainable_variables
        optimizer = self.optimizer
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x, y, y_pred, sample_weight)
            if is_loss_scale_optimizer(optimizer):
                loss_to_differentiate = optimizer.get_scaled_loss(loss)
            else:
                loss_to_differentiate = loss
        internals.validate_target_and_loss(self, y, loss)
        grads = tape.gradient(loss_to_differentiate, variables)
        self.gradient_accumulator.record_connected(variables, grads)
        if is_loss_scale_optimizer(optimizer):
            grads = optimizer.get_unscaled_gradients(grads)
        with tf.control_dependencies([self.gradient_accumulator.add(grads, batch_size(x))]):
            return self.compute_metrics(x, y, y_pred, sample_weight)

    def _train_step_model(self) -> Optional[keras.Model]:
        """The model whose own ``train_step`` defines one micro-batch, or ``None``.

        This model if its class overrides ``train_step``; ``None`` otherwise: the engine then
        differentiates the compiled loss itself. ``AccumulatingModel`` also answers with the
        model it wraps when that one overrides ``train_step``.
        """
        return self if overrides_train_step(self) else None

    def _accumulate_through_train_step(self, owner: keras.Model, data: Any) -> Any:
        """Runs ``owner.train_step(data)`` with ``owner.optimizer`` standing in for the window:
        its one ``apply_gradients``/``minimize`` call adds ``n · g`` to the buffers."""
        x, _, _ = keras.utils.unpack_x_y_sample_weight(data)
        sink = _WindowGradientSink(owner, self.optimizer, self.gradient_accumulator, batch_size(x))
        with sink.installed():
            logs = owner.train_step(data)
        sink.check_applied_once()
        with tf.control_dependencies(sink.ops):
            return tf.nest.map_structure(
                lambda value: tf.identity(value) if tf.is_tensor(value) else value, logs
            )

    def _apply_window(self) -> tf.Operation:
        """Replica context: one optimizer update with the window-mean gradient; resets.

        The applied gradient is ``Σ_i n_i g_i / N`` over the window's micro-batches on all
        replicas (``N = Σ n_i``); one batched all-reduce.
        """
        acc = self.gradient_accumulator
        # Keras divides each replica's loss by the number of replicas; window_gradients undoes
        # that factor.
        update = apply_window_gradients(
            self.optimizer, acc, self.agc, observe=self._observe_gradient_norm()
        )
        with tf.control_dependencies(update):
            ends = [layer.ga_window_end(apply=True) for layer in self._window_layers()]
            with tf.control_dependencies(ends):
                return acc.reset()

    def _observe_gradient_norm(self) -> Optional[Callable]:
        """With ``log_grad_norm``: adds the window gradient's global norm (before AGC and the
        optimizer's clipping) to the ``grad_norm`` mean; a non-finite norm (a window a
        ``LossScaleOptimizer`` skips) is left out."""
        tracker = self.gradient_norm_metric
        if tracker is None:
            return None

        def observe(grads_and_vars: Any) -> Any:
            norm = global_norm(grads_and_vars)
            finite = tf.math.is_finite(norm)
            return tracker.update_state(
                tf.where(finite, norm, 0.0), sample_weight=tf.cast(finite, tf.float32)
            )

        return observe

    def _discard_window(self) -> tf.Operation:
        """Replica context: clears the window (buffers and window layers), no update."""
        ends = [layer.ga_window_end(apply=False) for layer in self._window_layers()]
        with tf.control_dependencies(ends):
            return self.gradient_accumulator.reset()

    def _window_layers(self) -> list:
        """Layers that keep per-window state (``AccumBatchNormalization``): they implement
        ``ga_window_end(apply)``, called in replica context once per window."""
        return [
            layer for layer in internals.flatten_layers(self) if hasattr(layer, "ga_window_end")
        ]


def overrides_train_step(model: keras.Model) -> bool:
    """True if ``model``'s class defines its own ``train_step`` (not Keras' default)."""
    return type(model).train_step is not keras.Model.train_step


def train_step_error(owner: keras.Model, problem: str) -> ValueError:
    """The error for a ``train_step`` ga-tfx cannot accumulate through, naming the way out."""
    return ValueError(
        f"Model {owner.name!r} overrides train_step, and {problem} ga_tfx accumulates through a "
        "model's own train_step only when it updates with self.optimizer, once per batch "
        "(self.optimizer.apply_gradients(...) or self.optimizer.minimize(...)): each micro-"
        "batch's call then adds to the window and the window is applied once. Otherwise use "
        "ga_tfx.GradientAccumulateOptimizer(optimizer, accum_steps) as the optimizer(s) of the "
        "model itself (compile it and fit it directly, without wrap_model), or "
        "ga_tfx.training_loop.TrainingLoop for a custom training loop."
    )


class _WindowGradientSink:
    """Stands in for ``owner.optimizer`` while ``owner.train_step`` runs on one micro-batch.

    ``apply_gradients(grads_and_vars)`` (or ``minimize``) adds ``weight · g`` to the window's
    buffers for the variables given (the others get no gradient from this call) and updates
    nothing. Every other attribute (``learning_rate``, ``iterations``, ``get_scaled_loss``,
    ...) is the real optimizer's. Installed at trace time only (and on every eager call): the
    traced graph holds the accumulation, and ``owner.optimizer`` is the real optimizer again
    as soon as ``train_step`` returns.
    """

    def __init__(self, owner: keras.Model, optimizer: Any, accumulator: Any, weight: Any) -> None:
        self._owner = owner
        self._optimizer = optimizer
        self._accumulator = accumulator
        self._weight = weight
        self.ops: List[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._optimizer, name)

    @contextlib.contextmanager
    def installed(self) -> Iterator["_WindowGradientSink"]:
        owner_dict = vars(self._owner)
        previous = owner_dict.get("optimizer")
        # Set in the instance dict directly: a plain attribute swap, no Keras tracking of the
        # stand-in (it must never become a checkpoint dependency).
        owner_dict["optimizer"] = self
        try:
            yield self
        finally:
            owner_dict["optimizer"] = previous

    def apply_gradients(
        self, grads_and_vars: Iterable[Tuple[Any, tf.Variable]], *args: Any, **kwargs: Any
    ) -> tf.Operation:
        del args, kwargs  # name / aggregation flags: the window is applied by the engine
        if self.ops:
            raise train_step_error(
                self._owner,
                "its train_step called optimizer.apply_gradients more than once "
                "for one batch (e.g. two networks updated in turn), so the gradients of a later "
                "call depend on the update of an earlier one within the batch.",
            )
        acc = self._accumulator
        variables = acc.accumulated_variables
        known = {v.ref() for v in variables}
        given = {}
        for grad, variable in grads_and_vars:
            if variable.ref() not in known:
                raise train_step_error(
                    self._owner,
                    f"its train_step applied a gradient to {variable.name!r}, "
                    "which is not a trainable variable of the model being fitted.",
                )
            given[variable.ref()] = grad
        grads = [given.get(v.ref()) for v in variables]
        acc.record_connected(variables, grads)
        self.ops.append(acc.add(grads, self._weight))
        return self.ops[-1]

    def minimize(
        self, loss: Any, var_list: Any, tape: Optional[tf.GradientTape] = None, **kwargs: Any
    ) -> tf.Operation:
        """Keras' ``minimize`` contract: gradients of ``loss`` (a tensor recorded on ``tape``, or
        a callable without tape), loss-scaled when the optimizer is a ``LossScaleOptimizer``."""
        del kwargs
        optimizer = self._optimizer
        tape = tf.GradientTape() if tape is None else tape
        if callable(loss):
            with tape:
                loss = loss()
        var_list = list(var_list() if callable(var_list) else var_list)
        if is_loss_scale_optimizer(optimizer):
            with tape:
                loss = optimizer.get_scaled_loss(loss)
        grads = tape.gradient(loss, var_list)
        if is_loss_scale_optimizer(optimizer):
            grads = optimizer.get_unscaled_gradients(grads)
        return self.apply_gradients(zip(grads, var_list))

    def check_applied_once(self) -> None:
        if not self.ops:
            raise train_step_error(
                self._owner,
                "its train_step never called self.optimizer.apply_gradients or "
                "self.optimizer.minimize (it updates some other way, e.g. with its own "
                "optimizers), so there is nothing to accumulate.",
            )
