"""A training loop for custom-loop users, with exact gradient accumulation built in.

:class:`TrainingLoop` is the shape of the usual ``MirroredStrategy`` custom loop (a model, an
optimizer, a loss, a dataset, ``strategy.run``) without its boilerplate::

    strategy = tf.distribute.MirroredStrategy()          # or None: one device
    with strategy.scope():
        model = build_model()                             # built: its variables exist
        optimizer = ga_tfx.keras.optimizers.Adam(1e-3)
    loop = ga_tfx.TrainingLoop(
        model, optimizer,
        loss_fn=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="none"),          # per-example losses
        dataset=micro_batches,                            # tf.data.Dataset of (x, y) batches
        accum_steps=8, strategy=strategy,
        clip_global_norm=1.0, checkpoint_dir="ckpt", checkpoint_every_n_updates=100,
        log_dir="logs")
    loop.run(epochs=3)

How it works
------------
The dataset yields *global micro-batches* (split across replicas by the strategy). One call of
a traced function runs one window: up to ``accum_steps`` micro-batches, each through
``strategy.run`` (forward, loss, backward; ``n · g`` added to replica-local float32 buffers of a
:class:`ga_tfx.GradientAccumulator`, ``n`` the replica's samples), then one batched all-reduce
of the buffers, the sample count and the loss, the window gradient
``g = Σ n_i g_i / Σ n_i + ∇R`` (``R``: the regularisation losses, counted once per update), the
gradient chain (:mod:`ga_tfx.transforms`: non-finite guard, ``clip_global_norm``, then
``transforms`` in order) and one ``optimizer.apply_gradients``. So the update is that of
big-batch training on all samples of the window, also for uneven micro-batches and a short last
window of an epoch (weighted by samples). Windows do not span epochs.

The only conditional is the non-finite guard's decision (``nonfinite_policy="skip"``): it is
taken in cross-replica context on the all-reduced gradient (the same value on every replica and
worker), so no ``merge_call`` runs inside a conditional.

Counters: an *update* is one applied optimizer step (``optimizer.iterations`` advances by one);
a skipped window is not an update. Every "every N" and "at N" counts updates.
"""

from ga_tfx import _validation
from ga_tfx._keras import keras, tf
from ga_tfx._schema import Spec
from ga_tfx.accumulator import GradientAccumulator
from ga_tfx.engine.loop import xla_step
from ga_tfx.engine.step import apply_aggregated_gradients, batch_size
from ga_tfx.transforms import Member, NonFiniteGuard, global_norm, make_chain

import shutil
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union, cast

_JIT_COMPILE = Spec(bool, "compile the per-replica steps with XLA")
_ON_READ = tf.VariableSynchronization.ON_READ
_FIRST = tf.VariableAggregation.ONLY_FIRST_REPLICA

# Metrics of each finished window, in console order (TensorBoard tags are "train/<name>").
LOG_KEYS = (
    "loss",
    "grad_norm",
    "grad_norm_clipped",
    "learning_rate",
    "skipped_windows",
    "samples_per_second",
)


class NonFiniteGradientError(RuntimeError):
    """Raised when ``max_consecutive_skips`` windows in a row had a non-finite gradient."""


