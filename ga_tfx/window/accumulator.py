"""Explicit accumulation state: divisor-weighted gradient sums over one window (optax's
``MultiSteps`` state, checkpointable; docs/exactness.md, "The window's divisor")."""

from ga_tfx import _tf_internals
from ga_tfx._state import Untracked
from ga_tfx._tf_internals import tf

from typing import Any, Callable, Iterable, List, Sequence, Tuple

_ON_READ = tf.VariableSynchronization.ON_READ
_SUM = tf.VariableAggregation.SUM


def _buffer_dtype(variable: Any) -> Any:
    # Gradients are accumulated in at least float32, also for float16/bfloat16 variables.
    dtype = tf.as_dtype(variable.dtype)
    return tf.float64 if dtype == tf.float64 else tf.float32


class GradientAccumulator(tf.Module):
    """Per-variable sums ``Σ_i D_i · g_i`` plus ``Σ_i D_i`` and the micro-step count.

    ``D_i`` is micro-batch ``i``'s divisor: the number its loss was divided by (its samples
    for a loss averaged over rows, its valid elements for a masked one, ``Σ sample_weight``
    for Keras 3's ``mean_with_sample_weight``), so that ``Σ_i D_i g_i / Σ_i D_i`` is the
    gradient of the window's loss taken as one batch. Its rows are counted apart
    (``samples_seen``), for resuming and progress. A ``tf.Module``: ``tf.train.Checkpoint``
    saves it, so a run interrupted mid-window resumes with what it had accumulated. Under
    ``tf.distribute`` the buffers are replica-local (``ON_READ``): adding never communicates,
    and :meth:`window_mean` sums all replicas' buffers in one batched all-reduce per window.

    Args:
      variables: the variables whose gradients are accumulated; their shapes must be fully
        defined. The buffers are created immediately, under the current distribution strategy
        scope (call this outside ``tf.function``).
      name: name of the module (and prefix of its variables).

    Attributes:
      sums: list of buffers, one per variable, same shape, float32 (float64 for float64
        variables). Replica-local under a multi-replica strategy.
      sample_count: float32 scalar, ``Σ_i D_i`` of the current window on this replica: the
        window's divisor (the name is the checkpoint's).
      window_rows: float32 scalar, the rows (samples) added in the current window on this
        replica (what out-of-memory recovery takes back out of ``samples_seen``).
      loss_sum: float32 scalar, ``Σ_i D_i · loss_i`` of the current window on this replica,
        for the micro-batches added with a loss (the window's mean loss, as the gradient).
      micro_steps: int64 scalar, micro-steps in the current window (replica-independent).
      samples_seen: float64 scalar holding a whole number, the rows of every micro-batch ever
        added, each rounded to a whole number (never reset): the number of training samples.
        Replica-local (each replica counts
        its own micro-batches; reading it sums them). Read it as an int with
        :meth:`samples_seen_count`. Not int64: tf.distribute restores a replica-local ``SUM``
        variable as ``saved_sum / replicas`` per replica in the variable's dtype, which
        truncates an integer (an odd sum over 2 replicas lost a sample) but is exact in
        float64 for 2 replicas (whole numbers up to 2**53).
    """

    def __init__(self, variables: Iterable[Any], name: str = "gradient_accumulator") -> None:
        super().__init__(name=name)
        variables = list(variables)
        with tf.init_scope(), tf.name_scope(name):
            self.sums = [_buffer(v, i) for i, v in enumerate(variables)]
            self.sample_count = _replica_sum("sample_count")
            self.window_rows = _replica_sum("window_rows")
            self.loss_sum = _replica_sum("loss_sum")
            self.samples_seen = _replica_sum("samples_seen", tf.float64)
            self.micro_steps = tf.Variable(
                0,
                dtype=tf.int64,
                trainable=False,
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
                name="micro_steps",
            )
        self._variable_refs = [v.ref() for v in variables]
        self._connected = Untracked()  # trace-time Python state, not a dependency
        self._name = name
        # The further parts of a loss of several terms with their own divisors, one
        # :class:`_PartSums` each, made when a traced step first adds one (``parts`` of
        # :meth:`add`); a checkpoint restores them as they are made.
        self.parts: List[_PartSums] = []

    def record_connected(self, variables: Sequence[Any], gradients: Sequence[Any]) -> None:
        """Remembers (at trace time) which variables receive a gradient at all."""
        self._connected.value = frozenset(
            v.ref() for v, g in zip(variables, gradients) if g is not None
        )

    def connected_only(self, grads_and_vars: Iterable[Tuple[Any, Any]]) -> List[Tuple[Any, Any]]:
        """Drops variables that never receive a gradient: a stateful optimizer (momentum,
        weight decay) must not move them, exactly as Keras filters ``None`` gradients."""
        connected = self._connected.value
        if connected is None:
            return list(grads_and_vars)
        return [(g, v) for g, v in grads_and_vars if v.ref() in connected]

    @property
    def accumulated_variables(self) -> List[Any]:
        """The model variables this accumulator sums gradients for, in order."""
        return [ref.deref() for ref in self._variable_refs]

    def matches(self, variables: Iterable[Any]) -> bool:
        """True if this accumulator was built for exactly ``variables`` (same order)."""
        return [v.ref() for v in variables] == self._variable_refs

    def add(
        self,
        gradients: Sequence[Any],
        weight: Any,
        loss: Any = None,
        rows: Any = None,
        parts: Sequence[Tuple[Sequence[Any], Any, Any]] = (),
    ) -> Any:
        """Adds ``weight · g`` for each gradient (replica context). ``None`` gradients are skipped.

        Args:
          gradients: list aligned with the accumulator's variables; dense tensors,
            ``tf.IndexedSlices`` (added with a scatter, never densified) or ``None``.
          weight: scalar ``D_i``, the micro-batch's weight in the window mean: the divisor
            its loss was normalised by (see the class docstring).
          loss: the scalar loss whose gradient ``gradients`` are (same scaling), or ``None``:
            ``weight · loss`` is added to ``loss_sum``.
          rows: scalar, the micro-batch's samples on this replica, counted in
            ``samples_seen``; default ``weight`` (a loss averaged over its rows).
          parts: further parts of the same micro-batch's loss, ``(gradients, weight, loss)``
            each, summed apart with their own divisor (part ``j`` in ``self.parts[j]``, made
            at the first trace that adds it): the window gradient is then
            ``Σ_parts Σ_i D_i g_i / Σ_i D_i`` (:func:`ga_tfx.divisor_rule.micro_batch_groups`).
            ``gradients``, ``weight`` and ``loss`` above are the first part.
        """
        rows = weight if rows is None else rows
        ops = _add_weighted(self.sums, gradients, weight)
        losses = [loss] if loss is not None else []
        for j, (part_grads, part_weight, part_loss) in enumerate(parts):
            slot = self._part(j)
            ops += _add_weighted(slot.sums, part_grads, part_weight)
            with tf.control_dependencies(ops):
                ops.append(slot.count(part_weight, part_loss))
            losses += [part_loss] if part_loss is not None else []
        # The counts after the gradients: a step that fails before its gradient exists (an
        # out-of-memory error in the forward pass) then counts none of its samples.
        with tf.control_dependencies(ops + losses):
            counts = [
                self.sample_count.assign_add(tf.cast(weight, tf.float32)),
                self.window_rows.assign_add(tf.cast(rows, tf.float32)),
                self.samples_seen.assign_add(tf.round(tf.cast(rows, tf.float64))),
            ]
            if loss is not None:
                counts.append(
                    self.loss_sum.assign_add(
                        tf.cast(loss, tf.float32) * tf.cast(weight, tf.float32)
                    )
                )
        return tf.group(ops + counts)

    def _part(self, j: int) -> "_PartSums":
        """``self.parts[j]``, made now (outside any function, under the strategy the
        accumulator was made under) if it does not exist yet."""
        while len(self.parts) <= j:
            with tf.init_scope(), tf.name_scope(f"{self._name}_part_{len(self.parts) + 1}"):
                self.parts.append(_PartSums(self.accumulated_variables))
        return self.parts[j]

    def uncount_window(self) -> Any:
        """Takes the window's samples back out of ``samples_seen`` (replica context): the
        window is discarded to be trained again (out-of-memory recovery), so its samples will
        be counted when they are added again."""
        return self.samples_seen.assign_sub(tf.round(tf.cast(self.window_rows, tf.float64)))

    def samples_seen_count(self) -> int:
        """``samples_seen`` summed over replicas, as an int (eagerly; any context).

        Rounded: after a restore under ``R`` replicas each holds ``saved / R`` in float64, whose
        sum can be off by round-off when ``R`` is not a power of two.
        """
        return int(round(float(self.samples_seen.numpy())))

    def window_mean(self, extra: Sequence[Any] = ()) -> Tuple[List[Any], Any, Any, List[Any]]:
        """The window's means over all replicas (replica context, one batched all-reduce).

        Both callers add ``D · g`` and ``D`` on every replica, with gradients that sum (not
        average) over replicas: the model engine adds each replica's own divisor ``D_r`` with
        Keras' per-replica loss (``S_r / D_r / R``, ``R`` replicas, ``S_r`` the replica's summed
        element losses); the optimizer wrapper may instead add the global divisor ``D`` with
        ``compute_average_loss(global_batch_size=D)`` (``S_r / D``). Either way
        ``R · Σ sums / Σ sample_count`` is ``Σ ∇S / Σ D``, the gradient of the window's loss as
        one batch; the same holds for the loss. A window whose divisor is 0 (every element
        masked) has a zero gradient and loss, as Keras' ``divide_no_nan`` gives.

        Args:
          extra: further replica-local scalars to sum over replicas in the same all-reduce.

        Returns:
          ``(grads_and_vars, samples, loss, extra_sums)``: the window gradient
          ``[(g, variable)]`` in each variable's dtype, for the connected variables only
          (:meth:`connected_only`); the window's samples (all replicas, float32); its mean loss
          (0 when no loss was added); ``extra`` summed over replicas.
        """
        slots = [(self.sums, self.sample_count, self.loss_sum)]
        slots += [(part.sums, part.divisor, part.loss_sum) for part in self.parts]
        values: List[Any] = []
        for sums, count, loss_sum in slots:
            values += [b.read_value() for b in sums] + [count.read_value(), loss_sum.read_value()]
        at_extra = len(values)
        values += list(extra)
        ctx = tf.distribute.get_replica_context()
        replicas = ctx.num_replicas_in_sync if ctx is not None else 1
        if replicas > 1:
            values = list(ctx.all_reduce(tf.distribute.ReduceOp.SUM, values))
        window: List[Any] = [None] * len(self.sums)
        loss: Any = 0.0
        at = 0
        for sums, _, _ in slots:
            count, loss_sum = values[at + len(sums)], values[at + len(sums) + 1]
            for i, grad_sum in enumerate(values[at : at + len(sums)]):
                scale = tf.math.divide_no_nan(
                    tf.cast(replicas, grad_sum.dtype), tf.cast(count, grad_sum.dtype)
                )
                window[i] = grad_sum * scale if window[i] is None else window[i] + grad_sum * scale
            loss = loss + tf.math.divide_no_nan(loss_sum * float(replicas), count)
            at += len(sums) + 2
        grads_and_vars = [
            (tf.cast(grad, variable.dtype), variable)
            for grad, variable in zip(window, self.accumulated_variables)
        ]
        return (
            self.connected_only(grads_and_vars),
            values[len(self.sums)],
            loss,
            values[at_extra:],
        )

    def reset(self) -> Any:
        """Zeroes the buffers and the sample count (replica context)."""
        ops = [b.assign(tf.zeros_like(b)) for b in self.sums]
        ops.append(self.sample_count.assign(0.0))
        ops.append(self.window_rows.assign(0.0))
        ops.append(self.loss_sum.assign(0.0))
        ops += [part.reset() for part in self.parts]
        return tf.group(ops)


