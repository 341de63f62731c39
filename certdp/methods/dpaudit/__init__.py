"""``certdp dpaudit``: an empirical lower bound on epsilon from a release run end to end on pairs of
neighbouring datasets found by a search, next to the epsilon it claims (docs/dpaudit.md).
:mod:`.search` builds the candidate datasets, :mod:`.exact` their releases and the exact loss that
ranks the pairs; this module draws, tests and reports.

The neighbour search (``dpaudit.search=true``, the default).  Every candidate is the training set
D with one private record, at one *placement* (index), replaced; two candidates at the same index,
or a candidate and D itself, are neighbours (d = 1, substitution: the adjacency of every
guarantee).  Placements: the configured ``dpaudit.record`` and ``dpaudit.placements`` indices
chosen from the batch plan alone, the ones that hurt most: the index used in the most batches
(over all epochs; ties go to the one used latest), the most used index of the run's final batch
and of the last batch of the first epoch, then the rest by (uses, last use).  Records at each
placement, in standardised units (the model's units for generated data, the scaling's units for a
csv table), for every magnitude m of ``dpaudit.magnitudes``:

* regression: features x in {-m, 0, +m} times a pattern (all ones; for several features also the
  signs of the configured test query) and targets y in {-m, 0, +m} (x = y = 0 left out);
* classification: features in {-m, +m} times the patterns with every label, features 0 with every
  label, and the record's own features with every other label (label flips);
* at the configured record, the configured outlier of ``dpaudit.shift`` (its target + shift and
  features times -shift, or another label), the neighbour of ``dpaudit.search=false``.

Each candidate dataset goes through the same code as the release commands: nominal training, AGT
envelopes, the staircase and its smooth bound, so the centre *and* the noise scale of every
release are its own.  For ``dataset=csv`` (no dropped rows) the record is replaced in the *raw
table* and each candidate table goes through the dataset's whole preparation (split, scaling,
output range, class list), so a preparation that reads private statistics
(``dataset.scaling=private_stats_not_dp``) is audited too; released values are compared in the
target's raw units.  Other datasets replace the record after preparation (their preparation reads
no private record).  A candidate whose run is refused or fails (any error: a certificate or
a noise scale that is not finite, a diverging run, ...) while D's run releases is a pair of
neighbours whose outcomes differ -- released on D, nothing on D' -- an infinite privacy loss: a
violation (exit status 1), reported in a row of its own (``search=refusal``: the first such
candidate, ``candidates_refused``; every one in the log).

The statistic.  ``dpaudit.query=prediction`` (AGT-R, ``cauchy`` / ``laplace``): the released value
of one test query, clip(f(x_t), range) + noise scaled to SS^beta(x_t), clipped to the output range;
the searched queries are the first ``dpaudit.queries`` test queries and ``dpaudit.test_point``.
``dpaudit.query=parameter`` (AGS, ``cauchy_p`` / ``laplace_p``): one coordinate theta_j + noise
scaled to u = SS^beta of the parameter staircase (the coordinates are drawn independently, so
draws of one coordinate are draws of that statistic of the full release).

Choosing the pair (before any draw).  For every pair of neighbouring candidates and every searched
statistic the exact privacy loss of the statistic's two distributions is computed from the two
runs' centres and scales (:mod:`certdp.privacy.loss`): for pure releases sup |log-ratio|, for
approximate ones the least eps whose hockey-stick divergence is <= delta (a grid of 2^(1/8)
steps).  The ``dpaudit.pairs`` pairs (distinct distributions) with the largest exact loss are
audited.  This criterion reads only the audit's own runs, none of the draws, so it does not bias
the test; where the two runs' output ranges differ (a private-statistics preparation) there is no
closed form and the pair is ranked by |c - c'| / min(s, s') + |ln(s / s')|.

The worst neighbour the certificate admits (:mod:`.admissible`).  Besides the real pairs, every
release is audited on D against the corner of what its certificate allows a neighbour
(|c - c'| <= min(S, S'), S' = S e^{+-beta} capped), the pair its own proof must keep below the
claim whatever the data; and the draws of D's side are tested for noise narrower than the proof's
scale (the noise check).

The test.  ``privacy.n_draws`` outputs of each side of each audited pair, drawn by the code that
writes ``publish/`` (:func:`certdp.certify.publish.answers` in the target's raw units, or
:func:`certdp.certify.publish.release` for parameters) from seeded sources; events (thresholds,
intervals and their complements) chosen on the first half of the draws, bounded on the second
half with Clopper-Pearson (:func:`certdp.privacy.empirical.epsilon_lower_bound`; delta subtracted
for the approximate releases).  alpha is split (Bonferroni) over every test of the run: for each
release its (at most ``dpaudit.pairs``) audited pairs, the admissible pair and the noise check.
If every release is (eps, delta)-DP and publishes the noise its proof uses, the run is flagged
with probability at most ``dpaudit.alpha``; a flag is a violation (exit status 1).  The exact loss of each audited statistic is reported beside
it and an exact loss above the claim is a violation too (no sampling error: the documented
distributions of the two runs already break the claim); the empirical bound can approach the
exact loss but, when the implementation is right, not exceed it.

Units.  ``center_*`` and ``scale_*`` are in the units an observer sees (the target's raw units for
prediction releases; parameter units for AGS); ``sensitivity_*`` in model units.
"""

