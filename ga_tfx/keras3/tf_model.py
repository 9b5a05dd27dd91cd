"""The Keras 3 model front-end on the TensorFlow backend: ``fit`` of whole windows through the
window core (see :mod:`ga_tfx.keras3` and docs/ARCHITECTURE.md, "Keras 3").

A wrapped model's train function is the core's :class:`~ga_tfx.window.runner.WindowRunner`
execution of one window per call (Keras 3's ``steps_per_execution`` is set to ``K``, so its
epoch iterator calls the train function once per window). Each micro-batch runs the model's
own ``train_step`` (Keras 3's, or the user's override) in replica context, with
``self.optimizer`` standing for a sink whose ``apply_gradients`` adds the gradients to the core
(:meth:`~ga_tfx.window.WindowCore.add`, weighted by the divisor the replica's loss was divided
by, which :func:`~ga_tfx.keras3.divisor.compiled_loss_terms` reads from the compiled loss
as Keras computes it: the valid elements of a masked loss, ``Σ sample_weight`` for
``mean_with_sample_weight``; its rows counted apart); the window ends with
:meth:`~ga_tfx.window.WindowCore.finish` and the real optimizer: one update per window, in
cross-replica context, under ``tf.distribute`` too. Keras 3 scales each replica's loss by
``1/R`` (``keras/src/losses/loss.py``, ``scale_loss_for_distribution``), which is the share the
core's :meth:`~ga_tfx.window.WindowCore.add` expects.

The data's end inside a window (an epoch of ``N`` micro-batches, ``N`` not a multiple of
``K``): Keras 3's epoch iterator ends the epoch on the ``OutOfRangeError`` of the execution
that ran out; the micro-batches before it are in the core's buffers, and the end of the epoch
ends their window by ``partial_window`` (``apply``: a smaller batch). Keras 3's ``fit`` then
validates, then runs the callbacks' ``on_epoch_end``: the window is ended before both (at
fit's ``evaluate``, and by a callback ahead of the user's), as on JAX
(:mod:`ga_tfx.keras3.jax_model`), so that they see the weights plain training at ``K·b``
would have.
"""

from ga_tfx import _keras3_internals as internals
from ga_tfx._tf_internals import tf
from ga_tfx.config import AccumulationConfig
from ga_tfx.keras3.batchnorm import mark_windowed, window_layers
from ga_tfx.keras3.compile_checks import check_optimizer
from ga_tfx.keras3.divisor import LossTerms, compiled_loss_terms
from ga_tfx.window.accumulator import aligned
from ga_tfx.window.core import CHECKPOINT_KEY, WindowCore
from ga_tfx.window.runner import WindowRunner
from ga_tfx.window.shims import is_loss_scale_optimizer

import contextlib
from typing import Any, Iterable, Iterator, List, Optional, Tuple

import keras


