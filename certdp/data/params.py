"""Typed, range-checked parsing of configuration values, one value at a time.

Every parser is a pure function ``parser(value, key, *, ...) -> value`` that either returns the
value in its canonical Python type or raises :class:`~certdp.errors.ConfigError` whose message
reads ``<key>: <what is wrong>; allowed: <what is allowed>`` (the CLI prints it as
``certdp: error: ...`` and exits 2).  Parsers are idempotent: a parsed value parses to itself,
so a loader may re-parse settings it was handed already parsed.

The values come from Hydra/OmegaConf, which types each override by its text: ``5`` is an int,
``2.7`` and ``1e3`` are floats, ``true`` is a bool, ``null`` is None, ``[1,2]`` a list and
anything else a string.  Hence the rules:

* an integer key takes an int, or a float with an integral value (``1e3``); never a bool, a
  string (``'5'`` quoted is a string) or a fractional float (``2.7`` is refused, not truncated);
* a real key takes an int or a float, never a bool or a string, and is always finite;
* a boolean key takes only ``true`` / ``false``;
* ``none=True`` lets ``null`` through as None (it then means "the documented default").

:class:`Field` and :func:`parse_settings` apply a table of parsers to a whole config section
(unknown keys refused, absent keys filled with the table's defaults).  A settings dataclass
declares each of its settings once, as a field made by :func:`setting` (the :class:`Field` rides
in the dataclass field's metadata); :func:`settings_of` reads the table back from the class, and
:func:`check_settings` checks a value built directly (not read from a config) against it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import partial
from numbers import Integral, Real
from typing import Any, Callable, Mapping, Sequence

from certdp.errors import ConfigError

# Integers beyond this are not exactly representable as floats; no setting needs them.
_INT_LIMIT = 2 ** 53


def _show(value: Any) -> str:
    """A value as the user would recognise it in a message (strings quoted)."""
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else repr(value[:37] + "...")
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, Real) and not isinstance(value, Integral):
        return repr(float(value))          # shortest exact form: 2.7, 1e+300, inf, nan
    if isinstance(value, Integral):
        return str(int(value))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return str(value)


def _fail(key: str, value: Any, problem: str, allowed: str) -> ConfigError:
    return ConfigError(key, f"got {_show(value)} ({problem}); allowed: {allowed}")


def _range_text(kind: str, lo, hi, lo_open: bool, hi_open: bool) -> str:
    if lo is not None and hi is not None:
        return f"{kind} in {'(' if lo_open else '['}{_show(lo)}, {_show(hi)}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{kind} {'>' if lo_open else '>='} {_show(lo)}"
    if hi is not None:
        return f"{kind} {'<' if hi_open else '<='} {_show(hi)}"
    return kind


def _with_null(text: str, none: bool, null_means: str | None) -> str:
    if not none:
        return text
    return f"{text}, or null" + (f" ({null_means})" if null_means else "")


def _check_range(value, key, *, lo, hi, lo_open, hi_open, allowed):
    if lo is not None and (value < lo or (lo_open and value == lo)):
        raise _fail(key, value, "too small", allowed)
    if hi is not None and (value > hi or (hi_open and value == hi)):
        raise _fail(key, value, "too large", allowed)


def _kind_of(value: Any) -> str:
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, Integral):
        return "an integer"
    if isinstance(value, Real):
        return "a number"
    return f"a {type(value).__name__}"


def integer(value: Any, key: str, *, lo: int | None = None, hi: int | None = None,
            none: bool = False, null_means: str | None = None) -> int | None:
    """An integer in ``[lo, hi]`` (either bound optional).  A float is accepted only when it is
    integral (``1e3`` -> 1000); ``2.7`` is an error, never truncated."""
    allowed = _with_null(_range_text("an integer", lo, hi, False, False), none, null_means)
    if value is None:
        if none:
            return None
        raise _fail(key, value, "a value is required", allowed)
    if isinstance(value, bool) or not isinstance(value, Real):
        raise _fail(key, value, f"{_kind_of(value)}, not an integer", allowed)
    given = value
    if not isinstance(value, Integral):
        v = float(value)
        if not math.isfinite(v) or not v.is_integer():
            raise _fail(key, given, "not finite" if not math.isfinite(v) else "not a whole number", allowed)
        value = v
    if abs(value) > _INT_LIMIT:
        raise _fail(key, given, "too large", allowed)
    value = int(value)
    if lo is not None and value < lo:
        raise _fail(key, given, "too small", allowed)
    if hi is not None and value > hi:
        raise _fail(key, given, "too large", allowed)
    return value


def real(value: Any, key: str, *, lo: float | None = None, hi: float | None = None,
         lo_open: bool = False, hi_open: bool = False, none: bool = False,
         null_means: str | None = None) -> float | None:
    """A finite number within the given bounds (``lo_open``/``hi_open`` exclude the bound)."""
    allowed = _with_null(_range_text("a finite number", lo, hi, lo_open, hi_open), none, null_means)
    if value is None:
        if none:
            return None
        raise _fail(key, value, "a value is required", allowed)
    if isinstance(value, bool) or not isinstance(value, Real):
        raise _fail(key, value, f"{_kind_of(value)}, not a number", allowed)
    v = float(value)
    if not math.isfinite(v):
        raise _fail(key, value, "not finite", allowed)
    _check_range(v, key, lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open, allowed=allowed)
    return v


def boolean(value: Any, key: str, *, none: bool = False, null_means: str | None = None) -> bool | None:
    """``true`` or ``false`` only (no 0/1, no 'yes')."""
    allowed = _with_null("true or false", none, null_means)
    if value is None:
        if none:
            return None
        raise _fail(key, value, "a value is required", allowed)
    if not isinstance(value, bool):
        raise _fail(key, value, f"{_kind_of(value)}, not a boolean", allowed)
    return value


def choice(value: Any, key: str, *, allowed: Sequence[str], none: bool = False,
           null_means: str | None = None) -> str | None:
    """One of the strings in ``allowed``."""
    text = _with_null(", ".join(allowed), none, null_means)
    if value is None:
        if none:
            return None
        raise _fail(key, value, "a value is required", text)
    if not isinstance(value, str) or value not in allowed:
        raise _fail(key, value, "unknown option", text)
    return value


def text(value: Any, key: str, *, what: str = "a non-empty string", none: bool = False,
         null_means: str | None = None) -> str | None:
    """A non-empty string (a path, a column name).  Hydra reads ``dataset.target=2020`` as the
    int 2020, so integers and finite floats are turned into their text; booleans, lists and
    empty strings are refused."""
    allowed = _with_null(what, none, null_means)
    if value is None:
        if none:
            return None
        raise _fail(key, value, "a value is required", allowed)
    if isinstance(value, bool) or not isinstance(value, (str, Real)):
        raise _fail(key, value, f"{_kind_of(value)}, not a string", allowed)
    if isinstance(value, Real) and not isinstance(value, str):
        if not math.isfinite(float(value)):
            raise _fail(key, value, "not finite", allowed)
        value = str(value)
    if not value.strip():
        raise _fail(key, value, "empty", allowed)
    return value


def names(value: Any, key: str, *, what: str = "a non-empty list of distinct names",
          none: bool = False, null_means: str | None = None) -> tuple[str, ...] | None:
    """A non-empty list of distinct non-empty strings; a single string is a list of one."""
    allowed = _with_null(what, none, null_means)
    if value is None:
        if none:
            return None
        raise _fail(key, value, "a value is required", allowed)
    if isinstance(value, (str, Real)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise _fail(key, value, f"{_kind_of(value)}, not a list", allowed)
    if not value:
        raise _fail(key, value, "empty", allowed)
    out = tuple(text(v, key, what=allowed) for v in value)
    dup = sorted({v for v in out if out.count(v) > 1})
    if dup:
        raise _fail(key, value, f"{', '.join(map(repr, dup))} repeated", allowed)
    return out


def integers(value: Any, key: str, *, lo: int | None = None, hi: int | None = None,
             length: int | None = None, min_length: int = 1, distinct: bool = False,
             none: bool = False, null_means: str | None = None) -> tuple[int, ...] | None:
    """A list of integers, each in ``[lo, hi]``; exactly ``length`` of them when given, else at
    least ``min_length``; all different when ``distinct``."""
    size = (f"a list of {length}" if length is not None
            else f"a list of at least {min_length}" if min_length > 1
            else "a non-empty list of" if min_length == 1 else "a list of")
    each = _range_text("integers", lo, hi, False, False)
    allowed = _with_null(f"{size} {'distinct ' if distinct else ''}{each}", none, null_means)
    if value is None:
        if none:
            return None
        raise _fail(key, value, "a value is required", allowed)
    if not isinstance(value, (list, tuple)):
        raise _fail(key, value, f"{_kind_of(value)}, not a list", allowed)
    if length is not None and len(value) != length:
        raise _fail(key, value, f"{len(value)} value{'s' if len(value) != 1 else ''}, not {length}", allowed)
    if len(value) < min_length:
        raise _fail(key, value, "too few values" if value else "empty", allowed)
    out = []
    for v in value:
        try:
            out.append(integer(v, key, lo=lo, hi=hi))
        except ConfigError:
            raise _fail(key, value, f"{_show(v)} is not such an integer", allowed) from None
    if distinct and len(set(out)) != len(out):
        raise _fail(key, value, "values repeated", allowed)
    return tuple(out)


def reals(value: Any, key: str, *, lo: float | None = None, hi: float | None = None,
          lo_open: bool = False, hi_open: bool = False, min_length: int = 1, max_length: int | None = None,
          scalar_ok: bool = True, none: bool = False, null_means: str | None = None) -> tuple[float, ...] | None:
    """A list of finite numbers, each within the given bounds; at least ``min_length`` (and at
    most ``max_length``) of them.  With ``scalar_ok`` one number is a list of one."""
    size = ("a list of" if min_length == 0 else "a non-empty list of" if min_length == 1
            else f"a list of at least {min_length}")
    if max_length == 1:
        size = "one"
    allowed = _with_null(f"{size} {_range_text('finite numbers', lo, hi, lo_open, hi_open)}", none, null_means)
    if value is None:
        if none:
            return None
        raise _fail(key, value, "a value is required", allowed)
    if scalar_ok and isinstance(value, Real) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise _fail(key, value, f"{_kind_of(value)}, not a list", allowed)
    if len(value) < min_length:
        raise _fail(key, value, "too few values" if value else "empty", allowed)
    if max_length is not None and len(value) > max_length:
        raise _fail(key, value, f"{len(value)} values, at most {max_length}", allowed)
    out = []
    for v in value:
        try:
            out.append(real(v, key, lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open))
        except ConfigError:
            raise _fail(key, value, f"{_show(v)} is not such a number", allowed) from None
    return tuple(out)


def choices(value: Any, key: str, *, allowed: Sequence[str], min_length: int = 1, none: bool = False,
            null_means: str | None = None) -> tuple[str, ...] | None:
    """A list of distinct names from ``allowed`` (a single name is a list of one); empty only
    when ``min_length`` is 0."""
    size = "a list of" if min_length == 0 else "a non-empty list of"
    text_allowed = _with_null(f"{size} distinct names from: {', '.join(allowed)}", none, null_means)
    if value is None:
        if none:
            return None
        raise _fail(key, value, "a value is required", text_allowed)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise _fail(key, value, f"{_kind_of(value)}, not a list", text_allowed)
    if len(value) < min_length:
        raise _fail(key, value, "empty", text_allowed)
    for v in value:
        if not isinstance(v, str) or v not in allowed:
            raise _fail(key, value, f"unknown {_show(v)}", text_allowed)
    if len(set(value)) != len(value):
        raise _fail(key, value, "values repeated", text_allowed)
    return tuple(value)


def section(value: Any, key: str) -> dict:
    """A config section: a mapping (null or absent means empty)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _fail(key, value, f"{_kind_of(value)}, not a section of settings", f"{key}.<setting>=value")
    return dict(value)


