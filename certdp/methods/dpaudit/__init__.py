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
no private record).  A candidate whose run is refused (a certificate that is not finite) is
counted (``candidates_refused``, the first reason in the log) and left out: that one private record
can make a run refuse or fail is a finding of its own (the run's outcome depends on the data), which
this command reports but does not turn into a number.

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

The test.  ``privacy.n_draws`` outputs of each side of each audited pair; events (thresholds,
intervals and their complements) chosen on the first half of the draws, bounded on the second
half with Clopper-Pearson at confidence 1 - alpha / pairs (Bonferroni over the audited pairs;
:func:`certdp.privacy.empirical.epsilon_lower_bound`; delta subtracted for the approximate
releases).  If the mechanism is (eps, delta)-DP, the largest of a release's bounds exceeds eps
with probability at most ``dpaudit.alpha``, so a bound above the claim is a violation (exit status
1).  The exact loss of each audited statistic is reported beside it; the empirical bound can
approach it but, when the implementation is right, not exceed it.

Units.  ``center_*`` and ``scale_*`` are in the units an observer sees (the target's raw units for
prediction releases; parameter units for AGS); ``sensitivity_*`` in model units.
"""

from __future__ import annotations

import itertools
import logging
import math

import numpy as np
import pandas as pd
import torch

from certdp import DTYPE
from certdp.certify import (Experiment, build_experiment, check_prediction_radii, global_sensitivity, nominal,
                            with_provenance)
from certdp.errors import ConfigError
from certdp.methods.dpaudit.exact import FAMILY, choose, epsilon_exact, observed, score_pairs, side
from certdp.methods.dpaudit.search import Datasets, candidates
from certdp.privacy.empirical import epsilon_lower_bound
from certdp.privacy.loss import Release1D, delta_of, pure_loss
from certdp.seeding import generator_for
from certdp.settings import ExperimentSettings

log = logging.getLogger("certdp")

CHUNK = 1_000_000          # draws per sampling call (memory)


# --------------------------------------------------------------------------- draws
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


def run(settings: ExperimentSettings, *, progress: bool = True) -> dict[str, pd.DataFrame]:
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
        except (ConfigError, ValueError) as err:
            # ValueError: a crossed interval caught by the debug checks (CERTDP_DEBUG) of an engine
            if c.index is None:
                raise                              # D itself: the run is refused, as every release command
            refused.append((c, err))
    if refused:
        log.warning("dpaudit: %d of %d candidate datasets were refused and left out (first: index %s, %s: %s)",
                    len(refused), len(cands), refused[0][0].index, refused[0][0].record, refused[0][1])
    by_index: dict[int, list[int]] = {}
    for k, c in enumerate(kept):
        if c.index is not None:
            by_index.setdefault(c.index, []).append(k)
    # neighbours: two candidates at the same index, or D and one of them
    pairs = np.array([pq for ids in by_index.values() for pq in itertools.combinations([0] + ids, 2)],
                     dtype=int).reshape(-1, 2)
    if len(pairs) == 0:
        raise ConfigError("dpaudit.record", "every candidate neighbour was refused; allowed: settings whose "
                                            "certificates are finite on the neighbours (a smaller train.lr)")
    n = settings.privacy.n_draws
    rows, violated = [], False
    for mech in mechs:
        obs = [observed(s, mech) for s in sides]
        for o in obs:
            if not np.all(np.isfinite(o[1]) & (o[1] > 0)):
                raise ConfigError("privacy.releases", f"{mech.name} at eps={mech.epsilon:g} has a noise scale that "
                                                      f"is not finite and positive; allowed: settings whose "
                                                      f"certificates are finite (a smaller train.lr)")
        _exact, score = score_pairs(obs, pairs, mech)
        chosen = choose(score, obs, pairs, a.pairs)
        if not chosen:                             # every pair releases the same distribution
            chosen = [(0, 0)]
        alpha_each = a.alpha / len(chosen)
        delta = float(mech.delta_spent)
        fam = FAMILY[mech.name]
        release_rows = []
        for rank, (row, st) in enumerate(chosen):
            p, q = (int(v) for v in pairs[row])
            pair_obs = [obs[p], obs[q]]
            draws = []
            for side_no, k in enumerate((p, q)):
                sd = sides[k]
                gen = generator_for(settings.seed, "dpaudit", mech.name, mech.epsilon, rank, side_no)
                shift_, mult = sd["raw"]             # what an observer sees: the released value in raw units
                sc_model = float(mech.scale(torch.tensor(sd["ss"][float(mech.beta)][st], dtype=DTYPE)))
                draws.append(shift_ + mult * _draw(mech, float(sd["center"][st]), sc_model, n, gen, sd["rng"]))
            lb = epsilon_lower_bound(draws[0], draws[1], delta=delta, alpha=alpha_each)
            same_range = pair_obs[0][2:] == pair_obs[1][2:]
            loss = eps_d = dlt = math.nan
            if same_range:
                A = Release1D(fam, np.array(pair_obs[0][0][st]), np.array(pair_obs[0][1][st]), *pair_obs[0][2:])
                B = Release1D(fam, np.array(pair_obs[1][0][st]), np.array(pair_obs[1][1][st]), *pair_obs[1][2:])
                loss = float(pure_loss(A, B))
                eps_d = epsilon_exact(A, B, delta, float(mech.epsilon))
                if delta > 0:
                    dlt = float(delta_of(A, B, float(mech.epsilon)))
            viol = lb.epsilon > mech.epsilon * (1 + 1e-12)
            violated |= viol
            cp, cq = kept[p], kept[q]
            release_rows.append({
                "dataset": exp.dataset.name, "query": query, "mechanism": mech.name, "regime": mech.regime,
                "epsilon": mech.epsilon, "delta": delta, "beta": float(mech.beta),
                "epsilon_lower_bound": lb.epsilon, "confidence": 1 - a.alpha, "alpha_pair": alpha_each,
                "pairs_audited": len(chosen), "pair_rank": rank + 1, "n_draws": n,
                "event": lb.event, "event_lo": _finite(lb.lo), "event_hi": _finite(lb.hi), "threshold": lb.threshold,
                "k_a": lb.k_a, "n_a": lb.n_a, "k_b": lb.k_b, "n_b": lb.n_b, "violation": viol,
                "statistic_epsilon": _finite(eps_d), "statistic_loss": _finite(loss), "statistic_delta": dlt,
                "center_D": float(pair_obs[0][0][st]), "center_D_prime": float(pair_obs[1][0][st]),
                "sensitivity_D": float(sides[p]["ss"][float(mech.beta)][st]),
                "sensitivity_D_prime": float(sides[q]["ss"][float(mech.beta)][st]),
                "scale_D": float(pair_obs[0][1][st]), "scale_D_prime": float(pair_obs[1][1][st]),
                "record": cq.index, "placement": cq.placement, "record_D": cp.record, "record_D_prime": cq.record,
                "search": cq.search if cp.index is None else f"{cp.search}+{cq.search}", "shift": a.shift,
                "neighbour": data.built, "candidates": len(kept), "candidates_refused": len(refused),
                "pairs_scored": int(len(pairs)),
                "test_point": tests[st] if query == "prediction" else math.nan,
                "coordinate": st if query == "parameter" else math.nan,
                "certificate": exp.certificate_name, "smoothness_proof": exp.smoothness_proof,
                "seed": settings.seed})
            log.info("dpaudit %-10s eps=%-6g pair %d: lower bound %.4f (%s [%.4g, %.4g]; %d/%d vs %d/%d), exact "
                     "eps of the statistic %s; record %d: %s vs %s%s", mech.name, mech.epsilon, rank + 1,
                     lb.epsilon, lb.event, lb.lo, lb.hi, lb.k_a, lb.n_a, lb.k_b, lb.n_b,
                     f"{eps_d:.4f}" if same_range else "n/a (the clipped ranges differ)", cq.index, cp.record,
                     cq.record, "  VIOLATION" if viol else "")
        top = max(r["epsilon_lower_bound"] for r in release_rows)
        for r in release_rows:
            r["release_lower_bound"] = top
        rows += release_rows
    out = with_provenance({"results": pd.DataFrame(rows)}, exp.dataset, device=exp.device)
    if violated:
        log.error("dpaudit: the empirical lower bound exceeds the claimed epsilon")
        out["_exit_code"] = 1
    return out
