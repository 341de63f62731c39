"""AGS: Abstract Gradient Sampling, private learning from certified parameter envelopes (paper S4).

Single release (Corollary 4.1).  Train nominally and certify envelopes T_k (k in K, with N or
the trivial cover beyond the largest radius); the query is the parameter vector itself, so the
sound-bounding function is

    A_bar^k = sum_j max(theta_U,j^{k+1} - theta_L,j^k,  theta_U,j^k - theta_L,j^{k+1})

(``privacy.sensitivity.staircase`` with q = theta), u = SS^beta = max_j e^{-beta j} A_bar^{r_j}
(j the index of the computed radius r_j: beta-smooth when the envelopes nest), and
the release is theta + eta with independent coordinates drawn from a P-parameter mechanism of
``privacy.mechanisms`` (``cauchy_p``, ``cauchy6_p``, ``laplace_p``, ``laplace_union_p``), whose
beta rule and scale are derived there.

Global cover.  Any two runs of the nominal algorithm from the same start differ, per coordinate
and per step, by at most lam*|diff| + 2*gamma*lr (every clipped gradient coordinate is in
[-gamma, gamma]), so ||theta(D) - theta(D')||_1 <= P * 2 gamma lr sum_t lam^(T-1-t) for *any*
D, D'.  This is exactly the width of AGT's T_N box; it caps every A_bar^k and covers the radii
beyond the largest computed one when N is not in K.  (It is *not* the per-sample ceiling of
``certify.trajectory_ceiling``, which ignores that the other samples' gradients change once the
trajectories separate.)

Multi-release (Algorithm 2, Lemma 4.1, Theorem 4.1).  Sampling steps S split training into
windows; each window is certified by ``run_agt(..., theta_init=released point, steps=window)``
with the fixed batch plan of the whole run: the envelopes of a window start collapsed on the
previous *noisy* release (that release is already paid for), so they are points at the start of
each window.  Per-release budgets come from an accountant (basic, advanced, optimal homogeneous
composition, or PLD of the (eps0, delta0) dominating pair); see the accountants of
:mod:`certdp.privacy.accounting`.

The published release and the report.  Each (release, epsilon) is published once
(``publish/released.json``, :func:`publish_release`): a draw of its own from the OS CSPRNG
(:mod:`certdp.privacy.noise`), so no published value - and not the seed, which no published file
holds - can regenerate its noise.  The accuracy statistics of ``results.csv`` come from
``privacy.n_draws`` *seeded* draws (``generator_for(seed, "ags", release, eps, n)``), byte-identical
across reruns; they are the researcher's private report and never published.  Under
``privacy.reproducible_release=true`` the published draw is seeded too (debugging) and the file
says ``publishable: false``.

Huge K (mnist5: k = 1..4096 and N over 28,596 samples).  The per-sample gradient intervals of
radius k may be computed on any box containing T_k; :class:`certdp.bounds.shared.SharedBoxes` computes them on a few
representative radii (a geometric grid) and lets every k in a group use its representative's
intervals with its own top-k aggregation and k*gamma term.  Sound because T_k is a subset of
T_r for k <= r (AGT intersects boxes downwards).  Every radius keeps its own envelope.  Not
beta-smooth, though: radii k and k+1 of one group read the same box, so envelopes of neighbours
need not nest (privacy/smoothness.py refuses it unless privacy.smoothness=unproven).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import torch

from certdp.agt import Envelopes
from certdp.baselines import baseline_rows, end_to_end
from certdp.certify import Experiment, build_experiment, certify_window, nominal, spent, with_provenance
from certdp.certify import publish
from certdp.certify.released import RELEASED_FORMAT
from certdp.metrics import accuracy, majority_rate
from certdp.privacy.accounting import accountant_names, per_release_budget
from certdp.privacy.mechanisms import Mechanism, make_mechanism, mechanism_class
from certdp.privacy.noise import release_source
from certdp.privacy.sensitivity import Staircase
from certdp.seeding import generator_for
from certdp.settings import ExperimentSettings
from certdp.settings.commands import AGSSettings
from certdp.settings.privacy import PrivacySettings

log = logging.getLogger("certdp")


def schedule(steps: int, *, n: int = 1, sampling_steps=()) -> list[tuple[int, int]]:
    """Windows [(a, b)] of 0-based step ranges range(a, b); releases happen after step b."""
    S = list(sampling_steps) if sampling_steps else [round((j + 1) * steps / n) for j in range(n)]
    out, a = [], 0
    for s in S:
        if s > a:
            out.append((a, s))
            a = s
    return out


def accounting_frame(eps_list, delta: float, ns, methods=None) -> pd.DataFrame:
    """The per-release budget each accountant allows, per total epsilon and number of releases."""
    rows = []
    for e in eps_list:
        for n in ns:
            b0 = e / n
            for m in (methods or accountant_names("compose")):
                e0, d0 = per_release_budget(m, epsilon=e, delta=delta, n=n)
                rows.append({"epsilon": e, "delta": delta, "n_releases": n, "accountant": m,
                             "eps0": e0, "delta0": d0, "gain_vs_basic": e0 / b0})
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Release:
    """One (release, total epsilon) arm: the accountant, the per-release budget and the
    mechanism at that budget (built before any training, so a bad beta fails first)."""
    name: str
    epsilon: float
    delta: float
    composition: str
    eps0: float
    delta0: float
    mechanism: Mechanism


def plan_releases(exp: Experiment, st: AGSSettings, n_rel: int) -> list[Release]:
    """Every (release, epsilon) of ``privacy`` with its per-release budget: pure DP composes by
    basic composition, approximate DP by ``ags.composition``."""
    pv, P = exp.privacy, exp.model.n_params
    out = []
    for name in pv.releases:
        approx = mechanism_class(name, query="parameter").regime == "approx"
        comp = st.composition if approx else "basic"
        for eps in pv.epsilons:
            delta = pv.delta if approx else 0.0
            e0, d0 = per_release_budget(comp, epsilon=eps, delta=delta, n=n_rel)
            mech = make_mechanism(name, query="parameter", epsilon=e0, delta=d0, beta=pv.beta, n_params=P)
            out.append(Release(name, eps, delta, comp, e0, d0, mech))
    return out


def release_trajectory(exp: Experiment, mech: Mechanism, windows, source, first=None):
    """One run of Algorithm 2: returns the final private parameters and the per-release u's.
    ``source``: where the noise comes from (a seeded generator for the statistics, the secure
    source for the published release, :mod:`certdp.privacy.noise`).  ``first`` may carry the
    (shared) certificate of the first window."""
    theta = exp.model.init(exp.train.seed)
    us = []
    for j, w in enumerate(windows):
        env, sc = first if (j == 0 and first is not None) else certify_window(exp, theta, w)
        u = float(sc.smooth(mech.beta))
        us.append(u)
        theta = publish.release(env.nominal, u, mech, source)
    return theta, us


def run(settings: ExperimentSettings, *, progress: bool = True) -> dict[str, pd.DataFrame]:
    st, pv = settings.ags, settings.privacy
    exp = build_experiment(settings, task="classification", smooth_release=True, share_ratio=st.share_ratio)
    ds, model = exp.dataset, exp.model
    xt, yt = exp.xt, exp.yt
    P = model.n_params
    ks = exp.ks
    windows = schedule(exp.train.steps, n=st.releases_n, sampling_steps=st.sampling_steps)
    n_rel = len(windows)
    releases = plan_releases(exp, st, n_rel)
    if st.ablation_n:
        ablation_release(exp, st)
    log.info("AGS on %s: N=%d, model %s (P=%d), %d steps in %d release window(s), |K|=%d (k_max %d), certificate %s",
             ds.name, ds.n_train, model.widths, P, exp.train.steps, n_rel, len(ks), ks[-1], exp.engine.name)
    theta0 = model.init(exp.train.seed)
    theta_np = nominal(exp, theta0)
    np_acc = float(accuracy(model, theta_np, xt, yt))
    maj = majority_rate(yt)
    log.info("non-private test accuracy %.4f (majority class %.4f)", np_acc, maj)

    t0 = time.perf_counter()
    first = certify_window(exp, theta0, windows[0], progress=progress)
    t_cert = time.perf_counter() - t0
    log.info("certified window 1 (%d steps, %d radii) in %.1f s", windows[0][1] - windows[0][0], len(ks), t_cert)
    common = {"dataset": ds.name, "n_train": ds.n_train, "n_test": len(yt), "n_params": P,
              "smoothness_proof": exp.smoothness_proof,
              "nonprivate_accuracy": np_acc, "majority_rate": maj, "seed": exp.seed,
              "selection": settings.run.selection}

    rows, published = [], []
    for rel in releases:
        mech = rel.mechanism
        gen = generator_for(exp.seed, "ags", rel.name, rel.epsilon, n_rel)       # the statistics (report)
        if n_rel == 1:
            env, sc = first
            u = float(sc.smooth(mech.beta))
            thetas = publish.release(env.nominal, u, mech, gen, draws=pv.n_draws)
            us = [u]
        else:
            thetas, all_us = [], []
            for _ in range(pv.n_draws):
                th, us_d = release_trajectory(exp, mech, windows, gen, first)
                thetas.append(th)
                all_us.append(us_d)
            thetas = torch.stack(thetas)
            us = list(np.median(np.array(all_us), 0))
        acc = accuracy(model, thetas, xt, yt).numpy()
        published.append(publish_release(exp, rel, windows, first))
        rows.append({**common, "arm": "AGS", "mechanism": rel.name, "regime": mech.regime, "epsilon": rel.epsilon,
                     "delta": rel.delta, "n_releases": n_rel, "composition": rel.composition,
                     "eps0": rel.eps0, "delta0": rel.delta0, "beta": float(mech.beta),
                     "u": float(us[-1]), "u_first": float(us[0]), "scale": float(mech.scale(us[-1])),
                     "accuracy_median": float(np.median(acc)), "accuracy_mean": float(acc.mean()),
                     "accuracy_q25": float(np.quantile(acc, 0.25)), "accuracy_q75": float(np.quantile(acc, 0.75)),
                     "n_draws": pv.n_draws, "certificate": exp.engine.name, "k_max": ks[-1], "n_radii": len(ks),
                     **end_to_end(epsilon=rel.epsilon, delta=rel.delta, candidates=1)})
        log.info("AGS %-10s eps=%-6g acc median %.4f (u=%.4g, beta=%.4g) %s", rel.name, rel.epsilon,
                 rows[-1]["accuracy_median"], rows[-1]["u"], rows[-1]["beta"], spent(rows[-1], exp.dataset))
    if st.baselines:
        bpv = pv if st.baseline_draws is None else replace(pv, n_draws=st.baseline_draws)
        rows += [{**common, **r, "smoothness_proof": True} for r in baseline_rows(exp, st.baselines, bpv)]
    results = pd.DataFrame(rows)
    reason = not_publishable(exp)
    doc = released_document(exp, published, reason=reason)
    readme = publish_readme(doc, reason=reason, seeded=pv.reproducible_release)
    out = {"results": results, "certificate": staircase_frame(exp, first[0], first[1]),
           publish.frame_name("released"): doc, publish.frame_name("README"): readme}
    eps_acc = sorted(set(pv.epsilons))
    out["accounting"] = accounting_frame(eps_acc, pv.delta, sorted({1, n_rel}))
    if st.ablation_n:
        out["ablation"] = sampling_ablation(exp, st, pv, common)
        out["accounting"] = accounting_frame(eps_acc, pv.delta, sorted(set(st.ablation_n) | {1, n_rel}))
    return with_provenance(out, ds, device=exp.device)


def publish_release(exp: Experiment, rel: Release, windows, first) -> dict:
    """The published release of one (release, epsilon): a draw of its own, apart from the seeded
    ``n_draws`` of the statistics, from the OS CSPRNG (``privacy.reproducible_release=true``:
    seeded, then not publishable).  Multi-release (Algorithm 2): a whole trajectory, every
    window certified from the previous *published* point.  Its test accuracy goes to the log
    (the private report), never into a published file."""
    mech = rel.mechanism
    source = release_source(reproducible=exp.privacy.reproducible_release, seed=exp.seed,
                            labels=("ags", rel.name, rel.epsilon, len(windows)))
    if len(windows) == 1:
        env, sc = first
        theta = publish.release(env.nominal, float(sc.smooth(mech.beta)), mech, source)
    else:
        theta, _ = release_trajectory(exp, mech, windows, source, first)
    acc = float(accuracy(exp.model, theta, exp.xt, exp.yt))
    log.info("published release %s eps=%g: test accuracy %.10f (private report, not publishable)",
             rel.name, rel.epsilon, acc)
    return {"mechanism": rel.name, "regime": mech.regime, "epsilon": float(rel.epsilon), "delta": float(rel.delta),
            "n_releases": len(windows), "composition": rel.composition,
            "parameters": [float(v) for v in theta.tolist()]}


def not_publishable(exp: Experiment) -> str | None:
    """Why this run's releases may not be published (None: they may); settings only."""
    ds = exp.dataset
    return publish.not_publishable_reason(reproducible=exp.privacy.reproducible_release,
                                          dp_end_to_end=bool(ds.dp_end_to_end and exp.smoothness_proof),
                                          data_end_to_end=bool(ds.dp_end_to_end), scaling=ds.scaling)


