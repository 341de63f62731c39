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

(b) The clip is handled by a regime chosen per (record, coordinate) by a rule that is itself
monotone in the box (a larger box never moves an entry to a tighter regime):

    S  surely clipped: the interval of u lies above gamma (below -gamma): L = U = +gamma (-gamma);
    A  affine:         lmin >= -gamma and umax <= gamma (so g = u):       L = lam_L, U = lam_U;
    C  otherwise:      the constants L = clip(lmin), U = clip(umax).

Monotone family: for boxes B subset B' and theta in B, L(theta; B') <= L(theta; B) (mirror for U).
S is decided on isotone intervals, A on isotone numbers, so only the transitions S -> C, A -> C,
A -> A, C -> C (from B to B') occur; A -> A holds by (a); C -> C and A -> C because clip(lmin(B'))
<= lmin(B) <= lam_L(theta; B) and lam_L >= -gamma in A; S -> C because a surely clipped entry has
lmin(B') <= -gamma on the low side.  Also -gamma <= L <= U <= gamma, and a point box is exact.
Records whose features exceed :data:`X_CAP` in absolute value (or labels :data:`Y_CAP`) stay in S/C:
a rule on the record alone, so still monotone, and it bounds the rounding of regime A (below).

(c) Step map with at most k substitutions in a batch of b (s = lr / b):

    theta'_q = lam theta_q - s (sum_{retained} g_iq + sum_{substituted} s_q)
             <= lam theta_q - s SEMin_{b-k}(L_.q(theta)) + s k gamma
              = lam theta_q - s sum_i L_iq(theta) + s top_k(L_iq(theta) + gamma),

which is convex in theta (L affine or constant; SEMin of affine maps is concave), so its maximum
over the box is attained at a vertex.  *Coupled*: the exact maximum over the 2^P vertices (used
when 2^P * b * P is small, e.g. linear regression); *flat*: top_k(L + gamma) <= 2 k gamma, a
record-independent charge, and the maximum of the affine remainder over the box by signs.  Both
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
slack (aggregation and update), regime A evaluates affine functions at vertices and forms their
coefficient sums: for a record with |x~| <= X_CAP, |y| <= Y_CAP and parameters within the trivial
cover (|theta| <= M), each value errs by at most ~ (P + 4) u X_CAP (D X_CAP M + Y_CAP + 4) (u =
2^-53); summed over the batch with weight s that is lr times this per step, data-independent.

Queries (``subs``, ``src``; see :mod:`certdp.bounds.base`): everything that depends on the box
alone (z ranges, regimes, coefficient matrices, vertex values) is computed once per box; every
query reads its top-k sums and combines them with its box's terms.
"""

from __future__ import annotations

import itertools

import torch

from certdp.bounds.aggregate import batch_sum, clipped_gd_step, top_sum
from certdp.bounds.base import Certificate
from certdp.bounds.ibp import gradient_bounds
from certdp.bounds.interval import Interval
from certdp.losses import MSE, Hinge
from certdp.models import ModelSpec

# Regime A (affine) only for records with |x~| <= X_CAP and |y| <= Y_CAP: bounds the rounding of
# the affine evaluations by a data-independent amount (standardised data is far inside).
X_CAP = 16.0
Y_CAP = 1024.0
# The coupled (vertex) maximum when 2^P * b * P stays below this many elements per box.
COUPLED_ELEMENTS = 2 ** 22
COUPLED_MAX_PARAMS = 12
# Elements of the [boxes, vertices, b, P] temporaries handled at once.
CHUNK_ELEMENTS = 2 ** 23


def _coupled_mode(P: int, b: int) -> bool:
    """Whether the single-layer step takes the exact vertex maximum (small 2^P * b * P)."""
    return P <= COUPLED_MAX_PARAMS and (2 ** P) * b * P <= COUPLED_ELEMENTS


def _rows(t: torch.Tensor, src: torch.Tensor | None) -> torch.Tensor:
    return t if src is None else t[src]


def head_index(model: ModelSpec) -> torch.Tensor:
    """[C, D] flat-parameter index of (row c, input j) of a single-layer head (j = d: bias)."""
    d, C = model.widths
    idx = torch.empty(C, d + 1, dtype=torch.long)
    idx[:, :d] = torch.arange(C * d).view(C, d)
    idx[:, d] = C * d + torch.arange(C)
    return idx


def ibp_step(model: ModelSpec, boxes: Interval, x: torch.Tensor, y: torch.Tensor, *,
             subs: torch.Tensor, src: torch.Tensor | None = None, settings) -> Interval:
    """The IBP step with top-k aggregation (the intersection partner of every CROWN step)."""
    g = gradient_bounds(model, boxes, x, y, clip=settings.clip)
    sums = batch_sum(g, subs=subs, src=src, clip=settings.clip)
    return clipped_gd_step(boxes, sums, src=src, settings=settings, b=x.shape[0])


def _caps(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """[n] records allowed in regime A (a rule on the record alone)."""
    ok = x.abs().amax(-1) <= X_CAP
    if y.dtype.is_floating_point:
        ok = ok & (y.abs() <= Y_CAP)
    return ok


def _relaxation(model: ModelSpec, TL: torch.Tensor, TU: torch.Tensor, xt: torch.Tensor, y: torch.Tensor,
                g: float, cap: torch.Tensor):
    """Per box [M] the relaxation of part 1 (a)-(b): the slopes and offsets of the phi bounds
    (alpha_L, alpha_U [M|1, n, C, C]; beta_L, beta_U [M, n, C]), the regime-A mask and the
    constants of the other regimes ([M, n, C, D] each)."""
    C = TL.shape[1]
    xp, xn = xt.clamp(min=0), xt.clamp(max=0)                              # [n, D]
    zl = torch.einsum("mcd,nd->mnc", TL, xp) + torch.einsum("mcd,nd->mnc", TU, xn)
    zu = torch.einsum("mcd,nd->mnc", TU, xp) + torch.einsum("mcd,nd->mnc", TL, xn)
    al, au, bl, bu, rl, ru = model.loss.grad_linear_bounds(zl, zu, y)
    if al.shape[-1] == 1 and C > 1:                                         # diagonal slopes
        eye = torch.eye(C, dtype=al.dtype)
        al, au = al * eye, au * eye
    ph_lo, ph_hi = model.loss.grad_bounds(zl, zu, y)                        # isotone interval of phi
    xp4, xn4 = xp.view(1, -1, 1, xp.shape[-1]), xn.view(1, -1, 1, xn.shape[-1])
    ul = ph_lo.unsqueeze(-1) * xp4 + ph_hi.unsqueeze(-1) * xn4              # interval of u [M, n, C, D]
    uu = ph_hi.unsqueeze(-1) * xp4 + ph_lo.unsqueeze(-1) * xn4
    lmin = rl.unsqueeze(-1) * xp4 + ru.unsqueeze(-1) * xn4                  # <= min_box lam_L
    umax = ru.unsqueeze(-1) * xp4 + rl.unsqueeze(-1) * xn4                  # >= max_box lam_U
    s_hi, s_lo = ul > g, uu < -g
    sure = s_hi | s_lo
    aff = (lmin >= -g) & (umax <= g) & ~sure & cap.view(1, -1, 1, 1)
    const_l = torch.where(s_hi, g, torch.where(s_lo, -g, lmin.clamp(-g, g)))
    const_u = torch.where(s_hi, g, torch.where(s_lo, -g, umax.clamp(-g, g)))
    return al, au, bl, bu, aff, const_l, const_u


def _affine_parts(al, au, bl, bu, aff, xt):
    """Affine forms of lam_L, lam_U in z: coefficient [M, n, C(c), D(j), C(q)] on z_iq and offset
    [M, n, C, D], restricted to regime A (zero elsewhere)."""
    xp, xn = xt.clamp(min=0), xt.clamp(max=0)
    xp5, xn5 = xp.view(1, -1, 1, xp.shape[-1], 1), xn.view(1, -1, 1, xn.shape[-1], 1)
    a = aff.to(bl.dtype)
    cl = (xp5 * al.unsqueeze(-2) + xn5 * au.unsqueeze(-2)) * a.unsqueeze(-1)
    cu = (xp5 * au.unsqueeze(-2) + xn5 * al.unsqueeze(-2)) * a.unsqueeze(-1)
    ol = (xp.view(1, -1, 1, xp.shape[-1]) * bl.unsqueeze(-1) + xn.view(1, -1, 1, xn.shape[-1]) * bu.unsqueeze(-1)) * a
    ou = (xp.view(1, -1, 1, xp.shape[-1]) * bu.unsqueeze(-1) + xn.view(1, -1, 1, xn.shape[-1]) * bl.unsqueeze(-1)) * a
    return cl, cu, ol, ou


def _coupled(TL, TU, xt, cl, cu, ol, ou, aff, const_l, const_u, kk, src, lam, s, g):
    """Vertex maxima (part 1 (c), coupled) [Q, C, D] of the upper and lower step bounds."""
    M, C, D = TL.shape
    P = C * D
    verts = torch.tensor(list(itertools.product((0, 1), repeat=P)), dtype=torch.bool).view(-1, C, D)
    th = torch.where(verts.unsqueeze(0), TU.unsqueeze(1), TL.unsqueeze(1))          # [M, V, C, D]
    z = torch.einsum("mvcd,nd->mvnc", th, xt)                                        # [M, V, n, C]
    Lv = torch.einsum("mnjdq,mvnq->mvnjd", cl, z) + ol.unsqueeze(1)
    Uv = torch.einsum("mnjdq,mvnq->mvnjd", cu, z) + ou.unsqueeze(1)
    keep = aff.unsqueeze(1)
    Lv = torch.where(keep, Lv, const_l.unsqueeze(1)).flatten(-2)                       # [M, V, n, P]
    Uv = torch.where(keep, Uv, const_u.unsqueeze(1)).flatten(-2)
    top_l = top_sum(Lv + g, kk, src, largest=True, dim=2)                            # [Q, V, P]
    top_u = top_sum(g - Uv, kk, src, largest=True, dim=2)
    thf = _rows(th.flatten(-2), src)
    up = lam * thf - s * _rows(Lv.sum(2), src) + s * top_l
    dn = lam * thf - s * _rows(Uv.sum(2), src) - s * top_u
    return dn.amin(1).view(-1, C, D), up.amax(1).view(-1, C, D)


def _flat(TL, TU, xt, cl, cu, ol, ou, aff, const_l, const_u, kk, src, lam, s, g):
    """Flat-charge bounds (part 1 (c), flat) [Q, C, D]: max over the box of the affine remainder
    plus 2 k gamma per substitution."""
    M, C, D = TL.shape
    P = C * D
    # sum_i lam_L,i,cj(theta) = sum_{q,e} [sum_i cl_i,cjq x~_ie] Theta_qe + sum_i ol_i,cj
    coef_l = torch.einsum("mncdq,ne->mcdqe", cl, xt).reshape(M, P, P)
    coef_u = torch.einsum("mncdq,ne->mcdqe", cu, xt).reshape(M, P, P)
    na = ~aff
    off_l = (ol + torch.where(na, const_l, torch.zeros_like(const_l))).sum(1).reshape(M, P)
    off_u = (ou + torch.where(na, const_u, torch.zeros_like(const_u))).sum(1).reshape(M, P)
    eye = lam * torch.eye(P, dtype=TL.dtype)
    tl, tu = TL.reshape(M, 1, P), TU.reshape(M, 1, P)
    mu = eye - s * coef_l                                                          # upper of theta'
    hi = (mu.clamp(min=0) * tu + mu.clamp(max=0) * tl).sum(-1) - s * off_l
    ml = eye - s * coef_u                                                          # lower of theta'
    lo = (ml.clamp(min=0) * tl + ml.clamp(max=0) * tu).sum(-1) - s * off_u
    charge = (2 * s * g) * kk.to(TL.dtype).unsqueeze(-1)
    return (_rows(lo, src) - charge).view(-1, C, D), (_rows(hi, src) + charge).view(-1, C, D)


def single_layer_step(model: ModelSpec, boxes: Interval, x: torch.Tensor, y: torch.Tensor, *,
                      subs: torch.Tensor, src: torch.Tensor | None = None, settings,
                      mode: str | None = None) -> Interval:
    """Joint bound [Q, P] of one clipped-GD step of a single-layer head per query (box ``src[q]``,
    at most ``subs[q]`` substitutions), intersected with the IBP step (module docstring, part 1).
    ``mode``: ``coupled`` | ``flat`` (default: coupled when the vertex tensors are small)."""
    ibp = ibp_step(model, boxes, x, y, subs=subs, src=src, settings=settings)
    if isinstance(model.loss, Hinge):
        return ibp                     # interval constants: the joint step is the IBP step
    g, lam = settings.clip, settings.contraction
    n = x.shape[0]
    d, C = model.widths
    D = d + 1
    P = C * D
    dt = boxes.lo.dtype
    s = settings.lr / n
    flat_idx = head_index(model).reshape(-1)
    xt = torch.cat([x, torch.ones(n, 1, dtype=dt)], 1)                      # [n, D]
    TL, TU = boxes.lo[:, flat_idx].view(-1, C, D), boxes.hi[:, flat_idx].view(-1, C, D)
    M = TL.shape[0]
    if mode is None:
        mode = "coupled" if _coupled_mode(P, n) else "flat"
    kk = subs.clamp(max=n).to(torch.long)
    Q = len(kk)
    own = torch.arange(Q) if src is None else src
    cap = _caps(x, y)
    lo_cd = torch.empty(Q, C, D, dtype=dt)
    hi_cd = torch.empty(Q, C, D, dtype=dt)
    per_box = (2 ** P if mode == "coupled" else P) * n * P
    step = max(1, CHUNK_ELEMENTS // max(per_box, 1))
    for a in range(0, Q, step):
        qs = torch.arange(a, min(Q, a + step))
        boxes_q, inv = torch.unique(own[qs], return_inverse=True)
        TLb, TUb = TL[boxes_q], TU[boxes_q]
        al, au, bl, bu, aff, const_l, const_u = _relaxation(model, TLb, TUb, xt, y, g, cap)
        cl, cu, ol, ou = _affine_parts(al, au, bl, bu, aff, xt)
        fn = _coupled if mode == "coupled" else _flat
        lo_q, hi_q = fn(TLb, TUb, xt, cl, cu, ol, ou, aff, const_l, const_u, kk[qs], inv, lam, s, g)
        lo_cd[qs], hi_cd[qs] = lo_q, hi_q
    lo_out = torch.empty(Q, boxes.lo.shape[1], dtype=dt)
    hi_out = torch.empty(Q, boxes.lo.shape[1], dtype=dt)
    lo_out[:, flat_idx], hi_out[:, flat_idx] = lo_cd.reshape(Q, P), hi_cd.reshape(Q, P)
    # rounding of the joint bound before it meets IBP's: relative to an isotone magnitude (the
    # box's largest |theta|), so the margin itself only grows with the box
    mag = torch.maximum(boxes.hi, -boxes.lo).amax(-1, keepdim=True)
    marg = 1e-13 * (_rows(mag, src) + settings.lr * g)
    lo = torch.maximum(ibp.lo, lo_out - marg)
    hi = torch.minimum(ibp.hi, hi_out + marg)
    # two sound bounds of a (near-)point can still cross by an ulp: keep both ends then
    return Interval(torch.minimum(lo, hi), torch.maximum(lo, hi))


def _candidates_range(vals: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    st = torch.stack(vals, 0)
    return st.amin(0), st.amax(0)


def _mag(lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """max(|lo|, |hi|) = max(hi, -lo): grows when [lo, hi] grows (an isotone rounding scale)."""
    return torch.maximum(hi, -lo).clamp(min=0)


def mlp1_gradient_bounds(model: ModelSpec, theta: Interval, x: torch.Tensor, y: torch.Tensor, *,
                         clip: float, out: tuple[torch.Tensor, torch.Tensor] | None = None) -> Interval:
    """Exact clipped per-sample gradient ranges [K, P, n] of a one-hidden-layer MSE network over
    the box (module docstring, part 2), intersected with IBP; written into ``out`` when given
    (see :func:`certdp.bounds.ibp.gradient_bounds`)."""
    ibp = gradient_bounds(model, theta, x, y, clip=clip, out=out)
    lo_buf, hi_buf = ibp.lo, ibp.hi
    (sw0, sb0, (H, d)), (sw1, sb1, _) = model.slices()
    K, n = theta.lo.shape[0], x.shape[0]
    W1l, W1u = theta.lo[:, sw0].view(K, H, d), theta.hi[:, sw0].view(K, H, d)
    b1l, b1u = theta.lo[:, sb0], theta.hi[:, sb0]
    wl, wu = theta.lo[:, sw1].view(K, 1, H), theta.hi[:, sw1].view(K, 1, H)
    b2l, b2u = theta.lo[:, sb1], theta.hi[:, sb1]
    xp, xn = x.clamp(min=0), x.clamp(max=0)
    zl = xp @ W1l.transpose(1, 2) + xn @ W1u.transpose(1, 2) + b1l.unsqueeze(1)   # [K, n, H]
    zu = xp @ W1u.transpose(1, 2) + xn @ W1l.transpose(1, 2) + b1u.unsqueeze(1)
    al, au = zl.clamp(min=0), zu.clamp(min=0)
    tl = torch.minimum(wl * al, wl * au)                                      # w*a, a >= 0: exact
    tu = torch.maximum(wu * al, wu * au)
    fl = tl.sum(-1, keepdim=True) + b2l.view(K, 1, 1)
    fu = tu.sum(-1, keepdim=True) + b2u.view(K, 1, 1)
    yy = y.view(1, n, 1)
    # rounding margin on the rest r_h = f - t_h: relative to isotone magnitudes
    eps = 1e-13 * (2 * _mag(fl, fu) + 2 * _mag(tl, tu) + yy.abs() + 1)
    cl = fl - tl - yy - eps                                                   # c = rest_h - y
    cu = fu - tu - yy + eps
    # dL/dW2_h = 2 a (w a + c)
    cands = []
    for w in (wl, wu):
        for c in (cl, cu):
            astar = (-c / (2 * w).where(w != 0, torch.ones_like(w))).clamp(min=al, max=au)
            astar = torch.where(w != 0, astar, al)
            for a_ in (al, au, astar):
                cands.append(2 * a_ * (w * a_ + c))
    gw2_l, gw2_u = _candidates_range(cands)
    # dL/db1_h = 2 (w z + c) w on z > 0, else 0
    zp = zl.clamp(min=0)
    cands = []
    for z in (zp, zu):
        for c in (cl, cu):
            wstar = (-c / (2 * z).where(z > 0, torch.ones_like(z))).clamp(min=wl, max=wu)
            wstar = torch.where(z > 0, wstar, wl)
            for w in (wl, wu, wstar):
                cands.append(2 * (w * z + c) * w)
    gb1_l, gb1_u = _candidates_range(cands)
    active = zu > 0
    maybe_off = zl <= 0
    zero = torch.zeros_like(gb1_l)
    gb1_l = torch.where(active, torch.where(maybe_off, torch.minimum(gb1_l, zero), gb1_l), zero)
    gb1_u = torch.where(active, torch.where(maybe_off, torch.maximum(gb1_u, zero), gb1_u), zero)
    m2 = 2e-12 * _mag(gw2_l, gw2_u)
    m1 = 2e-12 * _mag(gb1_l, gb1_u)
    gw2_l, gw2_u, gb1_l, gb1_u = gw2_l - m2, gw2_u + m2, gb1_l - m1, gb1_u + m1
    # W1_hj = db1_h * x_j
    xpj, xnj = xp.T.view(1, 1, d, n), xn.T.view(1, 1, d, n)
    bl_, bu_ = gb1_l.transpose(1, 2).unsqueeze(2), gb1_u.transpose(1, 2).unsqueeze(2)   # [K, H, 1, n]
    gw1_l = (bl_ * xpj + bu_ * xnj).reshape(K, H * d, n)
    gw1_u = (bu_ * xpj + bl_ * xnj).reshape(K, H * d, n)
    new = [(sw0, gw1_l, gw1_u), (sb0, gb1_l.transpose(1, 2), gb1_u.transpose(1, 2)),
           (sw1, gw2_l.transpose(1, 2), gw2_u.transpose(1, 2))]
    for sl, l_, u_ in new:
        lo_buf[:, sl] = torch.maximum(lo_buf[:, sl], l_.clamp(-clip, clip))
        hi_buf[:, sl] = torch.minimum(hi_buf[:, sl], u_.clamp(-clip, clip))
    return Interval(lo_buf, hi_buf)


class CROWN(Certificate):
    """``certificate=crown``: joint linear step bounds for single-layer heads (mse, ce; hinge
    reduces to IBP), exact per-sample ranges for one-hidden-layer MSE networks, IBP otherwise;
    always intersected with IBP.  Every part is inclusion-monotone and nests (module docstring)."""

    name = "crown"
    memory_factor = 8    # the single-layer step chunks its own [boxes, vertices, b, P] temporaries
    nesting_monotone = True

    @staticmethod
    def _mlp1(model: ModelSpec) -> bool:
        return model.n_layers == 2 and isinstance(model.loss, MSE) and model.widths[-1] == 1

    def per_sample_gradient_bounds(self, model, theta, x, y, *, clip, out=None):
        if self._mlp1(model):
            return mlp1_gradient_bounds(model, theta, x, y, clip=clip, out=out)
        return gradient_bounds(model, theta, x, y, clip=clip, out=out)

    def step_bounds(self, model, boxes, x, y, *, subs, src=None, settings):
        if model.n_layers == 1:
            return single_layer_step(model, boxes, x, y, subs=subs, src=src, settings=settings)
        return super().step_bounds(model, boxes, x, y, subs=subs, src=src, settings=settings)

    def nesting_slack(self, model, *, settings, b, k_max, magnitude, steps=1):
        """IBP's slack, plus for the joint single-layer step the rounding of regime A (module
        docstring, Rounding): each affine value at a vertex errs by at most ~ 8 u X (P^2 X M + Y),
        summed over the batch with weight lr / b; the flat form's coefficient sums add
        (b + P) u P X^2 M per record."""
        base = super().nesting_slack(model, settings=settings, b=b, k_max=k_max, magnitude=magnitude, steps=steps)
        if model.n_layers != 1 or isinstance(model.loss, Hinge):
            return base
        u, P, M = 2.0 ** -53, model.n_params, magnitude
        per_value = 8 * u * X_CAP * (P * P * X_CAP * M + Y_CAP + 4)
        if not _coupled_mode(P, b):
            per_value += 2 * (b + P) * u * P * X_CAP * X_CAP * M
        return base + 4.0 * steps * float(settings.lr) * per_value
