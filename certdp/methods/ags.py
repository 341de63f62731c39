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
``common.trajectory_ceiling``, which ignores that the other samples' gradients change once the
trajectories separate.)

Multi-release (Algorithm 2, Lemma 4.1, Theorem 4.1).  Sampling steps S split training into
windows; each window is certified by ``run_agt(..., theta_init=released point, steps=window)``
with the fixed batch plan of the whole run: the envelopes of a window start collapsed on the
previous *noisy* release (that release is already paid for), so they are points at the start of
each window.  Per-release budgets come from an accountant (basic, advanced, optimal homogeneous
composition, or PLD of the (eps0, delta0) dominating pair); see :func:`per_release_budget`.

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
import math
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from certdp import DTYPE
from certdp.agt import Envelopes, run_agt
from certdp.bounds import get_certificate
from certdp.bounds.shared import SharedBoxes
from certdp.errors import ConfigError
from certdp.config import parse_beta, parse_choices, parse_delta, parse_epsilons
from certdp.methods.common import Experiment, build_experiment, generator_for, tensors
from certdp.metrics import accuracy, majority_rate
from certdp.privacy.mechanisms import PARAMETER_MECHANISMS, parameter_mechanism
from certdp.privacy.sensitivity import Staircase, staircase
from certdp.training import TrainSettings, batch_plan, train

log = logging.getLogger("certdp")

ACCOUNTANTS = ("basic", "advanced", "optimal", "pld")


# ---------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class AGSPrivacy:
    """``privacy:`` of ``certdp ags``: total budgets, releases, draws."""
    epsilons: tuple[float, ...]
    delta: float
    releases: tuple[str, ...]
    beta: float | None
    n_draws: int
    global_sensitivity: str = "none"      # unused by AGS (kept for the shared Experiment type)


def ags_privacy_settings(d: dict) -> AGSPrivacy:
    out = list(parse_epsilons(d))
    delta = parse_delta(d)
    rel = parse_choices(d, "privacy.releases", PARAMETER_MECHANISMS, ["cauchy_p", "laplace_p"], what="AGS release")
    beta = parse_beta(d)
    n_draws = int(d.get("n_draws", 101))
    if n_draws < 1:
        raise ConfigError("privacy.n_draws", f"must be >= 1 (got {n_draws})")
    return AGSPrivacy(tuple(out), delta, tuple(rel), beta, n_draws)


@dataclass(frozen=True)
class AGSSettings:
    """``ags:``: release schedule, accountant, shared-box grouping, evaluation."""
    releases_n: int = 1                        # n evenly spaced releases (last at the final step)
    sampling_steps: tuple[int, ...] = ()       # explicit S (1-based steps); overrides releases_n
    composition: str = "optimal"               # accountant that splits the total budget
    share_ratio: float | None = None           # SharedBoxes grid ratio (None: every radius its own box)
    ablation_n: tuple[int, ...] = ()           # sampling ablation: numbers of releases to sweep
    ablation_compositions: tuple[str, ...] = ("basic", "optimal")
    ablation_draws: int = 3
    baselines: tuple[str, ...] = ("dpsgd_matched", "dpsgd_optimised", "pate")
    baseline_draws: int | None = None          # matched DP-SGD draws (None: privacy.n_draws)


