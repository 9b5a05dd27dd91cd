"""The window core: :class:`WindowCore` (see :mod:`ga_tfx.window`)."""

from ga_tfx._state import Untracked
from ga_tfx._tf_internals import tf, user_code
from ga_tfx.config import AccumulationConfig
from ga_tfx.transforms import GradientChain, Member, NonFiniteGuard, chain_for
from ga_tfx.window import noise, split
from ga_tfx.window.accumulator import GradientAccumulator
from ga_tfx.window.events import RECORD_CAPACITY, NonFiniteGradientError, WindowEnd
from ga_tfx.window.shims import (
    apply_aggregated_gradients,
    as_dependencies,
    check_nonfinite_policy,
    skips_nonfinite_itself,
    xla_step,
)
from ga_tfx.window.state import WindowState
from ga_tfx.window.steps import count_window, end_window_layers, window_gradient

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, cast

# The core's key in every front-end's checkpoint: the model's (``model/ga_window_core/...`` in
# a ``tf.train.Checkpoint(model=...)``), the optimizer wrapper's
# (``optimizer/ga_window_core/...``) and ``TrainingLoop``'s (``ga_window_core/...``); below it
# the one layout of the core's children (``accumulator``, ``chain``, ``state``,
# ``noise_sums``). Not ``window_core``: a SavedModel loaded back sets each tracked child as an
# attribute of the model, which clashes with the model's ``window_core`` property.
CHECKPOINT_KEY = "ga_window_core"


