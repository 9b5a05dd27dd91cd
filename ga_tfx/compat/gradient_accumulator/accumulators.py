"""``gradient_accumulator.accumulators`` on the ga-tfx engine: the model and optimizer wrappers.

Signatures and argument meanings are those of ``gradient-accumulator`` 0.5.2; the training
they run is ga-tfx's (one update per window with the sample-weighted mean gradient, AGC once per
update, nothing of the optimizer moving between updates). The README's migration table lists
where the package and this module differ and why.
"""

import ga_tfx
from ga_tfx import _validation
from ga_tfx._keras import keras
from ga_tfx._schema import Spec
from ga_tfx.compat._arguments import PACKAGE_CLIP_FACTOR, PACKAGE_EPS, PACKAGE_REDUCTION
from ga_tfx.config import FIELDS

from typing import Any, Dict, Optional, Sequence, Union, cast

_MIXED_PRECISION = Spec(bool, "scale the loss with a LossScaleOptimizer")
_USE_AGC = Spec(bool, "adaptive gradient clipping of the accumulated gradient")
_DISTRIBUTED = Spec(bool, "gradient-accumulator's multi-replica path (always on in ga-tfx)")
_REDUCTION = Spec(str, "how a window's gradients are combined", choices=("MEAN", "mean"))
# Optimizer keyword arguments the package's wrapper accepts that ga-tfx forwards to the wrapped
# optimizer, where they act once per update on the accumulated gradient.
_CLIP_ARGUMENTS = ("clipnorm", "clipvalue", "global_clipnorm")

# The package's settings as they appear in GradientAccumulateModel.get_config().
_MODEL_SETTINGS = (
    "accum_steps",
    "mixed_precision",
    "use_agc",
    "clip_factor",
    "eps",
    "experimental_distributed_support",
    "partial_window",
    "agc_exclude",
)


def _use_agc(use_agc: Any, agc: Any) -> bool:
    """``use_agc``, or its alias ``agc`` (the name the package's README uses)."""
    use_agc = _USE_AGC.check("use_agc", use_agc)
    if agc is None:
        return use_agc
    agc = _USE_AGC.check("agc", agc)
    if use_agc and not agc:
        raise ValueError(
            f"agc={agc!r} and use_agc={use_agc!r} disagree: agc is an alias of use_agc; give "
            "one of them."
        )
    return agc


@keras.saving.register_keras_serializable(package="ga_tfx_compat")
class GradientAccumulateModel(ga_tfx.GradientAccumulateModel):
    """``gradient_accumulator.GradientAccumulateModel`` running on the exact ga-tfx engine.

    Built like a functional model: ``GradientAccumulateModel(accum_steps=4, inputs=model.input,
    outputs=model.output)``. ``fit`` sees micro-batches (``batch_size=`` or the batches of a
    dataset); the optimizer updates once per ``accum_steps`` of them with the gradient of the
    mean loss over all their samples (big-batch training, also for a shorter last window).

    Args:
      accum_steps: int >= 1 (default 1): micro-batches per optimizer update.
      mixed_precision: bool (default False). True: the loss is scaled; a compiled optimizer
        that is not a ``keras.mixed_precision.LossScaleOptimizer`` is wrapped in one. The
        compute dtype is the layers' (set ``keras.mixed_precision.set_global_policy`` before
        building them, as with the package). ga-tfx also scales the loss when this is False but
        the optimizer is a LossScaleOptimizer (compile inserts one under ``mixed_float16``).
        Gradients are unscaled and accumulated in float32; a window with a non-finite gradient
        is skipped as a whole.
      use_agc: bool (default False): adaptive gradient clipping, applied once per update to the
        accumulated gradient (the package clips each micro-batch's gradient).
      clip_factor: AGC's ``λ`` (float > 0, default 0.01, the package's default).
      eps: AGC's lower bound on parameter norms (float >= 0, default 1e-3).
      experimental_distributed_support: bool (default False). Accepted and without effect:
        ga-tfx models run under ``tf.distribute`` strategies either way, exactly, with any
        optimizer (the package's flag applies zero gradients on non-update steps, exact for
        plain SGD only).
      *args: positional arguments of ``keras.Model`` (after the six above, as in the package).
      agc: alias of ``use_agc`` (the package's README writes ``agc=True``, which the package
        itself rejects).
      partial_window, agc_exclude: ga-tfx settings (keyword only): what to do with an epoch's
        last window of fewer than ``accum_steps`` micro-batches (``"apply"``, ``"drop"``,
        ``"carry"``), and glob patterns of variable names AGC leaves alone.
      **kwargs: ``inputs``, ``outputs``, ``name``... as ``keras.Model``.
    """

    def __init__(
        self,
        accum_steps: int = 1,
        mixed_precision: bool = False,
        use_agc: bool = False,
        clip_factor: float = PACKAGE_CLIP_FACTOR,
        eps: float = PACKAGE_EPS,
        experimental_distributed_support: bool = False,
        *args: Any,
        agc: Optional[bool] = None,
        partial_window: str = "apply",
        agc_exclude: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        use_agc = _use_agc(use_agc, agc)
        mixed_precision = _MIXED_PRECISION.check("mixed_precision", mixed_precision)
        distributed = _DISTRIBUTED.check(
            "experimental_distributed_support", experimental_distributed_support
        )
        clip_factor = cast(float, _validation.check_positive_float(clip_factor, "clip_factor"))
        eps = cast(float, _validation.check_positive_float(eps, "eps", allow_zero=True))
        super().__init__(
            *args,
            accum_steps=accum_steps,
            partial_window=partial_window,
            agc_clip_factor=clip_factor if use_agc else None,
            agc_eps=eps,
            agc_exclude=agc_exclude,
            **kwargs,
        )
        self.mixed_precision = mixed_precision
        self.use_agc = use_agc
        self.clip_factor = clip_factor
        self.eps = eps
        self.experimental_distributed_support = distributed

    def compile(self, optimizer: Any = "rmsprop", *args: Any, **kwargs: Any) -> None:
        """``keras.Model.compile``; with ``mixed_precision=True`` the optimizer scales the loss."""
        if self.mixed_precision:
            optimizer = _loss_scaled(optimizer)
        super().compile(optimizer, *args, **kwargs)

    def get_config(self) -> Dict[str, Any]:
        config = super().get_config()
        # The package's names for the AGC settings; the graph and ga-tfx-only settings stay.
        for key in ("agc_clip_factor", "agc_eps"):
            config.pop(key, None)
        config.update(
            mixed_precision=self.mixed_precision,
            use_agc=self.use_agc,
            clip_factor=self.clip_factor,
            eps=self.eps,
            experimental_distributed_support=self.experimental_distributed_support,
        )
        return config

    @classmethod
    def from_config(
        cls, config: Dict[str, Any], custom_objects: Optional[Dict[str, Any]] = None
    ) -> "GradientAccumulateModel":
        config = dict(config)
        settings = {key: config.pop(key) for key in (*_MODEL_SETTINGS, *FIELDS) if key in config}
        # ga-tfx rebuilds the functional graph; this class then wraps the same layers.
        graph = ga_tfx.GradientAccumulateModel.from_config(
            dict(config, accum_steps=settings.get("accum_steps", 1)), custom_objects
        )
        return cls(inputs=graph.inputs, outputs=graph.outputs, name=graph.name, **settings)


def _loss_scaled(optimizer: Any) -> Any:
    """``optimizer`` (an instance or an identifier) as a LossScaleOptimizer."""
    optimizer = keras.optimizers.get(optimizer)
    if isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer):
        return optimizer
    return keras.mixed_precision.LossScaleOptimizer(optimizer)