from __future__ import annotations

import itertools
import logging
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from certdp.certify import (Experiment, build_experiment, check_prediction_radii, global_sensitivity, nominal,
                            with_provenance)
from certdp.certify import publish
from certdp.errors import ConfigError
from certdp.methods.dpaudit.admissible import noise_check, worst_admissible
from certdp.methods.dpaudit.exact import FAMILY, choose, epsilon_exact, observed, score_pairs, side
from certdp.methods.dpaudit.search import Candidate, Datasets, candidates
from certdp.privacy.empirical import epsilon_lower_bound
from certdp.privacy.loss import Release1D, delta_of, pure_loss
from certdp.seeding import generator_for
from certdp.settings import ExperimentSettings

log = logging.getLogger("certdp")

CHUNK = 1_000_000          # draws per call of the publishing function (memory)
#: an exact loss above the claim by more than this (relative) is a violation: the exact eps(delta)
#: is an upper bracket to 1e-9 and the pure loss is exact up to rounding
EXACT_SLACK = 1e-6


# --------------------------------------------------------------------------- draws
def published(sd: dict, mech, n: int, source, *, center: float, sensitivity: float) -> np.ndarray:
    """n draws of one statistic of a release as ``publish/`` would hold it, from the function that
    publishes (:mod:`certdp.certify.publish`): the answer to one query in the target's raw units
    (prediction), or one coordinate of the parameter vector (the coordinates are drawn
    independently, so these are draws of that coordinate of the full release)."""
    out, done = [], 0
    c = np.array([center])
    while done < n:
        m = min(CHUNK, n - done)
        if sd["query"] == "prediction":
            raw, _ = publish.answers(sd["prep"], c, np.array([sensitivity]), mech, source, draws=m,
                                     output_range=sd["rng"])
        else:
            raw = publish.release(c, sensitivity, mech, source, draws=m).numpy()
        out.append(np.asarray(raw, dtype=np.float64).reshape(-1))
        done += m
    return np.concatenate(out)


# --------------------------------------------------------------------------- the command
def _finite(v: float) -> float:
    """A results cell: an infinite value (an open end of an event, an infinite pure loss of an
    unclipped Laplace pair with different scales) is written empty (NaN); results files hold no
    infinities."""
    return v if math.isfinite(v) else math.nan


def _experiment(settings: ExperimentSettings) -> Experiment:
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
    return exp


@dataclass
class Audit:
    """Everything the draws need, computed once (:func:`prepare`): the audited experiment D, its
    releases, the statistics searched, every candidate that released (``kept``, with its
    ``sides``), every one whose run was refused or failed (``refused``: candidate and why), and
    the neighbouring pairs of kept candidates."""
    settings: ExperimentSettings
    exp: Experiment
    mechs: list
    tests: list
    built: str
    kept: list[Candidate]
    sides: list[dict]
    refused: list[tuple[Candidate, str]]
    pairs: np.ndarray


def _why(err: BaseException) -> str:
    """What refused a candidate's run, without its message (which may quote records): the error's
    type and, for a refusal, the setting it names."""
    return f"{type(err).__name__} ({err.key})" if isinstance(err, ConfigError) else type(err).__name__