class _GradientSink:
    """Stands for the model's optimizer while ``train_step`` is traced: ``apply_gradients``
    adds the micro-batch's gradients to the window, weighted by the divisor of the loss terms
    recorded so far (``terms``: the compiled loss's, computed before the gradient), its rows
    counted apart, with the loss ``scale_loss`` was given (Keras 3's ``train_step`` passes it
    its loss: the window's mean loss in the core's records); every other attribute is the
    optimizer's. A loss of several terms with their own divisors
    (:func:`~ga_tfx.divisor_rule.micro_batch_groups`) is added by :meth:`add_parts` after
    ``train_step``; with the model's own ``train_step`` (``own_step``) it is refused."""

    def __init__(
        self,
        optimizer: Any,
        core: WindowCore,
        terms: LossTerms,
        rows: Any,
        who: str,
        own_step: bool = False,
    ) -> None:
        self._own_step = own_step
        self._optimizer = optimizer
        self._core = core
        self._terms = terms
        self.rows = rows
        self._who = who
        self._loss: Any = None
        self.ops: List[Any] = []
        self.groups: List[Tuple[Any, Any]] = []
        self.grads: List[Any] = []

    def scale_loss(self, loss: Any) -> Any:
        self._loss = loss
        return self._optimizer.scale_loss(loss)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._optimizer, name)

    def apply_gradients(
        self, grads_and_vars: Iterable[Tuple[Any, Any]], sample_count: Any = None
    ) -> Any:
        """Adds the micro-batch's gradients to the window; ``sample_count``: the divisor of
        their loss, for a train_step that divides by hand (:func:`ga_tfx.keras3.loss_divisor`
        gives it for a Keras loss; default: the compiled loss's, else the rows with a
        warning)."""
        if self.ops:
            raise ValueError(
                "ga_tfx.keras3: the model's train_step called optimizer.apply_gradients more "
                "than once for one micro-batch; accumulation needs one call per micro-batch"
            )
        grads = aligned(
            [(g, getattr(v, "value", v)) for g, v in grads_and_vars],
            self._core.accumulator.accumulated_variables,
            lambda value: ValueError(
                f"ga_tfx.keras3: train_step applied a gradient to {value.name!r}, "
                "which is not a trainable variable of the model being fitted"
            ),
        )
        if is_loss_scale_optimizer(self._optimizer):
            # train_step scaled the loss (optimizer.scale_loss): the core sums unscaled
            # gradients; the window end scales the window gradient back for the optimizer,
            # which unscales it, skips a non-finite window and lowers its scale once.
            grads = [None if g is None else g / tf.cast(self._scale(), g.dtype) for g in grads]
        if sample_count is not None:
            self.groups = [(self._loss, sample_count)]
        elif self._own_step:  # its one gradient: one weight (several varying terms refused)
            self.groups = [(self._loss, self._terms.weight(self.rows, self._who))]
        else:
            self.groups = self._terms.groups(self.rows, self._loss, self._who)
        if len(self.groups) == 1:
            weight = self.groups[0][1]
            self.ops.append(self._core.add(grads, weight, self._loss, rows=self.rows))
        else:
            self.grads = grads  # added by add_parts, once the step's tape has ended
            self.ops.append(tf.no_op())
        return self.ops[-1]

    def _scale(self) -> Any:
        return tf.convert_to_tensor(self._optimizer.dynamic_scale)

    def add_parts(self, tape: tf.GradientTape) -> None:
        """After ``train_step``, for a loss of several parts with their own divisors
        (:func:`~ga_tfx.divisor_rule.micro_batch_groups`): each part but the first is
        differentiated on ``tape`` (persistent, around ``train_step``), the first part's
        gradient is Keras' (the whole loss's) less theirs, and all are added to the window."""
        variables = self._core.accumulator.accumulated_variables
        scaled = is_loss_scale_optimizer(self._optimizer)
        parts, rest = [], list(self.grads)
        for part, weight in self.groups[1:]:
            target = part * tf.cast(self._scale(), part.dtype) if scaled else part
            grads = tape.gradient(target, variables)
            if scaled:
                grads = [None if g is None else g / tf.cast(self._scale(), g.dtype) for g in grads]
            parts.append((grads, weight, part))
            rest = [_minus(r, g) for r, g in zip(rest, grads)]
        first, weight = self.groups[0]
        self.ops.append(self._core.add(rest, weight, first, rows=self.rows, parts=parts))

    def apply(self, grads: Any, trainable_variables: Any = None, sample_count: Any = None) -> Any:
        return self.apply_gradients(zip(grads, trainable_variables), sample_count)


def _several_outputs(model: Any) -> bool:
    """Whether ``model`` may have several outputs (a Functional model's ``outputs``; a
    subclassed model's are not known before its loss is computed)."""
    try:
        return len(tf.nest.flatten(model.outputs)) > 1
    except (AttributeError, ValueError):
        return True


def _minus(whole: Any, part: Any) -> Any:
    """``whole - part`` for two gradients of one variable (``None``: zero); two
    ``tf.IndexedSlices`` stay sparse (their rows concatenated, ``part``'s negated)."""
    if part is None:
        return whole
    if whole is None:
        whole = tf.zeros_like(tf.convert_to_tensor(part))
    if isinstance(whole, tf.IndexedSlices) and isinstance(part, tf.IndexedSlices):
        return tf.IndexedSlices(
            tf.concat([whole.values, -tf.cast(part.values, whole.values.dtype)], 0),
            tf.concat([whole.indices, tf.cast(part.indices, whole.indices.dtype)], 0),
            whole.dense_shape,
        )
    whole = tf.convert_to_tensor(whole)
    return whole - tf.cast(tf.convert_to_tensor(part), whole.dtype)


