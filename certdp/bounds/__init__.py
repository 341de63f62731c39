"""Bound-propagation engines (one file each) behind the ``Certificate`` protocol.

A certificate turns a box of parameters and a batch into per-sample clipped-gradient intervals
(``per_sample_gradient_bounds``); window engines (MILP) may instead certify several steps at
once (``step_window``). Engines register themselves by name in :data:`CERTIFICATES`.
"""

from __future__ import annotations

from typing import Callable, Protocol

import torch

from certdp.bounds.interval import Interval


class Certificate(Protocol):
    name: str

    def per_sample_gradient_bounds(self, model, theta: Interval, x: torch.Tensor,
                                   y: torch.Tensor, clip: float) -> Interval:
        """Intervals [K, P, n] (samples last) containing clip(grad_theta loss(f_theta(x_i), y_i)) for every
        theta in the box ``theta`` ([K, P])."""
        ...


CERTIFICATES: dict[str, Callable[..., Certificate]] = {}


def register_certificate(name: str):
    def deco(factory):
        CERTIFICATES[name] = factory
        return factory
    return deco


def get_certificate(name: str, **options) -> Certificate:
    # Importing the engine modules registers them.
    from certdp.bounds import ibp  # noqa: F401
    try:
        from certdp.bounds import crown  # noqa: F401
    except ImportError:
        pass
    try:
        from certdp.bounds import milp  # noqa: F401
    except ImportError:
        pass
    if name not in CERTIFICATES:
        from certdp.errors import ConfigError
        raise ConfigError("certificate.name", f"unknown certificate '{name}'; allowed: {', '.join(sorted(CERTIFICATES))}")
    return CERTIFICATES[name](**options)
