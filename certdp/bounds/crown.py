"""Linear relaxations of the clipped per-sample gradients and of the whole step map (CROWN-style).

Two constructions, each intersected with IBP so that the result is never wider than IBP.

1. Single-layer heads (``widths = (d, C)``; losses ``mse``, ``hinge``, ``ce``): joint step bound
----------------------------------------------------------------------------------------------
Write the parameters as a matrix Theta [C, D] (row c = (W_c, b_c), D = d + 1) and x~ = (x, 1).
The logits z_i = Theta x~_i are *linear* in theta, and every z_ic depends on its own row of
Theta only, so the range [zL, zU] of z_i over the box is exact and the coordinates are
independent.  The per-sample gradient is

    g_i,cj(theta) = clip( phi_c(z_i) * x~_ij ,  -gamma, gamma ),    phi = d loss / d z.

(a) Linear bounds of phi in z over the z-box, ``alpha_L z + beta_L <= phi(z) <= alpha_U z + beta_U``:
the loss object's ``grad_linear_bounds`` (derived in :mod:`certdp.losses`: exact for mse, the
two-member chord family for hinge, the mean-value form for softmax cross-entropy).

(b) u = phi_c x~_j is then linear-bounded by sign-splitting x~_j, and clip is relaxed by the
parallel-chord construction of :func:`_clip_relaxation` on the exact range of u (slope a >= 0,
so lower bounds compose with lower bounds):  l_i,cj(theta) <= g_i,cj(theta) <= u_i,cj(theta),
both affine in theta through z_i.

(c) Step map with k substitutions in a batch of b (retained set R, |R| = b - k' >= b - k,
substituted gradients s in [-gamma, gamma]^P):

    S = sum_{i in R} g_i + sum_sub s
      >= sum_i l_i(theta) - sum_{i not in R} (l_i(theta) + gamma)
      >= sum_i l_i(theta) - top_k( max( max_box l_i + gamma, 0 ) )

(the positive part covers k' < k), symmetrically S <= sum_i u_i(theta) + top_k(max(gamma -
min_box u_i, 0)).  Hence theta'_q = lam theta_q - (lr/b) S_q is bounded above by the affine
function  (lam e_q - (lr/b) sum_i grad l_i,q) . theta + const  and its maximum over the box is
taken *exactly* (sign of each coefficient).  max_box l_i is also exact because z_i ranges over
a product of intervals.

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
which is at least as tight as IBP's products of intervals; clip is monotone, so clipping the ends
is exact.  This tightens the per-sample intervals; the batch is then aggregated as in IBP.

Other models (deeper stacks, hidden-layer hinge / cross-entropy) use the IBP bounds.

Queries (``subs``, ``src``; see :mod:`certdp.bounds.base`): everything that depends on the box
alone (z ranges, relaxations, the coefficient matrices of part 1) is computed once per box;
every query reads its top-k sums and combines them with its box's terms.
"""

from __future__ import annotations

import torch

from certdp.bounds.aggregate import top_sum
from certdp.bounds.base import Certificate
from certdp.bounds.ibp import check_substitutions, gradient_bounds, loss_grad_bounds
from certdp.bounds.interval import Interval
from certdp.losses import MSE
from certdp.models import ModelSpec


def _clip_relaxation(zl: torch.Tensor, zu: torch.Tensor, g: float):
    """Parallel-chord relaxation of clip(., -g, g) on [zl, zu]: returns (a, b, off_l, off_u) with

        a z + b + off_l  <=  clip(z)  <=  a z + b + off_u      for z in [zl, zu].

    a z + b is the chord through the end points; clip - chord is piecewise linear, zero at the
    ends, with kinks only at +-g, so its extremes over [zl, zu] are at the kinks that lie inside.
    Exact (off = 0) when the interval is surely unclipped or surely clipped; a >= 0 always."""
    cl, cu = zl.clamp(-g, g), zu.clamp(-g, g)
    a = (cu - cl) / (zu - zl).clamp(min=1e-300)
    b = cl - a * zl
    in_hi = ((zl < g) & (zu > g)).to(zl.dtype)
    in_lo = ((zl < -g) & (zu > -g)).to(zl.dtype)
    dev_hi = (g - a * g - b) * in_hi          # clip(g) - chord(g), >= 0 where it applies
    dev_lo = (-g + a * g - b) * in_lo         # clip(-g) - chord(-g), <= 0 where it applies
    off_l = dev_lo.clamp(max=0) + dev_hi.clamp(max=0)
    off_u = dev_hi.clamp(min=0) + dev_lo.clamp(min=0)
    # rounding of the chord: a relative margin far above float64 error, far below any width
    m = 1e-13 * (zl.abs() + zu.abs() + g)
    return a, b, off_l - m, off_u + m, cl, cu


