"""`certdp audit`: zero violations for sound certificates, exit code 1 for a broken one."""

from pathlib import Path

import pytest
import torch
import yaml

from certdp.bounds import CERTIFICATES, register_certificate
from certdp.bounds.interval import Interval
from certdp.errors import ConfigError
from certdp.methods import audit

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
    out = audit.run(_cfg(cert), progress=False)
    assert "_exit_code" not in out
    df = out["audit"]
    assert len(df) == 6
    assert (df.param_violations == 0).all() and (df.output_violations == 0).all()
    assert (df.staircase_violations == 0).all()
    assert (df.param_tightness <= 1).all() and (df.output_tightness > 0).all()


def test_zero_violations_small_mlp():
    cfg = _cfg({"name": "crown"}, model={"arch": "mlp", "hidden": [4]})
    cfg["train"] = {"steps": 6, "lr": 0.05, "clip": 0.5, "batch_size": None, "seed": 0}
    out = audit.run(cfg, progress=False)
    assert "_exit_code" not in out
    assert (out["audit"].param_violations == 0).all()


class _Nominal:
    """A deliberately unsound certificate: the envelope collapses to a tiny box."""

    name = "broken"

    def __init__(self, **_):
        pass

    def per_sample_gradient_bounds(self, model, theta, x, y, clip):
        raise NotImplementedError

    def step_bounds(self, model, box, x, y, ks, settings):
        th = box.mid
        g = model.per_sample_grads(th, x, y).clamp(-settings.clip, settings.clip)
        new = settings.contraction * th - settings.lr * g.mean(-2)
        return Interval(new, new.clone())

    def output_bounds(self, model, theta, x):
        from certdp.bounds.ibp import output_bounds
        return output_bounds(model, theta, x)


def test_broken_certificate_exits_1():
    register_certificate("broken")(_Nominal)
    try:
        out = audit.run(_cfg({"name": "broken"}), progress=False)
    finally:
        CERTIFICATES.pop("broken", None)
    assert out.get("_exit_code") == 1
    assert (out["audit"].param_violations > 0).any()


@pytest.mark.parametrize("key,val", [("modes", ["sideways"]), ("repeats", 0), ("radii", [0])])
def test_bad_audit_settings(key, val):
    cfg = _cfg({"name": "ibp"})
    cfg["audit"][key] = val
    with pytest.raises(ConfigError) as e:
        audit.run(cfg, progress=False)
    assert e.value.key == f"audit.{key}"
