"""The catalogue: every probe, by section (one module a section), in the order a pass runs them."""

from __future__ import annotations

from tools.prober.catalogue import (agtr, commands, data, house, hybrid_figures, loaders, publish, resume, runs,
                                    surfaces)
from tools.prober.model import Probe, Table


def build() -> list[Probe]:
    """Every probe (ids unique; ``--surfaces`` and ``--hardening`` select those marked
    ``extra["surface"]`` and ``extra["hardening"]``)."""
    t = Table()
    agtr.add(t)
    data.add(t)
    commands.add(t)
    hybrid_figures.add(t)
    runs.add(t)
    surfaces.build(t)
    # issue 28: loaders, resume, what is published, the house (each marked extra["hardening"]: --hardening)
    loaders.add(t)
    resume.add(t)
    publish.add(t)
    house.add(t)
    return t.probes
