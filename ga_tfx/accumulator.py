"""Explicit accumulation state: sample-weighted gradient sums over one window.

Like optax's ``MultiSteps`` the state is explicit and separate from the optimizer: a
:class:`GradientAccumulator` owns one float32 buffer per variable, the number of samples added
to it in the current window and the number of micro-steps in the window. It is a ``tf.Module``
so that ``tf.train.Checkpoint`` (and Keras' ``BackupAndRestore``) save it: a run interrupted
mid-window resumes with what it had accumulated.

Under ``tf.distribute`` the buffers are replica-local (``ON_READ``) variables: adding a
micro-batch's gradient never communicates, and :meth:`reduce_window` sums all replicas' buffers
with one batched all-reduce per optimizer update.
"""

from ga_tfx import _tf_keras_internals
from ga_tfx._keras import tf
from ga_tfx._state import Untracked

from typing import Any, Iterable, List, Sequence, Tuple

_ON_READ = tf.VariableSynchronization.ON_READ
_SUM = tf.VariableAggregation.SUM


def _buffer_dtype(variable: Any) -> Any:
    # Gradients are accumulated in at least float32, also for float16/bfloat16 variables.
    dtype = tf.as_dtype(variable.dtype)
    return tf.float64 if dtype == tf.float64 else tf.float32


class GradientAccumulator(tf.Module):
    """Per-variable sums ``Σ_i w_i · g_i`` plus ``Σ_i w_i`` and the micro-step count.

    Args:
      variables: the variables whose gradients are accumulated; their shapes must be fully
        defined. The buffers are created immediately, under the current distribution strategy
        scope (call this outside ``tf.function``).
      name: name of the module (and prefix of its variables).

    Attributes:
      sums: list of buffers, one per variable, same shape, float32 (float64 for float64
        variables). Replica-local under a multi-replica strategy.
      sample_count: float32 scalar, ``Σ_i w_i`` of the current window on this replica.
      micro_steps: int64 scalar, micro-steps in the current window (replica-independent).
      samples_seen: float64 scalar holding a whole number, the sum of all weights ever added,
        each rounded to a whole number (never reset): the number of training samples for the
        model engine, whose weights are micro-batch sizes. Replica-local (each replica counts
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
            self.sums = [
                tf.Variable(
                    tf.zeros(_static_shape(v), _buffer_dtype(v)),
                    trainable=False,
                    synchronization=_ON_READ,
                    aggregation=_SUM,
                    name=f"sum_{i}",
                )
                for i, v in enumerate(variables)
            ]
            self.sample_count = tf.Variable(
                0.0,
                trainable=False,
                synchronization=_ON_READ,
                aggregation=_SUM,
                name="sample_count",
            )
            self.samples_seen = tf.Variable(
                0.0,
                dtype=tf.float64,
                trainable=False,
                synchronization=_ON_READ,
                aggregation=_SUM,
                name="samples_seen",
            )
            self.micro_steps = tf.Variable(
                0,
                dtype=tf.int64,
                trainable=False,
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
                name="micro_steps",
            )
        self._variable_refs = [v.ref() for v in variables]
        self._connected = Untracked()  # trace-time Python state, not a dependency

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

    def add(self, gradients: Sequence[Any], weight: Any) -> Any:
        """Adds ``weight · g`` for each gradient (replica context). ``None`` gradients are skipped.

        Args:
          gradients: list aligned with the accumulator's variables; dense tensors,
            ``tf.IndexedSlices`` (added with a scatter, never densified) or ``None``.
          weight: scalar, the weight of this micro-batch in the window mean: its number of
            samples for mean-reduced losses.
        """
        ops = []
        for buffer, grad in zip(self.sums, gradients):
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
        ops.append(self.sample_count.assign_add(tf.cast(weight, tf.float32)))
        ops.append(self.samples_seen.assign_add(tf.round(tf.cast(weight, tf.float64))))
        return tf.group(ops)

    def samples_seen_count(self) -> int:
        """``samples_seen`` summed over replicas, as an int (eagerly; any context).

        Rounded: after a restore under ``R`` replicas each holds ``saved / R`` in float64, whose
        sum can be off by round-off when ``R`` is not a power of two.
        """
        return int(round(float(self.samples_seen.numpy())))

    def reduce_window(self) -> Tuple[List[Any], Any]:
        """Returns ``(sums, count)`` summed over all replicas (replica context).

        One batched all-reduce for the whole window; nothing is communicated when there is a
        single replica.
        """
        sums = [b.read_value() for b in self.sums]
        count = self.sample_count.read_value()
        ctx = tf.distribute.get_replica_context()
        if ctx is not None and ctx.num_replicas_in_sync > 1:
            reduced = ctx.all_reduce(tf.distribute.ReduceOp.SUM, sums + [count])
            sums, count = list(reduced[:-1]), reduced[-1]
        return sums, count

    def window_gradients(self) -> List[Tuple[Any, Any]]:
        """The window's gradient, ``[(g, variable)]`` (replica context, one all-reduce).

        ``g = R · Σ_replicas sums / Σ_replicas sample_count`` in the variable's dtype, for the
        connected variables only (:meth:`connected_only`), where ``R`` is the number of replicas.
        Both callers add ``w · g`` and ``w`` on every replica, with gradients that sum (not
        average) over replicas: the model engine adds each replica's own sample count with
        Keras' per-replica loss (``local mean / R``); the optimizer wrapper adds the global
        micro-batch count with ``compute_average_loss(global_batch_size=n)``. Either way the
        result is ``Σ_i n_i ḡ_i / Σ_i n_i``, the mean gradient over all samples of the window.
        """
        sums, count = self.reduce_window()
        ctx = tf.distribute.get_replica_context()
        replicas = ctx.num_replicas_in_sync if ctx is not None else 1
        grads_and_vars = []
        for grad_sum, variable in zip(sums, self.accumulated_variables):
            scale = tf.cast(replicas, grad_sum.dtype) / tf.cast(count, grad_sum.dtype)
            grads_and_vars.append((tf.cast(grad_sum * scale, variable.dtype), variable))
        return self.connected_only(grads_and_vars)

    def reset(self) -> Any:
        """Zeroes the buffers and the sample count (replica context)."""
        ops = [b.assign(tf.zeros_like(b)) for b in self.sums]
        ops.append(self.sample_count.assign(0.0))
        return tf.group(ops)


def _local_component(buffer: Any) -> Any:
    """This replica's copy of a replica-local buffer (``ON_READ`` distributed variables do not
    support ``scatter_add`` themselves; their per-device components do)."""
    return _tf_keras_internals.local_component(buffer)


def _static_shape(variable: Any) -> Any:
    shape = variable.shape
    if not shape.is_fully_defined():
        raise ValueError(
            f"Cannot accumulate gradients of variable {variable.name!r} with shape {shape}: "
            "gradient accumulation needs fully defined variable shapes."
        )
    return shape
