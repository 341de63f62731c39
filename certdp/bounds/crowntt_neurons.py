"""The per-step neurons of CROWN through time (``certificate=crowntt``, certdp/bounds/crowntt.py,
whose docstring derives them): the hinge head's clipped-margin neurons and the generic
single-layer head's (mse, softmax ce) clipped-gradient neurons, with their outward-rounded linear
relaxations."""

from __future__ import annotations

import torch

from certdp.bounds.crown import head_index

U = 2.0 ** -53    # unit roundoff of float64


def rounding_gamma(m: int) -> float:
    return m * U / (1 - m * U)


def per_objective(v: torch.Tensor) -> torch.Tensor:
    """A line coefficient [rows, b] shared by every objective as [rows, 1, b]; one chosen per
    objective ([rows, q, b], the slope optimisation of certdp/bounds/crowntt_refine.py) unchanged."""
    return v.unsqueeze(1) if v.dim() == 2 else v


def _outward_line(slope: torch.Tensor, offset: torch.Tensor, vmax: torch.Tensor, up: bool,
                  scale: float = 1.0) -> torch.Tensor:
    """Offset shifted outward against the rounding of a line's coefficients: the evaluated line
    slope * v + offset (|v| <= vmax) differs from the exact line it stands for by less than
    4u (|slope| vmax + |offset| + scale), ``scale`` the height of the relaxed function."""
    m = 4 * U * (slope.abs() * vmax + offset.abs() + scale)
    return offset + m if up else offset - m


def _clip_chord(ul: torch.Tensor, uu: torch.Tensor, g: float):
    """Parallel-chord relaxation of clip(., -g, g) on [ul, uu]: (a, b, off_l, off_u, cl, cu) with
    a u + b + off_l <= clip(u) <= a u + b + off_u on [ul, uu], a >= 0, cl/cu = clip of the ends.

    The chord through the clipped end points; clip - chord is piecewise linear and zero at both
    ends with kinks at -g and g only, so its extremes are at the kinks inside the interval.  Exact
    (zero offsets) when the interval is surely clipped or surely unclipped, up to the outward
    rounding margin 8u (|a| max|u| + |b| + g) (a, b and the kink values are a few operations each)."""
    cl, cu = ul.clamp(-g, g), uu.clamp(-g, g)
    den = uu - ul
    a = torch.where(den > 0, (cu - cl) / den.clamp(min=1e-300), torch.zeros_like(den))
    b = cl - a * ul
    in_hi = ((ul < g) & (uu > g)).to(ul.dtype)
    in_lo = ((ul < -g) & (uu > -g)).to(ul.dtype)
    dev_hi = (g - a * g - b) * in_hi
    dev_lo = (-g + a * g - b) * in_lo
    m = 8 * U * (a * torch.maximum(ul.abs(), uu.abs()) + b.abs() + g)
    off_l = dev_lo.clamp(max=0) + dev_hi.clamp(max=0) - m
    off_u = dev_hi.clamp(min=0) + dev_lo.clamp(min=0) + m
    return a, b, off_l, off_u, cl, cu


