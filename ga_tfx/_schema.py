"""Declared settings: each setting is declared once, and its check, parsing and docs derive from it.

Standard library only (no TensorFlow, no TFX), so that ``ga-tfx --help``, the TFX component's
spec and the README's settings table can read the declarations instantly.

A :class:`Spec` says what a value may be (kind, bounds, choices, whether ``None`` is allowed)
and what it means (one line of help). A frozen dataclass deriving from :class:`Settings` declares
its fields with :func:`setting`; constructing it checks every field (``__post_init__``), so an
instance is always valid, as Accelerate's ``GradientAccumulationPlugin`` is once built. Everything
else -- TFX ``ExecutionParameter`` types, CLI flags, ``custom_config`` parsing, the README table --
is generated from the fields (see ``ga_tfx.components.trainer.settings`` and
``ga_tfx.pipelines.options``).

Every bad value raises :class:`SettingError` naming the setting, the value and what is allowed.
"""

import dataclasses
import math
import numbers
import warnings
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Type, TypeVar

METADATA_KEY = "ga_tfx"
SOURCE_KEY = "ga_tfx.source"  # a like() field's (class, setting)
_KINDS = (int, float, str, bool)

T = TypeVar("T", bound="Settings")


class SettingError(TypeError, ValueError):
    """A setting has a bad value. Catch it as ``ValueError`` (or ``TypeError``: a wrong type)."""


@dataclasses.dataclass(frozen=True)
class Spec:
    """What one setting may be, and what it means.

    Attributes:
      kind: ``int``, ``float``, ``str`` or ``bool``. ``int`` rejects bools and floats such as
        ``4.0`` (a float usually means a computed value went wrong; truncating it would train
        something else); ``bool`` also takes 0/1 (how booleans travel as TFX exec properties);
        ``str`` must be non-empty.
      help: one line: what the setting means, with its unit.
      minimum: inclusive lower bound of a number.
      above: exclusive lower bound of a number.
      maximum: inclusive upper bound of a number.
      choices: the allowed values.
      optional: ``None`` is allowed (meaning "unset" or "off", said in ``help``).
      many: the value is a non-empty list of such values (returned as a tuple); a single
        string is a list of one for ``str`` settings.
      empty: with ``many``, the empty list is allowed too.
      rule: an extra check of the whole (checked) value, returning what is wrong or ``None``
        (e.g. ``min <= max`` of a range); its text is part of the error.
      tunable: a Tuner's best hyperparameters may override it (Trainer settings).
      flag: the command-line flag (default ``--`` + the name with dashes); ``""``: no flag.
      off_flag: a flag that sets an optional setting to ``None`` (e.g. ``--no-agc``).
      renamed_from: the setting's name before 0.3.0, still accepted for one release (a dict
        key a saved pipeline may carry, and its ``--flag``) with a one-line ``FutureWarning``
        naming the new name (:func:`with_new_names`); removed in 0.4.0.
    """

    kind: type
    help: str
    minimum: Optional[float] = None
    above: Optional[float] = None
    maximum: Optional[float] = None
    choices: Optional[Tuple[Any, ...]] = None
    optional: bool = False
    many: bool = False
    empty: bool = False
    rule: Optional[Callable[[Any], Optional[str]]] = None
    tunable: bool = False
    flag: Optional[str] = None
    off_flag: Optional[str] = None
    renamed_from: Optional[str] = None

    def __post_init__(self):
        if self.kind not in _KINDS:
            raise TypeError(f"Spec kind must be one of {_KINDS}, got {self.kind!r}.")

    # ------------------------------------------------------------------ describing
    def bounds(self) -> str:
        """``">= 1"``, ``"> 0"``, ``"in [0, 1]"``... ('' when unbounded)."""
        low = (
            f">= {self.minimum:g}"
            if self.minimum is not None
            else f"> {self.above:g}"
            if self.above is not None
            else ""
        )
        if self.maximum is None:
            return low
        return f"{low} and <= {self.maximum:g}" if low else f"<= {self.maximum:g}"

    def allowed(self) -> str:
        """What is allowed, in words (used in errors, ``--help`` and the README)."""
        if self.many:
            noun = {int: "integers", float: "numbers", str: "strings", bool: "booleans"}
            text = f"a list of {noun[self.kind]} {self.bounds()}".rstrip()
        elif self.choices is not None:
            text = f"one of {', '.join(repr(c) for c in self.choices)}"
        elif self.kind is bool:
            text = "True or False"
        elif self.kind is int:
            text = f"an integer {self.bounds()}".rstrip()
        elif self.kind is float:
            text = f"a number {self.bounds()}".rstrip()
        else:
            text = "a non-empty string"
        return f"{text}, or None" if self.optional else text

    # ------------------------------------------------------------------ checking
    def check(self, name: str, value: Any) -> Any:
        """Returns ``value`` checked and normalised (int/float/bool/tuple), or raises
        :class:`SettingError` naming ``name``, ``value`` and what is allowed."""
        if value is None:
            if self.optional:
                return None
            raise self._error(name, value, typed=True)
        if self.many:
            if isinstance(value, str) and self.kind is str:
                value = (value,)
            if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
                raise self._error(name, value, typed=True)
            if not value and self.empty:
                return ()
            if not value:
                raise SettingError(
                    f"{name} must list at least one value ({self.allowed()}), got an empty list."
                )
            one = dataclasses.replace(self, many=False, optional=False, rule=None)
            checked: Any = tuple(one.check(f"each {name} value", item) for item in value)
        else:
            checked = self._check_one(name, value)
        if self.rule is not None:
            problem = self.rule(checked)
            if problem:
                raise SettingError(f"{name} {problem}, got {value!r}.")
        return checked

    def _check_one(self, name, value):
        kind = self.kind
        if kind is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, numbers.Integral) and value in (0, 1):
                return bool(value)
            raise self._error(name, value, typed=True)
        if kind is str:
            if not isinstance(value, str) or not value:
                raise self._error(name, value, typed=not isinstance(value, str))
        elif kind is int:
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise self._error(name, value, typed=True)
            value = int(value)
        else:  # float
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise SettingError(
                    f"{name} must be a real number {self.bounds()}, got "
                    f"{value!r} of type {type(value).__name__}."
                )
            value = float(value)
            if not math.isfinite(value):
                raise SettingError(
                    f"{name} must be a finite number {self.bounds()}, got {value!r}."
                )
        if self.choices is not None and value not in self.choices:
            raise self._error(name, value)
        if kind is not str and not self._in_bounds(value):
            if kind is float:
                raise SettingError(f"{name} must be {self.bounds()}, got {value!r}.")
            raise self._error(name, value)
        return value

    def _in_bounds(self, value):
        return (
            (self.minimum is None or value >= self.minimum)
            and (self.above is None or value > self.above)
            and (self.maximum is None or value <= self.maximum)
        )

    def _error(self, name, value, typed=False):
        got = f"{value!r} of type {type(value).__name__}" if typed else repr(value)
        return SettingError(f"{name} must be {self.allowed()} ({self.help}), got {got}.")

    # ------------------------------------------------------------------ parsing text
    def parse(self, name: str, text: str) -> Any:
        """A command-line value: ``"4"``, ``"0.08"``, ``"true"``, ``"1,2,4"`` -> checked value."""
        parts = [p.strip() for p in text.split(",")] if self.many else [text.strip()]
        values = [self._parse_one(name, part) for part in parts]
        return self.check(name, values if self.many else values[0])

    def _parse_one(self, name, text):
        try:
            if self.kind is int:
                return int(text)
            if self.kind is float:
                return float(text)
        except ValueError:
            raise SettingError(f"{name} must be {self.allowed()}, got {text!r}.") from None
        if self.kind is bool:
            lowered = text.lower()
            if lowered in ("1", "true", "yes"):
                return True
            if lowered in ("0", "false", "no"):
                return False
            raise SettingError(f"{name} must be true or false, got {text!r}.")
        return text

    def cli_flag(self, name: str) -> Optional[str]:
        """The command-line flag of setting ``name`` (None: it has none)."""
        if self.flag == "":
            return None
        return self.flag or "--" + name.replace("_", "-")

    @property
    def exec_property_type(self) -> type:
        """The primitive a TFX execution property carries (booleans travel as 0/1)."""
        return int if self.kind is bool else self.kind