@contextlib.contextmanager
def _optimizer_as(model: Any, stand_in: Any) -> Iterator[None]:
    """``model.optimizer`` is ``stand_in`` inside (a plain attribute swap: Keras 3 tracks
    nothing of it)."""
    real = model.optimizer
    object.__setattr__(model, "optimizer", stand_in)
    try:
        yield
    finally:
        object.__setattr__(model, "optimizer", real)


def _samples(data: Any) -> Any:
    """The micro-batch's samples (rows) on this replica (the first input's leading
    dimension): counted in ``samples_seen``, and its weight when no loss term was recorded."""
    x = data[0] if isinstance(data, (tuple, list)) else data
    first = next(t for t in tf.nest.flatten(x) if t is not None)
    return tf.shape(first)[0]


class TFWindowTrainer:
    """The windows of one wrapped Keras 3 model on TensorFlow: its core and train function.

    Args:
      model: a compiled, built Keras 3 model (TensorFlow backend).
      config: the :class:`~ga_tfx.AccumulationConfig`.
    """

    def __init__(self, model: Any, config: AccumulationConfig) -> None:
        self.model = model
        self.config = config
        strategy = model.distribute_strategy
        with strategy.scope():
            variables = [v.value for v in model.trainable_variables]
            layers = window_layers(model)
            mark_windowed(layers)
            self.core = WindowCore(variables, config, window_layers=layers)
            # Built here, host side, not inside the window end's first trace.
            if not model.optimizer.built:
                model.optimizer.build(model.trainable_variables)
        self.runner = WindowRunner(
            self.core,
            strategy,
            self._micro_batch,
            self._finish,
            logs=self._reduce,
            eager=bool(model.run_eagerly),
        )
        self.train_function = self.runner.trace(self._execution)

    def _micro_batch(self, data: Any) -> Any:
        """Replica context: the model's ``train_step`` with the sink as its optimizer, its
        compiled loss's terms recorded (the micro-batch's weight)."""
        who = f"model {getattr(self.model, 'name', '')!r}"
        with compiled_loss_terms(self.model) as terms:
            own_step = internals.overrides_train_step(self.model)
            sink = _GradientSink(
                self.model.optimizer, self.core, terms, _samples(data), who, own_step
            )
            # Around train_step, for a loss of several parts with their own divisors (each
            # differentiated apart). Only for a model of several outputs (or a subclassed one,
            # whose outputs are not known here): under a recording tape TF builds Keras'
            # gradient of a while loop (a GRU) with other, more ops.
            tape = tf.GradientTape(persistent=True) if _several_outputs(self.model) else None
            with tape or contextlib.nullcontext(), _optimizer_as(self.model, sink):
                logs = self.model.train_step(data)
        if len(sink.groups) > 1:
            if tape is None:  # no tape to differentiate the parts on: refused in one line
                terms.weight(sink.rows, who)
            sink.add_parts(tape)
        del tape
        if not sink.ops:
            raise ValueError(
                "ga_tfx.keras3: the model's train_step never called "
                "self.optimizer.apply_gradients, so there is nothing to accumulate"
            )
        with tf.control_dependencies(sink.ops):
            return tf.nest.map_structure(tf.identity, logs)

    def _finish(self) -> Any:
        return self.core.finish(self.model.distribute_strategy, self.model.optimizer)

    def _reduce(self, outputs: Any) -> Any:
        strategy = self.model.distribute_strategy
        return tf.nest.map_structure(lambda v: strategy.experimental_local_results(v)[0], outputs)

    def _execution(self, iterator: Any) -> Any:
        steps = self.core.state.current_accum_steps.read_value()
        return self.runner.execution(iterator, steps, finish_last=True)

    def end_pending_window(self) -> bool:
        """Host: ends a window the data's end left short, by ``partial_window``."""
        return self.runner.end_pending_window()


