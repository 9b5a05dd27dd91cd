"""Batch normalization for gradient accumulation: moving statistics of whole windows.

With gradient accumulation a BatchNormalization layer sees ``K`` micro-batches per optimizer
update. :class:`AccumBatchNormalization` keeps Keras' training forward pass (each micro-batch is
normalised with its own mean and variance: *ghost batch norm*, gradients through the batch
statistics exactly as in ``keras.layers.BatchNormalization``), but updates ``moving_mean`` and
``moving_variance`` once per window, with the mean and variance of *all* samples of the window:
the update one Keras BatchNormalization layer would make on the concatenated window (the spread
between micro-batch means included).

How the window statistics are kept
----------------------------------
Per channel, the layer accumulates the sample count ``n``, the sum ``Σx`` and ``M2 = Σ(x - x̄)²``
(the sum of squared deviations from the running mean) in float32 (float64 for float64 layers).
Micro-batches are merged with Chan et al.'s parallel formula::

    M2 = M2_a + M2_b + (x̄_b - x̄_a)² · n_a · n_b / (n_a + n_b)

which stays accurate when micro-batch means differ by orders of magnitude more than their
spread (a plain ``Σx²`` would cancel catastrophically in float32). Replicas merge the same way:
one all-reduce of ``(n, Σx)`` gives the global mean, a second one sums each replica's ``M2``
plus ``n_r · (x̄_r - x̄)²``.

Who ends a window
-----------------
* Trained by a ga-tfx front-end (:func:`ga_tfx.wrap_model`,
  :class:`ga_tfx.GradientAccumulateModel`, ``TrainingLoop``, or
  :class:`ga_tfx.GradientAccumulateOptimizer`, which finds the layers whose ``gamma``/``beta``
  it updates: :func:`layers_trained_with`): the front-end attaches the layer to its core
  (:meth:`AccumBatchNormalization.ga_attach_to_engine`) and calls
  :meth:`AccumBatchNormalization.ga_window_end` once per window, in replica context, after the
  optimizer update. The model's windows win over the layer's own ``accum_steps`` (a warning says
  so when they differ), including short last windows (``partial_window="apply"`` updates with
  the samples it has; ``"drop"`` discards them). Statistics stay replica-local until the window
  ends: one small all-reduce per layer and update.
* Standalone (any other Keras model, plain ``fit`` or a custom loop): the layer counts its own
  training calls and updates every ``accum_steps`` of them. Under a multi-replica strategy each
  call all-reduces its micro-batch statistics (small per-channel vectors), so that the update,
  taken conditionally, never needs a collective inside a conditional.
  With ``accum_steps=1`` the layer *is* ``keras.layers.BatchNormalization``.

:func:`ga_tfx.replace_batchnorm_layers` (in :mod:`ga_tfx.conversion`) turns the
BatchNormalization layers of an existing Functional or Sequential model (nested models included)
into :class:`AccumBatchNormalization` layers, keeping all weights and statistics.
"""

from ga_tfx import _tf_keras_internals as internals
from ga_tfx import _validation
from ga_tfx._keras import keras, tf
from ga_tfx._state import Untracked, attach_state

import contextlib
import warnings
import weakref
from typing import Any, Iterator, List, Optional, Sequence, Tuple, Union

_ON_READ = tf.VariableSynchronization.ON_READ
_SUM = tf.VariableAggregation.SUM

# Every built AccumBatchNormalization layer of the process (weakly held): how a front-end that
# is given variables, not a model (the optimizer wrapper), finds the layers it trains.
_BUILT: "weakref.WeakSet[AccumBatchNormalization]" = weakref.WeakSet()
# Training calls run eagerly by layers on their own, numbered (the last number given).
_EAGER_CALLS = [0]


def eager_calls_so_far() -> int:
    """The serial of the last training call an :class:`AccumBatchNormalization` layer ran
    eagerly on its own (to pass as ``since`` to :func:`layers_trained_with`)."""
    return _EAGER_CALLS[0]


