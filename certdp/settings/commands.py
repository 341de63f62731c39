"""The sections of single commands: ``audit``, ``pate`` (the shard sweep of ``certdp pate``),
``ags``, the private-learning baselines (``dpsgd`` and ``pate`` of ``certdp ags|dpsgd``) and
``feasibility``.  Checks that need the dataset (radii up to N, shards up to N) are done when the
experiment is built (:mod:`certdp.certify`), still before any training."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from certdp.data.params import (NOT_A_SETTING, Field, Names, boolean, choice, choices, integer, integers, parse_settings, real, reals,
                                check_settings, section, setting, settings_of)
from certdp.errors import ConfigError
from certdp.privacy.accounting import accountant_names
from certdp.privacy.dpsgd_core import DPSGD_ACCOUNTANTS
from certdp.settings.base import RunOptions, Subsection, strict, subsection
from certdp.settings.training import MAX_STEPS, StaircaseSettings, staircase_settings

MAX_REPEATS = 10 ** 6


# ------------------------------------------------------------------------------------ audit
AUDIT_MODES = ("random", "adversarial")


@dataclass(frozen=True)
class AuditSettings:
    """``audit``: R neighbouring datasets per radius and mode, the audited radii (each <= N), the
    test points of the output checks (at most ``n_test``), and the smoothness search (R_s
    neighbours at each size of ``smoothness_n``; 0 = off).  Each field declares its setting."""
    repeats: int = setting(200, partial(integer, lo=1, hi=MAX_REPEATS),
                           help="neighbouring datasets retrained per radius and mode")
    radii: tuple[int, ...] = setting([1, 2, 4, 8], partial(integers, lo=1), help="the audited radii (each at most N)")
    modes: tuple[str, ...] = setting(list(AUDIT_MODES), partial(choices, allowed=AUDIT_MODES),
                                     help="how neighbours are drawn: random | adversarial substitutions")
    n_test: int = setting(200, partial(integer, lo=1), help="test points of the output checks (at most)")
    smoothness: int = setting(0, partial(integer, lo=0, hi=MAX_REPEATS),
                              help="neighbours of the smoothness search per size (0: off)")
    smoothness_n: tuple[int, ...] | None = setting(None, partial(integers, lo=2, none=True,
                                                                 null_means="8, 30 and N when N <= 200"),
                                                   help="dataset sizes of the smoothness search")

    def __post_init__(self):
        check_settings(self, "audit")


def audit_settings(cfg: Any) -> AuditSettings:
    a = strict(cfg, settings_of(AuditSettings), prefix="audit")
    return AuditSettings(**{**a, "radii": tuple(sorted(set(a["radii"]))),
                            "smoothness_n": None if a["smoothness_n"] is None else tuple(sorted(set(a["smoothness_n"])))})


# ------------------------------------------------------------------------------------ dpaudit
DPAUDIT_QUERIES = ("prediction", "parameter")
DPAUDIT_RELEASES = {"prediction": ("cauchy", "laplace"), "parameter": ("cauchy_p", "laplace_p")}


@dataclass(frozen=True)
class DPAuditSettings:
    """``dpaudit``: which release is audited (``query``: AGT-R prediction or AGS parameters), the
    configured record and the size of its change, the configured test query (prediction), the
    confidence 1 - alpha of the lower bound, and the neighbour search (certdp/methods/dpaudit.py):
    whether to search, how many placements chosen from the batch plan, the magnitudes of the
    extreme records (standardised units), how many test queries are searched (prediction), how
    many of the best pairs are audited (Bonferroni over them) and the most datasets it may train."""
    query: str = setting("prediction", partial(choice, allowed=DPAUDIT_QUERIES),
                         help="the audited release: prediction (AGT-R) | parameter (AGS)")
    record: int = setting(0, partial(integer, lo=0), help="index of the configured changed record")
    shift: float = setting(10.0, partial(real, lo=0, lo_open=True, hi=1e6),
                           help="size of the configured record's change (standardised units)")
    test_point: int = setting(0, partial(integer, lo=0), help="index of the configured test query (prediction)")
    alpha: float = setting(0.05, partial(real, lo=0, hi=1, lo_open=True, hi_open=True),
                           help="the lower bound holds with confidence 1 - alpha")
    search: bool = setting(True, boolean, help="search neighbouring datasets for the worst pair")
    placements: int = setting(2, partial(integer, lo=0, hi=64),
                              help="placements of the changed record chosen from the batch plan")
    magnitudes: tuple[float, ...] = setting([1e2, 1e6], partial(reals, lo=0, lo_open=True, hi=1e12, max_length=16),
                                            help="magnitudes of the extreme records tried (standardised units)")
    queries: int = setting(64, partial(integer, lo=1, hi=4096), help="test queries searched (prediction)")
    pairs: int = setting(1, partial(integer, lo=1, hi=64), help="best pairs audited (Bonferroni over them)")
    max_datasets: int = setting(200, partial(integer, lo=2, hi=100_000), help="most datasets the search may train")

    def __post_init__(self):
        check_settings(self, "dpaudit")


def dpaudit_settings(cfg: Any) -> DPAuditSettings:
    return DPAuditSettings(**strict(cfg, settings_of(DPAuditSettings), prefix="dpaudit"))


# ------------------------------------------------------------------------------------ pate (shards)
SHARD_ARMS = ("pate_r", "pate_agtr", "agtr_wor", "agtr", "gs")


SHARD_DEFAULT_STAIRCASE = {"kind": "geometric", "k_min": 1, "k_max": 1024, "ratio": 2.0, "include_n": True}


@dataclass(frozen=True)
class ShardSettings:
    """``pate`` of ``certdp pate``: numbers of shards T, arms, a seeded training subset, the radii
    of the full-data AGT-R arm, and per-shard radii (capped at the shard size).  Each field
    declares its setting."""
    shards: tuple[int, ...] = setting([1, 2, 4, 8], partial(integers, lo=1), help="numbers of shards T")
    arms: tuple[str, ...] = setting(list(SHARD_ARMS), partial(choices, allowed=SHARD_ARMS),
                                    help="the arms: pate_r | pate_agtr | agtr_wor | agtr | gs")
    max_train: int | None = setting(None, partial(integer, lo=1, none=True, null_means="the whole training set"),
                                    help="a seeded training subset of this size")
    full_staircase: str = setting("shard", partial(choice, allowed=("shard", "agtr")),
                                  help="radii of the full-data AGT-R arm: shard (pate.staircase) | agtr (staircase)")
    staircase: StaircaseSettings = setting(
        None, Subsection(settings_of(StaircaseSettings),
                         lambda v, key: staircase_settings(v or SHARD_DEFAULT_STAIRCASE, prefix=key)),
        help="per-shard radii (the keys of staircase; default geometric 1, 2, 4, ..., 1024 and N)")

    def __post_init__(self):
        check_settings(self, "pate")


def shard_settings(cfg: Any) -> ShardSettings:
    d = section(cfg, "pate")
    if isinstance(d.get("shards"), int) and not isinstance(d.get("shards"), bool):
        d["shards"] = [d["shards"]]                  # one number of shards is a list of one
    p = parse_settings(d, settings_of(ShardSettings), prefix="pate")
    return ShardSettings(**{**p, "shards": tuple(sorted(set(p["shards"])))})


# ------------------------------------------------------------------------------------ ags
BASELINE_ARMS = ("dpsgd_matched", "dpsgd_matched_basic", "dpsgd_optimised", "pate")
# what runs when neither ags.baselines nor dpsgd.arms says (the basic-composition arm is opt-in there)
DEFAULT_BASELINES = ("dpsgd_matched", "dpsgd_optimised", "pate")


@dataclass(frozen=True)
class AGSSettings:
    """``ags``: release schedule, accountant, shared-box grouping, sampling ablation, baselines.
    Each field declares its setting; the step ranges (at most :data:`MAX_STEPS` here) are bounded
    by ``train.steps`` when read (:func:`ags_fields`), so a value is built by :func:`ags_settings`."""
    releases_n: int = setting(1, partial(integer, lo=1, hi=MAX_STEPS),
                              help="n evenly spaced releases (the last at the final step)")
    # explicit S (1-based steps; () when not given): overrides releases_n
    sampling_steps: tuple[int, ...] = setting(None, partial(integers, lo=1, hi=MAX_STEPS, none=True,
                                                            null_means="releases_n"),
                                              help="explicit release steps S (1-based, increasing, ending at train.steps)")
    composition: str = setting("optimal", partial(choice, allowed=Names(partial(accountant_names, "compose"))),
                               help="the accountant that splits the total budget over the releases")
    share_ratio: float | None = setting(None, partial(real, lo=1, lo_open=True, none=True,
                                                      null_means="every radius its own box"),
                                        help="radii grouped into shared boxes growing by this ratio")
    ablation_n: tuple[int, ...] = setting([], partial(integers, lo=1, hi=MAX_STEPS, min_length=0, none=True,
                                                      null_means="no ablation"),
                                          help="sampling ablation: numbers of releases swept")
    ablation_compositions: tuple[str, ...] = setting(["basic", "optimal"],
                                                     partial(choices, allowed=Names(partial(accountant_names, "compose"))),
                                                     help="sampling ablation: accountants swept")
    ablation_draws: int = setting(3, partial(integer, lo=1, hi=MAX_REPEATS), help="sampling ablation: draws per point")
    baselines: tuple[str, ...] = setting(list(DEFAULT_BASELINES), partial(choices, allowed=BASELINE_ARMS, min_length=0),
                                         help="private-learning baselines run beside AGS")
    baseline_draws: int | None = setting(None, partial(integer, lo=1, hi=MAX_REPEATS, none=True,
                                                       null_means="privacy.n_draws"),
                                         help="matched DP-SGD draws")


STEP_BOUNDED = ("releases_n", "sampling_steps", "ablation_n")      # ranges that end at train.steps


def ags_fields(steps: int = MAX_STEPS) -> dict[str, Field]:
    """The ``ags`` table of :class:`AGSSettings`, its step ranges bounded by ``train.steps``."""
    fields = settings_of(AGSSettings)
    for name in STEP_BOUNDED:
        fields[name] = dataclasses.replace(fields[name], parse=partial(fields[name].parse, hi=steps))
    return fields


def ags_settings(cfg: Any, *, steps: int) -> AGSSettings:
    """``ags``, checked against ``train.steps`` (releases and sampling steps lie in 1..steps)."""
    a = strict(cfg, ags_fields(steps), prefix="ags")
    S = tuple(a["sampling_steps"] or ())
    if S and (list(S) != sorted(set(S)) or S[-1] != steps):
        raise ConfigError("ags.sampling_steps", f"got {list(S)} (not increasing steps ending at train.steps); "
                                                f"allowed: increasing steps in 1..{steps} ending at {steps}")
    return AGSSettings(**{**a, "sampling_steps": S, "ablation_n": tuple(a["ablation_n"] or ())})


# ------------------------------------------------------------------------------------ baselines
def _grid_values(value: Any, key: str) -> tuple:
    """A list of reals > 0, each kept as written: an integer stays an integer (5, not 5.0),
    because a grid point's values seed its DP-SGD generator through their ``repr``
    (:func:`certdp.seeding.generator_for`) and name it in the results (``epochs=5``)."""
    parsed = reals(value, key, lo=0, lo_open=True)
    given = value if isinstance(value, (list, tuple)) else [value]
    return tuple(int(p) if isinstance(v, int) and not isinstance(v, bool) else p for v, p in zip(given, parsed))


_grid_values.describe = lambda: "list of reals > 0 (each kept as written: 5 stays an integer)"
@dataclass(frozen=True)
class OptimisedGrid:
    """The hyperparameters optimised DP-SGD chooses among (on the public selection set):
    ``dpsgd.optimised.grid``.  Each field declares its setting."""
    lr: tuple[float, ...] = setting([0.1, 0.5, 2.0], _grid_values, help="learning rates optimised DP-SGD chooses among")
    clip: tuple[float, ...] = setting([0.1, 1.0], _grid_values, help="clipping norms optimised DP-SGD chooses among")
    epochs: tuple[float, ...] = setting([5, 20], _grid_values, help="epochs optimised DP-SGD chooses among")
    batch_size: tuple[int, ...] = setting([64, 256], partial(integers, lo=1),
                                          help="batch sizes optimised DP-SGD chooses among")

    def __post_init__(self):
        check_settings(self, "dpsgd.optimised.grid")


def _optimised_grid(value: Any, key: str) -> OptimisedGrid:
    return OptimisedGrid(**parse_settings(section(value, key), settings_of(OptimisedGrid), prefix=key))


@dataclass(frozen=True)
class BaselineSettings:
    """The private-learning baselines of ``certdp ags`` / ``certdp dpsgd``: which arms
    (``dpsgd.arms``, dpsgd only), optimised DP-SGD's accountants and grid
    (``dpsgd.optimised``) and the PATE classification baseline (``pate``: teachers, labelled
    queries, student steps).  Each field declares its setting (the sections they sit in:
    :data:`BASELINE_SECTIONS`)."""
    arms: tuple[str, ...] = setting(list(BASELINE_ARMS), partial(choices, allowed=BASELINE_ARMS),
                                    help="the DP-SGD arms run")
    accountants: tuple[str, ...] = setting(["pld", "rdp"], partial(choices, allowed=DPSGD_ACCOUNTANTS),
                                           help="DP-SGD accountants calibrating the noise")
    grid: OptimisedGrid = setting(None, Subsection(settings_of(OptimisedGrid), _optimised_grid),
                                  help="the hyperparameters optimised DP-SGD chooses among (on the public selection set)")
    teachers: tuple[int, ...] = setting([5, 10, 25, 50], partial(integers, lo=1), help="numbers of PATE teachers")
    queries: tuple[int, ...] = setting([50, 200, 1000], partial(integers, lo=1),
                                       help="numbers of labelled student queries")
    student_steps: int = setting(300, partial(integer, lo=1, hi=MAX_STEPS), help="training steps of the PATE student")


BASELINE_SECTIONS = {"dpsgd": ("arms",), "dpsgd.optimised": ("accountants", "grid"),
                     "pate": ("teachers", "queries", "student_steps")}


def _baseline_table(prefix: str) -> dict[str, Field]:
    declared = settings_of(BaselineSettings)
    return {k: declared[k] for k in BASELINE_SECTIONS[prefix]}


def dpsgd_fields(*, with_arms: bool) -> dict[str, Field]:
    """The ``dpsgd`` table (``arms`` only where ``with_arms``: certdp dpsgd)."""
    fields = {"optimised": Field(None, subsection(_baseline_table("dpsgd.optimised")),
                                 help="optimised DP-SGD: accountants and hyperparameter grid")}
    return {**_baseline_table("dpsgd"), **fields} if with_arms else fields


def baseline_settings(dpsgd: Any, pate: Any, *, with_arms: bool) -> BaselineSettings:
    """``dpsgd`` (``arms`` only where ``with_arms``: certdp dpsgd) and ``pate`` sections."""
    d = strict(dpsgd, dpsgd_fields(with_arms=with_arms), prefix="dpsgd")
    p = strict(pate, _baseline_table("pate"), prefix="pate")
    return BaselineSettings(arms=d.get("arms", ()), **d["optimised"], **p)


def check_fixed_selection(b: BaselineSettings, arms) -> None:
    """``selection=fixed`` trains one candidate per tuned arm: its grids must hold one value each."""
    lists = []
    if "dpsgd_optimised" in arms:
        g = b.grid
        lists += [("dpsgd.optimised.grid.lr", g.lr), ("dpsgd.optimised.grid.clip", g.clip),
                  ("dpsgd.optimised.grid.epochs", g.epochs), ("dpsgd.optimised.grid.batch_size", g.batch_size)]
    if "pate" in arms:
        lists += [("pate.teachers", b.teachers), ("pate.queries", b.queries)]
    for key, values in lists:
        if len(values) != 1:
            raise ConfigError(key, f"selection=fixed trains only the configured candidate, but {key} holds "
                                   f"{len(values)} values {list(values)}; allowed: one value (e.g. {key}=[{values[0]}]), "
                                   f"or selection=grid")


# ------------------------------------------------------------------------------------ feasibility
MAX_GRID = 10 ** 6       # confidence points (each a row of results.csv per curve)
MIN_GRID_START = 1e-12   # the grid is rounded to 12 decimals: a smaller start becomes confidence 0


CONF = partial(real, lo=0, hi=1, lo_open=True, hi_open=True)


@dataclass(frozen=True)
class ConfidenceGrid:
    """``feasibility.confidence``: the grid start, start + step, ... up to stop of confidences
    1 - alpha, or the explicit ``values``.  Each field declares its setting."""
    start: float = setting(0.001, CONF, help="first confidence 1 - alpha of the grid")
    stop: float = setting(0.999, CONF, help="last confidence of the grid")
    step: float = setting(0.001, partial(real, lo=0, lo_open=True), help="grid step")
    values: tuple[float, ...] | None = setting(None, partial(reals, lo=0, hi=1, lo_open=True, hi_open=True,
                                                             scalar_ok=False, none=True,
                                                             null_means="the start/stop/step grid"),
                                               help="explicit confidences instead of the grid")

    def __post_init__(self):
        check_settings(self, "feasibility.confidence")


def _confidence(value: Any, key: str) -> ConfidenceGrid:
    return ConfidenceGrid(**parse_settings(section(value, key), settings_of(ConfidenceGrid), prefix=key))


def _window(value: Any, key: str) -> tuple[float, float]:
    allowed = "[lo, hi] with 0 <= lo < hi <= 1, or null (the whole grid)"
    if value is None:
        return (0.0, 1.0)
    w = reals(value, key, lo=0, hi=1, scalar_ok=False, min_length=2, max_length=2)
    if not w[0] < w[1]:
        raise ConfigError(key, f"got {list(w)} (lo must be below hi); allowed: {allowed}")
    return w


_window.describe = lambda: "[lo, hi] with 0 <= lo < hi <= 1, or null (the whole grid)"


def confidence_grid(g: ConfidenceGrid, key: str) -> tuple[float, ...]:
    """The grid start, start + step, ... up to stop (never beyond it), or the given values;
    at most :data:`MAX_GRID` points."""
    import numpy as np
    if g.values is not None:
        return tuple(float(v) for v in np.unique(np.array(g.values)))
    start, stop, step = g.start, g.stop, g.step
    if stop < start:
        raise ConfigError(f"{key}.stop", f"got {stop!r} (below {key}.start = {start!r}); allowed: stop >= start")
    size = math.floor((stop - start) / step + 1e-9) + 1
    if size > MAX_GRID:
        raise ConfigError(f"{key}.step", f"got {step!r} (the grid would hold {size:,} points); allowed: a step of at "
                                         f"least {(stop - start) / (MAX_GRID - 1):.3g} ({MAX_GRID:,} points)")
    out = np.round(np.arange(start, stop + step / 2, step), 12)
    return tuple(float(v) for v in np.unique(out[out <= stop]))


def _check_confidences(conf: tuple[float, ...], key: str) -> tuple[float, ...]:
    """Every confidence c must leave alpha = 1 - c below 1 in float64 (c below ~1.1e-16 rounds
    alpha to 1, where the critical ratios are 0/0)."""
    tiny = [c for c in conf if 1.0 - c >= 1.0]
    if tiny:
        raise ConfigError(key, f"got {tiny[0]:g} (1 - confidence rounds to 1 in float64, so the critical ratios are "
                               "0/0); allowed: confidences of at least 1e-15, below 1")
    return conf


# certdp feasibility reads no data: the dataset section only names the run folder's part
FEASIBILITY_DATASET_FIELDS = {"name": Field("none", partial(choice, allowed=("none",)),
                                            help="none: certdp feasibility reads no data")}


@dataclass(frozen=True)
class FeasibilitySettings:
    """``feasibility``: the confidence grid 1 - alpha, the factors c, the deltas of Theorem 3.3,
    Theorem 3.2's Cauchy factor and the approximate-DP window whose peak is reported.  Each
    field but ``run`` declares its setting; ``points`` are the grid's confidences, checked when a
    value is built (at most :data:`MAX_GRID`, none rounding alpha to 1)."""
    confidence: ConfidenceGrid = setting(None, Subsection(settings_of(ConfidenceGrid), _confidence),
                                         help="the confidence grid 1 - alpha")
    c: tuple[float, ...] = setting([1, 2, 3], partial(reals, lo=0, lo_open=True),
                                   help="the factors c of the critical ratios")
    delta: tuple[float, ...] = setting(1e-5, partial(reals, lo=0, hi=1, lo_open=True, hi_open=True),
                                       help="the deltas of Theorem 3.3")
    cauchy_factor: float = setting(6, partial(real, lo=0, lo_open=True), help="Theorem 3.2's Cauchy factor")
    approx_window: tuple[float, float] = setting([0.8, 1.0], _window,
                                                 help="the confidence window [lo, hi] whose approximate-DP peak is reported")
    run: RunOptions | None = field(default=None, compare=False,
                                   metadata={NOT_A_SETTING: "the run options (read by the CLI)"})
    points: tuple[float, ...] = field(init=False, metadata={NOT_A_SETTING: "the grid's confidences (derived)"})

    def __post_init__(self):
        check_settings(self, "feasibility")
        g = self.confidence
        if g.values is None and g.start < MIN_GRID_START:
            raise ConfigError("feasibility.confidence.start", f"got {g.start:g} (the grid is rounded to 12 decimals, "
                                                              "and a confidence of 0 makes the critical ratios 0/0); "
                                                              f"allowed: a start of at least {MIN_GRID_START:g}")
        conf = _check_confidences(confidence_grid(g, "feasibility.confidence"), "feasibility.confidence.values")
        object.__setattr__(self, "points", conf)


def feasibility_settings(cfg: Any, run: RunOptions | None = None) -> FeasibilitySettings:
    return FeasibilitySettings(**strict(cfg, settings_of(FeasibilitySettings), prefix="feasibility"), run=run)


# The tables of the sections declared in dataclass fields, under the names they had as tables:
# read from the dataclass on every access, so they cannot drift from it (no second copy).
_TABLES = {"AUDIT_FIELDS": AuditSettings, "DPAUDIT_FIELDS": DPAuditSettings, "SHARD_FIELDS": ShardSettings,
           "GRID_FIELDS": OptimisedGrid, "CONFIDENCE_FIELDS": ConfidenceGrid, "FEASIBILITY_FIELDS": FeasibilitySettings}


def __getattr__(name: str) -> dict[str, Field]:
    if name in _TABLES:
        return settings_of(_TABLES[name])
    if name == "PATE_BASELINE_FIELDS":
        return _baseline_table("pate")
    if name == "OPTIMISED_FIELDS":
        return _baseline_table("dpsgd.optimised")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DPAuditSettings", "dpaudit_settings", "check_fixed_selection", "AuditSettings", "ShardSettings", "AGSSettings", "BaselineSettings", "OptimisedGrid",
           "FeasibilitySettings", "audit_settings", "shard_settings", "ags_settings", "baseline_settings",
           "feasibility_settings"]
