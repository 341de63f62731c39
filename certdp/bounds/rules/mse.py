"""The bound rules of the squared error (mse): CROWN's coupled single-layer step (one-output
heads: the joint bound over the box's vertices) and the MILP window's per-slot clipped-gradient
columns; crowntt relaxes its head's neurons like every smooth head.  (Its interval and linear
gradient bounds live with the loss, :class:`certdp.losses.MSE`.)"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch

from certdp.bounds.aggregate import top_sum
from certdp.bounds.base import LOSS_RULES, WORKSPACE, LossRule
from certdp.bounds.crown import _caps, _meet, chunk_elements
from certdp.bounds.crowntt_neurons import HeadNeurons
from certdp.bounds.interval import Interval
from certdp.bounds.milp_window import WindowProblem, _Rows, gradient_slack
from certdp.models import ModelSpec


def mse_coupled_step(model: ModelSpec, boxes: Interval, x: torch.Tensor, y: torch.Tensor, *,
                     subs: torch.Tensor, src: torch.Tensor | None = None, settings) -> Interval:
    """:func:`single_layer_step` for one-output MSE heads in coupled mode (linear regression, the
    AGT-R linear default), computed with samples on the last axis and without the general head's
    [boxes, b, C, D, C] coefficient tensors: z_ip(theta) = 2 x~_ip (x~_i . theta - y_i) is exactly
    affine, so the lower regime is min(z, gamma) itself, the upper max(z, -gamma), and the
    constants are clip of its exact range (IBP's per-sample bounds, which also give the IBP step
    it is intersected with)."""
    g, lam = settings.clip, settings.contraction
    n = x.shape[0]
    dt = boxes.lo.dtype
    s = settings.lr / n
    dev = boxes.lo.device
    xt = torch.cat([x, torch.ones(n, 1, dtype=dt, device=dev)], 1).T.contiguous()   # [P, n] (W then b)
    xp, xn = xt.clamp(min=0), xt.clamp(max=0)
    P = xt.shape[0]
    verts = torch.tensor(list(itertools.product((0, 1), repeat=P)), dtype=torch.bool, device=dev)   # [V, P]
    kk = subs.to(dev).clamp(max=n).to(torch.long)
    Q = len(kk)
    own = torch.arange(Q, device=dev) if src is None else src.to(dev)
    cap = _caps(x, y)
    two_x = 2 * xt                                                             # [P, n]
    inf = torch.tensor(float("inf"), dtype=dt, device=dev)
    lo_out = torch.empty(Q, P, dtype=dt, device=dev)
    hi_out = torch.empty(Q, P, dtype=dt, device=dev)
    step = max(1, chunk_elements(dev) // ((2 ** P) * n * P))
    for a in range(0, Q, step):
        qs = torch.arange(a, min(Q, a + step), device=dev)
        bq, inv = torch.unique(own[qs], return_inverse=True)
        lo, hi = boxes.lo[bq], boxes.hi[bq]                                     # [M, P]
        M = lo.shape[0]
        ws = [WORKSPACE.get(f"crown.mse.{j}", (M, P, n), dt, dev) for j in range(8)]   # reused: see Workspace
        rw = [WORKSPACE.get(f"crown.mse.r{j}", (M, n), dt, dev) for j in range(4)]
        r_lo = torch.mm(lo, xp, out=rw[0]).add_(torch.mm(hi, xn, out=rw[1])).sub_(y)   # exact residual range [M, n]
        r_hi = torch.mm(hi, xp, out=rw[2]).add_(torch.mm(lo, xn, out=rw[3])).sub_(y)
        z1 = torch.mul(two_x, r_lo.unsqueeze(1), out=ws[0])                     # [M, P, n]
        z2 = torch.mul(two_x, r_hi.unsqueeze(1), out=ws[1])
        zl = torch.minimum(z1, z2, out=ws[2])
        zu = torch.maximum(z1, z2, out=ws[1])
        cl = torch.clamp(zl, -g, g, out=ws[0])                                  # IBP = the constants
        cu = torch.clamp(zu, -g, g, out=ws[3])
        # regimes as 0/1 floats: lower min(z, gamma) where zl >= -gamma, upper max(z, -gamma) where
        # zu <= gamma (records within the caps only)
        f_l = WORKSPACE.get("crown.mse.fl", (M, P, n), dt, dev).copy_(
            torch.ge(zl, -g, out=WORKSPACE.get("crown.mse.bl", (M, P, n), torch.bool, dev)))
        f_u = WORKSPACE.get("crown.mse.fu", (M, P, n), dt, dev).copy_(
            torch.le(zu, g, out=WORKSPACE.get("crown.mse.bu", (M, P, n), torch.bool, dev)))
        if not bool(cap.all()):
            f_l.mul_(cap)
            f_u.mul_(cap)
        k_q = kk[qs]
        kg = (k_q.to(dt) * g).unsqueeze(-1)
        ibp_lo = lam * lo[inv] - s * (cu.sum(-1)[inv] - top_sum(cu, k_q, inv, largest=False) + kg)
        ibp_hi = lam * hi[inv] - s * (cl.sum(-1)[inv] - top_sum(cl, k_q, inv, largest=True) - kg)
        # where(reg, min(z, gamma), c) as one clamp with per-entry bounds (-inf, gamma) or (c, c):
        # the same numbers (min(max(z, c), c) = c) without torch.where, which is slow.  The bounds
        # themselves without torch.where, exactly: c lies in [-gamma, gamma], f in {0, 1}, so
        # s = f*2g - g is exactly +gamma (f = 1) or -gamma, and s * -inf is -inf or +inf
        s_l = torch.mul(f_l, 2 * g, out=ws[4]).sub_(g)
        hi_l = torch.maximum(cl, s_l, out=ws[5]).unsqueeze(1)
        lo_l = torch.minimum(cl, s_l.mul_(-inf), out=ws[4]).unsqueeze(1)
        s_u = torch.mul(f_u, -2 * g, out=ws[6]).add_(g)                         # -gamma (f = 1) or +gamma
        lo_u = torch.minimum(cu, s_u, out=ws[7]).unsqueeze(1)
        hi_u = torch.maximum(cu, s_u.mul_(-inf), out=ws[6]).unsqueeze(1)
        th = torch.where(verts.unsqueeze(0), hi.unsqueeze(1), lo.unsqueeze(1))  # [M, V, P]
        rv = torch.matmul(th, xt, out=WORKSPACE.get("crown.mse.rv", (M, th.shape[1], n), dt, dev)).sub_(y)   # [M, V, n]
        V = th.shape[1]
        zv = torch.mul(two_x.unsqueeze(0), rv.unsqueeze(2),
                       out=WORKSPACE.get("crown.mse.zv", (M, V, P, n), dt, dev))   # [M, V, P, n]
        Lv = torch.clamp(zv, lo_l, hi_l, out=WORKSPACE.get("crown.mse.Lv", (M, V, P, n), dt, dev))
        # exact bounds of Lv and Uv over the chunk's boxes and vertices, for the shared top-k
        # candidates (aggregate.top_values): zv = fl(2 x~ * rv) is monotone in rv (a fixed factor),
        # and clamp(z, lo, hi) = min(max(z, lo), hi) is monotone in z, lo and hi, so the extreme
        # residuals and the extreme clamp bounds over the boxes bound every entry
        r_max, r_min = rv.amax((0, 1)), rv.amin((0, 1))                         # [n]
        za, zb = two_x * r_max, two_x * r_min                                   # [P, n]
        z_hi, z_lo = torch.maximum(za, zb), torch.minimum(za, zb)

        def extremes(lo_b, hi_b):
            lo_b, hi_b = lo_b.squeeze(1), hi_b.squeeze(1)
            return (torch.clamp(z_lo, lo_b.amin(0), hi_b.amin(0)), torch.clamp(z_hi, lo_b.amax(0), hi_b.amax(0)))
        bnd_l, bnd_u = extremes(lo_l, hi_l), extremes(lo_u, hi_u)
        Uv = torch.clamp(zv, lo_u, hi_u, out=zv)
        # top-k of Lv + gamma and of gamma - Uv: selected from Lv, Uv and shifted (the same numbers)
        top_l = top_sum(Lv, k_q, inv, largest=True, transform=lambda t: t + g, bounds=bnd_l)   # [q, V, P]
        top_u = top_sum(Uv, k_q, inv, largest=False, transform=lambda t: g - t, bounds=bnd_u)
        up = lam * th[inv] - s * Lv.sum(-1)[inv] + s * top_l
        dn = lam * th[inv] - s * Uv.sum(-1)[inv] - s * top_u
        mag = torch.maximum(hi, -lo).amax(-1, keepdim=True)[inv]
        marg = 1e-13 * (mag + settings.lr * g)
        lo_q = torch.maximum(ibp_lo, dn.amin(1) - marg)
        hi_q = torch.minimum(ibp_hi, up.amax(1) + marg)
        lo_out[qs], hi_out[qs] = _meet(lo_q, hi_q, mag, settings)
    return Interval(lo_out, hi_out)


def milp_steps(prob: WindowProblem, theta, subst, rows: _Rows, new, eps: float) -> None:
    """MSE: per slot and coordinate, the clipped gradient clip(z), z = 2 x~_p (x~ . theta - y), by
    big-M pairs over z's range on the box widened by the rounding slack delta; the gradient used,
    G, within 2 g s + delta of it; the update equations within eps."""
    F, b, P = prob.xt.shape
    g = prob.clip
    for t in range(F):
        lo_t, hi_t = prob.boxes_lo[t], prob.boxes_hi[t]
        mag_t = np.maximum(np.abs(lo_t), np.abs(hi_t))
        th = theta[t]
        G_cols = []
        for i in range(b):
            x = prob.xt[t, i]
            yi = float(prob.y[t, i])
            s = subst[prob.rec[t, i]]
            # residual r = x . theta - y over the box: its range (rounding covered by delta)
            r_lo = float(np.sum(np.minimum(x * lo_t, x * hi_t)) - yi)
            r_hi = float(np.sum(np.maximum(x * lo_t, x * hi_t)) - yi)
            for p in range(P):
                Gc = new(-g, g)
                G_cols.append((p, Gc))
                scale = 2.0 * x[p]
                zc = scale * x                      # z = zc . theta - scale * y
                z0 = -scale * yi
                delta = gradient_slack(scale=scale, x=x, mag=mag_t, y=yi)
                zl = min(scale * r_lo, scale * r_hi) - delta
                zu = max(scale * r_lo, scale * r_hi) + delta
                if not (np.isfinite(zc).all() and math.isfinite(z0) and math.isfinite(zl) and math.isfinite(zu)):
                    continue                        # overflows in float64: G stays free in [-g, g]
                if zu <= -g or zl >= g:             # surely clipped: constant
                    cols, coefs, const = [], [], (-g if zu <= -g else g)
                else:
                    cols, coefs, const = list(th), list(zc), z0
                    if zu > g:                      # u = max(z - g, 0) leaves
                        u = new(0.0, zu - g); du = new(0.0, 1.0, True)
                        rows.add(th + [u], np.concatenate([zc, [-1.0]]), hi=g - z0)        # u >= z - g
                        rows.add([u, du], [1.0, -(zu - g)], hi=0.0)                        # u <= U d
                        # u <= z - g - L (1 - d), L = zl - g
                        rows.add(th + [u, du], np.concatenate([-zc, [1.0, -(zl - g)]]), hi=z0 - g - (zl - g))
                        cols.append(u); coefs.append(-1.0)
                    if zl < -g:                     # v = max(-g - z, 0) enters
                        v = new(0.0, -g - zl); dv = new(0.0, 1.0, True)
                        rows.add(th + [v], np.concatenate([zc, [1.0]]), lo=-g - z0)        # v >= -g - z
                        rows.add([v, dv], [1.0, -(-g - zl)], hi=0.0)                       # v <= U d
                        # v <= -g - z - L (1 - d), L = -g - zu
                        rows.add(th + [v, dv], np.concatenate([zc, [1.0, -(-g - zu)]]), hi=-g - z0 - (-g - zu))
                        cols.append(v); coefs.append(1.0)
                # |G - clip(z)| <= 2 g s + delta
                cc = np.asarray(coefs, dtype=np.float64)
                rows.add([Gc] + list(cols) + [s], np.concatenate([[1.0], -cc, [-2 * g]]), hi=const + delta)
                rows.add([Gc] + list(cols) + [s], np.concatenate([[1.0], -cc, [2 * g]]), lo=const - delta)
        # theta_{t+1} = lam theta_t - lr/b sum_i G, up to the update's rounding eps
        for p in range(P):
            gs = [c for (q, c) in G_cols if q == p]
            rows.add([theta[t + 1][p], theta[t][p]] + gs,
                     np.concatenate([[1.0, -prob.lam], np.full(len(gs), prob.lr / b)]), lo=-eps, hi=eps)


LOSS_RULES["mse"] = LossRule("mse", crown_coupled=mse_coupled_step, milp_steps=milp_steps, crowntt_neurons=HeadNeurons)
