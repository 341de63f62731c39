"""The releases of one candidate dataset and the exact privacy loss of each pair of them (package
docstring): what ranks the pairs before any draw."""

from __future__ import annotations

import math

import numpy as np
import torch

from certdp import DTYPE
from certdp.certify import Experiment, certify_predictions, certify_window, global_sensitivity, trivial_cover
from certdp.errors import ConfigError
from certdp.privacy.loss import Release1D, delta_of, pure_loss

FAMILY = {"cauchy": "cauchy", "laplace": "laplace", "cauchy_p": "cauchy", "laplace_p": "laplace"}
#: eps grid of the approximate releases' exact eps(delta), relative to the claim: claim/1024 .. 128 claim
_EPS_STEPS = 2.0 ** (np.arange(-80, 57) / 8)
#: approximate releases: pairs ranked by the cheap pure loss first; exact eps(delta) for this many
_PRESCREEN = 256


def side(e: Experiment, query: str, betas, tests) -> dict:
    """The audited statistics of one dataset: centres [S] (model units), SS^beta [S] (prediction)
    or a scalar (parameter) for each beta, the output range (model units), the cap of every smooth
    bound (``cap``: the global sensitivity or the trivial cover; None without one), and what turns
    model units into what ``publish/`` holds (``prep``, the affine map ``raw``)."""
    if query == "prediction":
        _env, sc, pred, _ = certify_predictions(e)
        rng = e.dataset.output_range
        c = pred[tests].numpy()
        if rng is not None:
            c = np.clip(c, *rng)
        ss = {b: sc.smooth(b)[tests].numpy() for b in betas}
        prep = e.dataset.preprocessing
        prep = prep if prep is not None and prep.task == "regression" else None
        raw = (prep.target_shift, prep.target_scale) if prep is not None else (0.0, 1.0)
        gs = global_sensitivity(e)
        cap = None if gs is None else gs[tests].numpy()
    else:
        env, sc = certify_window(e, e.model.init(e.train.seed), (0, e.train.steps))
        c, rng, raw, prep = env.nominal.numpy(), None, (0.0, 1.0), None
        ss = {b: np.full(len(c), float(sc.smooth(b))) for b in betas}
        cap = np.full(len(c), trivial_cover(e.train, e.model.n_params, (0, e.train.steps)))
    if not (np.all(np.isfinite(c)) and all(np.all(np.isfinite(v)) for v in ss.values())):
        raise ConfigError("train.lr", "a centre or smooth bound of the audited release is not finite; allowed: "
                                      "settings whose certificates are finite (a smaller train.lr)")
    return {"query": query, "center": c, "ss": ss, "rng": rng, "raw": raw, "prep": prep, "cap": cap}


