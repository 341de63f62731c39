"""The ``certdp hybrid`` configuration, read once into frozen dataclasses.

Sections (``configs/hybrid.yaml``): ``dataset`` (SST-2, encoder, subsets), ``privacy`` (total
budgets), ``split`` (eps_1 / eps candidates), ``lora`` and ``dpsgd`` (DP-LoRA fine-tuning),
``head`` (AGS head), ``dpsgd_head`` (frozen encoder + DP-SGD head) and ``hybrid`` (arms, decision
threshold, work folder, size sweep).  A bad value raises a one-line :class:`ConfigError` naming
its dotted key before any work starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from certdp.bounds import get_certificate
from certdp.config import parse_choices, parse_delta, parse_epsilons
from certdp.data.sources import cache_dir
from certdp.errors import ConfigError
from certdp.privacy.dpsgd_core import ACCOUNTANTS

ARMS = ("dplora", "hybrid", "frozen_ags", "frozen_dpsgd")
HEAD_RELEASES = ("laplace_p", "cauchy_p", "laplace_union_p", "cauchy6_p")
ALLOCATIONS = ("l1", "anisotropic")
ENCODERS = ("mpnet", "minilm")
THRESHOLDS = ("public", "zero")


@dataclass(frozen=True)
class LoraSettings:
    """LoRA adapters (rank, scaling alpha, dropout) on ``targets`` (() = the q and v projections)."""
    rank: int = 16
    alpha: float = 16.0
    dropout: float = 0.0
    targets: tuple[str, ...] = ()


@dataclass(frozen=True)
class DPLoraSettings:
    """DP-LoRA fine-tuning: expected batch B (Poisson rate B/N), epochs, l2 clip, AdamW lr, the
    accountant and delta_1; ``physical_tokens`` bounds a micro-batch (memory only)."""
    batch_size: int = 1024
    epochs: float = 3.0
    clip: float = 1.0
    lr: float = 1e-3
    accountant: str = "prv"
    delta: float = 5e-6
    physical_tokens: int = 4096
    checkpoint_every: int = 1


@dataclass(frozen=True)
class HeadSettings:
    """AGS logistic head on PCA-``pca_dim`` of the (adapted or frozen) embedding: contractive
    clipped full-batch GD, AGT certificate for k = 1..k_max (and N), releases at delta_2."""
    pca_dim: int = 8
    steps: int = 150
    lr: float = 2.0
    clip: float = 0.05
    contraction: float = 0.3
    certificate: str = "crown"
    k_max: int = 512
    include_n: bool = True
    releases: tuple[str, ...] = ("laplace_p",)
    allocations: tuple[str, ...] = ("l1", "anisotropic")
    n_draws: int = 41
    delta: float = 5e-6
    beta: float | None = None


@dataclass(frozen=True)
class DPSGDHeadSettings:
    """Frozen encoder + DP-SGD logistic head (same PCA features as the AGS head)."""
    batch_size: int = 256
    epochs: float = 10.0
    clip: float = 1.0
    lrs: tuple[float, ...] = (0.5, 2.0)
    n_runs: int = 5


@dataclass(frozen=True)
class HybridSettings:
    encoder: str
    max_seq_length: int
    n_test: int                            # held out of GLUE train as the test set
    n_private: int | None                  # None = every remaining training sentence
    n_test_eval: int | None                # evaluate on the first n of the test set
    n_public: int | None
    epsilons: tuple[float, ...]            # total budgets eps = eps_1 + eps_2
    delta: float                           # total delta >= delta_1 + delta_2
    fractions: tuple[float, ...]           # candidate eps_1 / eps
    reuse_end_to_end: bool
    arms: tuple[str, ...]
    size_epsilon: float | None
    sizes: tuple[int, ...]
    threshold: str
    lora: LoraSettings
    dpsgd: DPLoraSettings
    head: HeadSettings
    dpsgd_head: DPSGDHeadSettings
    seed: int
    work_dir: Path
    dataset: dict = field(default_factory=dict)   # the dataset section, for the data layer
    smoothness: str = "proven"                    # privacy.smoothness (certdp/privacy/smoothness.py)


def _number(d: dict, key: str, prefix: str, default, *, cast=float, lo=None, hi=None, lo_open=False):
    """``d[key]`` (or ``default``) as ``cast``, checked against [lo | (lo, hi]; None stays None."""
    v = d.get(key, default)
    if v is None:
        return None
    try:
        v = cast(v)
    except (TypeError, ValueError):
        raise ConfigError(f"{prefix}.{key}", f"must be a number (got {v!r})")
    if isinstance(v, float) and not math.isfinite(v):
        raise ConfigError(f"{prefix}.{key}", f"must be finite (got {v})")
    if lo is not None and (v < lo or (lo_open and v <= lo)):
        raise ConfigError(f"{prefix}.{key}", f"must be {'>' if lo_open else '>='} {lo} (got {v})")
    if hi is not None and v > hi:
        raise ConfigError(f"{prefix}.{key}", f"must be <= {hi} (got {v})")
    return v


def _numbers(v, key: str) -> tuple[float, ...]:
    out = []
    for e in v if isinstance(v, (list, tuple)) else [v]:
        try:
            e = float(e)
        except (TypeError, ValueError):
            raise ConfigError(key, f"must be numbers (got {e!r})")
        if not math.isfinite(e):
            raise ConfigError(key, f"must be finite numbers (got {e})")
        out.append(e)
    return tuple(out)


def _one_of(d: dict, key: str, prefix: str, allowed, default, *, what: str) -> str:
    v = d.get(key, default)
    if v not in allowed:
        raise ConfigError(f"{prefix}.{key}", f"unknown {what} '{v}'; allowed: {', '.join(allowed)}")
    return v


def _lora(c: dict) -> LoraSettings:
    return LoraSettings(rank=_number(c, "rank", "lora", 16, cast=int, lo=1),
                        alpha=_number(c, "alpha", "lora", 16.0, lo=0, lo_open=True),
                        dropout=_number(c, "dropout", "lora", 0.0, lo=0, hi=0.99),
                        targets=tuple(c.get("targets") or ()))


def _dplora(c: dict) -> DPLoraSettings:
    return DPLoraSettings(batch_size=_number(c, "batch_size", "dpsgd", 1024, cast=int, lo=1),
                          epochs=_number(c, "epochs", "dpsgd", 3.0, lo=0, lo_open=True),
                          clip=_number(c, "clip", "dpsgd", 1.0, lo=0, lo_open=True),
                          lr=_number(c, "lr", "dpsgd", 1e-3, lo=0, lo_open=True),
                          accountant=_one_of(c, "accountant", "dpsgd", ACCOUNTANTS, "prv", what="accountant"),
                          delta=_number(c, "delta", "dpsgd", 5e-6, lo=0, lo_open=True, hi=1),
                          physical_tokens=_number(c, "physical_tokens", "dpsgd", 4096, cast=int, lo=8),
                          checkpoint_every=_number(c, "checkpoint_every", "dpsgd", 1, cast=int, lo=1))


def _head(c: dict) -> HeadSettings:
    beta = c.get("beta", "auto")
    head = HeadSettings(
        pca_dim=_number(c, "pca_dim", "head", 8, cast=int, lo=1),
        steps=_number(c, "steps", "head", 150, cast=int, lo=1),
        lr=_number(c, "lr", "head", 2.0, lo=0, lo_open=True),
        clip=_number(c, "clip", "head", 0.05, lo=0, lo_open=True),
        contraction=_number(c, "contraction", "head", 0.3, lo=0, lo_open=True, hi=1),
        certificate=str(c.get("certificate", "crown")),
        k_max=_number(c, "k_max", "head", 512, cast=int, lo=1),
        include_n=bool(c.get("include_n", True)),
        releases=parse_choices(c, "head.releases", HEAD_RELEASES, ("laplace_p",), what="release"),
        allocations=parse_choices(c, "head.allocations", ALLOCATIONS, ("l1",), what="allocation"),
        n_draws=_number(c, "n_draws", "head", 41, cast=int, lo=1),
        delta=_number(c, "delta", "head", 5e-6, lo=0, lo_open=True, hi=1),
        beta=None if beta in (None, "auto") else _number(c, "beta", "head", None, lo=0, lo_open=True))
    try:
        get_certificate(head.certificate)    # an unknown name fails here, before any work
    except ConfigError as e:
        raise ConfigError("head.certificate", e.message)
    return head


def _dpsgd_head(c: dict) -> DPSGDHeadSettings:
    lrs = _numbers(c.get("lrs", [0.5, 2.0]), "dpsgd_head.lrs")
    if not lrs or any(v <= 0 for v in lrs):
        raise ConfigError("dpsgd_head.lrs", f"must be a non-empty list of learning rates > 0 (got {list(lrs)})")
    return DPSGDHeadSettings(batch_size=_number(c, "batch_size", "dpsgd_head", 256, cast=int, lo=1),
                             epochs=_number(c, "epochs", "dpsgd_head", 10.0, lo=0, lo_open=True),
                             clip=_number(c, "clip", "dpsgd_head", 1.0, lo=0, lo_open=True), lrs=lrs,
                             n_runs=_number(c, "n_runs", "dpsgd_head", 5, cast=int, lo=1))


def hybrid_settings(cfg: dict) -> HybridSettings:
    """Read and check the composed config (fail fast, one-line :class:`ConfigError`)."""
    d = dict(cfg.get("dataset") or {})
    if d.get("name", "sst2") != "sst2":
        raise ConfigError("dataset", f"certdp hybrid runs on sst2 only (got '{d.get('name')}')")
    p = dict(cfg.get("privacy") or {})
    eps = parse_epsilons({"epsilons": p.get("epsilons", [0.5, 1, 2, 3, 5, 8])})
    delta = parse_delta(p)

    s = dict(cfg.get("split") or {})
    fr = _numbers(s.get("fractions", [0.5, 0.75]), "split.fractions")
    if not fr or any(not 0 < f < 1 for f in fr):
        raise ConfigError("split.fractions", f"each fraction eps_1/eps must be in (0, 1) (got {list(fr)})")

    h = dict(cfg.get("hybrid") or {})
    sw = dict(h.get("size_sweep") or {})
    sizes = tuple(int(v) for v in (sw.get("n_private") or ()))
    if any(v < 2 for v in sizes):
        raise ConfigError("hybrid.size_sweep.n_private", f"every size must be >= 2 (got {list(sizes)})")

    dps = _dplora(dict(cfg.get("dpsgd") or {}))
    head = _head(dict(cfg.get("head") or {}))
    from certdp.privacy.smoothness import release_proof, smoothness_policy
    smoothness = smoothness_policy(cfg)
    arms = parse_choices(h, "hybrid.arms", ARMS, ARMS, what="arm")
    if {"hybrid", "frozen_ags"} & set(arms):         # the AGS head's releases are smooth: refuse before any work
        release_proof(get_certificate(head.certificate), smoothness)
    if dps.delta + head.delta > delta * (1 + 1e-12):
        raise ConfigError("privacy.delta", f"delta_1 + delta_2 = {dps.delta:g} + {head.delta:g} exceeds the total "
                                           f"delta {delta:g}; lower dpsgd.delta or head.delta")
    return HybridSettings(
        encoder=_one_of(d, "encoder", "dataset", ENCODERS, "mpnet", what="encoder"),
        max_seq_length=_number(d, "max_seq_length", "dataset", 128, cast=int, lo=8),
        n_test=_number(d, "n_test", "dataset", 5000, cast=int, lo=1),
        n_private=_number(d, "n_private", "dataset", None, cast=int, lo=2),
        n_test_eval=_number(d, "n_test_eval", "dataset", None, cast=int, lo=1),
        n_public=_number(d, "n_public", "dataset", None, cast=int, lo=2),
        epsilons=eps, delta=delta, fractions=fr, reuse_end_to_end=bool(s.get("reuse_end_to_end", True)),
        arms=arms,
        size_epsilon=_number(sw, "epsilon", "hybrid.size_sweep", 3.0, lo=0, lo_open=True), sizes=sizes,
        threshold=_one_of(h, "threshold", "hybrid", THRESHOLDS, "public", what="threshold"),
        lora=_lora(dict(cfg.get("lora") or {})), dpsgd=dps, head=head,
        dpsgd_head=_dpsgd_head(dict(cfg.get("dpsgd_head") or {})), seed=int(cfg.get("seed", 0)),
        work_dir=Path(h.get("work_dir") or cache_dir() / "hybrid").expanduser(), dataset=d, smoothness=smoothness)
