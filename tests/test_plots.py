"""The plots of the re-measured figures draw every arm their experiment files run, labelled:
the ablations' two substitution modes (per-epoch ledger solid, per-batch budget dashed) and the
blobs figure's two matched DP-SGD arms.  Plots read CSVs only, so small synthetic run directories
exercise them in milliseconds; the experiment files' run grids are checked without running."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from certdp import figures as F
from certdp.plots import PLOTS, style

EPS = [0.1, 1.0, 10.0]


def _agtr_run(tmp: Path, name: str, rid: str, params: dict, *, scale: float, gs: float | None = None):
    """A finished agtr run whose errors grow with ``scale`` (so each line is identifiable)."""
    d = tmp / name
    d.mkdir()
    rows = []
    for e in EPS:
        for regime, mech in (("pure", "cauchy"), ("approx", "laplace")):
            rows.append({"arm": "agtr", "mechanism": mech, "regime": regime, "epsilon": e,
                         "delta": 1e-5 if regime == "approx" else 0.0, "mae": scale / e, "mse": (scale / e) ** 2,
                         "nonprivate_mse": 0.01, "ss_mean": scale})
            if gs is not None:
                g = "laplace_gs" if regime == "pure" else "gaussian_gs"
                rows.append({"arm": "gs", "mechanism": g, "regime": regime, "epsilon": e,
                             "delta": 1e-5 if regime == "approx" else 0.0, "mae": gs / e, "mse": (gs / e) ** 2,
                             "nonprivate_mse": 0.01, "ss_mean": gs})
    pd.DataFrame(rows).to_csv(d / "results.csv", index=False)
    # the staircase as certdp writes it: radii 0, 1, 2, 4, 8 (V_j = scale * (k_j + 1)), then the last
    # piece, the ceiling T_N (linear, k = N) or the global sensitivity G = 10 (California, at k_max)
    linear = rid.startswith("linear")
    ks = np.array([0, 1, 2, 4, 8] + ([40000] if linear else [8]))
    a = np.append(scale * (ks[:-1] + 1.0), 0.5 if linear else 10.0)
    phi = np.arange(len(ks))
    pd.DataFrame({"k": ks, "phi": phi, "source": ["computed"] * (len(ks) - 1) + ["ceiling" if linear else "global"],
                  "beta": 0.5, "a_bar_mean": a, "contribution_mean": a * np.exp(-0.5 * phi)}
                 ).to_csv(d / "certificate.csv", index=False)
    return F.RunResult(rid, d, params, ok=True)


@pytest.fixture()
def ablation_runs(tmp_path):
    runs = F.Runs()
    sub = "certificate.substitutions"
    specs = [("linear_ibp", {sub: "per_epoch"}, 0.01, None), ("linear_ibp", {sub: "per_batch"}, 0.1, None),
             ("linear_F", {"certificate.frequency": 16}, 0.005, None),
             ("california_bs", {"train.batch_size": 250, sub: "per_epoch"}, 1.0, 10.0),
             ("california_bs", {"train.batch_size": 250, sub: "per_batch"}, 6.0, 10.0),
             ("california_full", {"train.batch_size": 16512}, 0.3, 10.0)]
    for i, (rid, params, scale, gs) in enumerate(specs):
        runs.setdefault(rid, []).append(_agtr_run(tmp_path, f"r{i}", rid, params, scale=scale, gs=gs))
    return runs


def _lines(ax):
    return [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 1]


def test_ablation_draws_both_substitution_modes(ablation_runs):
    style.apply()
    fig, data = PLOTS["agtr_ablation"](ablation_runs)
    lin, cal = fig.axes[0], fig.axes[2]          # pure-DP panels (MAE = scale / eps)
    by_label = {ln.get_label(): ln for ln in _lines(lin)}
    assert by_label["IBP, per-epoch ledger"].get_linestyle() == "-"
    assert by_label["IBP, per-batch budget"].get_linestyle() == "--"
    np.testing.assert_allclose(by_label["IBP, per-batch budget"].get_ydata(), [0.1 / e for e in EPS])
    np.testing.assert_allclose(by_label["IBP, per-epoch ledger"].get_ydata(), [0.01 / e for e in EPS])
    # California: the batch size's colour is shared by its two modes; the style tells them apart
    cal_lines = [ln for ln in _lines(cal) if ln.get_color() != "black"]
    solid = [ln for ln in cal_lines if ln.get_linestyle() == "-"]
    dashed = [ln for ln in cal_lines if ln.get_linestyle() == "--"]
    assert len(dashed) == 1 and len(solid) == 2                     # BS 250 per batch; BS 250 and full batch
    np.testing.assert_allclose(dashed[0].get_ydata(), [6.0 / e for e in EPS])
    bs250 = next(ln for ln in solid if ln.get_label() == "BS = 250")
    assert bs250.get_color() == dashed[0].get_color()
    np.testing.assert_allclose(bs250.get_ydata(), [1.0 / e for e in EPS])
    legend = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert {"BS = 250", "BS = 16512 (full batch)", "solid: per-epoch ledger", "dashed: per-batch budget",
            "global sensitivity"} <= set(legend)
    # the figure's data says which mode each value belongs to
    pure = data[(data.regime == "pure") & (data.epsilon == 1.0)]
    got = dict(zip(pure.setting, zip(pure.substitutions, pure.value)))
    assert got["BS = 250, per-batch budget"] == ("per_batch", 6.0)
    assert got["BS = 250, per-epoch ledger"] == ("per_epoch", 1.0)
    assert got["BS = 16512 (full batch)"] == ("full", pytest.approx(0.3))


def test_certificates_split_california_by_mode(ablation_runs):
    style.apply()
    fig, data = PLOTS["agtr_certificates"](ablation_runs)
    titles = [ax.get_title() for ax in fig.axes[:3]]
    assert titles == ["Linear: concretisation frequency", "California: batch size, per-epoch ledger",
                      "California: batch size, per-batch budget"]
    panel = {t: {ln.get_label(): ln for ln in _lines(ax)} for t, ax in zip(titles, fig.axes)}
    epoch, batch = panel[titles[1]], panel[titles[2]]
    # dashed, left axis: the computed A_bar(k_j) = scale * (k_j + 1) against the index j; each
    # California panel holds its own mode's run and the full batch
    np.testing.assert_allclose(epoch["BS = 250"].get_xdata(), [0, 1, 2, 3, 4])
    np.testing.assert_allclose(epoch["BS = 250"].get_ydata(), [1, 2, 3, 5, 9])
    np.testing.assert_allclose(batch["BS = 250"].get_ydata(), [6, 12, 18, 30, 54])
    assert "BS = 16512 (full batch)" in epoch and "BS = 16512 (full batch)" in batch
    assert {"IBP, per-epoch ledger", "IBP, per-batch budget", "MILP, F = 16"} <= set(panel[titles[0]])
    # ticks name the radii by index; the last one the final piece
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["0", "1", "2", "4", "8", "N"]
    assert [t.get_text() for t in fig.axes[1].get_xticklabels()] == ["0", "1", "2", "4", "8", "G"]
    # the star is the maximum over every piece, the final one included: a computed piece for BS 250
    # (9 e^{-2} = 1.22 > 10 e^{-5/2} = 0.82), the global piece for the full batch (0.3 * 9 e^{-2} = 0.37)
    cal = data[(data.dataset == "california") & data.is_max.fillna(False).astype(bool)]
    stars = dict(zip(cal.setting, zip(cal.source, cal.smooth_contribution)))
    assert stars["BS = 250, per-epoch ledger"] == ("computed", pytest.approx(9 * np.exp(-2)))
    assert stars["BS = 250, per-batch budget"] == ("computed", pytest.approx(54 * np.exp(-2)))
    assert stars["BS = 16512 (full batch)"] == ("global", pytest.approx(10 * np.exp(-2.5)))
    assert set(data[data.dataset == "california"].substitutions.dropna()) == {"per_epoch", "per_batch", "full", ""}


def test_blobs_draws_the_basic_composition_arm_beside_the_accounted_one(tmp_path):
    ags = tmp_path / "ags"
    ags.mkdir()
    pd.DataFrame([{"arm": "AGS", "mechanism": m, "epsilon": e, "accuracy_median": 0.6, "nonprivate_accuracy": 0.88,
                   "certificate": "milp"} for e in EPS for m in ("cauchy_p", "laplace_p")]).to_csv(ags / "results.csv")
    base = tmp_path / "base"
    base.mkdir()
    pd.DataFrame([{"arm": arm, "regime": regime, "epsilon": e, "accuracy_median": acc, "nonprivate_accuracy": 0.88}
                  for e in EPS for regime in ("pure", "approx")
                  for arm, acc in (("DP-SGD matched", 0.8), ("DP-SGD matched (basic)", 0.7), ("PATE", 0.5))]
                 ).to_csv(base / "results.csv")
    runs = F.Runs({"ags_F": [F.RunResult("ags_F", ags, {"certificate.frequency": 1}, ok=True)],
                   "baselines": [F.RunResult("baselines", base, {}, ok=True)]})
    style.apply()
    fig, data = PLOTS["blobs_ags"](runs)
    for ax in fig.axes[:2]:
        lines = {ln.get_label(): ln for ln in _lines(ax)}
        np.testing.assert_allclose(lines["DP-SGD (matched, basic composition)"].get_ydata(), 0.7)
        np.testing.assert_allclose(lines["DP-SGD (matched, accounted)"].get_ydata(), 0.8)
        assert "AGS (MILP, F = 1)" in lines
    assert set(data.arm) >= {"DP-SGD (matched, basic composition)", "DP-SGD (matched, accounted)"}


def test_blobs_labels_ags_runs_without_a_smoothness_proof(tmp_path):
    """The other certificates' AGS runs are drawn beside the MILP windows; a run whose results say
    smoothness_proof=False carries 'unproven smoothness' in its label and is dashed."""
    runs = {}
    for rid, acc, proof in (("ags_F", 0.6, False), ("ags_ibp", 0.55, True), ("ags_crowntt", 0.85, False)):
        d = tmp_path / rid
        d.mkdir()
        pd.DataFrame([{"arm": "AGS", "mechanism": m, "epsilon": e, "accuracy_median": acc, "nonprivate_accuracy": 0.88,
                       "certificate": "milp", "smoothness_proof": proof}
                      for e in EPS for m in ("cauchy_p", "laplace_p")]).to_csv(d / "results.csv")
        runs[rid] = [F.RunResult(rid, d, {"certificate.frequency": 10} if rid == "ags_F" else {}, ok=True)]
    style.apply()
    fig, data = PLOTS["blobs_ags"](F.Runs(runs))
    lines = {ln.get_label(): ln for ln in _lines(fig.axes[0])}
    assert lines["AGS (IBP ledger)"].get_linestyle() == "-"
    np.testing.assert_allclose(lines["AGS (IBP ledger)"].get_ydata(), 0.55)
    assert lines["AGS (CROWN-TT + slopes, unproven smoothness)"].get_linestyle() == "--"
    assert "AGS (MILP, F = 10, unproven smoothness)" in lines
    assert "AGS (LP windows, F = 10)" not in lines            # a run that is missing is not drawn


def test_ablation_grid_runs_both_modes_below_full_batch_and_full_batch_once():
    exps = F.load_experiments()
    for name in ("agtr_ablation", "agtr_certificates"):
        for profile in F.PROFILES:
            specs = exps[name].specs(profile)
            cal = [dict(s.params) for s in specs if s.id == "california_bs"]
            sizes = {p["train.batch_size"] for p in cal}
            assert sizes and max(sizes) < 16512
            assert sorted((p["train.batch_size"], p["certificate.substitutions"]) for p in cal) == sorted(
                (b, m) for b in sizes for m in ("per_epoch", "per_batch"))
            assert [dict(s.params) for s in specs if s.id == "california_full"] == [{"train.batch_size": 16512}]
            assert sorted(dict(s.params)["certificate.substitutions"] for s in specs if s.id == "linear_ibp") == [
                "per_batch", "per_epoch"]
    # the two figures share their runs
    assert {s.argv.__repr__() for s in exps["agtr_ablation"].specs("paper")} == {
        s.argv.__repr__() for s in exps["agtr_certificates"].specs("paper")}


def test_per_epoch_runs_are_the_default_config(tmp_path):
    """Naming the default mode resolves to the same run (and run directory) as leaving it out, so
    runs made before the sweep was explicit are reused; the per-batch run is another run."""
    spec = next(s for s in F.load_experiments()["agtr_ablation"].specs("quick")
                if s.id == "california_bs" and dict(s.params)["certificate.substitutions"] == "per_epoch")
    bare = F.RunSpec(spec.figure, spec.id, spec.command, spec.overrides,
                     tuple((k, v) for k, v in spec.params if k != "certificate.substitutions"), spec.expect)
    other = F.RunSpec(spec.figure, spec.id, spec.command, spec.overrides,
                      tuple((k, "per_batch" if k == "certificate.substitutions" else v) for k, v in spec.params))
    a, b, c = (F.resolve(s, tmp_path) for s in (spec, bare, other))
    assert a.run_dir == b.run_dir and a.config["certificate"]["substitutions"] == "per_epoch"
    assert c.run_dir != a.run_dir and c.config["certificate"]["substitutions"] == "per_batch"
