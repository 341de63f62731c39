"""``certdp audit`` (retrain neighbouring datasets, check the certificate) and ``certdp dpaudit``
(an empirical DP audit of a release): their retrainings are not modelled by the estimate."""

from __future__ import annotations

from functools import partial

from certdp.commands import Command
from certdp.estimate.work import Work
from certdp.settings.experiment import SECTIONS, experiment_settings


def retrainings(command: str):
    return lambda settings: Work(unmodelled=[f"the {command} retrainings"])


COMMANDS = (
    Command("audit", "Retrain neighbouring datasets and check the certificate (exit 1 on violation).",
            ("certdp audit dataset=linear audit.repeats=50", "certdp audit certificate=crown"),
            SECTIONS["audit"], partial(experiment_settings, "audit"), "certdp.methods.audit:run",
            retrainings("audit"), order=50),
    Command("dpaudit", "Empirical DP audit: a release end to end on two neighbouring datasets, a Clopper-Pearson "
            "lower bound on epsilon beside the claim (exit 1 if above).",
            ("certdp dpaudit dataset=linear privacy.epsilons=[1]", "certdp dpaudit dataset=blobs dpaudit.query=parameter"),
            SECTIONS["dpaudit"], partial(experiment_settings, "dpaudit"), "certdp.methods.dpaudit:run",
            retrainings("dpaudit"), order=80),
)
