"""The windowed accumulation engine for ``Model.fit``: the Keras front-end of the window core.

How it works
------------
``fit`` sees micro-batches (``batch_size`` is the micro-batch size, a ``tf.data`` dataset
yields micro-batches). The engine compiles the model with ``steps_per_execution=accum_steps``
(or a multiple ``m·K`` that the user asks for), so Keras' data handler hands each call of the
train function one *window* of up to ``K`` micro-batches (or ``m`` windows). Inside one
``tf.function`` a window is a ``tf.while_loop`` (``parallel_iterations=1``: one micro-batch's
activations are alive at a time) that, per micro-batch ``i`` of ``n_i`` samples, computes the
gradient ``g_i`` of the compiled loss and adds ``n_i · g_i`` to the window. The window core
(:mod:`ga_tfx.window`, shared with the optimizer wrapper and ``TrainingLoop``) then ends the
window: one all-reduce, the mean over ``N = Σ n_i`` samples (all replicas), the gradient chain
(non-finite guard, ``clip_global_norm``, AGC, ``transforms``) and one
``optimizer.apply_gradients``, or a skip. So:

* the update is the gradient of the mean loss over all ``N`` samples of the window (sample and
  class weights included, regularisation counted once): big-batch training, also for uneven
  micro-batches;
* ``optimizer.iterations``, learning-rate schedules, ``clipnorm``/``global_clipnorm``, weight
  decay and loss scaling see one step per window;
* under ``tf.distribute.MirroredStrategy`` gradients are all-reduced once per update, and no
  ``merge_call`` ever runs inside a conditional;
* a window whose gradient holds NaN or inf is skipped whole (``nonfinite_policy="skip"``, the
  default; a dynamic ``LossScaleOptimizer`` skips it itself and lowers its loss scale).

Between two calls the buffers are empty (except with ``partial_window="carry"``), so a
checkpoint taken by a callback never contains a half window. Where no callback watches batches,
``fit`` lets each call run as many windows as take about 0.2 s (:mod:`ga_tfx.engine.pacing`).
After each call, callbacks with ``on_window_end(event)`` receive each finished window's
:class:`~ga_tfx.window.WindowEnd`.

The last window of an epoch may hold fewer than ``K`` micro-batches. ``partial_window``:

* ``"apply"`` (default): apply it as a smaller batch (its mean gradient, weights ``n_i/N``).
* ``"drop"``: discard it (no update), like ``drop_remainder``.
* ``"carry"``: keep it and complete the window with the first micro-batches of the next epoch;
  what is still pending when ``fit`` returns is applied then, so no data is lost.

``accum_steps=1`` without a gradient transform (AGC, ``clip_global_norm``, gradient noise,
``transforms``) or the noise scale is plain Keras training (the engine steps aside, and with it
the non-finite guard).

BatchNormalization layers normalise each micro-batch with its own statistics (ghost batch
norm); use :class:`ga_tfx.AccumBatchNormalization` for moving statistics of whole windows.

Where the code is (split along Keras' own seam, ``train_step`` vs ``make_train_function``):

* :mod:`ga_tfx.engine.step`: what one micro-batch does (replica context, no ``tf.function``);
* :mod:`ga_tfx.window`: what a window is and how it ends (the core of every front-end);
* :mod:`ga_tfx.engine.loop`: how they run: the window loop (the train function), the
  drop/carry decisions, the carry and pacing callbacks, the figures ``fit`` logs;
* :mod:`ga_tfx.engine.pacing`: how many windows one call runs where nothing watches batches;
* this module: :class:`AccumulationEngine`, the Keras-facing mixin (settings, ``compile``,
  ``fit``, ``make_train_function``).
"""

from ga_tfx import _tf_keras_internals as internals
from ga_tfx import _validation
from ga_tfx._keras import keras, tf
from ga_tfx._state import Untracked, attach_state
from ga_tfx.config import AccumulationConfig, config_settings
from ga_tfx.engine import pacing, recovery
from ga_tfx.engine.loop import CallPacing, CarryAlignment, WindowFigures, WindowLoop
from ga_tfx.engine.step import WindowStep, train_step_error
from ga_tfx.transforms import AdaptiveClipping, Member, make_agc
from ga_tfx.window import CHECKPOINT_KEY, WindowCore
from ga_tfx.window.shims import build_optimizer

import inspect
from typing import Any, Callable, Dict, Optional, Sequence, Tuple


