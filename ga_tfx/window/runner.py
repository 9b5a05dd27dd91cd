"""The traced window runner of ``fit`` and ``TrainingLoop``: how the window's pieces are traced
and the loops that feed micro-batches to them.

:class:`WindowRunner` is the one place where a front-end's window becomes traced code. It is
given the front-end's replica-context micro-batch step and its window end (the window core's
:meth:`~ga_tfx.window.WindowCore.finish` with the front-end's optimizer, plus what the
front-end counts) and makes, once each:

* :attr:`~WindowRunner.micro_batch` (cross-replica): one micro-batch on every replica
  (``strategy.run``; after an out-of-memory recovery, ``micro_batch_split`` slices of it,
  :meth:`~ga_tfx.window.WindowCore.run_micro_batch`), counted in the window;
* :attr:`~WindowRunner.finish` (cross-replica): the window's end;
* :attr:`~WindowRunner.end_of_data` (cross-replica): the data ended; the window clock ends
  the pending window by ``partial_window`` (:func:`ga_tfx.window.clock.end_of_data`);

and the loops around them, ``tf.while_loop`` written out (``parallel_iterations=1``: one
micro-batch's activations alive at a time), with no Python control flow on tensors:
:meth:`~WindowRunner.execution` (``fit``: a Keras execution of whole windows, micro-batches
from ``next(iterator)``) and :meth:`~WindowRunner.window` (``TrainingLoop``: up to ``take``
micro-batches from ``get_next_as_optional``, the data's end a loop condition). A window is
finished inside a loop only once it is known to be complete, so no update runs under a
data-dependent conditional in replica context.

Tracing (:meth:`~WindowRunner.trace`): the library's pieces and loops are traced without
autograph's conversion (it was about 40% of a small ``fit``'s start-up); the user's code they
call (the model's call, a loss, a ``train_step``, the optimizer, a transform) is converted
where it is called (``ga_tfx._tf_keras_internals.autograph_converted``). The exception is the
out-of-memory split's loop, Python control flow on tensors, converted whole. On one replica the
micro-batch step and the window end stay one function each in the graph (not inlined,
``ga_tfx._tf_keras_internals.not_inlined``): Grappler optimizes each once, not a copy per call
site. With ``eager`` (``run_eagerly``) nothing is traced.

The out-of-memory replay that retraces it is beside it (:mod:`ga_tfx.window.replay`).
"""

from ga_tfx import _tf_internals as internals
from ga_tfx._tf_internals import tf
from ga_tfx.window import clock
from ga_tfx.window.shims import xla_step

from typing import Any, Callable, Optional


