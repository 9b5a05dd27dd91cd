"""The loop: how the step functions run, whole windows per call of the train function.

The engine's counterpart of Keras' ``make_train_function``. :class:`WindowLoop` is the train
function of an accumulation model: Keras' data handler calls it once per execution of
``steps_per_execution`` micro-batches: ``K`` (one window, the default) or ``m·K`` (``m``
windows). Per call it

* completes the window in progress (``K - pending`` micro-batches, usually ``K``), then, while
  the execution has micro-batches left, applies that window and fills the next one; every
  micro-batch comes from ``next(iterator)`` in ``tf.range`` loops (``parallel_iterations=1``:
  one micro-batch's activations alive at a time) and runs
  :meth:`~ga_tfx.engine.step.WindowStep._accumulate_micro_batch` under ``strategy.run``; a
  window is applied inside the loop only once it is known to be complete, so no update ever
  runs under a data-dependent conditional;
* ends the execution's last window: under ``partial_window="apply"`` it is applied in the
  same traced function; under ``"drop"`` and ``"carry"`` its size is read on the host, a full
  window is applied and a short one is the window clock's
  (:func:`~ga_tfx.window.clock.end_of_data`: discarded, or kept pending);
* ends every window through the window core (:meth:`~ga_tfx.window.WindowCore.finish`: one
  all-reduce, the gradient chain, one update or a skip) and counts it in Keras' train
  counter;
* after the call, hands each window's :class:`~ga_tfx.window.WindowEnd` event to the
  callbacks of the ``fit`` that implement ``on_window_end(event)`` (checkpoints, logs, the
  ``grad_norm`` and ``noise_scale`` logs), and stops the run with
  :class:`~ga_tfx.window.NonFiniteGradientError` after ``max_consecutive_skips`` skipped
  windows in a row.

Data that ends inside an execution (``steps_per_epoch`` larger than the data) raises from
``next`` as in Keras; the micro-batches before it are in the buffers and counted, and the call
ends their window by the policy (applied, dropped, or kept for the next ``fit``) before the
error reaches Keras, which ends the epoch.

As Keras' ``make_train_function`` does for ``train_step``: with ``run_eagerly`` nothing is
traced (every micro-batch runs eagerly, ``print``/``pdb`` work in layers); with ``jit_compile``
the per-micro-batch step and the per-window update are each compiled with XLA (an op XLA cannot
compile fails as it does in plain Keras), while the loop around them stays a ``tf.function``.

:class:`CarryAlignment` is the callback that makes ``"carry"`` complete a pending window with
the first micro-batches of the next epoch; :class:`CallPacing` the one that, where
:mod:`ga_tfx.engine.pacing` allows, lets each call run as many windows as take about 0.2 s.
"""

from ga_tfx import _tf_keras_internals as internals
from ga_tfx._keras import keras, tf
from ga_tfx.engine.pacing import CallPacer
from ga_tfx.window import WindowEnd, clock, xla_step

import contextlib
import math
import time
from typing import Any, Callable, Iterator, List, Optional, Sequence