def observed(side: dict, mech) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Centres, scales [S] and the output range (lo, hi) in the units an observer sees."""
    shift, mult = side["raw"]
    ss = side["ss"][float(mech.beta)]
    scale = mult * np.asarray(mech.scale(torch.as_tensor(ss, dtype=DTYPE)), dtype=np.float64)
    lo, hi = (-math.inf, math.inf) if side["rng"] is None else (shift + mult * float(side["rng"][0]),
                                                                 shift + mult * float(side["rng"][1]))
    return shift + mult * side["center"], scale, lo, hi


# the largest grid epsilon whose e^epsilon the exact delta may form (float64 overflows at ~709.78)
MAX_GRID_EPSILON = 700.0


def _epsilon_at_delta(A: Release1D, B: Release1D, delta: float, claim: float) -> np.ndarray:
    """The least eps on the grid ``claim * _EPS_STEPS`` (and 0) with delta_of(A, B, eps) <= delta
    (an upper bracket of the exact eps(delta)); inf beyond the grid.  delta = 0: the pure loss.
    delta_of falls with eps, so every 8th grid point is tried first and the least one is then
    found between the last coarse point that failed and the first that held (per group)."""
    if delta == 0:
        return pure_loss(A, B)
    shape = np.broadcast(A.center, A.scale, B.center, B.scale).shape
    flat = [np.broadcast_to(v, shape).ravel() for v in (A.center, A.scale, B.center, B.scale)]

    def holds(idx, e):
        a = Release1D(A.family, flat[0][idx], flat[1][idx], A.lo, A.hi)
        b = Release1D(B.family, flat[2][idx], flat[3][idx], B.lo, B.hi)
        return delta_of(a, b, float(e)) <= delta

    every = np.arange(flat[0].size)
    out = np.where(holds(every, 0.0), 0.0, np.inf)
    # e^eps overflows float64 beyond ~709.78: grid points past MAX_GRID_EPSILON are "beyond the grid"
    grid = [float(e) for e in claim * _EPS_STEPS if e <= MAX_GRID_EPSILON]
    coarse = sorted(set(range(7, len(grid), 8)) | ({len(grid) - 1} if grid else set()))
    first = np.full(out.shape, -1)
    for k in coarse:
        need = np.flatnonzero(np.isinf(out) & (first < 0))
        if not need.size:
            break
        first[need[holds(need, grid[k])]] = k
    for k in np.unique(first[first >= 0]):
        todo = np.flatnonzero(first == k)
        below = max((c for c in coarse if c < k), default=-1)
        for j in range(below + 1, k + 1):
            if not todo.size:
                break
            ok = holds(todo, grid[j]) if j < k else np.ones(todo.size, dtype=bool)
            out[todo[ok]] = grid[j]
            todo = todo[~ok]
    return out.reshape(shape)


def epsilon_exact(A: Release1D, B: Release1D, delta: float, claim: float) -> float:
    """eps(delta) of one pair (scalar releases) to 1e-9 relative, by bisection on its grid bracket."""
    hi = float(_epsilon_at_delta(A, B, delta, claim))
    if delta == 0 or hi == 0 or not math.isfinite(hi):
        return hi
    lo = hi / 2.0 ** (1 / 8)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if float(delta_of(A, B, mid)) > delta else (lo, mid)
        if hi - lo <= 1e-9 * hi:
            break
    return hi


def score_pairs(obs: list[tuple], pairs: np.ndarray, mech) -> tuple[np.ndarray, np.ndarray]:
    """For every pair [n, 2] of dataset ids and every audited statistic [S]: the exact eps(delta)
    of the statistic (NaN where the two output ranges differ, or below the approximate releases'
    prescreen) and the ranking score (the exact value, or |c - c'| / min(s, s') + |ln(s / s')|
    where there is no closed form).  ``obs``: :func:`observed` of every dataset."""
    C = np.stack([o[0] for o in obs])
    Sc = np.stack([o[1] for o in obs])
    rngs = [(o[2], o[3]) for o in obs]
    fam, delta, claim = FAMILY[mech.name], float(mech.delta_spent), float(mech.epsilon)
    i, j = pairs[:, 0], pairs[:, 1]
    ci, cj, si, sj = C[i], C[j], Sc[i], Sc[j]
    proxy = np.abs(ci - cj) / np.minimum(si, sj) + np.abs(np.log(si / sj))
    exact = np.full(ci.shape, np.nan)
    same = np.array([rngs[p] == rngs[q] for p, q in pairs], dtype=bool)
    for rng in sorted({rngs[p] for p, q in pairs[same]}):
        rows = np.flatnonzero(same & np.array([rngs[p] == rng for p in i], dtype=bool))
        A = Release1D(fam, ci[rows], si[rows], *rng)
        B = Release1D(fam, cj[rows], sj[rows], *rng)
        if delta == 0:
            exact[rows] = pure_loss(A, B)
            continue
        # the cheap pure loss (or the proxy where it is infinite) ranks; eps(delta) for the best
        pl = pure_loss(A, B)
        rank = np.where(np.isfinite(pl), pl, proxy[rows])
        flat = np.argsort(-rank, axis=None, kind="stable")[:_PRESCREEN]
        r, s = np.unravel_index(flat, rank.shape)
        Ak = Release1D(fam, A.center[r, s], A.scale[r, s], *rng)
        Bk = Release1D(fam, B.center[r, s], B.scale[r, s], *rng)
        sub = np.full(rank.shape, np.nan)
        sub[r, s] = _epsilon_at_delta(Ak, Bk, delta, claim)
        exact[rows] = sub
    score = np.where(np.isfinite(exact) | np.isinf(exact), exact, np.where(same[:, None], -np.inf, proxy))
    return exact, score


def choose(score: np.ndarray, obs: list[tuple], pairs: np.ndarray, m: int) -> list[tuple[int, int]]:
    """The ``m`` (pair row, statistic) with the largest scores whose pairs of distributions differ
    (several candidates often train to the same release: extreme records saturate the clipping)."""
    best_s = np.argmax(score, axis=1)
    best = score[np.arange(len(pairs)), best_s]
    out, seen = [], set()
    for row in np.argsort(-best, kind="stable"):
        if not np.isfinite(best[row]) and best[row] != np.inf:
            break
        s = int(best_s[row])
        (c1, s1, *_), (c2, s2, *_) = obs[pairs[row, 0]], obs[pairs[row, 1]]
        key = (float(c1[s]), float(s1[s]), float(c2[s]), float(s2[s]))
        if key[:2] == key[2:] or key in seen:
            continue
        seen.update({key, key[2:] + key[:2]})
        out.append((int(row), s))
        if len(out) == m:
            break
    return out