class WindowRunner:
    """The traced pieces and loops of one front-end's windows.

    Args:
      core: the :class:`~ga_tfx.window.WindowCore` the windows are of.
      strategy: the ``tf.distribute`` strategy the steps run in.
      step: replica context, ``step(micro_batch) -> outputs``: forward, loss, backward, the
        gradient added to the core (:meth:`~ga_tfx.window.WindowCore.add`). XLA-compiled
        under ``jit_compile``.
      finish: cross-replica context, ``finish() -> bool tensor``: ends a complete window
        through the core (one update or a skip), and whatever the front-end counts with it.
      logs: cross-replica context, ``logs(outputs) -> logs``: the step's per-replica outputs
        reduced to what the loops carry (default: the strategy's local results).
      eager: run every piece eagerly, trace nothing (``run_eagerly``). Default ``False``.
      jit_compile: compile ``step`` with XLA (the core's window end compiles its own).
        Default ``False``.

    The pieces are made once, at construction; a front-end that recovered from an out-of-memory
    error calls :meth:`follow_split` (``TrainingLoop``) or makes a new runner (``fit``'s new
    train function) to trace the split micro-batch.
    """

    def __init__(
        self,
        core: Any,
        strategy: Any,
        step: Callable[[Any], Any],
        finish: Callable[[], Any],
        logs: Optional[Callable[[Any], Any]] = None,
        eager: bool = False,
        jit_compile: bool = False,
    ) -> None:
        self.core = core
        self.strategy = strategy
        self._eager = eager
        self._jit_compile = jit_compile
        self._step = xla_step(step) if jit_compile else step
        self._finish_window = finish
        self._logs = logs or strategy.experimental_local_results
        self.split = False
        self._make_pieces()

    # ------------------------------------------------------------------ tracing
    def trace(self, function: Callable, autograph: bool = False, inline: bool = True) -> Callable:
        """``function`` as a ``tf.function`` (as it is with ``eager``), without autograph's
        conversion unless ``autograph``.

        ``inline=False``: a piece called at several sites (the micro-batch's step, the window's
        end) stays one function in the graph, which TensorFlow's graph optimizer (Grappler)
        optimizes once, where inlined it optimizes a copy per call site. Measured on the main
        job's Trainer: the first call's time beyond its trace went from 0.94-1.47 s to
        0.64-0.73 s; the later calls' time did not change. On one replica only: on several,
        such a function spans their devices, and an out-of-memory error on one of them reached
        the front-end as the other's cancellation (``CancelledError``), which the
        out-of-memory recovery cannot tell from any other (tests/test_oom_recovery.py).
        """
        if self._eager:
            return function
        inline = inline or self.strategy.num_replicas_in_sync > 1
        attributes = None if inline else internals.not_inlined()
        return tf.function(
            function,
            reduce_retracing=True,
            autograph=autograph,
            experimental_attributes=attributes,
        )

    def _make_pieces(self) -> None:
        """Traces the pieces (see the module docstring) for the core's micro-batch split."""
        self.split = self._split_now()
        self.micro_batch = self.trace(self._run_micro_batch, autograph=self.split, inline=False)
        self.finish = self.trace(self._finish_window, inline=False)
        self.end_of_data = self.trace(self._end_of_data)
        self.window = self.trace(self._window)

    def follow_split(self) -> None:
        """Traces the pieces again if the core's micro-batch split changed since they were
        traced (an out-of-memory recovery, or one restored from a checkpoint)."""
        if self._split_now() != self.split:
            self._make_pieces()

    def _split_now(self) -> bool:
        """Whether the micro-batch step runs as slices: after an out-of-memory recovery the
        core trains each micro-batch as ``micro_batch_split`` slices. That loop is traced only
        then, converted whole, never under XLA (its computations want static shapes)."""
        core = self.core
        return bool(core.accumulation.oom_recovery and not self._jit_compile) and (
            core.micro_batch_split > 1
        )

    # ------------------------------------------------------------------ host side
    def pending(self) -> int:
        """Micro-batches accumulated and not yet ended (host integer)."""
        return int(self.core.micro_steps.numpy())

    def end_pending_window(self, policy: Optional[str] = None) -> bool:
        """Host side, after the data ended (or a call of whole windows): a complete pending
        window is finished; a short one is ended by the clock by ``policy`` (``None``: the
        config's ``partial_window``): finished (``"apply"``; a flush), discarded (``"drop"``)
        or kept (``"carry"``). Returns whether a window ended (finished, skipped or discarded;
        ``False``: none was pending, or a short one is carried). Two host reads: the pending
        count and, with one pending, whether it is complete."""
        pending = self.pending()
        if pending == 0:
            return False
        if clock.is_complete(self.core, pending):
            self.finish()
            return True
        self.end_of_data(policy)
        return clock.ends_short_window(self.core, policy)

    # ------------------------------------------------------------------ traced pieces
    def _run_micro_batch(self, data: Any) -> Any:
        """Cross-replica: one micro-batch on every replica, then counts it in the window;
        returns its logs."""
        strategy = self.strategy
        if self.split:  # micro_batch_split slices of it (out-of-memory recovery)
            outputs = self.core.run_micro_batch(strategy, self._step, data)
        else:
            outputs = strategy.run(self._step, args=(data,))
        logs = self._logs(outputs)
        with tf.control_dependencies(tf.nest.flatten(logs)):
            clock.count(self.core)
        return logs

    def _end_of_data(self, policy: Optional[str] = None) -> Any:
        """Cross-replica: the data ended inside a window; the clock ends it by ``policy``.
        The window end's code goes into the clock's ``tf.cond``, not its traced function
        (:attr:`finish`), as in :meth:`_window`: under MultiWorkerMirroredStrategy a traced
        function called in a ``tf.cond`` branch left a captured input unfed ("You must feed a
        value for placeholder ... cond/then", tests/test_training_loop_multi_worker.py, whose
        data ends inside a short window)."""
        return clock.end_of_data(self.core, self.strategy, self._finish_window, policy)

    def fill(self, iterator: Any, count: Any, logs: Any) -> Any:
        """Cross-replica: ``count`` more micro-batches (``next(iterator)``: the data's end
        raises) into the window; returns the last one's logs (``logs`` when ``count`` is 0)."""

        def more(filled: Any, logs: Any) -> Any:
            return filled + 1, self.micro_batch(next(iterator))

        _, logs = tf.while_loop(
            lambda filled, _: filled < count,
            more,
            (tf.zeros_like(count), logs),
            parallel_iterations=1,
        )
        return logs

    def execution(self, iterator: Any, steps: Any, finish_last: bool) -> Any:
        """Cross-replica: one execution of ``steps`` (int64 tensor) micro-batches.

        Completes the pending window, then finishes each window that is complete while the
        execution has micro-batches left for the next one. The execution's last window
        (complete or not) is finished with ``finish_last`` (a Python bool), else left pending.
        Returns the logs of the last micro-batch.
        """
        window = self.core.state.current_accum_steps.read_value()  # K: a schedule may change it
        # The first micro-batch outside the loops: an exhausted iterator ends the epoch here,
        # and the logs have their structure before the loops carry them.
        logs = self.micro_batch(next(iterator))
        done = tf.constant(1, tf.int64)
        count = tf.minimum(window - self.core.micro_steps.read_value(), steps - done)
        logs = self.fill(iterator, count, logs)
        done += count

        # Here the window is complete unless the execution is used up (count was capped).
        def next_window(done: Any, logs: Any) -> Any:
            with tf.control_dependencies(tf.nest.flatten(logs)):
                self.finish()
            count = tf.minimum(window, steps - done)
            return done + count, self.fill(iterator, count, logs)

        _, logs = tf.while_loop(
            lambda done, _: done < steps, next_window, (done, logs), parallel_iterations=1
        )
        if finish_last:
            with tf.control_dependencies(tf.nest.flatten(logs)):
                self.finish()
        return logs

    def _window(self, iterator: Any, take: Any, finish: bool) -> Any:
        """Cross-replica: up to ``take`` (int64 tensor) micro-batches from the distributed
        ``iterator`` (``get_next_as_optional``: the data's end stops the loop); with
        ``finish`` (a Python bool) the window is finished when it is complete (a short one,
        the data ended, is :meth:`end_pending_window`'s). Returns the micro-batches taken."""

        def more(taken: Any, _: Any) -> Any:
            optional = iterator.get_next_as_optional()
            found = optional.has_value()
            taken = tf.cond(found, lambda: self._taken(taken, optional.get_value()), lambda: taken)
            return taken, found

        taken, _ = tf.while_loop(
            lambda taken, found: tf.logical_and(found, taken < take),
            more,
            (tf.constant(0, tf.int64), tf.constant(True)),
            parallel_iterations=1,
        )
        if finish:
            with tf.control_dependencies([taken]):
                complete = clock.is_complete(self.core, self.core.micro_steps.read_value())
                # The window end's code itself in the branch, not its traced function: under
                # MultiWorkerMirroredStrategy a traced function called in a tf.cond branch left
                # a captured input unfed ("You must feed a value for placeholder ... cond/then",
                # tests/test_training_loop_multi_worker.py).
                tf.cond(complete, self._finish_window, lambda: tf.constant(False))
        return taken

    def _taken(self, taken: Any, data: Any) -> Any:
        logs = self.micro_batch(data)
        with tf.control_dependencies(tf.nest.flatten(logs)):
            return taken + 1
