"""``certdp hybrid``: the cells of the budget and private-set-size sweeps, the four arms of each
cell, the public-set choices, and the two result tables (``results``, ``accounting``)."""

from __future__ import annotations

import logging
import time

import pandas as pd
import torch

from certdp.methods.hybrid.data import SST2, load_split, private_subset
from certdp.methods.hybrid.encoder import AdaptedEncoder, embeddings, encoder_folder, frozen_encoder
from certdp.methods.hybrid.heads import ags_release, certify_head, dpsgd_head, margin_accuracy, pca_features
from certdp.methods.hybrid.lora import finetune
from certdp.settings.hybrid import HybridSettings
from certdp.methods.hybrid.store import digest, load_json, save_json
from certdp.certify.experiment import spent
from certdp.metrics import quantile_summary

log = logging.getLogger("certdp")
# SST-2: the encoder is public, PCA and thresholds are fitted on the public split
PROVENANCE = {"dp_end_to_end": True, "scaling": "public"}


def plan_cells(s: HybridSettings) -> list[tuple[int | None, float, str]]:
    """(n_private, epsilon, sweep) cells: the main eps sweep and the private-set-size sweep."""
    return [(s.n_private, e, "epsilon") for e in s.epsilons] + [(n, s.size_epsilon, "size") for n in s.sizes]


def eps1_candidates(s: HybridSettings, eps: float, n, cells) -> list[float]:
    """The eps_1 candidates of a cell: f * eps for the split fractions and, with
    ``split.reuse_end_to_end``, the end-to-end budgets below eps of the same N."""
    c = {round(f * eps, 10) for f in s.fractions}
    if s.reuse_end_to_end:
        c |= {round(e, 10) for (m, e, _) in cells if m == n and e < eps and "dplora" in s.arms}
    return sorted(c)


class _Work:
    """The units a run shares between cells (adapters, features, certificates), built once."""

    def __init__(self, s: HybridSettings, data: SST2, *, progress: bool):
        self.s, self.data, self.progress = s, data, progress
        self.folder = encoder_folder(s)
        self.frozen = frozen_encoder(s)
        self._adapters, self._features, self._envelopes = {}, {}, {}

    def adapter(self, n, eps1: float):
        k = (n, round(eps1, 10))
        if k not in self._adapters:
            train = private_subset(self.data, n)
            self._adapters[k] = finetune(self.s, self.folder, train, eps1, progress=self.progress)
        return self._adapters[k]

    def encoder(self, adapter):
        return AdaptedEncoder(self.s, self.folder, adapter) if adapter else self.frozen

    def features(self, n, adapter):
        k = (n, adapter.key if adapter else "frozen")
        if k not in self._features:
            parts = {"private": private_subset(self.data, n), "public": self.data.public, "test": self.data.test}
            self._features[k] = pca_features(self.s, embeddings(self.encoder(adapter), parts, progress=self.progress),
                                             parts)
        return self._features[k]

    def envelopes(self, n, adapter):
        k = (n, adapter.key if adapter else "frozen")
        if k not in self._envelopes:
            tag = f"{self.s.encoder}-len{self.s.max_seq_length}-{k[1]}-{self.data.key}"
            self._envelopes[k] = certify_head(self.s, self.features(n, adapter), tag, progress=self.progress)
        return self._envelopes[k]


def run(s: HybridSettings, *, progress: bool = True) -> dict[str, pd.DataFrame]:
    """Every cell's rows (cached per cell in ``hybrid.work_dir``) and the accounting of the chosen ones."""
    t_start = time.perf_counter()
    data = load_split(s)
    cells = plan_cells(s)
    for n, _, sweep in cells:               # a private set larger than the pool fails before any work
        private_subset(data, n, key="dataset.n_private" if sweep == "epsilon" else "hybrid.size_sweep.n_private")
    work = _Work(s, data, progress=progress)
    log.info("hybrid SST-2 (%s, max len %d): private pool %d, public %d, test %d; cells %s",
             s.encoder, s.max_seq_length, len(data.private.texts), len(data.public.texts), len(data.test.texts),
             [(n or len(data.private.texts), e) for n, e, _ in cells])
    frames = []
    for n, eps, sweep in cells:
        n_eff = n or len(data.private.texts)
        ckey = digest("cell", s.encoder, s.max_seq_length, s.lora, s.dpsgd, s.head, s.dpsgd_head, s.fractions,
                      s.reuse_end_to_end, s.arms, s.threshold, s.seed, s.n_test, s.n_test_eval, s.n_public, n_eff, eps,
                      s.delta, eps1_candidates(s, eps, n, cells), str(work.folder), data.key)
        cpath = s.work_dir / "cells" / f"{ckey}.json"
        if cpath.exists():
            rows = load_json(cpath)
            log.info("cell N=%d eps=%g: cached (%d rows)", n_eff, eps, len(rows))
        else:
            rows = _cell(s, work, n, eps, cells)
            save_json(rows, cpath)
        frame = end_to_end_columns(s, pd.DataFrame([{**r, "sweep": sweep} for r in rows]))
        frames.append(frame)
        chosen = frame[frame.chosen]
        log.info("N=%d eps=%g: %s", n_eff, eps, ", ".join(
            f"{a}={r['accuracy_median']:.4f} {spent(r, PROVENANCE)}"
            for a, r in zip(chosen.arm + "/" + chosen.head_release.fillna(""), chosen.to_dict("records"))))
    results = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    log.info("hybrid finished in %.0f s", time.perf_counter() - t_start)
    from certdp.certify.experiment import with_provenance
    return with_provenance({"results": results, "accounting": _accounting_frame(results)}, PROVENANCE, device="cpu")