def layers_trained_with(variables: Sequence[Any], since: int) -> List["AccumBatchNormalization"]:
    """The built :class:`AccumBatchNormalization` layers with a trainable weight (``gamma`` or
    ``beta``) among ``variables``: the layers a front-end updating ``variables`` trains, in
    the order of their first such variable. A layer without trainable weights (``center`` and
    ``scale`` both off, or ``trainable=False``) is not found.

    Called at the front-end's first update, after the layer's first training call: that call
    ran on the layer's own clock. Run eagerly (serial after ``since``, see
    :func:`eager_calls_so_far`), it already updated the moving statistics (``accum_steps=1``)
    or, under several replicas, added all replicas' statistics to each replica's window: then
    ``RuntimeError`` naming ``window_layers``. (Traced, as in a ``tf.function`` step, the
    step is traced again once the layer is found; a graph traced before refuses to run.)
    """
    position = {variable.ref(): i for i, variable in enumerate(variables)}
    found = []
    for layer in list(_BUILT):
        places = [position[w.ref()] for w in layer.trainable_weights if w.ref() in position]
        if places:
            found.append((min(places), layer))
    layers = [layer for _, layer in sorted(found, key=lambda pair: pair[0])]
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    for layer in layers:
        if layer._last_eager_call > since and (not layer._accumulates() or replicas > 1):
            raise RuntimeError(
                f"AccumBatchNormalization layer {layer.name!r} trained a micro-batch eagerly "
                "on its own before the GradientAccumulateOptimizer that trains it found it (at "
                "its first apply_gradients), so its moving statistics would not be those of "
                "the windows. Pass the model as GradientAccumulateOptimizer(..., "
                "window_layers=model): its windows then drive the layer from the first call."
            )
    return layers


