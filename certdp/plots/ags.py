"""AGS figures: blobs, MNIST 0-4 and IMDB, the SST-2 hybrid, the Adult sampling ablation."""

from __future__ import annotations

import pandas as pd
from matplotlib.lines import Line2D

from certdp.plots import style

AGS_MECH = {"pure": "cauchy_p", "approx": "laplace_p"}


def _baseline_rows(res: pd.DataFrame, regime: str) -> dict[str, pd.DataFrame]:
    out = {}
    for arm in ("DP-SGD matched", "DP-SGD matched (basic)", "DP-SGD optimised", "PATE"):
        q = res[(res.arm == arm) & (res.regime == regime)] if "regime" in res else res.iloc[0:0]
        if arm == "DP-SGD optimised" and len(q):
            # one line: the better accountant per epsilon (both are tuned on the public set)
            q = q.loc[q.groupby("epsilon")["selection_accuracy" if "selection_accuracy" in q else "accuracy_median"].idxmax()]
        if len(q):
            out[arm] = q.sort_values("epsilon")
    return out


def _accuracy_panel(ax, series, rows, tag):
    for lab, arm, q, kw in series:
        ax.plot(q.epsilon, q.accuracy_median, label=lab, color=kw.pop("color", style.color(arm)), **kw)
        # the figure's data keeps the end-to-end budget beside the per-candidate one (tuned arms
        # choose among private candidates: see epsilon_end_to_end in results.csv)
        e2e = q.epsilon_end_to_end if "epsilon_end_to_end" in q else q.epsilon
        rows += [{"panel": tag, "arm": lab, "epsilon": e, "epsilon_end_to_end": ee, "accuracy_median": a}
                 for e, ee, a in zip(q.epsilon, e2e, q.accuracy_median)]


# AGS runs of blobs_ags with other certificates than the MILP windows: (run id, label, colour)
OTHER_AGS = (("ags_ibp", "IBP ledger", "#d95f02"), ("ags_lp", "LP windows, F = 10", "#1b9e77"),
             ("ags_crowntt", "CROWN-TT + slopes", "#e7298a"))


def blobs_ags(runs, *, profile: str = "paper"):
    """Accuracy against epsilon on blobs: AGS per MILP frequency F (Cauchy pure, Laplace approx),
    AGS with the other certificates (runs ``ags_ibp``, ``ags_lp``, ``ags_crowntt``: the per-epoch IBP
    ledger, LP windows, CROWN through time; a run without a smoothness proof is labelled so and drawn dashed), matched
    DP-SGD with basic composition over every step (the caption's arm) and accounted over the
    batches a record is in, PATE; dotted: non-private accuracy.  Medians over draws."""
    fig, axes = style.panels(2, width=3.4, sharey=True)
    ags = sorted(runs.ok("ags_F"), key=lambda r: float(next(iter(r.params.values()), 0)))
    base = runs.one("baselines")
    bres = base.csv("results") if base is not None else None
    rows, nonpriv = [], None
    cols = style.ramp(len(ags), "Blues_r") if ags else []
    for ax, regime in zip(axes, ("pure", "approx")):
        series = []
        for r, col in zip(ags, cols):
            res = r.csv("results")
            nonpriv = float(res.nonprivate_accuracy.iloc[0])
            q = res[(res.arm == "AGS") & (res.mechanism == AGS_MECH[regime])].sort_values("epsilon")
            f = next(iter(r.params.values()), "?")
            cert = str(res.certificate.iloc[0]).upper() if "certificate" in res else ""
            proven = bool(res.smoothness_proof.iloc[0]) if "smoothness_proof" in res else True
            series.append((f"AGS ({cert}, F = {f}{'' if proven else ', unproven smoothness'})", "AGS", q,
                           {"color": col, "marker": "o"}))
        for rid, name, col in OTHER_AGS:
            r = runs.one(rid)
            if r is None:
                continue
            res = r.csv("results")
            nonpriv = float(res.nonprivate_accuracy.iloc[0])
            q = res[(res.arm == "AGS") & (res.mechanism == AGS_MECH[regime])].sort_values("epsilon")
            proven = bool(res.smoothness_proof.iloc[0]) if "smoothness_proof" in res else True
            series.append((f"AGS ({name}{'' if proven else ', unproven smoothness'})", "AGS", q,
                           {"color": col, "marker": "D", "ls": "-" if proven else "--"}))
        if bres is not None:
            nonpriv = nonpriv or float(bres.nonprivate_accuracy.iloc[0])
            for arm, q in _baseline_rows(bres, regime).items():
                if arm == "DP-SGD optimised":
                    continue          # the blobs figure compares with matched DP-SGD and PATE
                series.append((style.label(arm), arm, q, {"marker": "s"}))
        _accuracy_panel(ax, series, rows, regime)
        if nonpriv is not None:
            ax.axhline(nonpriv, color=style.NONPRIVATE, ls=":", lw=1.2, label="non-private")
        if not series:
            style.empty(ax, "no blobs runs")
        ax.set_xscale("log")
        ax.set(xlabel=r"$\epsilon$", title=("pure DP (Cauchy)" if regime == "pure" else r"approx. DP (Laplace, $\delta=10^{-5}$)"))
    axes[0].set_ylabel("test accuracy (median)")
    style.legend_below(fig, axes, ncol=3)
    fig.tight_layout()
    return fig, pd.DataFrame(rows)


