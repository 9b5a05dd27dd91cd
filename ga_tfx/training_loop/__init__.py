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

How it works: the dataset yields *global micro-batches* (split across replicas by the
strategy); one call of a traced function runs one window: up to ``accum_steps`` micro-batches
through ``strategy.run`` (forward, loss, backward, added to the window), then the window core
(:mod:`ga_tfx.window`, shared with ``fit`` and the optimizer wrapper) ends it: one all-reduce,
``g = Σ n_i g_i / Σ n_i + ∇R`` (``R``: the regularisation, counted once per update), the
gradient chain and one ``optimizer.apply_gradients`` (or a skip). So the update is that of
big-batch training on the window's samples, also for uneven micro-batches and an epoch's short
last window (``partial_window``: applied, dropped, or completed by the next epoch).

Counters: an *update* is one applied optimizer step (``optimizer.iterations`` advances by one);
a skipped window is not an update. Every "every N" and "at N" counts updates; the data position
counts micro-batches. They are the window core's (``loop.window_core.updates``, ``.windows``,
``.skipped_windows``), read there as on every front-end.

Where the code is: this module is the loop (its arguments, state and checkpoints); the window
runner (:mod:`ga_tfx.window.runner`, ``fit``'s too) traces and runs its window;
:mod:`~ga_tfx.training_loop.run` is the host loop of one :meth:`TrainingLoop.run` (epochs of
windows, the out-of-memory replay, stop signals, each window end's logs, checkpoints and
callbacks), :mod:`~ga_tfx.training_loop.step` one micro-batch's math and the window's end,
:mod:`~ga_tfx.training_loop.data` each epoch's data from a position on, the other modules its
checkpoints, logs, callbacks and argument checks; :mod:`~ga_tfx.training_loop.state` its
counters (:class:`LoopState`).
"""

from ga_tfx import _tf_keras_internals as internals
from ga_tfx import _validation, preemption
from ga_tfx._keras import keras, tf
from ga_tfx._schema import Spec
from ga_tfx.config import NOT_GIVEN, AccumulationConfig, resolve
from ga_tfx.distribution import is_chief
from ga_tfx.training_loop import checks
from ga_tfx.training_loop.callbacks import UpdateCallback
from ga_tfx.training_loop.checkpoints import LoopCheckpoints
from ga_tfx.training_loop.data import EpochData
from ga_tfx.training_loop.logs import LOG_KEYS, NOISE_KEYS, LoopLog
from ga_tfx.training_loop.run import LoopRun
from ga_tfx.training_loop.state import LoopState
from ga_tfx.training_loop.step import LoopSteps, default_inputs, default_targets
from ga_tfx.transforms import Member
from ga_tfx.window import CHECKPOINT_KEY, NonFiniteGradientError, WindowCore
from ga_tfx.window.runner import WindowRunner

from typing import Any, Callable, List, Optional, Sequence, Union

__all__ = [
    "LOG_KEYS",
    "NOISE_KEYS",
    "LoopState",
    "NonFiniteGradientError",
    "TrainingLoop",
    "UpdateCallback",
]

_JIT_COMPILE = Spec(bool, "compile the per-replica steps with XLA")


class TrainingLoop(LoopSteps):
    """Runs ``model`` on micro-batches; one optimizer update per ``accum_steps`` of them.

    Args:
      model: a built Keras 2 model (its variables exist), created under ``strategy.scope()``.
      optimizer: a tf-keras optimizer (``keras.optimizers.*``; not a legacy optimizer, not a
        ``LossScaleOptimizer``), created under the same scope. Its ``iterations`` count
        updates; a learning-rate schedule sees one step per update. A constant learning rate
        is a variable: callbacks may set ``loop.learning_rate`` and checkpoints keep it.
      loss_fn: ``loss_fn(targets, outputs)``. A Keras ``Loss`` (``reduction="none"``, as
        tf.distribute requires, or a mean reduction): the micro-batch's loss is Keras' mean,
        and its divisor (the element losses, valid ones when masked) is read as Keras computes
        it. Any other callable: per-example losses (shape ``[n]`` or ``[n, ...]``, other axes
        averaged) or the scalar mean over the ``n`` samples of the batch it is given. Never
        divide by the global batch size or the replica count: the loop weights each replica's
        mean by its divisor. Regularisation is added by the loop (``regularization``). For a
        model of several outputs, a list of Keras ``Loss`` objects, one per output (the
        outputs and targets flattened, in order): each output's mean divides by its own
        divisor, and one whose divisor varies from micro-batch to micro-batch (its own mask)
        is weighed by it in the window (docs/exactness.md, "The window's divisor").
      dataset: a ``tf.data.Dataset`` of micro-batches (global: the strategy splits each one
        across replicas), iterated once per epoch in the same order each time; or a callable
        ``epoch -> Dataset`` (e.g. to reshuffle per epoch). Resuming skips the micro-batches
        already consumed, so the order must be reproducible: a shuffle needs its own seed and
        must not depend on TensorFlow's global seed (``keras.utils.set_random_seed``, often
        called when building models, resets it). Under a multi-worker
        strategy an ``AUTO`` auto-shard policy is set to ``DATA`` (every worker reads the same
        micro-batches and takes its part of each).
      accum_steps: ``K``, micro-batches per update (int >= 1). It and the other settings of
        :class:`~ga_tfx.AccumulationConfig` (``partial_window``, ``nonfinite_policy``,
        ``max_consecutive_skips``, ``clip_global_norm``, ``agc_clip_factor``, ``agc_eps``,
        ``agc_exclude``, ``log_noise_scale``, ``noise_scale_decay``) are keyword arguments,
        or one ``config=AccumulationConfig(...)`` (not both). ``log_grad_norm`` is implied:
        every window's logs have ``grad_norm``.
      config: an :class:`~ga_tfx.AccumulationConfig` instead of the keyword settings (read
        back as ``loop.accumulation``, the name of every front-end and the core).
      strategy: a ``tf.distribute`` strategy (``MirroredStrategy``,
        ``MultiWorkerMirroredStrategy``) or ``None`` for the current (default) one.
      inputs_fn: ``batch -> model input``; default: ``batch[0]`` for a tuple/list batch, else
        the batch.
      targets_fn: ``batch -> targets`` given to ``loss_fn``; default ``batch[1]``. Use
        ``lambda batch: batch`` for a loss over (batch, outputs).
      variables: the trainable variables: a list, or ``model -> list``; default
        ``model.trainable_variables``.
      loss_weights: with a list ``loss_fn``, each loss's factor (default 1 each), as
        ``compile``'s ``loss_weights``.
      sample_count_fn: ``batch -> divisor``: the number ``loss_fn``'s mean was divided by (the
        micro-batch's weight in the window; docs/exactness.md, "The window's divisor");
        default: read from a Keras ``Loss`` (its valid elements when masked), else the
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
      transforms: further gradient transforms, applied in order after global-norm clipping
        and AGC:
        :class:`ga_tfx.transforms.GradientTransform` instances (e.g.
        ``ga_tfx.transforms.AdaptiveClipping(0.01)``) or ``(name, callable)`` pairs.
      callbacks: :class:`UpdateCallback` instances (or objects with ``on_update_end(loop,
        logs)`` / ``on_train_end(loop, logs)``), called in order.
      checkpoint_dir: directory of a ``tf.train.CheckpointManager`` (``model``,
        ``optimizer`` and the window core under :data:`~ga_tfx.window.CHECKPOINT_KEY`, in the
        layout of every front-end; its state holds the loop's epoch). :meth:`run` restores
        its latest checkpoint first; a resumed run ends with the weights of an uninterrupted
        one. Only the chief (``strategy.extended.should_checkpoint``) writes there; other
        workers write to a temporary directory they delete. Every worker restores from it, so
        under a multi-worker strategy it must be shared storage (as for Keras'
        ``BackupAndRestore``). ``None``: no checkpoints.
      checkpoint_every_n_updates: save after every N updates (and always when :meth:`run`
        returns); ``None``: only when it returns.
      max_checkpoints_to_keep: the manager's ``max_to_keep`` (default 3).
      log_dir: TensorBoard directory (scalars ``train/<key>`` for :data:`LOG_KEYS`, and
        :data:`~ga_tfx.training_loop.logs.NOISE_KEYS` with ``log_noise_scale``; step =
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
      stop_on_signals: with ``checkpoint_dir``, SIGTERM (what Kubernetes sends before an
        eviction) and SIGINT (Ctrl-C) stop :meth:`run` at the next window end -- a signal
        that arrives while a step runs is handled when it returns --: it saves a checkpoint
        and raises :class:`ga_tfx.preemption.TrainingInterrupted` ("interrupted at window N;
        checkpoint saved; ...", N counting windows, a skipped one included); a new ``run``
        resumes exactly. A second signal is not held back. Only from the main thread. Default
        ``True``.
    """

    def __init__(
        self,
        model: keras.Model,
        optimizer: Any,
        loss_fn: Union[Callable, Sequence[Any]],
        dataset: Any,
        accum_steps: int = NOT_GIVEN,
        *,
        config: Optional[AccumulationConfig] = None,
        strategy: Optional[tf.distribute.Strategy] = None,
        inputs_fn: Callable = default_inputs,
        targets_fn: Callable = default_targets,
        variables: Union[None, Sequence[tf.Variable], Callable] = None,
        sample_count_fn: Optional[Callable] = None,
        loss_weights: Optional[Sequence[float]] = None,
        regularization: Union[bool, Callable] = True,
        transforms: Sequence[Member] = (),
        callbacks: Sequence[Any] = (),
        checkpoint_dir: Optional[str] = None,
        checkpoint_every_n_updates: Optional[int] = None,
        max_checkpoints_to_keep: int = 3,
        log_dir: Optional[str] = None,
        log_every_n_windows: int = 1,
        verbose: bool = True,
        jit_compile: bool = False,
        stop_on_signals: bool = True,
        **settings: Any,
    ) -> None:
        self.accumulation = resolve(
            "ga_tfx.TrainingLoop", config, dict(settings, accum_steps=accum_steps)
        )
        self.model = model
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.loss_weights = checks.loss_weights(loss_fn, loss_weights, sample_count_fn)
        self.strategy = strategy if strategy is not None else tf.distribute.get_strategy()
        self.inputs_fn, self.targets_fn = inputs_fn, targets_fn
        self.sample_count_fn = sample_count_fn
        self.checkpoint_every_n_updates = _validation.UPDATES.check(
            "checkpoint_every_n_updates", checkpoint_every_n_updates
        )
        self.jit_compile = _JIT_COMPILE.check("jit_compile", jit_compile)
        self.stop_on_signals = bool(stop_on_signals)
        self.callbacks = list(callbacks)
        self.stop_training = False
        self._restored = False
        self._data = EpochData(dataset, self.strategy)
        checks.check_callables(
            loss_fn, dataset, inputs_fn, targets_fn, sample_count_fn, regularization
        )
        self._regularization = regularization
        checks.check_optimizer(optimizer)
        self.variables = checks.trainable_variables(model, variables)
        checks.check_scope(self.strategy, self.variables + [optimizer.iterations])
        self._build_core(transforms)
        self.checkpoint_dir = checkpoint_dir
        self._checkpoints = self._make_checkpoints(checkpoint_dir, max_checkpoints_to_keep)
        self._log = LoopLog(
            log_dir,
            _validation.WINDOWS.check("log_every_n_windows", log_every_n_windows),
            bool(verbose),
            is_chief(self.strategy),
            self.accumulation.log_noise_scale,
        )

    def _build_core(self, transforms: Sequence[Member]) -> None:
        """The loop's state, its window core (the model's window layers ending with its
        windows) and the window runner that traces its steps; the optimizer's slots exist
        before the first trace and restore."""
        with self.strategy.scope():
            self.state = LoopState()
            self.window_core = WindowCore(
                self.variables,
                self.accumulation,
                transforms,
                window_layers=[
                    layer
                    for layer in internals.flatten_layers(self.model)
                    if hasattr(layer, "ga_window_end")
                ],
                state=self.state,
            )
            self.state.bind_pending(self.window_core.micro_steps)
            self.optimizer.build(self.variables)
        self._runner = WindowRunner(
            self.window_core,
            self.strategy,
            self._micro_step,
            self._finish_window,
            jit_compile=self.jit_compile,
        )

    def _make_checkpoints(self, directory: Optional[str], keep: int) -> LoopCheckpoints:
        """The checkpoints of the model, the optimizer, the window core's state and the
        loop's counters in ``directory`` (``None``: none), the last ``keep`` kept."""
        core = self.window_core
        return LoopCheckpoints(
            tf.train.Checkpoint(
                model=self.model,
                optimizer=self.optimizer,
                **{CHECKPOINT_KEY: core},
            ),
            directory,
            self.strategy,
            _validation.CHECKPOINTS_KEPT.check("max_checkpoints_to_keep", keep),
        )

    # ------------------------------------------------------------------ public state
    @property
    def accum_steps(self) -> int:
        """``K``, micro-batches per update: the config's (``loop.accumulation.accum_steps``;
        read only)."""
        return self.accumulation.accum_steps

    @property
    def epoch(self) -> int:
        """The current epoch (0-based; restored from checkpoints)."""
        return int(self.state.epoch.numpy())

    @property
    def samples_seen(self) -> int:
        """Training samples accumulated so far (all replicas, skipped windows included)."""
        return self.window_core.accumulator.samples_seen_count()

    @property
    def history(self) -> List[dict]:
        """The logs of every window finished by this object (:meth:`run`), in order."""
        return self._log.history

    @property
    def log_every_n_windows(self) -> int:
        return self._log.every_n_windows

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
        return self._checkpoints.save()

    def restore(self) -> bool:
        """Restores the latest checkpoint of ``checkpoint_dir``; ``False`` if there is none.
        ``ValueError`` for a checkpoint written before 0.2.0; until a restore succeeds, every
        :meth:`run` restores first (so refuses such a checkpoint again)."""
        restored = self._checkpoints.restore()
        self._restored = True
        return restored

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
        epochs = _validation.EPOCHS.check("epochs", epochs)
        max_updates = _validation.UPDATES.check("max_updates", max_updates)
        budget = _validation.MICRO_BATCHES.check("max_micro_batches", max_micro_batches)
        if not self._restored:
            self.restore()
        self._runner.follow_split()  # a restored out-of-memory split
        # With checkpoints, SIGTERM/SIGINT stop at the next window end with a checkpoint
        # (ga_tfx.preemption): TrainingInterrupted, and a new run resumes.
        with preemption.stop_on_signals(
            self.stop_on_signals and self.checkpoint_dir is not None
        ) as stop:
            run = LoopRun(self, self._runner, self._data, self._log, stop)
            return run(epochs, max_updates, budget)
