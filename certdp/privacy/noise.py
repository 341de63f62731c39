"""The one home of random noise: where uniforms come from (a *source*) and how each noise
distribution is made from them (one exact inverse-CDF sampler per distribution).

Two sources, for two different jobs:

* :class:`SeededSource` - a seeded ``torch.Generator`` (normally from
  :func:`certdp.seeding.generator_for`, or a ``numpy.random.Generator``).  It drives the
  *statistics* of an experiment: the ``privacy.n_draws`` draws behind a median accuracy or MAE,
  the DP-SGD and PATE baselines, the hybrid, the audits.  Same seed, same draws, byte-identical
  ``results.csv``.  These draws are the researcher's report; none of them is ever published.
* :class:`SecureSource` - the operating system's CSPRNG (``os.urandom``).  It drives every
  *release*, i.e. every private output meant to leave the machine (``publish/released.json``,
  ``publish/answers.csv``).  Nothing about it is seeded, stored or derivable from anything the
  run writes, so no published value can regenerate the noise (issue 19: with a seeded release
  and the seed in the file, a least-squares fit over the releases returned the non-private
  parameters to 1e-14).  :func:`release_source` picks it unless
  ``privacy.reproducible_release=true`` asks for a seeded release (debugging only; the files
  are then marked ``publishable: false``).

Uniforms.  Both sources give float64 values u = k * 2^-53 with k uniform on {1, ..., 2^53 - 1}:
53 random bits, the open interval (0, 1), every value exactly representable, and the exact zero
(k = 0, probability 2^-53) redrawn, so no sampler below sees an infinite logarithm or tangent.
(The seeded source reads torch's ``rand``, which already returns k * 2^-53; the secure source
keeps the top 53 bits of 64 OS-random bits.)

Samplers.  Each inverts the exact CDF, through w = u - 1/2 (exact in float64 on this grid) and
the exact complement 1/2 - |w| in (0, 1/2], so both tails are computed from a small argument
with full relative precision:

* Cauchy   F^-1(u) = tan(pi w): sign(w) tan(pi |w|) for |w| <= 1/4, else
  sign(w) / tan(pi (1/2 - |w|)) (the tangent near pi/2 is ill-conditioned, its reciprocal of the
  complement is not); largest magnitude ~ 2^54 / pi.
* Laplace  F^-1(u) = -sign(w) ln(1 - 2|w|) (``log1p``); largest magnitude 52 ln 2.
* Gaussian F^-1(u) = sign(w) * (-Phi^-1(1/2 - |w|)) (``torch.special.ndtri``); largest ~8.3.

Every sampler accepts a source, or a bare ``torch.Generator`` / ``numpy.random.Generator``
(treated as a seeded source), so ``mechanism.sample(generator_for(...), shape)`` keeps working.
Floating point: the releases are float64 inversions of 53-bit uniforms, the usual
implementation of these mechanisms; the finite-precision caveats of Mironov (2012) apply as to
any such implementation (docs/privacy-as-published.md).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from certdp.seeding import generator_for

DTYPE = torch.float64
_BITS = 53
_ULP = 2.0 ** -_BITS

# The first label of every seeded *release* draw (privacy.reproducible_release=true): kept apart
# from the labels of the statistics so that a reproducible release is never one of the n_draws.
RELEASE_LABEL = "published-release"


class NoiseSource:
    """Where uniforms come from.  ``uniform(shape)``: float64 in the open interval (0, 1) on the
    grid k * 2^-53 (module docstring); ``secure``: whether the values come from the OS CSPRNG."""

    secure: ClassVar[bool] = False

    def _raw(self, n: int) -> torch.Tensor:
        """n float64 values k * 2^-53, k uniform on {0, ..., 2^53 - 1}."""
        raise NotImplementedError

    def uniform(self, shape) -> torch.Tensor:
        shape = tuple(shape) if isinstance(shape, (tuple, list, torch.Size)) else (int(shape),)
        n = math.prod(shape)
        u = self._raw(n)
        bad = u == 0
        while bool(bad.any()):          # probability 2^-53 per value: keeps the interval open
            u[bad] = self._raw(int(bad.sum()))
            bad = u == 0
        return u.view(shape)


@dataclass(frozen=True)
class SeededSource(NoiseSource):
    """Uniforms from a seeded ``torch.Generator`` (or ``numpy.random.Generator``): reproducible
    statistics, never releases (module docstring)."""
    generator: Any

    secure: ClassVar[bool] = False

    def _raw(self, n: int) -> torch.Tensor:
        if isinstance(self.generator, np.random.Generator):
            return torch.from_numpy(self.generator.random(n))       # numpy: (bits >> 11) * 2^-53
        return torch.rand(n, generator=self.generator, dtype=DTYPE)  # torch: 53 bits * 2^-53


class SecureSource(NoiseSource):
    """Uniforms from the operating system's CSPRNG (``os.urandom``): 53 of every 64 random bits,
    nothing seeded, nothing stored.  The source of every published release."""

    secure: ClassVar[bool] = True

    def _raw(self, n: int) -> torch.Tensor:
        bits = np.frombuffer(os.urandom(8 * n), dtype=np.uint64) >> np.uint64(64 - _BITS)
        return torch.from_numpy(bits.astype(np.float64) * _ULP)    # k < 2^53: exact in float64

    def __repr__(self) -> str:
        return "SecureSource(os.urandom)"


def seeded(seed: int, *labels) -> SeededSource:
    """The seeded source of ``(seed, *labels)`` (:func:`certdp.seeding.generator_for`)."""
    return SeededSource(generator_for(seed, *labels))


def secure() -> SecureSource:
    """A source reading the OS CSPRNG (every call draws fresh bits; there is no state to keep)."""
    return SecureSource()


def release_source(*, reproducible: bool, seed: int, labels: tuple) -> NoiseSource:
    """The source of one published release: the OS CSPRNG, or, when ``reproducible``
    (``privacy.reproducible_release=true``, debugging only), the seeded source of
    ``(seed, RELEASE_LABEL, *labels)`` - whose output is then *not* publishable, because anyone who
    learns the seed regenerates its noise."""
    return seeded(seed, RELEASE_LABEL, *labels) if reproducible else secure()


def as_source(source) -> NoiseSource:
    """A :class:`NoiseSource` as it is, a torch or numpy generator as a :class:`SeededSource`."""
    if isinstance(source, NoiseSource):
        return source
    if isinstance(source, (torch.Generator, np.random.Generator)):
        return SeededSource(source)
    raise TypeError(f"a noise source must be a NoiseSource or a seeded generator (got {type(source).__name__})")


def uniform(source, shape) -> torch.Tensor:
    """Uniforms in the open interval (0, 1), float64, from ``source``."""
    return as_source(source).uniform(shape)


def _centred(source, shape) -> tuple[torch.Tensor, torch.Tensor]:
    """(sign(w), 1/2 - |w|) for w = u - 1/2: both exact, the second in (0, 1/2]."""
    w = uniform(source, shape) - 0.5
    return torch.sign(w), 0.5 - w.abs()


def cauchy(source, shape, dtype=DTYPE) -> torch.Tensor:
    """Standard Cauchy draws (density 1/(pi (1 + z^2))) by inversion, one uniform each."""
    s, c = _centred(source, shape)
    a = 0.5 - c                                          # |w|, exact
    mag = torch.where(a <= 0.25, torch.tan(math.pi * a), 1.0 / torch.tan(math.pi * c))
    return (s * mag).to(dtype)


def laplace(source, shape, dtype=DTYPE) -> torch.Tensor:
    """Standard Laplace draws (density e^-|z| / 2) by inversion, one uniform each."""
    s, c = _centred(source, shape)
    return (-s * torch.log1p(-2 * (0.5 - c))).to(dtype)   # 1 - 2|w| in (0, 1]: finite


def gaussian(source, shape, dtype=DTYPE) -> torch.Tensor:
    """Standard normal draws by inversion of Phi, one uniform each."""
    s, c = _centred(source, shape)
    return (-s * torch.special.ndtri(c)).to(dtype)


def index(source, n: int, shape) -> torch.Tensor:
    """Uniform indices in {0, ..., n-1} (int64), floor(n u) of one uniform each: each index has
    probability within n 2^-53 of 1/n (e.g. the secret shard of ``agtr_wor``)."""
    return (uniform(source, shape) * n).floor().long().clamp_(max=n - 1)


SAMPLERS = {"cauchy": cauchy, "laplace": laplace, "gaussian": gaussian}