def mnist_imdb(runs, *, profile: str = "paper"):
    """MNIST 0-4 (left pair) and IMDB (right pair), pure and approximate DP: AGS against matched
    DP-SGD (basic / exact composition), optimised DP-SGD and PATE; IMDB hidden-layer arms dashed."""
    fig, axes = style.panels(4, width=2.9, sharey=False)
    rows = []
    for d, (rid, title) in enumerate((("mnist5", "MNIST 0-4"), ("imdb", "IMDB"))):
        r = runs.one(rid)
        res = r.csv("results") if r is not None else None
        hid = runs.one(f"{rid}_hidden")
        hres = hid.csv("results") if hid is not None else None
        for j, regime in enumerate(("pure", "approx")):
            ax = axes[2 * d + j]
            ax.set_title(f"{title}, {'pure' if regime == 'pure' else 'approx.'} DP")
            if res is None:
                style.empty(ax, f"no {rid} run")
                continue
            q = res[(res.arm == "AGS") & (res.mechanism == AGS_MECH[regime])].sort_values("epsilon")
            series = [("AGS", "AGS", q, {"marker": "o"})]
            for arm, b in _baseline_rows(res, regime).items():
                series.append((style.label(arm), arm, b, {"marker": "s"}))
            if hres is not None:
                qh = hres[(hres.arm == "AGS") & (hres.mechanism == AGS_MECH[regime])].sort_values("epsilon")
                series.append((style.label("AGS (hidden)"), "AGS (hidden)", qh, {"marker": "o", "ls": "--"}))
                bh = _baseline_rows(hres, regime).get("DP-SGD matched")
                if bh is not None:
                    series.append((style.label("DP-SGD matched (hidden)"), "DP-SGD matched (hidden)", bh,
                                   {"marker": "s", "ls": "--"}))
            _accuracy_panel(ax, series, rows, f"{rid}/{regime}")
            ax.axhline(float(res.nonprivate_accuracy.iloc[0]), color=style.NONPRIVATE, ls=":", lw=1.2, label="non-private")
            ax.set_xscale("log")
            ax.set(xlabel=r"$\epsilon$")
        axes[2 * d].set_ylabel("test accuracy (median)")
    style.legend_below(fig, axes, ncol=4)
    fig.tight_layout()
    return fig, pd.DataFrame(rows)


def hybrid_sst2(runs, *, profile: str = "paper"):
    """SST-2: accuracy against the total epsilon under (eps, 1e-5)-DP (left) and with a pure-DP
    head (middle); accuracy against the private set size N at eps = 3 (right)."""
    fig, axes = style.panels(3, width=3.2)
    r = runs.one("hybrid")
    res = r.csv("results") if r is not None else None
    rows = []
    if res is None or not len(res):
        for ax in axes:
            style.empty(ax, "no hybrid run (certdp hybrid)")
        return fig, pd.DataFrame()
    res = res[res.chosen.astype(bool)]
    eps_sweep = res[res.sweep == "epsilon"]

    def arm_rows(df, arm, head):
        q = df[df.arm == arm]
        if head is not None:
            q = q[q.head_release == head]
        return q

    panels = [(axes[0], "laplace_p", r"$(\epsilon, 10^{-5})$-DP"), (axes[1], "cauchy_p", "pure-DP head")]
    for ax, head, title in panels:
        for arm in ("dplora", "hybrid", "frozen_ags", "frozen_dpsgd"):
            q = arm_rows(eps_sweep, arm, head if arm in ("hybrid", "frozen_ags") else None).sort_values("epsilon")
            if head == "cauchy_p" and arm in ("dplora", "frozen_dpsgd"):
                kw = {"ls": "--", "alpha": 0.6}       # the approx-DP arms, for reference
            else:
                kw = {}
            if len(q):
                ax.plot(q.epsilon, q.accuracy_median, marker="o", color=style.color(arm), label=style.label(arm), **kw)
                rows += [{"panel": title, "arm": arm, "head": head, "epsilon": e, "n_private": n, "accuracy_median": a}
                         for e, n, a in zip(q.epsilon, q.n_private, q.accuracy_median)]
        if not len(arm_rows(eps_sweep, "hybrid", head)) and not len(arm_rows(eps_sweep, "frozen_ags", head)):
            style.empty(ax, f"no {head} head in this run")
        ax.set(xlabel=r"total $\epsilon = \epsilon_1 + \epsilon_2$", title=title)
        ax.set_xscale("log")
    size = res[res.sweep == "size"]
    ax = axes[2]
    for arm in ("dplora", "hybrid", "frozen_ags", "frozen_dpsgd"):
        q = arm_rows(size, arm, "laplace_p" if arm in ("hybrid", "frozen_ags") else None).sort_values("n_private")
        if len(q):
            ax.plot(q.n_private, q.accuracy_median, marker="o", color=style.color(arm), label=style.label(arm))
            rows += [{"panel": "size", "arm": arm, "head": "laplace_p", "epsilon": e, "n_private": n, "accuracy_median": a}
                     for e, n, a in zip(q.epsilon, q.n_private, q.accuracy_median)]
    eps_size = size.epsilon.iloc[0] if len(size) else 3
    ax.set(xlabel="private set size N", title=rf"$\epsilon = {eps_size:g}$, $\delta=10^{{-5}}$")
    ax.set_xscale("log")
    if not len(size):
        style.empty(ax, "no size sweep in this run")
    axes[0].set_ylabel("test accuracy (median)")
    style.legend_below(fig, axes, ncol=4)
    fig.tight_layout()
    return fig, pd.DataFrame(rows)