def ags_settings(d: dict, steps: int) -> AGSSettings:
    d = dict(d or {})
    n = int(d.get("releases_n", 1))
    S = tuple(int(s) for s in (d.get("sampling_steps") or ()))
    if n < 1 or n > steps:
        raise ConfigError("ags.releases_n", f"must be in 1..train.steps={steps} (got {n})")
    if S and (list(S) != sorted(set(S)) or S[0] < 1 or S[-1] != steps):
        raise ConfigError("ags.sampling_steps", f"must be increasing steps in 1..{steps} ending at {steps} (got {list(S)})")
    comp = d.get("composition", "optimal")
    if comp not in ACCOUNTANTS:
        raise ConfigError("ags.composition", f"unknown '{comp}'; allowed: {', '.join(ACCOUNTANTS)}")
    ratio = d.get("share_ratio")
    if ratio is not None and float(ratio) <= 1:
        raise ConfigError("ags.share_ratio", f"must be > 1 or null (got {ratio})")
    abl = tuple(int(v) for v in (d.get("ablation_n") or ()))
    if any(v < 1 or v > steps for v in abl):
        raise ConfigError("ags.ablation_n", f"every n must be in 1..{steps} (got {list(abl)})")
    acomp = tuple(d.get("ablation_compositions") or ("basic", "optimal"))
    for c in acomp:
        if c not in ACCOUNTANTS:
            raise ConfigError("ags.ablation_compositions", f"unknown '{c}'; allowed: {', '.join(ACCOUNTANTS)}")
    raw = d.get("baselines")
    base = tuple(("dpsgd_matched", "dpsgd_optimised", "pate") if raw is None else raw)
    from certdp.methods.dpsgd import BASELINES
    for b in base:
        if b not in BASELINES:
            raise ConfigError("ags.baselines", f"unknown '{b}'; allowed: {', '.join(BASELINES)}")
    return AGSSettings(n, S, comp, None if ratio is None else float(ratio), abl, acomp,
                       int(d.get("ablation_draws", 3)), base,
                       None if d.get("baseline_draws") is None else int(d["baseline_draws"]))


def schedule(steps: int, *, n: int = 1, sampling_steps=()) -> list[tuple[int, int]]:
    """Windows [(a, b)] of 0-based step ranges range(a, b); releases happen after step b."""
    S = list(sampling_steps) if sampling_steps else [round((j + 1) * steps / n) for j in range(n)]
    out, a = [], 0
    for s in S:
        if s > a:
            out.append((a, s))
            a = s
    return out


# ---------------------------------------------------------------------------- accounting
# Basic/advanced/optimal composition come from certdp.privacy.accounting; ``optimal_delta`` and
# ``advanced_epsilon`` below are an independent re-implementation kept as a cross-check in the
# tests, and ``pld_epsilon`` composes the (eps0, delta0) dominating pair numerically.  (A Laplace
# PLD does not apply to AGS releases: their noise scale is data-dependent.)
def _log_binom(n: int, k: np.ndarray) -> np.ndarray:
    from scipy.special import gammaln
    return gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)


def optimal_delta(eps: float, eps0: float, delta0: float, n: int) -> float:
    """Exact delta(eps) of the n-fold composition of (eps0, delta0)-DP mechanisms (Kairouz, Oh &
    Viswanath 2015, Thm 3.3; the worst case is n randomised responses):

        delta = 1 - (1 - delta0)^n (1 - sum_l C(n,l) [e^{(n-l)eps0} - e^eps e^{l eps0}]_+ / (1+e^eps0)^n)."""
    l = np.arange(n + 1, dtype=np.float64)
    logc = _log_binom(n, l) - n * np.log1p(np.exp(eps0))
    a = logc + (n - l) * eps0
    b = logc + eps + l * eps0
    terms = np.where(a > b, np.exp(a) * -np.expm1(np.minimum(b - a, 0.0)), 0.0)
    dpure = float(min(1.0, terms.sum()))
    return float(1 - (1 - delta0) ** n * (1 - dpure))


def advanced_epsilon(eps0: float, n: int, delta_slack: float) -> float:
    """Dwork, Rothblum & Vadhan 2010, Thm III.3 (Corollary 4.2)."""
    return eps0 * math.sqrt(2 * n * math.log(1 / delta_slack)) + n * eps0 * math.expm1(eps0)


def pld_epsilon(eps0: float, delta0: float, n: int, delta: float) -> float:
    """Numerical composition (dp-accounting PLD, pessimistic) of n (eps0, delta0)-DP dominating
    pairs; ``delta`` is the total (the pairs' delta0 mass is inside the PLD)."""
    import warnings
    from dp_accounting.pld import common, privacy_loss_distribution as pld
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        # overflow in dp_accounting's tail-mass logs at large eps0: it handles the inf itself
        warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"dp_accounting\.")
        p = pld.from_privacy_parameters(common.DifferentialPrivacyParameters(eps0, delta0),
                                        value_discretization_interval=min(1e-4, eps0 / 200))
        return float(p.self_compose(n).get_epsilon_for_delta(delta))


