"""Private as published (issue 19, items 1-2): releases draw from the OS CSPRNG, the report stays
seeded and byte-identical, publish/ holds only DP values and data-independent metadata, and the
noise of a published release cannot be regenerated from anything the run writes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from certdp import seeding
from certdp.certify import build_experiment, nominal
from certdp.privacy import mechanisms, noise
from certdp.settings import parse
from test_e2e import run, sklearn_csv

BLOBS = ["dataset=blobs", "dataset.n_train=60", "dataset.n_test=200", "dataset.n_public=80", "train.steps=12",
         "train.batch_size=20", "staircase.kind=list", "staircase.values=[1,2,4]", "privacy.epsilons=[1,20]",
         "privacy.n_draws=5", "ags.baselines=[]"]
SEED = 918273645          # distinctive: it must not appear in any published file

# what a published file may hold (docs/privacy-as-published.md)
RELEASED_KEYS = {"format", "publishable", "note", "command", "dataset", "task", "dp_end_to_end", "model",
                 "preprocessing", "releases"}
RELEASE_KEYS = {"mechanism", "regime", "epsilon", "delta", "n_releases", "composition", "parameters"}
ANSWER_COLUMNS = {"row", "mechanism", "regime", "epsilon", "delta", "answer", "answer_model_units", "epsilon_total",
                  "delta_total", "publishable", "dp_end_to_end"}


def ags_run(tmp: Path, name: str, *extra: str) -> Path:
    code, err = run(["ags", *BLOBS, f"seed={SEED}", f"run={name}", *extra], tmp)
    assert code == 0, err
    return tmp / "ags" / "blobs" / name


def released(run_dir: Path) -> dict:
    return json.loads((run_dir / "publish" / "released.json").read_text())


def params(doc: dict) -> np.ndarray:
    return np.array([r["parameters"] for r in doc["releases"]])


def numbers(obj) -> list[float]:
    """Every number in a JSON document (booleans excluded)."""
    if isinstance(obj, dict):
        return [v for x in obj.values() for v in numbers(x)]
    if isinstance(obj, list):
        return [v for x in obj for v in numbers(x)]
    if isinstance(obj, (int, float)) and not isinstance(obj, bool):
        return [float(obj)]
    return []


# ---------------------------------------------------------------------------- runs and files
@pytest.mark.slow
def test_identical_runs_publish_fresh_noise_and_the_same_report(tmp_path):
    """Same config and seed: the published parameters differ (OS randomness), results.csv is
    byte-identical; with privacy.reproducible_release=true the parameters agree too and the file
    says it is not publishable.  publish/ holds released.json and README.txt only, and the log
    labels the report as not publishable."""
    a, b = ags_run(tmp_path, "a"), ags_run(tmp_path, "b")
    assert (a / "results.csv").read_bytes() == (b / "results.csv").read_bytes()
    assert "saved_draw_accuracy" not in pd.read_csv(a / "results.csv").columns
    da, db = released(a), released(b)
    assert da["publishable"] and db["publishable"] and da["format"] == "certdp.released/2"
    pa, pb = params(da), params(db)
    assert pa.shape == pb.shape == (4, 9) and np.isfinite(pa).all()
    assert (pa != pb).all()                                   # every coordinate of every release differs
    assert sorted(p.name for p in (a / "publish").iterdir()) == ["README.txt", "released.json"]
    log = (a / "log.txt").read_text()
    assert "private report, not publishable: results.csv" in log and "publishable (DP releases" in log
    readme = (a / "publish" / "README.txt").read_text()
    assert "Publishable: YES." in readme and "epsilon 42 and delta 2e-05" in readme   # 2 x (1 + 20), 2 x 1e-5

    r1 = ags_run(tmp_path, "r1", "privacy.reproducible_release=true")
    r2 = ags_run(tmp_path, "r2", "privacy.reproducible_release=true")
    d1, d2 = released(r1), released(r2)
    assert np.array_equal(params(d1), params(d2))
    assert not d1["publishable"] and d1["note"].startswith("NOT publishable: privacy.reproducible_release=true")
    assert "Publishable: NO" in (r1 / "publish" / "README.txt").read_text()
    # the release is a draw of its own: the report is the same as without reproducible_release
    assert (r1 / "results.csv").read_bytes() == (a / "results.csv").read_bytes()


def test_published_files_hold_no_seed_path_or_private_statistic(tmp_path):
    """publish/ of an AGS run and of an AGT-R query run: keys and columns from an allow-list; no
    seed, no run path, and none of the report's data-dependent numbers (u, scale, the staircase,
    non-private metrics, sensitivities)."""
    d = ags_run(tmp_path, "leak", "privacy.epsilons=[2,20]")
    doc = released(d)
    assert set(doc) == RELEASED_KEYS and set(doc["model"]) == {"widths", "loss", "n_params"}
    assert all(set(r) == RELEASE_KEYS for r in doc["releases"])
    res = pd.read_csv(d / "results.csv")
    cert = pd.read_csv(d / "certificate.csv")
    private = np.concatenate([res[c].to_numpy(float) for c in ("u", "u_first", "scale", "beta", "nonprivate_accuracy",
                                                                  "accuracy_median", "accuracy_mean", "majority_rate")]
                             + [cert.a_bar.to_numpy(float), cert.envelope_width_l1.to_numpy(float)])
    published = np.array(numbers(doc))
    close = np.isclose(published[:, None], private[None, :], rtol=1e-9, atol=0)
    assert not close.any(), published[close.any(1)]
    for f in (d / "publish").iterdir():
        text = f.read_text()
        assert str(SEED) not in text and str(tmp_path) not in text and "leak" not in text, f
    assert CSPRNG_CLAIM in " ".join((d / "publish" / "README.txt").read_text().split())

    path = sklearn_csv(tmp_path, "diabetes")
    pd.read_csv(path).drop(columns="target").iloc[:5].to_csv(tmp_path / "q.csv", index=False)
    code, err = run(["agtr", "dataset=csv", f"dataset.path={path}", "dataset.target=target", f"queries={tmp_path / 'q.csv'}",
                     "dataset.output_range=[0,400]", "train.steps=5", "staircase.k_max=4", "privacy.n_draws=5",
                     "privacy.epsilons=[1]", "privacy.releases=[cauchy,laplace,laplace_gs]", f"seed={SEED}", "run=q"],
                    tmp_path / "agtr")
    assert code == 0, err
    q = tmp_path / "agtr" / "agtr" / "csv" / "q"
    ans = pd.read_csv(q / "publish" / "answers.csv")
    rep = pd.read_csv(q / "answers_report.csv")
    assert set(ans.columns) == ANSWER_COLUMNS and ans.publishable.all() and len(ans) == 15
    assert {"sensitivity", "scale"} <= set(rep.columns)
    res = pd.read_csv(q / "results.csv")
    private = np.concatenate([rep.sensitivity.to_numpy(float), rep.scale.to_numpy(float),
                              res.ss_mean.to_numpy(float), res.scale_mean.to_numpy(float),
                              res.nonprivate_mae.to_numpy(float), res.mae.to_numpy(float)])
    published = ans.select_dtypes("number").to_numpy(float).ravel()
    assert not np.isclose(published[:, None], private[None, :], rtol=1e-9, atol=0).any()
    for f in (q / "publish").iterdir():
        text = f.read_text()
        assert str(SEED) not in text and str(tmp_path) not in text, f
    assert "epsilon 15 and delta 5e-05" in (q / "publish" / "README.txt").read_text()


CSPRNG_CLAIM = "noise drawn from the operating system's CSPRNG; no seed is stored"


def test_a_seeded_release_is_described_as_seeded(tmp_path):
    """Issue 28 item 10: under privacy.reproducible_release=true the README of publish/ (ags, and
    agtr queries=) says the noise came from the run seed and is not publishable -- it no longer
    claims the OS CSPRNG above "Publishable: NO"."""
    d = ags_run(tmp_path, "seeded", "privacy.reproducible_release=true", "privacy.epsilons=[1]")
    (tmp_path / "q.csv").write_text("x\n0.1\n-0.3\n")
    code, err = run(["agtr", "dataset=linear", "dataset.n_train=12", "dataset.n_test=20", "train.batch_size=4",
                     "train.steps=6", "staircase.k_max=12", "privacy.n_draws=5", "privacy.epsilons=[1]",
                     f"queries={tmp_path / 'q.csv'}", "privacy.reproducible_release=true", "run=q"], tmp_path / "agtr")
    assert code == 0, err
    for readme in (d / "publish" / "README.txt", tmp_path / "agtr" / "agtr" / "linear" / "q" / "publish" / "README.txt"):
        text = " ".join(readme.read_text().split())
        assert CSPRNG_CLAIM not in text, readme
        assert "SEEDED from the run seed (privacy.reproducible_release=true" in text
        assert "Publishable: NO - privacy.reproducible_release=true seeded these draws" in text


# ---------------------------------------------------------------------------- the attack of issue 19
def _attack_fit(doc: dict, labels: list[tuple], seed: int, n_draws: int) -> np.ndarray:
    """The attacker of issue 19: knowing the seed and the code, regenerate the noise of every
    label the code draws from, choose per release the candidate that best explains the published
    vectors (pairwise least squares against release 0), then fit theta_rel,j = theta + s_j z_j
    jointly; returns the recovered theta."""
    rels = doc["releases"]
    X = np.array([r["parameters"] for r in rels])                      # [R, P]
    R, P = X.shape

    def candidates(name):
        noise_of = mechanisms.REGISTRY[name].noise
        zs = [noise_of(seeding.generator_for(seed, *lab), (n_draws, P)).numpy() for lab in labels]
        return np.concatenate(zs)                                        # [C, P]

    Z = [candidates(r["mechanism"]) for r in rels]
    chosen = [None] * R
    for k in range(1, R):
        d = X[0] - X[k]                                                  # = s_0 z_0 - s_k z_k
        a, b = Z[0][:, None, :], -Z[k][None, :, :]                        # [C0, 1, P], [1, Ck, P]
        g11, g22, g12 = (a * a).sum(-1), (b * b).sum(-1), (a * b).sum(-1)
        r1, r2 = (a * d).sum(-1), (b * d).sum(-1)
        det = g11 * g22 - g12 ** 2
        with np.errstate(divide="ignore", invalid="ignore"):            # one candidate paired with itself
            s0 = (g22 * r1 - g12 * r2) / det
            sk = (g11 * r2 - g12 * r1) / det
        res = ((d - s0[..., None] * a - sk[..., None] * b) ** 2).sum(-1)
        res[~((s0 > 0) & (sk > 0))] = np.inf                             # noise scales are positive
        i, j = np.unravel_index(np.argmin(res), res.shape)
        chosen[0], chosen[k] = Z[0][i], Z[k][j]
    # joint least squares in (theta, s_1..s_R): x_j = theta + s_j z_j
    A = np.zeros((R * P, P + R))
    for j in range(R):
        A[j * P:(j + 1) * P, :P] = np.eye(P)
        A[j * P:(j + 1) * P, P + j] = chosen[j]
    sol = np.linalg.lstsq(A, X.reshape(-1), rcond=None)[0]
    return sol[:P]


def _recorded_run(monkeypatch, cfg: dict) -> tuple[dict, list[tuple], np.ndarray, pd.DataFrame]:
    """ags.run in process, recording the labels of every seeded generator the code creates."""
    from certdp.methods import ags
    labels: list[tuple] = []
    original = seeding.generator_for

    def recording(seed, *lab):
        labels.append(tuple(lab))
        return original(seed, *lab)

    for mod in [m for name, m in sys.modules.items() if name.startswith("certdp") and m is not None]:
        if getattr(mod, "generator_for", None) is original:
            monkeypatch.setattr(mod, "generator_for", recording)
    settings = parse("ags", cfg)
    out = ags.run(settings, progress=False)
    exp = build_experiment(settings, task="classification", smooth_release=True)
    theta = nominal(exp).numpy()
    return out["publish/released"], sorted(set(labels), key=repr), theta, out["results"]


ATTACK_CFG = {"seed": SEED, "dataset": {"name": "blobs", "n_train": 60, "n_test": 100, "n_public": 40,
                                        "model": {"arch": "linear"}},
              "model": {"arch": "auto"}, "train": {"steps": 12, "lr": 0.5, "clip": 0.05, "batch_size": 20},
              "certificate": {"name": "ibp"}, "staircase": {"kind": "list", "values": [1, 2, 4]},
              "privacy": {"epsilons": [1, 2, 5, 20], "delta": 1e-5, "releases": ["cauchy_p", "laplace_p"],
                          "n_draws": 3},
              "ags": {"releases_n": 1, "baselines": []}}


def test_the_noise_of_a_release_cannot_be_fitted_from_the_seed(monkeypatch):
    """Issue 19's attack: eight published releases, an attacker who knows the seed and every
    generator label the code uses.  On the secure release the recovered theta is off by the noise
    scale; on a seeded one (reproducible_release=true, or the old bug: the release was draw 0 of
    the statistics) the same fit recovers the non-private parameters to ~1e-12."""
    doc, labels, theta, res = _recorded_run(monkeypatch, ATTACK_CFG)
    assert len(doc["releases"]) == 8 and doc["publishable"]
    scale = res[res.arm == "AGS"].scale.to_numpy(float)
    err = np.abs(_attack_fit(doc, labels, SEED, 3) - theta).max()
    assert err > 0.01 * scale.min(), (err, scale.min())

    cfg = {**ATTACK_CFG, "privacy": {**ATTACK_CFG["privacy"], "reproducible_release": True}}
    doc, labels, theta, _ = _recorded_run(monkeypatch, cfg)
    assert not doc["publishable"]
    assert np.abs(_attack_fit(doc, labels, SEED, 3) - theta).max() < 1e-9 * (1 + np.abs(theta).max())

    # the old behaviour, planted: the published vector is one of the seeded statistics' draws
    from certdp.methods import ags
    monkeypatch.setattr(ags, "release_source", lambda *, reproducible, seed, labels: noise.seeded(seed, *labels))
    doc, labels, theta, _ = _recorded_run(monkeypatch, ATTACK_CFG)
    assert doc["publishable"]                      # the file cannot know: the test is what catches it
    assert np.abs(_attack_fit(doc, labels, SEED, 3) - theta).max() < 1e-9 * (1 + np.abs(theta).max())


# ---------------------------------------------------------------------------- the samplers
CDF = {"cauchy": stats.cauchy.cdf, "laplace": stats.laplace.cdf, "gaussian": stats.norm.cdf}


@pytest.mark.parametrize("family", sorted(noise.SAMPLERS))
def test_secure_samplers_follow_the_exact_distribution(family):
    """KS test of 20,000 secure draws against the exact CDF (and the seeded path too); the same
    test rejects a sampler of the wrong family, so it can fail."""
    z = noise.SAMPLERS[family](noise.secure(), (20000,)).numpy()
    assert np.isfinite(z).all()
    assert stats.kstest(z, CDF[family]).pvalue > 1e-4
    seeded = noise.SAMPLERS[family](noise.seeded(0, "ks", family), (20000,)).numpy()
    assert stats.kstest(seeded, CDF[family]).pvalue > 1e-4
    wrong = {"cauchy": "laplace", "laplace": "gaussian", "gaussian": "cauchy"}[family]
    assert stats.kstest(z, CDF[wrong]).pvalue < 1e-6


def test_uniforms_are_53_bit_and_open_and_the_seeded_path_is_deterministic():
    u = noise.uniform(noise.secure(), (200000,)).numpy()
    assert (u > 0).all() and (u < 1).all() and np.all(u * 2.0 ** 53 == np.floor(u * 2.0 ** 53))
    assert not np.array_equal(u, noise.uniform(noise.secure(), (200000,)).numpy())    # nothing stored
    for family, sample in noise.SAMPLERS.items():
        a = sample(noise.seeded(7, "det", family), (3, 50))
        b = sample(seeding.generator_for(7, "det", family), (3, 50))        # a bare generator is a seeded source
        assert torch.equal(a, b) and a.shape == (3, 50) and a.dtype == torch.float64
        assert not torch.equal(a, sample(noise.seeded(8, "det", family), (3, 50)))
    # numpy generators are seeded sources too (the empirical audit's draws)
    assert torch.equal(noise.laplace(np.random.default_rng(1), 10), noise.laplace(np.random.default_rng(1), 10))
    # an exact zero is redrawn (only the zeros), so the interval stays open and the tails finite
    class ZerosFirst(noise.NoiseSource):
        def __init__(self):
            self.calls = []

        def _raw(self, n):
            self.calls.append(n)
            if len(self.calls) == 1:
                return torch.tensor([0.0, 0.5, 0.0, 0.75], dtype=torch.float64)
            return torch.full((n,), 0.25, dtype=torch.float64)

    src = ZerosFirst()
    assert noise.uniform(src, (2, 2)).tolist() == [[0.25, 0.5], [0.25, 0.75]] and src.calls == [4, 2]
    idx = noise.index(noise.secure(), 3, (30000,))
    assert set(idx.tolist()) == {0, 1, 2} and abs(float((idx == 0).float().mean()) - 1 / 3) < 0.02


def test_release_source_is_secure_unless_reproducible():
    assert noise.release_source(reproducible=False, seed=1, labels=("x",)).secure
    s = noise.release_source(reproducible=True, seed=1, labels=("x",))
    assert not s.secure and torch.equal(s.uniform(5), noise.seeded(1, noise.RELEASE_LABEL, "x").uniform(5))
    with pytest.raises(TypeError):
        noise.as_source(3)


@pytest.mark.parametrize("value", ["yes", 1, "null"])
def test_reproducible_release_is_a_strict_boolean(tmp_path, value):
    code, err = run(["ags", *BLOBS, f"privacy.reproducible_release={value}", "run=bad"], tmp_path)
    assert code == 2 and err.count("\n") == 1 and err.startswith("certdp: error: privacy.reproducible_release: "), err
    assert not list(tmp_path.rglob("*.csv"))
