"""SST-2 for the hybrid: the ``sst2`` dataset's own private / public / test split.

The split is :func:`certdp.data.text.load_texts` (``dataset.n_test`` sentences of GLUE train held
out as the test set from the run seed or ``dataset.split_seed``, the rest the private pool; the
GLUE dev sentences the public set), so with the same seed ``certdp hybrid`` and
``certdp ags dataset=sst2`` test on the same sentences.  The hybrid loads the whole private pool
and trains on its first N sentences (nested subsets for the size sweep); ``dataset.n_test_eval``
scores on the first sentences of the test set only.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from certdp.data.sources import DataUnavailable
from certdp.data.text import TextPart, load_texts
from certdp.errors import ConfigError
from certdp.settings.hybrid import HybridSettings


@dataclass(frozen=True)
class SST2:
    private: TextPart       # the whole private pool, in seeded order
    public: TextPart        # GLUE dev (or its ``dataset.n_public`` subset)
    test: TextPart          # held out of GLUE train (its first ``n_test_eval`` when set)
    key: str                # digest of every sentence and label of the three parts


def _parts_digest(*parts: TextPart) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(f"{p.source}:{len(p.texts)}\n".encode())
        h.update("\n".join(p.texts).encode("utf-8"))
        h.update(p.y01.astype("int64").tobytes())
    return h.hexdigest()[:16]


def load_split(s: HybridSettings) -> SST2:
    """The ``sst2`` split of :func:`certdp.data.text.load_texts` for the run seed, with the
    whole private pool (``dataset.n_private`` is applied by :func:`private_subset`)."""
    try:
        # s.dataset holds the sst2 dataset's settings only (n_test_eval is the hybrid's own)
        sp = load_texts("sst2", {**s.dataset, "n_private": None}, s.seed)
    except DataUnavailable as e:
        raise ConfigError("dataset", str(e))
    test = sp.test.first(s.n_test_eval) if s.n_test_eval else sp.test
    return SST2(sp.private, sp.public, test, _parts_digest(sp.private, sp.public, test))


def private_subset(data: SST2, n: int | None, *, key: str = "dataset.n_private") -> TextPart:
    """The first n sentences of the (seeded) private pool; ``None`` = all of it.  ``key`` names
    the setting n came from in the error for an n larger than the pool."""
    if n is None:
        return data.private
    if n > len(data.private.texts):
        raise ConfigError(key, f"at most {len(data.private.texts)} private sentences (got {n}); allowed: an "
                               f"integer <= {len(data.private.texts)}, or null (all)")
    return data.private.first(n)