def end_to_end_columns(s: HybridSettings, frame: pd.DataFrame) -> pd.DataFrame:
    """``epsilon_end_to_end``, ``delta_end_to_end`` and ``candidates`` of every row of one cell:
    the basic composition over the private releases its arm's choice read.

    * ``hybrid`` (per head release): each candidate adapter once (eps_1, delta_1) and each of the
      ``head.n_draws`` released heads of every (eps_1, allocation) candidate (eps_2, delta_2);
    * ``frozen_ags``: the ``head.n_draws`` heads of every allocation;
    * ``frozen_dpsgd``: the ``dpsgd_head.n_runs`` runs of every learning rate;
    * ``dplora``: its one adapter.
    An arm with one candidate chooses nothing: its draws are replicates that only measure the
    accuracy of one release, and its end-to-end budget is its own (eps_1 + eps_2, delta_1 + delta_2)."""
    frame = frame.copy()
    own_eps = frame.eps1.fillna(0) + frame.eps2.fillna(0)
    own_delta = frame.delta1.fillna(0) + frame.delta2.fillna(0)
    frame["epsilon_end_to_end"], frame["delta_end_to_end"], frame["candidates"] = own_eps, own_delta, 1
    for (arm, release), g in frame.groupby([frame.arm, frame.head_release.fillna("")], sort=False):
        if arm == "frozen_dpsgd":
            k = len(s.dpsgd_head.lrs)
            if k > 1:
                runs = k * s.dpsgd_head.n_runs
                frame.loc[g.index, ["epsilon_end_to_end", "delta_end_to_end", "candidates"]] = \
                    [runs * float(g.eps2.iloc[0]), runs * float(g.delta2.iloc[0]), k]
            continue
        if len(g) < 2:
            continue
        adapters = g.drop_duplicates("eps1")
        draws = g.n_draws.astype(float)
        eps = float(adapters.eps1.fillna(0).sum() + (draws * g.eps2.fillna(0)).sum())
        delta = float(adapters.delta1.fillna(0).sum() + (draws * g.delta2.fillna(0)).sum())
        frame.loc[g.index, ["epsilon_end_to_end", "delta_end_to_end", "candidates"]] = [eps, delta, len(g)]
    return frame


def _accounting_frame(results: pd.DataFrame) -> pd.DataFrame:
    """One row per chosen result: the two budgets and their basic composition."""
    if results.empty:
        return results
    out = results[results.chosen][["sweep", "arm", "head_release", "n_private", "epsilon", "delta", "eps1", "delta1",
                                   "eps1_certified", "eps2", "delta2", "candidates", "epsilon_end_to_end",
                                   "delta_end_to_end"]].copy()
    out["eps_total"] = out.eps1.fillna(0) + out.eps2.fillna(0)
    out["delta_total"] = out.delta1.fillna(0) + out.delta2.fillna(0)
    out["within_budget"] = (out.eps_total <= out.epsilon * (1 + 1e-9)) & (out.delta_total <= out.delta * (1 + 1e-9))
    return out


def _head_fields(s: HybridSettings, r: dict, f, env: dict) -> dict:
    """The result columns every AGS-head row shares (hybrid and frozen_ags arms)."""
    return {"u": r["u"], "beta": r["beta"], "noise_scale": r["scale"], "n_draws": s.head.n_draws,
            "smoothness_proof": r["smoothness_proof"],
            "nonprivate_head_accuracy": r["nonprivate_head_accuracy"], "pca_explained": f.explained,
            "certify_seconds": env["seconds"],
            **quantile_summary(r["acc_test"], "accuracy_"), **quantile_summary(r["acc_pub"], "public_accuracy_")}


