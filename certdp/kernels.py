"""The elementary functions that the certified bounds rest on, settled and checked once per process.

The softmax bounds (:func:`certdp.losses.softmax_bounds`) and the other exp/log based bounds take
each elementary function to be within about one ulp.  torch's CPU ``exp`` (and ``log``,
``log1p``, ``expm1``) on a float64 tensor of at least 2,048 elements runs Intel MKL's vector math
library on each OpenMP thread's chunk.  Measured on this project's machine (torch 2.13.0+cpu,
MKL 2024.2, 2 cores, AVX-512; ``benchmarks/kernel_race.py``): the *first* such call of a process,
when both threads enter it at once under CPU contention, returned on one thread's chunk values
off by up to 3.3e-9 relative (about 1.5e7 ulps) -- 1 process in 10 to 40 when 4 processes share
the 2 cores -- and every later call was exact.  That error crossed the softmax bounds' margins
(an interval with lo > hi by 1.8e-10 at the first step of an AGT run); an error that does not
cross an interval would pass unseen.

:func:`settle` calls each function once on the calling thread, on fewer elements than torch's
parallel grain (one thread, no race), before any certified computation: importing
:mod:`certdp.losses` settles.  :func:`verify` then checks each function on a tensor split over all
threads against Python's ``math`` (glibc, within one ulp) and accepts at most
:data:`MAX_ULPS` ulps; a failed check is repeated (the race happens on a first call only) and
after :data:`ATTEMPTS` failures the run is refused.  :func:`certdp.agt.run_agt` verifies before
its first step; the result is kept for the process.
"""

from __future__ import annotations

import functools
import logging
import math
import threading

import torch

from certdp.errors import ConfigError

log = logging.getLogger("certdp")

# the functions checked, with the arguments they are checked on (float64, each range sampled evenly)
FUNCTIONS = {
    "exp": (torch.exp, math.exp, [(-745.0, -1.0), (-1.0, 1.0), (1.0, 709.0)]),
    "expm1": (torch.expm1, math.expm1, [(-40.0, -1e-3), (-1e-3, 1e-3), (1e-3, 709.0)]),
    "log": (torch.log, math.log, [(1e-300, 1e-3), (1e-3, 4.0), (4.0, 1e300)]),
    "log1p": (torch.log1p, math.log1p, [(-1.0 + 1e-12, -1e-3), (-1e-3, 1e-3), (1e-3, 1e300)]),
}
# ulps accepted between torch and math (each within about 0.5 ulp of the exact value on this
# machine: they agree bit for bit); the bounds' margins hold for 2 ulps per function
MAX_ULPS = 2
ATTEMPTS = 3
# torch's element-wise grain: below it a call runs on one thread
_GRAIN = 2048

_lock = threading.Lock()
_settled = False
_verified = False


def settle() -> None:
    """Call every function of :data:`FUNCTIONS` once on the calling thread (64 elements, below
    the parallel grain).  Idempotent and cheap (microseconds)."""
    global _settled
    if _settled:
        return
    with _lock:
        if not _settled:
            x = torch.linspace(0.25, 0.75, 64, dtype=torch.float64)
            for fn, _, _ in FUNCTIONS.values():
                fn(x)
            _settled = True


@functools.lru_cache(maxsize=None)
def _reference(ref, ranges: tuple, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(arguments, ``ref`` of each, the reference's ulp) on ``n`` points spread over ``ranges``:
    computed once per process (a Python call per point), shared by the retries."""
    per = -(-n // len(ranges))
    x = torch.cat([torch.linspace(a, b, per, dtype=torch.float64) for a, b in ranges])
    want = torch.tensor([ref(v) for v in x.tolist()], dtype=torch.float64)
    ulp = torch.nextafter(want.abs(), torch.tensor(math.inf, dtype=torch.float64)) - want.abs()
    return x, want, ulp


def worst_ulps(name: str, fn=None) -> float:
    """The largest distance in ulps of the reference between ``fn`` (default: the torch function
    of ``name``) and Python's ``math`` on :data:`FUNCTIONS`' ranges, on enough elements that every
    thread of torch's pool gets chunks."""
    tfn, ref, ranges = FUNCTIONS[name]
    fn = tfn if fn is None else fn
    x, want, ulp = _reference(ref, tuple(map(tuple, ranges)), max(2 ** 15, 4 * _GRAIN * torch.get_num_threads()))
    err = (fn(x) - want).abs() / ulp
    err = torch.where(torch.isnan(err), torch.tensor(math.inf, dtype=torch.float64), err)
    return float(err.max())


def verify() -> None:
    """Refuse (``ConfigError`` on ``device``) unless every function of :data:`FUNCTIONS`, run over
    all threads, is within :data:`MAX_ULPS` of ``math``; :func:`settle` first.  Up to
    :data:`ATTEMPTS` tries per function; the first success is kept for the process."""
    global _verified
    if _verified:
        return
    settle()
    with _lock:
        if _verified:
            return
        for name in FUNCTIONS:
            errs = []
            for _ in range(ATTEMPTS):
                errs.append(worst_ulps(name))
                if errs[-1] <= MAX_ULPS:
                    break
                log.warning("torch's float64 %s was off by %.3g ulps over the threads (try %d of %d)",
                            name, errs[-1], len(errs), ATTEMPTS)
            else:
                worst = max(errs)
                raise ConfigError("device", f"torch's float64 {name} on this machine is off by up to "
                                  f"{worst:.3g} ulps in {ATTEMPTS} tries (certified bounds assume at most "
                                  f"{MAX_ULPS}); allowed: a CPU whose torch build computes it to {MAX_ULPS} "
                                  f"ulps, or OMP_NUM_THREADS=1")
        _verified = True