def _rows(t: torch.Tensor, src: torch.Tensor | None) -> torch.Tensor:
    return t if src is None else t[src]


def head_index(model: ModelSpec) -> torch.Tensor:
    """[C, D] flat-parameter index of (row c, input j) of a single-layer head (j = d: bias)."""
    d, C = model.widths
    idx = torch.empty(C, d + 1, dtype=torch.long)
    idx[:, :d] = torch.arange(C * d).view(C, d)
    idx[:, d] = C * d + torch.arange(C)
    return idx


def single_layer_step(model: ModelSpec, boxes: Interval, x: torch.Tensor, y: torch.Tensor, *,
                      subs: torch.Tensor, src: torch.Tensor | None = None, settings,
                      anchor: Interval | None = None, shift: torch.Tensor | None = None) -> Interval:
    """Joint bound [Q, P] of one clipped-GD step of a single-layer head (mse, hinge or ce) per
    query (box ``src[q]``, at most ``subs[q]`` substitutions), intersected with the IBP bound of
    the same step (see the module docstring, part 1).

    Ledger form (``anchor``, ``shift``; :meth:`Certificate.ledger_step_bounds`): the gradients are
    relaxed over ``boxes`` (theta) and the step is lam psi - (lr/b) sum g(theta) with psi in
    ``anchor`` and theta = psi + S, |S| <= ``shift``: the affine lower bound coef . theta + c of the
    sum gives lam psi - (lr/b)(coef psi + coef S + c), maximised over psi in the anchor and over S
    separately (the S term is (lr/b) |coef| shift)."""
    g = settings.clip
    lam, lr = settings.contraction, settings.lr
    n = x.shape[0]
    d, C = model.widths
    D = d + 1
    dt = boxes.lo.dtype
    idx = head_index(model)
    flat = idx.reshape(-1)
    xt = torch.cat([x, torch.ones(n, 1, dtype=dt)], 1)                     # [n, D]
    TL, TU = boxes.lo[:, flat].view(-1, C, D), boxes.hi[:, flat].view(-1, C, D)
    anc = boxes if anchor is None else anchor
    AL, AU = anc.lo[:, flat].view(-1, C, D), anc.hi[:, flat].view(-1, C, D)
    M = TL.shape[0]
    Tm, Tr = (TL + TU) / 2, (TU - TL) / 2
    zm = torch.einsum("kcd,nd->knc", Tm, xt)
    zr = torch.einsum("kcd,nd->knc", Tr, xt.abs())
    zr = zr + 1e-15 * (zm.abs() + zr)                                       # rounding of the products
    zl, zu = zm - zr, zm + zr                                               # exact range of z_i
    ph = loss_grad_bounds(model, Interval(zl, zu), y)                       # exact range of phi [M, n, C]
    xp, xn = xt.clamp(min=0).view(1, n, 1, D), xt.clamp(max=0).view(1, n, 1, D)
    ul = ph.lo.unsqueeze(-1) * xp + ph.hi.unsqueeze(-1) * xn                 # [M, n, C, D]
    uu = ph.hi.unsqueeze(-1) * xp + ph.lo.unsqueeze(-1) * xn
    a, b, off_l, off_u, cl, cu = _clip_relaxation(ul, uu, g)
    kk = subs.clamp(max=n).to(torch.long)
    Q = len(kk)
    s = lr / n
    # IBP on the same step (SEMin/SEMax with the k*gamma term)
    kg = (kk.to(dt) * g).view(-1, 1, 1)
    ibp_lo_sum = _rows(cl.sum(1), src) - top_sum(cl, kk, src, largest=True, dim=1) - kg     # [Q, C, D]
    ibp_hi_sum = _rows(cu.sum(1), src) - top_sum(cu, kk, src, largest=False, dim=1) + kg
    ibp_lo = lam * _rows(AL, src) - s * ibp_hi_sum
    ibp_hi = lam * _rows(AU, src) - s * ibp_lo_sum
    # linear bounds of g_i,cj in z_i:  Lam . z + kappa
    al, au, bl, bu = model.loss.grad_linear_bounds(zl, zu, y)              # [M|1, n, C, C], [M, n, C]
    # g_i,cj >= Lam_L . z_i + kappa_L with Lam_L = a (x~+_j alpha_L,c + x~-_j alpha_U,c) (and the
    # mirror image for the upper bound); never materialised: for each j only one of x~+, x~- is
    # non-zero, so max_z Lam_L . z = a x~+_j sum_q max(alpha_L zl, alpha_L zu) + a x~-_j sum_q
    # min(alpha_U zl, alpha_U zu), and the coefficient sums are einsums.
    Ap, An = a * xp, a * xn                                                  # [M, n, C, D]
    kapL = Ap * bl.unsqueeze(-1) + An * bu.unsqueeze(-1) + b + off_l         # [M, n, C, D]
    kapU = Ap * bu.unsqueeze(-1) + An * bl.unsqueeze(-1) + b + off_u
    zl4, zu4 = zl.unsqueeze(-2), zu.unsqueeze(-2)                            # [M, n, 1, C]
    maxAl = torch.maximum(al * zl4, al * zu4).sum(-1).unsqueeze(-1)          # [M, n, C, 1]
    minAu = torch.minimum(au * zl4, au * zu4).sum(-1).unsqueeze(-1)
    maxL = kapL + Ap * maxAl + An * minAu                                    # exact max over the box
    minU = kapU + Ap * minAu + An * maxAl
    maxL = torch.minimum(maxL, cu)
    minU = torch.maximum(minU, cl)
    top_l = top_sum((maxL + g).clamp(min=0), kk, src, largest=True, dim=1)  # [Q, C, D]
    top_u = top_sum((g - minU).clamp(min=0), kk, src, largest=True, dim=1)
    # sum_i Lam_i . z_i(theta) = sum_{c', j'} (sum_i Lam_i,c' x~_ij') Theta_c'j'
    alK, auK = al.expand(M, -1, -1, -1), au.expand(M, -1, -1, -1)

    def csum(A, alpha):
        # sum_n A[k,n,c,d] alpha[k,n,c,q] x~[n,e] -> [M, C*D, C*D], as one batched matmul over (k, c)
        T = (alpha.unsqueeze(-1) * xt.view(1, n, 1, 1, D)).permute(0, 2, 1, 3, 4).reshape(M * C, n, C * D)
        out = torch.bmm(A.permute(0, 2, 3, 1).reshape(M * C, D, n), T)             # [M*C, D, C*D]
        return out.view(M, C * D, C * D)

    coefL = csum(Ap, alK) + csum(An, auK)
    coefU = csum(Ap, auK) + csum(An, alK)
    eye = torch.eye(C * D, dtype=dt)
    tl, tu = AL.reshape(M, 1, C * D), AU.reshape(M, 1, C * D)
    mu_ = lam * eye - s * coefL                                             # upper bound of theta'
    hi_box = (mu_.clamp(min=0) * tu + mu_.clamp(max=0) * tl).sum(-1)       # [M, C*D]
    ml_ = lam * eye - s * coefU                                             # lower bound of theta'
    lo_box = (ml_.clamp(min=0) * tl + ml_.clamp(max=0) * tu).sum(-1)
    if shift is not None:
        sh = shift[:, flat].unsqueeze(-1)                                   # [M, C*D, 1]
        hi_box = hi_box + s * torch.bmm(coefL.abs(), sh).squeeze(-1)
        lo_box = lo_box - s * torch.bmm(coefU.abs(), sh).squeeze(-1)
    hi_lin = _rows(hi_box, src) - s * (_rows(kapL.sum(1).reshape(M, -1), src) - top_l.reshape(Q, -1))
    lo_lin = _rows(lo_box, src) - s * (_rows(kapU.sum(1).reshape(M, -1), src) + top_u.reshape(Q, -1))
    lo_cd = torch.maximum(ibp_lo.reshape(Q, -1), lo_lin)
    hi_cd = torch.minimum(ibp_hi.reshape(Q, -1), hi_lin)
    lo_out = torch.empty(Q, boxes.lo.shape[1], dtype=dt)
    hi_out = torch.empty(Q, boxes.lo.shape[1], dtype=dt)
    lo_out[:, flat], hi_out[:, flat] = lo_cd, hi_cd
    return Interval(lo_out, hi_out)


