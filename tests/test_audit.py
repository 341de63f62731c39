"""`certdp audit`: zero violations for sound certificates, exit code 1 for a broken one."""

from pathlib import Path

import pytest
import yaml

from certdp.bounds import CERTIFICATES, register
from certdp.bounds.base import Certificate
from certdp.bounds.ibp import IBP
from certdp.bounds.interval import Interval
from certdp.errors import ConfigError
from certdp.methods import audit
from certdp.settings import parse

CONF = Path(__file__).resolve().parent.parent / "configs"


def _cfg(certificate: dict, **over) -> dict:
    ds = yaml.safe_load((CONF / "dataset" / "linear.yaml").read_text())
    ds.update(n_train=20, n_test=50)
    cfg = {
        "seed": 0, "dataset": ds, "model": {"arch": "auto"},
        "train": {"steps": 8, "lr": 0.1, "clip": 0.1, "batch_size": 5, "seed": 0},
        "certificate": certificate,
        "staircase": {"kind": "range", "k_min": 1, "k_max": 4, "include_n": True},
        "privacy": yaml.safe_load((CONF / "privacy" / "default.yaml").read_text()) | {"global_sensitivity": "none"},
        "audit": {"repeats": 40, "radii": [1, 2, 4], "modes": ["random", "adversarial"], "n_test": 50},
    }
    cfg.update(over)
    return cfg


@pytest.mark.parametrize("cert", [{"name": "ibp"}, {"name": "crown"}, {"name": "milp", "frequency": 4, "workers": 1}])
def test_zero_violations_linear(cert):
    out = audit.run(parse("audit", _cfg(cert)), progress=False)
    assert "_exit_code" not in out
    df = out["audit"]
    assert len(df) == 6
    assert (df.param_violations == 0).all() and (df.output_violations == 0).all()
    assert (df.staircase_violations == 0).all()
    assert (df.param_tightness <= 1).all() and (df.output_tightness > 0).all()


def test_zero_violations_small_mlp():
    cfg = _cfg({"name": "crown"}, model={"arch": "mlp", "hidden": [4]})
    cfg["train"] = {"steps": 6, "lr": 0.05, "clip": 0.5, "batch_size": None, "seed": 0}
    out = audit.run(parse("audit", cfg), progress=False)
    assert "_exit_code" not in out
    assert (out["audit"].param_violations == 0).all()


class _Nominal(Certificate):
    """A deliberately unsound certificate: the envelope collapses to a tiny box."""

    name = "broken"

    def step_bounds(self, model, boxes, batch, *, subs, src=None, settings):
        x, y = batch
        th = boxes.mid
        g = model.per_sample_grads(th, x, y).clamp(-settings.clip, settings.clip)
        new = settings.contraction * th - settings.lr * g.mean(-2)
        return Interval(new, new.clone())


def test_broken_certificate_exits_1():
    register(_Nominal)
    try:
        out = audit.run(parse("audit", _cfg({"name": "broken"})), progress=False)
    finally:
        CERTIFICATES.pop("broken", None)
    assert out.get("_exit_code") == 1
    assert (out["audit"].param_violations > 0).any()


@pytest.mark.parametrize("key,val", [("modes", ["sideways"]), ("repeats", 0), ("radii", [0])])
def test_bad_audit_settings(key, val):
    cfg = _cfg({"name": "ibp"})
    cfg["audit"][key] = val
    with pytest.raises(ConfigError) as e:
        audit.run(parse("audit", cfg), progress=False)
    assert e.value.key == f"audit.{key}"


