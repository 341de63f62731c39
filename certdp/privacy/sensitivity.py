"""From envelopes to a beta-smooth upper bound on the local sensitivity, with its proof.

Setting and goal
----------------
D is a dataset of N records; neighbours D ~ D' differ by the substitution of one record.  The
released query q(D) is a test prediction clipped to the output range (AGT-R) or the parameter
vector itself (AGS), with the l1 norm over its coordinates.  The smooth-sensitivity releases of
:mod:`certdp.privacy.mechanisms` add noise of scale S(D)/a and are private when S is a
*beta-smooth upper bound on the local sensitivity* (Nissim, Raskhodnikova, Smith 2007, Def 2.1):

    (i)  S(D) >= LS(D) = max_{D'~D} ||q(D) - q(D')||_1,
    (ii) S(D) <= e^beta S(D')                                   for every neighbour D' of D.

Nothing else is needed.  In particular a separate bound on A^k (the local sensitivity at distance
k) is not: (i) and (ii) give S(D) >= e^{-beta k} S(D~) >= e^{-beta k} LS(D~) for d(D, D~) = k, so S
is automatically >= SS^beta, the smooth sensitivity (the least function with (i) and (ii)).

The staircase
-------------
AGT computes boxes T_r(D) for the radii 0 = r_0 < r_1 < ... < r_m, where T_0(D) is the released
nominal point theta(D) (a box of zero width, or of rounding width).  Q_j(D) = [y_L, y_U] are bounds
of the query over T_{r_j}(D), computed by an inclusion-monotone map (a larger box never gives a
smaller interval; interval forward passes and clipping are), and for two intervals I, J

    cross(I, J) = sum_coords max(J_U - I_L,  I_U - J_L)

(the largest l1 distance between a point of I and a point of J; inclusion-monotone in both).
The values and discount exponents are

    V_j(D) = cross(Q_j(D), Q_{j+1}(D)),   phi_j = j              (j = 0 .. m-1, "computed"),
    V_m(D) = width(Q_m) = cross(Q_m, Q_m) when r_m >= N,          phi_m = m   ("ceiling"),
    V_m    = G                            otherwise,              phi_m = m   ("global"),

every value capped by G when a global sensitivity G (a data-independent bound on LS at every
dataset, per query point) is known, and

    S(D) = max_{j = 0..m} e^{-beta phi_j} V_j(D).

The discount exponent is the *index* j of the computed radius, not the radius r_j.

Theorem.  Assume (N) for every pair of neighbours D ~ D' and every j < m:

    T_{r_j}(D) subset T_{r_{j+1}}(D'),      and  T_{r_j}(D) subset T_{r_{j'}}(D) for j <= j',

and (C): when r_m >= N, T_{r_m}(D) is the same box for every D (a data-independent ceiling);
otherwise G exists.  Then S is a beta-smooth upper bound on LS.

Proof.  (i) For D' ~ D: theta(D) lies in T_0(D), and theta(D') in T_0(D') subset T_{r_1}(D) by
(N) applied to the pair (D', D).  So q(D) lies in Q_0(D), q(D') in Q_1(D), and their l1 distance is
at most cross(Q_0(D), Q_1(D)) = V_0(D) <= S(D).  Capping by G keeps this, since LS <= G.
(ii) For j < m - 1, (N) gives Q_j(D) subset Q_{j+1}(D') and Q_{j+1}(D) subset Q_{j+2}(D'), hence
V_j(D) <= V_{j+1}(D').  For j = m - 1: Q_{m-1}(D) subset Q_m(D') and, in the ceiling case,
Q_m(D) = Q_m(D'), so V_{m-1}(D) <= cross(Q_m, Q_m) = V_m(D'); in the global case V_{m-1}(D) <= G =
V_m(D') by the cap.  V_m itself is data-independent.  min(., G) preserves every inequality.  So
e^{-beta j} V_j(D) <= e^beta e^{-beta (j+1)} V_{j+1}(D') <= e^beta S(D') for j < m, and
e^{-beta m} V_m(D) = e^{-beta m} V_m(D') <= S(D').  Taking the maximum over j gives (ii).  QED

Why the index and not the radius (back-fill).  Paper Algorithm 1 discounts by the radius k and
back-fills a missing radius with the next computed one.  With a gap between r_j and r_{j+1} the
back-filled values of D and D' are read at the same k, so that construction is only
(beta * largest gap)-smooth; a concrete neighbour pair shows the excess (tests/test_smoothness.py).
(N) only relates consecutive *computed* radii, so the discount may grow by at most one per computed
radius; the index form is exactly that.  A piece-wise back-fill that keeps extra pieces for the
radii inside a gap (value w(T_{r_j}), exponent min(r_{j-1}, phi_{j-1} + 1)) is also beta-smooth but
its extra pieces are never needed and can only raise S.  Consequence for the choice of radii: at
a fixed number m of radii, the dense radii 1..m give the pointwise smallest V_j (V_j grows with the
radii), so a sparse staircase is never better than the dense one of the same size; a large last
radius only matters as the data-independent ceiling r_m = N.

When (N) holds: AGT (certdp/agt.py)
-----------------------------------
One AGT step for radius r maps a box B to Phi_r^D(B): the engine's bound on one training step from
B with at most r of the batch's b records substituted (certdp/bounds/base.py), widened outward,
widened by i*E for the i-th computed radius (below), intersected with the data-independent
trivial cover C_t and with the boxes of all larger radii; radii r >= b are C_t itself; the
radius-0 row (the nominal) is the same engine's step with r = 0 from the point theta_init.  For
the default aggregation (top-k): per-sample clipped-gradient intervals [l_i(B), u_i(B)] of the
batch records, SumL_r = SEMin_{b-r}(l) - r*gamma, SumU_r = SEMax_{b-r}(u) + r*gamma,
lo' = lam*lo - (lr/b) SumU, hi' = lam*hi - (lr/b) SumL.  (N) follows by induction over the steps
from the engine's declaration ``nesting_monotone`` (certdp/bounds/base.py), i.e.

(M1) per-sample bounds are inclusion-monotone in the box, for the same record, with
     -gamma <= l_i <= u_i <= gamma (clipping), and exact at a point box;
(M2) the aggregation nests: if u'_i >= u_i for every i != j (j the substituted slot), then
     SumU_{r'}(u') >= SumU_r(u) for every r' >= r + 1 (mirror for SumL).  For topk: drop j (or the
     smallest) from the b - r largest u's; the remaining b - r - 1 records are >= under u', and the
     dropped value is <= gamma, so SEMax_{b-r-1}(u') + (r+1) gamma >= SEMax_{b-r}(u) + r gamma;
     SumU_r is non-decreasing in r; for r' >= b the sum is the data-independent b*gamma;
(M3) the update is monotone (lam >= 0), the outward widening x -> x -/+ (rho max(|lo|,|hi|) + a)
     is inclusion-monotone (max(|lo|, |hi|) = max(hi, -lo) only grows with the box), intersection
     with a data-independent box (C_t) or another nesting bound keeps nesting, intersection with
     larger radii maps onto the shifted intersection (each D'-box of index i+1 > j has the D-box of
     index i >= j as a subset), and the nominal is the radius-0 step at a point.

Induction: if T^t_{r_j}(D) subset T^t_{r_{j+1}}(D') for all j < m (and T^t_0(D) inside every
T^t_{r_j}(D'), j >= 1), then (M1) gives per-sample intervals of the retained records nested, (M2)
nested sums, (M3) nested updated boxes, and the intersections keep the nesting; at t = 0 every
box is the start point.  For (C): when r_m >= b every batch sum is [-b gamma, b gamma] whatever
the data, and AGT sets T_{r_m} to the trivial cover C_t, the same box for every D.

Engines, aggregations and caps
------------------------------
Every engine certdp registers declares ``nesting_monotone`` when (M1)-(M3) hold for it; a smooth
release refuses an engine that does not (:func:`certdp.privacy.smoothness.release_proof`).
* IBP (``certificate=ibp``): forward passes with sign-split products of an exact or non-negative
  input and an interval weight, ReLU clamp, loss-gradient bounds (MSE affine; hinge by case;
  softmax bounds at opposite corners), the backward product as the exact element-wise interval
  product summed over the layer's outputs (midpoint-radius products for very large layers,
  inclusion-isotone in exact arithmetic: the upper end am*wm + |am| wr + ar |wm| + ar wr changes by
  at most (|wm| + wr)|d am| when the midpoint moves by d am, and the radius grows by at least |d am|
  under inclusion), ReLU-derivative bounds [1[z_L > 0], 1[z_U > 0]], clipping: (M1) holds.
  ``aggregation=topk`` nests as in (M2); ``aggregation=tau`` bounds SumU_r by the minimum over a
  fixed grid of tau <= gamma of Sigma_i max(u_i, tau) - r tau + r gamma (capped by b gamma), which
  is non-decreasing in every u_i, and from D to D' at r + 1 the substituted record's
  max(u_j, tau) <= gamma is paid by the extra gamma - tau: every member nests, so their minimum
  does (certdp/bounds/aggregate.py).  Covered.  (The form Sigma u - k min u + k gamma, k times
  the extreme bound, does not nest: u = (-gamma, gamma, ..., gamma) at k = 3 against u' =
  (0, gamma, ..., gamma) at k = 4 gives (b + 4) gamma > (b + 3) gamma.  It is not offered.)
* CROWN (``certificate=crown``), single-layer heads: per (record, coordinate) a relaxation from an
  inclusion-monotone family chosen by a monotone rule (surely clipped: the constant +-gamma;
  affine where the isotone bounds of its linear relaxation stay within [-gamma, gamma]; else the
  constants), then either the exact maximum of the relaxed step over the box's vertices (convex
  in theta) or a record-independent charge 2 gamma per substitution; both nest, and the result is
  intersected with the IBP step.  MSE relaxations are exact where unclipped; softmax
  cross-entropy uses the mean-value form, inclusion-monotone although its centre moves
  (certdp/losses.py); hinge reduces to IBP.  One-hidden-layer MSE networks: exact per-sample
  ranges with margins relative to isotone magnitudes.  Covered (certdp/bounds/crown.py).  (An
  adaptive chord relaxation of clip is not monotone in its interval -- on [-2g, 2g] the lower
  line is z/2 - g/2, on [-2g, 100g] it is above that at z = -2g -- and a removal charge
  max_box L_j + gamma depends on the substituted record; both broke smoothness, by up to 1.55 e^beta
  on the issue's setting.)
* MILP / exact windows (``certificate=milp|exact``): the exact optimum nests (every feasible point
  of D's window at k is feasible for D''s at k + 1 with the substituted record free), but the
  computed bounds are safe bounds from a solver's duals (certdp/bounds/milp.py), whose distance to
  the optimum depends on the data (dual infeasibility times column ranges that grow with the
  records; a node- or time-limited search).  No data-independent slack covers it: not declared,
  refused for smooth releases.  (A solver's "optimal" within mip_gap was trusted before; on records
  of 1e6 it excluded the trained parameters, and the claimed 0.2-DP release had loss 0.53.)
* gaplp (``certificate=gaplp``, linear hinge heads): a window engine whose bounds are the
  extrema of a convex program P_{k_j}(D) of the whole window, each a safe dual bound U accepted
  only with a verified feasible point within a data-independent gap gamma, plus gamma * j for the
  radius *index* j.  P_{k_j}(D) lies in P_{k_{j+1}}(D') (budget k_j + 1 <= k_{j+1}, nested margin
  intervals, computed by the same rule by induction over the steps), so up(U_j(D) + gamma j) <=
  up(F_j(D) + gamma (j + 1)) <= up(U_{j+1}(D') + gamma (j + 1)): (N) for any radii, in exact
  arithmetic on the stored floats (certdp/bounds/gaplp.py).  Its radius 0 is the nominal box,
  whose rounding width is below gamma; radii >= N are the cover.  Covered.
* ``ags.share_ratio`` (SharedBoxes): radii k and k+1 of one group read their per-sample bounds
  from the same representative box, so (M1) would need that box to be nested between D and D',
  i.e. data-independent; the discount could then grow by one per *group* only.  Its top-k
  extension beyond ``topk_cap`` is also not monotone.  Refused for smooth releases
  (``privacy.smoothness=unproven`` runs it, rows marked ``smoothness_proof=false``).
* The per-epoch substitution ledger (``certificate.substitutions=per_epoch``, the default for IBP
  and CROWN on plans with more than one batch per epoch; derivation and proof in certdp/agt.py):
  its half-width k * rho (rho = 2 gamma lr / b) is data-independent with increments rho in k, the
  step aggregates the engine's per-sample bounds of the batch's own records as plain sums
  (inclusion-monotone, (M1)), the cover cap and graded widening are data-independent, and radii
  >= b * E (E batches per epoch; N among them) are the data-independent trivial cover, which
  contains every capped ledger box.  The boxes satisfy B(D; k) subset B(D'; k+1) +- rho lam^age
  (the offset only after the differing record's slot in the current epoch), which gives (N) at
  every fold and at the end.  Covered (radii between b and b * E keep ledger boxes, not the
  trivial box: the proof needs only that the ceiling radius N is data-independent).
* Caps: the output-range width, the trajectory ceiling and AGS's trivial cover depend only on the
  public query, the training settings and P, so min(., G) keeps (ii).  Clipping the prediction
  and its bounds to the output range is monotone.
* PATE-AGT-R: (1/T) max_i SS_i is beta-smooth because the partition is data-independent and each
  SS_i is beta-smooth in its own shard and constant in the others.
* AGS windows start from the previous released (public) point, so every window starts nested.
* Any further engine (per-epoch budgets, relational D-vs-D~ reasoning) is covered exactly when its
  step satisfies Phi_r^D(B) subset Phi_r'^D'(B') for B subset B', r' >= r + 1 and neighbours
  D ~ D': a per-epoch split of the radius must be a data-independent function of r and the batch
  plan (and non-decreasing in r), relational bounds must be monotone in the box they start from,
  the radius-0 step must contain the nominal step, and radii >= the batch size must give the
  data-independent trivial box.  It declares ``nesting_monotone = True`` and, if its floating-point
  evaluation can break nesting by more than IBP's, a larger ``nesting_slack``.

Rounding
--------
The proof is in exact arithmetic for the maps the code evaluates.  In floating point:
(1) the discount is computed with beta - 1e-12 (:data:`DISCOUNT_SLACK`), which absorbs the
rounding of e^{-beta j} V_j (a few ulps) in (ii);
(2) query bounds, cross and the caps are compositions of monotone floating-point operations in a
fixed order, hence float-isotone;
(3) the envelopes: per-sample bounds computed by sign-split products, exact element-wise interval
products, clamps and sums in a fixed order (the same shapes for D and D') are float-isotone
(rounding is monotone); the aggregation sum - top_k and the update are not, but their rounding
error is at most E (:meth:`certdp.bounds.base.Certificate.nesting_slack`): a data-independent
bound, because every clipped gradient is in [-gamma, gamma] and every box lies in the trivial
cover.  AGT widens the i-th radius by i * E per step, so T_i(D) widened by iE lies inside
T_{i+1}(D') widened by (i+1)E: (N) holds for the computed boxes.  CROWN's affine evaluations and
the MILP's stopping gap add their own data-independent terms to E (records with features or labels
beyond fixed caps take constant relaxations, which bounds CROWN's).  What remains outside the
argument are the transcendental functions of the softmax bounds (exp), monotone up to their own
rounding, and BLAS kernels, assumed to sum in an order fixed by the shapes.
tests/test_smoothness.py checks (N) on the floating-point boxes, with no tolerance, for every
engine, on neighbours with random, extreme and label-flipped records.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# The discount uses beta - DISCOUNT_SLACK: e^{-beta j} V_j is rounded twice (exp, product), a
# relative error below 1e-15, and (ii) must hold for the rounded values too.
DISCOUNT_SLACK = 1e-12


@dataclass(frozen=True)
class Staircase:
    """Values ``a_bar[..., j]`` and discount exponents ``phi[j]`` of S = max_j e^{-beta phi_j} a_bar_j.

    ``k[j]`` is the radius r_j whose local sensitivity a_bar[..., j] bounds (A^{r_j} <= a_bar_j:
    cross of T_{r_j} and the next computed radius); ``source[j]`` is ``computed`` (two computed
    envelopes), ``ceiling`` (the data-independent T_N) or ``global`` (the global sensitivity).
    ``a_bar`` is [..., C], e.g. one row per test point."""

    k: torch.Tensor          # [C] radii r_0 = 0 < r_1 < ...
    a_bar: torch.Tensor      # [..., C]
    source: tuple[str, ...]
    phi: torch.Tensor        # [C] discount exponents (the index j)

    def smooth(self, beta: float | torch.Tensor) -> torch.Tensor:
        """SS^beta = max_j e^{-beta phi_j} a_bar_j over the last axis ([...], or [..., B] for a
        vector of betas).  beta-smooth under the module's conditions (N) and (C)."""
        beta = torch.as_tensor(beta, dtype=self.a_bar.dtype)
        b_eff = (beta - DISCOUNT_SLACK).clamp(min=0.0)
        w = torch.exp(-b_eff.reshape(-1, 1) * self.phi.to(self.a_bar.dtype))   # [B, C]
        s = (self.a_bar.unsqueeze(-2) * w).amax(-1)                           # [..., B]
        return s.squeeze(-1) if beta.dim() == 0 else s