def mse_step(model: ModelSpec, boxes: Interval, x: torch.Tensor, y: torch.Tensor, *,
             subs: torch.Tensor, src: torch.Tensor | None = None, settings,
             anchor: Interval | None = None, shift: torch.Tensor | None = None) -> Interval:
    """:func:`single_layer_step` specialised to one-output MSE (linear regression), the AGT-R
    linear default with ~1,000 radii.  Same bound, computed with samples on the last axis
    (contiguous top-k) and without the general head's [K, n, C, C] intermediates: here
    z_ip(theta) = 2 (x~_i . theta - y_i) x~_ip is exactly linear in theta, its range over the
    box is exact, and the chord relaxation of clip is applied to it directly.  ``anchor`` and
    ``shift``: the ledger form of :func:`single_layer_step`."""
    g = settings.clip
    lam, lr = settings.contraction, settings.lr
    n = x.shape[0]
    dt = boxes.lo.dtype
    xt = torch.cat([x, torch.ones(n, 1, dtype=dt)], 1).T.contiguous()      # [P, n] (W then b)
    lo, hi = boxes.lo, boxes.hi                                           # [M, P]
    mid, rad = (lo + hi) / 2, (hi - lo) / 2
    r_mid = mid @ xt - y                                                  # residual at the centre [M, n]
    r_rad = rad @ xt.abs()                                                # exact radius of the residual
    r_rad = r_rad + 1e-15 * (r_mid.abs() + r_rad)                         # rounding of the products
    z_mid = 2 * r_mid.unsqueeze(1) * xt                                   # [M, P, n]
    z_rad = 2 * r_rad.unsqueeze(1) * xt.abs()
    zl, zu = z_mid - z_rad, z_mid + z_rad
    a, b, off_l, off_u, cl, cu = _clip_relaxation(zl, zu, g)
    kk = subs.clamp(max=n).to(torch.long)

    def top(v, largest=True):     # sum of the kk largest (smallest) entries over samples: [Q, P]
        return top_sum(v, kk, src, largest=largest)

    s = lr / n
    kg = (kk.to(dt) * g).unsqueeze(-1)
    if anchor is not None:
        lo, hi = anchor.lo, anchor.hi                                     # psi's box (ledger form)
    ibp_lo = lam * _rows(lo, src) - s * (_rows(cu.sum(-1), src) - top(cu, False) + kg)
    ibp_hi = lam * _rows(hi, src) - s * (_rows(cl.sum(-1), src) - top(cl, True) - kg)
    # substituted records: the concrete extremes of the relaxations over the box (a >= 0)
    top_l = top((a * zu + b + off_l + g).clamp(min=0))
    top_u = top((g - (a * zl + b + off_u)).clamp(min=0))
    # sum_i a_ip z_ip(theta) = sum_q [2 sum_i a_ip x~_ip x~_iq] theta_q - 2 sum_i a_ip y_i x~_ip
    ax = a * xt                                                           # [M, P, n]
    coef = 2 * ax @ xt.T                                                  # [M, P, P]
    base = -2 * (ax @ y) + b.sum(-1)                                      # [M, P]
    Cl, Cu = base + off_l.sum(-1), base + off_u.sum(-1)
    c = lam * torch.eye(lo.shape[-1], dtype=dt) - s * coef
    cp, cn = c.clamp(min=0), c.clamp(max=0)
    hi_box = (cp * hi.unsqueeze(1) + cn * lo.unsqueeze(1)).sum(-1)       # [M, P]
    lo_box = (cp * lo.unsqueeze(1) + cn * hi.unsqueeze(1)).sum(-1)
    if shift is not None:
        sv = s * (coef.abs() @ shift.unsqueeze(-1)).squeeze(-1)
        hi_box, lo_box = hi_box + sv, lo_box - sv
    lin_hi = _rows(hi_box, src) - s * (_rows(Cl, src) - top_l)
    lin_lo = _rows(lo_box, src) - s * (_rows(Cu, src) + top_u)
    return Interval(torch.maximum(ibp_lo, lin_lo), torch.minimum(ibp_hi, lin_hi))