class WindowLoop:
    """The train function of an accumulation model (``model.train_function``).

    Args:
      model: a built, compiled :class:`~ga_tfx.engine.AccumulationEngine` model whose
        gradient accumulator exists.

    Calling it with the data iterator runs one window and returns the logs of its last
    micro-batch (Keras' ``train_function`` contract). :meth:`flush` applies a pending window.

    Attributes:
      listeners: objects with ``on_window_end(event)``, called after each call for each
        window it finished (set by ``fit`` for its length).
    """

    def __init__(self, model: Any) -> None:
        self._model = model
        self._policy = model.partial_window
        # What runs in replica context, once per micro-batch / once per window. Under
        # jit_compile each is one XLA computation, as Keras compiles its train_step.
        # How a call's last window ends: by the policy, or "apply" inside one_window_per_call.
        self._ending = self._policy
        self._micro_batch_step = self._xla(model._accumulate_micro_batch)
        # After an out-of-memory recovery the core trains each micro-batch as slices
        # (ga_tfx.window): that loop is traced only then (the train function is made again),
        # never under XLA, whose computations want static shapes.
        self._split = (
            model.accumulation.oom_recovery
            and not model.jit_compile
            and model.window_core.micro_batch_split > 1
        )
        # The execution's loops are tf.while_loop written out, traced without autograph's
        # conversion (0.2 s of the main job's Trainer start-up converted them).
        if self._policy == "apply":
            self._run_execution = self._trace(self._train_execution_and_apply, autograph=False)
        else:
            self._run_execution = self._trace(self._train_execution, autograph=False)
        # Traced once each and called as functions wherever an execution needs them (its
        # first micro-batch, the loops, the window ends), not traced again at each call site:
        # a trace of the model's step and of the window's end is most of a fit's start-up.
        # The micro-batch's step too is the library's code traced as it is; the user's code in
        # it (the model's call, a train_step, compute_loss or compute_metrics of the user's) is
        # converted where WindowStep calls it. The split's loop (out-of-memory recovery) is
        # Python control flow on tensors: converted whole, as before. Measured on the main
        # job's Trainer: the conversions of the library's micro-batch code (with
        # AccumBatchNormalization's) were 0.7 s of its 6 s.
        self._micro_batch = self._trace(self._run_micro_batch, autograph=self._split, inline=False)
        # The window's end is the window core's code, written without Python control flow on
        # tensors: traced as it is, not converted by autograph, whose conversion of it took
        # about 40% of a small fit's start-up (4.5 s -> 2.7 s). The user code it runs (the
        # optimizer, a transform, a window layer) is converted where it is called
        # (ga_tfx._tf_keras_internals.autograph_converted), as a tf.function would.
        self._finish = self._trace(self._finish_window, autograph=False, inline=False)
        self._end_of_data = self._trace(self._end_short_window, autograph=False)
        # Set for the length of a fit by CallPacing: the windows of each call follow its pace.
        self.pacer: Optional[CallPacer] = None
        self.listeners: Sequence[Any] = ()
        if not model.run_eagerly:
            internals.set_train_tf_function(model, self._run_execution)

    def _trace(self, function: Callable, autograph: bool = True, inline: bool = True) -> Callable:
        """The host-side pieces: traced, unless the model runs eagerly (``run_eagerly``).

        ``inline=False``: a piece called at several sites of an execution (the micro-batch's
        step, the window's end) stays one function in the graph, which TensorFlow's graph
        optimizer (Grappler) optimizes once, where inlined it optimizes a copy per call site.
        Measured on the main job's Trainer: the first call's time beyond its trace went from
        0.94-1.47 s to 0.64-0.73 s; the later calls' time did not change. On one replica
        only: on several, such a function spans their devices, and an out-of-memory error on
        one of them reached fit as the other's cancellation (``CancelledError``), which the
        out-of-memory recovery cannot tell from any other (tests/test_oom_recovery.py).
        """
        if self._model.run_eagerly:
            return function
        inline = inline or self._model.distribute_strategy.num_replicas_in_sync > 1
        attributes = None if inline else {"_noinline": True}
        return tf.function(
            function,
            reduce_retracing=True,
            autograph=autograph,
            experimental_attributes=attributes,
        )

    def _xla(self, function: Callable) -> Callable:
        """A replica-context step: XLA-compiled under the model's ``jit_compile``."""
        return xla_step(function) if self._model.jit_compile else function

    def __call__(self, iterator: Any) -> Any:
        model = self._model
        pacer = self.pacer
        if pacer is not None:
            steps = int(internals.steps_per_execution(model).numpy())
            started = time.perf_counter()
        try:
            logs = self._run_execution(iterator)
        except (StopIteration, tf.errors.OutOfRangeError):
            # The data ended inside this execution: its last window is the epoch's last.
            self._end_last_window()
            raise
        if self._policy != "apply":
            self._end_last_window()
        self.follow_schedule()
        if pacer is not None:
            # Whole windows; a window "carry" leaves pending at an epoch end is completed
            # first anyway: CarryAlignment sets the epoch's first execution after this.
            k = model.window_core.current_accum_steps
            windows = pacer.next_windows(time.perf_counter() - started, steps / k)
            internals.set_steps_per_execution(model, windows * k)
        return self._window_ends(logs)

    def follow_schedule(self) -> None:
        """With an ``accum_steps`` schedule, the next call is the rest of one window of the K the
        core holds now (chosen at the last window end, or restored from a checkpoint)."""
        model = self._model
        if model._scheduled():
            internals.set_steps_per_execution(model, model._steps_per_call() - self.pending())

    def _window_ends(self, logs: Any) -> Any:
        """Host side, after a call: the events of its windows go to the listeners; the logs
        get ``grad_norm`` (the epoch's mean so far) and ``noise_scale`` (the latest)."""
        model = self._model
        core = model.window_core
        events = core.poll()
        for event in events:
            for listener in (model._figures, *self.listeners):
                listener.on_window_end(event)
        core.check_skips()
        return model._figures.logs(logs)

    @contextlib.contextmanager
    def one_window_per_call(self) -> Iterator[None]:
        """Within it, each call's micro-batches are one whole window, applied whatever the
        policy (``train_on_batch``: its batch is one update)."""
        previous, self._ending = self._ending, "apply"
        try:
            yield
        finally:
            self._ending = previous

    def _end_last_window(self) -> None:
        """Host side, after an execution: a full pending window is applied; a short one is
        ended by the clock (:func:`ga_tfx.window.clock.end_of_data`) by the policy: applied
        (``"apply"``; the traced function has already done so unless the data ended),
        discarded (``"drop"``) or kept (``"carry"``; CarryAlignment realigns the next epoch).
        Once a window ended, the next execution is whole windows again."""
        model = self._model
        pending = self.pending()
        if pending == 0:
            return
        if clock.is_complete(model.window_core, pending):
            self._finish()
        else:
            self._end_of_data(self._ending)
        if self.pending() == 0:  # ended: applied, skipped or dropped (not carried)
            internals.set_steps_per_execution(model, model._steps_per_call())

    def stop_pacing(self) -> None:
        """Back to the compiled windows per call (the end of a paced ``fit``)."""
        if self.pacer is not None:
            self.pacer = None
            internals.set_steps_per_execution(self._model, self._model._steps_per_call())

    def pending(self) -> int:
        """Micro-batches accumulated and not yet applied (host integer)."""
        return int(self._model.window_core.micro_steps.numpy())

    def flush(self) -> None:
        """Applies the pending window now (no-op when there is none)."""
        if self.pending() > 0:
            self._finish()
            self._window_ends({})

    # ------------------------------------------------------------------ traced pieces
    def _run_micro_batch(self, data: Any) -> Any:
        """Cross-replica: one micro-batch on every replica, then counts it in the window."""
        model = self._model
        strategy = model.distribute_strategy
        if self._split:  # micro_batch_split slices of it (out-of-memory recovery)
            outputs = model.window_core.run_micro_batch(strategy, self._micro_batch_step, data)
        else:
            outputs = strategy.run(self._micro_batch_step, args=(data,))
        logs = internals.reduce_per_replica(outputs, strategy, model.distribute_reduction_method)
        with tf.control_dependencies(tf.nest.flatten(logs)):
            clock.count(model.window_core)
        return logs

    def _fill(self, iterator: Any, count: Any, logs: Any) -> Any:
        """Cross-replica: ``count`` more micro-batches into the window; the last one's logs."""

        def more(filled: Any, logs: Any) -> Any:
            return filled + 1, self._micro_batch(next(iterator))

        _, logs = tf.while_loop(
            lambda filled, _: filled < count,
            more,
            (tf.zeros_like(count), logs),
            parallel_iterations=1,
        )
        return logs

    def _train_execution(self, iterator: Any) -> Any:
        """Cross-replica: one execution of ``steps_per_execution`` micro-batches.

        Completes the pending window, then applies each window that is complete while the
        execution has micro-batches left for the next one. Leaves the execution's last window
        (complete or not) pending. Returns the logs of the last micro-batch.
        """
        model = self._model
        steps = model.window_core.micro_steps
        window = model.window_core.state.accum_steps.read_value()  # K: a schedule may change it
        execution = tf.cast(internals.steps_per_execution(model), tf.int64)
        # The first micro-batch outside the loops: an exhausted iterator ends the epoch here,
        # and the logs have their structure before the loops carry them.
        logs = self._micro_batch(next(iterator))
        done = tf.constant(1, tf.int64)
        count = tf.minimum(window - steps.read_value(), execution - done)
        logs = self._fill(iterator, count, logs)
        done += count

        # Here the window is complete unless the execution is used up (count was capped).
        def next_window(done: Any, logs: Any) -> Any:
            with tf.control_dependencies(tf.nest.flatten(logs)):
                self._finish()
            count = tf.minimum(window, execution - done)
            return done + count, self._fill(iterator, count, logs)

        _, logs = tf.while_loop(
            lambda done, _: done < execution, next_window, (done, logs), parallel_iterations=1
        )
        return logs

    def _finish_window(self) -> tf.Tensor:
        """Cross-replica: the window core ends the window (an update, or a skip); Keras'
        train counter counts it. Returns whether it was applied."""
        model = self._model
        applied = model.window_core.finish(
            model.distribute_strategy, model.optimizer, jit_compile=bool(model.jit_compile)
        )
        internals.count_train_step(model)
        return applied

    def _train_execution_and_apply(self, iterator: Any) -> Any:
        logs = self._train_execution(iterator)
        with tf.control_dependencies(tf.nest.flatten(logs)):
            self._finish()
        return logs

    def _end_short_window(self, policy: str) -> Any:
        """Cross-replica: the data ended inside a window; the clock ends it by ``policy``."""
        model = self._model
        return clock.end_of_data(model.window_core, model.distribute_strategy, self._finish, policy)


