"""``certdp dpaudit``: an empirical lower bound on epsilon from a release run end to end on a pair
of neighbouring datasets, next to the epsilon it claims.

The pair.  D is the dataset's private training set; D' replaces one record (``dpaudit.record``)
by an outlier chosen to move the release: for regression its target is shifted by
``dpaudit.shift`` (target sds of the scaling) and its features are multiplied by -``dpaudit.shift``
(in scaled units); for classification its features are multiplied by -``dpaudit.shift`` and its
label is changed to another class.  d(D, D') = 1 (substitution of one record, the adjacency of
every guarantee).  For ``dataset=csv`` the record is replaced in the *raw table* and both tables
go through the dataset's whole preparation (split, scaling, output range, class list), so a
preparation that reads private statistics (``dataset.scaling=private_stats_not_dp``) is audited
too: its test queries, targets and output range move with the record, and the released values
are compared in the target's raw units.  Other datasets replace the record after preparation
(their preparation reads no private record).

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

Units.  ``center_*`` and ``scale_*`` are in the units an observer sees (the target's raw units
for prediction releases; parameter units for AGS); ``sensitivity_*`` in model units.

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


def raw_neighbour(settings: ExperimentSettings, exp: Experiment, *, record: int, shift: float) -> Experiment | None:
    """The experiment on D' built from the raw csv table with private record ``record``
    replaced (module docstring), through the dataset's own preparation; None where the dataset
    is not a csv table read without dropped rows."""
    import dataclasses

    from certdp.data import settings as dataset_fields
    from certdp.data.tabular import load_table, prepare_table, split_rows, split_sizes
    if exp.dataset.name != "csv" or exp.dataset.preprocessing is None:
        return None
    s = dataset_fields(dict(settings.dataset), "csv")
    task = s["task"]
    x, y, feats, info = load_table(s["path"], target=s["target"], features=s["features"], dropna=s["dropna"],
                                   labels=task != "regression")
    if info.get("rows_dropped"):
        return None
    n = len(y)
    n_test, n_public = split_sizes(n, n_test=s.get("n_test"), n_public=s.get("n_public"))
    seed = settings.seed if s.get("split_seed") is None else s["split_seed"]
    priv, _, _ = split_rows(n, n_test=n_test, n_public=n_public, seed=seed)
    r = int(priv[record])
    prep = exp.dataset.preprocessing
    x, y = x.copy(), y.copy()
    # features: -shift times the record's scaled value, mapped back to raw units
    z = (x[r] - prep.shift) / prep.scale
    x[r] = prep.shift + prep.scale * (-shift * z if np.abs(z).sum() > 0 else np.full_like(z, shift))
    if task == "regression":
        y[r] = y[r] + shift * prep.target_scale
    else:
        from certdp.data.preprocessing import label_text
        texts = [label_text(c) for c in prep.classes]
        y[r] = texts[(texts.index(label_text(y[r])) + 1) % len(texts)] if label_text(y[r]) in texts else texts[0]
    ds = prepare_table("csv", x, y, s, settings.seed, info, columns=feats, target=s["target"], task=task)
    from certdp.certify.experiment import _tensors
    x_tr, y_tr, x_te, y_te = _tensors(ds)
    return dataclasses.replace(exp, dataset=ds, x=x_tr, y=y_tr, xt=x_te, yt=y_te)


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


def _prediction_sides(exps, mechs, t: int) -> list[dict]:
    """Per dataset: the clipped prediction of query t, SS^beta(x_t) of every release's beta, its
    own output range (model units) and the affine map of model units to the target's raw units
    (the same on both sides unless the preparation read private statistics)."""
    sides = []
    for e in exps:
        _env, sc, pred, _ = certify_predictions(e)
        rng = e.dataset.output_range
        c = float(pred[t]) if rng is None else float(np.clip(float(pred[t]), *rng))
        prep = e.dataset.preprocessing
        raw = (prep.target_shift, prep.target_scale) if prep is not None and prep.task == "regression" else (0.0, 1.0)
        sides.append({"center": c, "ss": {float(m.beta): float(sc.smooth(m.beta)[t]) for m in mechs},
                      "rng": rng, "raw": raw})
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
        s["center"], s["rng"], s["raw"] = float(s["theta"][j]), None, (0.0, 1.0)
    return sides, j


def run(settings: ExperimentSettings, *, progress: bool = True) -> dict[str, pd.DataFrame]:
    a = settings.dpaudit
    query = settings.privacy.query
    try:
        exp = build_experiment(settings, task="regression" if query == "prediction" else "classification",
                               smooth_release=True)
    except ConfigError as e:
        if e.key != "dataset" or "needs a" not in e.message:
            raise
        other = "parameter (AGS)" if query == "prediction" else "prediction (AGT-R)"
        raise ConfigError("dpaudit.query", f"{query} releases need a "
                                           f"{'regression' if query == 'prediction' else 'classification'} dataset "
                                           f"and '{settings.dataset['name']}' is not one; allowed: "
                                           f"dpaudit.query={other.split()[0]} for it {other[other.index('('):]}") from None
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
    other = raw_neighbour(settings, exp, record=a.record, shift=a.shift)
    built = "raw table" if other is not None else "prepared data"
    if other is None:
        xn, yn = neighbour(exp, record=a.record, shift=a.shift)
        other = exp.on_data(xn, yn)
    exps = (exp, other)
    log.info("dpaudit on %s (%s releases): N=%d, record %d replaced, %d draws per side, confidence %.3g",
             exp.dataset.name, query, exp.n_train, a.record, settings.privacy.n_draws, 1 - a.alpha)
    if query == "prediction":
        sides, coord = _prediction_sides(exps, mechs, a.test_point), None
    else:
        sides, coord = _parameter_sides(exp, exps, mechs)
    n = settings.privacy.n_draws
    rows, violated = [], False
    for mech in mechs:
        b = float(mech.beta)
        scales = [float(mech.scale(torch.tensor(s["ss"][b], dtype=DTYPE))) for s in sides]
        if not all(math.isfinite(v) and v > 0 for v in scales):
            raise ConfigError("privacy.releases", f"{mech.name} at eps={mech.epsilon:g} has a noise scale "
                                                  f"{scales} that is not finite and positive; allowed: settings "
                                                  f"whose certificates are finite (a smaller train.lr)")
        draws, pair = [], []
        for side, (s, sc) in enumerate(zip(sides, scales)):
            gen = generator_for(settings.seed, "dpaudit", mech.name, mech.epsilon, side)
            shift_, mult = s["raw"]             # what an observer sees: the released value in raw units
            draws.append(shift_ + mult * _draw(mech, s["center"], sc, n, gen, s["rng"]))
            lo, hi = (-math.inf, math.inf) if s["rng"] is None else (shift_ + mult * float(s["rng"][0]),
                                                                     shift_ + mult * float(s["rng"][1]))
            pair.append((np.array(shift_ + mult * s["center"]), np.array(mult * sc), lo, hi))
        fam = _FAMILY[mech.name]
        same_range = pair[0][2:] == pair[1][2:]
        pair = [Release1D(fam, c, sc, lo, hi) for c, sc, lo, hi in pair]
        delta = float(mech.delta_spent)
        lb = epsilon_lower_bound(draws[0], draws[1], delta=delta, alpha=a.alpha)
        exact_loss = exact_delta = math.nan
        if not same_range:
            pass        # the two clipped ranges differ (a private-statistics preparation): no closed form here
        elif delta > 0:
            exact_delta = float(delta_of(pair[0], pair[1], float(mech.epsilon)))
        else:
            exact_loss = float(pure_loss(pair[0], pair[1]))
        viol = lb.epsilon > mech.epsilon * (1 + 1e-12)
        violated |= viol
        rows.append({"dataset": exp.dataset.name, "query": query, "mechanism": mech.name, "regime": mech.regime,
                     "epsilon": mech.epsilon, "delta": delta, "beta": b,
                     "epsilon_lower_bound": lb.epsilon, "confidence": 1 - a.alpha, "n_draws": n,
                     "event": lb.event, "threshold": lb.threshold, "k_a": lb.k_a, "n_a": lb.n_a, "k_b": lb.k_b,
                     "n_b": lb.n_b, "violation": viol,
                     "statistic_loss": exact_loss if math.isfinite(exact_loss) else math.nan,
                     "statistic_delta": exact_delta,
                     "center_D": float(pair[0].center), "center_D_prime": float(pair[1].center),
                     "sensitivity_D": sides[0]["ss"][b], "sensitivity_D_prime": sides[1]["ss"][b],
                     "scale_D": float(pair[0].scale), "scale_D_prime": float(pair[1].scale), "record": a.record, "shift": a.shift,
                     "neighbour": built,
                     "test_point": a.test_point if query == "prediction" else math.nan,
                     "coordinate": coord if coord is not None else math.nan,
                     "certificate": exp.certificate_name, "smoothness_proof": exp.smoothness_proof,
                     "seed": settings.seed})
        log.info("dpaudit %-10s eps=%-6g: lower bound %.4f (%s t=%.4g; %d/%d vs %d/%d), exact loss of the "
                 "statistic %s%s", mech.name, mech.epsilon, lb.epsilon, lb.event, lb.threshold, lb.k_a, lb.n_a,
                 lb.k_b, lb.n_b, ("n/a (the clipped ranges differ)" if not same_range else f"{exact_loss:.4f}" if delta == 0
                  else f"delta(eps)={exact_delta:.3g}"),
                 "  VIOLATION" if viol else "")
    out = with_provenance({"results": pd.DataFrame(rows)}, exp.dataset, device=exp.device)
    if violated:
        log.error("dpaudit: the empirical lower bound exceeds the claimed epsilon")
        out["_exit_code"] = 1
    return out
