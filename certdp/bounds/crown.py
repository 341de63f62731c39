"""Linear relaxations of the clipped per-sample gradients and of the whole step map (CROWN-style).

This module currently covers single-layer models with the MSE loss (linear regression), where
the unclipped per-sample gradient is *exactly* linear in the parameters:

    z_i(theta) = 2 (x~_i . theta - y_i) x~_i = G_i theta + h_i,     x~_i = (x_i, 1).

Element-wise clipping is relaxed per coordinate p with two parallel lines in z over the interval
[zl, zu] that z_ip takes on the box (computed exactly, z is linear): the chord of clip through
the end points, shifted down/up by the largest deviation of clip from it at the kinks +-gamma
inside the interval (see :func:`_clip_relaxation`).  Surely unclipped or surely clipped samples
are represented exactly.

Step map with k substitutions (batch b, retained set R, |R| = b - k' >= b - k):

    S = sum_{i in R} clip(z_i) + sum_{substituted} s_j,   s_j in [-gamma, gamma]
      <= sum_{all i} u_i(theta) + sum_{i not in R} (gamma - u_i(theta))
      <= sum_{all i} u_i(theta) + top_k( max(gamma - min_box u_i, 0) )

(the positive part covers k' < k), and symmetrically S >= sum_i l_i(theta) - top_k(max(max_box
l_i + gamma, 0)).  Then theta'_j = lam theta_j - (lr/b) S_j is bounded by a *linear function of
theta* plus a constant, maximised/minimised over the box exactly (sign of each coefficient).  The
coefficient of theta_j itself is lam - (lr/b) sum_i (slope_ij * (G_i)_jj): a contracting step
contracts the envelope instead of adding widths, which IBP cannot see.  The result is intersected
with the IBP step bound, so it is never looser than IBP.

Models outside this scope (hidden layers, hinge, cross-entropy) use the IBP gradient bounds.
"""

from __future__ import annotations

import torch

from certdp.bounds import register_certificate
from certdp.bounds.ibp import gradient_bounds, output_bounds
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
    return a, b, off_l, off_u, cl, cu


def _top_sum(v: torch.Tensor, kk: torch.Tensor, largest: bool = True) -> torch.Tensor:
    """Sum of the kk[j] largest (smallest) entries of v[j, :, p] -> [K, P]."""
    kmax = int(kk.max())
    idx = (kk - 1).view(-1, 1, 1).expand(-1, 1, v.shape[-1])
    return torch.topk(v, kmax, dim=1, largest=largest).values.cumsum(1).gather(1, idx).squeeze(1)


def linear_regression_step(model: ModelSpec, box: Interval, x: torch.Tensor, y: torch.Tensor,
                           ks: torch.Tensor, settings) -> Interval:
    """Joint bound of one clipped-GD step for a single-layer MSE model, per radius ([K, P]),
    intersected with the IBP bound of the same step (computed from the same z intervals)."""
    g = settings.clip
    lam, lr = settings.contraction, settings.lr
    n = x.shape[0]
    xt = torch.cat([x, torch.ones(n, 1, dtype=x.dtype)], 1)              # [n, P] (W then b)
    lo, hi = box.lo, box.hi                                               # [K, P]
    mid, rad = (lo + hi) / 2, (hi - lo) / 2
    r_mid = mid @ xt.T - y                                                # residual at the centre [K, n]
    r_rad = rad @ xt.abs().T                                              # exact radius of the residual
    z_mid = 2 * r_mid.unsqueeze(-1) * xt                                  # [K, n, P]
    z_rad = 2 * r_rad.unsqueeze(-1) * xt.abs()
    zl, zu = z_mid - z_rad, z_mid + z_rad
    a, b, off_l, off_u, cl, cu = _clip_relaxation(zl, zu, g)
    kk = ks.clamp(max=n).to(lo.device)
    s = lr / n
    # IBP on the same step: per-sample bounds [cl, cu], SEMin/SEMax with the k*gamma term
    kg = (kk.to(lo.dtype) * g).unsqueeze(-1)
    ibp_lo_sum = cl.sum(1) - _top_sum(cl, kk, True) - kg
    ibp_hi_sum = cu.sum(1) - _top_sum(cu, kk, False) + kg
    ibp_lo = lam * lo - s * ibp_hi_sum
    ibp_hi = lam * hi - s * ibp_lo_sum
    # CROWN: substituted records, via the concrete extremes of the relaxations over the box
    top_l = _top_sum((a * zu + b + off_l + g).clamp(min=0), kk)          # [K, P]
    top_u = _top_sum((g - (a * zl + b + off_u)).clamp(min=0), kk)
    # sum_i (a_ip z_ip(theta) + b_ip + off_ip), z_ip(theta) = 2 x~_ip (x~_i . theta - y_i)
    coef = 2 * torch.einsum("kip,ip,iq->kpq", a, xt, xt)                 # [K, P(out), P(theta)]
    base = (a * (-2 * y.view(1, -1, 1) * xt)).sum(1) + b.sum(1)          # [K, P]
    Cl, Cu = base + off_l.sum(1), base + off_u.sum(1)
    eye = torch.eye(lo.shape[-1], dtype=lo.dtype)
    c = lam * eye - s * coef
    cp, cn = c.clamp(min=0), c.clamp(max=0)
    lin_hi = (cp * hi.unsqueeze(1) + cn * lo.unsqueeze(1)).sum(-1) - s * (Cl - top_l)
    lin_lo = (cp * lo.unsqueeze(1) + cn * hi.unsqueeze(1)).sum(-1) - s * (Cu + top_u)
    return Interval(torch.maximum(ibp_lo, lin_lo), torch.minimum(ibp_hi, lin_hi))


class CROWN:
    """``certificate=crown``: joint linear step bounds where supported, intersected with IBP."""

    name = "crown"
    memory_factor = 48   # [K, n, P] temporaries of the step relaxation, per radius

    def __init__(self, **_):
        pass

    @staticmethod
    def supports_step(model: ModelSpec) -> bool:
        return model.n_layers == 1 and model.loss == "mse"

    def per_sample_gradient_bounds(self, model, theta, x, y, clip):
        return gradient_bounds(model, theta, x, y, clip)

    def output_bounds(self, model, theta, x):
        return output_bounds(model, theta, x)

    def step_bounds(self, model, box, x, y, ks, settings):
        if self.supports_step(model):
            return linear_regression_step(model, box, x, y, ks, settings)
        from certdp.agt import aggregate_batch
        g = gradient_bounds(model, box, x, y, settings.clip)
        tot = aggregate_batch(g, ks, settings.clip)
        b = x.shape[0]
        return Interval(settings.contraction * box.lo - (settings.lr / b) * tot.hi,
                        settings.contraction * box.hi - (settings.lr / b) * tot.lo)


register_certificate("crown")(CROWN)
