"""The windowed accumulation engine for ``Model.fit``.

How it works
------------
``fit`` sees micro-batches (``batch_size`` is the micro-batch size, a ``tf.data`` dataset
yields micro-batches). The engine compiles the model with ``steps_per_execution=accum_steps``
(or a multiple ``m·K`` that the user asks for), so Keras' data handler hands each call of the
train function one *window* of up to ``K`` micro-batches (or ``m`` windows). Inside one
``tf.function`` a window is a ``tf.while_loop`` (``parallel_iterations=1``: one micro-batch's
activations are alive at a time) that, per micro-batch ``i`` of ``n_i`` samples, computes the
gradient ``g_i`` of the compiled loss and adds ``n_i · g_i`` to replica-local float32 buffers.
After the window the buffers are all-reduced once, divided by ``N = Σ n_i`` (all replicas),
optionally clipped with AGC, and applied with one unconditional ``optimizer.apply_gradients``.
So:

* the update is the gradient of the mean loss over all ``N`` samples of the window (sample and
  class weights included, regularisation counted once): big-batch training, also for uneven
  micro-batches;
* ``optimizer.iterations``, learning-rate schedules, ``clipnorm``/``global_clipnorm``, weight
  decay and loss scaling see one step per window;
* under ``tf.distribute.MirroredStrategy`` gradients are all-reduced once per update, and no
  ``merge_call`` ever runs inside a conditional.

Between two calls the buffers are empty (except with ``partial_window="carry"``), so a
checkpoint taken by a callback never contains a half window. Where no callback watches batches,
``fit`` lets each call run as many windows as take about 0.2 s (:mod:`ga_tfx.engine.pacing`).

The last window of an epoch may hold fewer than ``K`` micro-batches. ``partial_window``:

* ``"apply"`` (default): apply it as a smaller batch (its mean gradient, weights ``n_i/N``).
* ``"drop"``: discard it (no update), like ``drop_remainder``.
* ``"carry"``: keep it and complete the window with the first micro-batches of the next epoch;
  what is still pending when ``fit`` returns is applied then, so no data is lost.

``accum_steps=1`` without AGC is plain Keras training (the engine steps aside).

BatchNormalization layers normalise each micro-batch with its own statistics (ghost batch
norm); use :class:`ga_tfx.AccumBatchNormalization` for moving statistics of whole windows.

Where the code is (split along Keras' own seam, ``train_step`` vs ``make_train_function``):

* :mod:`ga_tfx.engine.step`: what one micro-batch does and what the end of a window does
  (replica context, no ``tf.function``);
* :mod:`ga_tfx.engine.loop`: how they run: the window loop (the train function), the
  drop/carry decisions, the carry and pacing callbacks;
* :mod:`ga_tfx.engine.pacing`: how many windows one call runs where nothing watches batches;
* this module: :class:`AccumulationEngine`, the Keras-facing mixin (settings, ``compile``,
  ``fit``, ``make_train_function``).
"""

from ga_tfx import _tf_keras_internals as internals
from ga_tfx import _validation
from ga_tfx._keras import keras
from ga_tfx._state import Untracked, attach_state
from ga_tfx.accumulator import GradientAccumulator
from ga_tfx.agc import make_agc
from ga_tfx.engine import pacing
from ga_tfx.engine.loop import CallPacing, CarryAlignment, WindowLoop
from ga_tfx.engine.step import (  # noqa: F401  (re-exported)
    WindowStep,
    _as_dependencies,
    apply_aggregated_gradients,
    train_step_error,
)

import inspect
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Sequence

if TYPE_CHECKING:
    from ga_tfx.agc import AdaptiveGradientClipping