def _bisect(ok, lo: float, hi: float, iters: int = 60) -> float:
    """Largest x in [lo, hi] with ok(x) (ok monotone: true below a threshold)."""
    if not ok(lo):
        return 0.0
    for _ in range(iters):
        mid = (lo + hi) / 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


def per_release_budget(method: str, eps: float, delta: float, n: int) -> tuple[float, float]:
    """The per-release (eps0, delta0) that ``method`` allows so that n adaptive releases are
    (eps, delta)-DP in total.  Pure DP (delta = 0) only composes by ``basic`` (the others reduce
    to it at delta = 0 or need delta > 0).  For the others, delta0 = delta/(2n) and the slack
    delta/2 goes to the composition; never below the basic split (basic is always valid)."""
    if method not in ACCOUNTANTS:
        raise ConfigError("ags.composition", f"unknown '{method}'; allowed: {', '.join(ACCOUNTANTS)}")
    basic = (eps / n, delta / n)
    if n == 1 or method == "basic" or delta == 0:
        return basic
    d0 = delta / (2 * n)
    if method == "advanced":
        from certdp.privacy.accounting import compose_advanced
        e0 = _bisect(lambda e: compose_advanced(epsilon=e, delta=d0, n=n, delta_prime=delta / 2)[0] <= eps, 0.0, eps)
    elif method == "optimal":
        from certdp.privacy.accounting import optimal_per_release_epsilon
        e0 = optimal_per_release_epsilon(epsilon=eps, delta=delta, n=n, delta0=d0)
    else:
        e0 = _bisect(lambda e: pld_epsilon(e, d0, n, delta) <= eps, eps / n, eps, iters=25)
    return (e0, d0) if e0 > basic[0] else basic


def accounting_frame(eps_list, delta: float, ns, methods=ACCOUNTANTS) -> pd.DataFrame:
    rows = []
    for e in eps_list:
        for n in ns:
            b0 = e / n
            for m in methods:
                e0, d0 = per_release_budget(m, e, delta, n)
                rows.append({"epsilon": e, "delta": delta, "n_releases": n, "accountant": m,
                             "eps0": e0, "delta0": d0, "gain_vs_basic": e0 / b0})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------- core
def trivial_cover(settings: TrainSettings, n_params: int, window: tuple[int, int]) -> float:
    """l1 distance bound between any two runs of the window from the same start (T_N's width)."""
    a, b = window
    lam = settings.contraction
    per_coord = 2 * settings.clip * settings.lr * sum(lam ** (b - 1 - t) for t in range(a, b))
    return n_params * per_coord


def parameter_staircase(env: Envelopes, *, n_total: int, cover: float) -> Staircase:
    """The sound-bounding staircase of the parameter vector (query = theta, l1 over coordinates)."""
    return staircase(env.lo, env.hi, env.nominal, env.k_values, n_total=n_total, global_sensitivity=cover)


def get_cert(exp: Experiment, share_ratio: float | None):
    cfg = {k: v for k, v in exp.certificate.items() if k != "name"}
    cert = get_certificate(exp.certificate.get("name", "ibp"), **cfg)
    return SharedBoxes(cert, share_ratio) if share_ratio else cert


def certify_window(exp: Experiment, theta_start, x, y, ks, window, cert, plan, progress=False):
    """Envelopes of one window started from the point ``theta_start`` (collapsed envelopes)."""
    env = run_agt(exp.model, theta_start, x, y, exp.train, ks, certificate=cert, plan=plan,
                  progress=progress, steps=range(*window))
    sc = parameter_staircase(env, n_total=exp.dataset.n_train,
                             cover=trivial_cover(exp.train, exp.model.n_params, window))
    return env, sc


def release_trajectory(exp: Experiment, mech_factory, windows, eps0: float, delta0: float, x, y,
                       ks, cert, plan, gen, first=None):
    """One run of Algorithm 2: returns the final private parameters and the per-release u's.
    ``first`` may carry the (shared) certificate of the first window."""
    theta = exp.model.init(exp.train.seed)
    us = []
    for j, w in enumerate(windows):
        env, sc = first if (j == 0 and first is not None) else certify_window(exp, theta, x, y, ks, w, cert, plan)
        mech = mech_factory(eps0, delta0)
        u = float(sc.smooth(mech.beta))
        us.append(u)
        theta = env.nominal + mech.scale(u) * mech.sample(gen, (exp.model.n_params,))
    return theta, us


