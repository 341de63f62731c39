"""The map from a raw record to what the model sees, as one small serialisable value.

A :class:`Preprocessing` holds everything needed to turn a raw row (a table's columns, pixels, an
embedding) into model inputs and to read the model's outputs back: which columns, the feature
scaling (shift and scale, optionally after clipping to declared bounds), PCA components if any,
the target scaling of a regression task and the class list of a classification task.  Every
number in it comes from the public split, from user-declared domain bounds, or from the dataset's
generating parameters, so that applying it needs no private statistic (a released model can be
applied to new rows later: :meth:`Preprocessing.apply`, :meth:`Preprocessing.to_dict`).  The one
exception is the explicitly labelled non-private option ``dataset.scaling=private_stats_not_dp``
(the paper's California setting), which :attr:`Preprocessing.not_dp` records and which makes
:attr:`Preprocessing.dp_end_to_end` false.

The feature map, for a raw row ``x`` over :attr:`~Preprocessing.columns`::

    x = fill where x is missing               # private rows only (``private=True``)
    u = clip(x, lower, upper)                 # only when feature bounds are declared
    z = (u - shift) / scale                   # per column
    z = clip(z, -clip, clip)                  # only when ``clip`` is set (tables)
    z = ((z @ components.T) - pca_shift) / pca_scale    # only with PCA

Regression targets: ``y_model = clip((y - target_shift) / target_scale, -clip, clip)`` (a missing
private target is ``target_fill`` first); the model's outputs are in those units and
:meth:`~Preprocessing.target_to_raw` inverts the map (inside the clip range).

Private rows go through the *total* form of the map (``apply(..., private=True)``,
``encode_labels(..., private=True)``): it never refuses a record.  A missing or unreadable cell
(NaN) takes the declared or public ``fill``, an infinite or huge one is clipped (to the declared
bounds, else to ``clip`` model units), an unknown or missing class label becomes
``unknown_label``.  Every constant of these rules comes from the settings or the public rows, so
the map is the same function on neighbouring datasets and substitutes one record for one record:
the adjacency the certificates use is preserved, and no private value can make the run refuse.
Public and test rows (and rows given to a released model later) go through the strict form,
which refuses non-finite cells and unknown labels in one line.  Classification labels:
``label_coding='index'`` codes ``classes[i]`` as ``i`` (int64), ``'sign'`` (two classes, the hinge
convention) codes ``classes[0]`` as -1 and ``classes[1]`` as +1.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, fields
from typing import Any, Mapping, Sequence

import numpy as np

from certdp.errors import ConfigError

FORMAT = "certdp.preprocessing/1"

# Where the feature or target scaling came from.  Only the last one reads private records.
SOURCES = ("public", "bounds", "none", "generated", "private_stats_not_dp")
PRIVATE_STATS = "private_stats_not_dp"
TASKS = ("regression", "binary", "multiclass")
LABEL_CODINGS = ("index", "sign")

# integers in canonical form only: "007" or "+1" stay text labels, so distinct texts stay distinct classes
_INTEGER_LABEL = re.compile(r"^-?(0|[1-9][0-9]*)$")


def label_text(value: Any) -> str:
    """The canonical text of one class label: strings stripped, integral numbers (``3``, ``3.0``,
    ``np.int64(3)``) as ``'3'``, booleans as ``'True'``/``'False'``."""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return str(int(v)) if math.isfinite(v) and v.is_integer() else repr(v)
    return str(value).strip()


def is_integer_label(text: str) -> bool:
    return bool(_INTEGER_LABEL.match(text))


def sorted_classes(labels: Sequence[str]) -> tuple:
    """Distinct labels in a deterministic order: as integers in numeric order when every label is
    an integer (then returned as ints), otherwise as text in code-point order."""
    distinct = sorted(set(labels))
    if distinct and all(is_integer_label(c) for c in distinct):
        return tuple(sorted({int(c) for c in distinct}))
    return tuple(distinct)


def _vector(a, name: str, n: int | None = None) -> np.ndarray:
    v = np.array(a, dtype=np.float64).reshape(-1)
    if n is not None and v.shape[0] != n:
        raise ValueError(f"preprocessing: {name} has {v.shape[0]} values, expected {n}")
    if not np.isfinite(v).all():
        raise ValueError(f"preprocessing: {name} is not finite")
    v.setflags(write=False)
    return v


@dataclass(frozen=True, eq=False)
class Preprocessing:
    """A fitted, immutable feature map and target coding (see the module docstring).

    Units: ``shift``/``scale``/``lower``/``upper`` and ``output_range`` are in the raw units of the
    columns and of the target; everything a model sees or outputs is in the mapped units."""
    columns: tuple[str, ...]
    shift: np.ndarray                          # [d] raw units
    scale: np.ndarray                          # [d] raw units, > 0
    feature_source: str = "none"               # one of SOURCES
    input: str = "table columns"               # what a raw row is, for a reader of the saved map
    lower: np.ndarray | None = None            # [d] declared feature bounds (raw units): rows are clipped to them
    upper: np.ndarray | None = None
    components: np.ndarray | None = None       # [k, d] PCA components (rows), fitted on public rows
    pca_shift: np.ndarray | None = None        # [k]
    pca_scale: np.ndarray | None = None        # [k], > 0
    task: str | None = None                    # one of TASKS; None: a feature map only (no target coding)
    target: str | None = None                  # the target / label column
    target_source: str | None = None           # regression: one of SOURCES
    target_shift: float = 0.0                  # regression: raw units
    target_scale: float = 1.0                  # regression: raw units, > 0
    output_range: tuple[float, float] | None = None   # regression: released values are clipped here (raw units)
    classes: tuple | None = None               # classification: the class labels, in coding order
    label_coding: str | None = None            # classification: one of LABEL_CODINGS
    not_dp: tuple[str, ...] = ()               # the steps that read private statistics ("" = none)
    clip: float | None = None                  # model units: scaled features and targets clipped to [-clip, clip]
    fill: np.ndarray | None = None             # [d] raw units: a private row's missing cell takes this value
    target_fill: float | None = None           # regression, raw units: a private row's missing target
    unknown_label: Any = None                  # classification: the class of a private row's unknown/missing label

    def __post_init__(self):
        d = len(self.columns)
        object.__setattr__(self, "columns", tuple(str(c) for c in self.columns))
        object.__setattr__(self, "shift", _vector(self.shift, "shift", d))
        object.__setattr__(self, "scale", _vector(self.scale, "scale", d))
        if (self.scale <= 0).any():
            raise ValueError("preprocessing: scale must be > 0")
        if (self.lower is None) != (self.upper is None):
            raise ValueError("preprocessing: lower and upper bounds go together")
        if self.lower is not None:
            object.__setattr__(self, "lower", _vector(self.lower, "lower", d))
            object.__setattr__(self, "upper", _vector(self.upper, "upper", d))
            if not (self.lower < self.upper).all():
                raise ValueError("preprocessing: lower bounds must be below upper bounds")
        if self.components is not None:
            c = np.array(self.components, dtype=np.float64)
            if c.ndim != 2 or c.shape[1] != d or not np.isfinite(c).all():
                raise ValueError(f"preprocessing: components must be a finite [k, {d}] matrix")
            c.setflags(write=False)
            object.__setattr__(self, "components", c)
            object.__setattr__(self, "pca_shift", _vector(self.pca_shift, "pca_shift", c.shape[0]))
            object.__setattr__(self, "pca_scale", _vector(self.pca_scale, "pca_scale", c.shape[0]))
            if (self.pca_scale <= 0).any():
                raise ValueError("preprocessing: pca_scale must be > 0")
        for name, value, allowed in (("feature_source", self.feature_source, SOURCES),
                                     ("task", self.task, TASKS + (None,))):
            if value not in allowed:
                raise ValueError(f"preprocessing: {name} {value!r} not in {allowed}")
        if self.task is None:
            pass
        elif self.task == "regression":
            if self.target_source not in SOURCES:
                raise ValueError(f"preprocessing: target_source {self.target_source!r} not in {SOURCES}")
            ts, tc = float(self.target_shift), float(self.target_scale)
            if not (math.isfinite(ts) and math.isfinite(tc) and tc > 0):
                raise ValueError("preprocessing: target shift/scale must be finite, scale > 0")
            object.__setattr__(self, "target_shift", ts)
            object.__setattr__(self, "target_scale", tc)
            if self.output_range is not None:
                lo, hi = (float(v) for v in self.output_range)
                if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
                    raise ValueError("preprocessing: output_range must be finite with lo < hi")
                object.__setattr__(self, "output_range", (lo, hi))
        else:
            if not self.classes or len(set(map(label_text, self.classes))) != len(self.classes):
                raise ValueError("preprocessing: a classification task needs distinct classes")
            if self.label_coding not in LABEL_CODINGS:
                raise ValueError(f"preprocessing: label_coding {self.label_coding!r} not in {LABEL_CODINGS}")
            if self.label_coding == "sign" and len(self.classes) != 2:
                raise ValueError("preprocessing: the sign coding needs exactly two classes")
            object.__setattr__(self, "classes", tuple(self.classes))
        object.__setattr__(self, "not_dp", tuple(str(s) for s in self.not_dp))
        if self.clip is not None:
            c = float(self.clip)
            if not (math.isfinite(c) and c > 0):
                raise ValueError("preprocessing: clip must be finite and > 0")
            object.__setattr__(self, "clip", c)
        if self.fill is not None:
            object.__setattr__(self, "fill", _vector(self.fill, "fill", d))
        if self.target_fill is not None:
            if self.task != "regression":
                raise ValueError("preprocessing: target_fill is for a regression task")
            tf = float(self.target_fill)
            if not math.isfinite(tf):
                raise ValueError("preprocessing: target_fill must be finite")
            object.__setattr__(self, "target_fill", tf)
        if self.unknown_label is not None:
            if self.task in (None, "regression"):
                raise ValueError("preprocessing: unknown_label is for a classification task")
            texts = [label_text(c) for c in self.classes]
            if label_text(self.unknown_label) not in texts:
                raise ValueError(f"preprocessing: unknown_label {self.unknown_label!r} is not a class")
            object.__setattr__(self, "unknown_label", self.classes[texts.index(label_text(self.unknown_label))])

    # ---------------------------------------------------------------------------------------
    @property
    def dp_end_to_end(self) -> bool:
        """True when no step of the map read a statistic of the private records."""
        return not self.not_dp

    @property
    def scaling(self) -> str:
        """One word for the results rows: ``private_stats_not_dp`` when any scaling read private
        records, else the feature source (``public``, ``bounds``, ``none``, ``generated``)."""
        if PRIVATE_STATS in (self.feature_source, self.target_source):
            return PRIVATE_STATS
        return self.feature_source

    @property
    def n_inputs(self) -> int:
        return len(self.columns)

    @property
    def n_features(self) -> int:
        """The model's input dimension."""
        return self.n_inputs if self.components is None else int(self.components.shape[0])

    @property
    def model_output_range(self) -> tuple[float, float] | None:
        """``output_range`` in the model's (scaled target) units; the map is increasing, so
        clipping there is clipping the raw value to ``output_range``."""
        if self.output_range is None:
            return None
        lo, hi = self.output_range
        return ((lo - self.target_shift) / self.target_scale, (hi - self.target_shift) / self.target_scale)

    @property
    def input_bound(self) -> float | None:
        """A bound on |model input| that holds for every row the map produces, whatever its raw
        values (private rows included), or None when the map bounds nothing (neither declared
        bounds nor ``clip``).  Per column, ``b_j = max(|lower_j - shift_j|, |upper_j - shift_j|) /
        scale_j`` (1 for the bounds-derived map of ``dataset.feature_bounds``), at most ``clip``;
        with PCA, ``max_k (sum_j |components_kj| b_j + |pca_shift_k|) / pca_scale_k`` (widened by a
        relative 1e-9 for the rounding of the sums).  It comes from the settings and the public
        rows only, so arguments built on it (no overflow, :func:`certdp.training.check_magnitudes`)
        do not depend on the private records."""
        d = self.n_inputs
        b = np.full(d, np.inf)
        if self.lower is not None:
            with np.errstate(over="ignore"):
                b = np.maximum(np.abs(self.lower - self.shift), np.abs(self.upper - self.shift)) / self.scale
        if self.clip is not None:
            b = np.minimum(b, self.clip)
        if d == 0 or not np.isfinite(b).all():
            return None
        if self.components is None:
            return float(b.max())
        with np.errstate(over="ignore"):
            k = (np.abs(self.components) @ b + np.abs(self.pca_shift)) / self.pca_scale * (1 + 1e-9)
        return float(k.max()) if np.isfinite(k).all() else None

    @property
    def target_bound(self) -> float | None:
        """A bound on |regression target| in model units for every row (``clip``), or None."""
        return self.clip if self.task == "regression" else None

    # ---------------------------------------------------------------------------------------
    def raw_matrix(self, raw, *, key: str = "input") -> np.ndarray:
        """``raw`` (an array [n, len(columns)], or a DataFrame holding every column of
        :attr:`columns`, in any order, other columns ignored) as finite float64 [n, d]."""
        try:
            import pandas as pd
        except ImportError:          # pragma: no cover - pandas is a dependency
            pd = None
        if pd is not None and isinstance(raw, pd.DataFrame):
            cols = [str(c) for c in raw.columns]
            missing = [c for c in self.columns if c not in cols]
            if missing:
                more = f" (and {len(missing) - 5} more)" if len(missing) > 5 else ""
                raise ConfigError(key, f"missing column{'s' if len(missing) > 1 else ''} "
                                       f"{', '.join(map(repr, missing[:5]))}{more}; allowed: a table with the "
                                       f"columns {', '.join(map(repr, self.columns[:10]))}"
                                       f"{', ...' if len(self.columns) > 10 else ''}")
            frame = raw.set_axis(cols, axis=1)
            try:
                x = np.column_stack([pd.to_numeric(frame[c], errors="raise").to_numpy(np.float64)
                                     for c in self.columns]) if self.columns else np.empty((len(raw), 0))
            except (ValueError, TypeError) as e:
                raise ConfigError(key, f"non-numeric cells ({str(e).splitlines()[0][:80]}); allowed: numbers in "
                                       f"the columns {', '.join(map(repr, self.columns[:10]))}") from None
        else:
            x = np.asarray(raw, dtype=np.float64)
            if x.ndim == 1 and self.n_inputs == 1:
                x = x[:, None]
            if x.ndim != 2 or x.shape[1] != self.n_inputs:
                raise ConfigError(key, f"rows of shape {x.shape[1:] if x.ndim else ()}; allowed: "
                                       f"{self.n_inputs} values per row ({', '.join(self.columns[:5])}"
                                       f"{', ...' if self.n_inputs > 5 else ''})")
        bad = np.flatnonzero(~np.isfinite(x).all(1))
        if bad.size:
            raise ConfigError(key, f"{bad.size} row(s) with missing or infinite values (first: row {bad[0] + 1}); "
                                   f"allowed: finite numbers in every used column")
        return x

    def apply(self, raw, *, key: str = "input", private: bool = False) -> np.ndarray:
        """Model inputs [n, n_features] (float64) of raw rows (see :meth:`raw_matrix`).  The
        same function produced the dataset's own arrays, so it reproduces them bit for bit.

        ``private=True`` is the total map of the private rows (``raw`` a numeric array [n, d]):
        NaN cells take :attr:`fill` (0 model units without one), infinite and huge cells are
        clipped, nothing is refused (module docstring); the result is always finite."""
        if private:
            x = np.array(raw, dtype=np.float64).reshape(-1, self.n_inputs)
            fill = self.shift if self.fill is None else self.fill
            x = np.where(np.isnan(x), fill, x)
        else:
            x = self.raw_matrix(raw, key=key)
        if self.lower is not None:
            x = np.clip(x, self.lower, self.upper)
        with np.errstate(over="ignore", invalid="ignore"):
            z = (x - self.shift) / self.scale          # +-inf for an infinite or overflowing cell ...
        if self.clip is not None:
            z = np.clip(z, -self.clip, self.clip)      # ... which the clip makes finite
        elif private and not np.isfinite(z).all():
            z = np.nan_to_num(z, nan=0.0, posinf=np.finfo(np.float64).max, neginf=-np.finfo(np.float64).max)
        if self.components is not None:
            z = (z @ self.components.T - self.pca_shift) / self.pca_scale
        return z

    def targets(self, y, *, private: bool = False) -> np.ndarray:
        """Regression targets (raw units) in the model's units, clipped to ``clip`` when set.
        ``private=True``: a NaN (missing or unreadable) target takes :attr:`target_fill`
        (the target centre without one) first, so the result is finite for any input."""
        y = np.asarray(y, np.float64)
        if private:
            fill = self.target_shift if self.target_fill is None else self.target_fill
            y = np.where(np.isnan(y), fill, y)
        with np.errstate(over="ignore", invalid="ignore"):
            z = (y - self.target_shift) / self.target_scale
        if self.clip is not None:
            z = np.clip(z, -self.clip, self.clip)
        return z

    def target_to_raw(self, y_model) -> np.ndarray:
        """Model outputs (regression) back in the target's raw units."""
        return np.asarray(y_model, np.float64) * self.target_scale + self.target_shift

    def encode_labels(self, labels, *, key: str = "dataset.target", where: str = "rows",
                      private: bool = False) -> np.ndarray:
        """Class labels (any values; compared by :func:`label_text`) as the model's codes; a
        label outside :attr:`classes` raises a one-line :class:`ConfigError` under ``key``.
        ``private=True``: such a label (unknown, missing, unreadable) is coded as
        :attr:`unknown_label` (the first class without one) instead; nothing is refused."""
        texts = [label_text(v) for v in np.asarray(labels, dtype=object).reshape(-1)]
        index = {label_text(c): i for i, c in enumerate(self.classes)}
        codes = np.fromiter((index.get(t, -1) for t in texts), dtype=np.int64, count=len(texts))
        bad = np.flatnonzero(codes < 0)
        if bad.size and private:
            codes[bad] = 0 if self.unknown_label is None else index[label_text(self.unknown_label)]
        elif bad.size:
            unknown = sorted({texts[i] for i in bad})
            raise ConfigError(key, f"{where} hold label{'s' if len(unknown) > 1 else ''} "
                                   f"{', '.join(map(repr, unknown[:5]))}{', ...' if len(unknown) > 5 else ''} "
                                   f"({bad.size} row{'s' if bad.size > 1 else ''}, first: row {bad[0] + 1}) not among "
                                   f"the classes {list(self.classes)[:10]}; allowed: labels of the class list "
                                   f"(declare every class with dataset.classes=[...])")
        return 2 * codes - 1 if self.label_coding == "sign" else codes

    def decode_labels(self, codes) -> list:
        """The class labels of model codes (the inverse of :meth:`encode_labels`)."""
        c = np.asarray(codes).astype(np.int64).reshape(-1)
        idx = (c + 1) // 2 if self.label_coding == "sign" else c
        return [self.classes[int(i)] for i in idx]

    # ---------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """A JSON-safe dict (floats exact: JSON writes the shortest repr that reads back equal)."""
        out: dict[str, Any] = {"format": FORMAT}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, np.ndarray):
                v = v.tolist()
            elif isinstance(v, np.generic):
                v = v.item()
            elif isinstance(v, tuple):
                v = [list(e) if isinstance(e, tuple) else (e.item() if isinstance(e, np.generic) else e) for e in v]
            out[f.name] = v
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Preprocessing":
        """The inverse of :meth:`to_dict`; a dict of another format or with unknown keys is a ValueError."""
        d = dict(d)
        fmt = d.pop("format", None)
        if fmt != FORMAT:
            raise ValueError(f"preprocessing: format {fmt!r}, expected {FORMAT!r}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"preprocessing: unknown keys {unknown}")
        for k in ("columns", "not_dp", "classes"):
            if d.get(k) is not None:
                d[k] = tuple(d[k])
        if d.get("output_range") is not None:
            d["output_range"] = tuple(d["output_range"])
        if d.get("unknown_label") is not None and d.get("classes") is not None:
            # JSON has no tuples; the class list decides the label's type (an int class stays an int)
            d["unknown_label"] = next((c for c in d["classes"] if label_text(c) == label_text(d["unknown_label"])),
                                      d["unknown_label"])
        return cls(**d)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> "Preprocessing":
        return cls.from_dict(json.loads(text))

    def __eq__(self, other) -> bool:
        return isinstance(other, Preprocessing) and self.to_dict() == other.to_dict()

    __hash__ = None


def identity(columns: Sequence[str], *, source: str = "generated", input: str = "generated features",
             **target) -> Preprocessing:
    """The map of a dataset whose features are used as they are (``linear``, ``blobs``)."""
    d = len(columns)
    return Preprocessing(tuple(columns), np.zeros(d), np.ones(d), feature_source=source, input=input, **target)