def interval(value: Any, key: str, *, width_ok: bool = True, none: bool = False,
             null_means: str | None = None) -> tuple[float, float] | None:
    """A closed interval ``[lo, hi]`` of finite numbers with ``lo < hi``.  With ``width_ok`` a
    single number ``w > 0`` means ``[-w/2, w/2]`` (a width centred on 0)."""
    allowed = "[lo, hi] with finite lo < hi" + (", or one finite width > 0 (centred on 0)" if width_ok else "")
    allowed = _with_null(allowed, none, null_means)
    if value is None:
        if none:
            return None
        raise _fail(key, value, "a value is required", allowed)
    if width_ok and isinstance(value, Real) and not isinstance(value, bool):
        w = float(value)
        if not math.isfinite(w) or w <= 0:
            raise _fail(key, value, "a width must be finite and > 0", allowed)
        return (-w / 2, w / 2)
    if not isinstance(value, (list, tuple)):
        raise _fail(key, value, f"{_kind_of(value)}, not a list", allowed)
    if len(value) != 2:
        raise _fail(key, value, f"{len(value)} value{'s' if len(value) != 1 else ''}, not 2", allowed)
    lo, hi = value
    for v in (lo, hi):
        if isinstance(v, bool) or not isinstance(v, Real):
            raise _fail(key, value, f"{_show(v)} is not a number", allowed)
        if not math.isfinite(float(v)):
            raise _fail(key, value, "not finite", allowed)
    lo, hi = float(lo), float(hi)
    if not lo < hi:
        raise _fail(key, value, "lo must be below hi", allowed)
    return (lo, hi)


