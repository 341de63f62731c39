"""Hydra config -> typed, frozen settings, validated up front (fail fast, one-line errors).

The raw config is composed by Hydra from ``configs/`` (see ``certdp --help``); this module only
reads and checks it.  Each check raises :class:`~certdp.errors.ConfigError` naming the key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from certdp.errors import ConfigError
from certdp.training import TrainSettings

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"


def config_dir() -> Path:
    import os
    d = os.environ.get("CERTDP_CONFIG_DIR")
    if d:
        return Path(d)
    if CONFIG_DIR.is_dir():
        return CONFIG_DIR
    raise RuntimeError("certdp cannot find its configs/ folder: install with `pip install -e .` from the "
                       "repository or set CERTDP_CONFIG_DIR")


def to_dict(cfg: DictConfig | dict | None) -> dict:
    if cfg is None:
        return {}
    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True)
    return dict(cfg)


def _num(d: dict, key: str, prefix: str, *, cast=float, default=None, required=True):
    v = d.get(key, default)
    if v is None:
        if required:
            raise ConfigError(f"{prefix}.{key}", "is required")
        return None
    try:
        return cast(v)
    except (TypeError, ValueError):
        raise ConfigError(f"{prefix}.{key}", f"must be a number (got {v!r})")


def train_settings(d: dict, seed: int) -> TrainSettings:
    bs = d.get("batch_size")
    return TrainSettings(
        steps=_num(d, "steps", "train", cast=int),
        lr=_num(d, "lr", "train"),
        clip=_num(d, "clip", "train"),
        batch_size=None if bs in (None, "full", "null") else _num(d, "batch_size", "train", cast=int),
        contraction=_num(d, "contraction", "train", default=1.0),
        seed=_num(d, "seed", "train", cast=int, default=seed),
    )


@dataclass(frozen=True)
class StaircaseSettings:
    """Radii K at which envelopes are computed.

    ``kind``: ``range`` (k_min..k_max step ``step``), ``geometric`` (every radius up to
    ``dense_until``, then growing by ``ratio`` up to k_max, k_max included), or ``list``
    (``values``).  Radii left out are back-filled by the next computed one (sound, slightly
    looser).  ``k_max`` may exceed N; radii are capped at N.  ``include_n``
    adds N itself, which covers every radius without a global sensitivity."""

    kind: str = "range"
    k_min: int = 1
    k_max: int = 28
    step: int = 1
    ratio: float = 2.0
    values: tuple[int, ...] = ()
    include_n: bool = False
    dense_until: int = 1

    def radii(self, n: int) -> list[int]:
        if self.kind == "range":
            ks = list(range(self.k_min, self.k_max + 1, self.step))
        elif self.kind == "geometric":
            ks = list(range(self.k_min, min(self.dense_until, self.k_max) + 1))
            k = float(ks[-1] if ks else self.k_min)
            while k <= self.k_max:
                ks.append(int(round(k)))
                k = max(k * self.ratio, k + 1)
            ks.append(self.k_max)
        else:
            ks = list(self.values)
        ks = sorted({min(int(k), n) for k in ks if k >= 1})
        if self.include_n and (not ks or ks[-1] < n):
            ks.append(n)
        if not ks:
            raise ConfigError("staircase", "no radius >= 1 selected")
        return ks


def staircase_settings(d: dict) -> StaircaseSettings:
    kind = d.get("kind", "range")
    if kind not in ("range", "geometric", "list"):
        raise ConfigError("staircase.kind", f"unknown kind '{kind}'; allowed: range, geometric, list")
    vals = d.get("values") or ()
    if kind == "list" and not vals:
        raise ConfigError("staircase.values", "kind=list needs a list of radii, e.g. staircase.values=[1,2,4,8]")
    s = StaircaseSettings(kind=kind, k_min=int(d.get("k_min", 1)), k_max=int(d.get("k_max", 28)),
                          step=int(d.get("step", 1)), ratio=float(d.get("ratio", 2.0)),
                          values=tuple(int(v) for v in vals), include_n=bool(d.get("include_n", False)),
                          dense_until=int(d.get("dense_until") or 1))
    if s.k_min < 1:
        raise ConfigError("staircase.k_min", f"must be >= 1 (got {s.k_min})")
    if s.k_max < s.k_min and kind != "list":
        raise ConfigError("staircase.k_max", f"must be >= staircase.k_min (got {s.k_max})")
    if s.step < 1:
        raise ConfigError("staircase.step", f"must be >= 1 (got {s.step})")
    if kind == "geometric" and s.ratio <= 1:
        raise ConfigError("staircase.ratio", f"must be > 1 (got {s.ratio})")
    return s


@dataclass(frozen=True)
class PrivacySettings:
    epsilons: tuple[float, ...]
    delta: float
    releases: tuple[str, ...]
    beta: float | None          # None: each mechanism's own rule
    n_draws: int
    global_sensitivity: str     # range | trajectory | min | none


def parse_epsilons(d: dict) -> tuple[float, ...]:
    """``privacy.epsilons``: a number or a list of finite numbers > 0."""
    eps = d.get("epsilons")
    if eps is None:
        raise ConfigError("privacy.epsilons", "is required, e.g. privacy.epsilons=[1,10]")
    if not isinstance(eps, (list, tuple)):
        eps = [eps]
    out = []
    for e in eps:
        try:
            e = float(e)
        except (TypeError, ValueError):
            raise ConfigError("privacy.epsilons", f"must be numbers > 0 (got {e!r})")
        if not (e > 0 and math.isfinite(e)):
            raise ConfigError("privacy.epsilons", f"every epsilon must be a finite number > 0 (got {e})")
        out.append(e)
    return tuple(out)


def parse_delta(d: dict, default: float = 1e-5) -> float:
    """``privacy.delta`` in (0, 1)."""
    try:
        delta = float(d.get("delta", default))
    except (TypeError, ValueError):
        raise ConfigError("privacy.delta", f"must be a number in (0, 1) (got {d.get('delta')!r})")
    if not 0 < delta < 1:
        raise ConfigError("privacy.delta", f"must be in (0, 1) (got {delta})")
    return delta


def parse_choices(d: dict, key: str, allowed, default, *, what: str = "value") -> tuple[str, ...]:
    """A name or a list of names from ``allowed`` (``key`` is the dotted config key)."""
    name = key.rsplit(".", 1)[-1]
    vals = d.get(name) or list(default)
    vals = [vals] if isinstance(vals, str) else list(vals)
    for v in vals:
        if v not in allowed:
            raise ConfigError(key, f"unknown {what} '{v}'; allowed: {', '.join(allowed)}")
    return tuple(vals)


def parse_beta(d: dict) -> float | None:
    """``privacy.beta``: 'auto' (None: each mechanism's rule) or a number > 0."""
    beta = d.get("beta", "auto")
    if beta in (None, "auto"):
        return None
    try:
        beta = float(beta)
    except (TypeError, ValueError):
        raise ConfigError("privacy.beta", f"must be 'auto' or a number > 0 (got {beta!r})")
    if beta <= 0:
        raise ConfigError("privacy.beta", f"must be > 0 (got {beta})")
    return beta


def privacy_settings(d: dict) -> PrivacySettings:
    from certdp.privacy.mechanisms import MECHANISMS
    out = parse_epsilons(d)
    delta = parse_delta(d)
    rel = parse_choices(d, "privacy.releases", MECHANISMS, MECHANISMS, what="release")
    beta = parse_beta(d)
    n_draws = int(d.get("n_draws", 200))
    if n_draws < 1:
        raise ConfigError("privacy.n_draws", f"must be >= 1 (got {n_draws})")
    gs = d.get("global_sensitivity", "range")
    if gs not in ("range", "trajectory", "min", "none"):
        raise ConfigError("privacy.global_sensitivity", f"unknown '{gs}'; allowed: range, trajectory, min, none")
    p = PrivacySettings(out, delta, tuple(rel), beta, n_draws, gs)
    # Instantiate every mechanism once so that a beta above a limit fails before any training.
    mechanisms_for(p)
    return p


def mechanisms_for(p: PrivacySettings) -> list:
    from certdp.privacy.mechanisms import MECHANISMS
    out = []
    for name in p.releases:
        cls = MECHANISMS[name]
        for e in p.epsilons:
            kw: dict[str, Any] = {"epsilon": e}
            if name in ("laplace", "gaussian_gs"):
                kw["delta"] = p.delta
            if name in ("cauchy", "cauchy6", "laplace") and p.beta is not None:
                kw["beta"] = p.beta
            out.append(cls(**kw))
    return out


@dataclass(frozen=True)
class ModelSettings:
    arch: str
    hidden: tuple[int, ...]
    loss: str


def model_settings(model: dict, dataset: dict) -> ModelSettings:
    m = dict(model or {})
    if m.get("arch", "auto") == "auto":
        dm = dict(dataset.get("model") or {})
        for k, v in m.items():
            if v is not None and k != "arch":
                dm[k] = v
        m = {**m, **dm}
        m.setdefault("arch", "linear")
    arch = m.get("arch")
    if arch not in ("linear", "mlp", "logistic"):
        raise ConfigError("model", f"unknown model '{arch}'; allowed: auto, linear, mlp, logistic")
    hidden = tuple(int(h) for h in (m.get("hidden") or ()))
    if arch == "mlp" and not hidden:
        raise ConfigError("model.hidden", "an mlp needs hidden widths, e.g. model.hidden=[64]")
    loss = m.get("loss") or {"logistic": "ce"}.get(arch, "mse")
    return ModelSettings(arch, hidden, loss)


def section(cfg: DictConfig | dict, key: str) -> dict:
    d = to_dict(cfg)
    return d.get(key) or {}