def build(cfg: dict) -> tuple[Experiment, AGSSettings]:
    exp = build_experiment(cfg, privacy_parser=ags_privacy_settings)
    if exp.dataset.task == "regression":
        raise ConfigError("dataset", f"certdp ags evaluates classification accuracy; '{exp.dataset.name}' is a regression task (use certdp agtr)")
    return exp, ags_settings(cfg.get("ags") or {}, exp.train.steps)


def run(cfg: dict, *, progress: bool = True) -> dict[str, pd.DataFrame]:
    exp, st = build(cfg)
    ds, pv, model = exp.dataset, exp.privacy, exp.model
    x, y, xt, yt = tensors(ds)
    P = model.n_params
    ks = exp.staircase.radii(ds.n_train)
    cert = get_cert(exp, st.share_ratio)
    from certdp.privacy.smoothness import release_proof, smoothness_policy
    proof = release_proof(cert, smoothness_policy(cfg))
    plan = batch_plan(ds.n_train, exp.train)
    windows = schedule(exp.train.steps, n=st.releases_n, sampling_steps=st.sampling_steps)
    n_rel = len(windows)
    log.info("AGS on %s: N=%d, model %s (P=%d), %d steps in %d release window(s), |K|=%d (k_max %d), certificate %s",
             ds.name, ds.n_train, model.widths, P, exp.train.steps, n_rel, len(ks), ks[-1], cert.name)
    theta0 = model.init(exp.train.seed)
    theta_np = train(model, theta0, x, y, exp.train, plan=plan)
    np_acc = float(accuracy(model, theta_np, xt, yt))
    maj = majority_rate(yt)
    log.info("non-private test accuracy %.4f (majority class %.4f)", np_acc, maj)

    t0 = time.perf_counter()
    first = certify_window(exp, theta0, x, y, ks, windows[0], cert, plan, progress=progress)
    t_cert = time.perf_counter() - t0
    log.info("certified window 1 (%d steps, %d radii) in %.1f s", windows[0][1] - windows[0][0], len(ks), t_cert)
    common = {"dataset": ds.name, "n_train": ds.n_train, "n_test": len(yt), "n_params": P, "smoothness_proof": proof,
              "nonprivate_accuracy": np_acc, "majority_rate": maj, "seed": exp.seed}

    rows = []
    for name in pv.releases:
        for eps in pv.epsilons:
            regime = PARAMETER_MECHANISMS[name].regime
            delta = pv.delta if regime == "approx" else 0.0
            eps0, delta0 = per_release_budget(st.composition if regime == "approx" else "basic", eps, delta, n_rel)
            factory = (lambda e0, d0, _n=name: parameter_mechanism(_n, epsilon=e0, n_params=P, delta=d0, beta=pv.beta))
            mech = factory(eps0, delta0)
            gen = generator_for(exp.seed, "ags", name, eps, n_rel)
            if n_rel == 1:
                env, sc = first
                u = float(sc.smooth(mech.beta))
                z = mech.sample(gen, (pv.n_draws, P))
                thetas = env.nominal + mech.scale(u) * z
                us = [u]
            else:
                thetas, all_us = [], []
                for _ in range(pv.n_draws):
                    th, us_d = release_trajectory(exp, factory, windows, eps0, delta0, x, y, ks, cert, plan, gen, first)
                    thetas.append(th)
                    all_us.append(us_d)
                thetas = torch.stack(thetas)
                us = list(np.median(np.array(all_us), 0))
            acc = accuracy(model, thetas, xt, yt).numpy()
            rows.append({**common, "arm": "AGS", "mechanism": name, "regime": regime, "epsilon": eps,
                         "delta": delta, "n_releases": n_rel, "composition": st.composition if regime == "approx" else "basic",
                         "eps0": eps0, "delta0": delta0, "beta": float(mech.beta),
                         "u": float(us[-1]), "u_first": float(us[0]), "scale": float(mech.scale(us[-1])),
                         "accuracy_median": float(np.median(acc)), "accuracy_mean": float(acc.mean()),
                         "accuracy_q25": float(np.quantile(acc, 0.25)), "accuracy_q75": float(np.quantile(acc, 0.75)),
                         "n_draws": pv.n_draws, "certificate": cert.name, "k_max": ks[-1], "n_radii": len(ks),
                         "certify_seconds": t_cert})
            log.info("AGS %-10s eps=%-6g acc median %.4f (u=%.4g, beta=%.4g)", name, eps, rows[-1]["accuracy_median"],
                     rows[-1]["u"], rows[-1]["beta"])
    if st.baselines:
        from certdp.methods.dpsgd import baseline_rows, set_raw_config
        set_raw_config(cfg)
        from dataclasses import replace
        bpv = pv if st.baseline_draws is None else replace(pv, n_draws=st.baseline_draws)
        rows += [{**common, **r, "smoothness_proof": True}
                 for r in baseline_rows(exp, st.baselines, bpv, theta_np=theta_np, plan=plan)]
    results = pd.DataFrame(rows)
    out = {"results": results, "certificate": certificate_frame(exp, first[0], first[1], pv)}
    eps_acc = sorted(set(pv.epsilons))
    out["accounting"] = accounting_frame(eps_acc, pv.delta, sorted({1, n_rel}))
    if st.ablation_n:
        out["ablation"], acc_rows = sampling_ablation(exp, st, pv, x, y, xt, yt, ks, cert, plan, common)
        out["accounting"] = accounting_frame(eps_acc, pv.delta, sorted(set(st.ablation_n) | {1, n_rel}))
    return out