class CarryAlignment(keras.callbacks.Callback):
    """``partial_window="carry"``: the first execution of an epoch completes the pending window.

    At ``on_epoch_begin`` it sets ``steps_per_execution`` to ``K - pending`` (Keras' data handler
    reads it for the next execution); the train function sets it back to the compiled value
    once the window is applied. A window still pending when ``fit`` ends is applied then.
    """

    def __init__(self, model: Any) -> None:
        super().__init__()
        self._ga_model = model

    def _pending(self) -> int:
        core = self._ga_model.window_core
        return 0 if core is None else int(core.micro_steps.numpy())

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        model = self._ga_model
        pending = self._pending()
        internals.set_steps_per_execution(
            model,
            model.window_core.current_accum_steps - pending if pending else model._steps_per_call(),
        )

    def on_train_end(self, logs: Any = None) -> None:
        model = self._ga_model
        if isinstance(model.train_function, WindowLoop):
            model.train_function.flush()
        internals.set_steps_per_execution(model, model._steps_per_call())


class CallPacing(keras.callbacks.Callback):
    """For one ``fit``: each call of the train function runs as many whole windows as took
    :data:`~ga_tfx.engine.pacing.CALL_SECONDS` on the previous call (see
    :mod:`ga_tfx.engine.pacing` for when ``fit`` adds it). The train function exists from
    ``on_train_begin`` on; ``fit`` ends the pacing (:meth:`WindowLoop.stop_pacing`) however it
    ends."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self._ga_model = model

    def on_train_begin(self, logs: Any = None) -> None:
        loop = self._ga_model.train_function
        if isinstance(loop, WindowLoop):
            loop.pacer = CallPacer()


class WindowFigures:
    """The figures ``fit`` adds to its logs, from the window events (host side).

    ``grad_norm`` (``log_grad_norm``): the mean, over the epoch's applied updates so far, of
    each update's global gradient norm (before the chain), as Keras averages ``loss``; a
    window skipped as non-finite is left out. ``noise_scale`` (``log_noise_scale``): the
    latest smoothed estimate ``B_simple`` (:mod:`ga_tfx.window`), with ``noise_trace`` and
    ``noise_grad_sq``, the moving averages it is the ratio of.
    """

    def __init__(self, log_grad_norm: bool, log_noise_scale: bool) -> None:
        self._grad_norm = log_grad_norm
        self._noise = log_noise_scale
        self._norms: List[float] = []
        self._latest: Optional[WindowEnd] = None

    def result(self) -> float:
        """The epoch's mean ``grad_norm`` so far (0.0 before the first update)."""
        return float(sum(self._norms) / len(self._norms)) if self._norms else 0.0

    def reset_state(self) -> None:
        self._norms = []

    def on_window_end(self, event: WindowEnd) -> None:
        if event.applied and math.isfinite(event.grad_norm):
            self._norms.append(event.grad_norm)
        if not math.isnan(event.noise_scale):
            self._latest = event

    def logs(self, logs: Any) -> Any:
        extra = {}
        if self._grad_norm:
            extra["grad_norm"] = self.result()
        if self._noise and self._latest is not None:
            latest = self._latest
            extra.update(
                noise_scale=latest.noise_scale,
                noise_trace=latest.noise_trace,
                noise_grad_sq=latest.noise_grad_sq,
            )
        return dict(logs, **extra) if extra else logs
