"""``certdp hybrid``: the SST-2 hybrid (a DP-LoRA encoder and an AGS head); its encoder and
fine-tunes are not modelled by the estimate."""

from __future__ import annotations

from certdp.commands import Command
from certdp.estimate.work import Work
from certdp.settings.hybrid import TOP, hybrid_settings


COMMANDS = (
    Command("hybrid", "SST-2 hybrid: DP-LoRA encoder + AGS head.", ("certdp hybrid profile=cpu", "certdp hybrid"),
            TOP, lambda cfg: hybrid_settings(dict(cfg or {})), "certdp.methods.hybrid:run",
            lambda settings: Work(unmodelled=["the hybrid's encoder and DP-LoRA fine-tunes"]), order=90),
)
