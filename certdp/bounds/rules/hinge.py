"""The bound rules of the hinge loss: its linear gradient bounds are interval constants, so
CROWN's joint single-layer step is the IBP step; the MILP window aggregates each step's slots
(module docstring of certdp/bounds/milp.py); crowntt relaxes the hinge's own neurons.  (Its
interval and linear gradient bounds live with the loss, :class:`certdp.losses.Hinge`.)"""

from __future__ import annotations

import math

import numpy as np

from certdp.bounds.base import LOSS_RULES, LossRule
from certdp.bounds.crowntt_neurons import HingeNeurons
from certdp.bounds.milp_window import WindowProblem, _Rows, gradient_slack


def milp_steps(prob: WindowProblem, theta, subst, rows: _Rows, new, eps: float) -> None:
    """The hinge window's steps, aggregated per step (module docstring of certdp/bounds/milp.py).

    Slot i of step t (record j, s_j its substitution binary) contributes u_i kappa_i + e_i with
    u_i = a_i (1 - s_j) (the original record's clipped gradient a_i kappa_i, kappa_i =
    clip(-y_i x~_i), a_i = 1[m_i < 1]) and e_i in [-g s_j, g s_j]^P (a substituted record's
    gradient: anything in [-g, g]).  For binary a, s this is exactly G_i of the per-slot encoding
    (s_j = 0: G_i = a_i kappa_i; s_j = 1: G_i = e_i, free in [-g, g]), with u_i linearised by
    u <= a, u <= 1 - s, u >= a - s (exact at binary a, s).  The e_i of a step enter only through
    their sum E_t = sum_i e_i, whose exact range is |E_t,p| <= g sum_{i in B_t} s_j(i): one
    column per step and coordinate instead of b.  The margin m = y x~ . theta that training
    computes is within delta_m of the LP's, so the indicator rows leave delta_m around 1."""
    F, b, P = prob.xt.shape
    g, eta = prob.clip, prob.lr / b
    for t in range(F):
        lo_t, hi_t = prob.boxes_lo[t], prob.boxes_hi[t]
        mag_t = np.maximum(np.abs(lo_t), np.abs(hi_t))
        th = theta[t]
        cols: list[list] = [[] for _ in range(P)]
        coefs: list[list] = [[] for _ in range(P)]
        const = np.zeros(P)
        s_step = []
        for i in range(b):
            x = prob.xt[t, i]
            yi = float(prob.y[t, i])
            s = subst[prob.rec[t, i]]
            s_step.append(s)
            kappa = np.clip(-yi * x, -g, g)
            dm = gradient_slack(scale=1.0, x=x, mag=mag_t, y=0.0)
            # the range of both margins (training's and the LP's) over the box
            m_lo = float(np.sum(np.minimum(yi * x * lo_t, yi * x * hi_t))) - 2 * dm
            m_hi = float(np.sum(np.maximum(yi * x * lo_t, yi * x * hi_t))) + 2 * dm
            finite = math.isfinite(m_lo) and math.isfinite(m_hi) and np.isfinite(x).all()
            if finite and m_lo >= 1.0:
                continue                                    # surely inactive: a = 0, u = 0
            if finite and m_hi < 1.0:
                # surely active: a = 1, u = 1 - s
                const += kappa
                for p in range(P):
                    cols[p].append(s); coefs[p].append(-float(kappa[p]))
                continue
            act = new(0.0, 1.0, True)
            if finite:
                # m <= 1 + dm + (mU - 1 - dm)(1 - a);  m >= 1 - dm - (1 - dm - mL) a
                rows.add(th + [act], np.concatenate([yi * x, [m_hi - 1.0 - dm]]), hi=m_hi)
                rows.add(th + [act], np.concatenate([yi * x, [1.0 - dm - m_lo]]), lo=1.0 - dm)
            # (a margin that overflows float64 leaves a free)
            u = new(0.0, 1.0)
            rows.add([u, act], [1.0, -1.0], hi=0.0)         # u <= a
            rows.add([u, s], [1.0, 1.0], hi=1.0)            # u <= 1 - s
            rows.add([u, act, s], [1.0, -1.0, 1.0], lo=0.0)  # u >= a - s
            for p in range(P):
                if kappa[p] != 0.0:
                    cols[p].append(u); coefs[p].append(float(kappa[p]))
        for p in range(P):
            E = new(-g * b, g * b)
            rows.add([E] + s_step, np.concatenate([[1.0], np.full(b, -g)]), hi=0.0)
            rows.add([E] + s_step, np.concatenate([[1.0], np.full(b, g)]), lo=0.0)
            # theta_{t+1} = lam theta_t - eta (const + sum coefs . cols + E), up to eps
            c0 = -eta * float(const[p])
            rows.add([theta[t + 1][p], th[p], E] + cols[p],
                     np.concatenate([[1.0, -prob.lam, eta], eta * np.asarray(coefs[p], dtype=np.float64)]),
                     lo=c0 - eps, hi=c0 + eps)


LOSS_RULES["hinge"] = LossRule("hinge", crown_joint=False, milp_steps=milp_steps, crowntt_neurons=HingeNeurons)