class AccumulationEngine(WindowStep):
    """Mixin for ``keras.Model`` subclasses: ``fit`` updates once per ``accum_steps`` micro-batches.

    Subclasses call :meth:`_configure_accumulation` in ``__init__``. See the module docstring for
    the semantics.
    """

    train_function: Any  # Keras' attribute (set by make_train_function)

    def _configure_accumulation(
        self, config: AccumulationConfig, transforms: Sequence[Member] = ()
    ) -> None:
        self._accumulation_config = config
        self._transforms = Untracked(tuple(transforms))
        # accum_steps=1 without a gradient transform steps aside for plain Keras, unless
        # use_engine_always().
        self._always_use_engine = False
        # Micro-batches per call of the train function: one window until compile says more;
        # with steps_per_execution unset, fit may pace them (ga_tfx.engine.pacing).
        self._execution_steps = config.accum_steps
        self._pacing: Optional[str] = None
        # Held outside Keras' attribute tracking, so the buffers never appear in
        # `model.weights` / `get_weights()`; checkpoints still see them (see _set_core).
        self._core_holder = Untracked()
        # fit's logged figures (grad_norm, noise_scale), from the window events.
        self._figures = WindowFigures(config.log_grad_norm, config.log_noise_scale)

    # ------------------------------------------------------------------ public properties
    @property
    def accumulation(self) -> AccumulationConfig:
        """The :class:`~ga_tfx.AccumulationConfig` this model trains with."""
        return self._accumulation_config

    @property
    def transforms(self) -> Tuple[Member, ...]:
        """The ``transforms`` given at construction: the user's members of the gradient chain,
        after the built-in guard, clipping and AGC (empty by default)."""
        return self._transforms.value

    @property
    def accum_steps(self) -> int:
        """Micro-batches per optimizer update (``K``; with a schedule, the first window's:
        ``window_core.current_accum_steps`` is the current one)."""
        return self._accumulation_config.accum_steps

    def _scheduled(self) -> bool:
        return self._accumulation_config.schedule.varies

    @property
    def partial_window(self) -> str:
        """What happens to a window of fewer than ``K`` micro-batches: apply, drop or carry."""
        return self._accumulation_config.partial_window

    @property
    def agc(self) -> Optional[AdaptiveClipping]:
        """The :class:`~ga_tfx.transforms.AdaptiveClipping` in use, or ``None``."""
        config = self._accumulation_config
        return make_agc(config.agc_clip_factor, config.agc_eps, config.agc_exclude)

    @property
    def window_core(self) -> Optional[WindowCore]:
        """The :class:`~ga_tfx.window.WindowCore` (``None`` until ``fit``): its
        ``accumulator``, ``chain``, ``state`` and counters, checkpointed as the model's
        dependency :data:`~ga_tfx.window.CHECKPOINT_KEY` (``model/ga_window_core/...``)."""
        return self._core_holder.value

    @property
    def gradient_norm_metric(self) -> Optional[Any]:
        """With ``log_grad_norm=True``: the mean of the global L2 norm of each update's window
        gradient (after the all-reduce, before the gradient chain and the optimizer's own
        clipping) over the epoch so far, reported by ``fit`` as ``grad_norm`` (the epoch's
        mean, as Keras reports ``loss``; ``.result()``). ``None`` otherwise, or before the
        first ``fit``."""
        if not self._accumulation_config.log_grad_norm or self.window_core is None:
            return None
        return self._figures

    @property
    def samples_seen(self) -> int:
        """Training samples this model has accumulated so far (all replicas, all fits)."""
        core = self.window_core
        return 0 if core is None else core.accumulator.samples_seen_count()

    def _set_core(self, core: WindowCore) -> None:
        attach_state(self, self._core_holder, core, CHECKPOINT_KEY)

    def accumulation_config(self) -> Dict[str, Any]:
        """The accumulation settings as constructor keyword arguments (for ``get_config``;
        without ``transforms`` and a callable schedule, with a warning:
        :func:`~ga_tfx.config.config_settings`)."""
        return config_settings(self._accumulation_config, self._transforms.value)

    # ------------------------------------------------------------------ Keras overrides
    def compile(self, *args: Any, **kwargs: Any) -> None:
        """``keras.Model.compile``; ``steps_per_execution`` counts micro-batches and is a whole
        number of windows.

        ``steps_per_execution``: ``None`` or ``1`` (default) runs one window of ``K``
        micro-batches per call of the train function where a callback watches batches, so
        batch-level callbacks run once per window; where none does, ``fit`` paces its calls
        (as many whole windows per call as take about 0.2 s, :mod:`ga_tfx.engine.pacing`).
        ``"auto"`` always paces, as Keras' ``"auto"`` tunes. A multiple ``m·K`` runs ``m``
        windows per call, as Keras' ``steps_per_execution`` runs several steps per call: fewer
        host round trips, callbacks every ``m`` windows. The same windows in
        the same order, however many per call: the weights do not change.
        ``run_eagerly=True`` runs every micro-batch eagerly; ``jit_compile=True`` compiles
        each micro-batch's step and each window's update with XLA (as Keras compiles its
        ``train_step``). A wrapped model that overrides ``train_step`` is
        compiled with the same arguments (and the same optimizer instance), so that its
        ``train_step`` finds its loss, metrics and optimizer; one that also overrides ``compile``
        is refused (ValueError).
        """
        steps = kwargs.pop("steps_per_execution", None)
        self._execution_steps = self._check_execution_steps(steps)
        # With a schedule every call is one window of the K it chose: no pacing.
        self._pacing = None if self._scheduled() else pacing.mode_of(steps)
        owner = self._train_step_model()
        inner = owner if owner is not None and owner is not self else None
        if inner is not None and type(inner).compile is not keras.Model.compile:
            raise train_step_error(
                inner,
                "its compile too (e.g. a GAN compiled with several optimizers), so the "
                "wrapper cannot tell which optimizer's updates to accumulate.",
            )
        super().compile(*args, steps_per_execution=self._execution_steps, **kwargs)
        if inner is not None:
            arguments = inspect.signature(keras.Model.compile).bind(inner, *args, **kwargs)
            arguments.arguments["optimizer"] = self.optimizer  # one optimizer, one state
            arguments.arguments.pop("self", None)
            inner.compile(
                **{k: v for k, v in arguments.arguments.items() if k != "kwargs"},
                **arguments.arguments.get("kwargs", {}),
            )

    def _check_execution_steps(self, steps: Any) -> int:
        """``steps_per_execution`` in micro-batches: ``K`` for ``None``/``1``/``"auto"`` (paced
        from there), else a positive multiple of ``K`` (whole windows), or a ValueError naming
        the value."""
        k = self.accum_steps
        if isinstance(steps, str) and steps == pacing.ALWAYS:
            return k
        if self._scheduled() and steps not in (None, 1):
            raise ValueError(
                f"steps_per_execution={steps!r} is not supported with an accum_steps schedule "
                f"({self._accumulation_config.accum_schedule or 'a callable'}): every call of "
                "the train function runs one window of the K the schedule chose; leave it "
                "unset (or 1, or 'auto')."
            )
        try:
            checked = _validation.STEPS_PER_EXECUTION.check("steps_per_execution", steps)
        except _validation.SettingError:  # not an integer >= 1: the message below says why
            checked = 0
        if checked is None or checked == 1:
            return k
        if checked and checked % k == 0:
            return checked
        raise ValueError(
            f"steps_per_execution={steps!r} is not supported on a gradient accumulation model "
            f"with accum_steps={k}: it counts micro-batches and must be a whole number of "
            f"windows, a multiple of {k} ({k}, {2 * k}, ...; {k} runs one update per call of the "
            "train function), 'auto', or left unset."
        )

    def compile_from_config(self, config: Dict[str, Any]) -> None:
        """Re-compiles a model loaded from the Keras format (optimizer state is then restored)."""
        config = keras.saving.deserialize_keras_object(config)
        self.compile(**config)
        if self.built:
            build_optimizer(self.optimizer, self.trainable_variables)  # saved state then loads

    def reset_metrics(self) -> None:
        """``keras.Model.reset_metrics``, and the ``grad_norm`` mean (``log_grad_norm``)."""
        super().reset_metrics()
        self._figures.reset_state()

    def fit(self, *args: Any, **kwargs: Any) -> Any:
        """``keras.Model.fit`` on micro-batches; ``steps_per_epoch`` counts micro-batches.

        With ``steps_per_execution`` unset, a ``fit`` whose callbacks watch no batches runs as
        many whole windows per call as take about 0.2 s (:mod:`ga_tfx.engine.pacing`). An
        out-of-memory error in a training step discards the window, halves the micro-batch and
        trains that window again (:mod:`ga_tfx.engine.recovery`; ``oom_recovery``).
        """
        arguments = inspect.signature(keras.Model.fit).bind(self, *args, **kwargs).arguments
        arguments.pop("self")
        if not self._engine_active():
            return self._fit_once(arguments)
        position = recovery.FitPosition(self)

        def fit_once(attempt: Dict[str, Any]) -> Any:
            callbacks = [position] + self._engine_callbacks(attempt.get("callbacks"))
            return self._fit_once(dict(attempt, callbacks=callbacks))

        return recovery.fit_replayed(self, arguments, fit_once, position)

    def _fit_once(self, arguments: Dict[str, Any]) -> Any:
        try:
            return super().fit(**arguments)
        except ValueError as error:
            if "Could not infer the size of the data" not in str(error):
                raise
            raise ValueError(
                f"The training data has no known length, so Keras cannot form windows of "
                f"accum_steps={self.accum_steps} micro-batches over it. Pass steps_per_epoch "
                "(counted in micro-batches), e.g. with a repeated dataset, or give the dataset a "
                "length with tf.data.experimental.assert_cardinality."
            ) from error
        finally:
            if isinstance(self.train_function, WindowLoop):
                self.train_function.stop_pacing()
                self.train_function.listeners = ()

    def _engine_callbacks(self, callbacks: Any) -> list:
        """The user's callbacks, after the engine's own for this ``fit``: the window events'
        dispatch, carry alignment (``partial_window="carry"``) and call pacing (where
        :func:`~ga_tfx.engine.pacing.should_pace` allows). Callbacks with
        ``on_window_end(event)`` get each window's :class:`~ga_tfx.window.WindowEnd`."""
        callbacks = list(callbacks or [])
        engine: list = [_WindowEvents(self, [c for c in callbacks if hasattr(c, "on_window_end")])]
        if self.partial_window == "carry":
            engine.append(CarryAlignment(self))
        if pacing.should_pace(self, callbacks):
            engine.append(CallPacing(self))
        return engine + callbacks

    def train_on_batch(self, *args: Any, **kwargs: Any) -> Any:
        """``keras.Model.train_on_batch``: the batch is one window of one micro-batch, applied
        as one update whatever ``partial_window`` (which is about ``fit``'s epoch ends)."""
        if not self._engine_active():
            return super().train_on_batch(*args, **kwargs)
        self.make_train_function()
        loop: WindowLoop = self.train_function
        with loop.one_window_per_call():
            return super().train_on_batch(*args, **kwargs)

    def make_train_function(self, force: bool = False) -> Callable[[Any], Any]:
        """Keras' train function: a :class:`~ga_tfx.engine.loop.WindowLoop` (whole windows per
        call), or Keras' own when the engine steps aside (``accum_steps=1`` without AGC)."""
        if self.train_function is not None and not force:
            return self.train_function
        if not self._engine_active():
            return super().make_train_function(force=force)
        if internals.uses_parameter_server(self):
            raise NotImplementedError(
                "ParameterServerStrategy is not supported by ga_tfx; use MirroredStrategy or "
                "MultiWorkerMirroredStrategy."
            )
        self._build_gradient_accumulator()
        with self.distribute_strategy.scope():
            build_optimizer(self.optimizer, self.trainable_variables)
        self.train_function = WindowLoop(
            self,
            self._accumulate_micro_batch,
            self._figures,
            self._execution_steps,
            self._scheduled(),
        )
        # The compiled steps_per_execution is the first window's K; the core's, restored from a
        # checkpoint as its variables were created, may differ.
        self.train_function.follow_schedule()
        return self.train_function

    # ------------------------------------------------------------------ the engine
    def use_engine_always(self) -> None:
        """Train through the engine also with ``accum_steps=1`` and no gradient transform, where
        the model would otherwise step aside for plain Keras ``fit``: then every update is a
        window of the core, with its events, its non-finite guard, its checkpointed counters
        and ``samples_seen``, as at ``accum_steps > 1`` (the Trainer component and the tuner's
        trials use it so that runs at K=1 and K>1 count alike). Call before ``compile``/``fit``;
        it cannot be undone."""
        self._always_use_engine = True

    def _engine_active(self) -> bool:
        # accum_steps=1 without a gradient transform (clipping, AGC, noise, the user's) or the
        # noise scale is plain Keras training (no non-finite guard either), unless
        # use_engine_always().
        config = self._accumulation_config
        return (
            config.accum_steps > 1
            or config.transforms_gradients()
            or bool(self._transforms.value)
            or config.log_noise_scale
            or self._always_use_engine
        )

    def _build_gradient_accumulator(self) -> None:
        variables = self.trainable_variables
        if not variables:
            raise ValueError("The model has no trainable variables to accumulate gradients for.")
        core = self.window_core
        if core is None or not core.matches(variables):
            with self.distribute_strategy.scope():
                self._set_core(
                    WindowCore(
                        variables,
                        self._accumulation_config,
                        self._transforms.value,
                        window_layers=self._window_layers(),
                    )
                )


class _WindowEvents(keras.callbacks.Callback):
    """For one ``fit``: the window events go to ``listeners`` (callbacks with
    ``on_window_end``), from the first window this ``fit`` finishes on."""

    def __init__(self, model: Any, listeners: Sequence[Any]) -> None:
        super().__init__()
        self._ga_model = model
        self._listeners = tuple(listeners)

    def on_train_begin(self, logs: Any = None) -> None:
        model = self._ga_model
        loop = model.train_function
        if isinstance(loop, WindowLoop):
            model.window_core.start_events()
            loop.listeners = self._listeners