class UpdateCallback:
    """Calls ``fn(loop, logs)`` on optimizer updates, never on micro-steps.

    Exactly one trigger:
      every_n_updates: after updates N, 2N, 3N, ... (``loop.updates % N == 0``).
      at_update: once, after update ``N``.
      at_end: once, when :meth:`TrainingLoop.run` returns (also when it stops early through
        ``max_updates``, ``max_micro_batches`` or ``stop_training``; not when it raises).

    ``logs`` is the window's dict (keys :data:`LOG_KEYS` plus ``update``, ``window``,
    ``samples``). Subclasses may override :meth:`on_update_end` / :meth:`on_train_end` instead.
    A callback may change ``loop.learning_rate`` or set ``loop.stop_training = True``.
    """

    def __init__(
        self,
        fn: Optional[Callable[["TrainingLoop", dict], Any]] = None,
        *,
        every_n_updates: Optional[int] = None,
        at_update: Optional[int] = None,
        at_end: bool = False,
    ):
        triggers = [every_n_updates is not None, at_update is not None, bool(at_end)]
        if fn is not None and sum(triggers) != 1:
            raise ValueError(
                "UpdateCallback needs exactly one trigger: every_n_updates=N, at_update=N or "
                f"at_end=True; got every_n_updates={every_n_updates!r}, "
                f"at_update={at_update!r}, at_end={at_end!r}."
            )
        self.fn = fn
        self.every_n_updates = (
            None
            if every_n_updates is None
            else _validation.check_accum_steps(every_n_updates, "every_n_updates")
        )
        self.at_update = (
            None if at_update is None else _validation.check_accum_steps(at_update, "at_update")
        )
        self.at_end = bool(at_end)

    def on_update_end(self, loop: "TrainingLoop", logs: dict) -> None:
        if self.fn is None:
            return
        update = loop.updates
        if (self.every_n_updates is not None and update % self.every_n_updates == 0) or (
            self.at_update is not None and update == self.at_update
        ):
            self.fn(loop, logs)

    def on_train_end(self, loop: "TrainingLoop", logs: dict) -> None:
        if self.fn is not None and self.at_end:
            self.fn(loop, logs)


class LoopState(tf.Module):
    """The loop's counters and window loss, checkpointed with the model and optimizer.

    Attributes (int64 unless stated):
      epoch: the current epoch (0-based).
      position: micro-batches of the current epoch consumed so far (the data position).
      updates: optimizer updates applied by this loop.
      windows: windows finished (applied or skipped).
      loss_sum: float32, replica-local: ``Σ n · loss`` of the current window on this replica.
    """

    def __init__(self, name: str = "training_loop_state") -> None:
        super().__init__(name=name)
        with tf.name_scope(name):

            def counter(name: str) -> Any:
                return tf.Variable(
                    0, dtype=tf.int64, trainable=False, aggregation=_FIRST, name=name
                )

            self.epoch = counter("epoch")
            self.position = counter("position")
            self.updates = counter("updates")
            self.windows = counter("windows")
            self.loss_sum = tf.Variable(
                0.0,
                trainable=False,
                synchronization=_ON_READ,
                aggregation=tf.VariableAggregation.SUM,
                name="loss_sum",
            )


def _default_inputs(batch: Any) -> Any:
    return batch[0] if isinstance(batch, (tuple, list)) else batch


def _default_targets(batch: Any) -> Any:
    if not isinstance(batch, (tuple, list)) or len(batch) < 2:
        raise ValueError(
            "The default targets_fn takes the second element of an (inputs, targets) batch, got "
            f"a batch of type {type(batch).__name__}. Pass targets_fn=... (e.g. "
            "targets_fn=lambda batch: batch to give loss_fn the whole batch)."
        )
    return batch[1]


def _mean_loss(loss: Any, samples: Any) -> Any:
    """The batch's mean loss: ``loss`` itself when scalar, else per-example losses (leading axis
    = samples, other axes averaged) summed and divided by ``samples`` (0 for an empty batch)."""
    loss = tf.cast(loss, tf.float32)
    if loss.shape.rank == 0:
        return tf.where(samples > 0, loss, 0.0)
    if loss.shape.rank is None:
        raise ValueError("loss_fn must return a scalar or per-example losses of known rank.")
    if loss.shape.rank > 1:
        loss = tf.reduce_mean(loss, axis=list(range(1, loss.shape.rank)))
    return tf.math.divide_no_nan(tf.reduce_sum(loss), samples)