def adult_sampling(runs, *, profile: str = "paper"):
    """Adult: accuracy against the number of releases n (optimal composition filled, basic
    hollow; non-private band, majority dashed); eps0 per release (optimal solid, eps/n dashed);
    their ratio."""
    fig, axes = style.panels(3, width=3.2)
    r = runs.one("adult")
    ab = r.csv("ablation") if r is not None else None
    if ab is None or not len(ab):
        for ax in axes:
            style.empty(ax, "no adult sampling-ablation run")
        return fig, pd.DataFrame()
    res = r.csv("results")
    eps = sorted(ab.epsilon.unique())
    cols = dict(zip(eps, style.ramp(len(eps), "plasma")))
    a, m, g = axes
    for e in eps:
        for comp, filled in (("optimal", True), ("basic", False)):
            q = ab[(ab.epsilon == e) & (ab.composition == comp)].sort_values("n_releases")
            if len(q):
                a.plot(q.n_releases, q.accuracy_median, marker="o", color=cols[e], ls="-" if filled else ":",
                       mfc=cols[e] if filled else "white", label=rf"$\epsilon$ = {e:g}" if filled else "_")
        q = ab[(ab.epsilon == e) & (ab.composition == "optimal")].sort_values("n_releases")
        if len(q):
            m.plot(q.n_releases, q.eps0, color=cols[e], ls="-", marker="o", ms=3)
            m.plot(q.n_releases, q.eps0_basic, color=cols[e], ls="--", lw=1)
            g.plot(q.n_releases, q.gain_vs_basic, color=cols[e], marker="o", ms=3)
    if res is not None and len(res):
        npa, maj = float(res.nonprivate_accuracy.iloc[0]), float(res.majority_rate.iloc[0])
    else:
        npa, maj = float(ab.nonprivate_accuracy.iloc[0]), float(ab.majority_rate.iloc[0])
    a.axhspan(npa - 0.005, npa + 0.005, color=style.NONPRIVATE, alpha=0.3, lw=0)
    a.axhline(maj, color="black", ls="--", lw=1)
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("releases n")
    a.set(ylabel="test accuracy (median)", title=r"accuracy, $(\epsilon, 10^{-5})$-DP")
    m.set_yscale("log")
    m.set(ylabel=r"per-release $\epsilon_0$", title=r"optimal (solid) vs. $\epsilon/n$ (dashed)")
    g.set(ylabel=r"$\epsilon_0^{\mathrm{opt}} / (\epsilon/n)$", title="gain from accounting")
    g.axhline(1.0, color="grey", lw=0.8, ls=":")
    key = [Line2D([], [], color="k", marker="o", label="optimal composition"),
           Line2D([], [], color="k", marker="o", mfc="white", ls=":", label="basic composition"),
           Line2D([], [], color=style.NONPRIVATE, lw=6, alpha=0.3, label="non-private"),
           Line2D([], [], color="black", ls="--", lw=1, label="majority class")]
    style.legend_below(fig, axes, ncol=5, extra=[(h, h.get_label()) for h in key])
    fig.tight_layout()
    data = ab[["epsilon", "n_releases", "composition", "eps0", "eps0_basic", "gain_vs_basic", "accuracy_median"]].copy()
    data["nonprivate_accuracy"], data["majority_rate"] = npa, maj
    return fig, data