def setting(
    default: Any = dataclasses.MISSING,
    *,
    spec: Optional[Spec] = None,
    source: Optional[Tuple[type, str]] = None,
    **spec_fields: Any,
) -> Any:
    """A dataclass field declared with a :class:`Spec` (given, or built from ``spec_fields``;
    with both, ``spec_fields`` override the given spec's fields). No ``default``: required.
    ``source``: the ``(class, setting)`` this field is (set by :func:`like`)."""
    if spec is None:
        spec = Spec(**spec_fields)
    elif spec_fields:
        spec = dataclasses.replace(spec, **spec_fields)
    metadata: Dict[str, Any] = {METADATA_KEY: spec}
    if source is not None:
        metadata[SOURCE_KEY] = source
    return dataclasses.field(default=default, metadata=metadata)


def like(cls: type, name: str, default: Any = dataclasses.MISSING, **spec_fields: Any) -> Any:
    """A field with the spec of ``cls``'s setting ``name`` and, unless another is given, its
    default: the same setting seen from another place (e.g. a pipeline option that is a
    Trainer setting, a Trainer setting that is a library setting). The field remembers where
    it comes from, so that :func:`values_for` hands its value on under ``cls``'s name."""
    if default is dataclasses.MISSING:
        default = defaults(cls).get(name, dataclasses.MISSING)
    return setting(default, spec=spec_of(cls, name), source=(cls, name), **spec_fields)