class AccumulationEngine(WindowStep):
    """Mixin for ``keras.Model`` subclasses: ``fit`` updates once per ``accum_steps`` micro-batches.

    Subclasses call :meth:`_configure_accumulation` in ``__init__``. See the module docstring for
    the semantics.
    """

    train_function: Any  # Keras' attribute (set by make_train_function)

    # The defaults of the accumulation settings, declared once: the model classes and
    # ga_tfx.wrap_model take them from here.
    DEFAULT_PARTIAL_WINDOW = "apply"  # a short last window is applied as a smaller batch
    DEFAULT_AGC_EPS = 1e-3  # AGC's lower bound on parameter norms (NFNets' value)

    def _configure_accumulation(
        self,
        accum_steps: int,
        partial_window: str,
        agc_clip_factor: Optional[float],
        agc_eps: float,
        agc_exclude: Sequence[str],
        log_grad_norm: bool,
    ) -> None:
        self._accum_steps = _validation.check_accum_steps(accum_steps)
        self._log_grad_norm = _validation.LOG_GRAD_NORM.check("log_grad_norm", log_grad_norm)
        self._partial_window = _validation.check_partial_window(partial_window)
        # accum_steps=1 without AGC steps aside for plain Keras, unless _use_engine_always().
        self._always_use_engine = False
        # Micro-batches per call of the train function: one window until compile says more;
        # with steps_per_execution unset, fit may pace them (ga_tfx.engine.pacing).
        self._execution_steps = self._accum_steps
        self._pacing: Optional[str] = None
        self._agc = make_agc(agc_clip_factor, agc_eps, agc_exclude)
        self._agc_settings = {
            "agc_clip_factor": agc_clip_factor,
            "agc_eps": agc_eps,
            "agc_exclude": list(agc_exclude),
        }
        # Held outside Keras' attribute tracking, so the buffers never appear in
        # `model.weights` / `get_weights()`; checkpoints still see them (see _set_accumulator).
        self._accumulator_holder = Untracked()
        # The grad_norm mean (log_grad_norm): not a weight, not checkpointed, not an
        # evaluate() metric; reset with the model's metrics at each epoch.
        self._grad_norm_holder = Untracked()

    # ------------------------------------------------------------------ public properties
    @property
    def accum_steps(self) -> int:
        """Micro-batches per optimizer update (``K``)."""
        return self._accum_steps

    @property
    def partial_window(self) -> str:
        """What happens to a window of fewer than ``K`` micro-batches: apply, drop or carry."""
        return self._partial_window

    @property
    def agc(self) -> Optional["AdaptiveGradientClipping"]:
        """The :class:`~ga_tfx.agc.AdaptiveGradientClipping` in use, or ``None``."""
        return self._agc

    @property
    def gradient_accumulator(self) -> Optional[GradientAccumulator]:
        """The :class:`~ga_tfx.accumulator.GradientAccumulator` (``None`` until ``fit``)."""
        return self._accumulator_holder.value

    @property
    def gradient_norm_metric(self) -> Optional[Any]:
        """With ``log_grad_norm=True``: the ``keras.metrics.Mean`` of the global L2 norm of each
        update's window gradient (after the all-reduce, before AGC and the optimizer's own
        clipping), reported by ``fit`` as ``grad_norm`` (the epoch's mean, as Keras reports
        ``loss``). ``None`` otherwise, or before the first ``fit``."""
        return self._grad_norm_holder.value

    @property
    def samples_seen(self) -> int:
        """Training samples this model has accumulated so far (all replicas, all fits)."""
        acc = self.gradient_accumulator
        return 0 if acc is None else acc.samples_seen_count()

    def _set_accumulator(self, accumulator: GradientAccumulator) -> None:
        attach_state(self, self._accumulator_holder, accumulator, "ga_gradient_accumulator")

    def accumulation_config(self) -> Dict[str, Any]:
        """The accumulation settings as constructor keyword arguments (for ``get_config``)."""
        return {
            "accum_steps": self._accum_steps,
            "partial_window": self._partial_window,
            **self._agc_settings,
            "log_grad_norm": self._log_grad_norm,
        }

    # ------------------------------------------------------------------ Keras overrides
    def compile(self, *args: Any, **kwargs: Any) -> None:
        """``keras.Model.compile``; ``steps_per_execution`` counts micro-batches and is a whole
        number of windows.

        ``steps_per_execution``: ``None`` or ``1`` (default) runs one window of ``K``
        micro-batches per call of the train function where a callback watches batches, so
        batch-level callbacks run once per update; where none does, ``fit`` paces its calls
        (as many whole windows per call as take about 0.2 s, :mod:`ga_tfx.engine.pacing`).
        ``"auto"`` always paces, as Keras' ``"auto"`` tunes. A multiple ``m·K`` runs ``m``
        windows (``m`` updates) per call, as Keras' ``steps_per_execution`` runs several steps
        per call: fewer host round trips, callbacks every ``m`` updates. The same windows in
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
        self._pacing = pacing.mode_of(steps)
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
        k = self._accum_steps
        if isinstance(steps, str) and steps == pacing.ALWAYS:
            return k
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
        if isinstance(self.optimizer, keras.optimizers.Optimizer) and self.built:
            self.optimizer.build(self.trainable_variables)  # so saved optimizer state loads

    def reset_metrics(self) -> None:
        """``keras.Model.reset_metrics``, and the ``grad_norm`` mean (``log_grad_norm``)."""
        super().reset_metrics()
        if self.gradient_norm_metric is not None:
            self.gradient_norm_metric.reset_state()

    def fit(self, *args: Any, **kwargs: Any) -> Any:
        """``keras.Model.fit`` on micro-batches; ``steps_per_epoch`` counts micro-batches.

        With ``steps_per_execution`` unset, a ``fit`` whose callbacks watch no batches runs as
        many whole windows per call as take about 0.2 s (:mod:`ga_tfx.engine.pacing`).
        """
        arguments = inspect.signature(keras.Model.fit).bind(self, *args, **kwargs).arguments
        arguments.pop("self")
        if self._engine_active():
            arguments["callbacks"] = self._engine_callbacks(arguments.get("callbacks"))
        try:
            return super().fit(**arguments)
        except ValueError as error:
            if "Could not infer the size of the data" not in str(error):
                raise
            raise ValueError(
                f"The training data has no known length, so Keras cannot form windows of "
                f"accum_steps={self._accum_steps} micro-batches over it. Pass steps_per_epoch "
                "(counted in micro-batches), e.g. with a repeated dataset, or give the dataset a "
                "length with tf.data.experimental.assert_cardinality."
            ) from error
        finally:
            if isinstance(self.train_function, WindowLoop):
                self.train_function.stop_pacing()

    def _engine_callbacks(self, callbacks: Any) -> list:
        """The user's callbacks, after the engine's own for this ``fit``: carry alignment
        (``partial_window="carry"``) and call pacing (where
        :func:`~ga_tfx.engine.pacing.should_pace` allows)."""
        callbacks = list(callbacks or [])
        engine = []
        if self._partial_window == "carry":
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
        internals.set_steps_per_execution(self, 1)
        try:
            with loop.one_window_per_call():
                return super().train_on_batch(*args, **kwargs)
        finally:
            internals.set_steps_per_execution(self, self._execution_steps)

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
        self.train_function = WindowLoop(self)
        return self.train_function

    # ------------------------------------------------------------------ the engine
    def _use_engine_always(self) -> None:
        """Train through the engine also with ``accum_steps=1`` and no AGC (where it would
        step aside for plain Keras): for callers inside ga_tfx that compare models by what the
        engine counts (the tuner plugin's trials, ``samples_seen``). Call before ``fit``."""
        self._always_use_engine = True

    def _engine_active(self) -> bool:
        # accum_steps=1 without AGC is plain Keras training, unless _use_engine_always().
        return self._accum_steps > 1 or self._agc is not None or self._always_use_engine

    def _build_gradient_accumulator(self) -> None:
        variables = self.trainable_variables
        if not variables:
            raise ValueError("The model has no trainable variables to accumulate gradients for.")
        acc = self.gradient_accumulator
        if acc is None or not acc.matches(variables):
            if self._agc is not None:
                self._agc.check_variables(variables)
            with self.distribute_strategy.scope():
                self._set_accumulator(GradientAccumulator(variables))
        if self._log_grad_norm and self._grad_norm_holder.value is None:
            with self.distribute_strategy.scope():
                self._grad_norm_holder.value = keras.metrics.Mean(name="grad_norm")
        for layer in self._window_layers():
            if hasattr(layer, "ga_attach_to_engine"):
                layer.ga_attach_to_engine(self._accum_steps)
