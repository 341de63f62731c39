"""CROWN through time: linear bounds on a whole window of training steps of a single-layer head
(``certificate=crowntt``).

Per-step engines (IBP, CROWN, MILP windows restarted from boxes) forget after every step that all
neighbouring trajectories differ from the nominal one only through the same few substituted
records: once the box is wide, every record whose margin (or residual) range straddles a kink adds
its full clipped gradient in both directions, every step, and the box grows at the maximal rate.
This engine keeps the correlation by bounding the *deviation* from a reference run of D linearly
through every step of the window (backward linear bound propagation, CROWN, with the training
steps as the layers) and by allocating the substitution budget exactly per epoch.

Setting
-------
Single-layer head: parameters Theta [C, D] (row c = (W_c, b_c), D = d + 1, flat layout of
:mod:`certdp.models`), x~ = (x, 1), logits z_i = Theta x~_i, clipped per-sample gradient
g_i(theta) = clip(phi(z_i) x~_i^T, -gamma, gamma) with phi = d loss / d z.  A window is the steps
t0 .. t0+F-1 of the fixed batch plan (``window_steps`` = F; the whole run by default), eta = lr / b.

Reference run and deviation.  theta_t is a run of the algorithm on D from a reference start point
theta_ref (the midpoint of the smallest start box; the nominal point when the window starts
collapsed).  For a neighbour D' with substituted index set S, |S| <= k, and its run theta'_t,
delta_t = theta'_t - theta_t satisfies (exactly)

    delta_{t+1} = lam delta_t - eta sum_{i in B_t} (g_i(theta_t + delta_t) - g_i(theta_t)) + sigma_t,
    sigma_t = -eta sum_{i in B_t n S} (s_i - g_i(theta'_t)),   |sigma_t,p| <= n_t rho_t,p,

where g_i is the *original* record's gradient, s_i in [-gamma, gamma]^P the substitute's clipped
gradient, n_t = |B_t n S| and rho_t,p = eta (gamma + max_i |g_i,p|) over the intermediate bounds.
Per-epoch budget: the batch plan cuts every epoch's permutation into E = floor(N / b) consecutive
batches (the tail dropped), so an index occupies at most one slot per epoch and

    sum_{t in epoch} n_t <= k,    0 <= n_t <= min(k, b)                         (per_epoch)

(``substitutions=per_batch`` uses n_t <= min(k, b) only; full batch, E = 1, is the same).  The
window's start deviation delta_{t0} lies in the start box minus theta_ref (zero for a point).

Neurons and their relaxations
-----------------------------
* Hinge (labels +-1, one output): with w_i = y_i x~_i and c_i = clip(-w_i, -gamma, gamma),
  g_i(theta) = a_i(theta) c_i exactly (clip(a v) = a clip(v) for a in {0, 1}), a_i = 1[w_i.theta < 1].
  One neuron per record-step: a'_i = 1[v_i < tau_i], v_i = w_i.delta_t, tau_i = 1 - w_i.theta_t.
  Given intermediate bounds vL <= v_i <= vU: surely active (vU < tau) or inactive (vL >= tau)
  neurons are constants; an uncertain one has the lower lines L0 = 0, L1 = (tau - v)/(tau - vL)
  and the upper lines U0 = 1, U1 = (vU - v)/(vU - tau), each valid on [vL, vU] (L1 <= 1 left of
  tau and <= 0 right of it; U1 >= 1 left and >= 0 right).  Area rule: L1 iff tau - vL > vU - tau
  (its area between line and step is (tau - vL)/2 + (vU - tau)^2 / (2 (tau - vL)) against tau - vL
  for L0), U1 iff vU - tau > tau - vL.  (Always sloped or always flat lines are much looser: on
  blobs after 80 steps, T_1 l1 width 24.8 and 5.7 against 1.9 with the area rule.)
* MSE and softmax cross-entropy (generic): one neuron per (record, output c, input j),
  g_icj = clip(phi_c(z_i + Dz_i) x~_ij), Dz_i = A_i delta (block c of delta dotted with x~_i).
  The loss object's affine bounds of phi over the logit box z_i + [dzL, dzU]
  (:meth:`certdp.losses.Loss.grad_linear_bounds`: exact for MSE, the mean-value form for CE; the
  slopes of both bounds are equal), multiplied by x~_j (the bound swapped when x~_j < 0), then the
  parallel chord of clip on the exact range of u = phi_c x~_j (slope a >= 0, so a lower bound of u
  composes into a lower bound of clip(u)): L_icj(Dz) <= g_icj <= U_icj(Dz), affine in Dz_i.

Back-substitution
-----------------
For an objective l (a row of Lambda_T = l), going backwards from the end step: the coefficient of
neuron n of step t is kappa_n = -eta Lambda_{t+1} . C_n (C_n = c_i for hinge, the unit vector of
coordinate (c, j) for the generic head); kappa_n nu_n <= kappa_n (upper line) if kappa_n >= 0
else kappa_n (lower line); the lines are affine in delta_t, so

    Lambda_t = lam Lambda_{t+1} + sum_n kappa_n (slope_n of the chosen line, mapped to delta_t),
    const   += sum_n kappa_n (offset_n of the chosen line - nu_n(theta_t)),
    Lambda_{t+1} . sigma_t <= n_t g_t,   g_t = || rho_t * Lambda_{t+1} ||_1,

and at the window start Lambda_{t0} . delta_{t0} is maximised over the start deviation box.  The
budget term max sum_t n_t g_t over the allocations above is taken exactly: per epoch, min(k, b)
slots on the largest g_t, then the next largest, until k slots are used (greedy is optimal for
a linear objective with a common cap per step).  Hence l . delta_T <= const + budget, for every
neighbour within k substitutions.  Intermediate bounds (vL, vU of every record-step, or the
logit deviations dzL, dzU) are computed by the same procedure, in step order, from relaxations
that are already fixed; the first step of a window uses the start box.  The envelope at the
window's end is theta_T +- the bounds of the objectives +-e_p, one per radius (vectorised: every
tensor carries a leading radius axis).  Cost: O(F^2 q b P) per radius with q = 2b (hinge) or
2bC (generic) intermediate objectives per step; blobs (F = 200, b = 20, P = 9): seconds.

Slope optimisation (``alpha_iters``, hinge head)
-----------------------------------------------
The area rule fixes one line per neuron for all objectives.  Any convex combination of L0 and L1
(of U0 and U1) is also valid on [vL, vU], so each final objective may use its own mixture for
every uncertain neuron; ``alpha_iters`` Adam steps on the mixtures (certdp/bounds/crowntt_refine.py)
lower the final bounds, each iterate being a sound bound by the back-substitution above with the
same intermediate bounds; the minimum over the iterates and the area-rule bound is kept.

Floating point
--------------
Every inequality above holds in exact arithmetic for the *computed* coefficients: a computed
Lambda_t differs from its defining expression by at most gamma_{b+2}(lam |Lambda_{t+1}| + sum_n
|kappa_n slope_n| |map_n|) (gamma_m = m u / (1 - m u), u = 2^-53), which changes the bound by at
most that times |delta_t| <= D_t = lam^t D_0 + 2 gamma lr sum_{j<t} lam^j (any two runs of the
algorithm differ by at most 2 gamma lr per step and coordinate; D_0 the start deviation); each
kappa_n errs by at most gamma_P eta |Lambda_{t+1}| . |C_n|, which matters through |nu_n - nu_n(theta_t)|
<= 1 (hinge) or 2 gamma (generic); and const, the budget sums and the start term are sums of at
most N = b F + P + 64 terms, each within gamma_N of its exact value.  The code accumulates these
magnitudes ("mass") alongside const and adds gamma_N * mass (plus the explicitly bounded terms)
to every bound.  The reference run is itself rounded: theta_{t+1} = lam theta_t - eta sum g~ + r_t
with |r_t| <= gamma_{b+3}(lam |theta_t| + eta sum |g~|), which enters as Lambda_{t+1} . r_t; the
nominal margins / logits w_i.theta_t carry an error e <= gamma_{D+1} |w_i| . |theta_t|, absorbed by
placing the hinge kink anywhere in [tau - e, tau + e] (lower lines use tau - e, upper lines
tau + e) and by widening the logit box and the offsets by e; line offsets are shifted outward by
4u (|slope| max|v| + |offset|) against the rounding of the line coefficients.

Nesting (privacy/smoothness.py): ``nesting_monotone = False``.  The relaxation lines (area rule,
chord of clip, mean-value form) are chosen from the intermediate bounds and from the reference run
of each dataset, so a wider range does not give a pointwise looser line (L1 = (tau - v)/(tau - vL)
rises for v > tau when vL decreases), and the reference runs of D and D' differ; T_r(D) inside
T_r'(D') is therefore not implied.  Smooth releases with this engine need
``privacy.smoothness=unproven`` (they carry no DP guarantee); its envelopes are sound either way.
"""