class TrainingLoop:
    """Runs ``model`` on micro-batches; one optimizer update per ``accum_steps`` of them.

    Args:
      model: a built Keras 2 model (its variables exist), created under ``strategy.scope()``.
      optimizer: a tf-keras optimizer (``keras.optimizers.*``; not a legacy optimizer, not a
        ``LossScaleOptimizer``), created under the same scope. Its ``iterations`` count
        updates; a learning-rate schedule sees one step per update. A constant learning rate
        is a variable: callbacks may set ``loop.learning_rate`` and checkpoints keep it.
      loss_fn: ``loss_fn(targets, outputs)``: per-example losses (shape ``[n]`` or
        ``[n, ...]``; e.g. a Keras loss with ``reduction="none"``, as tf.distribute requires) or
        the scalar mean over the ``n`` samples of the batch it is given. Never divide by the
        global batch size or the replica count: the loop weights each replica's mean by its
        samples. Regularisation is added by the loop (``regularization``).
      dataset: a ``tf.data.Dataset`` of micro-batches (global: the strategy splits each one
        across replicas), iterated once per epoch in the same order each time; or a callable
        ``epoch -> Dataset`` (e.g. to reshuffle per epoch). Resuming skips the micro-batches
        already consumed, so the order must be reproducible: a shuffle needs its own seed and
        must not depend on TensorFlow's global seed (``keras.utils.set_random_seed``, often
        called when building models, resets it). Under a multi-worker
        strategy an ``AUTO`` auto-shard policy is set to ``DATA`` (every worker reads the same
        micro-batches and takes its part of each).
      accum_steps: ``K``, micro-batches per update (int >= 1).
      strategy: a ``tf.distribute`` strategy (``MirroredStrategy``,
        ``MultiWorkerMirroredStrategy``) or ``None`` for the current (default) one.
      inputs_fn: ``batch -> model input``; default: ``batch[0]`` for a tuple/list batch, else
        the batch.
      targets_fn: ``batch -> targets`` given to ``loss_fn``; default ``batch[1]``. Use
        ``lambda batch: batch`` for a loss over (batch, outputs).
      variables: the trainable variables: a list, or ``model -> list``; default
        ``model.trainable_variables``.
      sample_count_fn: ``batch -> number of samples`` (the micro-batch's weight); default: the
        leading dimension of the model input.
      regularization: ``True`` (default): ``sum(model.losses)`` is added once per update (to
        the loss and, through its gradient, to the window gradient), not once per micro-batch;
        ``model.losses`` must then hold weight regularisers and other variable-only terms
        (input-dependent terms such as activity regularisers belong in ``loss_fn``). A callable
        ``model -> scalar`` replaces ``sum(model.losses)``; ``False``: none.
      nonfinite_policy: ``"skip"`` (default): a window whose gradient has NaN/inf is not applied
        (weights, optimizer slots and ``iterations`` unchanged), counted and logged;
        ``"zero"``: its non-finite entries are set to 0 and it is applied.
      max_consecutive_skips: raise :class:`NonFiniteGradientError` after this many non-finite
        windows in a row (default ``None``: never).
      clip_global_norm: clip the window gradient to this global L2 norm (``None``: off).
      transforms: further gradient transforms, applied in order after global-norm clipping:
        :class:`ga_tfx.transforms.GradientTransform` instances (e.g.
        ``ga_tfx.transforms.AdaptiveClipping(0.01)``) or ``(name, callable)`` pairs.
      callbacks: :class:`UpdateCallback` instances (or objects with ``on_update_end(loop,
        logs)`` / ``on_train_end(loop, logs)``), called in order.
      checkpoint_dir: directory of a ``tf.train.CheckpointManager`` (model, optimizer,
        accumulator, gradient chain, loop state). :meth:`run` restores its latest checkpoint
        first; a resumed run ends with the weights of an uninterrupted one. Only the chief
        (``strategy.extended.should_checkpoint``) writes there; other workers write to a
        temporary directory they delete. Every worker restores from it, so under a
        multi-worker strategy it must be shared storage (as for Keras' ``BackupAndRestore``).
        ``None``: no checkpoints.
      checkpoint_every_n_updates: save after every N updates (and always when :meth:`run`
        returns); ``None``: only when it returns.
      max_checkpoints_to_keep: the manager's ``max_to_keep`` (default 3).
      log_dir: TensorBoard directory (scalars ``train/<key>`` for :data:`LOG_KEYS`, step =
        updates); written by the chief only. ``None``: no TensorBoard. ``grad_norm`` is the
        window gradient's global norm before the chain, ``grad_norm_clipped`` after it;
        ``samples_per_second`` is the window's samples over the wall time since the previous
        window (the first window of a ``run`` includes tracing).
      log_every_n_windows: log every N finished windows (default 1).
      verbose: print the logs to the console (chief only; default ``True``).
      jit_compile: ``True`` compiles each replica-context step with XLA, as Keras compiles its
        ``train_step`` under ``compile(jit_compile=True)``: the micro-batch step (forward,
        loss, backward, accumulation), the window gradient (all-reduce, regularisation, the
        gradient chain) and the optimizer update. The loop around them (the dataset
        iterator, the skip decision) stays a ``tf.function``. An op XLA cannot compile raises
        when the first window is traced, as in plain Keras. Default ``False``.
    """

    def __init__(
        self,
        model: keras.Model,
        optimizer: Any,
        loss_fn: Callable,
        dataset: Any,
        accum_steps: int,
        *,
        strategy: Optional[tf.distribute.Strategy] = None,
        inputs_fn: Callable = _default_inputs,
        targets_fn: Callable = _default_targets,
        variables: Union[None, Sequence[tf.Variable], Callable] = None,
        sample_count_fn: Optional[Callable] = None,
        regularization: Union[bool, Callable] = True,
        nonfinite_policy: str = "skip",
        max_consecutive_skips: Optional[int] = None,
        clip_global_norm: Optional[float] = None,
        transforms: Sequence[Member] = (),
        callbacks: Sequence[Any] = (),
        checkpoint_dir: Optional[str] = None,
        checkpoint_every_n_updates: Optional[int] = None,
        max_checkpoints_to_keep: int = 3,
        log_dir: Optional[str] = None,
        log_every_n_windows: int = 1,
        verbose: bool = True,
        jit_compile: bool = False,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.accum_steps = _validation.check_accum_steps(accum_steps)
        self.strategy = strategy if strategy is not None else tf.distribute.get_strategy()
        self.inputs_fn, self.targets_fn = inputs_fn, targets_fn
        self.sample_count_fn = sample_count_fn
        self.max_consecutive_skips = (
            None
            if max_consecutive_skips is None
            else _validation.check_accum_steps(max_consecutive_skips, "max_consecutive_skips")
        )
        self.checkpoint_every_n_updates = (
            None
            if checkpoint_every_n_updates is None
            else _validation.check_accum_steps(
                checkpoint_every_n_updates, "checkpoint_every_n_updates"
            )
        )
        self.log_every_n_windows = _validation.check_accum_steps(
            log_every_n_windows, "log_every_n_windows"
        )
        self.verbose = bool(verbose)
        self.jit_compile = _JIT_COMPILE.check("jit_compile", jit_compile)
        self.callbacks = list(callbacks)
        self.stop_training = False
        self.history: List[dict] = []
        self._dataset = dataset
        self._whole_epoch: Any = None  # the distributed dataset of a whole epoch (made once)
        self._check_callables(
            loss_fn, dataset, inputs_fn, targets_fn, sample_count_fn, regularization
        )
        self._regularization = regularization
        self._check_optimizer(optimizer)

        if callable(variables):
            variables = variables(model)
        elif variables is None:  # an unbuilt Sequential raises on trainable_variables
            variables = model.trainable_variables if getattr(model, "built", True) else []
        # A callable `variables` has been called above: a sequence of variables is left.
        self.variables = list(cast(Sequence[tf.Variable], variables))
        if not self.variables:
            raise ValueError(
                "The model has no trainable variables: build it first (call it on a batch or "
                "give its Input shapes) and create it under strategy.scope()."
            )
        self._check_scope(self.variables + [optimizer.iterations])

        with self.strategy.scope():
            self.chain = make_chain(nonfinite_policy, clip_global_norm, transforms)
            self.chain.build(self.variables)
            self.accumulator = GradientAccumulator(self.variables, name="loop_accumulator")
            self.state = LoopState()
            optimizer.build(self.variables)  # slots exist before tracing and restoring
        # make_chain always includes the non-finite guard.
        self._guard = cast(NonFiniteGuard, self.chain.member(NonFiniteGuard))
        # The replica-context steps: one XLA computation each under jit_compile.
        step = xla_step if self.jit_compile else (lambda function: function)
        self._micro_step_fn = step(self._micro_step)
        self._window_gradient_fn = step(self._window_gradient)
        self._apply_fn = step(self._apply)
        self._window_fn = tf.function(self._window)
        self._restored = False
        self._last_time = 0.0

        self.checkpoint_dir = checkpoint_dir
        self._checkpoint = tf.train.Checkpoint(
            model=model,
            optimizer=optimizer,
            accumulator=self.accumulator,
            gradient_chain=self.chain,
            loop_state=self.state,
        )
        max_to_keep = _validation.check_accum_steps(
            max_checkpoints_to_keep, "max_checkpoints_to_keep"
        )
        self._manager = None  # the chief's; other workers write to temporary directories
        if checkpoint_dir is not None and self._is_chief("should_checkpoint"):
            self._manager = tf.train.CheckpointManager(
                self._checkpoint, checkpoint_dir, max_to_keep=max_to_keep
            )
        self._writer = (
            tf.summary.create_file_writer(log_dir)
            if log_dir is not None and self._is_chief("should_save_summary")
            else None
        )

    # ------------------------------------------------------------------ public state
    @property
    def updates(self) -> int:
        """Optimizer updates applied by this loop (restored from checkpoints)."""
        return int(self.state.updates.numpy())

    @property
    def windows(self) -> int:
        """Windows finished, applied or skipped."""
        return int(self.state.windows.numpy())

    @property
    def epoch(self) -> int:
        return int(self.state.epoch.numpy())

    @property
    def skipped_windows(self) -> int:
        """Windows skipped by the non-finite guard (0 under ``nonfinite_policy="zero"``)."""
        if self._guard.policy != "skip":
            return 0
        return int(self._guard.nonfinite_windows.numpy())

    @property
    def samples_seen(self) -> int:
        """Training samples accumulated so far (all replicas, skipped windows included)."""
        return self.accumulator.samples_seen_count()

    @property
    def learning_rate(self) -> float:
        """The optimizer's current learning rate; settable when it is not a schedule."""
        return float(tf.convert_to_tensor(self.optimizer.learning_rate))

    @learning_rate.setter
    def learning_rate(self, value: float) -> None:
        self.optimizer.learning_rate = value

    # ------------------------------------------------------------------ checkpoints
    def save(self) -> Optional[str]:
        """Writes a checkpoint now (mid-window state included); returns its path (chief) or
        ``None`` without ``checkpoint_dir``. Every worker must call it (reading replica-local
        buffers all-reduces them)."""
        if self._manager is not None:
            return self._manager.save()
        if self.checkpoint_dir is None:
            return None
        # Not the chief: the same collective reads, written to a directory deleted at once.
        temp_dir = tempfile.mkdtemp(prefix="ga_tfx_loop_worker_")
        try:
            tf.train.CheckpointManager(self._checkpoint, temp_dir, max_to_keep=1).save()
        finally:
            shutil.rmtree(temp_dir, ignore_errors=True)
        return None

    def restore(self) -> bool:
        """Restores the latest checkpoint of ``checkpoint_dir``; ``False`` if there is none."""
        self._restored = True
        latest = (
            tf.train.latest_checkpoint(self.checkpoint_dir)
            if self.checkpoint_dir is not None
            else None
        )
        if latest is None:
            return False
        self._checkpoint.restore(latest).assert_existing_objects_matched()
        return True

    # ------------------------------------------------------------------ the loop
    def run(
        self,
        epochs: int = 1,
        max_updates: Optional[int] = None,
        max_micro_batches: Optional[int] = None,
    ) -> dict:
        """Trains until ``epochs`` epochs are done (counted from the start of training, restored
        epochs included) or ``max_updates`` updates are reached.

        ``max_micro_batches`` stops after that many micro-batches of this call, possibly in the
        middle of a window (which is then checkpointed and completed by the next ``run``).
        Returns the logs of the last finished window (``{}`` if none).
        """
        epochs = _validation.check_accum_steps(epochs, "epochs")
        if not self._restored:
            self.restore()
        budget = (
            None
            if max_micro_batches is None
            else _validation.check_accum_steps(max_micro_batches, "max_micro_batches")
        )
        self.stop_training = False
        self._last_time = time.perf_counter()  # the first window's samples/s includes tracing
        logs: dict = {}
        while self.epoch < epochs and not self.stop_training:
            if max_updates is not None and self.updates >= max_updates:
                break
            iterator = iter(self._distributed_dataset())
            while not self.stop_training:
                if max_updates is not None and self.updates >= max_updates:
                    break
                pending = int(self.accumulator.micro_steps.numpy())
                wanted = self.accum_steps - pending
                finish = budget is None or budget >= wanted
                take = wanted if finish else cast(int, budget)  # not finish: budget is an int
                out = self._window_fn(iterator, tf.constant(take, tf.int64), finish)
                count = int(out["count"])
                if budget is not None:
                    budget -= count
                epoch_ended = count < take
                if epoch_ended and not finish:  # the data ended inside a partial window
                    out = self._window_fn(iterator, tf.constant(0, tf.int64), True)
                if bool(out["finished"]):
                    logs = self._end_window(out)
                if epoch_ended:
                    self.state.epoch.assign_add(1)
                    self.state.position.assign(0)
                    break
                if budget == 0:
                    self.stop_training = True
        self.save()
        for callback in self.callbacks:
            if hasattr(callback, "on_train_end"):
                callback.on_train_end(self, logs)
        return logs

    def _distributed_dataset(self) -> Any:
        """This epoch's distributed dataset, from the saved data position on.

        The distributed form of a fixed dataset is made once and iterated again each epoch:
        TensorFlow copies the tensors of a new dataset object (e.g. one ``from_tensor_slices``
        of in-memory data) when it is first iterated, so a new one per epoch would copy the data
        every epoch (measured: 24 MB, 2.6x an epoch's other tensor memory in the benchmark).
        """
        position = int(self.state.position.numpy())
        if callable(self._dataset):  # a dataset per epoch, by the user's choice
            return self._distribute(self._dataset(self.epoch), position)
        if position:  # resuming inside an epoch: once
            return self._distribute(self._dataset, position)
        if self._whole_epoch is None:
            self._whole_epoch = self._distribute(self._dataset, 0)
        return self._whole_epoch

    def _distribute(self, dataset: Any, position: int) -> Any:
        dataset = dataset.skip(position) if position else dataset
        policy = tf.data.experimental.AutoShardPolicy
        if dataset.options().experimental_distribute.auto_shard_policy == policy.AUTO:
            options = tf.data.Options()
            options.experimental_distribute.auto_shard_policy = policy.DATA
            dataset = dataset.with_options(options)
        return self.strategy.experimental_distribute_dataset(dataset)

    def _end_window(self, out: Dict[str, Any]) -> Dict[str, Any]:
        now = time.perf_counter()
        elapsed, self._last_time = now - self._last_time, now
        logs = {
            "update": self.updates,
            "window": self.windows,
            "applied": bool(out["applied"]),
            "samples": float(out["samples"]),
            "loss": float(out["loss"]),
            "grad_norm": float(out["grad_norm"]),
            "grad_norm_clipped": float(out["grad_norm_clipped"]),
            "learning_rate": self.learning_rate,
            "skipped_windows": self.skipped_windows,
            "nonfinite_windows": int(self._guard.nonfinite_windows.numpy()),
            "samples_per_second": float(out["samples"]) / max(elapsed, 1e-9),
        }
        self.history.append(logs)
        if logs["window"] % self.log_every_n_windows == 0:
            self._log(logs)
        consecutive = int(self._guard.consecutive_nonfinite.numpy())
        if self.max_consecutive_skips is not None and consecutive >= self.max_consecutive_skips:
            raise NonFiniteGradientError(
                f"{consecutive} consecutive windows had a non-finite gradient (NaN or inf), "
                f"max_consecutive_skips={self.max_consecutive_skips}; stopped at window "
                f"{logs['window']} after {logs['update']} updates."
            )
        if logs["applied"]:
            every = self.checkpoint_every_n_updates
            if every is not None and logs["update"] % every == 0:
                self.save()
            for callback in self.callbacks:
                if hasattr(callback, "on_update_end"):
                    callback.on_update_end(self, logs)
        return logs

    def _log(self, logs: Dict[str, Any]) -> None:
        if self._writer is not None:
            with self._writer.as_default():
                for key in LOG_KEYS:
                    tf.summary.scalar(f"train/{key}", logs[key], step=logs["update"])
            self._writer.flush()
        if self.verbose and self._is_chief("should_save_summary"):
            skipped = "" if logs["applied"] else "  (window skipped: non-finite gradient)"
            print(
                f"update {logs['update']:>6}  loss {logs['loss']:.6g}  "
                f"grad_norm {logs['grad_norm']:.4g} -> {logs['grad_norm_clipped']:.4g}  "
                f"lr {logs['learning_rate']:.4g}  skipped_windows {logs['skipped_windows']}  "
                f"samples/s {logs['samples_per_second']:.1f}{skipped}",
                flush=True,
            )

    # ------------------------------------------------------------------ traced parts
    def _window(self, iterator: Any, take: Any, finish: bool) -> Any:
        """Cross-replica, traced: accumulates up to ``take`` micro-batches; with ``finish``
        (a Python bool) ends the window: one all-reduce, the chain, one apply (or skip)."""
        count = tf.constant(0, tf.int64)
        while count < take:
            tf.autograph.experimental.set_loop_options(parallel_iterations=1)
            optional = iterator.get_next_as_optional()
            if not optional.has_value():
                break
            self.strategy.run(self._micro_step_fn, args=(optional.get_value(),))
            count += 1
        pending = self.accumulator.micro_steps.assign_add(count)
        with tf.control_dependencies([pending, self.state.position.assign_add(count)]):
            empty = {
                "count": tf.identity(count),
                "finished": tf.constant(False),
                "applied": tf.constant(False),
                "samples": tf.constant(0.0),
                "loss": tf.constant(0.0),
                "grad_norm": tf.constant(0.0),
                "grad_norm_clipped": tf.constant(0.0),
            }
            if not finish:
                return empty
            return tf.cond(pending > 0, lambda: self._finish_window(count), lambda: empty)

    def _micro_step(self, batch: Any) -> Any:
        """Replica context: forward, loss, backward; adds ``n · g`` and ``n · loss``."""
        x = self.inputs_fn(batch)
        samples = (
            batch_size(x)
            if self.sample_count_fn is None
            else tf.cast(self.sample_count_fn(batch), tf.float32)
        )
        with tf.GradientTape() as tape:
            outputs = self.model(x, training=True)
            loss = _mean_loss(self.loss_fn(self.targets_fn(batch), outputs), samples)
        grads = tape.gradient(loss, self.variables)
        self.accumulator.record_connected(self.variables, grads)
        return tf.group(
            self.accumulator.add(grads, samples), self.state.loss_sum.assign_add(loss * samples)
        )

    def _finish_window(self, count: Any) -> Dict[str, Any]:
        """Cross-replica: window gradient and chain per replica, then apply or skip."""
        out = self.strategy.run(self._window_gradient_fn)
        first = lambda value: self.strategy.experimental_local_results(value)[0]  # noqa: E731
        apply = first(out["apply"])
        grads = out["grads"]

        def do_apply() -> Any:
            self.strategy.run(self._apply_fn, args=(grads,))
            return tf.constant(True)

        applied = tf.cond(apply, do_apply, lambda: tf.constant(False))
        with tf.control_dependencies([applied]):
            self.strategy.run(self._reset)
            ops = [
                self.accumulator.micro_steps.assign(0),
                self.state.windows.assign_add(1),
                self.state.updates.assign_add(tf.cast(applied, tf.int64)),
            ]
        with tf.control_dependencies(ops):
            return {
                "count": tf.identity(count),
                "finished": tf.constant(True),
                "applied": tf.identity(applied),
                "samples": first(out["samples"]),
                "loss": first(out["loss"]),
                "grad_norm": first(out["grad_norm"]),
                "grad_norm_clipped": first(out["grad_norm_clipped"]),
            }

    def _window_gradient(self) -> Dict[str, Any]:
        """Replica context: one batched all-reduce; ``Σ n g / N + ∇R``; norms; the chain."""
        acc = self.accumulator
        values = [b.read_value() for b in acc.sums]
        values += [acc.sample_count.read_value(), self.state.loss_sum.read_value()]
        ctx = tf.distribute.get_replica_context()
        if ctx.num_replicas_in_sync > 1:
            values = ctx.all_reduce(tf.distribute.ReduceOp.SUM, values)
        sums, samples, loss_sum = values[:-2], values[-2], values[-1]
        grads = [s / tf.cast(samples, s.dtype) for s in sums]
        loss = loss_sum / samples
        pairs = acc.connected_only(
            [(tf.cast(g, v.dtype), v) for g, v in zip(grads, self.variables)]
        )
        reg_loss, reg_grads = self._regularization_gradients()
        if reg_grads is not None:
            loss += reg_loss
            connected = {v.ref() for _, v in pairs}
            pairs = [
                (g + tf.cast(r, g.dtype) if r is not None else g, v)
                for g, r, v in zip(grads, reg_grads, self.variables)
                if v.ref() in connected or r is not None
            ]
            pairs = [(tf.cast(g, v.dtype), v) for g, v in pairs]
        norm_before = global_norm(pairs)
        pairs, apply = self.chain(pairs)
        self._applied_variables = [v for _, v in pairs]  # trace-time, read by _apply
        return {
            "grads": [g for g, _ in pairs],
            "apply": apply,
            "samples": samples,
            "loss": loss,
            "grad_norm": norm_before,
            "grad_norm_clipped": global_norm(pairs),
        }

    def _regularization_gradients(self) -> Tuple[Any, Any]:
        if self._regularization is False:
            return None, None
        with tf.GradientTape() as tape:
            if callable(self._regularization):
                reg = self._regularization(self.model)
            else:
                terms = self.model.losses
                if not terms:
                    return None, None
                reg = tf.add_n([tf.cast(t, tf.float32) for t in terms])
        return tf.cast(reg, tf.float32), tape.gradient(reg, self.variables)

    def _apply(self, grads: Sequence[Any]) -> Any:
        return apply_aggregated_gradients(self.optimizer, list(zip(grads, self._applied_variables)))

    def _reset(self) -> Any:
        return tf.group(self.accumulator.reset(), self.state.loss_sum.assign(0.0))

    # ------------------------------------------------------------------ checks
    def _is_chief(self, attribute: str) -> bool:
        return bool(getattr(self.strategy.extended, attribute, True))

    def _check_scope(self, variables: Sequence[Any]) -> None:
        if self.strategy is tf.distribute.get_strategy() and not tf.distribute.has_strategy():
            return
        for v in variables:
            if not self.strategy.extended.variable_created_in_scope(v):
                raise ValueError(
                    f"Variable {v.name!r} was not created under strategy.scope() of the "
                    f"strategy given to TrainingLoop ({type(self.strategy).__name__}): create "
                    "the model and the optimizer inside `with strategy.scope():`."
                )

    @staticmethod
    def _check_optimizer(optimizer: Any) -> None:
        if isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer):
            raise TypeError(
                "TrainingLoop does not take a LossScaleOptimizer: it has no loss scaling; its "
                "non-finite guard (nonfinite_policy) handles NaN/inf windows. Pass the inner "
                "optimizer."
            )
        if not isinstance(optimizer, keras.optimizers.Optimizer):
            raise TypeError(
                f"optimizer must be a tf-keras optimizer instance (ga_tfx.keras.optimizers.*, "
                f"not keras.optimizers.legacy.*), got {optimizer!r}."
            )

    @staticmethod
    def _check_callables(
        loss_fn: Any,
        dataset: Any,
        inputs_fn: Any,
        targets_fn: Any,
        sample_count_fn: Any,
        regularization: Any,
    ) -> None:
        for name, value in (
            ("loss_fn", loss_fn),
            ("inputs_fn", inputs_fn),
            ("targets_fn", targets_fn),
        ):
            if not callable(value):
                raise TypeError(f"{name} must be callable, got {value!r}.")
        if sample_count_fn is not None and not callable(sample_count_fn):
            raise TypeError(f"sample_count_fn must be callable or None, got {sample_count_fn!r}.")
        if not (isinstance(dataset, tf.data.Dataset) or callable(dataset)):
            raise TypeError(
                f"dataset must be a tf.data.Dataset of micro-batches or a callable "
                f"epoch -> Dataset, got {dataset!r}."
            )
        if not (isinstance(regularization, bool) or callable(regularization)):
            raise TypeError(
                f"regularization must be True, False or a callable model -> scalar, got "
                f"{regularization!r}."
            )