def released_document(exp: Experiment, published: list[dict], *, reason: str | None) -> dict:
    """``publish/released.json`` (format ``certdp.released/2``): the published release of every
    (release, epsilon) and what is needed to apply it to new raw rows, nothing else: the model
    (layer widths, loss; the flat parameter layout of :class:`certdp.models.ModelSpec`: per layer
    W row-major [out, in], then b) and the preprocessing (:class:`certdp.data.preprocessing.Preprocessing`,
    fitted on public data unless ``dp_end_to_end`` is false).  No seed, no draw index, no
    accuracy, no u / scale / sensitivity, no path.  ``publishable`` (and the one-sentence
    ``note``) come from ``reason`` (:func:`not_publishable`, the settings only): false under
    ``privacy.reproducible_release=true`` or when the run is not DP end to end.  ``certdp predict RUN_DIR --input table.csv`` applies it."""
    ds = exp.dataset
    e2e = bool(ds.dp_end_to_end and exp.smoothness_proof)
    return {"format": RELEASED_FORMAT, "publishable": reason is None,
            "note": publish.note(reason, what="every parameter vector in this file"),
            "command": "ags", "dataset": ds.name, "task": ds.task, "dp_end_to_end": e2e,
            "model": {"widths": list(exp.model.widths), "loss": exp.model.loss.name, "n_params": exp.model.n_params},
            "preprocessing": ds.preprocessing.to_dict() if ds.preprocessing is not None else None,
            "releases": published}


