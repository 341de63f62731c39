"""``certdp agtr`` (AGT-R private prediction) and ``certdp certify`` (its envelopes and
staircase alone): nominal training, then one AGT pass over the staircase's radii."""

from __future__ import annotations

from functools import partial

from certdp.commands import Command
from certdp.estimate.work import data_run
from certdp.settings.experiment import SECTIONS, experiment_settings


def cost(settings):
    """Nominal training and one AGT pass (both checkpointed loops)."""
    run = data_run(settings, nominal_tag=True)
    if run is None:
        return None
    run.agt(run.T, settings.staircase.radii(run.n), run.B, run.n, "agt#0")
    return run.work


COMMANDS = (
    Command("agtr", "AGT-R private prediction (regression): envelopes, smooth sensitivity, noisy releases.",
            ("certdp agtr dataset=california", "certdp agtr -m privacy.epsilons=[1] train.clip=0.5,1.0"),
            SECTIONS["agtr"], partial(experiment_settings, "agtr"), "certdp.methods.agtr:run", cost, order=10),
    Command("certify", "Envelopes T_k and the sensitivity staircase only (no noise).",
            ("certdp certify dataset=linear staircase.k_max=64", "certdp certify --cfg job"),
            SECTIONS["certify"], partial(experiment_settings, "certify"), "certdp.methods.agtr:run_certify", cost,
            order=20),
)
