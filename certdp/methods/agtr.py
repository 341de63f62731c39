"""AGT-R: private prediction for regression from AGT envelopes (paper Section 3, Algorithm 1).

1. Train nominally and certify envelopes T_k for every radius in the staircase (``agt``).
2. Bound each test prediction over every T_k, clip to the output range (the released query is
   the clipped prediction, whose global sensitivity is the range width), and build the
   index-discounted staircase with the GS cap (``privacy.sensitivity``: a beta-smooth upper
   bound on the local sensitivity when the engine's envelopes nest, ``privacy.smoothness``).
3. For each release and epsilon: beta from the mechanism's rule, SS^beta per test point, noise
   scale, ``n_draws`` noisy releases per point (clipped), MAE and MSE.  The global-sensitivity
   arms (Laplace / Gaussian) use the same clipped query.

Step 3's draws are seeded: they are the statistics of ``results.csv`` (the researcher's private
report, byte-identical across reruns).  The answers to ``queries=points.csv`` are releases: one
draw each from the OS CSPRNG (:mod:`certdp.privacy.noise`) into ``publish/answers.csv``
(:func:`answer_queries`).

``certdp certify`` stops after step 2 and writes the staircase and the envelope widths.
"""

from __future__ import annotations

import logging

import pandas as pd
import torch

from certdp import DTYPE
from certdp.certify import (Experiment, build_experiment, certify_predictions, check_prediction_radii,
                            global_sensitivity, nominal, prediction_staircase, release_errors,
                            spent, with_provenance)
from certdp.certify import publish
from certdp.errors import ConfigError
from certdp.privacy.noise import release_source
from certdp.privacy.sensitivity import DISCOUNT_SLACK, Staircase
from certdp.seeding import generator_for
from certdp.settings import ExperimentSettings

log = logging.getLogger("certdp")

REFERENCE_BETA = 0.5   # the beta of the certificate figures (pure DP release at eps = 1)


def staircase_frame(exp: Experiment, sc: Staircase, betas) -> pd.DataFrame:
    """``certificate.csv``: per radius and beta, the staircase over the test points and its
    discounted contribution to SS^beta."""
    a = sc.a_bar
    rows = []
    for beta in betas:
        # the discount of Staircase.smooth: e^{-beta phi_j}, phi_j the index of the radius
        w = torch.exp(-max(beta - DISCOUNT_SLACK, 0.0) * sc.phi.to(DTYPE))
        contrib = a * w
        arg = contrib.mean(0).argmax().item()
        ss = contrib.amax(-1)
        for j, k in enumerate(sc.k.tolist()):
            col = a[:, j]
            rows.append({
                "dataset": exp.dataset.name, "certificate": exp.certificate_name,
                "k": k, "phi": int(sc.phi[j]), "source": sc.source[j], "a_bar_mean": float(col.mean()),
                "a_bar_median": float(col.median()), "a_bar_max": float(col.max()), "beta": beta,
                "contribution_mean": float(contrib[:, j].mean()),
                "contribution_median": float(contrib[:, j].median()),
                "is_max": j == arg, "ss_mean": float(ss.mean()),
            })
    return pd.DataFrame(rows)


def _prepare(settings: ExperimentSettings, *, smooth_release: bool) -> tuple[Experiment, torch.Tensor | None]:
    """The experiment and the global sensitivity, with every refusal the data allows made
    before training (a global release without a global sensitivity, radii that stop below N
    without one, a diverging nominal run)."""
    exp = build_experiment(settings, task="regression", smooth_release=smooth_release)
    gs = global_sensitivity(exp)
    check_prediction_radii(exp, gs)
    if gs is None and settings.command == "agtr" and exp.privacy.releases_of("global"):
        glob = exp.privacy.releases_of("global")
        raise ConfigError("privacy.releases", f"{', '.join(glob)} need a global sensitivity, which "
                                              f"privacy.global_sensitivity={exp.privacy.global_sensitivity} does not "
                                              f"give; allowed: smooth releases only, or a global sensitivity")
    nominal(exp)
    return exp, gs


