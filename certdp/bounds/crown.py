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

* mse:   phi = 2(z - y), exact (alpha = 2, beta = -2y).
* hinge: phi = -y * a(m), m = y z, a(m) = 1[m < 1] (a step; torch's hinge' is 0 at m = 1).
  Surely active (mU < 1) or inactive (mL >= 1): constant.  Otherwise every member of

      L_t(m) = t (1 - m) / (1 - mL),        U_t(m) = 1 + t (1 - m) / (mU - 1),     t in [0, 1]

  is valid on [mL, mU]: L_t <= 1 left of the kink and <= 0 right of it; U_t >= 1 left and
  >= 0 right.  t in {0, 1} is picked per sample by the smaller area between bound and step
  (t = 1 for L iff 1 - mL > mU - 1, for U iff mU - 1 > 1 - mL).
* ce:    phi = softmax(z) - onehot(y).  Mean-value form: for z0 the box centre,
  p_c(z) = p_c(z0) + J_c(xi) . (z - z0) for some xi in the box (the segment lies in it), and the
  Jacobian J_cc' = p_c (delta_cc' - p_c') lies in an interval [J_lo, J_hi] computed from the exact
  probability bounds [pl, pu] (q(1-q) over [pl, pu] on the diagonal; -p_c p_c' in
  [-pu_c pu_c', -pl_c pl_c'] off it).  With J_mid, J_rad and |z - z0| <= z_rad:

      p_c(z) in  p_c(z0) + J_mid,c . (z - z0)  +-  J_rad,c . z_rad,

  so alpha_L = alpha_U = J_mid and the offsets differ by the O(rad^2) remainder.  This is what
  lets a contracting step (lambda < 1, PSD Hessian) contract the envelope.

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
"""

from __future__ import annotations

import torch

from certdp.bounds import register_certificate
from certdp.bounds.ibp import gradient_bounds, loss_grad_bounds, output_bounds
from certdp.bounds.interval import Interval
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


def _top_sum(v: torch.Tensor, kk: torch.Tensor, largest: bool = True) -> torch.Tensor:
    """Sum of the kk[j] largest (smallest) entries of v[j, :, ...] over axis 1 -> [K, ...]."""
    kmax = int(kk.max())
    top = torch.topk(v, kmax, dim=1, largest=largest).values.cumsum(1)
    idx = (kk - 1).view(-1, *([1] * (v.dim() - 1))).expand(-1, 1, *v.shape[2:])
    return top.gather(1, idx).squeeze(1)


def head_index(model: ModelSpec) -> torch.Tensor:
    """[C, D] flat-parameter index of (row c, input j) of a single-layer head (j = d: bias)."""
    d, C = model.widths
    idx = torch.empty(C, d + 1, dtype=torch.long)
    idx[:, :d] = torch.arange(C * d).view(C, d)
    idx[:, d] = C * d + torch.arange(C)
    return idx


def _phi_linear(model: ModelSpec, zl, zu, y):
    """Linear bounds of phi = d loss / d z over the z-box [K, n, C]:
    alpha_L, alpha_U [K, n, C, C] and beta_L, beta_U [K, n, C] (see the module docstring)."""
    K, n, C = zl.shape
    dt = zl.dtype
    if model.loss == "mse":
        al = torch.full((K, n, 1, 1), 2.0, dtype=dt)
        bl = (-2.0 * y).view(1, n, 1).expand(K, n, 1)
        return al, al, bl, bl
    if model.loss == "hinge":
        ys = y.to(dt).view(1, n, 1)
        ml = torch.where(ys > 0, zl, -zu)
        mu = torch.where(ys > 0, zu, -zl)
        act = mu < 1.0
        inact = ml >= 1.0
        mixed = ~(act | inact)
        one_ml = (1.0 - ml).clamp(min=1e-300)
        mu_one = (mu - 1.0)
        tl = (mixed & (1.0 - ml > mu - 1.0)).to(dt)
        tu = (mixed & (mu - 1.0 > 1.0 - ml) & (mu_one > 0)).to(dt)
        # a(m) >= cL + sL m and a(m) <= cU + sU m  (m = y z)
        sL = -tl / one_ml
        cL = torch.where(act, torch.ones_like(ml), tl / one_ml)
        sL = torch.where(mixed, sL, torch.zeros_like(sL))
        cL = torch.where(inact, torch.zeros_like(cL), cL)
        sU = torch.where(mixed, -tu / mu_one.clamp(min=1e-300), torch.zeros_like(ml))
        cU = torch.where(mixed, 1.0 + tu / mu_one.clamp(min=1e-300), act.to(dt))
        # in z: a >= cL + sL y z ...; phi = -y a, so y > 0 flips the bounds
        aL_z, aU_z = sL * ys, sU * ys
        pos = ys > 0
        al = torch.where(pos, -aU_z, aL_z)          # phi >= al z + bl
        bl = torch.where(pos, -cU, cL)
        au = torch.where(pos, -aL_z, aU_z)
        bu = torch.where(pos, -cL, cU)
        return al.unsqueeze(-1), au.unsqueeze(-1), bl, bu
    # softmax cross-entropy: mean-value form around the centre of the z-box
    z0, zr = (zl + zu) / 2, (zu - zl) / 2
    p0 = torch.softmax(z0, dim=-1)
    pb = loss_grad_bounds(model, Interval(zl, zu), torch.zeros(n, dtype=torch.long))
    pl, pu = pb.lo, pb.hi                         # onehot(0) subtracted from column 0: undo
    pl = pl.clone(); pu = pu.clone()
    pl[..., 0] += 1.0; pu[..., 0] += 1.0
    pl, pu = pl.clamp(0, 1), pu.clamp(0, 1)
    qa, qb = pl * (1 - pl), pu * (1 - pu)
    d_lo = torch.minimum(qa, qb)
    d_hi = torch.where((pl <= 0.5) & (pu >= 0.5), torch.full_like(qa, 0.25), torch.maximum(qa, qb))
    j_lo = -(pu.unsqueeze(-1) * pu.unsqueeze(-2))
    j_hi = -(pl.unsqueeze(-1) * pl.unsqueeze(-2))
    eye = torch.eye(C, dtype=torch.bool)
    j_lo = torch.where(eye, d_lo.unsqueeze(-1).expand_as(j_lo), j_lo)
    j_hi = torch.where(eye, d_hi.unsqueeze(-1).expand_as(j_hi), j_hi)
    jm, jr = (j_lo + j_hi) / 2, (j_hi - j_lo) / 2
    onehot = torch.nn.functional.one_hot(y.long(), C).to(dt)
    base = p0 - onehot - (jm * z0.unsqueeze(-2)).sum(-1)
    rem = (jr * zr.unsqueeze(-2)).sum(-1) + 1e-14 * (1 + (jm.abs() * z0.abs().unsqueeze(-2)).sum(-1))
    return jm, jm, base - rem, base + rem


def single_layer_step(model: ModelSpec, box: Interval, x: torch.Tensor, y: torch.Tensor,
                      ks: torch.Tensor, settings) -> Interval:
    """Joint bound [K, P] of one clipped-GD step of a single-layer head (mse, hinge or ce) per
    radius, intersected with the IBP bound of the same step (see the module docstring, part 1)."""
    g = settings.clip
    lam, lr = settings.contraction, settings.lr
    n = x.shape[0]
    d, C = model.widths
    D = d + 1
    dt = box.lo.dtype
    idx = head_index(model)
    flat = idx.reshape(-1)
    xt = torch.cat([x, torch.ones(n, 1, dtype=dt)], 1)                     # [n, D]
    TL, TU = box.lo[:, flat].view(-1, C, D), box.hi[:, flat].view(-1, C, D)
    K = TL.shape[0]
    Tm, Tr = (TL + TU) / 2, (TU - TL) / 2
    zm = torch.einsum("kcd,nd->knc", Tm, xt)
    zr = torch.einsum("kcd,nd->knc", Tr, xt.abs())
    zr = zr + 1e-15 * (zm.abs() + zr)                                       # rounding of the products
    zl, zu = zm - zr, zm + zr                                               # exact range of z_i
    ph = loss_grad_bounds(model, Interval(zl, zu), y)                       # exact range of phi [K, n, C]
    xp, xn = xt.clamp(min=0).view(1, n, 1, D), xt.clamp(max=0).view(1, n, 1, D)
    ul = ph.lo.unsqueeze(-1) * xp + ph.hi.unsqueeze(-1) * xn                 # [K, n, C, D]
    uu = ph.hi.unsqueeze(-1) * xp + ph.lo.unsqueeze(-1) * xn
    a, b, off_l, off_u, cl, cu = _clip_relaxation(ul, uu, g)
    kk = ks.clamp(max=n).to(torch.long)
    s = lr / n
    # IBP on the same step (SEMin/SEMax with the k*gamma term)
    kg = (kk.to(dt) * g).view(-1, 1, 1)
    ibp_lo_sum = cl.sum(1) - _top_sum(cl, kk, True) - kg                   # [K, C, D]
    ibp_hi_sum = cu.sum(1) - _top_sum(cu, kk, False) + kg
    ibp_lo = lam * TL - s * ibp_hi_sum
    ibp_hi = lam * TU - s * ibp_lo_sum
    # linear bounds of g_i,cj in z_i:  Lam . z + kappa
    al, au, bl, bu = _phi_linear(model, zl, zu, y)                         # [K|1, n, C, C], [K, n, C]
    # g_i,cj >= Lam_L . z_i + kappa_L with Lam_L = a (x~+_j alpha_L,c + x~-_j alpha_U,c) (and the
    # mirror image for the upper bound); never materialised: for each j only one of x~+, x~- is
    # non-zero, so max_z Lam_L . z = a x~+_j sum_q max(alpha_L zl, alpha_L zu) + a x~-_j sum_q
    # min(alpha_U zl, alpha_U zu), and the coefficient sums are einsums.
    Ap, An = a * xp, a * xn                                                  # [K, n, C, D]
    kapL = Ap * bl.unsqueeze(-1) + An * bu.unsqueeze(-1) + b + off_l         # [K, n, C, D]
    kapU = Ap * bu.unsqueeze(-1) + An * bl.unsqueeze(-1) + b + off_u
    zl4, zu4 = zl.unsqueeze(-2), zu.unsqueeze(-2)                            # [K, n, 1, C]
    maxAl = torch.maximum(al * zl4, al * zu4).sum(-1).unsqueeze(-1)          # [K, n, C, 1]
    minAl = torch.minimum(al * zl4, al * zu4).sum(-1).unsqueeze(-1)
    maxAu = torch.maximum(au * zl4, au * zu4).sum(-1).unsqueeze(-1)
    minAu = torch.minimum(au * zl4, au * zu4).sum(-1).unsqueeze(-1)
    maxL = kapL + Ap * maxAl + An * minAu                                    # exact max over the box
    minU = kapU + Ap * minAu + An * maxAl
    maxL = torch.minimum(maxL, cu)
    minU = torch.maximum(minU, cl)
    top_l = _top_sum((maxL + g).clamp(min=0), kk)                          # [K, C, D]
    top_u = _top_sum((g - minU).clamp(min=0), kk)
    # sum_i Lam_i . z_i(theta) = sum_{c', j'} (sum_i Lam_i,c' x~_ij') Theta_c'j'
    alK, auK = al.expand(K, -1, -1, -1), au.expand(K, -1, -1, -1)

    def csum(A, alpha):
        # sum_n A[k,n,c,d] alpha[k,n,c,q] x~[n,e] -> [K, C*D, C*D], as one batched matmul over (k, c)
        T = (alpha.unsqueeze(-1) * xt.view(1, n, 1, 1, D)).permute(0, 2, 1, 3, 4).reshape(K * C, n, C * D)
        out = torch.bmm(A.permute(0, 2, 3, 1).reshape(K * C, D, n), T)             # [K*C, D, C*D]
        return out.view(K, C * D, C * D)

    coefL = csum(Ap, alK) + csum(An, auK)
    coefU = csum(Ap, auK) + csum(An, alK)
    eye = torch.eye(C * D, dtype=dt)
    tl, tu = TL.reshape(K, 1, C * D), TU.reshape(K, 1, C * D)
    mu_ = lam * eye - s * coefL                                             # upper bound of theta'
    hi_lin = (mu_.clamp(min=0) * tu + mu_.clamp(max=0) * tl).sum(-1) \
        - s * (kapL.sum(1).reshape(K, -1) - top_l.reshape(K, -1))
    ml_ = lam * eye - s * coefU                                             # lower bound of theta'
    lo_lin = (ml_.clamp(min=0) * tl + ml_.clamp(max=0) * tu).sum(-1) \
        - s * (kapU.sum(1).reshape(K, -1) + top_u.reshape(K, -1))
    lo_cd = torch.maximum(ibp_lo.reshape(K, -1), lo_lin)
    hi_cd = torch.minimum(ibp_hi.reshape(K, -1), hi_lin)
    lo_out, hi_out = torch.empty_like(box.lo), torch.empty_like(box.hi)
    lo_out[:, flat], hi_out[:, flat] = lo_cd, hi_cd
    return Interval(lo_out, hi_out)


def mse_step(model: ModelSpec, box: Interval, x: torch.Tensor, y: torch.Tensor,
             ks: torch.Tensor, settings) -> Interval:
    """:func:`single_layer_step` specialised to one-output MSE (linear regression), the AGT-R
    linear default with ~1,000 radii.  Same bound, computed with samples on the last axis
    (contiguous top-k) and without the general head's [K, n, C, C] intermediates: here
    z_ip(theta) = 2 (x~_i . theta - y_i) x~_ip is exactly linear in theta, its range over the
    box is exact, and the chord relaxation of clip is applied to it directly."""
    g = settings.clip
    lam, lr = settings.contraction, settings.lr
    n = x.shape[0]
    dt = box.lo.dtype
    xt = torch.cat([x, torch.ones(n, 1, dtype=dt)], 1).T.contiguous()      # [P, n] (W then b)
    lo, hi = box.lo, box.hi                                               # [K, P]
    mid, rad = (lo + hi) / 2, (hi - lo) / 2
    r_mid = mid @ xt - y                                                  # residual at the centre [K, n]
    r_rad = rad @ xt.abs()                                                # exact radius of the residual
    r_rad = r_rad + 1e-15 * (r_mid.abs() + r_rad)                         # rounding of the products
    z_mid = 2 * r_mid.unsqueeze(1) * xt                                   # [K, P, n]
    z_rad = 2 * r_rad.unsqueeze(1) * xt.abs()
    zl, zu = z_mid - z_rad, z_mid + z_rad
    a, b, off_l, off_u, cl, cu = _clip_relaxation(zl, zu, g)
    kk = ks.clamp(max=n).to(torch.long)
    kmax = int(kk.max())
    idx = (kk - 1).view(-1, 1, 1).expand(-1, lo.shape[-1], 1)

    def top(v, largest=True):     # sum of the kk largest (smallest) entries over samples: [K, P]
        return torch.topk(v, kmax, dim=-1, largest=largest).values.cumsum(-1).gather(-1, idx).squeeze(-1)

    s = lr / n
    kg = (kk.to(dt) * g).unsqueeze(-1)
    ibp_lo = lam * lo - s * (cu.sum(-1) - top(cu, False) + kg)
    ibp_hi = lam * hi - s * (cl.sum(-1) - top(cl, True) - kg)
    # substituted records: the concrete extremes of the relaxations over the box (a >= 0)
    top_l = top((a * zu + b + off_l + g).clamp(min=0))
    top_u = top((g - (a * zl + b + off_u)).clamp(min=0))
    # sum_i a_ip z_ip(theta) = sum_q [2 sum_i a_ip x~_ip x~_iq] theta_q - 2 sum_i a_ip y_i x~_ip
    ax = a * xt                                                           # [K, P, n]
    coef = 2 * ax @ xt.T                                                  # [K, P, P]
    base = -2 * (ax @ y) + b.sum(-1)                                      # [K, P]
    Cl, Cu = base + off_l.sum(-1), base + off_u.sum(-1)
    c = lam * torch.eye(lo.shape[-1], dtype=dt) - s * coef
    cp, cn = c.clamp(min=0), c.clamp(max=0)
    lin_hi = (cp * hi.unsqueeze(1) + cn * lo.unsqueeze(1)).sum(-1) - s * (Cl - top_l)
    lin_lo = (cp * lo.unsqueeze(1) + cn * hi.unsqueeze(1)).sum(-1) - s * (Cu + top_u)
    return Interval(torch.maximum(ibp_lo, lin_lo), torch.minimum(ibp_hi, lin_hi))


# kept for callers of the first version (single-layer MSE)
linear_regression_step = single_layer_step


def _candidates_range(vals: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    st = torch.stack(vals, 0)
    return st.amin(0), st.amax(0)


def mlp1_gradient_bounds(model: ModelSpec, theta: Interval, x: torch.Tensor, y: torch.Tensor,
                         clip: float) -> Interval:
    """Exact clipped per-sample gradient ranges [K, P, n] of a one-hidden-layer MSE network over
    the box (module docstring, part 2), intersected with IBP."""
    ibp = gradient_bounds(model, theta, x, y, clip)
    lo_buf, hi_buf = ibp.lo.clone(), ibp.hi.clone()
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


class CROWN:
    """``certificate=crown``: joint linear step bounds for single-layer heads, exact per-sample
    ranges for one-hidden-layer MSE networks, IBP otherwise; always intersected with IBP."""

    name = "crown"
    memory_factor = 48   # [K, n, P(, C)] temporaries of the step relaxation, per radius

    def __init__(self, **_):
        pass

    @staticmethod
    def supports_step(model: ModelSpec) -> bool:
        return model.n_layers == 1

    @staticmethod
    def supports_mlp(model: ModelSpec) -> bool:
        return model.n_layers == 2 and model.loss == "mse" and model.widths[-1] == 1

    def per_sample_gradient_bounds(self, model, theta, x, y, clip):
        if self.supports_mlp(model):
            return mlp1_gradient_bounds(model, theta, x, y, clip)
        return gradient_bounds(model, theta, x, y, clip)

    def output_bounds(self, model, theta, x):
        return output_bounds(model, theta, x)

    def step_bounds(self, model, box, x, y, ks, settings):
        if self.supports_step(model):
            if model.loss == "mse" and model.widths[-1] == 1:
                return mse_step(model, box, x, y, ks, settings)
            return single_layer_step(model, box, x, y, ks, settings)
        from certdp.agt import aggregate_batch
        g = self.per_sample_gradient_bounds(model, box, x, y, settings.clip)
        tot = aggregate_batch(g, ks, settings.clip)
        b = x.shape[0]
        return Interval(settings.contraction * box.lo - (settings.lr / b) * tot.hi,
                        settings.contraction * box.hi - (settings.lr / b) * tot.lo)


register_certificate("crown")(CROWN)