class _PartSums(tf.Module):
    """One further part of a micro-batch loss of several terms: ``Σ_i D_i g_i`` per
    variable (``sums``, replica-local as the accumulator's), ``Σ_i D_i`` (``divisor``) and
    ``Σ_i D_i loss_i`` (``loss_sum``)."""

    def __init__(self, variables: Sequence[Any]) -> None:
        super().__init__()
        self.sums = [_buffer(v, i) for i, v in enumerate(variables)]
        self.divisor = _replica_sum("divisor")
        self.loss_sum = _replica_sum("loss_sum")

    def count(self, weight: Any, loss: Any) -> Any:
        ops = [self.divisor.assign_add(tf.cast(weight, tf.float32))]
        if loss is not None:
            ops.append(
                self.loss_sum.assign_add(tf.cast(loss, tf.float32) * tf.cast(weight, tf.float32))
            )
        return tf.group(ops)

    def reset(self) -> Any:
        ops = [b.assign(tf.zeros_like(b)) for b in self.sums]
        return tf.group(ops + [self.divisor.assign(0.0), self.loss_sum.assign(0.0)])


def _buffer(variable: Any, i: int) -> tf.Variable:
    """The replica-local float32 (float64) zero buffer of ``variable``'s gradient sum."""
    return tf.Variable(
        tf.zeros(_static_shape(variable), _buffer_dtype(variable)),
        trainable=False,
        synchronization=_ON_READ,
        aggregation=_SUM,
        name=f"sum_{i}",
    )


