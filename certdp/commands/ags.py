"""``certdp ags`` (AGS private learning: certified parameters released with smooth-sensitivity
noise) and ``certdp dpsgd`` (its DP-SGD and PATE baselines alone)."""

from __future__ import annotations

from functools import partial

from certdp.commands import Command
from certdp.estimate.work import baselines, data_run
from certdp.settings.experiment import SECTIONS, experiment_settings


def ags_cost(settings):
    """Nominal training, the AGT pass, the later windows every further release re-certifies per
    draw, the sampling ablation, and the trained baselines."""
    run = data_run(settings, nominal_tag=True)
    if run is None:
        return None
    T, B, n = run.T, run.B, run.n
    radii = settings.staircase.radii(n)
    ags, privacy = settings.ags, settings.privacy
    run.agt(T, radii, B, n, "agt#0")
    if ags.releases_n > 1:                                 # every draw re-certifies the later windows
        redo = T * (ags.releases_n - 1) / ags.releases_n
        run.agt(redo * privacy.n_draws * len(privacy.releases) * len(privacy.epsilons), radii, B, n)
    for nr in ags.ablation_n:
        run.agt(T, radii, B, n)
        cells = len(privacy.epsilons) * len(ags.ablation_compositions) * ags.ablation_draws
        run.agt(T * (nr - 1) / nr * cells, radii, B, n)
    baselines(run, settings, ags.baselines, ags.baseline_draws or privacy.n_draws)
    return run.work


def dpsgd_cost(settings):
    """Nominal training and the trained baselines."""
    run = data_run(settings)
    if run is None:
        return None
    baselines(run, settings, settings.baselines.arms or ("dpsgd_matched", "dpsgd_optimised"), settings.privacy.n_draws)
    return run.work


COMMANDS = (
    Command("ags", "AGS private learning: release certified parameters with smooth-sensitivity noise.",
            ("certdp ags dataset=mnist5", "certdp ags dataset=blobs certificate.frequency=5"),
            SECTIONS["ags"], partial(experiment_settings, "ags"), "certdp.methods.ags:run", ags_cost, order=60),
    Command("dpsgd", "DP-SGD baselines (matched and optimised).",
            ("certdp dpsgd dataset=mnist5", "certdp dpsgd dataset=blobs"),
            SECTIONS["dpsgd"], partial(experiment_settings, "dpsgd"), "certdp.methods.dpsgd:run", dpsgd_cost,
            order=70),
)