def _candidates_range(vals: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    st = torch.stack(vals, 0)
    return st.amin(0), st.amax(0)


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
    eps = 1e-13 * (fl.abs() + fu.abs() + tl.abs() + tu.abs() + yy.abs() + 1)
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
    m2 = 1e-12 * (gw2_l.abs() + gw2_u.abs())
    m1 = 1e-12 * (gb1_l.abs() + gb1_u.abs())
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
    """``certificate=crown``: joint linear step bounds for single-layer heads, exact per-sample
    ranges for one-hidden-layer MSE networks, IBP otherwise; always intersected with IBP."""

    name = "crown"
    memory_factor = 48   # [K, n, P(, C)] temporaries of the step relaxation, per radius
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

    def step_bounds(self, model, boxes, x, y, *, subs, src=None, settings):
        if model.n_layers == 1:
            step = mse_step if isinstance(model.loss, MSE) else single_layer_step
            return step(model, boxes, x, y, subs=subs, src=src, settings=settings)
        return super().step_bounds(model, boxes, x, y, subs=subs, src=src, settings=settings)

    def ledger_step_bounds(self, model, anchor, x, y, *, domain, shift, settings):
        if model.n_layers == 1:
            step = mse_step if isinstance(model.loss, MSE) else single_layer_step
            return step(model, domain, x, y, subs=torch.zeros(anchor.lo.shape[0], dtype=torch.long),
                        settings=settings, anchor=anchor, shift=shift)
        return super().ledger_step_bounds(model, anchor, x, y, domain=domain, shift=shift, settings=settings)
