"""The per-micro-batch step of the model engine: what one micro-batch does.

This is the engine's counterpart of Keras' ``train_step``: the math of one micro-batch, in
replica context, with no ``tf.function`` and no loop. What a window is (its state, the update,
the gradient chain, the bookkeeping) is the window core's (:mod:`ga_tfx.window`), shared with
the optimizer wrapper and ``TrainingLoop``; *how* steps run (traced or eager, XLA or not, how
many micro-batches per window, when a window ends) is decided by :mod:`ga_tfx.engine.loop`, as
Keras' ``make_train_function`` decides for ``train_step``.

* :meth:`WindowStep._accumulate_micro_batch`: forward, loss, backward on one micro-batch of
  ``n`` samples; adds ``n · g`` and ``n · loss`` to the window
  (:meth:`~ga_tfx.window.WindowCore.add`); returns the micro-batch's logs. A model with its
  own ``train_step`` runs it, its ``optimizer.apply_gradients`` adding to the window.
* :meth:`WindowStep._window_layers`: the layers that keep window state, ended by the core.
"""

from ga_tfx import _tf_keras_internals as internals
from ga_tfx._keras import keras, tf
from ga_tfx.divisor_rule import micro_batch_groups, micro_batch_weight
from ga_tfx.loss_divisors import recording_compiled_loss
from ga_tfx.window import batch_size, is_loss_scale_optimizer
from ga_tfx.window.accumulator import aligned

import contextlib
from typing import TYPE_CHECKING, Any, Iterable, Iterator, List, Optional, Tuple

# The mixins are bases of keras.Model subclasses: type-check them as models.
_ModelBase: Any = keras.Model if TYPE_CHECKING else object


class WindowStep(_ModelBase):
    """Mixin of :class:`~ga_tfx.engine.AccumulationEngine`: the replica-context step functions.

    Expects ``self.window_core`` (built by the engine before the loop runs) and
    ``self.optimizer``.
    """

    def _accumulate_micro_batch(self, data: Any) -> Any:
        """Replica context: forward, loss, backward; adds ``D · g`` to the buffers, ``D`` the
        divisor the compiled loss divided by (:func:`~ga_tfx.divisor_rule.micro_batch_weight`).

        With a model whose own ``train_step`` defines a batch (:meth:`_train_step_model`), that
        ``train_step`` runs on the micro-batch, its ``optimizer.apply_gradients`` (or
        ``minimize``) adding to the buffers instead of updating; otherwise the compiled loss is
        differentiated here.

        Args:
          data: one micro-batch as the dataset yields it: ``x``, ``(x, y)`` or
            ``(x, y, sample_weight)``; its rows are the size of its first axis.

        Returns:
          The micro-batch's logs, after its gradient was added.
        """
        owner = self._train_step_model()
        if owner is not None:
            return self._accumulate_through_train_step(owner, data)
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        variables = self.trainable_variables
        optimizer = self.optimizer
        rows = batch_size(x)
        scaled = is_loss_scale_optimizer(optimizer)
        with tf.GradientTape(persistent=several_outputs(self)) as tape:
            # The model's layers are converted by Keras as under a tf.function with autograph.
            y_pred = internals.autograph_converted(self.__call__)(x, training=True)
            with recording_compiled_loss(self) as terms:
                loss = internals.user_code(self, self.compute_loss)(x, y, y_pred, sample_weight)
            groups = micro_batch_groups(terms, rows, loss, who=f"model {self.name!r}")
            to_differentiate = [optimizer.get_scaled_loss(p) if scaled else p for p, _ in groups]
        internals.validate_target_and_loss(self, y, loss)
        parts = []
        for (part, weight), target in zip(groups, to_differentiate):
            grads = tape.gradient(target, variables)
            if scaled:
                grads = optimizer.get_unscaled_gradients(grads)
            parts.append((grads, weight, part))
        del tape
        (grads, weight, part), rest = parts[0], parts[1:]
        add = self.window_core.add(grads, weight, part, rows=rows, parts=rest)
        with tf.control_dependencies([add]):
            return internals.user_code(self, self.compute_metrics)(x, y, y_pred, sample_weight)

    def _train_step_model(self) -> Optional[keras.Model]:
        """The model whose own ``train_step`` defines one micro-batch, or ``None``.

        This model if its class overrides ``train_step``; ``None`` otherwise: the engine then
        differentiates the compiled loss itself. ``AccumulatingModel`` also answers with the
        model it wraps when that one overrides ``train_step``.
        """
        return self if overrides_train_step(self) else None

    def _accumulate_through_train_step(self, owner: keras.Model, data: Any) -> Any:
        """Runs ``owner.train_step(data)`` with ``owner.optimizer`` standing in for the window:
        its one ``apply_gradients``/``minimize`` call adds ``D · g`` to the buffers, ``D`` the
        divisor of the compiled loss that ``train_step`` computed (its rows, with a warning, if
        it computed none)."""
        x, _, _ = keras.utils.unpack_x_y_sample_weight(data)
        with recording_compiled_loss(owner) as terms:
            sink = _WindowGradientSink(
                owner, self.optimizer, self.window_core, batch_size(x), terms
            )
            with sink.installed():
                logs = internals.user_code(owner, owner.train_step)(data)
        sink.check_applied_once()
        with tf.control_dependencies(sink.ops):
            return tf.nest.map_structure(
                lambda value: tf.identity(value) if tf.is_tensor(value) else value, logs
            )

    def _window_layers(self) -> list:
        """Layers that keep per-window state (``AccumBatchNormalization``): they implement
        ``ga_window_end(apply)``, which the window core calls in replica context once per
        window."""
        return [
            layer for layer in internals.flatten_layers(self) if hasattr(layer, "ga_window_end")
        ]