def run(settings: ExperimentSettings, *, progress: bool = True) -> dict[str, pd.DataFrame]:
    mechs = settings.privacy.mechanisms()
    table = None
    if settings.queries is not None:
        from certdp.certify.released import read_input
        try:                                                       # a missing file is refused before training
            table = read_input(settings.queries)
        except ConfigError as e:
            raise ConfigError("queries", e.message) from None
    exp, gs = _prepare(settings, smooth_release=settings.privacy.has_smooth)
    xq = None
    if table is not None:
        if exp.dataset.preprocessing is None:
            raise ConfigError("queries", f"dataset '{exp.dataset.name}' has no raw-row map; allowed: a dataset with "
                                         f"one (csv, california, linear)")
        from certdp.certify.released import feature_matrix
        prep = exp.dataset.preprocessing
        missing = [c for c in prep.columns if c not in table[0]]
        if missing:
            raise ConfigError("queries", f"missing column{'s' if len(missing) > 1 else ''} "
                                         f"{', '.join(map(repr, missing[:5]))} in {settings.queries}; allowed: a "
                                         f"table with the model's columns {', '.join(map(repr, prep.columns[:10]))}")
        try:
            raw = feature_matrix(prep, *table, where=f"queries file {settings.queries}")
        except ConfigError as e:
            raise ConfigError("queries", e.message) from None
        xq = torch.as_tensor(prep.apply(raw, key="queries"), dtype=DTYPE)
        if not len(xq):
            raise ConfigError("queries", f"{settings.queries} holds no rows; allowed: a table of query points")
    ds = exp.dataset
    proof = exp.smoothness_proof
    log.info("AGT-R on %s: N=%d train, %d test, model %s (P=%d), %d steps, certificate %s",
             ds.name, ds.n_train, len(ds.y_test), exp.model.widths, exp.model.n_params,
             exp.train.steps, exp.certificate_name)
    env, sc, pred, timing = certify_predictions(exp, progress=progress)
    yt = exp.yt
    np_mae = float((pred - yt).abs().mean())
    np_mse = float(((pred - yt) ** 2).mean())
    log.info("non-private test MAE %.5f  MSE %.5f  (AGT %.1f s over %d radii)", np_mae, np_mse,
             timing["agt_seconds"], timing["radii"])
    rows, betas = [], {REFERENCE_BETA}
    for mech in mechs:
        smooth = mech.kind == "smooth"
        if smooth:
            ss = sc.smooth(mech.beta)
            betas.add(float(mech.beta))
        else:
            ss = gs
        scale = mech.scale(ss)
        gen = generator_for(exp.seed, mech.name, mech.epsilon)
        mae, mse = release_errors(pred, yt, scale, mech, exp.privacy.n_draws, gen, ds.output_range)
        rows.append({
            "dataset": ds.name, "arm": "agtr" if smooth else "gs", "mechanism": mech.name,
            "regime": mech.regime, "epsilon": mech.epsilon, "delta": mech.delta_spent,
            "beta": float(mech.beta), "n_train": ds.n_train, "n_test": len(yt),
            "n_draws": exp.privacy.n_draws, "mae": mae, "mse": mse,
            "nonprivate_mae": np_mae, "nonprivate_mse": np_mse,
            "ss_mean": float(ss.mean()), "ss_median": float(ss.median()),
            "scale_mean": float(scale.mean()), "certificate": exp.certificate_name,
            "frequency": settings.certificate.option("frequency"), "batch_size": exp.train.batch_size or ds.n_train,
            "k_max": timing["k_max"], "seed": exp.seed,
            "smoothness_proof": bool(proof) if smooth else True,
        })
    results = pd.DataFrame(rows)
    extra = {} if xq is None else answer_queries(exp, env, xq, mechs)
    cert = staircase_frame(exp, sc, sorted(betas))
    summary = results[results.epsilon == 1.0][["arm", "mechanism", "regime", "mae", "mse", "ss_mean"]] if len(results) else results
    if len(summary):
        summary = summary.assign(spent=[spent(r, ds) for r in results[results.epsilon == 1.0].to_dict("records")])
        log.info("at eps=1:\n%s", summary.to_string(index=False))
    out = with_provenance({"results": results, "certificate": cert, **extra}, ds, device=exp.device)
    pub = publish.frame_name("answers")
    if pub in out:
        # the published table keeps the flag check_frames needs (dp_end_to_end, settings only) and
        # drops the helper column, the scaling label (the README and `publishable` say it) and the
        # device (a detail of the researcher's run)
        out[pub] = out[pub].drop(columns=["smoothness_proof", "scaling", "device"])
    return out


