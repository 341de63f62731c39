"""``certdp dpaudit``: an empirical lower bound on epsilon from a release run end to end on a pair
of neighbouring datasets, next to the epsilon it claims.

The pair.  D is the dataset's private training set; D' replaces one record (``dpaudit.record``)
by an outlier chosen to move the release: for regression its target is shifted by
``dpaudit.shift`` (model units, i.e. target sds) and its features are multiplied by -``dpaudit.shift``;
for classification its features are multiplied by -``dpaudit.shift`` and its label is changed
to another class.  d(D, D') = 1 (substitution of one record, the adjacency of every guarantee).

The release, on each dataset.  Everything that depends on the data is recomputed on D and on D'
through the same code as the release commands: nominal training, AGT envelopes, the staircase
and its smooth bound (so the noise scale differs between the two, as it does in reality).

* ``dpaudit.query=prediction`` (AGT-R, ``cauchy`` / ``laplace``): the private prediction of test
  query ``dpaudit.test_point``: clip(f(x_t), range) + noise scaled to SS^beta(x_t), clipped to
  the output range; the statistic is the released value itself.
* ``dpaudit.query=parameter`` (AGS, ``cauchy_p`` / ``laplace_p``): theta + independent noise per
  coordinate scaled to u = SS^beta of the parameter staircase; the statistic is one coordinate,
  fixed before any draw: the j maximising |theta_j(D) - theta_j(D')| (the auditor knows both
  datasets).  The coordinates are drawn independently, so ``privacy.n_draws`` draws of that
  coordinate (the mechanism's own ``sample``) are draws of the statistic of the full release.

The test.  ``privacy.n_draws`` outputs on each side; one-sided threshold events, chosen on a
first half of each sample, bounded on the second half with Clopper-Pearson intervals at
confidence 1 - ``dpaudit.alpha`` (:func:`certdp.privacy.empirical.epsilon_lower_bound`;
delta is subtracted for the approximate-DP releases).  If the mechanism is (eps, delta)-DP the
bound exceeds eps with probability at most alpha, so a bound above the claim is a violation (exit
status 1).  The exact privacy loss of the statistic's two distributions is reported beside it
(:mod:`certdp.privacy.loss`: pure releases its sup |log-ratio|, approximate ones delta(eps)),
which the empirical bound can approach but, when the implementation is right, not exceed.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pandas as pd
import torch

from certdp import DTYPE
from certdp.certify import (Experiment, build_experiment, certify_predictions, certify_window, check_prediction_radii,
                            global_sensitivity, nominal, with_provenance)
from certdp.errors import ConfigError
from certdp.privacy.empirical import epsilon_lower_bound
from certdp.privacy.loss import Release1D, delta_of, pure_loss, release_for
from certdp.seeding import generator_for
from certdp.settings import ExperimentSettings

log = logging.getLogger("certdp")

AUDITED = {"prediction": ("cauchy", "laplace"), "parameter": ("cauchy_p", "laplace_p")}
_FAMILY = {"cauchy": "cauchy", "laplace": "laplace", "cauchy_p": "cauchy", "laplace_p": "laplace"}
CHUNK = 1_000_000          # draws per sampling call (memory)


def neighbour(exp: Experiment, *, record: int, shift: float) -> tuple[torch.Tensor, torch.Tensor]:
    """D' (features, labels): record ``record`` of D replaced by the outlier of the module docstring."""
    x, y = exp.x.clone(), exp.y.clone()
    x[record] = -shift * x[record] if bool(x[record].abs().sum() > 0) else torch.full_like(x[record], shift)
    task = exp.dataset.task
    if task == "regression":
        y[record] = y[record] + shift
    elif task == "binary" and exp.model.loss.name == "hinge":
        y[record] = -y[record]
    else:
        C = exp.dataset.n_classes or 2
        y[record] = (y[record] + 1) % C
    return x, y


def _draw(mech, center: float, scale: float, n: int, gen: torch.Generator, rng) -> np.ndarray:
    """n draws of center + scale * Z with the mechanism's own noise, clipped to ``rng`` if given."""
    out = []
    done = 0
    while done < n:
        m = min(CHUNK, n - done)
        z = mech.sample(gen, (m,)).to(DTYPE)
        v = center + scale * z
        if rng is not None:
            v = v.clamp(float(rng[0]), float(rng[1]))
        out.append(v.numpy())
        done += m
    return np.concatenate(out)


def _prediction_sides(exp: Experiment, exps, mechs, t: int) -> list[dict]:
    """Per dataset: the clipped prediction of query t and SS^beta(x_t) of every release's beta."""
    sides = []
    rng = exp.dataset.output_range
    for e in exps:
        _env, sc, pred, _ = certify_predictions(e)
        c = float(pred[t]) if rng is None else float(np.clip(float(pred[t]), *rng))
        sides.append({"center": c, "ss": {float(m.beta): float(sc.smooth(m.beta)[t]) for m in mechs}})
    return sides


def _parameter_sides(exp: Experiment, exps, mechs) -> tuple[list[dict], int]:
    """Per dataset: the nominal parameters and u = SS^beta of every release's beta; and the audited
    coordinate j (largest nominal difference, fixed before any draw)."""
    sides = []
    for e in exps:
        env, sc = certify_window(e, e.model.init(e.train.seed), (0, e.train.steps))
        sides.append({"theta": env.nominal, "ss": {float(m.beta): float(sc.smooth(m.beta)) for m in mechs}})
    j = int((sides[0]["theta"] - sides[1]["theta"]).abs().argmax())
    for s in sides:
        s["center"] = float(s["theta"][j])
    return sides, j