class HingeNeurons:
    """The hinge head's neurons a'_i (certdp/bounds/crowntt.py docstring); one step's data is a dict."""

    def __init__(self, model, settings):
        self.g, self.lam = float(settings.clip), float(settings.contraction)

    def reference_step(self, theta, xb, yb, eta):
        b = xb.shape[0]
        xt = torch.cat([xb, torch.ones(b, 1, dtype=xb.dtype)], 1)
        w = yb.to(xb.dtype).view(-1, 1) * xt                                   # [b, P]
        c = (-w).clamp(-self.g, self.g)
        m = w @ theta
        a = (m < 1.0).to(xb.dtype)
        s = a @ c
        nxt = self.lam * theta - eta * s
        P = theta.shape[0]
        # |computed tau - exact tau|, doubled so that tau -+ err_tau rounds to the safe side
        err_tau = 2 * rounding_gamma(P + 2) * (w.abs() @ theta.abs() + 1.0)
        r = rounding_gamma(b + 3) * (self.lam * theta.abs() + eta * (a.abs() @ c.abs())) + 1e-300
        st = {"w": w, "c": c, "a": a, "tau": 1.0 - m, "err_tau": err_tau, "r": r,
              "wn": w.abs().sum(-1), "cn": c.abs()}
        return nxt, st

    def objectives(self, st):
        return torch.cat([st["w"], -st["w"]], 0)                               # [2b, P]

    def relax(self, st, ub, dmax):
        """Lines from the upper bounds ub [K, 2b] of +-v (v = w_i . delta_t)."""
        b = st["w"].shape[0]
        vU, vL = ub[:, :b], -ub[:, b:]
        cap = st["wn"] * dmax                                                  # |v| <= ||w||_1 D_t
        vU, vL = torch.minimum(vU, cap), torch.maximum(vL, -cap)
        tlo = st["tau"] - st["err_tau"]
        thi = st["tau"] + st["err_tau"]
        sure1 = vU < tlo
        sure0 = vL >= thi
        unc = ~(sure1 | sure0)
        dl, du = tlo - vL, vU - thi
        use_l1 = unc & (dl > du) & (dl > 0)
        use_u1 = unc & (du > dl) & (du > 0)
        zero = torch.zeros_like(vU)
        al = torch.where(use_l1, -1.0 / dl.clamp(min=1e-300), zero)
        bl = torch.where(use_l1, tlo / dl.clamp(min=1e-300), sure1.to(vU.dtype))
        au = torch.where(use_u1, -1.0 / du.clamp(min=1e-300), zero)
        bu = torch.where(use_u1, vU / du.clamp(min=1e-300), (~sure0).to(vU.dtype))
        vmax = torch.maximum(vL.abs(), vU.abs())
        bl = torch.where(use_l1, _outward_line(al, bl, vmax, False), bl)
        bu = torch.where(use_u1, _outward_line(au, bu, vmax, True), bu)
        # the activation a'_i can take over the intermediate bounds (for a substituted slot)
        return {"al": al, "bl": bl, "au": au, "bu": bu, "vL": vL, "vU": vU, "uncertain": unc.sum(-1)}

    def backsub(self, st, rx, lam_, eta):
        """One step backwards from Lambda_{t+1} = ``lam_`` [K, q, P] (the lines of ``rx`` either
        shared by the objectives, [K, b], or one per objective, [K, q, b]): (the coefficient added to
        lam * Lambda_{t+1}, const [K, q], mass [K, q], comb [K, q]); mass: magnitudes whose
        rounding the caller charges at gamma_N (the const terms, and kappa's error times
        |a' - a| <= 1); comb: sum_n |kappa_n slope_n| ||w_n||_1 (Lambda_t's recombination)."""
        kap = -eta * (lam_ @ st["c"].T)                                        # [K, q, b]
        pos = kap >= 0
        al = torch.where(pos, per_objective(rx["au"]), per_objective(rx["al"]))
        be = torch.where(pos, per_objective(rx["bu"]), per_objective(rx["bl"]))
        diff = be - st["a"]
        const = (kap * diff).sum(-1)
        ka = kap * al
        coef = ka @ st["w"]
        # substituted slot i (certdp/bounds/crowntt.py docstring): its true term minus the relaxed one is
        # -eta Lambda . s - kappa_i line_i(v) <= eta gamma ||Lambda||_1 + max over v in [vL, vU]
        vL, vU = rx["vL"].unsqueeze(1), rx["vU"].unsqueeze(1)
        gain = eta * self.g * lam_.abs().sum(-1, keepdim=True) + torch.maximum(
            -kap * (al * vL + be), -kap * (al * vU + be))
        mass = ((kap.abs() * (diff.abs() + al.abs() * torch.maximum(vL.abs(), vU.abs()) + be.abs())).sum(-1)
                + 2 * eta * (lam_.abs() @ st["cn"].T).sum(-1))
        comb = ka.abs() @ st["wn"]
        return coef, const, mass, comb, gain