def values_for(settings: Any, cls: type) -> Dict[str, Any]:
    """``{name: value}`` for ``cls`` of the fields of ``settings`` (a settings dataclass) that
    were declared ``like(cls, name)``: the one route of a setting from one place to the next
    (pipeline options to the Trainer, the Trainer's settings to the library), with no
    hand-copied list of fields and under ``cls``'s names (``seed`` -> ``shuffle_seed``)."""
    return {
        field.metadata[SOURCE_KEY][1]: getattr(settings, field.name)
        for field in dataclasses.fields(settings)
        if field.metadata.get(SOURCE_KEY, (None,))[0] is cls
    }


def renamed_message(old: str, new: str) -> str:
    """The one line saying that ``old`` (a setting's name or flag before 0.3.0) is ``new``."""
    return f"{old} is deprecated: use {new} (the old name goes in 0.4.0)."


def warn_renamed(old: str, new: str) -> None:
    """:func:`renamed_message` as a ``FutureWarning`` (shown by default, in the TFX logs too)."""
    warnings.warn(renamed_message(old, new), FutureWarning, stacklevel=3)


def with_new_names(cls: type, values: Mapping[str, Any], where: str) -> Dict[str, Any]:
    """``values`` with each of ``cls``'s settings given under its old name (its spec's
    ``renamed_from``) moved to its name, with :func:`warn_renamed`; :class:`SettingError` when
    both names are given."""
    out = dict(values)
    for name, spec in specs(cls).items():
        old = spec.renamed_from
        if old is None or old not in out:
            continue
        if name in out:
            raise SettingError(
                f"{where} gives {old}={out[old]!r} and {name}={out[name]!r}: {old} is the old "
                f"name of {name}; give {name} only."
            )
        warn_renamed(f"{where} setting {old!r}", repr(name))
        out[name] = out.pop(old)
    return out


def specs(cls: type) -> Dict[str, Spec]:
    """``{name: Spec}`` of the declared fields of a settings dataclass, in declaration order."""
    return {
        f.name: f.metadata[METADATA_KEY]
        for f in dataclasses.fields(cls)
        if METADATA_KEY in f.metadata
    }


def spec_of(cls: type, name: str) -> Spec:
    return specs(cls)[name]


def defaults(cls: type) -> Dict[str, Any]:
    """``{name: default}`` of the declared fields that have one."""
    return {
        f.name: f.default
        for f in dataclasses.fields(cls)
        if METADATA_KEY in f.metadata and f.default is not dataclasses.MISSING
    }


def required(cls: type) -> Tuple[str, ...]:
    """Names of the declared fields without a default."""
    return tuple(
        f.name
        for f in dataclasses.fields(cls)
        if METADATA_KEY in f.metadata and f.default is dataclasses.MISSING
    )


class Settings:
    """Base of frozen settings dataclasses: every field is checked when an instance is made."""

    def __post_init__(self):
        for name, spec in specs(type(self)).items():
            object.__setattr__(self, name, spec.check(name, getattr(self, name)))

    @classmethod
    def from_mapping(cls: Type[T], values: Mapping[str, Any], where: str = "settings") -> T:
        """An instance from a plain dict (exec properties, ``custom_config``, JSON).

        Unknown keys raise :class:`SettingError` (a misspelt setting must not be silently
        ignored); so do missing required ones.
        """
        if not isinstance(values, Mapping):
            raise SettingError(f"{where} must be a dict, got {values!r}.")
        values = with_new_names(cls, values, where)
        known = specs(cls)
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise SettingError(f"Unknown {where} setting(s) {unknown}; known: {list(known)}.")
        missing = [name for name in required(cls) if values.get(name) is None]
        if missing:
            raise SettingError(f"Missing required {where} setting(s) {missing}.")
        return cls(**values)

    def to_primitives(self) -> Dict[str, Any]:
        """``{name: value}`` of primitives (booleans as 0/1, tuples as lists, ``None`` left
        out): what TFX execution properties and JSON carry."""
        out = {}
        for name in specs(type(self)):
            value = getattr(self, name)
            if value is None:
                continue
            out[name] = (
                int(value)
                if isinstance(value, bool)
                else list(value)
                if isinstance(value, tuple)
                else value
            )
        return out


def markdown_table(cls: type, flags: bool = False) -> str:
    """The README table of a settings class: name (or command-line flag), allowed values,
    default, meaning -- generated, so it cannot drift from the declaration."""
    first = "flag" if flags else "setting"
    rows = [f"| {first} | allowed | default | meaning |", "| --- | --- | --- | --- |"]
    all_defaults = defaults(cls)
    for name, spec in specs(cls).items():
        if flags:
            if spec.cli_flag(name) is None:
                continue
            shown = f"`{spec.cli_flag(name)}`" + (f" / `{spec.off_flag}`" if spec.off_flag else "")
        else:
            shown = f"`{name}`"
        default = repr(all_defaults[name]) if name in all_defaults else "required"
        rows.append(f"| {shown} | {spec.allowed()} | {default} | {spec.help} |")
    return "\n".join(rows)