def _cell(s: HybridSettings, work: _Work, n, eps: float, cells) -> list[dict]:
    """The rows of one (N, eps) cell: every arm, head release and candidate."""
    data = work.data
    n_eff = n or len(data.private.texts)
    d1, d2 = s.dpsgd.delta, s.head.delta
    base = {"dataset": "sst2", "encoder": s.encoder, "max_seq_length": s.max_seq_length, "n_private": n_eff,
            "n_public": len(data.public.texts), "n_test": len(data.test.texts), "epsilon": eps, "delta": s.delta,
            "seed": s.seed}
    rows: list[dict] = []
    if "dplora" in s.arms:
        ad = work.adapter(n, eps)
        # the end-to-end arm needs public and test embeddings only (same chunk cache as the features)
        enc = work.encoder(ad)
        emb = embeddings(enc, {"public": data.public, "test": data.test}, progress=False)
        m = {k: torch.as_tensor(enc.head_margin(v)).unsqueeze(0) for k, v in emb.items()}
        ap, at = margin_accuracy(m["public"], torch.as_tensor(data.public.y01), m["test"],
                                 torch.as_tensor(data.test.y01), s.threshold)
        rows.append({**base, "arm": "dplora", "head_release": None, "allocation": None, "split_fraction": 1.0,
                     "eps1": eps, "delta1": d1, "eps1_certified": ad.meta["eps1_certified"], "eps2": 0.0, "delta2": 0.0,
                     "sigma": ad.meta["sigma"], "steps": ad.meta["steps"], "chosen": True, "n_draws": 1,
                     **quantile_summary(at, "accuracy_"), **quantile_summary(ap, "public_accuracy_")})
    for release in s.head.releases:
        pure = not release.startswith("laplace")
        if "hybrid" in s.arms:
            cand = []
            for e1 in eps1_candidates(s, eps, n, cells):
                ad = work.adapter(n, e1)
                f, env = work.features(n, ad), work.envelopes(n, ad)
                for alloc in s.head.allocations:
                    r = ags_release(s, env, f, epsilon=eps - e1, delta=d2, release=release, allocation=alloc,
                                    label=(n_eff, ad.key))
                    cand.append({**base, "arm": "hybrid", "head_release": release, "allocation": alloc,
                                 "split_fraction": e1 / eps, "eps1": e1, "delta1": d1,
                                 "eps1_certified": ad.meta["eps1_certified"], "eps2": eps - e1,
                                 "delta2": 0.0 if pure else d2, "sigma": ad.meta["sigma"], "steps": ad.meta["steps"],
                                 **_head_fields(s, r, f, env)})
            rows += _choose(cand)
        if "frozen_ags" in s.arms:
            f, env = work.features(n, None), work.envelopes(n, None)
            delta2 = 0.0 if pure else s.delta
            cand = []
            for alloc in s.head.allocations:
                r = ags_release(s, env, f, epsilon=eps, delta=delta2, release=release, allocation=alloc,
                                label=(n_eff, "frozen"))
                cand.append({**base, "arm": "frozen_ags", "head_release": release, "allocation": alloc,
                             "split_fraction": 0.0, "eps1": 0.0, "delta1": 0.0, "eps1_certified": 0.0, "eps2": eps,
                             "delta2": delta2, **_head_fields(s, r, f, env)})
            rows += _choose(cand)
    if "frozen_dpsgd" in s.arms:
        r = dpsgd_head(s, work.features(n, None), epsilon=eps, delta=s.delta, label=n_eff)
        rows.append({**base, "arm": "frozen_dpsgd", "head_release": None, "allocation": None, "split_fraction": 0.0,
                     "eps1": 0.0, "delta1": 0.0, "eps1_certified": 0.0, "eps2": eps, "delta2": s.delta,
                     "sigma": r["sigma"], "steps": r["steps"], "lr": r["lr"], "chosen": True,
                     "n_draws": s.dpsgd_head.n_runs, **quantile_summary(r["acc_test"], "accuracy_"),
                     **quantile_summary(r["acc_pub"], "public_accuracy_")})
    return rows


def _choose(cand: list[dict]) -> list[dict]:
    """The candidates, the (split, allocation) with the best median public accuracy marked ``chosen``."""
    if cand:
        best = max(range(len(cand)), key=lambda i: (cand[i]["public_accuracy_median"], -i))
        for i, c in enumerate(cand):
            c["chosen"] = i == best
    return cand
