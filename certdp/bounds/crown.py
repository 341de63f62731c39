"""Linear relaxations of the clipped per-sample gradients and of the whole step map (CROWN-style),
built to nest: every relaxation is inclusion-monotone in the parameter box and the step bound
satisfies (M1)-(M3) of certdp/privacy/sensitivity.py, so the smooth releases stay beta-smooth.
Each step bound is intersected with the IBP step (itself nesting), so it is never wider than IBP.

1. Single-layer heads (``widths = (d, C)``; losses ``mse`` and ``ce``): joint step bound
-----------------------------------------------------------------------------------------
Write the parameters as a matrix Theta [C, D] (row c = (W_c, b_c), D = d + 1) and x~ = (x, 1).
The logits z_i = Theta x~_i are linear in theta and each z_ic depends on its own row of Theta, so
the range [zL, zU] of z_i over the box is exact (sign-split products).  The per-sample gradient is

    g_i,cj(theta) = clip(u_i,cj(theta), -gamma, gamma),     u_i,cj = phi_c(z_i) x~_ij,  phi = dl/dz.

(a) The loss gives an inclusion-monotone family of affine bounds of phi over a z-box and isotone
bounds on their extremes (:meth:`certdp.losses.Loss.grad_linear_bounds`): mse exact
(phi = 2(z - y)); softmax cross-entropy the mean-value form around the box centre, which is
inclusion-monotone although the centre moves (the derivation is in certdp/losses.py).  Sign
splitting the fixed x~_ij gives affine bounds lam_L(theta) <= u_i,cj(theta) <= lam_U(theta) and
isotone numbers lmin <= min_box lam_L, umax >= max_box lam_U.

(b) The clip is handled per (record, coordinate) by a rule that is itself monotone in the box
(a larger box never moves an entry to a tighter regime), separately for the two ends:

    lower L:  +gamma if the interval of u lies above gamma (surely clipped);
              min(lam_L, gamma) if lmin >= -gamma (then u >= -gamma, so clip(u) = min(u, gamma));
              the constant clip(lmin) otherwise;
    upper U:  -gamma if the interval of u lies below -gamma;  max(lam_U, -gamma) if umax <= gamma;
              the constant clip(umax) otherwise.

Monotone family: for boxes B inside B' and theta in B, L(theta; B') <= L(theta; B) (mirror for U).
The surely-clipped test uses isotone intervals and the other tests isotone numbers, so from B to
B' an entry only moves from "+gamma" to anything, or from "min(lam_L, gamma)" to the constant;
min(lam_L(.; B'), gamma) <= min(lam_L(.; B), gamma) by (a), and the constant clip(lmin(B')) is
-gamma there (lmin(B') < -gamma) while min(lam_L, gamma) >= -gamma on B.  Also -gamma <= L <= U <=
gamma, L is concave and U convex in theta (affine lam's), and a point box is exact.  For MSE
lam_L = lam_U = u itself, box-independent: the regimes are its exact function wherever the
range does not cross the opposite threshold (a range straddling only +gamma keeps min(u, gamma)
exactly, tighter than any chord); a range straddling -gamma takes the constant -gamma for L,
because a concave minorant of clip that is >= -gamma there is constant (the parallel-chord
relaxation is tighter but not monotone in its interval, which broke smoothness).
Records whose features exceed :data:`X_CAP` in absolute value (or labels :data:`Y_CAP`) take the
constants: a rule on the record alone, so still monotone, and it bounds the rounding (below).

(c) Step map with at most k substitutions in a batch of b (s = lr / b):

    theta'_q = lam theta_q - s (sum_{retained} g_iq + sum_{substituted} s_q)
             <= lam theta_q - s SEMin_{b-k}(L_.q(theta)) + s k gamma
              = lam theta_q - s sum_i L_iq(theta) + s top_k(L_iq(theta) + gamma),

which is convex in theta (L concave; SEMin of concave maps is concave), so its maximum over the
box is attained at a vertex.  *Coupled*: the exact maximum over the 2^P vertices (used when
2^P * b * P is small, e.g. linear regression); *flat*: top_k(L + gamma) <= 2 k gamma, a
record-independent charge, L replaced by its chord over [lmin, umax] (below a concave function;
chords of a fixed concave function over growing intervals only move down, so still monotone),
and the maximum of the affine remainder over the box by signs.  Both
nest (M2): the substituted record's own L_j (>= -gamma) is either among the top k at D or paid by
the extra gamma + gamma of radius k + 1 at D'; every retained record's L only decreases on the
larger box.  A charge that depends on the substituted record (max_box L_j + gamma) does not nest.
The lower end is the mirror image.  The intersection with the IBP step keeps (M1)-(M3).

Hinge heads: the only monotone family we have for the step a(m) = 1[m < 1] is its interval
constant, with which the joint step is exactly IBP's top-k step; ``crown`` computes that.

2. One-hidden-layer MSE networks ``(d, H, 1)``: exact per-sample gradient ranges
--------------------------------------------------------------------------------
For f = sum_h w_h relu(z_h) + b2 with z_h = W1_h . x + b1_h, the groups (W1_h, b1_h), w_h = W2_h
and the rest r_h = f - w_h a_h (which depends on the other groups and b2 only) are
*independent* over a parameter box, with exact ranges a_h in [aL, aU] (>= 0), w in [wL, wU] and
r_h in [fL - tL_h, fU - tU_h] (t_h = w_h a_h has an exact range, and sums of independent terms
have exact ranges).  With c = r_h - y:

    dL/dW2_h = 2 a (w a + c)    -- affine in (w, c), quadratic in a: extremes at the corners of
                                   (w, c) and a in {aL, aU, clamp(-c / 2w)};
    dL/db1_h = 2 (w z + c) w  for z > 0, 0 for z <= 0 -- affine in (z, c), quadratic in w:
                                   corners of (z, c) with z in [max(zL, 0), zU] and
                                   w in {wL, wU, clamp(-c / 2z)}, plus 0 when zL <= 0;
    dL/dW1_hj = (dL/db1_h) x_j,  dL/db2 = 2 (f - y).

Evaluating every candidate gives the exact range (a superset only through the closure at z = 0),
at least as tight as IBP's products of intervals, and exact ranges are inclusion-monotone; the
rounding margins are relative to isotone magnitudes (max(|lo|, |hi|) of each range, which only
grows with the box), so they keep the monotonicity.  The batch is then aggregated as in IBP.

Other models (deeper stacks, hidden-layer hinge / cross-entropy) use the IBP bounds.

Rounding.  AGT widens radius index i by i * :meth:`CROWN.nesting_slack` per step.  On top of IBP's
slack (aggregation and update), the non-constant regimes evaluate affine functions at vertices and
form their coefficient sums: for a record with |x~| <= X_CAP, |y| <= Y_CAP and parameters within the trivial
cover (|theta| <= M), each value errs by at most ~ (P + 4) u X_CAP (D X_CAP M + Y_CAP + 4) (u =
2^-53); summed over the batch with weight s that is lr times this per step, data-independent.

Queries (``subs``, ``src``; see :mod:`certdp.bounds.base`): everything that depends on the box
alone (z ranges, regimes, coefficient matrices, vertex values) is computed once per box; every
query reads its top-k sums and combines them with its box's terms.
"""

