"""The project's one rule for *seeded* random draws: every generator is seeded from the run seed
and a label, so the same config and seed give the same draws whatever order the arms run in.

Seeded draws make the researcher's report (statistics over ``privacy.n_draws``, baselines,
splits, audits) reproducible.  They never make a published release: anyone who learns the seed
regenerates them.  Releases draw from the OS CSPRNG (:mod:`certdp.privacy.noise`)."""

from __future__ import annotations

import hashlib

import torch


def generator_for(seed: int, *labels) -> torch.Generator:
    """A torch generator seeded from ``seed`` and ``labels`` (mechanism, epsilon, ...) through
    SHA-256 of their ``repr``: reproducible, and independent between different labels."""
    h = hashlib.sha256(repr((int(seed),) + tuple(labels)).encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(h[:8], "little") & ((1 << 63) - 1))
