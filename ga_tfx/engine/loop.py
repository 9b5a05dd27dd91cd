"""The loop: how the step functions run, whole windows per call of the train function.

The engine's counterpart of Keras' ``make_train_function``. :class:`WindowLoop` is the train
function of an accumulation model: Keras' data handler calls it once per execution of
``steps_per_execution`` micro-batches: ``K`` (one window, the default) or ``m·K`` (``m``
windows). Its traced pieces and loops are the window runner's, shared with ``TrainingLoop``
(:class:`~ga_tfx.window.runner.WindowRunner`: the written-out ``tf.while_loop``, traced
without autograph's conversion, the micro-batch step and the window end not inlined, the
out-of-memory split, the end of the data by the policy). Per call it

* runs the runner's execution: completes the window in progress (``K - pending``
  micro-batches, usually ``K``), then, while the execution has micro-batches left, finishes
  that window and fills the next one, every micro-batch from ``next(iterator)`` through
  :meth:`~ga_tfx.engine.step.WindowStep._accumulate_micro_batch` under ``strategy.run``, its
  logs reduced as Keras reduces them;
* ends the execution's last window: under ``partial_window="apply"`` it is finished in the
  same traced function; under ``"drop"`` and ``"carry"`` its size is read on the host, a full
  window is finished and a short one is the window clock's
  (:func:`~ga_tfx.window.clock.end_of_data`: discarded, or kept pending);
* counts every finished window in Keras' train counter;
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
from ga_tfx.window import WindowEnd
from ga_tfx.window.runner import WindowRunner

import contextlib
import math
import time
from typing import Any, Callable, Iterator, List, Optional, Sequence


class WindowLoop:
    """The train function of an accumulation model (``model.train_function``).

    Args:
      model: a built, compiled :class:`~ga_tfx.engine.AccumulationEngine` model whose
        window core exists.
      step: replica context, ``step(micro_batch) -> logs``: the model's micro-batch step
        (forward, loss, backward, the gradient added to the core).
      figures: the model's :class:`WindowFigures` (``grad_norm``, ``noise_scale`` in the logs).
      execution_steps: the compiled ``steps_per_execution``, in micro-batches (whole windows).
      scheduled: whether ``accum_steps`` is a schedule (every call is then one window of the K
        the core holds).

    Calling it with the data iterator runs one execution of whole windows and returns the logs
    of its last micro-batch (Keras' ``train_function`` contract). :meth:`flush` finishes a
    pending window. Its traced pieces and loops are the window runner's
    (:class:`~ga_tfx.window.runner.WindowRunner`); what is Keras' is here: the model's
    ``steps_per_execution`` (written only by :meth:`set_steps_per_execution`), the logs'
    reduction, Keras' train counter, pacing.

    Attributes:
      listeners: objects with ``on_window_end(event)``, called after each call for each
        window it finished (set by ``fit`` for its length).
    """

    def __init__(
        self,
        model: Any,
        step: Callable[[Any], Any],
        figures: "WindowFigures",
        execution_steps: int,
        scheduled: bool,
    ) -> None:
        self._model = model
        self._figures = figures
        self._execution_steps = execution_steps
        self._scheduled = scheduled
        # How a call's last window ends: by the policy, or "apply" inside one_window_per_call.
        self._policy = model.partial_window
        self._ending = self._policy
        strategy = model.distribute_strategy
        self.runner = WindowRunner(
            model.window_core,
            strategy,
            step,
            self._finish_window,
            logs=lambda outputs: internals.reduce_per_replica(
                outputs, strategy, model.distribute_reduction_method
            ),
            eager=bool(model.run_eagerly),
            jit_compile=bool(model.jit_compile),
        )
        # The execution's loops are tf.while_loop written out, traced without autograph's
        # conversion (0.2 s of the main job's Trainer start-up converted them); under
        # "apply" the execution's last window is finished in the same traced function.
        self._run_execution = self.runner.trace(self._train_execution)
        # Set for the length of a fit by CallPacing: the windows of each call follow its pace.
        self.pacer: Optional[CallPacer] = None
        self.listeners: Sequence[Any] = ()
        if not model.run_eagerly:
            internals.set_train_tf_function(model, self._run_execution)

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
            self._end_pending_window()
            raise
        if self._policy != "apply":
            self._end_pending_window()
        self.follow_schedule()
        if pacer is not None:
            # Whole windows; a window "carry" leaves pending at an epoch end is completed
            # first anyway: CarryAlignment sets the epoch's first execution after this. K is
            # the model's: fit paces only without a schedule. (steps is read, not the value
            # last set here: Keras' data handler shortens an epoch's last execution.)
            k = model.accum_steps
            windows = pacer.next_windows(time.perf_counter() - started, steps / k)
            self.set_steps_per_execution(windows * k)
        return self._dispatch_window_ends(logs)

    def steps_per_call(self) -> int:
        """Micro-batches per call of the train function: the compiled ``steps_per_execution``,
        or with a schedule one window of the current K."""
        if self._scheduled:
            return self._model.window_core.current_accum_steps
        return self._execution_steps

    def set_steps_per_execution(self, steps: Optional[int] = None) -> None:
        """The micro-batches Keras hands the next call (host side; ``None``:
        :meth:`steps_per_call`). The one place that writes the model's
        ``steps_per_execution``."""
        internals.set_steps_per_execution(
            self._model, self.steps_per_call() if steps is None else steps
        )

    def follow_schedule(self) -> None:
        """With an ``accum_steps`` schedule, the next call is the rest of one window of the K the
        core holds now (chosen at the last window end, or restored from a checkpoint)."""
        if self._scheduled:
            self.set_steps_per_execution(self.steps_per_call() - self.pending())

    def _dispatch_window_ends(self, logs: Any) -> Any:
        """Host side, after a call: the events of its windows go to the listeners; the logs
        get ``grad_norm`` (the epoch's mean so far) and ``noise_scale`` (the latest)."""
        core = self._model.window_core
        events = core.poll()
        for event in events:
            for listener in (self._figures, *self.listeners):
                listener.on_window_end(event)
        core.check_skips()
        return self._figures.logs(logs)

    @contextlib.contextmanager
    def one_window_per_call(self) -> Iterator[None]:
        """Within it, each call is one micro-batch, one whole window, finished whatever the
        policy (``train_on_batch``: its batch is one window)."""
        previous, self._ending = self._ending, "apply"
        self.set_steps_per_execution(1)
        try:
            yield
        finally:
            self._ending = previous
            self.set_steps_per_execution()

    def _end_pending_window(self) -> None:
        """Host side, after an execution: a full pending window is finished; a short one is
        ended by the clock by the policy (:meth:`WindowRunner.end_pending_window
        <ga_tfx.window.runner.WindowRunner.end_pending_window>`): finished (``"apply"``; the
        traced function has already done so unless the data ended), discarded (``"drop"``)
        or kept (``"carry"``; CarryAlignment realigns the next epoch). Once a window ended
        (applied, skipped or dropped; not carried), the next execution is whole windows
        again."""
        if self.runner.end_pending_window(self._ending):
            self.set_steps_per_execution()

    def stop_pacing(self) -> None:
        """Back to the compiled windows per call (the end of a paced ``fit``)."""
        if self.pacer is not None:
            self.pacer = None
            self.set_steps_per_execution()

    def pending(self) -> int:
        """Micro-batches accumulated and not yet applied (host integer)."""
        return self.runner.pending()

    def flush(self) -> None:
        """Finishes the pending window now, whatever the policy (no-op when there is none)."""
        if self.runner.end_pending_window("apply"):
            self._dispatch_window_ends({})

    # ------------------------------------------------------------------ traced pieces
    def _train_execution(self, iterator: Any) -> Any:
        """Cross-replica: one execution of ``steps_per_execution`` micro-batches (the
        runner's :meth:`~ga_tfx.window.runner.WindowRunner.execution`), its last window
        finished under ``partial_window="apply"``, else left pending."""
        steps = tf.cast(internals.steps_per_execution(self._model), tf.int64)
        return self.runner.execution(iterator, steps, finish_last=self._policy == "apply")

    def _finish_window(self) -> tf.Tensor:
        """Cross-replica: the window core ends the window (an update, or a skip); Keras'
        train counter counts it. Returns whether it was applied."""
        model = self._model
        applied = model.window_core.finish(
            model.distribute_strategy, model.optimizer, jit_compile=bool(model.jit_compile)
        )
        internals.count_train_step(model)
        return applied


class CarryAlignment(keras.callbacks.Callback):
    """``partial_window="carry"``: the first execution of an epoch completes the pending window.

    At ``on_epoch_begin`` it sets ``steps_per_execution`` to ``K - pending`` (Keras' data handler
    reads it for the next execution); the train function sets it back to the compiled value
    once the window is applied. A window still pending when ``fit`` ends is applied then.
    """

    def __init__(self, model: Any) -> None:
        super().__init__()
        self._ga_model = model

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        loop = self._ga_model.train_function
        if isinstance(loop, WindowLoop):
            pending = loop.pending()
            loop.set_steps_per_execution(
                self._ga_model.window_core.current_accum_steps - pending if pending else None
            )

    def on_train_end(self, logs: Any = None) -> None:
        loop = self._ga_model.train_function
        if isinstance(loop, WindowLoop):
            loop.flush()
            loop.set_steps_per_execution()


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
