"""Noise mechanisms (releases): one interface, one registry, one factory.

:mod:`.base` declares the interface (``name``, ``kind`` smooth/global, ``query``
prediction/parameter, ``regime`` pure/approx, ``scale``, ``sample``, the beta rule) and every
subclass with a name registers itself; :mod:`.prediction` holds the releases of one prediction
per test point (AGT-R, PATE) and :mod:`.parameter` those of the whole parameter vector (AGS),
each with its derivation.  Importing this package imports every module in it, so adding a
release is adding one file with one subclass (``privacy.releases=[NAME]`` then picks it).
"""

from __future__ import annotations

import importlib
import pkgutil

from certdp.errors import ConfigError
from certdp.privacy.mechanisms.base import REGISTRY, Mechanism, analytic_gaussian_sigma, gdp_mu

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    importlib.import_module(f"{__name__}.{_info.name}")

from certdp.privacy.mechanisms.parameter import (CauchyParams, CauchyParams6, LaplaceParams,  # noqa: E402
                                                 LaplaceParamsUnion, gamma_tail)
from certdp.privacy.mechanisms.prediction import (CauchySmooth, CauchyTight, GaussianGlobal,  # noqa: E402
                                                  LaplaceGlobal, LaplaceSmooth)


def names(query: str) -> tuple[str, ...]:
    """The registered releases of one query kind (``prediction`` or ``parameter``), in
    registration order."""
    return tuple(n for n, c in REGISTRY.items() if c.query == query)


def mechanism_class(name: str, *, query: str, key: str = "privacy.releases") -> type[Mechanism]:
    """The registered release ``name`` of this query kind, or a one-line refusal naming ``key``."""
    cls = REGISTRY.get(name)
    if cls is None or cls.query != query:
        raise ConfigError(key, f"unknown {query} release '{name}'; allowed: {', '.join(names(query))}")
    return cls


def make_mechanism(name: str, *, query: str, epsilon: float, delta: float | None = None,
                   beta: float | None = None, n_params: int | None = None) -> Mechanism:
    """The release ``name`` at (epsilon, delta), with ``beta`` (None: its own rule) and, for a
    parameter release, the number of released coordinates."""
    return mechanism_class(name, query=query).create(epsilon=epsilon, delta=delta, beta=beta, n_params=n_params)


__all__ = ["REGISTRY", "Mechanism", "analytic_gaussian_sigma", "gdp_mu", "names", "mechanism_class", "make_mechanism",
           "CauchySmooth", "CauchyTight", "LaplaceSmooth", "LaplaceGlobal", "GaussianGlobal",
           "CauchyParams", "CauchyParams6", "LaplaceParams", "LaplaceParamsUnion", "gamma_tail"]