from __future__ import annotations

import itertools

import torch

from certdp.bounds.aggregate import clipped_gd_step, top_sum
from certdp.bounds.base import Certificate, loss_rule
from certdp.bounds.crown_mlp import mlp1_gradient_bounds
from certdp.bounds.ibp import check_substitutions, gradient_bounds, gradient_topk_sums
from certdp.bounds.interval import Interval
from certdp.errors import ConfigError
from certdp.losses import MSE
from certdp.models import ModelSpec

# Non-constant regimes only for records with |x~| <= X_CAP and |y| <= Y_CAP: bounds the rounding of
# the affine evaluations by a data-independent amount (standardised data is far inside).
X_CAP = 16.0
Y_CAP = 1024.0
# The coupled (vertex) maximum when 2^P * b * P stays below this many elements per box.
COUPLED_ELEMENTS = 2 ** 22
COUPLED_MAX_PARAMS = 12
# Elements of the [boxes, vertices, b, P] temporaries handled at once (CPU; a CUDA device takes
# DEVICE_CHUNK_ELEMENTS: large kernels, and its memory budget is AGT's chunking).
CHUNK_ELEMENTS = 2 ** 23
DEVICE_CHUNK_ELEMENTS = 2 ** 27


def chunk_elements(device) -> int:
    """Elements of the step's [boxes, vertices, b, P] temporaries handled at once on ``device``."""
    return CHUNK_ELEMENTS if torch.device(device).type == "cpu" else DEVICE_CHUNK_ELEMENTS



