"""The layer :class:`AccumBatchNormalization` (see :mod:`ga_tfx.batchnorm`)."""

from ga_tfx import _tf_keras_internals as internals
from ga_tfx._keras import keras, tf
from ga_tfx._state import Untracked, attach_state
from ga_tfx.batchnorm import registry
from ga_tfx.batchnorm.moments import WindowMoments, all_reduce_moments

import contextlib
from typing import Any, Iterator, Optional, Sequence, Tuple, Union

_ON_READ = tf.VariableSynchronization.ON_READ


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

    The window ends when the ga-tfx front-end training the layer says so (see the module
    docstring): the layer carries no K of its own. Trained by anything else (plain ``fit``, a
    custom loop without the optimizer wrapper) it is ``keras.layers.BatchNormalization``: its
    moving statistics advance once per training call. (A layer that counts its own windows of K
    training calls: ``ga_tfx.compat.gradient_accumulator.layers.AccumBatchNormalization``.)

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
      axis, momentum, epsilon, center, scale, beta_initializer, gamma_initializer,
        moving_mean_initializer, moving_variance_initializer, beta_regularizer,
        gamma_regularizer, beta_constraint, gamma_constraint, synchronized, **kwargs: as
        ``keras.layers.BatchNormalization``, in its order and with its defaults (a drop-in
        replacement: ``AccumBatchNormalization(1)`` is ``axis=1``). ``synchronized=True`` only
        changes the training forward (cross-replica batch statistics); the moving statistics
        are those of the window either way. ``renorm`` and ``virtual_batch_size`` are not
        supported; nor is ``accum_steps`` (``TypeError``: a front-end ends the windows).

    Input shape:
      Arbitrary rank ``>= 2``, samples on axis 0; the ``axis`` dimension(s) must be known.

    Output shape:
      Same as the input.
    """

    def __init__(
        self,
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
        self._driven = False  # a front-end ends this layer's windows (ga_attach_to_engine)
        self._keras_updates_deferred = False
        # Held outside Keras' attribute tracking, so the buffers are not layer weights; the
        # checkpoint dependency is added in `build` (see `_set_window_moments`).
        self._window_holder = Untracked()
        # Set (at run time) once a front-end ends this layer's windows: a graph traced before
        # then (on its own) refuses to run after it (see _refuse_if_driven).
        self._driven_holder = Untracked()
        # The serials (registry.next_eager_call) of the last training call run eagerly on its
        # own, and of the last one run or traced on its own (0: none).
        self._last_eager_call = 0
        self._last_training_call = 0

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
                self._driven,
                trainable=False,
                synchronization=_ON_READ,
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
                name="driven",
            )
        registry.register(self)

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
    def ga_attach_to_engine(self) -> None:
        """Called by a ga-tfx front-end (its window core) before it builds its train function.

        From then on the front-end ends this layer's windows (:meth:`ga_window_end`), whatever
        their K; the layer counts nothing itself.
        Training calls made outside that front-end's training (e.g. ``model(x,
        training=True)``) then add to its current window too.
        """
        self._driven = True
        if self._driven_holder.value is not None:
            with tf.init_scope():  # now, once: not an op of the graph being traced
                driven = self._driven_holder.value
                strategy = getattr(driven, "distribute_strategy", tf.distribute.get_strategy())
                for component in strategy.experimental_local_results(driven):
                    component.assign(True)

    def _refuse_if_driven(self) -> Any:
        """A training call traced on its own (no front-end then), run after a front-end took
        over this layer's windows: an error naming ``window_layers``, not wrong statistics.
        Records the serial of the call, run eagerly or traced (see
        :func:`layers_trained_with`)."""
        saving = internals.traced_for_saving()  # (the flag is not exported)
        if not saving:
            self._last_training_call = registry.next_eager_call()
            if tf.executing_eagerly():
                self._last_eager_call = self._last_training_call
        driven = self._driven_holder.value
        if driven is None or saving:
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
        return self._fold_window(*all_reduce_moments(*moments.read()))

    def _fold_window(self, count: tf.Tensor, total: tf.Tensor, m2: tf.Tensor) -> tf.Operation:
        """Folds the window's ``(count, total, m2)`` into the moving statistics (one Keras
        momentum update), then empties the window."""
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
        """Whether training calls add to a window (instead of Keras' per-call update): once a
        front-end drives the layer (the compat layer also when it counts its own windows)."""
        return self._driven

    def _record_micro_batch(self, inputs: tf.Tensor, mask: Any) -> tf.Tensor:
        """Adds one micro-batch to the window the front-end ends (replica context); returns
        whether the layer ended a window itself: never here."""
        self._add_to_window(self._micro_batch_moments(inputs, mask))
        return tf.constant(False)

    def _add_to_window(
        self, batch: Tuple[tf.Tensor, tf.Tensor, tf.Tensor], checks: Sequence[Any] = ()
    ) -> tf.Tensor:
        """Adds a micro-batch's per-channel ``(count, sum, M2)`` to the window, after
        ``checks``; returns the window's micro-batch count, this one included."""
        moments = self._built_window_moments
        with tf.control_dependencies(list(checks) + [moments.add(*batch)]):
            return moments.micro_steps.assign_add(1)

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


def own_windows_refused(what: str, accum_steps: Any, instead: str) -> TypeError:
    """The error for a K given to ``what``, which carries none (a front-end ends the windows);
    ``instead`` is the ``ga_tfx.compat`` call whose layers count their own windows."""
    return TypeError(
        f"{what} takes no accum_steps (got {accum_steps!r}): the ga-tfx front-end that trains "
        "the layers (wrap_model, GradientAccumulateModel, GradientAccumulateOptimizer, "
        "TrainingLoop) ends their windows, with its own K. For layers that count their own "
        f"windows of K training calls, use {instead}."
    )


def _check_supported_options(kwargs: dict) -> None:
    if "accum_steps" in kwargs:
        raise own_windows_refused(
            "AccumBatchNormalization",
            kwargs["accum_steps"],
            "ga_tfx.compat.gradient_accumulator.layers.AccumBatchNormalization(accum_steps=K)",
        )
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
