"""Which engines the smoothness proof covers, and an adversarial search for violations.

The proof (``privacy/sensitivity.py``) needs envelope nesting T_r(D) subset T_r'(D') for
neighbours and the next computed radius r'.  :func:`coverage` says, for a certificate object,
whether its step map is known to satisfy the proof's conditions (M1)-(M3), and why not;
:func:`require_covered` turns that into the one-line refusal of a smooth release.

:func:`search` looks for neighbouring pairs that violate S(D') <= e^beta S(D) (either direction)
for a given way of computing the staircase.  It is a falsification tool, not a proof: it
substitutes *extreme* records (huge features with every sign pattern, huge labels of both signs,
labels far outside the data at ordinary features, bias-only records) at the index the batch plan
uses most, compares *every* pair of datasets that differ there (all are neighbours of each other),
evaluates small beta too (where one staircase step between neighbours is most visible), and then
moves the records attaining the extremes (scaling features or labels, flipping signs).
:data:`POLICIES` are the values of ``privacy.smoothness`` (parsed by :mod:`certdp.settings`);
:func:`release_proof` implements them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from certdp.errors import ConfigError

SMALL_BETAS = (1e-3, 1e-2)


def coverage(cert) -> str | None:
    """None if the engine declares a nesting-monotone step map (``Certificate.nesting_monotone``,
    the conditions (M1)-(M3) of the proof in ``privacy/sensitivity.py``), else the reason."""
    if cert.nesting_monotone:
        return None
    return cert.nesting_refusal()[1]


def require_covered(cert) -> None:
    """Refuse a smooth-sensitivity release whose staircase the proof does not cover: one line
    naming the key to change (the engine's :meth:`~certdp.bounds.base.Certificate.nesting_refusal`)."""
    if cert.nesting_monotone:
        return
    key, why, allowed = cert.nesting_refusal()
    if allowed is None:
        from certdp.bounds import CERTIFICATES
        allowed = ", ".join(n for n, c in sorted(CERTIFICATES.items()) if c.nesting_monotone is True)
    raise ConfigError(key, f"smooth-sensitivity releases need a beta-smooth staircase, but {why}; "
                           f"allowed: {allowed} (or privacy.smoothness=unproven, no DP guarantee)")


POLICIES = ("proven", "unproven")


def release_proof(cert, policy: str) -> bool:
    """True when the staircase of ``cert`` is provably beta-smooth; False when it is not but
    ``policy`` is ``unproven``; otherwise the one-line refusal of :func:`require_covered`."""
    why = coverage(cert)
    if why is None:
        return True
    if policy == "unproven":
        import logging
        logging.getLogger("certdp").warning(
            "privacy.smoothness=unproven: %s, so the smooth releases of this run carry no DP guarantee", why)
        return False
    require_covered(cert)
    return True


# ----------------------------------------------------------------------------- search
@dataclass
class Candidate:
    index: int                 # substituted record
    x: torch.Tensor            # [d]
    y: torch.Tensor            # scalar (label / target)
    label: str


@dataclass
class SearchResult:
    """``excess``: the largest |ln S(D')/S(D)| - beta found (<= 0: no violation), with the
    pair (two replacement records at one index), test point and beta attaining it; ``worst_ratio[b]``: per beta, the largest
    max(S'/S, S/S') / e^beta; ``evaluations``: staircases computed on neighbours."""

    excess: float
    beta: float
    test_point: int
    pair: tuple                 # (record giving the larger S, record giving the smaller); None = the original
    worst_ratio: dict[float, float]
    evaluations: int


def batch_usage(plan: torch.Tensor, n: int) -> torch.Tensor:
    """How many batches each record index appears in ([n])."""
    return torch.bincount(plan.reshape(-1), minlength=n)


def substitution_indices(plan: torch.Tensor, n: int, count: int) -> list[int]:
    """The ``count`` indices the batch plan uses most (ties: spread over the index range)."""
    use = batch_usage(plan, n).to(torch.float64)
    spread = torch.linspace(0, 0.5, n, dtype=torch.float64)   # tie-break: early, then later indices
    order = torch.argsort(use - 1e-9 * spread.flip(0), descending=True).tolist()
    if count >= n:
        return order
    # most-used first; among equally used, take evenly spaced ones
    top = use[order[0]]
    tied = [i for i in order if use[i] == top]
    if len(tied) >= count:
        step = len(tied) / count
        return sorted(tied[int(j * step)] for j in range(count))
    return order[:count]


def extreme_records(x: torch.Tensor, y: torch.Tensor, *, loss: str, n_classes: int = 2,
                    gen: torch.Generator | None = None) -> list[tuple[torch.Tensor, torch.Tensor, str]]:
    """A pool of extreme replacement records (features [d], label) for a dataset (x [N, d], y)."""
    d = x.shape[1]
    dt = x.dtype
    xmax = float(x.abs().max()) + 1.0
    ymax = float(y.abs().max()) + 1.0 if loss == "mse" else 1.0
    gen = gen or torch.Generator().manual_seed(0)
    patterns = [torch.ones(d, dtype=dt), -torch.ones(d, dtype=dt)]
    if d > 1:
        alt = torch.tensor([(-1.0) ** i for i in range(d)], dtype=dt)
        patterns += [alt, -alt, torch.where(torch.rand(d, generator=gen) < 0.5, -1.0, 1.0).to(dt)]
    if loss == "mse":
        labels = [(f"y{sg}{m:g}", sign * m * ymax) for m in (3.0, 30.0, 1e3) for sg, sign in (("+", 1.0), ("-", -1.0))]
        labels.append(("y0", 0.0))
    elif loss == "hinge":
        labels = [("y+", 1.0), ("y-", -1.0)]
    else:
        labels = [(f"class{c}", float(c)) for c in range(n_classes)]
    out = []
    for mag_name, mag in (("x*0.3", 0.3 * xmax), ("x*10", 10.0 * xmax), ("x*1e3", 1e3 * xmax), ("x0", 0.0)):
        pats = patterns if mag > 0 else patterns[:1]
        for pi, p in enumerate(pats):
            for ln, lv in labels:
                out.append(((mag * p).clone(), torch.tensor(lv, dtype=y.dtype if y.dtype.is_floating_point else torch.float64),
                            f"{mag_name}/p{pi}/{ln}"))
    return out


def _substitute(x, y, c: Candidate):
    X, Y = x.clone(), y.clone()
    X[c.index] = c.x.to(X.dtype)
    Y[c.index] = c.y.to(Y.dtype)
    return X, Y


def search(staircase_of: Callable[[torch.Tensor, torch.Tensor], object], x: torch.Tensor, y: torch.Tensor,
           *, betas, plan: torch.Tensor, loss: str, n_classes: int = 2, budget: int = 64,
           n_indices: int = 1, seed: int = 0) -> SearchResult:
    """Adversarial search for a beta-smoothness violation of ``staircase_of`` around (x, y).

    ``staircase_of(x, y)`` returns the :class:`~certdp.privacy.sensitivity.Staircase` (one row per
    test point) that the release would use on that dataset.  Every dataset evaluated differs from
    (x, y) at most at one index, so all datasets that share that index (and (x, y) itself) are
    pairwise neighbours: ``budget`` evaluations compare about budget^2 / n_indices pairs.  About two
    thirds of the budget go to the pool of extreme records at the ``n_indices`` most-used indices,
    the rest to multiplicative moves of the records that attain the extremes."""
    if budget < 1:
        raise ConfigError("audit.smoothness", f"a search budget of {budget}; allowed: >= 1")
    bt = torch.as_tensor(sorted({float(b) for b in betas}), dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)

    def logs(X, Y):
        s = staircase_of(X, Y).smooth(bt)
        s = s.unsqueeze(0) if s.dim() == 1 else s                          # [n, B]
        return s.clamp(min=1e-300).log()

    base = logs(x, y)
    n = x.shape[0]
    idx = substitution_indices(plan, n, n_indices)
    pool = extreme_records(x, y, loss=loss, n_classes=n_classes, gen=gen)
    # most extreme first (largest label, then largest features), the rest in a seeded order, so
    # that a small budget already meets the records that move a certificate most
    shuffle = torch.rand(len(pool), generator=gen).tolist()
    perm = sorted(range(len(pool)), key=lambda p: (-round(math.log10(1.0 + abs(float(pool[p][1]))), 1),
                                                   -round(math.log10(1.0 + float(pool[p][0].abs().max())), 1),
                                                   shuffle[p]))
    # per index: running max / min of ln S over the datasets seen, and who attains them
    hi = {i: base.clone() for i in idx}
    lo = {i: base.clone() for i in idx}
    who_hi = {i: [[None] * len(bt) for _ in range(base.shape[0])] for i in idx}
    who_lo = {i: [[None] * len(bt) for _ in range(base.shape[0])] for i in idx}
    evals = 0

    def evaluate(c: Candidate):
        nonlocal evals
        X, Y = _substitute(x, y, c)
        ls = logs(X, Y)
        evals += 1
        up, down = ls > hi[c.index], ls < lo[c.index]
        for (t, b) in up.nonzero().tolist():
            who_hi[c.index][t][b] = c
        for (t, b) in down.nonzero().tolist():
            who_lo[c.index][t][b] = c
        hi[c.index] = torch.maximum(hi[c.index], ls)
        lo[c.index] = torch.minimum(lo[c.index], ls)

    def spread():
        """(excess [B] maximised over indices and test points, arg (index, test point) per beta)."""
        best = torch.full((len(bt),), -math.inf, dtype=torch.float64)
        arg = [(idx[0], 0)] * len(bt)
        for i in idx:
            ex = (hi[i] - lo[i]) - bt.unsqueeze(0)                          # [n, B]
            v, t = ex.max(0)
            for b in range(len(bt)):
                if float(v[b]) > float(best[b]):
                    best[b] = v[b]
                    arg[b] = (i, int(t[b]))
        return best, arg

    cands = [Candidate(i, pool[p][0], pool[p][1], pool[p][2]) for p in perm for i in idx]
    for c in cands[: min(len(cands), max(1, (2 * budget) // 3))]:
        evaluate(c)
    round_ = 0
    while evals < budget:
        ex, arg = spread()
        # cycle over the betas (a violation may show at one beta only), worst first
        order = torch.argsort(ex, descending=True).tolist()
        b = order[round_ % len(order)]
        round_ += 1
        i, t = arg[b]
        moved_any = False
        for c in (who_hi[i][t][b], who_lo[i][t][b]):
            if c is None or evals >= budget:
                continue
            move = int(torch.randint(4, (1,), generator=gen))
            f = 10.0 ** float(torch.empty(1).uniform_(-1.0, 1.0, generator=gen))
            if move == 0 or loss != "mse":
                new_c = Candidate(c.index, c.x * f, c.y, c.label + f"*x{f:.2g}")
            elif move == 1:
                new_c = Candidate(c.index, c.x, c.y * f, c.label + f"*y{f:.2g}")
            elif move == 2:
                new_c = Candidate(c.index, -c.x, c.y, c.label + "*-x")
            else:
                new_c = Candidate(c.index, c.x * f, c.y * f, c.label + f"*xy{f:.2g}")
            evaluate(new_c)
            moved_any = True
        if not moved_any:
            # nothing to refine at this beta: spend the evaluation on an unseen pool record
            rest = cands[min(len(cands), max(1, (2 * budget) // 3)) + round_:]
            if not rest:
                break
            evaluate(rest[0])
    ex, arg = spread()
    b = int(ex.argmax())
    i, t = arg[b]
    pair = (who_hi[i][t][b], who_lo[i][t][b])
    ratio = {float(bb): float(math.exp(float(w))) for bb, w in zip(bt.tolist(), ex.tolist())}
    return SearchResult(float(ex[b]), float(bt[b]), t, pair, ratio, evals)
