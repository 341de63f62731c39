"""``certdp dpsgd``: the private-learning baselines of AGS alone (:mod:`certdp.baselines`):
DP-SGD matched and optimised, PATE classification."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from certdp import DTYPE
from certdp.baselines import baseline_rows
from certdp.certify import build_experiment, nominal, with_provenance
from certdp.metrics import accuracy, majority_rate
from certdp.settings import ExperimentSettings


def run(settings: ExperimentSettings, *, progress: bool = True) -> dict[str, pd.DataFrame]:
    exp = build_experiment(settings, task="classification")
    yt = exp.yt.to(DTYPE) if exp.model.loss.name == "hinge" else exp.yt
    th = nominal(exp)
    common = {"dataset": exp.dataset.name, "nonprivate_accuracy": float(accuracy(exp.model, th, exp.xt, yt)),
              "majority_rate": majority_rate(yt), "seed": exp.seed,
              "selection": settings.run.selection}
    draws = settings.ags.baseline_draws if settings.ags is not None else None     # the ags preset's matched draws
    pv = exp.privacy if draws is None else replace(exp.privacy, n_draws=draws)
    rows = [{**common, **r} for r in baseline_rows(exp, settings.baselines.arms, pv)]
    return with_provenance({"results": pd.DataFrame(rows)}, exp.dataset, device=exp.device)
