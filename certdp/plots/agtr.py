"""AGT-R figures: PATE comparison (excess and raw scale), ablations, certificates, shards."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from certdp.plots import style
from certdp.privacy import noise

# the releases each arm uses in the paper's AGT-R figures
PURE = {"pate_r": "laplace_gs", "gs": "laplace_gs", "pate_agtr": "cauchy", "agtr": "cauchy", "agtr_wor": "cauchy"}
APPROX = {"pate_r": "gaussian_gs", "gs": "gaussian_gs", "pate_agtr": "laplace", "agtr": "laplace", "agtr_wor": "laplace"}
DATASETS = (("linear", "Linear"), ("california", "California"))
FLOOR = 1e-6      # excess errors at or below the non-private error are drawn at this floor


def _mech(regime: str, arm: str) -> str:
    return (PURE if regime == "pure" else APPROX)[arm]


def _compare(runs, *, raw: bool):
    fig, axes = style.panels(4, width=2.9)
    arms = ["agtr", "pate_r", "pate_agtr", "agtr_wor"] + (["gs"] if raw else [])
    rows = []
    for d, (rid, title) in enumerate(DATASETS):
        r = runs.one(rid)
        s = r.csv("summary") if r is not None else None
        for j, regime in enumerate(("pure", "approx")):
            ax = axes[2 * d + j]
            metric = "MAE" if regime == "pure" else "MSE"
            ax.set_title(f"{title}, {'pure' if regime == 'pure' else 'approx.'} DP")
            if s is None or not len(s):
                style.empty(ax, f"no {rid} run")
                continue
            for arm in arms:
                q = s[(s.arm == arm) & (s.regime == regime) & (s.mechanism == _mech(regime, arm))].sort_values("epsilon")
                if not len(q):
                    continue
                y = q.error if raw else q.excess.clip(lower=FLOOR)
                kw = dict(color=style.color(arm), label=style.label(arm), marker="o")
                if arm == "gs":
                    kw.update(color="#7f7f7f", ls=":", marker="s")
                ax.plot(q.epsilon, y, **kw)
                rows += [{"dataset": rid, "regime": regime, "metric": metric.lower(), "arm": arm,
                          "mechanism": _mech(regime, arm), "epsilon": e, "best_T": t, "value": v,
                          "error": er, "excess": ex}
                         for e, t, v, er, ex in zip(q.epsilon, q.best_T, y, q.error, q.excess)]
            if raw and len(s):
                floor = s.nonprivate_mae.iloc[0] if regime == "pure" else s.nonprivate_mse.iloc[0]
                ax.axhline(floor, color=style.NONPRIVATE, lw=0.8, ls="--", label="non-private")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel(r"$\epsilon$")
            ax.set_ylabel(("test " if not raw else "") + (metric if raw else f"excess {metric}"))
    style.legend_below(fig, axes, ncol=6)
    fig.tight_layout()
    return fig, pd.DataFrame(rows)


def agtr_pate(runs, *, profile: str = "paper"):
    """Excess error over the non-private prediction: PATE-R and PATE-AGT-R at their best T,
    AGT-R on the full data, AGT-R on one shard with the amplified budget."""
    return _compare(runs, raw=False)


def agtr_gs(runs, *, profile: str = "paper"):
    """The comparison on the raw scale, with the global-sensitivity arm (grey, dotted)."""
    return _compare(runs, raw=True)


def pate_shard_ablation(runs, *, profile: str = "paper"):
    """MAE against the number of shards T at fixed N, one line per epsilon, pure DP."""
    fig, axes = style.panels(3, width=3.2, sharey=True)
    r = runs.one("linear_ablation")
    res = r.csv("results") if r is not None else None
    rows = []
    titles = {"pate_r": "PATE-R (Laplace, GS)", "pate_agtr": r"PATE-AGT-R (Cauchy, $\beta=\epsilon/2$)",
              "agtr_wor": r"AGT-R, one shard ($\epsilon_b$)"}
    if res is None:
        for ax in axes:
            style.empty(ax, "no shard-ablation run")
        return fig, pd.DataFrame()
    pure = res[res.regime == "pure"]
    eps = sorted(pure.epsilon.dropna().unique())
    cols = dict(zip(eps, style.ramp(len(eps))))
    mean = res[res.arm == "pate_mean"].sort_values("shards")
    for ax, arm in zip(axes, ("pate_r", "pate_agtr", "agtr_wor")):
        for e in eps:
            q = pure[(pure.arm == arm) & (pure.epsilon == e) & (pure.mechanism == PURE[arm])].sort_values("shards")
            if len(q):
                ax.plot(q.shards, q.mae, marker="o", color=cols[e], label=rf"$\epsilon$ = {e:g}")
                rows += [{"arm": arm, "epsilon": e, "shards": t, "mae": m} for t, m in zip(q.shards, q.mae)]
        if len(mean):
            ax.plot(mean.shards, mean.mae, ls="--", color="black", lw=1, label="PATE mean (noise-free)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set(title=titles[arm], xlabel="shards T")
    rows += [{"arm": "pate_mean", "epsilon": math.nan, "shards": t, "mae": m} for t, m in zip(mean.shards, mean.mae)]
    axes[0].set_ylabel("test MAE")
    style.legend_below(fig, axes, ncol=min(len(eps) + 1, 8))
    fig.tight_layout()
    return fig, pd.DataFrame(rows)


# ---------------------------------------------------------------------------- ablations
MODES = {"per_epoch": "per-epoch ledger", "per_batch": "per-batch budget"}


def _ablation_series(runs):
    """The two ablations' runs, one dict per run, sorted by panel and setting:
    ``ds`` (panel), ``label`` (legend), ``key`` (the setting, shared by a setting's two
    substitution modes: it picks the colour), ``sort``, ``mode`` (``per_epoch``, ``per_batch``,
    or ``full`` for a full-batch run, certified per batch whatever the mode) and ``run``."""
    out = []
    for r in runs.ok("linear_ibp"):
        mode = str(r.params.get("certificate.substitutions", "per_epoch"))
        out.append({"ds": "linear", "key": "IBP", "sort": (-1, mode != "per_epoch"), "mode": mode,
                    "label": f"IBP, {MODES[mode]}", "run": r})
    for r in runs.ok("linear_F"):
        f = int(r.params.get("certificate.frequency", 0))
        out.append({"ds": "linear", "key": f"F = {f}", "sort": (f, False), "mode": "window",
                    "label": f"MILP, F = {f}", "run": r})
    for rid in ("california_bs", "california_full"):
        for r in runs.ok(rid):
            b = int(r.params.get("train.batch_size", 0))
            mode = "full" if rid == "california_full" else str(r.params.get("certificate.substitutions", "per_epoch"))
            lab = f"BS = {b}" + (" (full batch)" if mode == "full" else f", {MODES[mode]}")
            out.append({"ds": "california", "key": f"BS = {b}", "sort": (b, mode == "per_batch"), "mode": mode,
                        "label": lab, "run": r})
    return sorted(out, key=lambda s: (s["ds"], s["sort"]))


def _colours(ser) -> dict:
    """One colour per setting (F, batch size), shared by its two substitution modes."""
    keys = list(dict.fromkeys(s["key"] for s in ser))
    return dict(zip(keys, style.ramp(len(keys))))


def _linear_gs_arm(res: pd.DataFrame, cert: pd.DataFrame | None, eps, delta: float):
    """The linear ablation's global-sensitivity arm, derived from the CSVs: the runner has no GS
    release there (``privacy.global_sensitivity=none``) and the paper's GS is the trajectory's
    clipping ceiling, the width of T_N (the certificate's largest radius, k = N).  Pure DP:
    Laplace(GS/eps) added to the non-private residual r ~ N(0, MSE_np), MAE by Monte Carlo;
    approximate DP: the Gaussian mechanism of Theorem 3.3, MSE = MSE_np + sigma^2."""
    if cert is None or not len(cert):
        return None
    gs = float(cert.sort_values("k").a_bar_mean.iloc[-1])
    mse_np = float(res.nonprivate_mse.iloc[0])
    # the draws come from the one sampler home (certdp/privacy/noise.py), seeded: a figure's Monte Carlo
    rng = np.random.default_rng(0)
    z = math.sqrt(mse_np) * noise.gaussian(rng, 200_000).numpy()
    lap = noise.laplace(rng, 200_000).numpy()
    mae = [float(np.abs(z + gs / e * lap).mean()) for e in eps]
    mse = [mse_np + (gs * math.sqrt(2 * math.log(1.25 / delta)) / e) ** 2 for e in eps]
    return gs, mae, mse


def agtr_ablation(runs, *, profile: str = "paper"):
    """Linear: concretisation frequency F (MILP windows) and IBP; California: batch size.  Mini-batch
    IBP runs drawn solid with the per-epoch substitution ledger (the default) and dashed with the
    per-batch budget (k substituted records in every batch); full batch is one run.  Pure DP: Cauchy
    at beta = eps/2 (MAE); approximate DP: Laplace, delta = 1e-5 (MSE); global sensitivity black."""
    fig, axes = style.panels(4, width=2.9)
    series = _ablation_series(runs)
    rows, legends = [], []
    for d, (ds, title) in enumerate(DATASETS):
        ser = [s for s in series if s["ds"] == ds]
        cols = _colours(ser)
        for j, regime in enumerate(("pure", "approx")):
            ax = axes[2 * d + j]
            metric = "mae" if regime == "pure" else "mse"
            ax.set_title(f"{title}: {'frequency F' if ds == 'linear' else 'batch size'}, "
                         f"{'pure' if regime == 'pure' else 'approx.'} DP")
            if not ser:
                style.empty(ax, f"no {ds} ablation runs")
                continue
            for s in ser:
                res = s["run"].csv("results")
                q = res[(res.arm == "agtr") & (res.mechanism == _mech(regime, "agtr"))].sort_values("epsilon")
                dashed = s["mode"] == "per_batch"
                # California: the colour names the batch size, the line style the mode (key below)
                lab = s["key"] + (" (full batch)" if s["mode"] == "full" else "") if ds == "california" else s["label"]
                ax.plot(q.epsilon, q[metric], marker="o", color=cols[s["key"]], ls="--" if dashed else "-",
                        mfc="white" if dashed else cols[s["key"]],
                        label="_" + lab if (ds == "california" and dashed) else lab)
                rows += [{"dataset": ds, "setting": s["label"], "substitutions": s["mode"], "regime": regime,
                          "metric": metric, "epsilon": e, "value": v} for e, v in zip(q.epsilon, q[metric])]
            res0 = ser[0]["run"].csv("results")
            g = res0[(res0.arm == "gs") & (res0.mechanism == _mech(regime, "gs"))].sort_values("epsilon")
            if len(g):
                ax.plot(g.epsilon, g[metric], color="black", marker="s", label="global sensitivity")
                rows += [{"dataset": ds, "setting": "GS", "substitutions": "", "regime": regime, "metric": metric,
                          "epsilon": e, "value": v} for e, v in zip(g.epsilon, g[metric])]
            elif ds == "linear":
                eps = sorted(res0.epsilon.unique())
                delta = float(res0[res0.regime == "approx"].delta.max()) if (res0.regime == "approx").any() else 1e-5
                der = _linear_gs_arm(res0, ser[0]["run"].csv("certificate"), eps, delta)
                if der is not None:
                    gs, mae, mse = der
                    v = mae if regime == "pure" else mse
                    ax.plot(eps, v, color="black", marker="s", label="global sensitivity")
                    rows += [{"dataset": ds, "setting": f"GS (derived, {gs:.3g})", "substitutions": "",
                              "regime": regime, "metric": metric, "epsilon": e, "value": x} for e, x in zip(eps, v)]
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set(xlabel=r"$\epsilon$", ylabel=f"test {metric.upper()}")
        h, lab = axes[2 * d + 1].get_legend_handles_labels()
        if ds == "california" and any(s["mode"] == "per_batch" for s in ser):
            h += [Line2D([], [], color="k", marker="o", ls="-"),
                  Line2D([], [], color="k", marker="o", mfc="white", ls="--")]
            lab += ["solid: per-epoch ledger", "dashed: per-batch budget"]
        legends.append((d, h, lab))
    fig.tight_layout()
    # one legend per dataset, below its pair of panels (placed after the layout, outside the data)
    for d, h, lab in legends:
        if h:
            left, right = axes[2 * d].get_position(), axes[2 * d + 1].get_position()
            fig.legend(h, lab, loc="upper center", bbox_to_anchor=((left.x0 + right.x1) / 2, 0.0), ncol=3,
                       fontsize=7)
    return fig, pd.DataFrame(rows)


def _staircase(r, beta: float = 0.5):
    """A run's staircase at the certificate's beta nearest ``beta``, by radius index j (the
    discount exponent phi_j of certdp/privacy/sensitivity.py): the computed rows (V_j = A(x, k_j),
    the cross-radius bound between radii k_j and k_{j+1}) and the last piece (the ceiling T_N at
    k = N, or the global sensitivity G beyond the last radius).  Older CSVs without ``phi`` are
    read with the index as the exponent."""
    c = r.csv("certificate")
    betas = c.beta.unique()
    b = betas[np.argmin(np.abs(betas - beta))]
    c = c[c.beta == b].sort_values("k").reset_index(drop=True)
    if "phi" not in c:
        c["phi"] = np.arange(len(c))
    if "source" not in c:
        c["source"] = ["computed"] * (len(c) - 1) + ["ceiling"]
    return b, c[c.source == "computed"], c[c.source != "computed"]


def agtr_certificates(runs, *, profile: str = "paper"):
    """Cross-radius certificates against the radius index j (ticks: the radius k_j; last tick the
    final piece, N for the ceiling T_N or G for the global sensitivity): dashed (left axis)
    A_bar(k_j) averaged over test inputs; solid (right axis) its index-discounted contribution
    A_bar(k_j) e^{-beta j} at beta = 1/2, the final piece included, with the maximum (SS^beta)
    starred; dotted the GS ceiling.  Panels: linear (IBP with either substitution mode, MILP per
    F); California with the per-epoch ledger; California with the per-batch budget (the
    full-batch run in both)."""
    fig, axes = style.panels(3, width=4.4, height=3.0)
    series = _ablation_series(runs)
    rows = []
    panels = (("linear", "Linear: concretisation frequency", ("per_epoch", "per_batch", "window")),
              ("california", "California: batch size, per-epoch ledger", ("per_epoch", "full")),
              ("california", "California: batch size, per-batch budget", ("per_batch", "full")))
    for ax, (ds, title, modes) in zip(axes, panels):
        ser = [s for s in series if s["ds"] == ds and s["mode"] in modes]
        ax.set_title(title)
        if not ser:
            style.empty(ax, f"no {ds} ablation runs" + (" with the per-batch budget" if "per_batch" in title else ""))
            continue
        ax2 = ax.twinx()
        ax2.spines["right"].set_visible(True)
        ax2.grid(False)
        # linear: a colour per line (IBP's two modes differ); California: a colour per batch size
        cols = ({s["label"]: c for s, c in zip(ser, style.ramp(len(ser)))} if ds == "linear"
                else {s["label"]: c for s in ser for k, c in _colours(ser).items() if s["key"] == k})
        gs_val, ticks = None, {}
        for s in ser:
            r, lab, col = s["run"], s["label"], cols[s["label"]]
            b, comp, last = _staircase(r)
            ticks.update({int(j): f"{int(k)}" for j, k in zip(comp.phi, comp.k)})
            ticks.update({int(j): ("N" if src == "ceiling" else "G") for j, src in zip(last.phi, last.source)})
            ax.plot(comp.phi, comp.a_bar_mean, ls="--", color=col, label=lab if ds == "linear" else s["key"]
                    + (" (full batch)" if s["mode"] == "full" else ""))
            both = pd.concat([comp, last])
            ax2.plot(both.phi, both.contribution_mean, ls="-", color=col)
            m = both.contribution_mean.idxmax()
            ax2.plot(both.phi[m], both.contribution_mean[m], marker="*", ms=11, color=col, mec="black", mew=0.5,
                     zorder=5)
            res = r.csv("results")
            g = res[res.arm == "gs"] if res is not None else []
            if len(g):
                gs_val = float(g.ss_mean.iloc[0])
            elif len(last):
                gs_val = float(last.a_bar_mean.iloc[-1])
            rows += [{"dataset": ds, "setting": lab, "substitutions": s["mode"], "k": k, "phi": j, "source": src,
                      "beta": b, "a_bar_mean": a, "smooth_contribution": v, "is_max": i == m}
                     for i, k, j, src, a, v in zip(both.index, both.k, both.phi, both.source, both.a_bar_mean,
                                                   both.contribution_mean)]
        if gs_val is not None:
            ax.axhline(gs_val, color="black", ls=":", lw=1.2, label=f"GS ceiling ({gs_val:.3g})")
            rows.append({"dataset": ds, "setting": "GS ceiling", "substitutions": "", "k": math.nan, "a_bar_mean": gs_val})
        js = sorted(ticks)
        step = max(1, math.ceil(len(js) / 12))            # at most ~12 labelled ticks
        ax.set_xticks(js)
        ax.set_xticklabels([ticks[j] if (i % step == 0 or i == len(js) - 1) else "" for i, j in enumerate(js)],
                           fontsize=7)
        ax.set_yscale("log")
        ax2.set_yscale("log")
        ax.set(xlabel=r"radius $k_j$ (spaced by its index $j$)", ylabel=r"$\bar{A}(k_j)$ (dashed)")
        ax2.set_ylabel(r"$\bar{A}(k_j)\,e^{-j/2}$ (solid)")
        h, lab = ax.get_legend_handles_labels()
        ax.legend(h, lab, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, fontsize=7)
    key = [Line2D([], [], color="k", ls="--", label=r"$\bar{A}(x,k_j)$, left axis"),
           Line2D([], [], color="k", ls="-", label=r"$\bar{A}(x,k_j)e^{-\beta j}$, $\beta=1/2$, right axis"),
           Line2D([], [], color="k", ls="", marker="*", ms=10, label=r"max = $\mathrm{SS}^\beta$"),
           Line2D([], [], color="k", ls=":", label="global-sensitivity ceiling"),
           Line2D([], [], ls="", label="last tick: N = ceiling $T_N$, G = global sensitivity")]
    fig.legend(handles=key, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=5, fontsize=7.5)
    fig.tight_layout()
    return fig, pd.DataFrame(rows)