@keras.saving.register_keras_serializable(package="ga_tfx_compat")
class GradientAccumulateOptimizer(ga_tfx.GradientAccumulateOptimizer):
    """``gradient_accumulator.GradientAccumulateOptimizer`` running on the ga-tfx optimizer wrapper.

    The wrapped optimizer steps once per ``accum_steps`` calls of ``apply_gradients`` with the
    mean of their gradients; on the other calls nothing of it moves (its ``iterations``,
    moments and learning-rate schedule included). The package instead runs the wrapped
    optimizer on every call (with zero gradients between updates), which moves momentum and
    Adam state and counts ``iterations`` per micro-batch.

    Args:
      optimizer: a tf-keras optimizer instance or identifier (``"SGD"``, the package's default,
        ``"adam"``, a config dict), resolved with ``keras.optimizers.get``.
      accum_steps: int >= 1 (default 1): calls of ``apply_gradients`` per update.
      reduction: ``"MEAN"`` (default, the only value: the package stores this argument and
        always averages; ga-tfx averages with sample weights when told the micro-batch sizes).
      name: the wrapper's name (default ``"GradientAccumulateOptimizer"``).
      **kwargs: ``clipnorm``, ``clipvalue``, ``global_clipnorm``: set on the wrapped optimizer,
        so they act once per update on the accumulated gradient (the package's wrapper clips
        each micro-batch's gradient). Other keywords (the package's legacy ``lr``, ``decay``)
        are rejected: set them on the wrapped optimizer.
    """

    def __init__(
        self,
        optimizer: Union[str, dict, Any] = "SGD",
        accum_steps: int = 1,
        reduction: str = PACKAGE_REDUCTION,
        name: str = "GradientAccumulateOptimizer",
        **kwargs: float,
    ) -> None:
        reduction = _REDUCTION.check("reduction", reduction)
        unknown = sorted(set(kwargs) - set(_CLIP_ARGUMENTS))
        if unknown:
            raise TypeError(
                f"GradientAccumulateOptimizer got unsupported keyword argument(s) {unknown}; "
                f"allowed: {list(_CLIP_ARGUMENTS)} (applied by the wrapped optimizer, once per "
                "update). Set the learning rate and its decay on the wrapped optimizer."
            )
        if isinstance(optimizer, (str, dict)):  # a name or config, as the package accepts
            optimizer = keras.optimizers.get(optimizer)
        super().__init__(optimizer, accum_steps, name=name)
        for key, value in kwargs.items():
            _set_clipping(self.optimizer, key, value)
        self.reduction = reduction

    def get_config(self) -> Dict[str, Any]:
        config = super().get_config()
        # The package's wrapper has none of ga-tfx's settings but accum_steps: its config keys
        # are the package's.
        for key in FIELDS:
            if key != "accum_steps":
                config.pop(key, None)
        config["reduction"] = self.reduction
        return config


def _set_clipping(optimizer: Any, key: str, value: float) -> None:
    current = getattr(optimizer, key, None)
    if current is not None and current != value:
        raise ValueError(
            f"{key}={value!r} conflicts with the wrapped optimizer's {key}={current!r}; set it "
            "in one place."
        )
    setattr(optimizer, key, value)
