"""A newcomer adds a release (mechanism), an accountant and a dataset each with one class or one
function, registered from here as from a new file; settings, runners and ``certdp list`` pick
them up with no other change.  (Adding a certificate: tests/test_certificate_interface.py.)"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from certdp import data
from certdp.data.params import Field, integer, real
from certdp.errors import ConfigError
from certdp.privacy import accounting, mechanisms
from certdp.privacy.mechanisms.base import Mechanism, check_epsilon
from certdp.privacy.noise import laplace
from certdp.settings import parse

LINEAR = {"name": "linear", "n_train": 60, "n_test": 30, "model": {"arch": "linear"}}


def _agtr_cfg(dataset: dict, releases: list[str]) -> dict:
    return {"seed": 0, "dataset": dataset, "model": {"arch": "auto"},
            "train": {"steps": 4, "lr": 0.3, "clip": 1.0},
            "certificate": {"name": "ibp"}, "staircase": {"kind": "range", "k_max": 4, "include_n": True},
            "privacy": {"epsilons": [1.0, 2.0], "delta": 1e-5, "releases": releases, "n_draws": 7}}


# --------------------------------------------------------------------------- a release
@pytest.fixture
def doubled_laplace():
    @dataclass(frozen=True)
    class DoubledLaplace(Mechanism):
        """Global, pure DP: Laplace 2 Delta_1/eps (twice the noise the Laplace mechanism needs)."""
        epsilon: float
        name = "doubled_laplace_gs"
        kind = "global"
        query = "prediction"
        regime = "pure"
        beta = 0.0

        def __post_init__(self):
            check_epsilon(self.epsilon)

        def scale(self, s):
            return 2 * s / self.epsilon

        def sample(self, g, shape, dtype=torch.float64):
            return laplace(g, shape, dtype)

    yield DoubledLaplace
    mechanisms.REGISTRY.pop("doubled_laplace_gs")


def test_a_new_release_is_listed_parsed_and_run(doubled_laplace, capsys):
    from certdp.cli import list_cmd
    from certdp.methods import agtr
    assert "doubled_laplace_gs" in mechanisms.names("prediction")
    assert "doubled_laplace_gs" not in mechanisms.names("parameter")
    list_cmd()
    assert "doubled_laplace_gs" in capsys.readouterr().out
    s = parse("agtr", _agtr_cfg(LINEAR, ["cauchy", "doubled_laplace_gs"]))
    res = agtr.run(s, progress=False)["results"]
    new = res[res.mechanism == "doubled_laplace_gs"]
    assert list(new.arm) == ["gs", "gs"] and (new.regime == "pure").all()
    width = 12.0                                      # the linear dataset's output range [-6, 6]
    assert new.scale_mean.tolist() == pytest.approx([2 * width / 1.0, 2 * width / 2.0])
    # AGS does not take it: a prediction release is not a parameter release
    with pytest.raises(ConfigError, match="^privacy.releases: "):
        parse("ags", {"dataset": {"name": "blobs"}, "train": {"steps": 2, "lr": 0.1, "clip": 0.1},
                      "privacy": {"epsilons": [1], "releases": ["doubled_laplace_gs"]}})


def test_a_release_must_declare_its_kind():
    with pytest.raises(TypeError, match="kind"):
        @dataclass(frozen=True)
        class Nameless(Mechanism):
            """No kind."""
            epsilon: float
            name = "broken_release"
            query = "prediction"
            regime = "pure"
    assert "broken_release" not in mechanisms.REGISTRY


# --------------------------------------------------------------------------- an accountant
@pytest.fixture
def quarter_delta():
    class QuarterDelta(accounting.Accountant):
        """Basic composition of epsilon with delta0 = delta/(4n) (a valid, looser split)."""
        name = "quarter_delta"

        def per_release(self, *, epsilon, delta, n):
            return epsilon / n, delta / (4 * n)

    yield QuarterDelta
    accounting.ACCOUNTANTS.pop("quarter_delta")


@pytest.mark.slow
def test_a_new_accountant_splits_the_ags_budget(quarter_delta):
    from certdp.methods import ags
    cfg = {"seed": 0, "dataset": {"name": "blobs", "n_train": 40, "n_test": 100, "n_public": 40},
           "train": {"steps": 4, "lr": 0.5, "clip": 0.05, "batch_size": 10},
           "certificate": {"name": "ibp"}, "staircase": {"kind": "list", "values": [1, 2]},
           "privacy": {"epsilons": [4.0], "delta": 1e-5, "releases": ["laplace_p"], "n_draws": 3},
           "ags": {"releases_n": 2, "composition": "quarter_delta", "baselines": []}}
    out = ags.run(parse("ags", cfg), progress=False)
    row = out["results"].iloc[0]
    assert row.composition == "quarter_delta"
    assert row.eps0 == pytest.approx(2.0) and row.delta0 == pytest.approx(1e-5 / 8)
    assert "quarter_delta" in set(out["accounting"].accountant)
    with pytest.raises(ConfigError, match="^ags.composition: "):
        parse("ags", {**cfg, "ags": {"composition": "no_such_accountant"}})


# --------------------------------------------------------------------------- a dataset
@pytest.fixture
def steep_line():
    fields = {"n_train": Field(80, lambda v, k: integer(v, k, lo=2)),
              "n_test": Field(40, lambda v, k: integer(v, k, lo=1)),
              "slope": Field(3.0, lambda v, k: real(v, k))}

    @data.register("steep_line", task="regression", summary="y = slope * x + noise (a test dataset)",
                   fields=fields)
    def load(cfg, seed):
        params = data.settings(cfg, "steep_line")
        rng = np.random.default_rng(seed)
        x = rng.uniform(-1, 1, (params["n_train"] + params["n_test"], 1))
        y = params["slope"] * x[:, 0] + 0.05 * rng.standard_normal(len(x))
        n = params["n_train"]
        return data.Dataset("steep_line", "regression", x[:n], y[:n], x[n:], y[n:], output_range=(-4.0, 4.0))

    yield load
    data.REGISTRY.pop("steep_line")


def test_a_new_dataset_runs_through_certify_and_agtr(steep_line):
    from certdp.methods import agtr
    ds = {"name": "steep_line", "n_train": 50, "slope": -2.0}
    out = agtr.run_certify(parse("certify", _agtr_cfg(ds, ["cauchy"])), progress=False)
    assert set(out["envelopes"].dataset) == {"steep_line"}
    assert list(out["envelopes"].k) == [1, 2, 3, 4, 50]
    res = agtr.run(parse("agtr", _agtr_cfg(ds, ["cauchy", "laplace_gs"])), progress=False)["results"]
    assert (res.n_train == 50).all() and np.isfinite(res.mae).all()
    assert math.isclose(res[res.mechanism == "laplace_gs"].scale_mean.iloc[0], 8.0 / 1.0)
    with pytest.raises(ConfigError, match="^dataset.slope: "):
        parse("agtr", _agtr_cfg({**ds, "slope": "steep"}, ["cauchy"]))
    with pytest.raises(ConfigError, match="^dataset.noise: unknown setting"):
        parse("agtr", _agtr_cfg({**ds, "noise": 0.1}, ["cauchy"]))
