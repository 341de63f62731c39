"""The release interface: a :class:`Mechanism` is a frozen description of one noisy release.

Every mechanism releases q(D) + scale * Z for a scalar or vector query q; ``scale(sensitivity)``
maps the (smooth or global) l1 sensitivity to the noise scale and ``sample(source, shape)``
draws standard noise Z from a source of :mod:`certdp.privacy.noise` (the OS CSPRNG for a
published release, a seeded generator for the statistics of a run).  Adjacency is substitution (d(D, D') = 1).  What a subclass declares:

==============  =================================================================================
``name``        the name ``privacy.releases`` uses (a subclass with a name registers itself)
``kind``        ``smooth`` (calibrated to a beta-smooth bound S(D): has ``beta`` and ``max_beta()``)
                or ``global`` (calibrated to the global sensitivity; ``beta`` is 0)
``query``       ``prediction`` (one value per test point, AGT-R) or ``parameter`` (the whole
                parameter vector of P coordinates, AGS; takes ``n_params``)
``regime``      ``pure`` (delta = 0) or ``approx`` (takes ``delta``)
docstring       its first paragraph is what ``certdp list`` prints
==============  =================================================================================

and, so that the base class does the rest, optionally:

================  ===============================================================================
``scale_factor``  k with scale(S) = k * S / eps (else the subclass writes ``scale``)
``noise``         ``staticmethod`` drawing standard noise from a source: one of the samplers of
                  :mod:`certdp.privacy.noise` (else the subclass writes ``sample``)
``max_beta()``    the largest admissible beta (smooth releases)
``default_beta``  the beta used when none is given (default: ``max_beta()``)
``description``   names the release in the refusal of a beta outside (0, max_beta()]
``strict_beta``   True when beta must stay strictly below ``max_beta()``
================  ===============================================================================

Subclasses are frozen dataclasses whose fields are among ``epsilon``, ``delta``, ``n_params``
and ``beta``; :meth:`Mechanism.create` passes each the budget arguments it declares, so no caller
needs to know which mechanism takes which.  The beta rule of each lives with it (``max_beta``,
checked by ``__post_init__``), nowhere else.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, ClassVar

import torch

from certdp.errors import ConfigError
from certdp.registry import Registry
from certdp.privacy.noise import as_source

KINDS = ("smooth", "global")
QUERIES = ("prediction", "parameter")

REGISTRY: Registry[type["Mechanism"]] = Registry("mechanism")


def check_epsilon(eps: float) -> None:
    if not (eps > 0 and math.isfinite(eps)):
        raise ConfigError("privacy.epsilons", f"got {eps}; allowed: finite numbers > 0")


def check_delta(delta: float) -> None:
    if not 0 < delta < 1:
        raise ConfigError("privacy.delta", f"got {delta}; allowed: a number in (0, 1)")


def check_beta(beta: float, limit: float, name: str, strict: bool = False) -> None:
    """``0 < beta <= limit`` (``< limit`` when ``strict``), finite; else a one-line refusal."""
    ok = math.isfinite(beta) and 0 < beta and (beta < limit if strict else beta <= limit)
    if not ok:
        rel = "<" if strict else "<="
        raise ConfigError("privacy.beta", f"{name} needs 0 < beta {rel} {limit:.6g} (got {beta:.6g}); allowed: a "
                                          f"beta in (0, {limit:.6g}{')' if strict else ']'}, or beta=auto")


def check_n_params(p) -> None:
    if not (isinstance(p, int) and p >= 1):
        raise ConfigError("model", f"{p!r} released parameters; allowed: an integer >= 1")


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest sigma with N(0, sigma^2) (eps, delta)-DP for l2 sensitivity 1 (Balle & Wang 2018):
    delta(sigma) = Phi(D/(2 sigma) - eps sigma/D) - e^eps Phi(-D/(2 sigma) - eps sigma/D)."""
    from scipy.stats import norm

    def dlt(sig):
        a, b = 1 / (2 * sig), epsilon * sig
        if epsilon < 700:
            return norm.cdf(a - b) - math.exp(epsilon) * norm.cdf(-a - b)
        # e^eps overflows a float above eps ~ 709: multiply in logs (a + b >= sqrt(2 eps), so
        # log Phi(-a - b) <= -eps and the product stays below 1)
        return norm.cdf(a - b) - math.exp(epsilon + norm.logcdf(-a - b))

    lo, hi = 1e-6, 1.0
    while dlt(hi) > delta:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if dlt(mid) > delta:
            lo = mid
        else:
            hi = mid
    return hi * sensitivity


