"""The catalogue: every probe, by section (one module a section), in the order a pass runs them."""

from __future__ import annotations

from tools.prober.catalogue import agtr, commands, data, hybrid_figures, runs, surfaces
from tools.prober.model import Probe, Table


def build() -> list[Probe]:
    """Every probe (ids unique; ``--surfaces`` selects those marked ``extra["surface"]``)."""
    t = Table()
    agtr.add(t)
    data.add(t)
    commands.add(t)
    hybrid_figures.add(t)
    runs.add(t)
    surfaces.build(t)
    return t.probes