from __future__ import annotations

import torch

from certdp.bounds.base import Certificate, Window, loss_rule
from certdp.bounds.crowntt_neurons import U, HingeNeurons, rounding_gamma
from certdp.bounds.crowntt_refine import optimise_slopes
from certdp.bounds.ibp import IBP, gradient_bounds
from certdp.bounds.interval import Interval
from certdp.errors import ConfigError

# Refuse windows whose back-substitution would take hours: rows * F^2/2 * q * (b C D + P)
# multiply-adds (about 2e9 for blobs with 11 radii over 200 steps).
MAX_WORK = 2e11
# branch=auto splits radius 1 per record when that adds at most this many multiply-adds (blobs,
# 200 records over 200 steps: 2.9e10, about 1.5 min of CPU)
BRANCH_WORK = 5e10


class CrownTT(Certificate):
    """``certificate=crowntt``: CROWN through the training steps of a window (module docstring).

    Options: ``horizon`` (steps per window; null = the whole run, or the AGS release window, as
    one window), ``substitutions`` (``per_epoch``: k records over the window, which contains the
    per-epoch budget of the batch plan; ``per_batch``: k per batch, as the per-step engines) and
    ``branch`` (radii up to which every record is split off into its own bound; ``auto``: radius 1
    when that costs at most ``BRANCH_WORK``, else none) and ``alpha_iters`` (hinge head: Adam
    iterations of the per-objective slope optimisation of the window's final bounds,
    certdp/bounds/crowntt_refine.py; 0: the area rule's lines only)."""

    name = "crowntt"
    options = ("horizon", "substitutions", "branch", "alpha_iters")
    scope = "single-layer heads (linear mse regression, linear hinge classifier, softmax-ce head)"
    nesting_monotone = False
    devices = ("cpu",)
    device_note = "its relational bounds build their tensors on the CPU"

    def __init__(self, *, horizon=None, substitutions: str = "per_epoch", branch="auto", alpha_iters=0):
        if horizon in (None, "null", "full", "none"):
            self.window_steps = 10 ** 9
        else:
            h = _int_or(horizon, 0)
            if h < 1:
                raise ConfigError("certificate.horizon", f"got {horizon!r}; allowed: an integer >= 1, or null (the whole run)")
            self.window_steps = h
        if substitutions not in ("per_epoch", "per_batch"):
            raise ConfigError("certificate.substitutions", f"unknown '{substitutions}'; allowed: per_epoch, per_batch")
        if branch != "auto" and _int_or(branch, -1) < 0:
            raise ConfigError("certificate.branch", f"got {branch!r}; allowed: auto, or an integer >= 0")
        if substitutions == "per_batch" and branch not in ("auto", 0, "0"):
            raise ConfigError("certificate.branch", "record branches need certificate.substitutions=per_epoch; allowed: 0, auto")
        it = _int_or(alpha_iters, -1)
        if it < 0:
            raise ConfigError("certificate.alpha_iters", f"must be an integer >= 0 (got {alpha_iters!r}); allowed: 0 (off) or e.g. 40")
        self.alpha_iters = it
        self.substitutions = substitutions
        self.branch = branch if branch == "auto" else int(branch)
        self.stats: list[dict] = []

    @classmethod
    def supports(cls, model) -> bool:
        return model.n_layers == 1 and loss_rule(model.loss).crowntt_neurons is not None

    def per_sample_gradient_bounds(self, model, theta, x, y, *, clip, out=None):
        return gradient_bounds(model, theta, x, y, clip=clip, out=out)

    def window_bounds(self, model, boxes: Interval, window: Window) -> Interval:
        """Boxes [K, P] at the end of the window ``steps`` from the start boxes [K, P] (row j for
        ``ks[j]`` substitutions; ``ks[j] = 0`` is the nominal run)."""
        (x, y), plan, ks, settings = window.data, window.plan, window.ks, window.settings
        step_boxes = window.step_boxes
        steps = list(window.steps)
        n, b = x.shape[0], plan.shape[1]
        K, P = boxes.lo.shape
        F = len(steps)
        ks = ks.to(torch.long)
        kind = loss_rule(model.loss).crowntt_neurons
        if self.alpha_iters and kind is not HingeNeurons:
            raise ConfigError("certificate.alpha_iters", "slope optimisation is implemented for the hinge head only; allowed: 0")
        q = 2 * b * (1 if kind is HingeNeurons else model.widths[-1])
        unit = F * F / 2 * q * (b * (1 if kind is HingeNeurons else model.n_params) + P)   # multiply-adds per row
        if K * unit > MAX_WORK:
            raise ConfigError("certificate.horizon", f"crowntt over {F} steps of {b} records with {K} radii needs ~{K * unit:.1e} "
                                                     f"multiply-adds (limit {MAX_WORK:.0e}); allowed: a shorter "
                                                     f"certificate.horizon, or certificate=crown|ibp")
        idx = torch.stack([torch.arange(n) if b == n else plan[t] for t in steps])       # [F, b]
        n_rec = len(torch.unique(idx))
        per_epoch = self.substitutions == "per_epoch"
        nb = 0
        if per_epoch:
            if self.branch == "auto":
                nb = 1 if int(((ks >= 1) & (ks <= 1)).sum()) * n_rec * unit <= BRANCH_WORK else 0
            else:
                nb = self.branch
        split = ((ks >= 1) & (ks <= nb)).nonzero().flatten()                     # rows split per record
        extra = len(split) * n_rec
        if extra and (K + extra) * unit > MAX_WORK:
            raise ConfigError("certificate.branch", f"{len(split)} radii x {n_rec} record branches over {F} steps need "
                                                    f"~{(K + extra) * unit:.1e} multiply-adds (limit {MAX_WORK:.0e}); "
                                                    f"allowed: a smaller certificate.branch, or 0")
        parent = torch.cat([torch.arange(K), split.repeat_interleave(n_rec)])
        branch = torch.cat([torch.full((K,), -1, dtype=torch.long), torch.arange(n_rec).repeat(len(split))])
        rows = Interval(boxes.lo[parent], boxes.hi[parent])
        # Interval boxes of the same neighbourhoods at every step (IBP with the same substitution
        # budget: the per-epoch ledger or per batch): they cap the intermediate bounds, which keeps
        # the relaxation from running away where the linear bounds grow faster than the boxes
        # (softmax heads at k >= 2), and the result.
        pos = (ks >= 1).nonzero().flatten()          # AGT's radius-0 row (the nominal) is not capped
        caps = None
        if len(pos):
            ref = (boxes.lo[0] + boxes.hi[0]) / 2
            if step_boxes is None:
                raise ValueError("crowntt's window_bounds needs AGT's step_boxes callback (certdp.agt.run_agt)")
            box_env, trace = step_boxes(engine=IBP(substitutions=self.substitutions), ref=ref, ks=ks[pos].tolist(),
                                        start_box=Interval(boxes.lo[pos], boxes.hi[pos]),
                                        steps=range(steps[0], steps[-1] + 1))
            row = torch.full((K,), -1, dtype=torch.long)
            row[pos] = torch.arange(len(pos))
            prow = row[parent]
            use = prow >= 0
            caps = []
            for lo_, hi_ in trace:
                clo = torch.where(use.unsqueeze(-1), lo_[prow.clamp(min=0)], boxes.lo[parent])
                chi = torch.where(use.unsqueeze(-1), hi_[prow.clamp(min=0)], boxes.hi[parent])
                caps.append((clo, chi, use))
        win = _Window(kind(model, settings), model, rows, x, y, plan, steps, ks[parent], settings,
                      per_epoch=per_epoch, parent=parent, branch=branch, caps=caps, alpha_iters=self.alpha_iters)
        # Thousands of small tensor operations ([rows, objectives, P]): intra-op threads only add
        # synchronisation (measured 100x slower with 2 threads on a loaded 2-core machine).
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            out = win.run()
        finally:
            torch.set_num_threads(threads)
        lo, hi = out.lo[:K].clone(), out.hi[:K].clone()
        if len(pos):
            lo[pos] = torch.maximum(lo[pos], box_env.lo)
            hi[pos] = torch.minimum(hi[pos], box_env.hi)
        for j in split.tolist():
            # every neighbour with a substitution has one of the window's records in its set (or
            # changes nothing in this window): the hull of the branches, intersected with row j
            m = parent[K:] == j
            lo[j] = torch.maximum(lo[j], out.lo[K:][m].amin(0))
            hi[j] = torch.minimum(hi[j], out.hi[K:][m].amax(0))
        self.stats.append({"window_start": steps[0], "steps": F, "radii": K, "record_branches": extra,
                           "uncertain_neurons": win.n_uncertain, "alpha_iters": self.alpha_iters})
        return Interval(lo, hi)


