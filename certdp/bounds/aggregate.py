"""From per-sample clipped-gradient bounds to bounds on the batch sum under substitutions, and the
clipped-GD step: the one aggregation every engine uses.

A batch of b records of which at most k are substituted (any records, any labels) has its sum of
clipped gradients in

    [ SEMin_{b-k}(l) - k*gamma ,  SEMax_{b-k}(u) + k*gamma ]                 (k < b)

where [l_i, u_i] bound the clipped gradient of record i over a parameter box, SEMin_{b-k} is the
sum of the b-k smallest lower bounds (= sum(l) - top_k(l)) and SEMax_{b-k} the sum of the b-k
largest upper bounds (= sum(u) - bottom_k(u)): the substituted records contribute clipped
gradients in [-gamma, gamma] and the retained ones at least their lower bounds.  Fewer
substitutions k' < k only raise the lower end (each extra removal drops a value >= -gamma and
adds -gamma), so the bound for k also holds for every k' <= k, k' = 0 included.  For k >= b
the same formula (with k clamped to b) gives [-b*gamma, b*gamma] up to rounding.

Queries: the bounds are computed once per box ``m`` (the leading axis of the per-sample
bounds) and read by every query ``q = (src[q], subs[q])``: one partial sort (``topk`` of the
largest requested k) and one cumulative sum per box and coordinate, then a gather.  ``src=None``
pairs query q with box q.

``mode="tau"`` needs no sort: for a threshold tau <= gamma, the k records that leave can remove
at most Sigma_i (tau - u_i)^+ beyond k*tau from the sum of upper bounds, so

    SumU <= Sigma_i max(u_i, tau) - k*tau + k*gamma,     SumL >= Sigma_i min(l_i, sigma) - k*sigma - k*gamma

for tau <= gamma and sigma >= -gamma (equality with top-k when tau separates the k smallest
u_i from the others).  The bound is the minimum (maximum) over the fixed grid
tau = f*gamma, sigma = -f*gamma, f in :data:`TAU_FRACTIONS`, capped by +-b*gamma.  Unlike the
former "k times the extreme bound" (Sigma u - k min u + k gamma, not monotone in u: the minimum
enters with coefficient 1 - k), each member is non-decreasing in every u_i and nests (condition
(M2) of certdp/privacy/sensitivity.py): the substituted record's max(u_j, tau) <= gamma is paid
by the extra gamma - tau of radius k + 1, so a data-independent tau grid keeps the staircase
beta-smooth.  f = -1 (tau = -gamma) is Sigma u + 2k*gamma, exact when k records sit at -gamma
(heavily clipped batches); f = 0 charges the records' own positive parts.  Engines compute the
per-box sums without materialising the per-sample bounds (:func:`batch_sum_from_stats`).
"""

from __future__ import annotations

import torch

from certdp.bounds.interval import Interval

MODES = ("topk", "tau")
# tau = f * gamma (upper sums), sigma = -f * gamma (lower sums): data-independent thresholds
TAU_FRACTIONS = (-1.0, -0.5, 0.0, 0.5)


def _rows(t: torch.Tensor, src: torch.Tensor | None) -> torch.Tensor:
    return t if src is None else t[src]


def top_sum(v: torch.Tensor, subs: torch.Tensor, src: torch.Tensor | None = None, *, largest: bool,
            dim: int = -1, cap: int | None = None) -> torch.Tensor:
    """Sum of the ``subs[q]`` largest (``largest=False``: smallest) entries of ``v[src[q]]`` along
    ``dim`` (not 0, the box axis): [Q, *rest] for ``v`` [M, ...] and ``subs``, ``src`` [Q].

    ``cap``: sort only the ``cap`` extreme entries; each further one is bounded by the cap-th
    (an over-estimate for ``largest``, an under-estimate otherwise: sound for removing the top
    lower / bottom upper bounds, and exact when the entries beyond the cap are equal)."""
    dim = dim % v.dim()
    kmin, kmax = (int(t) for t in torch.aminmax(subs))
    if cap is not None:
        kmax = min(kmax, int(cap))
    if kmax == 0:
        return torch.zeros(len(subs), *[s for i, s in enumerate(v.shape) if i not in (0, dim)], dtype=v.dtype)
    vals = torch.topk(v, kmax, dim=dim, largest=largest, sorted=True).values
    cs = vals.cumsum_(dim) if cap is None else vals.cumsum(dim)      # the cap reads vals below
    idx = (subs if cap is None else subs.clamp(max=kmax)) - 1
    if kmin <= 0:
        idx = idx.clamp(min=0)
    if src is None:
        shape = list(cs.shape)
        shape[dim] = 1
        out = cs.gather(dim, idx.view(-1, *[1] * (cs.dim() - 1)).expand(shape)).squeeze(dim)
    else:
        out = cs.movedim(dim, 1)[src, idx]
    if cap is not None:
        ext = (subs - kmax).clamp(min=0).to(v.dtype).view(-1, *[1] * (out.dim() - 1))
        out = out + ext * _rows(vals.select(dim, kmax - 1), src)
    if kmin <= 0:
        out = out.masked_fill((subs <= 0).view(-1, *[1] * (out.dim() - 1)), 0.0)
    return out