def _coupled_mode(P: int, b: int) -> bool:
    """Whether the single-layer step takes the exact vertex maximum (small 2^P * b * P)."""
    return P <= COUPLED_MAX_PARAMS and (2 ** P) * b * P <= COUPLED_ELEMENTS


def _rows(t: torch.Tensor, src: torch.Tensor | None) -> torch.Tensor:
    return t if src is None else t[src]


def head_index(model: ModelSpec, device=None) -> torch.Tensor:
    """[C, D] flat-parameter index of (row c, input j) of a single-layer head (j = d: bias)."""
    d, C = model.widths
    idx = torch.empty(C, d + 1, dtype=torch.long, device=device)
    idx[:, :d] = torch.arange(C * d, device=device).view(C, d)
    idx[:, d] = C * d + torch.arange(C, device=device)
    return idx


def ibp_step(model: ModelSpec, boxes: Interval, x: torch.Tensor, y: torch.Tensor, *,
             subs: torch.Tensor, src: torch.Tensor | None = None, settings) -> Interval:
    """The IBP step with top-k aggregation (the intersection partner of every CROWN step), from
    the fused per-block sums (:func:`certdp.bounds.ibp.gradient_topk_sums`: the numbers of
    ``batch_sum(gradient_bounds(...))``)."""
    sums = gradient_topk_sums(model, boxes, x, y, subs=subs, src=src, clip=settings.clip)
    return clipped_gd_step(boxes, sums, src=src, settings=settings, b=x.shape[0])


