"""Figure cond_table: the feasibility curves of Theorems 3.2 and 3.3 (``certdp feasibility``)."""

from __future__ import annotations

import pandas as pd

from certdp.plots import style


def cond_table(runs, *, profile: str = "paper"):
    """(a) pure DP, Cauchy vs Laplace: rho(1 - alpha) per c, black dots at the peaks;
    (b) approximate DP, Laplace vs Gaussian, 1 - alpha > 0.8, against Delta_2 f."""
    fig, (a, b) = style.panels(2, width=3.6)
    r = runs.one("feasibility")
    if r is None:
        style.empty(a, "no feasibility run")
        style.empty(b, "no feasibility run")
        return fig, pd.DataFrame()
    res, peaks = r.csv("results"), r.csv("peaks")
    cs = sorted(res.c.unique())
    cols = style.ramp(len(cs), "plasma")
    rows = []
    for c, col in zip(cs, cols):
        p = res[(res.regime == "pure") & (res.c == c)]
        a.plot(p.confidence, p.rho, color=col, label=f"c = {c:g}")
        rows.append(p.assign(panel="a"))
        pk = peaks[(peaks.regime == "pure") & (peaks.c == c) & (peaks.window == "grid")] if peaks is not None else []
        if len(pk):
            a.plot(pk.peak_confidence, pk.peak_rho, "o", color="black", ms=4, zorder=5,
                   label="peak" if c == cs[0] else "_")
        delta = res[res.regime == "approx"].delta.min()
        q = res[(res.regime == "approx") & (res.c == c) & (res.delta == delta) & (res.confidence > 0.8)]
        b.plot(q.confidence, q.rho, color=col, label=f"c = {c:g}")
        rows.append(q.assign(panel="b"))
    a.set(xlabel=r"confidence $1-\alpha$", ylabel=r"critical ratio $\rho = \mathrm{SS}^\beta/\Delta f$",
          title="(a) pure DP: Cauchy vs. Laplace", ylim=(0, None))
    b.axhline(1.0, color="grey", ls=":", lw=1)
    b.set(xlabel=r"confidence $1-\alpha$", ylabel=r"$\rho = \mathrm{SS}^\beta/\Delta_2 f$",
          title=rf"(b) approx. DP ($\delta$={delta:g}): Laplace vs. Gaussian", ylim=(0, None))
    style.legend_below(fig, [a, b], ncol=4)
    fig.tight_layout()
    return fig, pd.concat(rows, ignore_index=True)