def answer_queries(exp: Experiment, env, xq: torch.Tensor, mechs) -> dict:
    """``publish/answers.csv``, ``publish/README.txt`` and ``answers_report.csv``: one private
    answer per query point of ``queries``, release and epsilon.

    Each answer is the AGT-R release of that point (the clipped prediction, its own staircase
    and SS^beta, one noise draw from the OS CSPRNG - seeded only under
    ``privacy.reproducible_release=true``, then not publishable - clipped: :func:`publish.answers`,
    the function ``certdp dpaudit`` draws its outputs from), in the target's raw units (``answer``)
    and in model units.  ``epsilon``/``delta`` are what that one answer
    spends; answering several points, or one point with several releases, composes:
    ``epsilon_total`` / ``delta_total`` are the basic composition over every answer in the file
    (what publishing all of it costs).  ``publishable`` depends on the settings only.

    The smooth sensitivity S(D) and the noise scale of each answer are statistics of the private
    data (S(D) alone tells D from D'), so they go to ``answers_report.csv``, the private report,
    never to ``publish/``."""
    prep = exp.dataset.preprocessing
    ds = exp.dataset
    sc, pred = prediction_staircase(exp, env, xq)
    gs = global_sensitivity(exp, xq)
    rng = ds.output_range
    repro = exp.privacy.reproducible_release
    parts, report, reasons = [], [], set()
    for mech in mechs:
        smooth = mech.kind == "smooth"
        ss = sc.smooth(mech.beta) if smooth else gs
        source = release_source(reproducible=repro, seed=exp.seed, labels=("queries", mech.name, mech.epsilon))
        raw, ans = publish.answers(prep, pred, ss, mech, source, output_range=rng,
                                   what=f"the noise scale of {mech.name} at eps={mech.epsilon:g} on the query points is")
        scale = mech.scale(ss)
        proof = bool(exp.smoothness_proof) if smooth else True
        reason = publish.not_publishable_reason(reproducible=repro, dp_end_to_end=bool(ds.dp_end_to_end) and proof,
                                                data_end_to_end=bool(ds.dp_end_to_end), scaling=ds.scaling)
        reasons.add(reason)
        parts.append(pd.DataFrame({
            "row": range(len(pred)), "mechanism": mech.name, "regime": mech.regime, "epsilon": mech.epsilon,
            "delta": mech.delta_spent, "answer": raw, "answer_model_units": ans.numpy(),
            "publishable": reason is None, "smoothness_proof": proof}))
        report.append(pd.DataFrame({
            "row": range(len(pred)), "mechanism": mech.name, "regime": mech.regime, "epsilon": mech.epsilon,
            "delta": mech.delta_spent, "sensitivity": ss.numpy(), "scale": scale.numpy(),
            "smoothness_proof": proof}))
    out = pd.concat(parts, ignore_index=True)
    out["epsilon_total"], out["delta_total"] = float(out.epsilon.sum()), float(out.delta.sum())
    log.info("answered %d query points with %d release(s): %d answers, epsilon_total %.4g (basic composition)",
             len(pred), len(mechs), len(out), out.epsilon_total.iloc[0])
    blocked = sorted(r for r in reasons if r is not None)
    text = publish.readme(command="agtr", n_releases=len(out), reason=blocked[0] if blocked else None, seeded=repro,
                          partly=bool(blocked) and None in reasons,
                          epsilon_total=float(out.epsilon_total.iloc[0]), delta_total=float(out.delta_total.iloc[0]),
                          files={"answers.csv": "one private answer per query point (row of the queries table), "
                                                "release and epsilon, in the target's raw units (answer) and in "
                                                "model units, with the epsilon and delta each spends",
                                 "README.txt": "this text"})
    cols = ["row", "mechanism", "regime", "epsilon", "delta", "answer", "answer_model_units", "epsilon_total",
            "delta_total", "publishable", "smoothness_proof"]
    return {publish.frame_name("answers"): out[cols], publish.frame_name("README"): text,
            "answers_report": pd.concat(report, ignore_index=True)}


def run_certify(settings: ExperimentSettings, *, progress: bool = True) -> dict[str, pd.DataFrame]:
    """Envelopes and staircase only (``certdp certify``)."""
    exp, _ = _prepare(settings, smooth_release=False)
    env, sc, pred, timing = certify_predictions(exp, progress=progress)
    ks = env.k_values.tolist()
    w = env.widths()
    env_rows = [{"dataset": exp.dataset.name, "k": k, "width_max": float(w[j].max()),
                 "width_mean": float(w[j].mean()), "width_l1": float(w[j].sum())} for j, k in enumerate(ks)]
    log.info("certified %d radii in %.1f s", len(ks), timing["agt_seconds"])
    betas = sorted({REFERENCE_BETA} | ({exp.privacy.beta} if exp.privacy.beta else set()))
    return with_provenance({"certificate": staircase_frame(exp, sc, betas), "envelopes": pd.DataFrame(env_rows)},
                           exp.dataset, device=exp.device)