class WindowCore(tf.Module):
    """The accumulation state and the steps of one window (see :mod:`ga_tfx.window`).

    Args:
      variables: the trainable variables whose gradients are accumulated (fully defined
        shapes). Create the core under the strategy's scope, outside ``tf.function``.
      accumulation: the :class:`~ga_tfx.AccumulationConfig` (accumulation, chain, logging),
        read back as ``accumulation`` (the name every front-end uses).
      transforms: further gradient transforms, run after the config's members
        (:class:`~ga_tfx.transforms.GradientTransform` or ``(name, callable)`` pairs).
      window_layers: layers that keep window state (``ga_window_end(apply)``, e.g.
        :class:`~ga_tfx.AccumBatchNormalization`); attached to the core's windows here.
      state: the counters' module (default a new :class:`WindowState`).

    Attributes (checkpoint children, the same layout under :data:`CHECKPOINT_KEY` in every
    front-end): ``accumulator``, ``chain``, ``state``, ``noise_sums`` (the window's
    replica-local noise-scale sums). The front-ends expose the core as ``window_core`` and
    forward none of them: ``model.window_core.accumulator``, ``opt.window_core.micro_steps``.
    """

    def __init__(
        self,
        variables: Sequence[tf.Variable],
        accumulation: AccumulationConfig,
        transforms: Sequence[Member] = (),
        window_layers: Sequence[Any] = (),
        state: Optional[WindowState] = None,
        name: str = "window_core",
    ) -> None:
        super().__init__(name=name)
        variables = list(variables)
        self._accumulation = Untracked(accumulation)
        self.chain: GradientChain = chain_for(accumulation, transforms)
        self.chain.build(variables)  # unsupported variables fail here, not while tracing
        self.accumulator = GradientAccumulator(variables)
        self.state = state if state is not None else WindowState()
        with tf.init_scope():  # once, also when the core is made while a function is traced
            self.state.current_accum_steps.assign(accumulation.accum_steps)  # restores override
        self.noise_sums = noise.noise_sums(name)
        self._layers = Untracked(list(window_layers))
        for layer in window_layers:
            if hasattr(layer, "ga_attach_to_engine"):
                layer.ga_attach_to_engine()
        # Python state, not checkpoint dependencies: the replica steps per (optimizer,
        # jit_compile, extra gradient), and the variables the chain returned (trace time).
        self._steps = Untracked({})
        self._applied_variables = Untracked([])
        self._events_seen = 0  # host: records returned by poll() so far

    # ------------------------------------------------------------------ properties
    @property
    def accumulation(self) -> AccumulationConfig:
        """The :class:`~ga_tfx.AccumulationConfig` the core runs (as ``model.accumulation``,
        ``opt.accumulation`` and ``loop.accumulation``)."""
        return self._accumulation.value

    @property
    def micro_steps(self) -> tf.Variable:
        """Micro-batches in the current window (int64, the same on every replica)."""
        return self.accumulator.micro_steps

    @property
    def current_accum_steps(self) -> int:
        """K of the current window (host): the schedule's first K (``config.accum_steps``), or
        its latest choice. (``accum_steps`` everywhere else is the first K.)"""
        return int(self.state.current_accum_steps.numpy())

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
        self,
        grads: Sequence[Any],
        weight: Any,
        loss: Any = None,
        local_weight: Any = None,
        rows: Any = None,
        parts: Sequence[Tuple[Sequence[Any], Any, Any]] = (),
    ) -> Any:
        """Replica context: adds one micro-batch's gradients (and loss) to the window.

        Args:
          grads: this replica's gradients, aligned with the variables (``None`` for a
            variable without one), of its share of the global loss: the replica's mean loss
            divided by the number of replicas ``R`` (Keras' per-replica loss; on one device the
            micro-batch's mean loss). Not loss-scaled.
          weight: the micro-batch's weight ``D`` in the window mean: the divisor its loss was
            normalised by on this replica (its rows for a loss averaged over rows; its valid
            elements for a masked loss; see :func:`ga_tfx.divisor_rule.micro_batch_weight`),
            or any weight the front-end uses consistently on every replica (see
            :meth:`GradientAccumulator.window_mean`).
          loss: the scalar loss ``grads`` are the gradient of, or ``None``.
          local_weight: the replica's own divisor, for the noise scale (its "batch size");
            default ``weight``.
          rows: the replica's samples (rows) in this micro-batch, counted in ``samples_seen``
            and kept for out-of-memory recovery; default ``weight``.
          parts: further parts of a loss of several terms with their own divisors,
            ``(grads, weight, loss)`` each (:func:`ga_tfx.divisor_rule.micro_batch_groups`;
            ``grads``, ``weight`` and ``loss`` above are the first part), each summed over the
            window with its own divisor (:meth:`GradientAccumulator.add`).

        Returns:
          An op to depend on.

        Raises:
          ValueError: ``parts`` with ``log_noise_scale``: the noise scale's batch is one
            divisor per micro-batch.
        """
        acc = self.accumulator
        every = [grads] + [part[0] for part in parts]
        acc.record_connected(
            acc.accumulated_variables,
            [next((g for g in column if g is not None), None) for column in zip(*every)],
        )
        rows = weight if rows is None else rows
        if parts and self.accumulation.log_noise_scale:
            raise ValueError(
                "ga_tfx: log_noise_scale=True with a loss of several terms that divide by "
                "their own counts (masks, weighted means) is not supported: the noise scale "
                "needs one batch size per micro-batch (allowed: log_noise_scale=False, or "
                "outputs that all divide by their rows)"
            )
        ops = [acc.add(grads, weight, loss, rows=rows, parts=parts)]
        if self.accumulation.oom_recovery:
            ops.append(split.track_rows(self.state, rows))
        if self.accumulation.log_noise_scale:
            local = weight if local_weight is None else local_weight
            ops.append(noise.add_noise_terms(self.noise_sums, grads, local))
        return tf.group(ops)

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
        check_nonfinite_policy(self.accumulation, optimizer)
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
        may_skip = self.chain.may_skip or skips_nonfinite_itself(optimizer)
        end_window_layers(strategy, end_fn, applied, may_skip)
        count_window(self, optimizer, applied, out, first)
        self.state.micro_batches_done.assign_add(self.micro_steps.read_value())
        self.micro_steps.assign(0)
        return tf.identity(applied)

    def discard(self, strategy: Any) -> None:
        """Cross-replica context: clears the window without an update (not counted as a
        window; its micro-batches count as consumed)."""
        strategy.run(self._discard_step)
        self.state.micro_batches_done.assign_add(self.micro_steps.read_value())
        self.micro_steps.assign(0)

    # ------------------------------------------------------------------ out of memory
    def run_micro_batch(self, strategy: Any, step: Callable[[Any], Any], data: Any) -> Any:
        """Cross-replica context: ``strategy.run(step)`` on the micro-batch ``data``, as
        ``micro_batch_split`` slices (:func:`ga_tfx.window.split.run_micro_batch`)."""
        return split.run_micro_batch(self, strategy, step, data)

    def recover_from_oom(self, strategy: Any, error: BaseException) -> None:
        """Host side, after ``error`` (a ``ResourceExhaustedError``) inside a window: discards
        the window in progress (buffers, AccumBN statistics; the weights and the optimizer
        are those of the window's start, as no update ran) and doubles ``micro_batch_split``
        (the micro-batch halves, K doubles: the same samples per update). The discarded
        window's micro-batches are taken back from ``micro_batches_done``: the front-end reads
        them again.

        Raises ``RuntimeError`` (from ``error``) when the micro-batch cannot be split further
        (a slice of one sample) or ``oom_recovery`` is off.
        """
        split_now = split.split_to_double(self, error)
        pending = int(self.micro_steps.numpy())
        strategy.run(self.accumulator.uncount_window)
        self.discard(strategy)
        self.state.micro_batches_done.assign_sub(pending)  # to be read again, not consumed
        self.state.micro_batch_split.assign(2 * split_now)

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
                self._end_layers_and_clear,
            )
        return steps[key]

    def _window_gradient(self, extra_gradient: Optional[Callable]) -> Dict[str, Any]:
        """Replica context: one batched all-reduce; the window gradient; norms; the chain."""
        out, variables = window_gradient(self, extra_gradient)
        self._applied_variables.value = variables
        return out

    def _apply(self, optimizer: Any, grads: Sequence[Any]) -> Any:
        """Replica context: one optimizer update with the chained window gradient."""
        pairs = list(zip(grads, self._applied_variables.value))
        return tf.group(as_dependencies(apply_aggregated_gradients(optimizer, pairs)))

    def _end_layers_and_clear(self, apply: bool) -> Any:
        """Replica context: ends the window layers' windows, clears the buffers."""
        ends = [user_code(layer, layer.ga_window_end)(apply=apply) for layer in self._layers.value]
        with tf.control_dependencies(ends):
            return self._clear()

    def _discard_step(self) -> Any:
        return self._end_layers_and_clear(False)

    def _clear(self) -> Any:
        return tf.group([self.accumulator.reset()] + [v.assign(0.0) for v in self.noise_sums])

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
        limit = self.accumulation.max_consecutive_skips
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