def publish_readme(doc: dict, *, reason: str | None, seeded: bool) -> str:
    """``publish/README.txt`` of an AGS run (data-independent: the document's budgets and flags;
    ``seeded``: ``privacy.reproducible_release=true`` drew the noise from the run seed)."""
    rels = doc["releases"]
    return publish.readme(
        command="ags", n_releases=len(rels), reason=reason, seeded=seeded,
        epsilon_total=sum(r["epsilon"] for r in rels), delta_total=sum(r["delta"] for r in rels),
        files={"released.json": f"format {doc['format']}: one released parameter vector per (mechanism, "
                                "epsilon), the model shape and the public preprocessing; apply it with "
                                "`certdp predict RUN_DIR --input table.csv`",
               "README.txt": "this text"})


def staircase_frame(exp: Experiment, env: Envelopes, sc: Staircase) -> pd.DataFrame:
    """``certificate.csv``: the parameter staircase per radius and the envelope widths."""
    w = env.widths()
    rows = []
    for j, k in enumerate(sc.k.tolist()):
        rows.append({"dataset": exp.dataset.name, "k": k, "phi": int(sc.phi[j]), "source": sc.source[j],
                     "a_bar": float(sc.a_bar[j])})
    df = pd.DataFrame(rows)
    kw = {int(k): float(w[j].sum()) for j, k in enumerate(env.k_values.tolist())}
    df["envelope_width_l1"] = df.k.map(kw)
    return df