def run(settings: ExperimentSettings, *, progress: bool = True) -> dict[str, pd.DataFrame]:
    a = settings.dpaudit
    query = settings.privacy.query
    exp = build_experiment(settings, task="regression" if query == "prediction" else "classification",
                           smooth_release=True)
    if a.record >= exp.n_train:
        raise ConfigError("dpaudit.record", f"got {a.record} (the private set holds {exp.n_train} records); "
                                            f"allowed: 0..{exp.n_train - 1}")
    if query == "prediction":
        if a.test_point >= len(exp.yt):
            raise ConfigError("dpaudit.test_point", f"got {a.test_point} ({len(exp.yt)} test queries); allowed: "
                                                    f"0..{len(exp.yt) - 1}")
        check_prediction_radii(exp, global_sensitivity(exp))
    mechs = [m for m in settings.privacy.mechanisms(n_params=exp.model.n_params if query == "parameter" else None)]
    nominal(exp)                                   # a diverging run is refused before any certificate
    xn, yn = neighbour(exp, record=a.record, shift=a.shift)
    exps = (exp, exp.on_data(xn, yn))
    log.info("dpaudit on %s (%s releases): N=%d, record %d replaced, %d draws per side, confidence %.3g",
             exp.dataset.name, query, exp.n_train, a.record, settings.privacy.n_draws, 1 - a.alpha)
    if query == "prediction":
        sides, coord = _prediction_sides(exp, exps, mechs, a.test_point), None
        rng = exp.dataset.output_range
    else:
        sides, coord = _parameter_sides(exp, exps, mechs)
        rng = None
    n = settings.privacy.n_draws
    rows, violated = [], False
    for mech in mechs:
        b = float(mech.beta)
        scales = [float(mech.scale(torch.tensor(s["ss"][b], dtype=DTYPE))) for s in sides]
        if not all(math.isfinite(v) and v > 0 for v in scales):
            raise ConfigError("privacy.releases", f"{mech.name} at eps={mech.epsilon:g} has a noise scale "
                                                  f"{scales} that is not finite and positive; allowed: settings "
                                                  f"whose certificates are finite (a smaller train.lr)")
        draws = []
        for side, (s, sc) in enumerate(zip(sides, scales)):
            gen = generator_for(settings.seed, "dpaudit", mech.name, mech.epsilon, side)
            draws.append(_draw(mech, s["center"], sc, n, gen, rng))
        lo, hi = (-math.inf, math.inf) if rng is None else (float(rng[0]), float(rng[1]))
        fam = _FAMILY[mech.name]
        pair = [Release1D(fam, np.array(s["center"]), np.array(sc), lo, hi) for s, sc in zip(sides, scales)]
        delta = float(mech.delta_spent)
        lb = epsilon_lower_bound(draws[0], draws[1], delta=delta, alpha=a.alpha)
        if delta > 0:
            exact_delta = float(delta_of(pair[0], pair[1], float(mech.epsilon)))
            exact_loss = math.nan
        else:
            exact_loss = float(pure_loss(pair[0], pair[1]))
            exact_delta = math.nan
        viol = lb.epsilon > mech.epsilon * (1 + 1e-12)
        violated |= viol
        rows.append({"dataset": exp.dataset.name, "query": query, "mechanism": mech.name, "regime": mech.regime,
                     "epsilon": mech.epsilon, "delta": delta, "beta": b,
                     "epsilon_lower_bound": lb.epsilon, "confidence": 1 - a.alpha, "n_draws": n,
                     "event": lb.event, "threshold": lb.threshold, "k_a": lb.k_a, "n_a": lb.n_a, "k_b": lb.k_b,
                     "n_b": lb.n_b, "violation": viol,
                     "statistic_loss": exact_loss if math.isfinite(exact_loss) else math.nan,
                     "statistic_delta": exact_delta,
                     "center_D": sides[0]["center"], "center_D_prime": sides[1]["center"],
                     "sensitivity_D": sides[0]["ss"][b], "sensitivity_D_prime": sides[1]["ss"][b],
                     "scale_D": scales[0], "scale_D_prime": scales[1], "record": a.record, "shift": a.shift,
                     "test_point": a.test_point if query == "prediction" else math.nan,
                     "coordinate": coord if coord is not None else math.nan,
                     "certificate": exp.certificate_name, "smoothness_proof": exp.smoothness_proof,
                     "seed": settings.seed})
        log.info("dpaudit %-10s eps=%-6g: lower bound %.4f (%s t=%.4g; %d/%d vs %d/%d), exact loss of the "
                 "statistic %s%s", mech.name, mech.epsilon, lb.epsilon, lb.event, lb.threshold, lb.k_a, lb.n_a,
                 lb.k_b, lb.n_b, f"{exact_loss:.4f}" if delta == 0 else f"delta(eps)={exact_delta:.3g}",
                 "  VIOLATION" if viol else "")
    out = with_provenance({"results": pd.DataFrame(rows)}, exp.dataset)
    if violated:
        log.error("dpaudit: the empirical lower bound exceeds the claimed epsilon")
        out["_exit_code"] = 1
    return out