def certificate_frame(exp: Experiment, env: Envelopes, sc: Staircase, pv: AGSPrivacy) -> pd.DataFrame:
    w = env.widths()
    rows = []
    for j, k in enumerate(sc.k.tolist()):
        rows.append({"dataset": exp.dataset.name, "k": k, "phi": int(sc.phi[j]), "source": sc.source[j],
                     "a_bar": float(sc.a_bar[j])})
    df = pd.DataFrame(rows)
    kw = {int(k): float(w[j].sum()) for j, k in enumerate(env.k_values.tolist())}
    df["envelope_width_l1"] = df.k.map(kw)
    return df


def sampling_ablation(exp, st: AGSSettings, pv: AGSPrivacy, x, y, xt, yt, ks, cert, plan, common):
    """Accuracy against the number of releases n at fixed total (eps, delta), the per-release
    budget set by each accountant of ``ags.ablation_compositions`` (Appendix D.5).  Laplace
    (approx DP) releases only; ``ags.ablation_draws`` trajectories per cell."""
    model, P = exp.model, exp.model.n_params
    name = next((r for r in pv.releases if PARAMETER_MECHANISMS[r].regime == "approx"), "laplace_p")
    rows = []
    cache: dict = {}
    for n in st.ablation_n:
        windows = schedule(exp.train.steps, n=n)
        first = certify_window(exp, model.init(exp.train.seed), x, y, ks, windows[0], cert, plan)
        for eps in pv.epsilons:
            for comp in st.ablation_compositions:
                eps0, delta0 = per_release_budget(comp, eps, pv.delta, n)
                key = (n, round(eps0, 12), round(delta0, 18))
                factory = (lambda e0, d0: parameter_mechanism(name, epsilon=e0, n_params=P, delta=d0, beta=pv.beta))
                if key not in cache:
                    gen = generator_for(exp.seed, "ablation", n, eps0)
                    accs = []
                    for _ in range(st.ablation_draws):
                        th, _ = release_trajectory(exp, factory, windows, eps0, delta0, x, y, ks, cert, plan, gen, first)
                        accs.append(float(accuracy(model, th, xt, yt)))
                    cache[key] = accs
                accs = np.array(cache[key])
                rows.append({**common, "arm": "AGS", "mechanism": name, "epsilon": eps, "delta": pv.delta,
                             "n_releases": n, "composition": comp, "eps0": eps0, "delta0": delta0,
                             "eps0_basic": eps / n, "gain_vs_basic": eps0 / (eps / n),
                             "accuracy_median": float(np.median(accs)), "accuracy_mean": float(accs.mean()),
                             "n_draws": len(accs)})
                log.info("ablation n=%d eps=%g %s: eps0=%.4g acc %.4f", n, eps, comp, eps0, rows[-1]["accuracy_median"])
    return pd.DataFrame(rows), rows