def _int_or(v, default: int) -> int:
    """int(v) for an integer or an integer string, else ``default`` (no silent truncation)."""
    if isinstance(v, bool):
        return default
    if isinstance(v, int):
        return v
    try:
        f = float(str(v).strip())
    except ValueError:
        return default
    return int(f) if f.is_integer() else default


class _Window:
    """One window of CROWN through time (module docstring) for a batch of rows: row j bounds the
    neighbours within ``ks[j]`` substitutions whose substituted set contains the window-local
    record ``branch[j]`` (-1: any set), starting from box j; ``parent[j]`` is a row of the same
    radius without a branch (its own index for such rows), whose intermediate bounds also hold
    for row j and cap them."""

    def __init__(self, relax, model, boxes, x, y, plan, steps, ks, settings, *, per_epoch, parent, branch, caps=None,
                 alpha_iters=0):
        self.rel, self.model = relax, model
        self.x, self.y, self.plan, self.steps = x, model.loss.labels(y), plan, steps
        self.ks = ks.to(torch.long)
        self.lam, self.lr, self.g = float(settings.contraction), float(settings.lr), float(settings.clip)
        n = x.shape[0]
        self.b = plan.shape[1]
        self.full = self.b == n
        self.eta = self.lr / self.b
        idx = torch.stack([torch.arange(n) if self.full else plan[t] for t in steps])     # [F, b]
        uniq, rec = torch.unique(idx, return_inverse=True)
        self.rec, self.n_rec = rec, len(uniq)                                   # window-local record ids
        self.per_epoch = per_epoch
        self.parent, self.branch = parent, branch
        self.caps = caps              # per local step: (lo, hi, rows used) boxes containing theta'_t, or None
        self.alpha_iters = alpha_iters
        self.has_branch = bool((branch >= 0).any())
        dt = boxes.lo.dtype
        self.dt = dt
        # reference start: the midpoint of the smallest box (boxes are nested: it lies in all)
        self.theta0 = (boxes.lo[0] + boxes.hi[0]) / 2
        lo0, hi0 = boxes.lo - self.theta0, boxes.hi - self.theta0
        m = U * (boxes.lo.abs() + boxes.hi.abs() + self.theta0.abs()) + 1e-300
        self.d0_lo, self.d0_hi = lo0 - m, hi0 + m                                # [rows, P]
        D0 = float(torch.maximum(self.d0_lo.abs(), self.d0_hi.abs()).max())
        F = len(steps)
        # |delta_t| <= D_t for every coordinate (any two runs), doubled as a margin: used to bound
        # rounding terms and to cap intermediate bounds
        self.D = [2 * (self.lam ** t * D0 + 2 * self.g * self.lr * sum(self.lam ** j for j in range(t))) + 1e-12
                  for t in range(F + 1)]
        self.gammaN = rounding_gamma(self.b * F + model.n_params + 64)
        self.st, self.rx = [], []
        self.n_uncertain = 0

    # ------------------------------------------------------------------ bound of L . delta_t
    def bound(self, L: torch.Tensor, t_end: int, *, rows: torch.Tensor | None = None, lines=None) -> torch.Tensor:
        """Upper bounds [rows, q] of L[q] . delta_{t_end} (local step index) for every row, or for
        the rows ``rows``; ``lines(t)`` (optional) gives step t's relaxation for those rows with
        one line per objective (certdp/bounds/crowntt_refine.py), else the window's own lines."""
        if rows is None:
            ks, branch, d0_lo, d0_hi = self.ks, self.branch, self.d0_lo, self.d0_hi
        else:
            ks, branch, d0_lo, d0_hi = self.ks[rows], self.branch[rows], self.d0_lo[rows], self.d0_hi[rows]
        R = len(ks)
        lam_ = L.expand(R, -1, -1).clone()
        q = lam_.shape[1]
        const = torch.zeros(R, q, dtype=self.dt)
        mass = torch.zeros(R, q, dtype=self.dt)
        expl = torch.zeros(R, q, dtype=self.dt)                                  # explicit error terms
        if self.per_epoch:
            totals = torch.zeros(R, q, self.n_rec, dtype=self.dt)                # gains per record
        else:
            kk = ks.clamp(max=self.b)
            kmax = int(kk.max())
            per_step = torch.zeros(R, q, dtype=self.dt)
        for t in range(t_end - 1, -1, -1):
            st = self.st[t]
            if lines is not None:
                rx = lines(t)
            elif rows is None:
                rx = self.rx[t]
            else:
                rx = {key: v[rows] for key, v in self.rx[t].items()}
            la = lam_.abs()
            expl = expl + la @ st["r"]                                           # the reference run's rounding
            add, c, ms, comb, gain = self.rel.backsub(st, rx, lam_, self.eta)
            const = const + c
            # const terms, kappa errors, the gains (each >= 0; a sum of some of them is used), and
            # Lambda_t's recombination error times |delta_t| <= D_t
            mass = mass + ms + gain.sum(-1) + (self.lam * la.sum(-1) + comb) * self.D[t]
            if self.per_epoch:
                totals = totals.index_add(2, self.rec[t], gain)
            elif kmax > 0:
                top = torch.topk(gain.clamp(min=0), kmax, dim=-1).values.cumsum(-1)
                per_step = per_step + top.gather(-1, (kk - 1).clamp(min=0).view(R, 1, 1).expand(R, q, 1)).squeeze(-1) \
                    * (kk > 0).to(self.dt).view(R, 1)
            lam_ = self.lam * lam_ + add
        # start deviation box
        dmax0 = torch.maximum(d0_lo.abs(), d0_hi.abs()).unsqueeze(1)
        const = const + torch.maximum(lam_ * d0_lo.unsqueeze(1), lam_ * d0_hi.unsqueeze(1)).sum(-1)
        mass = mass + (lam_.abs() * dmax0).sum(-1)
        const = const + (self.budget(totals, ks=ks, branch=branch) if self.per_epoch else per_step)
        return const + self.gammaN * (mass + const.abs()) + expl * (1 + 1e-6)

    def budget(self, totals: torch.Tensor, *, ks: torch.Tensor, branch: torch.Tensor) -> torch.Tensor:
        """The largest total gain of the substituted records (module docstring): ``totals``
        [rows, q, records] (each record's gains summed over its slots) -> [rows, q]: the sum of
        the k largest totals, or, in a branch, the branch record's total plus the k - 1 largest
        of the others (``ks``, ``branch``: the rows' radii and branch records)."""
        R, q, n = totals.shape
        base = torch.zeros(R, q, dtype=self.dt)
        kk = ks.clamp(max=n)
        if bool((branch >= 0).any()):
            has = (branch >= 0).view(R, 1)
            br = branch.clamp(min=0).view(R, 1, 1).expand(R, q, 1)
            base = torch.where(has, totals.gather(-1, br).squeeze(-1), base)
            totals = totals.scatter(-1, br, torch.where(has.unsqueeze(-1), 0.0, totals.gather(-1, br)))
            kk = torch.where(branch >= 0, ks - 1, ks).clamp(min=0, max=n)
        kmax = int(kk.max())
        if kmax == 0:
            return base
        # fewer than k substitutions are allowed: a record with a negative total (rounding) is left out
        top = torch.topk(totals.clamp(min=0), kmax, dim=-1).values.cumsum(-1)     # [R, q, kmax]
        idx = (kk - 1).clamp(min=0).view(R, 1, 1).expand(R, q, 1)
        return base + top.gather(-1, idx).squeeze(-1) * (kk > 0).to(self.dt).view(R, 1)

    def box_bound(self, L: torch.Tensor, theta: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
        """Upper bounds [rows, q] of L[q] . delta_t over delta_t in [lo, hi] - theta_t (the boxes
        of ``caps``), widened by 4u of the magnitudes against the rounding of the products."""
        dl, dh = lo - theta, hi - theta
        Lp, Ln = L.clamp(min=0), L.clamp(max=0)
        ub = dh @ Lp.T + dl @ Ln.T
        mag = (torch.maximum(lo.abs(), hi.abs()) + theta.abs()) @ L.abs().T
        return ub + rounding_gamma(L.shape[1] + 2) * 2 * mag + 1e-300

    # ------------------------------------------------------------------ the window
    def run(self) -> Interval:
        theta = self.theta0.clone()
        P = theta.shape[0]
        for local, t in enumerate(self.steps):
            xb, yb = (self.x, self.y) if self.full else (self.x[self.plan[t]], self.y[self.plan[t]])
            nxt, st = self.rel.reference_step(theta, xb, yb, self.eta)
            self.st.append(st)
            L = self.rel.objectives(st)
            if local == 0:
                L3 = L.unsqueeze(0)
                dm = torch.maximum(self.d0_lo.abs(), self.d0_hi.abs()).unsqueeze(1)
                ub = torch.maximum(L3 * self.d0_lo.unsqueeze(1), L3 * self.d0_hi.unsqueeze(1)).sum(-1)
                ub = ub + rounding_gamma(P + 1) * (L3.abs() * dm).sum(-1)
            else:
                ub = self.bound(L, local)
            if self.has_branch:
                ub = torch.minimum(ub, ub[self.parent])
            if self.caps is not None:
                clo, chi, use = self.caps[local]
                ub = torch.where(use.unsqueeze(-1), torch.minimum(ub, self.box_bound(L, theta, clo, chi)), ub)
            rx = self.rel.relax(st, ub, self.D[local])
            self.rx.append(rx)
            self.n_uncertain += int(rx["uncertain"].sum())
            theta = nxt
        eye = torch.eye(P, dtype=self.dt)
        L = torch.cat([eye, -eye], 0)
        ub = self.bound(L, len(self.steps))
        if self.alpha_iters:
            # every iterate of the slope optimisation is a sound bound (crowntt_refine docstring)
            ub = torch.minimum(ub, optimise_slopes(self, L, iters=self.alpha_iters))
        hi, lo = theta + ub[:, :P], theta - ub[:, P:]
        return Interval(torch.minimum(lo, hi), torch.maximum(lo, hi))