def prepare(settings: ExperimentSettings) -> Audit:
    """Build and certify every candidate dataset (refused before any training when the settings
    allow no audit)."""
    a = settings.dpaudit
    query = settings.privacy.query
    exp = _experiment(settings)
    mechs = list(settings.privacy.mechanisms(n_params=exp.model.n_params if query == "parameter" else None))
    data = Datasets(settings, exp)
    cands = candidates(settings, exp, data)
    if len(cands) > a.max_datasets:
        raise ConfigError("dpaudit.max_datasets", f"the neighbour search trains {len(cands)} datasets ("
                                                  f"{a.placements} placements + the configured record, "
                                                  f"{len(a.magnitudes)} magnitudes) > {a.max_datasets}; allowed: "
                                                  f"a larger dpaudit.max_datasets, or fewer dpaudit.placements or "
                                                  f"dpaudit.magnitudes")
    nominal(exp)                                   # a diverging run is refused before any certificate
    if query == "prediction":
        tests = sorted(set(range(min(a.queries, len(exp.yt)))) | {a.test_point})
    else:
        tests = list(range(exp.model.n_params))
    betas = sorted({float(m.beta) for m in mechs})
    log.info("dpaudit on %s (%s releases): N=%d, %d candidate datasets (%s), %d statistics, %d draws per side, "
             "confidence %.3g", exp.dataset.name, query, exp.n_train, len(cands),
             "neighbour search" if a.search else "the configured record", len(tests), settings.privacy.n_draws,
             1 - a.alpha)
    sides, kept, refused = [], [], []
    for c in cands:
        try:
            sides.append(side(data.build(c), query, betas, tests))
            kept.append(c)
        except Exception as err:                   # noqa: BLE001 - any failure on one side only is a finding
            if c.index is None:
                raise                              # D itself: the run is refused, as every release command
            refused.append((c, _why(err)))
            log.warning("dpaudit: the run on the candidate at index %d (%s, %s) was refused or failed while D's "
                        "released: %s: %s", c.index, c.record, c.placement, _why(err), err)
    by_index: dict[int, list[int]] = {}
    for k, c in enumerate(kept):
        if c.index is not None:
            by_index.setdefault(c.index, []).append(k)
    # neighbours: two candidates at the same index, or D and one of them
    pairs = np.array([pq for ids in by_index.values() for pq in itertools.combinations([0] + ids, 2)],
                     dtype=int).reshape(-1, 2)
    return Audit(settings, exp, mechs, tests, data.built, kept, sides, refused, pairs)


def run(settings: ExperimentSettings, *, progress: bool = True) -> dict[str, pd.DataFrame]:
    au = prepare(settings)
    rows = audit(au)
    out = with_provenance({"results": pd.DataFrame(rows)}, au.exp.dataset, device=au.exp.device)
    if any(r["violation"] for r in rows):
        log.error("dpaudit: a release breaks its claimed epsilon (rows with violation=true: %s)",
                  "; ".join(sorted({r["finding"] for r in rows if r["violation"]})))
        out["_exit_code"] = 1
    return out


def audit(au: Audit, *, seed: int | None = None) -> list[dict]:
    """The results rows of every release: its audited real pairs, the worst neighbour its
    certificate admits (with the noise check) and, where one candidate's run was refused or
    failed, the refusal.  ``seed``: of the draws (default: the run's seed)."""
    settings, a = au.settings, au.settings.dpaudit
    seed = settings.seed if seed is None else seed
    n = settings.privacy.n_draws
    rows = []
    for mech in au.mechs:
        obs = [observed(s, mech) for s in au.sides]
        ok = [bool(np.all(np.isfinite(o[1]) & (o[1] > 0))) for o in obs]
        if not ok[0]:
            raise ConfigError("privacy.releases", f"{mech.name} at eps={mech.epsilon:g} has a noise scale that "
                                                  f"is not finite and positive; allowed: settings whose "
                                                  f"certificates are finite (a smaller train.lr)")
        refused = au.refused + [(au.kept[k], "noise scale not finite") for k in range(len(obs)) if not ok[k]]
        pairs = au.pairs[[ok[p] and ok[q] for p, q in au.pairs]] if len(au.pairs) else au.pairs
        chosen = []
        if len(pairs):
            _exact, score = score_pairs(obs, pairs, mech)
            chosen = choose(score, obs, pairs, a.pairs) or [(0, 0)]
        # Bonferroni over every test of the run, fixed before any draw: per release its (at most
        # dpaudit.pairs) real pairs, the admissible pair and the noise check
        alpha_each = a.alpha / (len(au.mechs) * (a.pairs + 2))
        common = {"dataset": au.exp.dataset.name, "query": settings.privacy.query, "mechanism": mech.name,
                  "regime": mech.regime, "epsilon": mech.epsilon, "delta": float(mech.delta_spent),
                  "beta": float(mech.beta), "confidence": 1 - a.alpha, "alpha_pair": alpha_each,
                  "pairs_audited": len(chosen), "n_draws": n, "shift": a.shift, "neighbour": au.built,
                  "candidates": len(au.kept), "candidates_refused": len(refused), "pairs_scored": int(len(pairs)),
                  "certificate": au.exp.certificate_name, "smoothness_proof": au.exp.smoothness_proof,
                  "seed": settings.seed}
        release_rows = [_real_pair(au, mech, obs, pairs, row, st, rank, alpha_each, seed, common)
                        for rank, (row, st) in enumerate(chosen)]
        release_rows.append(_admissible_pair(au, mech, obs, alpha_each, seed, common, rank=len(chosen)))
        if refused:
            release_rows.append(_refusal(au, refused, common, rank=len(chosen) + 1))
        # the release's bound: the real pairs' (the admissible pair is no pair of datasets: its bound
        # tests the mechanism against its proof, not the release on data)
        top = max((r["epsilon_lower_bound"] for r in release_rows[:len(chosen)]), default=math.nan)
        for r in release_rows:
            r["release_lower_bound"] = top
        rows += release_rows
    return rows


