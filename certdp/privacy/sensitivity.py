"""From envelopes to a beta-smooth upper bound on the smooth sensitivity (paper Thm. 3.1/3.2).

Sound-bounding function.  For a query q(D) (a prediction at a public x, or the parameter
vector itself) let [y_L^k, y_U^k] bound q over every dataset within k substitutions of D (the
image of the envelope T_k; T_0 is the nominal point).  A neighbour of a dataset at distance k
is at distance k+1, so

    A^k(D) <= d(k) := sum_j max(y_U,j^{k+1} - y_L,j^k,  y_U,j^k - y_L,j^{k+1}).

We do *not* use Algorithm 1's distance from the nominal output, max_{T_k} |q - q(D)|, which
compares with D instead of with the neighbour of a dataset at distance k and can under-estimate
A^k by up to 2x.

Back-fill (a staircase over computed radii R = {r_1 < ... < r_m}).  T_r is valid for every
radius <= r, so the bound of radius k uses the next computed radius nxt(k) = min{r in R, r >= k}
(nxt(0) = 0, the nominal point).  Hence d(k) is a step function: on r_{j-1} < k < r_j it is the
width of T_{r_j}; at k = r_j it mixes T_{r_j} and T_{r_{j+1}}.  Since e^{-beta k} decreases, the
maximum of e^{-beta k} d(k) over a constant piece is at its smallest k, so only the candidate
radii {0} u R u {r_j + 1} need evaluating.  Beyond the largest radius, d(k) is the global
sensitivity (or, when N itself was computed, the width of T_N).  Every d(k) is capped by the
global sensitivity where one exists.

Smooth bound.  SS^beta = max_{k >= 0} e^{-beta k} d(k).  The k = 0 term (d(0) uses the nominal
point and T_1) is what makes SS^beta >= LS(D); it is not optional.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Staircase:
    """Certified local-sensitivity bounds ``a_bar[..., j]`` at candidate radii ``k[j]``.

    ``a_bar`` is [..., C] (e.g. one row per test point); ``source[j]`` says how radius k[j] was
    bounded: ``computed`` (envelopes T_k and T_k+1), ``backfill`` (the next computed radius
    above), or ``global`` (global sensitivity / T_N beyond the largest radius)."""

    k: torch.Tensor          # [C] candidate radii, ascending, starting at 0
    a_bar: torch.Tensor      # [..., C]
    source: tuple[str, ...]

    def smooth(self, beta: float | torch.Tensor) -> torch.Tensor:
        """SS^beta = max_k e^{-beta k} a_bar(k), over the last axis ([...])."""
        beta = torch.as_tensor(beta, dtype=self.a_bar.dtype)
        w = torch.exp(-beta.reshape(-1, 1) * self.k.to(self.a_bar.dtype))     # [B, C]
        s = (self.a_bar.unsqueeze(-2) * w).amax(-1)                           # [..., B]
        return s.squeeze(-1) if beta.dim() == 0 else s

    def argmax_k(self, beta: float) -> torch.Tensor:
        w = torch.exp(-beta * self.k.to(self.a_bar.dtype))
        return self.k[(self.a_bar * w).argmax(-1)]


def staircase(lo: torch.Tensor, hi: torch.Tensor, nominal: torch.Tensor, k_values: torch.Tensor,
              *, n_total: int, global_sensitivity: torch.Tensor | float | None) -> Staircase:
    """Build the staircase from query bounds.

    ``lo, hi``: [K, ..., q] bounds of the query over T_k for the computed radii ``k_values``
    (ascending); ``nominal``: [..., q] the query on D.  The last axis (q query coordinates) is
    summed (l1), so a scalar prediction has q = 1.  ``n_total`` is N (radius N reaches every
    dataset of that size).  ``global_sensitivity`` ([...] or scalar) caps every bound and
    covers radii beyond the largest computed one; without it the staircase must contain N.
    """
    ks = [int(k) for k in k_values]
    if ks != sorted(ks) or len(set(ks)) != len(ks) or ks[0] < 1:
        raise ValueError("k_values must be strictly increasing radii >= 1")
    has_n = ks[-1] >= n_total
    if global_sensitivity is None and not has_n:
        from certdp.errors import ConfigError
        raise ConfigError("staircase", f"the radii stop at {ks[-1]} < N={n_total} and the output has no "
                          "global sensitivity: add N to the staircase (staircase.include_n=true) or set an output range")
    # Radius 0 is the nominal point.
    Lo = torch.cat([nominal.unsqueeze(0), lo], 0)
    Hi = torch.cat([nominal.unsqueeze(0), hi], 0)
    radii = [0] + ks

    def mixed(a: int, b: int) -> torch.Tensor:
        return torch.maximum(Hi[b] - Lo[a], Hi[a] - Lo[b]).sum(-1)

    cand, vals, src = [], [], []
    for j, r in enumerate(radii):
        if j + 1 < len(radii):
            cand.append(r); vals.append(mixed(j, j + 1)); src.append("computed" if radii[j + 1] == r + 1 else "backfill")
            if radii[j + 1] > r + 1:
                cand.append(r + 1); vals.append((Hi[j + 1] - Lo[j + 1]).sum(-1)); src.append("backfill")
        else:
            # beyond the largest computed radius
            if has_n:
                # every dataset is within N: T_N bounds all of them, for both sides
                cand.append(r); vals.append((Hi[j] - Lo[j]).sum(-1)); src.append("global")
            else:
                cand.append(r); vals.append(torch.zeros_like(vals[-1]) + float("inf")); src.append("global")
    a = torch.stack(vals, -1)
    if global_sensitivity is not None:
        gs = torch.as_tensor(global_sensitivity, dtype=a.dtype)
        a = torch.minimum(a, gs.unsqueeze(-1) if gs.dim() else gs)
    return Staircase(torch.as_tensor(cand), a, tuple(src))