@keras.saving.register_keras_serializable(package="ga_tfx")
class AccumBatchNormalization(keras.layers.BatchNormalization):
    """BatchNormalization whose moving statistics are those of whole accumulation windows.

    Training (``training=True`` and ``trainable=True``): the output is exactly Keras'
    BatchNormalization training output for the micro-batch it is called on, normalised with that
    micro-batch's own mean and variance (ghost batch norm; gradients flow through the batch
    statistics as in Keras). The moving statistics are *not* updated per call. Instead the layer
    accumulates the window's per-channel sample count, sum and sum of squared deviations, and at
    the end of the window updates, once::

        moving_mean     <- moving_mean     - (moving_mean     - window_mean)     * (1 - momentum)
        moving_variance <- moving_variance - (moving_variance - window_variance) * (1 - momentum)

    where ``window_mean``/``window_variance`` are over all samples of the window, on all
    replicas: what one Keras BatchNormalization update on the concatenated window would give.
    Like Keras, ``window_variance`` is the biased variance (``M2 / n``) for the non-fused
    implementation and the Bessel-corrected one (``M2 / (n - 1)``) when the layer is fused (4D
    or 5D inputs with the channel on axis 1 or the last axis), which is what Keras' fused kernel
    feeds its moving average. Channels that saw no sample in a window are left unchanged.

    The window ends when the ga-tfx accumulation model training the layer says so (see the
    module docstring), or, standalone, after ``accum_steps`` training calls.

    Inference (``training=False``, or ``trainable=False`` which, as in Keras, forces inference
    mode): normalises with ``moving_mean``/``moving_variance`` and accumulates nothing.

    The accumulation state (count, sum and M2 per channel and the micro-step counter) is not a
    Keras weight: it is absent from ``layer.weights``, ``model.get_weights()`` and serving
    signatures, but is saved by ``tf.train.Checkpoint`` (and ``BackupAndRestore``), so a run
    interrupted mid-window resumes with what it had accumulated. (Under several replicas a
    restored partial window keeps its counts and sums exactly, but its ``M2`` loses the
    between-replica part. ga-tfx models never checkpoint a partial window unless
    ``partial_window="carry"``.)

    Args:
      accum_steps: ``K``, micro-batches per window when the layer is used standalone; an
        integer >= 1 (default 1: plain Keras BatchNormalization). A ga-tfx accumulation model
        training the layer uses its own ``accum_steps`` instead.
      axis, momentum, epsilon, center, scale, beta_initializer, gamma_initializer,
        moving_mean_initializer, moving_variance_initializer, beta_regularizer,
        gamma_regularizer, beta_constraint, gamma_constraint, synchronized, **kwargs: as
        ``keras.layers.BatchNormalization`` (same defaults). ``synchronized=True`` only changes
        the training forward (cross-replica batch statistics); the moving statistics are those
        of the window either way. ``renorm`` and ``virtual_batch_size`` are not supported.

    Input shape:
      Arbitrary rank ``>= 2``, samples on axis 0; the ``axis`` dimension(s) must be known.

    Output shape:
      Same as the input.
    """

    def __init__(
        self,
        accum_steps: int = 1,
        axis: Union[int, Sequence[int]] = -1,
        momentum: float = 0.99,
        epsilon: float = 1e-3,
        center: bool = True,
        scale: bool = True,
        beta_initializer: Any = "zeros",
        gamma_initializer: Any = "ones",
        moving_mean_initializer: Any = "zeros",
        moving_variance_initializer: Any = "ones",
        beta_regularizer: Any = None,
        gamma_regularizer: Any = None,
        beta_constraint: Any = None,
        gamma_constraint: Any = None,
        synchronized: bool = False,
        **kwargs: Any,
    ) -> None:
        accum_steps = _validation.check_accum_steps(accum_steps)
        _check_supported_options(kwargs)
        super().__init__(
            axis=axis,
            momentum=momentum,
            epsilon=epsilon,
            center=center,
            scale=scale,
            beta_initializer=beta_initializer,
            gamma_initializer=gamma_initializer,
            moving_mean_initializer=moving_mean_initializer,
            moving_variance_initializer=moving_variance_initializer,
            beta_regularizer=beta_regularizer,
            gamma_regularizer=gamma_regularizer,
            beta_constraint=beta_constraint,
            gamma_constraint=gamma_constraint,
            synchronized=synchronized,
            **kwargs,
        )
        self.accum_steps = accum_steps
        self._engine_accum_steps: Optional[int] = None
        self._keras_updates_deferred = False
        # Held outside Keras' attribute tracking, so the buffers are not layer weights; the
        # checkpoint dependency is added in `build` (see `_set_window_moments`).
        self._window_holder = Untracked()
        # Set (at run time) once a front-end ends this layer's windows: a graph traced before
        # then (standalone) refuses to run after it (see _refuse_if_driven).
        self._driven_holder = Untracked()
        # The serial (_EAGER_CALLS) of the last training call run eagerly on its own (0: none).
        self._last_eager_call = 0

    # ------------------------------------------------------------------ state
    @property
    def window_moments(self) -> Optional["WindowMoments"]:
        """The :class:`WindowMoments` of the current window (``None`` until built)."""
        return self._window_holder.value

    def build(self, input_shape: Any) -> None:
        super().build(input_shape)
        self._set_window_moments(
            WindowMoments(internals.bn_param_shape(self), self._stats_dtype, name="window_moments")
        )
        with tf.init_scope():
            self._driven_holder.value = tf.Variable(
                self._engine_accum_steps is not None,
                trainable=False,
                synchronization=_ON_READ,
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
                name="driven",
            )
        _BUILT.add(self)

    @property
    def _built_window_moments(self) -> "WindowMoments":
        """The window moments of the built layer (internal use, after ``build``)."""
        return self._window_holder.value

    def _set_window_moments(self, moments: "WindowMoments") -> None:
        attach_state(self, self._window_holder, moments, "ga_window_moments")

    @property
    def _stats_dtype(self) -> tf.DType:
        return tf.float64 if internals.bn_param_dtype(self) == tf.float64 else tf.float32

    # ------------------------------------------------------------------ engine protocol
    def ga_attach_to_engine(self, accum_steps: int) -> None:
        """Called by a ga-tfx accumulation model before it builds its train function.

        From then on the model ends this layer's windows (:meth:`ga_window_end`); its
        ``accum_steps`` replaces the layer's own, with a warning when they differ. Training
        calls made outside that model's ``fit`` (e.g. ``model(x, training=True)``) then add to
        the model's current window too.
        """
        accum_steps = _validation.check_accum_steps(accum_steps)
        if accum_steps != self.accum_steps and accum_steps != self._engine_accum_steps:
            warnings.warn(
                f"AccumBatchNormalization layer {self.name!r} has accum_steps="
                f"{self.accum_steps} but is trained by a gradient accumulation model with "
                f"accum_steps={accum_steps}: its moving statistics follow the model's windows "
                f"of {accum_steps} micro-batches.",
                stacklevel=2,
            )
        self._engine_accum_steps = accum_steps
        if self._driven_holder.value is not None:
            with tf.init_scope():  # now, once: not an op of the graph being traced
                driven = self._driven_holder.value
                strategy = getattr(driven, "distribute_strategy", tf.distribute.get_strategy())
                for component in strategy.experimental_local_results(driven):
                    component.assign(True)

    def _refuse_if_driven(self) -> Any:
        """A training call traced on its own (no front-end then), run after a front-end took
        over this layer's windows: an error naming ``window_layers``, not wrong statistics.
        Records the serial of a call run eagerly (see :func:`layers_trained_with`)."""
        if tf.executing_eagerly():
            _EAGER_CALLS[0] += 1
            self._last_eager_call = _EAGER_CALLS[0]
        driven = self._driven_holder.value
        if driven is None or internals.traced_for_saving():  # (the flag is not exported)
            return tf.no_op()
        return tf.debugging.assert_equal(
            driven.read_value(),
            False,
            message=(
                f"AccumBatchNormalization layer {self.name!r}: this training step was traced "
                "before a gradient accumulation front-end took over the layer's windows, so it "
                "would update the moving statistics on its own clock. Pass the model to the "
                "front-end before the first training call (e.g. "
                "GradientAccumulateOptimizer(..., window_layers=model)), or trace the step again."
            ),
        )

    def ga_window_end(self, apply: bool = True) -> Any:
        """Ends the current window (replica context; every replica must call it).

        Args:
          apply: ``True``: update the moving statistics with the window's statistics, summed
            over all replicas, then clear the window. ``False``: only clear it (the window is
            discarded, e.g. ``partial_window="drop"``).

        Returns:
          An op to depend on.
        """
        moments = self.window_moments
        if moments is None:
            return tf.no_op()
        if not apply:
            return moments.reset()
        return self._apply_window(*_all_reduce_moments(*moments.read()))

    def _apply_window(self, count: tf.Tensor, total: tf.Tensor, m2: tf.Tensor) -> tf.Operation:
        with tf.control_dependencies([self._update_moving_statistics(count, total, m2)]):
            return self._built_window_moments.reset()

    # ------------------------------------------------------------------ forward
    # Written without Python control flow on tensors, so not converted by autograph (Keras
    # converts a layer's call under a tf.function): its conversion, with the methods it calls,
    # was 0.35 s of the main job's Trainer.
    @tf.autograph.experimental.do_not_convert
    def call(self, inputs: Any, training: Any = None, mask: Any = None) -> Any:
        if not self._accumulates():
            outputs = super().call(inputs, training=training, mask=mask)
            super().add_update(
                lambda: internals.smart_cond(
                    internals.bn_training_value(self, training),
                    self._refuse_if_driven,
                    tf.no_op,
                )
            )
            return outputs
        training = internals.bn_training_value(self, training)
        with self._defer_keras_updates():
            outputs = super().call(inputs, training=training, mask=mask)
        training_value = internals.constant_value(training)
        if training_value is not None and not training_value:
            return outputs
        stats_mask = None if self.fused else mask  # fused Keras BN ignores masks too
        super().add_update(
            lambda: internals.smart_cond(
                training,
                lambda: self._record_micro_batch(inputs, stats_mask),
                lambda: tf.constant(False),
            )
        )
        return outputs

    def add_update(self, updates: Any) -> None:
        """Keras' per-call moving-average updates are dropped while windows accumulate."""
        if self._keras_updates_deferred:
            return
        super().add_update(updates)

    @contextlib.contextmanager
    def _defer_keras_updates(self) -> Iterator[None]:
        self._keras_updates_deferred = True
        try:
            yield
        finally:
            self._keras_updates_deferred = False

    def _accumulates(self) -> bool:
        return self._engine_accum_steps is not None or self.accum_steps > 1

    def _record_micro_batch(self, inputs: tf.Tensor, mask: Any) -> tf.Tensor:
        """Adds one micro-batch to the window (replica context); returns whether it applied."""
        moments = self._built_window_moments
        batch = self._micro_batch_moments(inputs, mask)
        standalone = self._engine_accum_steps is None
        checks = []
        if standalone:
            checks.append(self._refuse_if_driven())
            # The update below is conditional, so the collective has to happen here.
            batch = _all_reduce_moments(*batch)
        with tf.control_dependencies(checks + [moments.add(*batch)]):
            steps = moments.micro_steps.assign_add(1)
        if not standalone:
            return tf.constant(False)
        return tf.cond(
            steps >= self.accum_steps, self._apply_own_window, lambda: tf.constant(False)
        )

    def _apply_own_window(self) -> tf.Tensor:
        # Standalone: the moments already cover all replicas; no collective in this branch.
        with tf.control_dependencies([self._apply_window(*self._built_window_moments.read())]):
            return tf.constant(True)

    def _micro_batch_moments(
        self, inputs: tf.Tensor, mask: Any
    ) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """Per-channel ``(count, sum, M2)`` of one micro-batch, shaped like the parameters."""
        x = tf.stop_gradient(tf.cast(inputs, self._stats_dtype))
        axes = [i for i in range(x.shape.rank) if i not in self.axis]
        if mask is None:
            per_channel = tf.size(x, out_type=tf.int64) // tf.size(
                self.moving_mean, out_type=tf.int64
            )
            total = tf.reduce_sum(x, axes, keepdims=True)
            count = tf.fill(tf.shape(total), tf.cast(per_channel, x.dtype))
            mean = tf.math.divide_no_nan(total, count)
            m2 = tf.reduce_sum(tf.math.squared_difference(x, mean), axes, keepdims=True)
        else:
            weights = tf.broadcast_to(tf.expand_dims(tf.cast(mask, x.dtype), -1), tf.shape(x))
            count = tf.reduce_sum(weights, axes, keepdims=True)
            total = tf.reduce_sum(weights * x, axes, keepdims=True)
            mean = tf.math.divide_no_nan(total, count)
            m2 = tf.reduce_sum(weights * tf.math.squared_difference(x, mean), axes, keepdims=True)
        shape = internals.bn_param_shape(self)
        return tf.reshape(count, shape), tf.reshape(total, shape), tf.reshape(m2, shape)

    def _update_moving_statistics(
        self, count: tf.Tensor, total: tf.Tensor, m2: tf.Tensor
    ) -> tf.Operation:
        """One Keras momentum update with the window's mean and variance (replica context)."""
        mean = tf.math.divide_no_nan(total, count)
        # Keras' fused kernel averages the Bessel-corrected batch variance, the non-fused
        # implementation the biased one.
        divisor = tf.maximum(count - 1.0, 1.0) if self.fused else count
        variance = tf.math.divide_no_nan(m2, divisor)
        return tf.group(
            internals.bn_assign_moving_average(self, self.moving_mean, mean, self.momentum, count),
            internals.bn_assign_moving_average(
                self, self.moving_variance, variance, self.momentum, count
            ),
        )

    # ------------------------------------------------------------------ serialization
    def get_config(self) -> dict:
        config = super().get_config()
        config["accum_steps"] = self.accum_steps
        return config