def _caps(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """[n] records allowed the non-constant regimes (a rule on the record alone)."""
    ok = x.abs().amax(-1) <= X_CAP
    if y.dtype.is_floating_point:
        ok = ok & (y.abs() <= Y_CAP)
    return ok


def _relaxation(model: ModelSpec, TL: torch.Tensor, TU: torch.Tensor, xt: torch.Tensor, y: torch.Tensor,
                g: float, cap: torch.Tensor):
    """Per box [M] the relaxation of part 1 (a)-(b): the affine bounds lam_L, lam_U of u_i,cj in
    z_i as a coefficient [M, n, C(c), D(j), C(q)] on z_iq plus an offset [M, n, C, D] each, their
    isotone range [lmin, umax], the regime masks (lower: min(lam_L, gamma); upper:
    max(lam_U, -gamma)) and the constants elsewhere ([M, n, C, D] each)."""
    C = TL.shape[1]
    xp, xn = xt.clamp(min=0), xt.clamp(max=0)                              # [n, D]
    zl = torch.einsum("mcd,nd->mnc", TL, xp) + torch.einsum("mcd,nd->mnc", TU, xn)
    zu = torch.einsum("mcd,nd->mnc", TU, xp) + torch.einsum("mcd,nd->mnc", TL, xn)
    al, au, bl, bu, rl, ru = model.loss.grad_linear_bounds(zl, zu, y)
    if al.shape[-1] == 1 and C > 1:                                         # diagonal slopes
        eye = torch.eye(C, dtype=al.dtype, device=al.device)
        al, au = al * eye, au * eye
    ph_lo, ph_hi = model.loss.grad_bounds(zl, zu, y)                        # isotone interval of phi
    xp4, xn4 = xp.view(1, -1, 1, xp.shape[-1]), xn.view(1, -1, 1, xn.shape[-1])
    ul = ph_lo.unsqueeze(-1) * xp4 + ph_hi.unsqueeze(-1) * xn4              # interval of u [M, n, C, D]
    uu = ph_hi.unsqueeze(-1) * xp4 + ph_lo.unsqueeze(-1) * xn4
    lmin = rl.unsqueeze(-1) * xp4 + ru.unsqueeze(-1) * xn4                  # <= min_box lam_L
    umax = ru.unsqueeze(-1) * xp4 + rl.unsqueeze(-1) * xn4                  # >= max_box lam_U
    s_hi, s_lo = ul > g, uu < -g
    capm = cap.view(1, -1, 1, 1)
    reg_l = (lmin >= -g) & ~s_hi & capm
    reg_u = (umax <= g) & ~s_lo & capm
    const_l = torch.where(s_hi, g, lmin.clamp(-g, g))
    const_u = torch.where(s_lo, -g, umax.clamp(-g, g))
    xp5, xn5 = xp.view(1, -1, 1, xp.shape[-1], 1), xn.view(1, -1, 1, xn.shape[-1], 1)
    cl = xp5 * al.unsqueeze(-2) + xn5 * au.unsqueeze(-2)
    cu = xp5 * au.unsqueeze(-2) + xn5 * al.unsqueeze(-2)
    ol = xp4 * bl.unsqueeze(-1) + xn4 * bu.unsqueeze(-1)
    ou = xp4 * bu.unsqueeze(-1) + xn4 * bl.unsqueeze(-1)
    return cl, cu, ol, ou, lmin, umax, reg_l, reg_u, const_l, const_u


def _coupled(TL, TU, xt, rel, kk, src, lam, s, g):
    """Vertex maxima (part 1 (c), coupled) [Q, C, D] of the upper and lower step bounds."""
    cl, cu, ol, ou, _, _, reg_l, reg_u, const_l, const_u = rel
    M, C, D = TL.shape
    P = C * D
    verts = torch.tensor(list(itertools.product((0, 1), repeat=P)), dtype=torch.bool, device=TL.device).view(-1, C, D)
    th = torch.where(verts.unsqueeze(0), TU.unsqueeze(1), TL.unsqueeze(1))          # [M, V, C, D]
    z = torch.einsum("mvcd,nd->mvnc", th, xt)                                        # [M, V, n, C]
    Lv = (torch.einsum("mnjdq,mvnq->mvnjd", cl, z) + ol.unsqueeze(1)).clamp(max=g)  # min(lam_L, gamma)
    Uv = (torch.einsum("mnjdq,mvnq->mvnjd", cu, z) + ou.unsqueeze(1)).clamp(min=-g) # max(lam_U, -gamma)
    Lv = torch.where(reg_l.unsqueeze(1), Lv, const_l.unsqueeze(1)).flatten(-2)         # [M, V, n, P]
    Uv = torch.where(reg_u.unsqueeze(1), Uv, const_u.unsqueeze(1)).flatten(-2)
    top_l = top_sum(Lv + g, kk, src, largest=True, dim=2)                            # [Q, V, P]
    top_u = top_sum(g - Uv, kk, src, largest=True, dim=2)
    thf = _rows(th.flatten(-2), src)
    up = lam * thf - s * _rows(Lv.sum(2), src) + s * top_l
    dn = lam * thf - s * _rows(Uv.sum(2), src) - s * top_u
    return dn.amin(1).view(-1, C, D), up.amax(1).view(-1, C, D)


def _chords(a: torch.Tensor, b: torch.Tensor, g: float):
    """Slopes and intercepts (in t) of the chords over [a, b] of min(t, g) (below it: concave) and
    of max(t, -g) (above it: convex).  Chords of a fixed concave (convex) function over growing
    intervals only move down (up) on the smaller interval: an inclusion-monotone family."""
    w = (b - a).clamp(min=1e-300)
    sl = torch.where(b <= g, torch.ones_like(a), ((g - a) / w).clamp(0, 1))
    il = a.clamp(max=g) - sl * a
    su = torch.where(a >= -g, torch.ones_like(a), ((b.clamp(min=-g) + g) / w).clamp(0, 1))
    iu = -g - su * a
    iu = torch.where(a >= -g, torch.zeros_like(a), iu)
    return sl, il, su, iu


def _flat(TL, TU, xt, rel, kk, src, lam, s, g):
    """Flat-charge bounds (part 1 (c), flat) [Q, C, D]: the chords of min(lam_L, gamma) and
    max(lam_U, -gamma) over [lmin, umax] (affine in theta), the maximum of the affine remainder
    over the box by signs, plus 2 k gamma per substitution."""
    cl, cu, ol, ou, lmin, umax, reg_l, reg_u, const_l, const_u = rel
    M, C, D = TL.shape
    P = C * D
    sl, il, su, iu = _chords(lmin, umax, g)
    sl = torch.where(reg_l, sl, torch.zeros_like(sl))
    su = torch.where(reg_u, su, torch.zeros_like(su))
    # sum_i L_i,cj(theta) = sum_{q,e} [sum_i sl cl_i,cjq x~_ie] Theta_qe + sum_i (sl ol + il | const)
    coef_l = torch.einsum("mncdq,ne->mcdqe", cl * sl.unsqueeze(-1), xt).reshape(M, P, P)
    coef_u = torch.einsum("mncdq,ne->mcdqe", cu * su.unsqueeze(-1), xt).reshape(M, P, P)
    off_l = torch.where(reg_l, sl * ol + il, const_l).sum(1).reshape(M, P)
    off_u = torch.where(reg_u, su * ou + iu, const_u).sum(1).reshape(M, P)
    eye = lam * torch.eye(P, dtype=TL.dtype, device=TL.device)
    tl, tu = TL.reshape(M, 1, P), TU.reshape(M, 1, P)
    mu = eye - s * coef_l                                                          # upper of theta'
    hi = (mu.clamp(min=0) * tu + mu.clamp(max=0) * tl).sum(-1) - s * off_l
    ml = eye - s * coef_u                                                          # lower of theta'
    lo = (ml.clamp(min=0) * tl + ml.clamp(max=0) * tu).sum(-1) - s * off_u
    charge = (2 * s * g) * kk.to(TL.dtype).unsqueeze(-1)
    return (_rows(lo, src) - charge).view(-1, C, D), (_rows(hi, src) + charge).view(-1, C, D)


def _meet(lo: torch.Tensor, hi: torch.Tensor, mag: torch.Tensor, settings) -> tuple[torch.Tensor, torch.Tensor]:
    """The intersection (lo, hi) of the IBP step and the joint bound, both sound up to their
    rounding: both contain the step of every point of the (non-empty) box on the batch itself, so
    they can cross only by rounding.  Data-independent rule: a crossing within the rounding
    allowance 1e-12 (mag + lr gamma) + 1e-14 (the order of AGT's outward widening of every step,
    which then contains both ends) keeps the two ends in order; a larger one is an unsound bound,
    an internal error, never silently swapped (for sound bounds it never happens, on any data)."""
    over = lo - hi
    tol = 1e-12 * (mag + settings.lr * settings.clip) + 1e-14
    if bool((over > tol).any()):
        raise ConfigError("certificate.name", f"internal error: the crown step's IBP and joint bounds cross by "
                          f"{float(over.max()):.3g}, beyond rounding: a bug in the engine, not a property of the "
                          f"data; allowed: certificate=ibp until it is fixed")
    return torch.minimum(lo, hi), torch.maximum(lo, hi)


def single_layer_step(model: ModelSpec, boxes: Interval, x: torch.Tensor, y: torch.Tensor, *,
                      subs: torch.Tensor, src: torch.Tensor | None = None, settings,
                      mode: str | None = None) -> Interval:
    """Joint bound [Q, P] of one clipped-GD step of a single-layer head per query (box ``src[q]``,
    at most ``subs[q]`` substitutions), intersected with the IBP step (module docstring, part 1).
    ``mode``: ``coupled`` | ``flat`` (default: coupled when the vertex tensors are small)."""
    rule = loss_rule(model.loss)
    if mode is None and rule.crown_coupled is not None and _coupled_mode(model.n_params, x.shape[0]):
        return rule.crown_coupled(model, boxes, x, y, subs=subs, src=src, settings=settings)
    ibp = ibp_step(model, boxes, x, y, subs=subs, src=src, settings=settings)
    if not rule.crown_joint:
        return ibp                     # interval constants: the joint step is the IBP step
    g, lam = settings.clip, settings.contraction
    n = x.shape[0]
    d, C = model.widths
    D = d + 1
    P = C * D
    dt = boxes.lo.dtype
    s = settings.lr / n
    dev = boxes.lo.device
    flat_idx = head_index(model, dev).reshape(-1)
    xt = torch.cat([x, torch.ones(n, 1, dtype=dt, device=dev)], 1)          # [n, D]
    TL, TU = boxes.lo[:, flat_idx].view(-1, C, D), boxes.hi[:, flat_idx].view(-1, C, D)
    if mode is None:
        mode = "coupled" if _coupled_mode(P, n) else "flat"
    kk = subs.to(dev).clamp(max=n).to(torch.long)
    Q = len(kk)
    own = torch.arange(Q, device=dev) if src is None else src.to(dev)
    cap = _caps(x, y)
    lo_cd = torch.empty(Q, C, D, dtype=dt, device=dev)
    hi_cd = torch.empty(Q, C, D, dtype=dt, device=dev)
    per_box = (2 ** P if mode == "coupled" else P) * n * P
    step = max(1, chunk_elements(dev) // max(per_box, 1))
    for a in range(0, Q, step):
        qs = torch.arange(a, min(Q, a + step), device=dev)
        boxes_q, inv = torch.unique(own[qs], return_inverse=True)
        TLb, TUb = TL[boxes_q], TU[boxes_q]
        rel = _relaxation(model, TLb, TUb, xt, y, g, cap)
        fn = _coupled if mode == "coupled" else _flat
        lo_q, hi_q = fn(TLb, TUb, xt, rel, kk[qs], inv, lam, s, g)
        lo_cd[qs], hi_cd[qs] = lo_q, hi_q
    lo_out = torch.empty(Q, boxes.lo.shape[1], dtype=dt, device=dev)
    hi_out = torch.empty(Q, boxes.lo.shape[1], dtype=dt, device=dev)
    lo_out[:, flat_idx], hi_out[:, flat_idx] = lo_cd.reshape(Q, P), hi_cd.reshape(Q, P)
    # rounding of the joint bound before it meets IBP's: relative to an isotone magnitude (the
    # box's largest |theta|), so the margin itself only grows with the box
    mag = torch.maximum(boxes.hi, -boxes.lo).amax(-1, keepdim=True)
    marg = 1e-13 * (_rows(mag, src) + settings.lr * g)
    lo = torch.maximum(ibp.lo, lo_out - marg)
    hi = torch.minimum(ibp.hi, hi_out + marg)
    # two sound bounds of a (near-)point can still cross by rounding: the rule of _meet
    return Interval(*_meet(lo, hi, _rows(mag, src), settings))


class CROWN(Certificate):
    """``certificate=crown``: joint linear step bounds for single-layer heads (mse, ce; hinge
    reduces to IBP), exact per-sample ranges for one-hidden-layer MSE networks, IBP otherwise;
    always intersected with IBP.  Every part is inclusion-monotone and nests (module docstring).

    Option ``substitutions``: ``per_epoch`` (default) runs the per-epoch ledger of
    :mod:`certdp.agt` wherever the batch plan has more than one batch per epoch; its step
    aggregates this engine's *per-sample* bounds (exact ranges for one-hidden-layer MSE networks,
    the interval bounds otherwise) as plain sums, so on single-layer heads the joint step above is
    used per batch (``per_batch``, and full batch) only.  The ledger nests with these bounds
    (inclusion-monotone per-sample bounds, certdp/agt.py)."""

    name = "crown"
    memory_factor = 8    # the single-layer step chunks its own [boxes, vertices, b, P] temporaries
    nesting_monotone = True
    options = ("substitutions",)

    def __init__(self, *, substitutions: str = "per_epoch"):
        self.substitutions = check_substitutions(substitutions)

    @staticmethod
    def _mlp1(model: ModelSpec) -> bool:
        return model.n_layers == 2 and isinstance(model.loss, MSE) and model.widths[-1] == 1

    def per_sample_gradient_bounds(self, model, theta, x, y, *, clip, out=None):
        if self._mlp1(model):
            return mlp1_gradient_bounds(model, theta, x, y, clip=clip, out=out)
        return gradient_bounds(model, theta, x, y, clip=clip, out=out)

    def batch_sum_bounds(self, model, boxes, batch, *, subs, src=None, clip):
        if self._mlp1(model):
            return super().batch_sum_bounds(model, boxes, batch, subs=subs, src=src, clip=clip)
        return gradient_topk_sums(model, boxes, *batch, subs=subs, src=src, clip=clip)

    def step_bounds(self, model, boxes, batch, *, subs, src=None, settings):
        if model.n_layers == 1:
            return single_layer_step(model, boxes, *batch, subs=subs, src=src, settings=settings)
        return super().step_bounds(model, boxes, batch, subs=subs, src=src, settings=settings)

    def nesting_slack(self, model, *, settings, b, k_max, magnitude, steps=1):
        """IBP's slack, plus for the joint single-layer step the rounding of its affine evaluations
        (module docstring, Rounding): each affine value at a vertex errs by at most ~ 8 u X (P^2 X M + Y),
        summed over the batch with weight lr / b; the flat form's coefficient sums add
        (b + P) u P X^2 M per record."""
        base = super().nesting_slack(model, settings=settings, b=b, k_max=k_max, magnitude=magnitude, steps=steps)
        if model.n_layers != 1 or not loss_rule(model.loss).crown_joint:
            return base
        u, P, M = 2.0 ** -53, model.n_params, magnitude
        per_value = 8 * u * X_CAP * (P * P * X_CAP * M + Y_CAP + 4)
        if not _coupled_mode(P, b):
            per_value += 2 * (b + P) * u * P * X_CAP * X_CAP * M
        return base + 4.0 * steps * float(settings.lr) * per_value
