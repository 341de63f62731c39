"""``certdp pate``: PATE-R, PATE-AGT-R and amplified single-shard AGT-R over numbers of shards."""

from __future__ import annotations

from functools import partial

from certdp.commands import Command
from certdp.estimate.work import data_run
from certdp.settings.experiment import SECTIONS, experiment_settings


def cost(settings):
    """Nominal training; the full-data AGT-R pass (a smooth release of the agtr arm); per number
    of shards m, the m shard models (vectorised) and one AGT pass per shard in turn."""
    shards = settings.shards
    run = data_run(settings, max_train=shards.max_train)
    if run is None:
        return None
    n, T, P, w = run.n, run.T, run.P, run.work
    smooth = any(m.kind == "smooth" for m in settings.privacy.mechanisms())
    if smooth and "agtr" in shards.arms:
        st = settings.staircase if shards.full_staircase == "agtr" else shards.staircase
        run.agt(T, st.radii(n), n, n)
    for m in shards.shards:
        w.train.append((T, n * P))                         # the m shard models, vectorised
        if smooth and any(a in shards.arms for a in ("pate_agtr", "agtr_wor")) and m > 1:
            size = max(1, n // m)                          # one AGT pass per shard, in turn
            run.agt(T * m, shards.staircase.radii(size), size, size)
    return w


COMMANDS = (
    Command("pate", "PATE-R, PATE-AGT-R and amplified single-shard AGT-R (shards T).",
            ("certdp pate dataset=linear", "certdp pate dataset=california pate.shards=[1,2,4]"),
            SECTIONS["pate"], partial(experiment_settings, "pate"), "certdp.methods.pate:run", cost, order=30),
)