def _add_weighted(buffers: Sequence[Any], gradients: Sequence[Any], weight: Any) -> List[Any]:
    """Adds ``weight · g`` to each buffer (``None`` gradients skipped; ``tf.IndexedSlices``
    scattered, never densified); returns the ops."""
    ops = []
    for buffer, grad in zip(buffers, gradients):
        if grad is None:
            continue
        w = tf.cast(weight, buffer.dtype)
        if isinstance(grad, tf.IndexedSlices):
            ops.append(
                _local_component(buffer).scatter_add(
                    tf.IndexedSlices(
                        tf.cast(grad.values, buffer.dtype) * w, grad.indices, grad.dense_shape
                    )
                )
            )
        else:
            ops.append(buffer.assign_add(tf.cast(grad, buffer.dtype) * w))
    return ops


def aligned(
    grads_and_vars: Iterable[Tuple[Any, Any]],
    variables: Sequence[Any],
    unknown: Callable[[Any], Exception],
) -> List[Any]:
    """The gradients of ``grads_and_vars`` in the order of ``variables`` (``None`` for a
    variable it leaves out); a variable not among ``variables`` raises ``unknown(variable)``."""
    known = {v.ref(): i for i, v in enumerate(variables)}
    out: List[Any] = [None] * len(variables)
    for grad, variable in grads_and_vars:
        if variable.ref() not in known:
            raise unknown(variable)
        out[known[variable.ref()]] = grad
    return out


def not_a_first_term_variable(who: str) -> Callable[[Any], Exception]:
    """:func:`aligned`'s error for an optimizer wrapper's ``parts=`` (``who``: its method)."""
    return lambda variable: ValueError(
        f"{who}: parts= gives a gradient for {variable.name!r}, which is not among "
        "grads_and_vars' variables (allowed: the variables of the first term's grads_and_vars)"
    )


def _replica_sum(name: str, dtype: Any = tf.float32) -> tf.Variable:
    """A scalar 0, replica-local (``ON_READ``), read as the sum over replicas."""
    return tf.Variable(
        tf.zeros((), dtype),
        trainable=False,
        synchronization=_ON_READ,
        aggregation=_SUM,
        name=name,
    )


def _local_component(buffer: Any) -> Any:
    """This replica's copy of a replica-local buffer (``ON_READ`` distributed variables do not
    support ``scatter_add`` themselves; their per-device components do)."""
    return _tf_internals.local_component(buffer)


def _static_shape(variable: Any) -> Any:
    shape = variable.shape
    if not shape.is_fully_defined():
        raise ValueError(
            f"Cannot accumulate gradients of variable {variable.name!r} with shape {shape}: "
            "gradient accumulation needs fully defined variable shapes."
        )
    return shape