class HeadNeurons:
    """Generic single-layer head (mse, softmax ce): neurons g_icj (certdp/bounds/crowntt.py docstring)."""

    def __init__(self, model, settings):
        self.model, self.loss = model, model.loss
        self.g, self.lam = float(settings.clip), float(settings.contraction)
        d, self.C = model.widths
        self.D = d + 1
        self.idx = head_index(model).reshape(-1)                                # [C*D] flat positions

    def reference_step(self, theta, xb, yb, eta):
        b, C, D = xb.shape[0], self.C, self.D
        dt = xb.dtype
        xt = torch.cat([xb, torch.ones(b, 1, dtype=dt)], 1)                    # [b, D]
        Th = theta[self.idx].view(C, D)
        z = xt @ Th.T                                                           # [b, C]
        phi = self.loss.grad(z, yb)                                             # [b, C]
        g = (phi.unsqueeze(-1) * xt.unsqueeze(1)).clamp(-self.g, self.g)        # [b, C, D]
        nxt = theta.clone()
        nxt[self.idx] = (self.lam * Th - eta * g.sum(0)).reshape(-1)
        P = theta.shape[0]
        r = torch.zeros(P, dtype=dt)
        r[self.idx] = (rounding_gamma(b + 3) * (self.lam * Th.abs() + eta * g.abs().sum(0))).reshape(-1) + 1e-300
        err_z = rounding_gamma(D + 1) * (xt.abs() @ Th.abs().T) + 1e-300               # [b, C]
        A = torch.zeros(b, C, P, dtype=dt)                                      # Dz_ic = A[i, c] . delta
        blocks = self.idx.view(C, D)
        for c in range(C):
            A[:, c, blocks[c]] = xt
        return nxt, {"xt": xt, "z": z, "y": yb, "g": g, "err_z": err_z, "r": r, "A": A, "eta": eta,
                     "xn": xt.abs().sum(-1)}

    def objectives(self, st):
        A = st["A"].reshape(-1, st["A"].shape[-1])                              # [b*C, P]
        return torch.cat([A, -A], 0)

    def relax(self, st, ub, dmax):
        K = ub.shape[0]
        b, C, D = st["xt"].shape[0], self.C, self.D
        q = b * C
        dzu, dzl = ub[:, :q].view(K, b, C), -ub[:, q:].view(K, b, C)
        cap = (st["xn"] * dmax).view(1, b, 1)                                   # |Dz| <= ||x~||_1 D_t
        dzu, dzl = torch.minimum(dzu, cap), torch.maximum(dzl, -cap)
        e = st["err_z"].unsqueeze(0)
        zl, zu = st["z"] + dzl - e, st["z"] + dzu + e                           # the logit box
        zr = 4 * U * (st["z"].abs() + torch.maximum(dzl.abs(), dzu.abs()) + e)
        zl, zu = zl - zr, zu + zr
        al, au, bl, bu = self.loss.grad_linear_bounds(zl, zu, st["y"])[:4]      # [K|1, b, C, C'], [K, b, C]
        al, au = al.expand(K, -1, -1, -1), au.expand(K, -1, -1, -1)
        # offsets at Dz = 0 (phi >= al . (z~ + Dz) + bl - |al| . e  and the mirror image)
        z0 = st["z"].unsqueeze(0).unsqueeze(-2)                                 # [1, b, 1, C]
        e4 = st["err_z"].unsqueeze(0).unsqueeze(-2)
        ol = (al * z0).sum(-1) + bl - (al.abs() * e4).sum(-1)                  # [K, b, C]
        ou = (au * z0).sum(-1) + bu + (au.abs() * e4).sum(-1)
        pl, pu = self.loss.grad_bounds(zl, zu, st["y"])                         # exact phi range [K, b, C]
        xt = st["xt"]
        xp, xn = xt.clamp(min=0).view(1, b, 1, D), xt.clamp(max=0).view(1, b, 1, D)
        ul = pl.unsqueeze(-1) * xp + pu.unsqueeze(-1) * xn                      # u = phi_c x~_j range
        uu = pu.unsqueeze(-1) * xp + pl.unsqueeze(-1) * xn
        a, bb, offl, offu, cl, cu = _clip_chord(ul, uu, self.g)                  # [K, b, C, D]
        pos = (xt >= 0).view(1, b, 1, D)
        xj = xt.view(1, b, 1, D)
        # lower line of g: a x~_j (phi-bound chosen by the sign of x~_j) + b + off_l, slopes in Dz
        sl = a.unsqueeze(-1) * xj.unsqueeze(-1) * torch.where(pos.unsqueeze(-1), al.unsqueeze(-2), au.unsqueeze(-2))
        su = a.unsqueeze(-1) * xj.unsqueeze(-1) * torch.where(pos.unsqueeze(-1), au.unsqueeze(-2), al.unsqueeze(-2))
        betal = a * xj * torch.where(pos, ol.unsqueeze(-1), ou.unsqueeze(-1)) + bb + offl
        betau = a * xj * torch.where(pos, ou.unsqueeze(-1), ol.unsqueeze(-1)) + bb + offu
        # rounding (certdp/bounds/crowntt.py docstring): the evaluated line differs from its exact composition by
        # a few ulps of the magnitudes of its parts; shift the offsets outward by 16u of them
        mag_o = (torch.maximum(al.abs(), au.abs()) * (z0.abs() + e4)).sum(-1) + torch.maximum(bl.abs(), bu.abs())
        dzm = torch.maximum(dzl.abs(), dzu.abs()).view(K, b, 1, 1, C)
        mag = ((torch.maximum(sl.abs(), su.abs()) * dzm).sum(-1) + a * xj.abs() * mag_o.unsqueeze(-1)
               + bb.abs() + torch.maximum(offl.abs(), offu.abs()) + self.g)
        betal = betal - 16 * U * mag
        betau = betau + 16 * U * mag
        parallel = al is au or bool(torch.equal(al, au))
        unc = (ul < uu).flatten(1).sum(-1)
        return {"sl": sl, "su": None if parallel else su, "betal": betal, "betau": betau,
                "g_lo": cl, "g_hi": cu, "dzl": dzl, "dzu": dzu, "uncertain": unc}

    def backsub(self, st, rx, lam_, eta):
        K, q, P = lam_.shape
        b, C, D = st["xt"].shape[0], self.C, self.D
        kap = -eta * lam_[:, :, self.idx].view(K, q, 1, C, D)                   # coefficient of g_icj
        pos = kap >= 0
        be = torch.where(pos, rx["betau"].unsqueeze(1), rx["betal"].unsqueeze(1))   # [K, q, b, C, D]
        diff = be - st["g"]
        const = (kap * diff).sum((-1, -2, -3))
        if rx["su"] is None:
            coef = torch.einsum("kqcd,kbcde->kqbe", kap[:, :, 0], rx["sl"])     # [K, q, b, C']
        else:
            s = torch.where(pos.unsqueeze(-1), rx["su"].unsqueeze(1), rx["sl"].unsqueeze(1))
            coef = (kap.unsqueeze(-1) * s).sum((-2, -3))
        kb = (kap * be).sum((-1, -2))
        add = torch.zeros(K, q, P, dtype=lam_.dtype)
        add[:, :, self.idx] = torch.einsum("kqbe,bd->kqed", coef, st["xt"]).reshape(K, q, -1)
        # substituted slot i (certdp/bounds/crowntt.py docstring): its true term kappa . (s_i - g~_i) minus the relaxed
        # one kappa . (line_i(Dz_i) - g~_i) is at most eta gamma ||Lambda||_1 (the s_i part) plus the
        # smaller of  max over g_i in [g_lo, g_hi] of -kappa . g_i  (kappa . line_i >= kappa . g_i(theta'))
        # and  max over Dz_i in its box of -kappa . line_i(Dz_i) = -coef . Dz_i - kb
        sg = eta * self.g * lam_.abs().sum(-1, keepdim=True)
        g_old = torch.maximum(-kap * rx["g_lo"].unsqueeze(1), -kap * rx["g_hi"].unsqueeze(1)).sum((-1, -2))
        dzl, dzu = rx["dzl"].unsqueeze(1), rx["dzu"].unsqueeze(1)
        g_new = -kb + torch.maximum(-coef * dzl, -coef * dzu).sum(-1)
        gain = sg + torch.minimum(g_old, g_new)
        # kappa = -eta Lambda_cj errs by u |kappa|, times |g' - g~| <= 2 gamma (and |g| <= gamma in
        # the gain), for each record
        mass = ((kap.abs() * (diff.abs() + be.abs())).sum((-1, -2, -3)) + 3 * self.g * b * kap.abs().sum((-1, -2, -3))
                + (coef.abs() * torch.maximum(dzl.abs(), dzu.abs())).sum((-1, -2)))
        sabs = rx["sl"].abs() if rx["su"] is None else torch.maximum(rx["sl"].abs(), rx["su"].abs())
        comb = torch.einsum("kqcd,kbcde,b->kq", kap[:, :, 0].abs(), sabs, st["xn"])
        return add, const, mass, comb, gain