def test_smoothness_search_finds_no_violation_for_ibp():
    """IBP with top-k aggregation is covered by the smoothness proof: the adversarial search over
    extreme substituted records (all pairs at one index) stays within e^beta."""
    cfg = _cfg({"name": "ibp"})
    cfg["audit"].update(radii=[1], repeats=4, smoothness=12, smoothness_n=[8, 20])
    cfg["privacy"].update(epsilons=[0.5, 2.0], releases=["cauchy", "laplace"])
    out = audit.run(parse("audit", cfg), progress=False)
    df = out["audit"]
    sm = df[df["mode"] == "smoothness-search"]
    assert set(sm["n_audited"]) == {8, 20}
    assert sm["beta"].nunique() >= 5                       # 3 release betas + 0.001, 0.01
    assert (sm["smoothness_ratio"] > 0).all() and (sm["smoothness_ratio"] <= 1 + 1e-9).all()
    assert (sm["smoothness_violations"] == 0).all() and "_exit_code" not in out


@pytest.mark.slow
def test_smoothness_search_finds_no_violation_for_crown_on_the_issue_setting():
    """CROWN's relaxations are inclusion-monotone and its removal charge nests (the proof's (M1)-(M3),
    privacy/sensitivity.py): on the linear preset's training with N = 30 and dense radii 1..30,
    where the former adaptive-chord CROWN reached 1.55 e^beta, the search stays within e^beta."""
    cfg = _cfg({"name": "crown"})
    cfg["dataset"].update(n_train=30, n_test=20, output_range=None)
    cfg["train"] = {"steps": 20, "lr": 0.3, "clip": 1.0, "batch_size": None, "seed": 0}
    cfg["staircase"] = {"kind": "range", "k_min": 1, "k_max": 30, "include_n": True}
    cfg["audit"].update(radii=[1], repeats=2, smoothness=60, smoothness_n=[30])
    cfg["privacy"].update(epsilons=[1.0, 0.1], releases=["cauchy"])
    out = audit.run(parse("audit", cfg), progress=False)
    sm = out["audit"][out["audit"]["mode"] == "smoothness-search"]
    assert (sm["smoothness_ratio"] > 0).all() and (sm["smoothness_ratio"] <= 1 + 1e-9).all()
    assert (sm["smoothness_violations"] == 0).all() and "_exit_code" not in out


def test_bad_smoothness_sizes():
    cfg = _cfg({"name": "ibp"})
    cfg["audit"].update(smoothness=2, smoothness_n=[1000])
    with pytest.raises(ConfigError) as e:
        audit.run(parse("audit", cfg), progress=False)
    assert e.value.key == "audit.smoothness_n"


class _DataScaled(IBP):
    """Sound but not smooth: the per-batch IBP step widened by a width that scales with the
    largest |label|, which one adversarial substitution multiplies by ~1000.  (Sound, so that
    AGT's crossing check, which refuses a box excluding the nominal run, lets it through.)"""

    name = "datascaled"
    nesting_monotone = False

    def __init__(self, **_):
        super().__init__(substitutions="per_batch")

    def step_bounds(self, model, boxes, batch, *, subs, src=None, settings):
        nb = super().step_bounds(model, boxes, batch, subs=subs, src=src, settings=settings)
        w = 1e-3 * float(batch.y.abs().max()) * subs.to(nb.lo.dtype).unsqueeze(-1)
        return Interval(nb.lo - w, nb.hi + w)


def test_smoothness_check_catches_a_non_smooth_bound():
    register(_DataScaled)
    try:
        cfg = _cfg({"name": "datascaled"})
        cfg["audit"].update(radii=[1], repeats=2, smoothness=3, smoothness_n=[20], modes=["adversarial"])
        cfg["privacy"].update(epsilons=[1.0], releases=["laplace"])
        out = audit.run(parse("audit", cfg), progress=False)
    finally:
        CERTIFICATES.pop("datascaled", None)
    sm = out["audit"][out["audit"]["mode"] == "smoothness-search"]
    assert sm["smoothness_violations"].iloc[0] > 0 and (sm["smoothness_ratio"] > 1).all()
    assert out.get("_exit_code") == 1


def test_bad_smoothness_setting():
    cfg = _cfg({"name": "ibp"})
    cfg["audit"]["smoothness"] = -1
    with pytest.raises(ConfigError) as e:
        audit.run(parse("audit", cfg), progress=False)
    assert e.value.key == "audit.smoothness"