def optional(parse: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
    """``parse`` that lets None through without advertising ``null``: for a required setting
    whose absence its loader reports with more context (e.g. the columns a target may name)."""
    def parse_or_none(value: Any, key: str) -> Any:
        return None if value is None else parse(value, key)
    parse_or_none.inner = parse            # read by describe()
    return parse_or_none


def anything(value: Any, key: str) -> Any:
    """A value parsed elsewhere (e.g. ``dataset.model``, read by the model settings)."""
    return value


@dataclass(frozen=True)
class Field:
    """One setting, declared once: its default (used when the key is absent), its parser (the
    type, range and refusal message) and a one-line ``help``.  Everything else that speaks of
    the setting is derived from this declaration: the strict reading of a section
    (:func:`parse_settings`), the settings reference ``docs/settings.md``
    (``tools/settings_doc.py``), ``certdp list settings`` and the check that the YAML defaults
    of ``configs/`` agree (``tests/test_settings_schema.py``).  Which commands read it follows
    from the table it sits in (:mod:`certdp.settings.schema`)."""
    default: Any
    parse: Callable[[Any, str], Any]
    help: str = ""


def describe(parse: Callable[[Any, str], Any]) -> str:
    """The type and allowed values of a parser, in words (the settings reference's "type /
    allowed" column): read from the parser's own keywords, so that it cannot drift from what
    the parser accepts."""
    if hasattr(parse, "describe"):
        return parse.describe()
    if isinstance(parse, partial):
        fn, kw = parse.func, dict(parse.keywords)
        if fn is integer or fn is real or fn is integers or fn is reals:
            kind = {integer: "integer", real: "real", integers: "list of integers", reals: "list of reals"}[fn]
            text_ = _range_text(kind, kw.get("lo"), kw.get("hi"), kw.get("lo_open", False), kw.get("hi_open", False))
        elif fn is choice:
            text_ = " | ".join(kw["allowed"])
        elif fn is choices:
            text_ = "list of " + " | ".join(kw["allowed"])
        elif fn is boolean:
            text_ = "true | false"
        elif fn in (text, names, interval):
            text_ = kw.get("what") or {text: "text", names: "list of names", interval: "[lo, hi]"}[fn]
        else:
            text_ = describe(fn)
        return _with_null(text_, kw.get("none", False), kw.get("null_means"))
    inner = getattr(parse, "inner", None)
    if inner is not None:                                  # optional(parse)
        return _with_null(describe(inner), True, None)
    if parse is boolean:
        return "true | false"
    if parse is integer:
        return "integer"
    if parse is real:
        return "real"
    if parse is text:
        return "text"
    if parse is anything:
        return "see its section"
    doc = " ".join((getattr(parse, "__doc__", None) or "").replace("``", "").split())
    first = doc.split(". ")[0].split("; ")[0].rstrip(".")
    if len(first) > 100:                    # the docstring's opening clause is the summary
        first = first[:100].rsplit(" ", 1)[0] + " ..."
    return first or getattr(parse, "__name__", "value")


def parse_settings(cfg: Mapping[str, Any] | None, fields: Mapping[str, Field], *, prefix: str,
                   owner: str | None = None) -> dict[str, Any]:
    """Parse a config section against its table of fields: every key of ``cfg`` must be in
    ``fields`` (else ``<prefix>.<key>: unknown setting``), absent keys take their defaults, and
    each value goes through its parser under the dotted key ``<prefix>.<key>``.  Defaults are
    parsed too, so a wrong default fails loudly.  Returns a new dict in the table's order."""
    cfg = dict(cfg or {})
    unknown = [k for k in cfg if k not in fields]
    if unknown:
        who = f" of {owner}" if owner else ""
        raise ConfigError(f"{prefix}.{unknown[0]}", f"unknown setting{who}; allowed: {', '.join(fields)}")
    return {k: f.parse(cfg.get(k, f.default), f"{prefix}.{k}") for k, f in fields.items()}


# ------------------------------------------------------------------ settings declared in dataclass fields
SETTING = "certdp.setting"      # the metadata key of a dataclass field that is a setting
NOT_A_SETTING = "certdp.not_a_setting"   # metadata of a field of a settings dataclass that is not one (why)


def setting(default: Any, parse: Callable[[Any, str], Any], help: str, *, resolve_on_use: bool = False) -> Any:
    """A field of a settings dataclass that is a setting, declared once: ``default`` is the
    value a config takes when the key is absent (as a config writes it: ``[1, 2]``, ``auto``),
    ``parse`` its parser, ``help`` one line.  The :class:`Field` is kept in the field's metadata
    (:func:`settings_of`); the dataclass's own default is the parsed ``default``, so that a value
    built directly (tests, benchmarks) and a config without the key agree.  A ``default`` its
    parser refuses (None where a value is required) leaves the field without a default: the
    configs must supply it.  ``resolve_on_use``: the default is parsed when a value is built (a
    parser that asks the machine, such as the device's), not when the class is defined."""
    decl = Field(default, parse, help)
    if resolve_on_use:
        return dataclasses.field(default_factory=lambda: parse(default, "default"), metadata={SETTING: decl})
    try:
        value = parse(default, "default")
    except ConfigError:
        return dataclasses.field(metadata={SETTING: decl})
    try:
        hash(value)
    except TypeError:                       # a nested section's dict: a fresh copy for each value
        return dataclasses.field(default_factory=lambda: parse(default, "default"), metadata={SETTING: decl})
    return dataclasses.field(default=value, metadata={SETTING: decl})


def settings_of(cls: type) -> dict[str, Field]:
    """The table of settings a dataclass declares (:func:`setting`), in field order: the one
    declaration that the parser (:func:`parse_settings`), the settings reference and the YAML
    check read."""
    return {f.name: f.metadata[SETTING] for f in dataclasses.fields(cls) if SETTING in f.metadata}


def check_settings(value: Any, prefix: str, table: Mapping[str, Field] | None = None) -> None:
    """Check every setting of a dataclass value against its own declaration (the parser of each
    field; ``table``: a variant derived from it), for values built directly rather than read from
    a config: the same one-line refusal ``<prefix>.<name>: ...; allowed: ...`` as a config's."""
    for name, decl in (settings_of(type(value)) if table is None else table).items():
        v = getattr(value, name)
        if not dataclasses.is_dataclass(v):      # a nested settings value checked itself when built
            decl.parse(v, f"{prefix}.{name}")


class Names(Sequence):
    """The names of a registry as they are when a value is parsed, not when the setting was
    declared: a release or accountant registered later (an extension) is allowed too."""

    def __init__(self, names: Callable[[], Sequence[str]]):
        self._names = names

    def __getitem__(self, i):
        return tuple(self._names())[i]

    def __len__(self) -> int:
        return len(tuple(self._names()))

    def __repr__(self) -> str:
        return repr(tuple(self._names()))


# Seeds seed numpy's and torch's generators (both need a non-negative integer below 2^63).
SEED = partial(integer, lo=0, hi=2 ** 53)