def gdp_mu(epsilon: float, delta: float) -> float:
    """The mu for which mu-GDP is exactly (epsilon, delta)-DP (1/sigma of the analytic Gaussian)."""
    return 1.0 / analytic_gaussian_sigma(epsilon, delta, 1.0)


class Mechanism:
    """Base class of the releases (see the module docstring for what a subclass declares)."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = ""
    query: ClassVar[str] = ""
    regime: ClassVar[str] = ""
    scale_factor: ClassVar[float | None] = None
    noise: ClassVar[Callable[..., torch.Tensor] | None] = None
    description: ClassVar[str] = ""
    strict_beta: ClassVar[bool] = False

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if not cls.name:
            return
        for attr, allowed in (("kind", KINDS), ("query", QUERIES), ("regime", ("pure", "approx"))):
            if getattr(cls, attr) not in allowed:
                raise TypeError(f"mechanism {cls.__name__}: {attr} must be one of {', '.join(allowed)}")
        if not (cls.__doc__ or "").strip():
            raise TypeError(f"mechanism {cls.__name__} needs a docstring (its first paragraph is its help)")
        REGISTRY[cls.name] = cls

    @classmethod
    def create(cls, *, epsilon: float, delta: float | None = None, beta: float | None = None,
               n_params: int | None = None) -> "Mechanism":
        """The mechanism at this budget: each declared field gets its argument (``beta=None``:
        the mechanism's own rule; ``delta`` only where the regime is approximate)."""
        fields = cls._field_names()
        kw: dict = {"epsilon": epsilon}
        if "delta" in fields:
            kw["delta"] = delta
        if "n_params" in fields:
            kw["n_params"] = n_params
        if "beta" in fields and beta is not None:
            kw["beta"] = beta
        return cls(**kw)

    @classmethod
    def _field_names(cls) -> set[str]:
        return {f.name for f in dataclasses.fields(cls)}

    def __post_init__(self):
        """Refuse a budget outside the mechanism's domain, checking epsilon, then delta, n_params
        and beta where they are fields; an omitted beta (None) becomes ``default_beta()`` first."""
        fields = self._field_names()
        check_epsilon(self.epsilon)
        if "delta" in fields:
            check_delta(self.delta)
        if "n_params" in fields:
            check_n_params(self.n_params)
        if "beta" in fields:
            if self.beta is None:
                # frozen dataclass: the default is filled in once, at construction
                object.__setattr__(self, "beta", self.default_beta())
            check_beta(self.beta, self.max_beta(), self.description, strict=self.strict_beta)

    def default_beta(self) -> float:
        """The beta used when none is given: the largest admissible one (``max_beta()``, which
        every release with a ``beta`` field defines) unless a subclass says otherwise."""
        return self.max_beta()

    @classmethod
    def help(cls) -> str:
        """The first paragraph of the class docstring, on one line."""
        return " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())

    @property
    def delta_spent(self) -> float:
        """The delta of the guarantee: ``delta`` for approximate DP, 0 for pure DP."""
        return float(getattr(self, "delta", 0.0)) if self.regime == "approx" else 0.0

    def scale(self, sensitivity):
        """The noise scale for this sensitivity: ``scale_factor * sensitivity / epsilon``."""
        if self.scale_factor is None:
            raise NotImplementedError(f"mechanism '{self.name}' does not implement scale")
        return self.scale_factor * sensitivity / self.epsilon

    def sample(self, source, shape, dtype=torch.float64) -> torch.Tensor:
        """Standard noise Z of this shape, drawn by ``noise`` from ``source``: a
        :class:`certdp.privacy.noise.NoiseSource` (the secure one for a published release) or a
        seeded generator (the statistics of a run)."""
        if self.noise is None:
            raise NotImplementedError(f"mechanism '{self.name}' does not implement sample")
        return self.noise(as_source(source), shape, dtype)
