"""The window core: :class:`WindowCore` (see :mod:`ga_tfx.window`)."""

from ga_tfx import _tf_keras_internals as internals
from ga_tfx._keras import tf
from ga_tfx._state import Untracked
from ga_tfx.accumulator import GradientAccumulator
from ga_tfx.config import AccumulationConfig
from ga_tfx.transforms import GradientChain, Member, NonFiniteGuard, chain_for, global_norm
from ga_tfx.window.events import RECORD_CAPACITY, NonFiniteGradientError, WindowEnd
from ga_tfx.window.noise import _noise_estimates, _squared_norm
from ga_tfx.window.schedule import ADAPTIVE_PATIENCE, ADAPTIVE_WARMUP, _learning_rate_value
from ga_tfx.window.shims import (
    _as_dependencies,
    all_finite,
    apply_aggregated_gradients,
    skips_nonfinite_itself,
    xla_step,
)
from ga_tfx.window.split import MAX_SPLIT, _rows, batch_size
from ga_tfx.window.state import _ON_READ, WindowState

import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, cast

_SUM = tf.VariableAggregation.SUM


class WindowCore(tf.Module):
    """The accumulation state and the steps of one window (see the module docstring).

    Args:
      variables: the trainable variables whose gradients are accumulated (fully defined
        shapes). Create the core under the strategy's scope, outside ``tf.function``.
      config: the :class:`~ga_tfx.AccumulationConfig` (accumulation, chain, logging).
      transforms: further gradient transforms, run after the config's members
        (:class:`~ga_tfx.transforms.GradientTransform` or ``(name, callable)`` pairs).
      window_layers: layers that keep window state (``ga_window_end(apply)``, e.g.
        :class:`~ga_tfx.AccumBatchNormalization`); attached to the core's windows here.
      state: the counters' module (default a new :class:`WindowState`).

    Attributes (checkpoint children): ``accumulator``, ``chain``, ``state``, ``noise_sums``
    (the window's replica-local noise-scale sums).
    """

    def __init__(
        self,
        variables: Sequence[tf.Variable],
        config: AccumulationConfig,
        transforms: Sequence[Member] = (),
        window_layers: Sequence[Any] = (),
        state: Optional[WindowState] = None,
        name: str = "window_core",
    ) -> None:
        super().__init__(name=name)
        variables = list(variables)
        self._config = Untracked(config)
        self.chain: GradientChain = chain_for(config, transforms)
        self.chain.build(variables)  # unsupported variables fail here, not while tracing
        self.accumulator = GradientAccumulator(variables)
        self.state = state if state is not None else WindowState()
        with tf.init_scope():  # once, also when the core is made while a function is traced
            self.state.accum_steps.assign(config.accum_steps)  # a restore overrides it
        with tf.init_scope(), tf.name_scope(name):
            # Replica-local window sums of the noise scale's micro-batch terms: Σ b·|ĝ|², Σ b.
            self.noise_sums = [
                tf.Variable(
                    0.0, trainable=False, synchronization=_ON_READ, aggregation=_SUM, name=n
                )
                for n in ("noise_sq_sum", "noise_samples")
            ]
        self._layers = Untracked(list(window_layers))
        for layer in window_layers:
            if hasattr(layer, "ga_attach_to_engine"):
                layer.ga_attach_to_engine(config.accum_steps)
        # Python state, not checkpoint dependencies: the replica steps per (optimizer,
        # jit_compile, extra gradient), and the variables the chain returned (trace time).
        self._steps = Untracked({})
        self._applied_variables = Untracked([])
        self._events_seen = 0  # host: records returned by poll() so far

    # ------------------------------------------------------------------ properties
    @property
    def config(self) -> AccumulationConfig:
        return self._config.value

    @property
    def micro_steps(self) -> tf.Variable:
        """Micro-batches in the current window (int64, the same on every replica)."""
        return self.accumulator.micro_steps

    @property
    def accum_steps(self) -> int:
        """K of the current window (host): the config's, or the schedule's latest choice."""
        return int(self.state.accum_steps.numpy())

    @property
    def micro_batch_split(self) -> int:
        """Slices each micro-batch is processed as (1; doubled by each out-of-memory
        recovery)."""
        return int(self.state.micro_batch_split.numpy())

    @property
    def guard(self) -> Optional[NonFiniteGuard]:
        """The chain's non-finite guard (``None`` with ``nonfinite_policy=None``)."""
        return cast(Optional[NonFiniteGuard], self.chain.member(NonFiniteGuard))

    @property
    def windows(self) -> int:
        """Windows finished, applied or skipped (host)."""
        return int(self.state.windows.numpy())

    @property
    def updates(self) -> int:
        """Windows applied as optimizer updates (host)."""
        return int(self.state.updates.numpy())

    @property
    def skipped_windows(self) -> int:
        """Windows skipped as non-finite (host)."""
        return self.windows - self.updates

    def matches(self, variables: Sequence[Any]) -> bool:
        return self.accumulator.matches(variables)

    # ------------------------------------------------------------------ one micro-batch
    def add(
        self, grads: Sequence[Any], weight: Any, loss: Any = None, local_samples: Any = None
    ) -> Any:
        """Replica context: adds one micro-batch's gradients (and loss) to the window.

        Args:
          grads: this replica's gradients, aligned with the variables (``None`` for a
            variable without one), of its share of the global loss: the replica's mean loss
            divided by the number of replicas ``R`` (Keras' per-replica loss; on one device the
            micro-batch's mean loss). Not loss-scaled.
          weight: the micro-batch's weight in the window mean: the replica's samples (or any
            weight the front-end uses consistently on every replica, see
            :meth:`GradientAccumulator.window_mean`).
          loss: the scalar loss ``grads`` are the gradient of, or ``None``.
          local_samples: the replica's samples in this micro-batch, for the noise scale
            (default ``weight``).

        Returns:
          An op to depend on.
        """
        acc = self.accumulator
        acc.record_connected(acc.accumulated_variables, grads)
        ops = [acc.add(grads, weight, loss)]
        if self.config.oom_recovery:  # the largest slice yet, per replica (recovery's limit)
            rows = tf.cast(
                tf.math.ceil(
                    tf.cast(weight if local_samples is None else local_samples, tf.float32)
                ),
                tf.int64,
            )
            rows = rows * self.state.micro_batch_split.read_value()
            ops.append(
                self.state.micro_batch_rows.assign(tf.maximum(self.state.micro_batch_rows, rows))
            )
        if self.config.log_noise_scale:
            ops.append(
                self._add_noise_terms(grads, weight if local_samples is None else local_samples)
            )
        return tf.group(ops)

    def _add_noise_terms(self, grads: Sequence[Any], samples: Any) -> Any:
        """Adds ``b · |ĝ|²`` and ``b``: ``ĝ = R · g`` is the replica's mean-loss gradient."""
        ctx = tf.distribute.get_replica_context()
        replicas = float(ctx.num_replicas_in_sync if ctx is not None else 1)
        squares = [_squared_norm(g) for g in grads if g is not None]
        sq = tf.add_n(squares) * replicas * replicas
        b = tf.cast(samples, tf.float32)
        sq_sum, count = self.noise_sums
        return tf.group(sq_sum.assign_add(b * sq), count.assign_add(b))

    # ------------------------------------------------------------------ one window
    def finish(
        self,
        strategy: Any,
        optimizer: Any,
        *,
        jit_compile: bool = False,
        extra_gradient: Optional[Callable[[], Tuple[Any, List[Any]]]] = None,
    ) -> tf.Tensor:
        """Cross-replica context: ends the window with one update (or a skip).

        Args:
          strategy: the distribution strategy the core was created under.
          optimizer: the optimizer that applies the window gradient.
          jit_compile: run the replica-context steps (window gradient and chain, update) as
            XLA computations.
          extra_gradient: replica context, ``() -> (loss, [gradient per variable])`` added once
            to the window loss and gradient (``TrainingLoop``'s regularisation), or ``None``.

        Returns:
          A scalar bool tensor: whether the window was applied as an update.
        """
        if skips_nonfinite_itself(optimizer) and self.config.nonfinite_policy == "zero":
            raise ValueError(
                "nonfinite_policy='zero' cannot be used with a dynamic LossScaleOptimizer: it "
                "must see a non-finite gradient to lower its loss scale. Use "
                "nonfinite_policy='skip' (the default) or None."
            )
        gradient_fn, apply_fn, end_fn = self._replica_steps(optimizer, jit_compile, extra_gradient)
        out = strategy.run(gradient_fn)
        first = lambda value: strategy.experimental_local_results(value)[0]  # noqa: E731
        grads = out["grads"]

        def apply() -> tf.Tensor:
            strategy.run(apply_fn, args=(grads,))
            return tf.constant(True)

        if skips_nonfinite_itself(optimizer):
            apply()  # the LossScaleOptimizer skips a non-finite window itself
            applied = first(out["finite"])
        elif self.chain.may_skip:
            applied = tf.cond(first(out["apply"]), apply, lambda: tf.constant(False))
        else:
            apply()
            applied = tf.constant(True)
        self._end_window(strategy, end_fn, applied, optimizer)
        micro = tf.cast(self.micro_steps.read_value(), tf.float64)
        trace, grad_sq = first(out["noise_trace"]), first(out["noise_grad_sq"])  # S, G²: unsmoothed
        noise = self._update_noise_averages(trace, grad_sq)
        state = self.state
        windows = state.windows.assign_add(1)
        updates = state.updates.assign_add(tf.cast(applied, tf.int64))
        next_k = self._next_accum_steps(windows, first(out["samples"]) / micro, noise[0])
        learning_rate = self._scale_learning_rate(optimizer, next_k)
        row = [
            windows,
            updates,
            applied,
            first(out["samples"]),
            micro,
            first(out["loss"]),
            first(out["grad_norm"]),
            first(out["grad_norm_clipped"]),
            *noise,
            first(out["noise_small_batch"]),
            trace,
            grad_sq,
            next_k,
            learning_rate,
        ]
        self._write_record(row)
        state.micro_batches_done.assign_add(self.micro_steps.read_value())
        self.micro_steps.assign(0)
        return tf.identity(applied)

    def _next_accum_steps(self, windows: Any, micro_batch: Any, noise_scale: Any) -> tf.Tensor:
        """Cross-replica, at a window end: the schedule's K for the next window (window index
        ``windows``, 0-based), stored in ``state.accum_steps``."""
        config, state = self.config, self.state
        kind = config.schedule_kind
        current = state.accum_steps.read_value()
        if kind is None:
            return current
        if kind == "piecewise":
            starts = tf.constant([w for w, _ in config.schedule], tf.int64)
            values = tf.constant([k for _, k in config.schedule], tf.int64)
            index = tf.searchsorted(starts, tf.reshape(windows, [1]), side="right")[0] - 1
            chosen = tf.gather(values, index)
        elif kind == "callable":
            fn = cast(Callable[[Any], Any], config.accum_schedule_fn)
            chosen = tf.cast(fn(windows), tf.int64)
            tf.debugging.assert_greater_equal(
                chosen, tf.constant(1, tf.int64), message="accum_steps(window) must be >= 1"
            )
        else:  # adaptive
            ((k_min, k_max),) = config.schedule
            # Hysteresis band [K/2, 2K]: a target only outside it, the power of two next to the
            # measured ratio B_simple / b on the side of K; within it K stays.
            ratio = noise_scale / micro_batch
            two = tf.constant(2.0, tf.float64)
            log2 = tf.math.log(ratio) / tf.math.log(two)
            k = tf.cast(current, tf.float64)
            target = tf.where(
                ratio >= 2 * k,
                tf.pow(two, tf.floor(log2)),
                tf.where(ratio <= k / 2, tf.pow(two, tf.math.ceil(log2)), k),
            )
            target = tf.clip_by_value(target, float(k_min), float(k_max))
            target = tf.where(tf.math.is_finite(target), target, k)
            ready = state.noise_windows >= ADAPTIVE_WARMUP
            differs = ready & tf.not_equal(tf.cast(target, tf.int64), current)
            streak = tf.where(differs, state.adaptive_streak + 1, 0)
            switch = streak >= ADAPTIVE_PATIENCE
            state.adaptive_streak.assign(tf.where(switch, tf.constant(0, tf.int64), streak))
            chosen = tf.where(switch, tf.cast(target, tf.int64), current)
        return state.accum_steps.assign(chosen)

    def _scale_learning_rate(self, optimizer: Any, k: Any) -> tf.Tensor:
        """Cross-replica: with ``lr_scaling``, the learning rate for a window of ``k``
        micro-batches (``base · k/K0``, or its square root); returns the learning rate."""
        config = self.config
        if config.lr_scaling == "none":
            return tf.cast(_learning_rate_value(optimizer), tf.float64)
        variable = optimizer.learning_rate
        if internals.learning_rate_schedule(optimizer) is not None or not isinstance(
            variable, tf.Variable
        ):
            raise ValueError(
                f"lr_scaling={config.lr_scaling!r} sets the optimizer's learning rate when K "
                "changes, so it must be a constant learning rate (a variable), not a "
                f"LearningRateSchedule; got {internals.learning_rate_schedule(optimizer)!r}. Use "
                "lr_scaling='none' with a schedule."
            )
        state = self.state
        base = tf.where(
            state.base_learning_rate > 0,
            state.base_learning_rate,
            tf.cast(variable.read_value(), tf.float64),
        )
        state.base_learning_rate.assign(base)
        ratio = tf.cast(k, tf.float64) / float(config.accum_steps)
        factor = ratio if config.lr_scaling == "linear" else tf.sqrt(ratio)
        value = variable.assign(tf.cast(base * factor, variable.dtype))
        return tf.cast(value, tf.float64)

    def discard(self, strategy: Any) -> None:
        """Cross-replica context: clears the window without an update (not counted as a
        window; its micro-batches count as consumed)."""
        strategy.run(self._discard_step)
        self.state.micro_batches_done.assign_add(self.micro_steps.read_value())
        self.micro_steps.assign(0)

    # ------------------------------------------------------------------ out of memory
    def run_micro_batch(self, strategy: Any, step: Callable[[Any], Any], data: Any) -> Any:
        """Cross-replica context: ``strategy.run(step)`` on the micro-batch ``data``, as
        ``micro_batch_split`` consecutive slices of each replica's part; returns the last
        call's outputs. With ``oom_recovery`` off, ``strategy.run(step, args=(data,))``.
        Front-ends trace it only once the split is above 1 (after a recovery they trace their
        step again): at 1 they run ``step`` on the whole micro-batch, with no loop.

        Slices of a micro-batch of ``b`` samples have ``ceil(b / split)`` samples (the last
        fewer): the same sub-micro-batches, in the same order, as a run at that micro-batch.
        The loop over slices runs in cross-replica context: ``step`` (Keras' metrics, a
        ``merge_call``) never runs inside a replica-context loop.
        """
        if not self.config.oom_recovery:
            return strategy.run(step, args=(data,))
        split = self.state.micro_batch_split.read_value()

        def sliced(part: Any, i: Any) -> Any:
            samples = tf.cast(batch_size(part), tf.int64)
            size = (samples + split - 1) // split
            start = tf.minimum(i * size, samples)
            stop = tf.minimum(start + size, samples)
            return step(tf.nest.map_structure(lambda t: _rows(t, start, stop), part))

        first = tf.constant(0, tf.int64)
        outputs = strategy.run(sliced, args=(data, first))
        local = strategy.experimental_local_results(outputs) if outputs is not None else [None]
        if all(o is None or isinstance(o, tf.Operation) for o in local):  # no outputs
            for i in tf.range(tf.constant(1, tf.int64), split):
                tf.autograph.experimental.set_loop_options(parallel_iterations=1)
                strategy.run(sliced, args=(data, i))
            return outputs
        for i in tf.range(tf.constant(1, tf.int64), split):
            tf.autograph.experimental.set_loop_options(parallel_iterations=1)
            outputs = strategy.run(sliced, args=(data, i))
        return outputs

    def recover_from_oom(self, strategy: Any, error: BaseException) -> int:
        """Host side, after ``error`` (a ``ResourceExhaustedError``) inside a window: discards
        the window in progress (buffers, AccumBN statistics; the weights and the optimizer
        are those of the window's start, as no update ran), doubles ``micro_batch_split`` (the
        micro-batch halves, K doubles: the same samples per update) and returns the micro-
        batches the discarded window had consumed, for the front-end to read them again.

        Raises ``RuntimeError`` (from ``error``) when the micro-batch cannot be split further
        (a slice of one sample) or ``oom_recovery`` is off.
        """
        split = int(self.state.micro_batch_split.numpy())
        # The largest micro-batch trained so far; before the first one (an error in the very
        # first step) it is unknown: then the split doubles up to MAX_SPLIT.
        largest = int(self.state.micro_batch_rows.numpy()) or MAX_SPLIT
        if not self.config.oom_recovery or largest <= split:
            reason = (
                "oom_recovery is off"
                if not self.config.oom_recovery
                else f"the micro-batch is already split into {split} slices of "
                f"{-(-largest // split)} sample(s) per replica"
            )
            raise RuntimeError(
                f"Out of memory in a training step and {reason}: nothing smaller to try. Lower "
                f"the model's memory (or use a device with more), or set oom_recovery=True."
            ) from error
        pending = int(self.micro_steps.numpy())
        self.discard(strategy)
        self.state.micro_batches_done.assign_sub(pending)  # to be read again, not consumed
        self.state.micro_batch_split.assign(2 * split)
        return pending

    def _end_window(self, strategy: Any, end_fn: Callable, applied: Any, optimizer: Any) -> None:
        """Ends the window layers (statistics folded in if applied) and clears the buffers."""
        if not (self.chain.may_skip or skips_nonfinite_itself(optimizer)):
            strategy.run(end_fn, args=(True,))
            return

        def end(apply: bool) -> Callable[[], tf.Tensor]:
            def branch() -> tf.Tensor:
                strategy.run(end_fn, args=(apply,))
                return tf.constant(apply)

            return branch

        tf.cond(applied, end(True), end(False))

    def _replica_steps(
        self, optimizer: Any, jit_compile: bool, extra_gradient: Optional[Callable]
    ) -> Tuple[Callable, Callable, Callable]:
        """The replica-context steps for one optimizer, XLA-compiled under ``jit_compile``."""
        key = (id(optimizer), bool(jit_compile), extra_gradient)
        steps = self._steps.value
        if key not in steps:
            wrap = xla_step if jit_compile else (lambda function: function)
            steps[key] = (
                wrap(lambda: self._window_gradient(extra_gradient)),
                wrap(lambda grads: self._apply(optimizer, grads)),
                self._end_step,
            )
        return steps[key]

    def _window_gradient(self, extra_gradient: Optional[Callable]) -> Dict[str, Any]:
        """Replica context: one batched all-reduce; the window gradient; norms; the chain."""
        acc = self.accumulator
        noise_on = self.config.log_noise_scale
        extra = [v.read_value() for v in self.noise_sums] if noise_on else []
        pairs, samples, loss, extra_sums = acc.window_mean(extra)
        data_norm = global_norm(pairs)
        if extra_gradient is not None:
            pairs, loss = _add_extra_gradient(pairs, loss, extra_gradient, acc)
        norm = global_norm(pairs) if extra_gradient is not None else data_norm
        small = acc.micro_steps.read_value() * self.state.micro_batch_split.read_value()
        noise = _noise_estimates(extra_sums, data_norm, small) if noise_on else {}
        finite = all_finite(pairs)
        pairs, vote = self.chain(pairs)
        self._applied_variables.value = [v for _, v in pairs]
        out = {
            "grads": [g for g, _ in pairs],
            "apply": vote,
            "finite": finite,
            "samples": tf.cast(samples, tf.float64),
            "loss": tf.cast(loss, tf.float64),
            "grad_norm": tf.cast(norm, tf.float64),
            "grad_norm_clipped": tf.cast(global_norm(pairs), tf.float64),
        }
        nan = tf.constant(math.nan, tf.float64)
        for key in ("noise_trace", "noise_grad_sq", "noise_small_batch"):
            out[key] = noise.get(key, nan)
        return out

    def _apply(self, optimizer: Any, grads: Sequence[Any]) -> Any:
        """Replica context: one optimizer update with the chained window gradient."""
        pairs = list(zip(grads, self._applied_variables.value))
        return tf.group(_as_dependencies(apply_aggregated_gradients(optimizer, pairs)))

    def _end_step(self, apply: bool) -> Any:
        """Replica context: ends the window layers' windows, clears the buffers."""
        ends = [layer.ga_window_end(apply=apply) for layer in self._layers.value]
        with tf.control_dependencies(ends):
            return self._clear()

    def _discard_step(self) -> Any:
        return self._end_step(False)

    def _clear(self) -> Any:
        return tf.group([self.accumulator.reset()] + [v.assign(0.0) for v in self.noise_sums])

    def _update_noise_averages(self, trace: Any, grad_sq: Any) -> List[tf.Tensor]:
        """Cross-replica: folds this window's estimates ``S`` and ``G²`` (if it has them) into
        the moving averages; returns ``[EMA(S) / EMA(G²), EMA(S), EMA(G²)]`` (the averages
        bias-corrected as Adam's moments are; NaN before the first estimate)."""
        nan = tf.constant(math.nan, tf.float64)
        if not self.config.log_noise_scale:
            return [nan, nan, nan]
        state = self.state
        decay = tf.constant(self.config.noise_scale_decay, tf.float64)
        have = tf.math.is_finite(trace) & tf.math.is_finite(grad_sq)
        averages = []
        for average, value in ((state.noise_trace_ema, trace), (state.noise_grad_sq_ema, grad_sq)):
            folded = decay * average + (1 - decay) * tf.where(have, value, 0.0)
            averages.append(average.assign(tf.where(have, folded, average)))
        count = state.noise_windows.assign_add(tf.cast(have, tf.int64))
        correction = 1 - tf.pow(decay, tf.cast(count, tf.float64))
        trace_ema, grad_ema = (tf.where(count > 0, a / correction, nan) for a in averages)
        return [trace_ema / grad_ema, trace_ema, grad_ema]

    def _write_record(self, row: Sequence[Any]) -> None:
        state = self.state
        values = tf.stack([tf.cast(v, tf.float64) for v in row])
        written = state.records_written
        index = tf.math.floormod(written.read_value(), RECORD_CAPACITY)
        state.records.assign(
            tf.tensor_scatter_nd_update(state.records, [[index]], values[tf.newaxis])
        )
        written.assign_add(1)

    # ------------------------------------------------------------------ host side
    def start_events(self) -> None:
        """From now on :meth:`poll` returns only windows finished after this call."""
        self._events_seen = int(self.state.records_written.numpy())

    def poll(self) -> List[WindowEnd]:
        """Host: one :class:`WindowEnd` per window finished since the last poll, in order.

        At most :data:`RECORD_CAPACITY` (the most recent) when more finished in between.
        """
        written = int(self.state.records_written.numpy())
        start = max(self._events_seen, written - RECORD_CAPACITY)
        self._events_seen = written
        if start >= written:
            return []
        rows = self.state.records.numpy()
        return [WindowEnd.from_row(rows[i % RECORD_CAPACITY]) for i in range(start, written)]

    def check_skips(self) -> None:
        """Host: raises :class:`NonFiniteGradientError` once ``max_consecutive_skips`` windows
        in a row were non-finite (the windows so far are counted and kept)."""
        limit = self.config.max_consecutive_skips
        guard = self.guard
        if limit is None or guard is None:
            return
        consecutive = int(guard.consecutive_nonfinite.numpy())
        if consecutive >= limit:
            raise NonFiniteGradientError(
                f"{consecutive} consecutive windows had a non-finite gradient (NaN or inf), "
                f"max_consecutive_skips={limit}; stopped at window {self.windows} after "
                f"{self.updates} updates."
            )


def _add_extra_gradient(
    pairs: List[Tuple[Any, Any]], loss: Any, extra_gradient: Callable, acc: GradientAccumulator
) -> Tuple[List[Tuple[Any, Any]], Any]:
    """Adds ``extra_gradient()``'s loss and gradients once (replica context)."""
    extra_loss, extra_grads = extra_gradient()
    if extra_grads is None:
        return pairs, loss
    given = {v.ref(): g for g, v in pairs}
    out = []
    for variable, extra in zip(acc.accumulated_variables, extra_grads):
        grad = given.get(variable.ref())
        if grad is None and extra is None:
            continue
        if grad is None:
            grad = tf.cast(extra, variable.dtype)
        elif extra is not None:
            grad = grad + tf.cast(extra, grad.dtype)
        out.append((tf.cast(grad, variable.dtype), variable))
    return out, loss + tf.cast(extra_loss, loss.dtype)