def _cross(lo_a, hi_a, lo_b, hi_b) -> torch.Tensor:
    """Largest l1 distance between a point of box a and a point of box b (last axis summed)."""
    return torch.maximum(hi_b - lo_a, hi_a - lo_b).sum(-1)


def staircase(lo: torch.Tensor, hi: torch.Tensor, nominal, k_values: torch.Tensor,
              *, n_total: int, global_sensitivity: torch.Tensor | float | None) -> Staircase:
    """The index-discounted staircase of the module docstring.

    ``lo, hi``: [K, ..., q] bounds of the query over T_r for the computed radii ``k_values``
    (strictly increasing, >= 1); ``nominal``: the query on D, either a point [..., q] or a pair
    (lo, hi) of its bounds over the nominal box T_0 (rounding width).  The last axis (q query
    coordinates) is summed (l1), so a scalar prediction has q = 1.  ``n_total`` is N: a radius
    >= N is the data-independent ceiling (T_N).  ``global_sensitivity`` ([...] or scalar) caps
    every value and is the last value when the radii stop below N; without it the radii must
    reach N."""
    ks = [int(k) for k in k_values]
    if not ks or ks != sorted(ks) or len(set(ks)) != len(ks) or ks[0] < 1:
        raise ValueError("k_values must be strictly increasing radii >= 1")
    has_n = ks[-1] >= n_total
    if global_sensitivity is None and not has_n:
        from certdp.errors import ConfigError
        raise ConfigError("staircase", f"the radii stop at {ks[-1]} < N={n_total} and the output has no "
                          "global sensitivity; allowed: radii up to N (staircase.include_n=true) or an output range "
                          "(dataset.output_range)")
    if isinstance(nominal, (tuple, list)):
        n_lo, n_hi = nominal
    else:
        n_lo = n_hi = nominal
    Lo = torch.cat([n_lo.unsqueeze(0), lo], 0)
    Hi = torch.cat([n_hi.unsqueeze(0), hi], 0)
    radii = [0] + ks
    m = len(ks)
    vals = [_cross(Lo[j], Hi[j], Lo[j + 1], Hi[j + 1]) for j in range(m)]
    src = ["computed"] * m
    if has_n:
        vals.append(_cross(Lo[m], Hi[m], Lo[m], Hi[m]))
        src.append("ceiling")
    else:
        vals.append(torch.full_like(vals[-1], float("inf")))
        src.append("global")
    a = torch.stack(vals, -1)
    if global_sensitivity is not None:
        gs = torch.as_tensor(global_sensitivity, dtype=a.dtype)
        a = torch.minimum(a, gs.unsqueeze(-1) if gs.dim() else gs)
    return Staircase(torch.as_tensor(radii), a, tuple(src), torch.arange(m + 1))
