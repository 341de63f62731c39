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


# Shared-candidate top-k (:func:`top_values`): used when the values hold at least this many boxes,
# at least this many entries are selected (below it a partial sort costs about what the two extra
# passes cost; measured on 2 cores) and the candidates are at most this fraction of the samples.
CANDIDATE_MIN_BOXES = 2
CANDIDATE_MIN_K = 64
CANDIDATE_MAX_FRACTION = 0.25


def _candidate_index(v: torch.Tensor, kmax: int, largest: bool,
                     bounds: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor | None:
    """Indices [C, W] (``-1`` pads) of candidate samples per column for the ``kmax`` largest
    (smallest) entries along the last axis of ``v`` [M, C, n] in every box m, or None when they
    are not few (or a NaN makes the order undefined).

    With ``lo_i = min_m v[m, c, i]`` and ``hi_i = max_m`` (the computed values themselves, no
    rounding argument), let S be the kmax samples of largest ``lo`` and tau the smallest ``lo``
    in S.  Every box has kmax entries >= tau (those of S); a sample outside S with ``hi_i <= tau``
    is <= tau in every box, so it is at most the kmax-th largest entry of the box among
    S + {i : hi_i > tau}.  Hence the kmax largest entries of every box, as a multiset, and their
    sorted sequence (ties are equal values) are the same over the candidates as over all samples:
    sums read from them are bit-identical.  (Mirror image for the smallest.)  ``bounds``: any
    (lo, hi) [C, n] with lo <= v[m] <= hi for every box m, exactly for the computed values (the
    caller's cheaper bounds instead of the two passes over v)."""
    n = v.shape[-1]
    lo, hi = (v.amin(0), v.amax(0)) if bounds is None else bounds     # [C, n]
    if bool(torch.isnan(lo).any()):             # amin propagates NaN: the order is undefined
        return None
    if largest:
        top = torch.topk(lo, kmax, dim=-1, largest=True, sorted=False)
        tau = top.values.amin(-1, keepdim=True)
        mark = hi > tau
    else:
        top = torch.topk(hi, kmax, dim=-1, largest=False, sorted=False)
        tau = top.values.amax(-1, keepdim=True)
        mark = lo < tau
    mark.scatter_(-1, top.indices, True)
    counts = mark.sum(-1)
    width = int(counts.max())
    if width > CANDIDATE_MAX_FRACTION * n:
        return None
    col, pos = mark.nonzero(as_tuple=True)                             # row-major: columns ascending
    start = torch.cumsum(counts, 0) - counts
    slot = torch.arange(col.numel(), device=v.device) - start[col]
    idx = torch.full((v.shape[1], width), -1, dtype=torch.long, device=v.device)
    idx[col, slot] = pos
    return idx


def top_values(v: torch.Tensor, kmax: int, *, largest: bool, dim: int = -1,
               bounds: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """``torch.topk(v, kmax, dim, largest, sorted=True).values``, bit for bit, computed on shared
    candidates when ``v`` holds several boxes (axis 0) whose extreme entries are few
    (:func:`_candidate_index`): one aminmax pass and a top-k over the candidates instead of a
    top-k over all samples of every box.  ``bounds`` (each broadcastable to ``v[0]`` with the
    sample axis moved last): exact bounds of the entries over the boxes (:func:`_candidate_index`)."""
    dim = dim % v.dim()
    n = v.shape[dim]
    if v.shape[0] < CANDIDATE_MIN_BOXES or dim == 0 or kmax < CANDIDATE_MIN_K or kmax * 8 > n:
        return torch.topk(v, kmax, dim=dim, largest=largest, sorted=True).values
    w = v.movedim(dim, -1)
    shape = w.shape
    flat = w.reshape(shape[0], -1, n)                                  # [M, C, n]
    if bounds is not None:
        bounds = tuple(b.expand(*shape[1:]).reshape(-1, n) for b in bounds)
    idx = _candidate_index(flat, kmax, largest, bounds)
    if idx is None:
        return torch.topk(v, kmax, dim=dim, largest=largest, sorted=True).values
    pad = idx < 0
    cand = flat.gather(-1, idx.clamp(min=0).unsqueeze(0).expand(shape[0], -1, -1))
    cand.masked_fill_(pad.unsqueeze(0), float("-inf") if largest else float("inf"))
    vals = torch.topk(cand, kmax, dim=-1, largest=largest, sorted=True).values
    return vals.reshape(*shape[:-1], kmax).movedim(-1, dim)


def top_sum(v: torch.Tensor, subs: torch.Tensor, src: torch.Tensor | None = None, *, largest: bool,
            dim: int = -1, cap: int | None = None, transform=None,
            bounds: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Sum of the ``subs[q]`` largest (``largest=False``: smallest) entries of ``v[src[q]]`` along
    ``dim`` (not 0, the box axis): [Q, *rest] for ``v`` [M, ...] and ``subs``, ``src`` [Q].

    ``cap``: sort only the ``cap`` extreme entries; each further one is bounded by the cap-th
    (an over-estimate for ``largest``, an under-estimate otherwise: sound for removing the top
    lower / bottom upper bounds, and exact when the entries beyond the cap are equal).
    ``transform``: an element-wise map applied to the selected entries before they are summed,
    monotone in the direction that keeps them the extreme ones (``lambda t: t + g`` with
    ``largest``, ``lambda t: g - t`` with ``largest=False``): the same numbers, bit for bit, as
    selecting from ``transform(v)`` with the matching direction, without forming it.
    ``bounds``: exact bounds of ``v`` over its boxes, for the shared candidates (:func:`top_values`)."""
    dim = dim % v.dim()
    kmin, kmax = (int(t) for t in torch.aminmax(subs))
    if cap is not None:
        kmax = min(kmax, int(cap))
    if kmax == 0:
        return torch.zeros(len(subs), *[s for i, s in enumerate(v.shape) if i not in (0, dim)], dtype=v.dtype,
                           device=v.device)
    vals = (top_values(v, kmax, largest=largest, dim=dim, bounds=bounds) if cap is None
            else torch.topk(v, kmax, dim=dim, largest=largest, sorted=True).values)
    if transform is not None:
        vals = transform(vals)
    cs = vals.cumsum_(dim) if cap is None else vals.cumsum(dim)      # the cap reads vals below
    subs = subs.to(v.device)
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
    f = torch.tensor(TAU_FRACTIONS, dtype=ls.dtype, device=ls.device) * clip   # tau grid [F]
    kf = subs.to(ls.device).clamp(max=b).to(ls.dtype).view(-1, 1, 1)
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
    kk = subs.to(g.lo.device).clamp(max=b)
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