def ablation_release(exp: Experiment, st: AGSSettings) -> str:
    """The approximate-DP release of the sampling ablation (the first configured one, else
    ``laplace_p``), checked at every ablation budget before any training."""
    pv = exp.privacy
    name = next((r for r in pv.releases if mechanism_class(r, query="parameter").regime == "approx"), "laplace_p")
    for n in st.ablation_n:
        for eps in pv.epsilons:
            for comp in st.ablation_compositions:
                e0, d0 = per_release_budget(comp, epsilon=eps, delta=pv.delta, n=n)
                make_mechanism(name, query="parameter", epsilon=e0, delta=d0, beta=pv.beta, n_params=exp.model.n_params)
    return name


def sampling_ablation(exp: Experiment, st: AGSSettings, pv: PrivacySettings, common) -> pd.DataFrame:
    """Accuracy against the number of releases n at fixed total (eps, delta), the per-release
    budget set by each accountant of ``ags.ablation_compositions`` (Appendix D.5).  Laplace
    (approx DP) releases only; ``ags.ablation_draws`` trajectories per cell, the same noise
    stream for every composition of a cell (common random numbers)."""
    model, P = exp.model, exp.model.n_params
    name = ablation_release(exp, st)
    rows = []
    cache: dict = {}
    for n in st.ablation_n:
        windows = schedule(exp.train.steps, n=n)
        first = certify_window(exp, model.init(exp.train.seed), windows[0])
        for eps in pv.epsilons:
            for comp in st.ablation_compositions:
                eps0, delta0 = per_release_budget(comp, epsilon=eps, delta=pv.delta, n=n)
                key = (n, round(eps0, 12), round(delta0, 18))
                if key not in cache:
                    mech = make_mechanism(name, query="parameter", epsilon=eps0, delta=delta0, beta=pv.beta, n_params=P)
                    # seeded by (n, eps), not by the accountant's eps0: the compositions of one cell
                    # share their noise draws, so their accuracies differ only through eps0
                    gen = generator_for(exp.seed, "ablation", n, eps)
                    accs = []
                    for _ in range(st.ablation_draws):
                        th, _ = release_trajectory(exp, mech, windows, gen, first)
                        accs.append(float(accuracy(model, th, exp.xt, exp.yt)))
                    cache[key] = accs
                accs = np.array(cache[key])
                rows.append({**common, "arm": "AGS", "mechanism": name, "epsilon": eps, "delta": pv.delta,
                             "n_releases": n, "composition": comp, "eps0": eps0, "delta0": delta0,
                             "eps0_basic": eps / n, "gain_vs_basic": eps0 / (eps / n),
                             "accuracy_median": float(np.median(accs)), "accuracy_mean": float(accs.mean()),
                             "n_draws": len(accs)})
                log.info("ablation n=%d eps=%g %s: eps0=%.4g acc %.4f", n, eps, comp, eps0, rows[-1]["accuracy_median"])
    return pd.DataFrame(rows)