class WindowMoments(tf.Module):
    """Per-channel ``count``, ``total = Σx`` and ``m2 = Σ(x - x̄)²`` of one window, plus the
    number of micro-batches added (``micro_steps``).

    ``count``, ``total`` and ``m2`` are additive across replicas (replica-local ``ON_READ``
    variables with ``SUM`` aggregation, as :class:`ga_tfx.GradientAccumulator`'s buffers);
    :meth:`add` merges a micro-batch with Chan's parallel formula.

    Args:
      shape: the shape of the statistics (the layer's parameter shape).
      dtype: float32 (float64 for float64 layers).
      name: module name.
    """

    def __init__(self, shape: Sequence[int], dtype: tf.DType, name: str = "window_moments") -> None:
        super().__init__(name=name)
        with tf.init_scope(), tf.name_scope(name):
            self.count = _replica_local_zeros(shape, dtype, "count")
            self.total = _replica_local_zeros(shape, dtype, "total")
            self.m2 = _replica_local_zeros(shape, dtype, "m2")
            self.micro_steps = tf.Variable(
                0,
                dtype=tf.int64,
                trainable=False,
                synchronization=_ON_READ,
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
                name="micro_steps",
            )

    def read(self) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """This replica's ``(count, total, m2)``."""
        return self.count.read_value(), self.total.read_value(), self.m2.read_value()

    def add(self, count: tf.Tensor, total: tf.Tensor, m2: tf.Tensor) -> tf.Operation:
        """Merges a micro-batch's ``(count, total, m2)`` into the window (replica context)."""
        merged = _merge_moments(self.read(), (count, total, m2))
        return tf.group(
            [v.assign(value) for v, value in zip((self.count, self.total, self.m2), merged)]
        )

    def reset(self) -> tf.Operation:
        """Empties the window (replica context)."""
        return tf.group(
            [v.assign(tf.zeros_like(v)) for v in (self.count, self.total, self.m2)]
            + [self.micro_steps.assign(0)]
        )