def _verdict(row: dict, claim: float, *, exact: float) -> dict:
    """``violation`` and ``finding`` of a tested pair: its bound, or its exact loss, above the claim."""
    found = []
    if row["epsilon_lower_bound"] > claim * (1 + 1e-12):
        found.append("lower bound above the claim")
    if (math.isfinite(exact) and exact > claim * (1 + EXACT_SLACK)) or exact == math.inf:
        found.append("exact loss above the claim")
    if row.get("noise_below_claim"):
        found.append("published noise narrower than the proof's scale")
    row.update(violation=bool(found), finding="; ".join(found))
    return row


def _test(draws, mech, alpha_each, A: Release1D | None, B: Release1D | None) -> dict:
    """The lower bound from the draws of a pair and the exact loss of its statistic (A, B: the two
    documented distributions; None where the two output ranges differ)."""
    lb = epsilon_lower_bound(draws[0], draws[1], delta=float(mech.delta_spent), alpha=alpha_each)
    loss = eps_d = dlt = math.nan
    if A is not None:
        loss = float(pure_loss(A, B))
        eps_d = epsilon_exact(A, B, float(mech.delta_spent), float(mech.epsilon))
        if mech.delta_spent > 0:
            dlt = float(delta_of(A, B, float(mech.epsilon)))
    return {"epsilon_lower_bound": lb.epsilon, "event": lb.event, "event_lo": _finite(lb.lo),
            "event_hi": _finite(lb.hi), "threshold": lb.threshold, "k_a": lb.k_a, "n_a": lb.n_a, "k_b": lb.k_b,
            "n_b": lb.n_b, "statistic_epsilon": _finite(eps_d), "statistic_loss": _finite(loss),
            "statistic_delta": dlt, "_exact": eps_d, "_ends": (lb.lo, lb.hi)}


def _real_pair(au: Audit, mech, obs, pairs, row: int, st: int, rank: int, alpha_each: float, seed: int,
               common: dict) -> dict:
    beta = float(mech.beta)
    p, q = (int(v) for v in pairs[row])
    draws = []
    for side_no, k in enumerate((p, q)):
        sd = au.sides[k]
        source = generator_for(seed, "dpaudit", mech.name, mech.epsilon, rank, side_no)
        draws.append(published(sd, mech, common["n_draws"], source, center=float(sd["center"][st]),
                               sensitivity=float(sd["ss"][beta][st])))
    A = B = None
    if obs[p][2:] == obs[q][2:]:
        fam = FAMILY[mech.name]
        A = Release1D(fam, np.array(obs[p][0][st]), np.array(obs[p][1][st]), *obs[p][2:])
        B = Release1D(fam, np.array(obs[q][0][st]), np.array(obs[q][1][st]), *obs[q][2:])
    t = _test(draws, mech, alpha_each, A, B)
    exact, ends = t.pop("_exact"), t.pop("_ends")
    cp, cq = au.kept[p], au.kept[q]
    r = {**common, "pair_rank": rank + 1, **t,
         "center_D": float(obs[p][0][st]), "center_D_prime": float(obs[q][0][st]),
         "sensitivity_D": float(au.sides[p]["ss"][beta][st]), "sensitivity_D_prime": float(au.sides[q]["ss"][beta][st]),
         "scale_D": float(obs[p][1][st]), "scale_D_prime": float(obs[q][1][st]),
         "record": cq.index, "placement": cq.placement, "record_D": cp.record, "record_D_prime": cq.record,
         "search": cq.search if cp.index is None else f"{cp.search}+{cq.search}", "release_epsilon_exact": math.nan,
         **_stat(au, st)}
    r = _verdict(r, float(mech.epsilon), exact=exact)
    log.info("dpaudit %-10s eps=%-6g pair %d: lower bound %.4f (%s [%.4g, %.4g]; %d/%d vs %d/%d), exact eps of the "
             "statistic %s; record %d: %s vs %s%s", mech.name, mech.epsilon, rank + 1, t["epsilon_lower_bound"],
             t["event"], *ends, t["k_a"], t["n_a"], t["k_b"], t["n_b"],
             "n/a (the clipped ranges differ)" if A is None else f"{r['statistic_epsilon']:.4f}", cq.index, cp.record,
             cq.record, f"  VIOLATION ({r['finding']})" if r["violation"] else "")
    return r


