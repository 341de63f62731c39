"""Critical ratios of Theorems 3.2 / 3.3 at known points, their defining equalities, the runner."""

import math
import subprocess
import sys

import numpy as np
import pytest
from scipy.stats import norm

from certdp.errors import ConfigError
from certdp.methods.feasibility import run
from certdp.settings import parse
from certdp.privacy.conditions import (approx_critical_ratio, cauchy_error, gaussian_error, laplace_error,
                                       peak, pure_critical_ratio)


def test_pure_closed_form_at_known_points():
    # 1 - alpha = 0.4: ln(1/0.6) / tan(0.2 pi) / 6
    want = math.log(1 / 0.6) / math.tan(0.2 * math.pi) / 6
    assert float(pure_critical_ratio(confidence=0.4)) == pytest.approx(want, rel=1e-12)
    assert want == pytest.approx(0.1172, abs=5e-4)           # the paper's "rho < 0.117"
    # 1 - alpha = 0.5: tan(pi/4) = 1, so rho = ln 2 / (6 c)
    assert float(pure_critical_ratio(confidence=0.5, c=2)) == pytest.approx(math.log(2) / 12)
    # Cauchy S/(eps - eps/2) has scale factor 2: three times the ratio
    assert float(pure_critical_ratio(confidence=0.5, cauchy_factor=2)) == pytest.approx(math.log(2) / 2)


def test_approx_closed_form_at_known_points():
    # 1 - alpha = 0.8, delta = 1e-5: sqrt(2 ln 125000) * Phi^-1(0.9) / ln 5 / 2 = 1.929 (paper: ~1.9)
    want = math.sqrt(2 * math.log(1.25e5)) * norm.ppf(0.9) / math.log(5) / 2
    got = float(approx_critical_ratio(confidence=0.8, delta=1e-5))
    assert got == pytest.approx(want, rel=1e-12)
    assert got == pytest.approx(1.929, abs=1e-3)
    for c, paper in ((2, 0.96), (3, 0.64)):
        assert float(approx_critical_ratio(confidence=0.8, c=c)) == pytest.approx(paper, abs=0.01)
    # 1 - alpha = 0.98: 1.44 at delta = 1e-5 and 1.12 at delta = 1e-3 (the paper's "1.12 - 1.44")
    assert float(approx_critical_ratio(confidence=0.98, delta=1e-5)) == pytest.approx(1.44, abs=0.005)
    assert float(approx_critical_ratio(confidence=0.98, delta=1e-3)) == pytest.approx(1.12, abs=0.005)


def test_ratios_are_where_errors_are_c_times_apart():
    conf, eps, gs, c = np.array([0.3, 0.6, 0.9, 0.99]), 0.7, 3.0, 2.0
    rho = pure_critical_ratio(confidence=conf, c=c)
    assert np.allclose(c * cauchy_error(scale=6 * rho * gs / eps, confidence=conf),
                       laplace_error(scale=gs / eps, confidence=conf), rtol=1e-12)
    delta = 1e-6
    rho = approx_critical_ratio(confidence=conf, c=c, delta=delta)
    sigma = gs * math.sqrt(2 * math.log(1.25 / delta)) / eps
    assert np.allclose(c * laplace_error(scale=2 * rho * gs / eps, confidence=conf),
                       gaussian_error(sigma=sigma, confidence=conf), rtol=1e-12)


def test_error_quantiles_match_sampling():
    g = np.random.default_rng(0)
    z = np.abs(g.standard_cauchy(400_000))
    assert np.quantile(z, 0.9) == pytest.approx(float(cauchy_error(scale=1.0, confidence=0.9)), rel=0.02)
    z = np.abs(g.laplace(size=400_000))
    assert np.quantile(z, 0.9) == pytest.approx(float(laplace_error(scale=1.0, confidence=0.9)), rel=0.02)


def test_peaks():
    x, v = peak(lambda t: pure_critical_ratio(confidence=t), 0.01, 0.99)
    assert 0.35 < x < 0.41 and v == pytest.approx(0.1172, abs=5e-4)
    # Theorem 3.3's bracket is decreasing in the confidence: the window's left edge is the peak
    x, v = peak(lambda t: approx_critical_ratio(confidence=t), 0.8, 0.999)
    assert x == pytest.approx(0.8, abs=1e-6)


def test_bad_inputs():
    with pytest.raises(ValueError):
        pure_critical_ratio(confidence=1.0)
    with pytest.raises(ValueError):
        approx_critical_ratio(confidence=0.5, delta=0.0)
    with pytest.raises(ValueError):
        pure_critical_ratio(confidence=0.5, c=-1)


def _cfg(**f):
    base = {"confidence": {"start": 0.01, "stop": 0.99, "step": 0.01}, "c": [1, 2, 3], "delta": 1e-5,
            "cauchy_factor": 6, "approx_window": [0.8, 1.0]}
    base.update(f)
    return {"feasibility": base}


def test_runner_frames_and_peaks():
    out = run(parse("feasibility", _cfg()), progress=False)
    res, pk = out["results"], out["peaks"]
    assert set(res.regime) == {"pure", "approx"} and len(res) == 2 * 3 * 99
    p = pk[(pk.regime == "pure") & (pk.c == 1)].iloc[0]
    assert p.peak_rho == pytest.approx(0.1172, abs=5e-4)
    a = pk[(pk.regime == "approx") & (pk.c == 1) & (pk.window == "paper")].iloc[0]
    assert a.peak_rho == pytest.approx(1.929, abs=2e-3)
    assert a.peak_confidence_grid == pytest.approx(0.81)   # first grid point strictly above 0.8


def test_runner_config_errors():
    with pytest.raises(ConfigError, match="feasibility.c"):
        run(parse("feasibility", _cfg(c=[0])), progress=False)
    with pytest.raises(ConfigError, match="feasibility.confidence"):
        run(parse("feasibility", _cfg(confidence={"values": [0.5, 1.0]})), progress=False)
    with pytest.raises(ConfigError, match="feasibility.delta"):
        run(parse("feasibility", _cfg(delta=[1e-5, 2.0])), progress=False)


@pytest.mark.slow
def test_cli_end_to_end(tmp_path):
    r = subprocess.run([sys.executable, "-m", "certdp.cli", "feasibility", f"out_root={tmp_path}", "run=t",
                        "feasibility.confidence.step=0.01", "feasibility.confidence.start=0.01",
                        "feasibility.confidence.stop=0.99"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "peak rho" in r.stdout + r.stderr
    d = tmp_path / "feasibility" / "none" / "t"
    assert (d / "results.csv").exists() and (d / "peaks.csv").exists()