class _EndOfEpoch(keras.callbacks.Callback):
    """Ends, at each epoch's end, the window the data's end left short (``partial_window``)."""

    def __init__(self, owner: Any) -> None:
        super().__init__()
        self._owner = owner

    def on_epoch_end(self, epoch: int, logs: Optional[dict] = None) -> None:
        if self._owner._ga_trainer is not None:
            self._owner._ga_trainer.end_pending_window()


class _WindowEvents(keras.callbacks.Callback):
    """For one ``fit``: each finished window's :class:`~ga_tfx.window.WindowEnd` goes to
    ``listeners`` (the callbacks with ``on_window_end``), after each call of the train function
    (one window) and at the epoch's end (a window the data's end left short)."""

    def __init__(self, owner: Any, listeners: List[Any]) -> None:
        super().__init__()
        self._owner = owner
        self._listeners = listeners

    def _dispatch(self) -> None:
        for event in self._owner.window_core.poll():
            for listener in self._listeners:
                listener.on_window_end(event)

    def on_train_begin(self, logs: Optional[dict] = None) -> None:
        self._owner.window_core.start_events()

    def on_train_batch_end(self, batch: int, logs: Optional[dict] = None) -> None:
        self._dispatch()

    def on_epoch_end(self, epoch: int, logs: Optional[dict] = None) -> None:
        self._dispatch()


class AccumulationMixin:
    """Mixed into a Keras 3 model's class by :func:`ga_tfx.keras3.wrap_model`."""

    ga_accumulation: AccumulationConfig
    _ga_trainer: Optional[TFWindowTrainer]
    train_function: Any

    @property
    def window_core(self) -> WindowCore:
        """The window core (made at the first ``fit``)."""
        if self._ga_trainer is None:
            raise ValueError("ga_tfx.keras3: the window core exists from the first fit on")
        return self._ga_trainer.core

    def compile(self, optimizer: Any = "rmsprop", *args: Any, **kwargs: Any) -> None:
        optimizer = check_optimizer(optimizer, self.ga_accumulation.accum_steps)
        # One window per call of the train function (a value given is replaced).
        kwargs["steps_per_execution"] = self.ga_accumulation.accum_steps
        super().compile(optimizer, *args, **kwargs)  # type: ignore[misc]
        object.__setattr__(self, "_ga_trainer", None)

    def make_train_function(self, force: bool = False) -> Any:
        if self.train_function is not None and not force:
            return self.train_function
        trainer = self._ga_trainer
        if trainer is None:
            trainer = TFWindowTrainer(self, self.ga_accumulation)
            object.__setattr__(self, "_ga_trainer", trainer)
            # The core as a checkpoint dependency: model/ga_window_core/... (the layout of the
            # Keras 2 front-ends).
            setattr(self, CHECKPOINT_KEY, trainer.core)
        self.train_function = trainer.train_function
        return self.train_function

    def evaluate(self, *args: Any, **kwargs: Any) -> Any:
        if internals.called_by_fit(kwargs) and self._ga_trainer is not None:
            self._ga_trainer.end_pending_window()  # fit's validation: the epoch's data ended
        return super().evaluate(*args, **kwargs)  # type: ignore[misc]

    def fit(self, *args: Any, callbacks: Any = None, **kwargs: Any) -> Any:
        """Keras 3's ``fit``; callbacks with ``on_window_end(event)`` also get each window's
        :class:`~ga_tfx.window.WindowEnd` (its loss, norms, noise-scale estimates)."""
        callbacks = list(callbacks or [])
        listeners = [c for c in callbacks if hasattr(c, "on_window_end")]
        # Ahead of the user's: the short window ended (then its event sent) before they run.
        ours = [_EndOfEpoch(self)] + ([_WindowEvents(self, listeners)] if listeners else [])
        callbacks = ours + callbacks
        return super().fit(*args, callbacks=callbacks, **kwargs)  # type: ignore[misc]