def _stat(au: Audit, st: int) -> dict:
    q = au.settings.privacy.query
    return {"test_point": au.tests[st] if q == "prediction" else math.nan,
            "coordinate": st if q == "parameter" else math.nan}


def _admissible_pair(au: Audit, mech, obs, alpha_each: float, seed: int, common: dict, *, rank: int) -> dict:
    """D against the worst neighbour its certificate admits (:mod:`.admissible`), both drawn by the
    publishing code, and the noise check on D's draws."""
    sd, fam = au.sides[0], FAMILY[mech.name]
    beta = float(mech.beta)
    w = worst_admissible(sd, mech, fam)
    st = w["st"]
    draws = [published(sd, mech, common["n_draws"], generator_for(seed, "dpaudit", "admissible", mech.name,
                                                                  mech.epsilon, side_no),
                       center=c, sensitivity=s)
             for side_no, (c, s) in enumerate(((float(sd["center"][st]), float(sd["ss"][beta][st])),
                                               (w["center"], w["ss"])))]
    shift, mult = sd["raw"]
    lo, hi = obs[0][2], obs[0][3]
    A = Release1D(fam, obs[0][0][st], obs[0][1][st], lo, hi)
    B = Release1D(fam, np.array(shift + mult * w["center"]), np.array(mult * float(w["B"].scale)), lo, hi)
    t = _test(draws, mech, alpha_each, A, B)
    exact, _ends = t.pop("_exact"), t.pop("_ends")
    nc = noise_check(draws[0], center=float(A.center), scale=float(A.scale), lo=lo, hi=hi, fam=fam, alpha=alpha_each)
    r = {**common, "pair_rank": rank + 1, **t,
         "center_D": float(A.center), "center_D_prime": float(B.center), "sensitivity_D": float(sd["ss"][beta][st]),
         "sensitivity_D_prime": w["ss"], "scale_D": float(A.scale), "scale_D_prime": float(B.scale),
         "record": math.nan, "placement": "", "record_D": "original",
         "record_D_prime": "the worst neighbour the certificate admits", "search": "admissible",
         "release_epsilon_exact": _finite(w["release_epsilon"]), "noise_ratio": _finite(nc["ratio"]),
         "noise_ratio_upper": _finite(nc["ratio_upper"]), "noise_below_claim": nc["below"], **_stat(au, st)}
    if math.isfinite(w["release_epsilon"]):
        exact = max(exact, w["release_epsilon"])
    r = _verdict(r, float(mech.epsilon), exact=exact)
    log.info("dpaudit %-10s eps=%-6g worst admissible neighbour: lower bound %.4f, exact eps of the statistic %.4f%s; "
             "noise ratio %.4g (upper %.4g)%s", mech.name, mech.epsilon, t["epsilon_lower_bound"],
             r["statistic_epsilon"], "" if math.isnan(r["release_epsilon_exact"]) else
             f" (of the release {r['release_epsilon_exact']:.4f})", nc["ratio"], nc["ratio_upper"],
             f"  VIOLATION ({r['finding']})" if r["violation"] else "")
    return r


def _refusal(au: Audit, refused: list, common: dict, *, rank: int) -> dict:
    """A candidate whose run was refused or failed while D's released: the outcome depends on one
    record, an infinite privacy loss (no draw needed, no number: the bound columns stay empty)."""
    c, why = refused[0]
    return {**common, "pair_rank": rank + 1, "epsilon_lower_bound": math.nan, "event": "refused on D' only",
            "record": c.index, "placement": c.placement, "record_D": "original", "record_D_prime": c.record,
            "search": "refusal", "refusal": why, "violation": True,
            "finding": "the outcome depends on one record (refused or failed on D', released on D): an infinite "
                       "privacy loss"}
