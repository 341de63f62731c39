"""``certdp feasibility``: the critical ratios SS/Delta of Theorems 3.2 and 3.3 (no data, no
training: its cost is a run's start and end)."""

from __future__ import annotations

from certdp.commands import Command
from certdp.estimate.work import Work
from certdp.settings import _feasibility


COMMANDS = (
    Command("feasibility", "Critical ratios SS/Delta of Theorems 3.2 and 3.3 (no data).",
            ("certdp feasibility", "certdp feasibility feasibility.delta=1e-6"),
            ("dataset", "feasibility"), _feasibility, "certdp.methods.feasibility:run", lambda settings: Work(),
            order=40),
)