def several_outputs(model: keras.Model) -> bool:
    """Whether the micro-batch's tape is persistent: for a model of several outputs, whose loss
    of several terms with their own divisors takes one gradient per part
    (:func:`~ga_tfx.divisor_rule.micro_batch_groups`). Not otherwise: TF builds a persistent
    tape's gradient of a while loop (a GRU) with other ops than a plain tape's."""
    return len(model.output_names or ()) != 1


# Keras' methods whose override makes a model's class define what one batch trains: its own
# train_step, or the loss and metrics Keras' train_step computes.
STEP_HOOKS = ("train_step", "compute_loss", "compute_metrics")


def overrides_train_step(model: keras.Model) -> bool:
    """True if ``model``'s class defines its own ``train_step`` (not Keras' default)."""
    return type(model).train_step is not keras.Model.train_step


def overridden_step_hooks(model: keras.Model) -> Tuple[str, ...]:
    """The :data:`STEP_HOOKS` ``model``'s class overrides (empty: Keras' own batch)."""
    return tuple(
        hook for hook in STEP_HOOKS if getattr(type(model), hook) is not getattr(keras.Model, hook)
    )


def train_step_error(owner: keras.Model, problem: str) -> ValueError:
    """The error for a ``train_step`` ga-tfx cannot accumulate through, naming the way out."""
    overridden = " and ".join(overridden_step_hooks(owner)) or "train_step"
    return ValueError(
        f"Model {owner.name!r} overrides {overridden}, and {problem} ga_tfx accumulates through a "
        "model's own train_step only when it updates with self.optimizer, once per batch "
        "(self.optimizer.apply_gradients(...) or self.optimizer.minimize(...)): each micro-"
        "batch's call then adds to the window and the window is applied once. Otherwise use "
        "ga_tfx.GradientAccumulateOptimizer(optimizer, accum_steps) as the optimizer(s) of the "
        "model itself (compile it and fit it directly, without wrap_model), or "
        "ga_tfx.training_loop.TrainingLoop for a custom training loop."
    )


class _WindowGradientSink:
    """Stands in for ``owner.optimizer`` while ``owner.train_step`` runs on one micro-batch.

    ``apply_gradients(grads_and_vars)`` (or ``minimize``) adds ``D · g`` to the window's
    buffers (``D`` from the loss terms recorded so far in the step) for the variables given
    (the others get no gradient from this call) and updates nothing. Every other attribute
    (``learning_rate``, ``iterations``, ``get_scaled_loss``, ...) is the real optimizer's.
    Installed at trace time only (and on every eager call): the traced graph holds the
    accumulation, and ``owner.optimizer`` is the real optimizer again as soon as
    ``train_step`` returns.
    """

    def __init__(
        self, owner: keras.Model, optimizer: Any, core: Any, rows: Any, terms: List[Any]
    ) -> None:
        self._owner = owner
        self._optimizer = optimizer
        self._core = core
        self._rows = rows
        self._terms = terms
        self.ops: List[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._optimizer, name)

    @contextlib.contextmanager
    def installed(self) -> Iterator["_WindowGradientSink"]:
        # A plain attribute swap, no Keras tracking of the stand-in (it must never become a
        # checkpoint dependency).
        with internals.untracked_attribute(self._owner, "optimizer", self):
            yield self

    def apply_gradients(
        self,
        grads_and_vars: Iterable[Tuple[Any, tf.Variable]],
        *args: Any,
        sample_count: Any = None,
        **kwargs: Any,
    ) -> tf.Operation:
        """Adds the micro-batch's gradients to the window (``D · g``).

        Args:
          grads_and_vars: the train_step's ``[(gradient, variable)]``.
          *args, **kwargs: Keras' ``name`` and aggregation flags (the engine applies the
            window).
          sample_count: the divisor of the loss these gradients are of, for a train_step
            that divides by hand (what :func:`ga_tfx.loss_divisor` gives for a Keras loss);
            default: the divisor of the compiled loss the step computed, else its rows (with
            a warning).
        """
        del args, kwargs
        if self.ops:
            raise train_step_error(
                self._owner,
                "its train_step called optimizer.apply_gradients more than once "
                "for one batch (e.g. two networks updated in turn), so the gradients of a later "
                "call depend on the update of an earlier one within the batch.",
            )
        grads = aligned(
            grads_and_vars,
            self._core.accumulator.accumulated_variables,
            lambda variable: train_step_error(
                self._owner,
                f"its train_step applied a gradient to {variable.name!r}, "
                "which is not a trainable variable of the model being fitted.",
            ),
        )
        if sample_count is None:
            weight = micro_batch_weight(self._terms, self._rows, f"model {self._owner.name!r}")
        else:
            weight = sample_count
        self.ops.append(self._core.add(grads, weight, rows=self._rows))
        return self.ops[-1]

    def minimize(
        self,
        loss: Any,
        var_list: Any,
        tape: Optional[tf.GradientTape] = None,
        sample_count: Any = None,
        **kwargs: Any,
    ) -> tf.Operation:
        """Keras' ``minimize`` contract: gradients of ``loss`` (a tensor recorded on ``tape``, or
        a callable without tape), loss-scaled when the optimizer is a ``LossScaleOptimizer``;
        ``sample_count`` as :meth:`apply_gradients` takes it."""
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
        return self.apply_gradients(zip(grads, var_list), sample_count=sample_count)

    def check_applied_once(self) -> None:
        if not self.ops:
            raise train_step_error(
                self._owner,
                "its train_step never called self.optimizer.apply_gradients or "
                "self.optimizer.minimize (it updates some other way, e.g. with its own "
                "optimizers), so there is nothing to accumulate.",
            )
