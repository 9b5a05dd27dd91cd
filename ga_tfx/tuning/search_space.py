"""The accumulation search space of the Keras Tuner plugin, declared once (standard library only).

:class:`AccumulationSearchSpace` is a frozen settings dataclass (see :mod:`ga_tfx._schema`):
constructing it checks every field, and the TFX Tuner's ``custom_config["ga_tfx_search"]``, the
``ga-tfx --search-*`` flags and the README derive from its fields. :mod:`ga_tfx.tuning.hypermodel`
(which imports keras_tuner) declares these hyperparameters on a trial's ``hp``.
"""

from ga_tfx import _validation
from ga_tfx._schema import Settings, setting

import dataclasses
import math
import numbers
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Union

LR_SCALING_RULES = ("none", "linear", "sqrt")


def _unique(values: Tuple[Any, ...]) -> Optional[str]:
    return "has duplicate values" if len(set(values)) != len(values) else None


def _min_max(pair: Tuple[float, ...]) -> Optional[str]:
    if len(pair) != 2 or pair[0] > pair[1]:
        return "must be a (min, max) pair with min <= max"
    return None


@dataclasses.dataclass(frozen=True)
class AccumulationSearchSpace(Settings):
    """The accumulation hyperparameters of a search, checked when created.

    ``micro_batch_size`` may be given as one integer; it is stored as a tuple.
    """

    accum_steps: Tuple[int, ...] = setting(
        (1, 2, 4),
        spec=_validation.ACCUM_STEPS,
        many=True,
        rule=_unique,
        help="accum_steps values the search tries (effective batch = accum_steps x micro batch)",
    )
    agc_clip_factor: Optional[Tuple[float, ...]] = setting(
        None,
        spec=_validation.AGC_CLIP_FACTOR,
        many=True,
        rule=_min_max,
        help="(min, max) pair of the AGC clip factor, sampled on a log scale (None: AGC not "
        "searched)",
    )
    agc_optional: bool = setting(
        True, kind=bool, help="whether 'AGC off' is one of the searched options"
    )
    micro_batch_size: Tuple[int, ...] = setting(
        (32,),
        kind=int,
        minimum=1,
        many=True,
        rule=_unique,
        help="micro-batch size(s) to search (one value: fixed)",
    )
    learning_rate: Optional[Tuple[float, ...]] = setting(
        None,
        kind=float,
        above=0,
        many=True,
        optional=True,
        rule=_min_max,
        help="(min, max) pair of the learning rate, log scale (None: the optimizer's rate)",
    )
    lr_scaling: str = setting(
        "none",
        kind=str,
        choices=LR_SCALING_RULES,
        help="learning-rate scaling with the effective batch: none, linear or sqrt",
    )
    base_batch_size: Optional[int] = setting(
        None,
        kind=int,
        minimum=1,
        optional=True,
        help="effective batch at which the learning rate is unscaled (None: the smallest "
        "micro-batch size)",
    )

    def __post_init__(self) -> None:
        if isinstance(self.micro_batch_size, numbers.Integral) and not isinstance(
            self.micro_batch_size, bool
        ):
            object.__setattr__(self, "micro_batch_size", (self.micro_batch_size,))
        super().__post_init__()

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "AccumulationSearchSpace":
        """From a plain dict (e.g. a TFX ``custom_config`` entry); unknown keys are errors."""
        return cls.from_mapping(config, where="search space")

    def get_config(self) -> Dict[str, Any]:
        return self.to_primitives()

    @property
    def max_effective_batch_size(self) -> int:
        """The largest effective batch of the space: ``max(accum_steps) * max(micro_batch)``."""
        return max(self.accum_steps) * max(self.micro_batch_size)

    @property
    def unscaled_batch_size(self) -> int:
        """``base_batch_size``, or the smallest micro-batch size when it is unset."""
        return self.base_batch_size or min(self.micro_batch_size)

    def searches_agc(self) -> bool:
        return self.agc_clip_factor is not None

    def scaled_learning_rate(self, learning_rate: float, effective_batch_size: int) -> float:
        ratio = effective_batch_size / self.unscaled_batch_size
        factor = {"none": 1.0, "linear": ratio, "sqrt": math.sqrt(ratio)}[self.lr_scaling]
        return learning_rate * factor


def declare(space: AccumulationSearchSpace, hp: Any) -> Dict[str, Any]:
    """Declares the hyperparameters of ``space`` on ``hp`` (a ``keras_tuner.HyperParameters``);
    returns this trial's values as a dict (``accum_steps``, ``micro_batch_size``,
    ``agc_clip_factor``, ``learning_rate``; ``None`` where not searched). The one declaration
    of both Tuner plugins (Keras 2's :mod:`ga_tfx.tuning.hypermodel`, Keras 3's
    :mod:`ga_tfx.keras3.tuning`)."""
    values = {"accum_steps": hp.Choice("accum_steps", space.accum_steps)}
    values["micro_batch_size"] = (
        hp.Choice("micro_batch_size", space.micro_batch_size)
        if len(space.micro_batch_size) > 1
        else space.micro_batch_size[0]
    )
    values["agc_clip_factor"] = None
    if space.agc_clip_factor is not None:
        low, high = space.agc_clip_factor
        if space.agc_optional:
            if hp.Boolean("agc", default=True):
                with hp.conditional_scope("agc", [True]):
                    values["agc_clip_factor"] = hp.Float(
                        "agc_clip_factor", low, high, sampling="log"
                    )
        else:
            values["agc_clip_factor"] = hp.Float("agc_clip_factor", low, high, sampling="log")
    values["learning_rate"] = None
    if space.learning_rate is not None:
        values["learning_rate"] = hp.Float("learning_rate", *space.learning_rate, sampling="log")
    return values


def hypermodel_arguments(
    build_model: Callable[[Any], Any],
    search_space: Union[AccumulationSearchSpace, Dict[str, Any], None],
) -> AccumulationSearchSpace:
    """Checks a hypermodel's ``build_model`` (``TypeError`` unless callable) and returns its
    search space: ``None`` is the default :class:`AccumulationSearchSpace`, a dict its config
    (:meth:`AccumulationSearchSpace.from_config`). The Keras 2 and Keras 3 plugins both take
    their arguments through here."""
    if not callable(build_model):
        raise TypeError(f"build_model must be callable build_model(hp), got {build_model!r}.")
    if search_space is None:
        return AccumulationSearchSpace()
    if isinstance(search_space, dict):
        return AccumulationSearchSpace.from_config(search_space)
    return search_space
