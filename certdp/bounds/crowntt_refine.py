"""Slope optimisation of the final bounds of CROWN through time (``certificate.alpha_iters``;
the engine is certdp/bounds/crowntt.py, whose docstring derives the bounds used here).

Why: the area rule picks, for every uncertain hinge neuron, one of two lower lines (L0 = 0,
L1 = (tau - v)/(tau - vL)) and one of two upper lines (U0 = 1, U1 = (vU - v)/(vU - tau)), the same
for every objective.  Every convex combination

    lower_th(v) = th_l L1(v) + (1 - th_l) L0,      upper_th(v) = (1 - th_u) U0 + th_u U1(v),

with th_l, th_u in [0, 1] is again valid on [vL, vU] (the two lines are), so each objective (a
row's bound of +-e_p at the window's end) may use its own th for every neuron of every step
(alpha-CROWN, Xu et al. 2021, applied to the training steps as layers).  On blobs at the paper's
settings (radius 1 split per record) 20 iterations take T_1's l1 width from 4.83 to 4.38
(``benchmarks/epoch_certs.py --only blobs_alpha``).

Soundness: the intermediate bounds (vL, vU of every record-step) are the window's, unchanged, and
the back-substitution (``_Window.bound``, with its rounding terms) is run with the mixed lines, so
the value at *every* parameter vector is an upper bound for every neighbour within the row's radius;
the minimum over the iterations, and over the area-rule bound, is therefore one too.  The mixed
lines are evaluated in floating point: their offsets are shifted outward by 16u of the magnitudes
(|slope| max|v| + |offset| + 1), more than the few roundings of th / (tau - vL) and the products.
Gradients (projected Adam on th, started at the area rule's choice) only steer the search; th is
clamped to [0, 1] where the lines are built, so every iterate is a valid mixture.

Cost: ``iters`` + 1 back-substitutions (with gradients) of the 2P final objectives per row, no
intermediate bounds: on the blobs window (202 rows, 200 steps of 20 records) about 7 s of CPU per
iteration, i.e. 20 iterations add ~150 s to the ~100 s of the area-rule bounds."""

from __future__ import annotations

import torch

from certdp.bounds.crowntt_neurons import U

# Adam step on th (projected back to [0, 1] after each step; measured on blobs: 20 steps at 0.2
# reach what 40 steps on sigmoid logits reach), and the rows optimised together (memory: rows x 2P
# x steps x b x 2 parameters)
ALPHA_LR = 0.2
ALPHA_CHUNK = 16


def optimise_slopes(win, L: torch.Tensor, *, iters: int) -> torch.Tensor:
    """Upper bounds [rows, q] of L[q] . delta at the end of the window ``win`` (a crowntt
    ``_Window`` after its run, hinge neurons) with per-objective line mixtures optimised for
    ``iters`` Adam steps; rows of radius 0 keep +inf (their area-rule bound is used)."""
    F = len(win.steps)
    R_all, q = len(win.ks), L.shape[0]
    dt = win.dt
    out = torch.full((R_all, q), float("inf"), dtype=dt)
    geo = []
    for t in range(F):
        st, rx = win.st[t], win.rx[t]
        vL, vU = rx["vL"], rx["vU"]
        tlo, thi = st["tau"] - st["err_tau"], st["tau"] + st["err_tau"]
        sure1, sure0 = vU < tlo, vL >= thi
        unc = ~(sure1 | sure0)
        dl, du = tlo - vL, vU - thi
        # the area rule's lines are the endpoints th = 1 (L1 / U1) and th = 0 (L0 / U0)
        geo.append({"okl": unc & (dl > 0), "oku": unc & (du > 0), "dl": dl.clamp(min=1e-300),
                    "du": du.clamp(min=1e-300), "tlo": tlo.expand_as(vL), "s1": sure1.to(dt), "n0": (~sure0).to(dt),
                    "vL": vL, "vU": vU, "vmax": torch.maximum(vL.abs(), vU.abs()),
                    "l1": rx["al"] != 0, "u1": rx["au"] != 0})
    todo = (win.ks >= 1).nonzero().flatten()
    with torch.enable_grad():
        for s in range(0, len(todo), ALPHA_CHUNK):
            rows = todo[s:s + ALPHA_CHUNK]
            gs = [{k: v[rows] for k, v in g.items()} for g in geo]
            params = []
            for g in gs:
                p = torch.stack([g["l1"], g["u1"]], -1).to(dt)                             # [r, b, 2]
                params.append(p.unsqueeze(1).expand(-1, q, -1, -1).clone().requires_grad_(True))
            opt = torch.optim.Adam(params, lr=ALPHA_LR)

            def lines(t, gs=gs, params=params):
                g = gs[t]
                th = params[t].clamp(0.0, 1.0)
                thl, thu = th[..., 0], th[..., 1]
                okl, oku = g["okl"].unsqueeze(1), g["oku"].unsqueeze(1)
                dl, du, vmax = g["dl"].unsqueeze(1), g["du"].unsqueeze(1), g["vmax"].unsqueeze(1)
                al = torch.where(okl, -thl / dl, 0.0)
                bl = torch.where(okl, thl * g["tlo"].unsqueeze(1) / dl, g["s1"].unsqueeze(1))
                au = torch.where(oku, -thu / du, 0.0)
                bu = torch.where(oku, (1 - thu) + thu * g["vU"].unsqueeze(1) / du, g["n0"].unsqueeze(1))
                # outward against the rounding of the mixed coefficients (module docstring)
                bl = torch.where(okl, bl - 16 * U * (al.abs() * vmax + bl.abs() + 1), bl)
                bu = torch.where(oku, bu + 16 * U * (au.abs() * vmax + bu.abs() + 1), bu)
                return {"al": al, "bl": bl, "au": au, "bu": bu, "vL": g["vL"], "vU": g["vU"]}

            best = torch.full((len(rows), q), float("inf"), dtype=dt)
            for it in range(iters + 1):
                ub = win.bound(L, F, rows=rows, lines=lines)
                val = ub.detach()
                best = torch.minimum(best, torch.where(torch.isfinite(val), val, best))
                if it == iters:
                    break
                opt.zero_grad()
                ub.sum().backward()
                opt.step()
                with torch.no_grad():
                    for p in params:
                        p.clamp_(0.0, 1.0)
            out[rows] = best
    return out