def tau_sums(lo: torch.Tensor, hi: torch.Tensor, *, clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-box sums over the samples (last axis) of per-sample bounds [..., b]: (Sigma_i min(l_i,
    sigma_f), Sigma_i max(u_i, tau_f)) for every f in :data:`TAU_FRACTIONS`, each [..., F]."""
    ls = torch.stack([lo.clamp(max=-f * clip).sum(-1) for f in TAU_FRACTIONS], -1)
    hs = torch.stack([hi.clamp(min=f * clip).sum(-1) for f in TAU_FRACTIONS], -1)
    return ls, hs


def batch_sum_from_stats(stats, *, subs: torch.Tensor, src: torch.Tensor | None = None,
                         clip: float, b: int) -> Interval:
    """``mode="tau"`` batch-sum bounds [Q, P] from the per-box sums of :func:`tau_sums` ([M, P, F]
    each): min over the grid of Sigma max(u_i, tau) - k tau + k gamma (and the mirror image),
    capped by +-b gamma."""
    ls, hs = (_rows(t, src) for t in stats)
    f = torch.tensor(TAU_FRACTIONS, dtype=ls.dtype) * clip                  # tau grid [F]
    kf = subs.clamp(max=b).to(ls.dtype).view(-1, 1, 1)
    kg = kf.squeeze(-1) * clip
    hi = (hs - kf * f).amin(-1) + kg                 # Sigma max(u, tau) - k tau + k gamma
    lo = (ls + kf * f).amax(-1) - kg                 # Sigma min(l, sigma) - k sigma - k gamma, sigma = -tau
    bg = b * clip
    return Interval(lo.clamp(min=-bg), hi.clamp(max=bg))


def batch_sum(g: Interval, *, subs: torch.Tensor, src: torch.Tensor | None = None, clip: float,
              mode: str = "topk") -> Interval:
    """Bounds [Q, P] on the batch sum of clipped gradients when at most ``subs[q]`` records are
    substituted, from per-sample intervals ``g`` [M, P, b] valid on box ``src[q]``."""
    b = g.lo.shape[-1]
    if mode == "tau":
        return batch_sum_from_stats(tau_sums(g.lo, g.hi, clip=clip), subs=subs, src=src, clip=clip, b=b)
    kk = subs.clamp(max=b)
    lo_sum, hi_sum = _rows(g.lo.sum(-1), src), _rows(g.hi.sum(-1), src)
    rm_lo = top_sum(g.lo, kk, src, largest=True)      # top-k lower bounds leave the sum
    rm_hi = top_sum(g.hi, kk, src, largest=False)     # bottom-k upper bounds leave the sum
    kg = (kk.to(lo_sum.dtype) * clip).unsqueeze(-1)
    return Interval(lo_sum - rm_lo - kg, hi_sum - rm_hi + kg)


def clipped_gd_step(boxes: Interval, sums: Interval, *, src: torch.Tensor | None = None,
                    settings, b: int) -> Interval:
    """theta' = lam * theta - (lr / b) * S over box ``src[q]`` and batch sum S in ``sums[q]``:
    the lower end pairs the box's lower end with the sum's upper end, and vice versa."""
    lam, lr = settings.contraction, settings.lr
    return Interval(lam * _rows(boxes.lo, src) - (lr / b) * sums.hi,
                    lam * _rows(boxes.hi, src) - (lr / b) * sums.lo)