def _replica_local_zeros(shape: Sequence[int], dtype: tf.DType, name: str) -> tf.Variable:
    return tf.Variable(
        tf.zeros(shape, dtype),
        trainable=False,
        synchronization=_ON_READ,
        aggregation=_SUM,
        name=name,
    )


def _merge_moments(a: Tuple[Any, Any, Any], b: Tuple[Any, Any, Any]) -> Tuple[Any, Any, Any]:
    """Chan et al.'s merge of two ``(count, total, m2)`` triples (either may be empty)."""
    count_a, total_a, m2_a = a
    count_b, total_b, m2_b = b
    count = count_a + count_b
    delta = tf.math.divide_no_nan(total_b, count_b) - tf.math.divide_no_nan(total_a, count_a)
    between = tf.square(delta) * count_a * tf.math.divide_no_nan(count_b, count)
    return count, total_a + total_b, m2_a + m2_b + between


def _all_reduce_moments(count: Any, total: Any, m2: Any) -> Tuple[Any, Any, Any]:
    """``(count, total, m2)`` over all replicas (replica context); as is on one replica."""
    ctx = tf.distribute.get_replica_context()
    if ctx is None or ctx.num_replicas_in_sync == 1:
        return count, total, m2
    sum_ = tf.distribute.ReduceOp.SUM
    global_count, global_total = ctx.all_reduce(sum_, [count, total])
    deviation = tf.math.divide_no_nan(total, count) - tf.math.divide_no_nan(
        global_total, global_count
    )
    global_m2 = ctx.all_reduce(sum_, m2 + count * tf.square(deviation))
    return global_count, global_total, global_m2


def _check_supported_options(kwargs: dict) -> None:
    if kwargs.get("renorm"):
        raise ValueError(
            "AccumBatchNormalization does not support renorm=True (batch renormalization keeps "
            "its own per-step moving averages). Use keras.layers.BatchNormalization."
        )
    if kwargs.get("virtual_batch_size") is not None:
        raise ValueError(
            "AccumBatchNormalization does not support virtual_batch_size: the micro-batches "
            "already are the ghost batches. Choose the micro-batch size instead."
        )
