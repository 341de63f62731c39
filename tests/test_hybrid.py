"""certdp hybrid end to end on a tiny fixture: a random 2-layer BERT (built offline), 48 + 16
sentences.  Checks the arms, the composed accounting, resume of finished work and of an
interrupted DP-LoRA fine-tune, the shared SST-2 split, and fail-fast config errors."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
import torch

# The hybrid needs the `hybrid` extra (make install and CI install it; `.ci/run` prints skip reasons).
_EXTRA = "the hybrid extra is not installed (pip install 'certdp[hybrid]')"
pytest.importorskip("peft", reason=_EXTRA)
pytest.importorskip("opacus", reason=_EXTRA)
pytest.importorskip("sentence_transformers", reason=_EXTRA)

from certdp.errors import ConfigError  # noqa: E402
from certdp.methods import hybrid  # noqa: E402
from certdp.methods.hybrid.data import load_split, private_subset  # noqa: E402
from certdp.methods.hybrid.lora import finetune  # noqa: E402
from certdp.settings.hybrid import hybrid_settings  # noqa: E402
from certdp.privacy import dpsgd_core  # noqa: E402
from tiny_encoder import write_tiny_encoder  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "hybrid" / "sst2"


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory) -> Path:
    """A sentence-transformers folder with a tiny random BERT (mean pooling, normalised)."""
    return write_tiny_encoder(tmp_path_factory.mktemp("tiny_bert"))


def tiny_cfg(enc: Path, work: Path, **over) -> dict:
    cfg = {
        "seed": 0,
        "dataset": {"name": "sst2", "encoder": "minilm", "encoder_path": str(enc), "path": str(FIXTURE),
                    "max_seq_length": 16, "n_test": 16, "n_private": 24},
        "privacy": {"epsilons": [2, 4], "delta": 1e-5},
        "split": {"fractions": [0.5], "reuse_end_to_end": True},
        "lora": {"rank": 2, "alpha": 2},
        "dpsgd": {"batch_size": 8, "epochs": 1, "clip": 1.0, "lr": 1e-2, "delta": 5e-6, "accountant": "rdp"},
        "head": {"pca_dim": 2, "steps": 10, "k_max": 4, "n_draws": 5, "releases": ["laplace_p", "cauchy_p"],
                 "allocations": ["l1", "anisotropic"], "delta": 5e-6},
        "dpsgd_head": {"batch_size": 8, "epochs": 2, "lrs": [1.0], "n_runs": 2},
        "hybrid": {"work_dir": str(work), "size_sweep": {"epsilon": 2, "n_private": [12]}},
    }
    for k, v in over.items():
        a, b = k.split(".")
        cfg[a] = {**cfg[a], b: v}
    return cfg


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    monkeypatch.setenv("CERTDP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # The tiny runs account with Opacus' RDP accountant on integer orders only: a valid (looser)
    # bound, and seconds faster per call than the fractional orders at the tiny runs' q = 1/3.
    from opacus.accountants.rdp import RDPAccountant
    monkeypatch.setattr(RDPAccountant, "DEFAULT_ALPHAS", list(range(2, 64)))
    dpsgd_core.noise_multiplier.cache_clear()
    return tmp_path


@pytest.mark.slow
def test_end_to_end_accounting_and_resume(tiny_encoder, isolated, caplog):
    cfg = tiny_cfg(tiny_encoder, isolated / "work")
    out = hybrid.run(hybrid_settings(cfg), progress=False)
    res, acc = out["results"], out["accounting"]
    assert set(res.arm) == {"dplora", "hybrid", "frozen_ags", "frozen_dpsgd"}
    # one chosen row per (sweep, N, eps, arm, head release)
    chosen = res[res.chosen]
    assert chosen.groupby(["sweep", "n_private", "epsilon", "arm", "head_release"], dropna=False).size().max() == 1
    assert set(chosen[chosen.sweep == "size"].n_private) == {12}
    assert ((res.accuracy_median >= 0) & (res.accuracy_median <= 1)).all()
    # hybrid candidates: eps1 = eps/2 and, by reuse, the end-to-end budgets below eps
    h4 = res[(res.arm == "hybrid") & (res.epsilon == 4) & (res.sweep == "epsilon") & (res.head_release == "laplace_p")]
    assert set(h4.eps1) == {2.0}
    assert len(h4) == 2                                  # two allocations
    # composition: eps1 + eps2 <= eps, delta1 + delta2 <= 1e-5, the accountant within eps1
    assert acc.within_budget.all()
    hy = res[res.arm == "hybrid"]
    assert ((hy.eps1 + hy.eps2) <= hy.epsilon + 1e-9).all()
    assert ((hy.delta1 + hy.delta2) <= 1e-5 + 1e-18).all()
    assert (res.eps1_certified <= res.eps1 + 1e-9).all()
    assert (res[res.head_release == "cauchy_p"].delta2 == 0).all()

    # rerun: every unit is cached, nothing is fine-tuned or certified again, same numbers
    calls = []
    orig = dpsgd_core.noise_multiplier
    with pytest.MonkeyPatch.context() as mp:                 # not called when all is cached
        mp.setattr(dpsgd_core, "noise_multiplier", lambda **kw: calls.append(kw) or orig(**kw))
        out2 = hybrid.run(hybrid_settings(cfg), progress=False)
    assert calls == []
    assert out2["results"].drop(columns="sweep").equals(out["results"].drop(columns="sweep"))

    # a new budget reuses the finished adapters: eps1 = 8/2 = 4 is the end-to-end adapter of eps = 4,
    # so only the end-to-end eps = 8 adapter is trained
    cfg8 = tiny_cfg(tiny_encoder, isolated / "work", **{"privacy.epsilons": [2, 4, 8]})
    with caplog.at_level(logging.INFO, logger="certdp"):
        hybrid.run(hybrid_settings(cfg8), progress=False)
    trained = [r.message for r in caplog.records if r.message.startswith("DP-LoRA") and "sigma=" in r.message]
    assert len(trained) == 1 and "eps1=8 " in trained[0], trained


@pytest.mark.slow
def test_interrupted_finetune_resumes_exactly(tiny_encoder, isolated, monkeypatch, caplog):
    cfg = tiny_cfg(tiny_encoder, isolated / "a")           # T = 3 steps (q = 8/24)
    settings = hybrid_settings(cfg)
    data = load_split(settings)
    train = private_subset(data, settings.n_private)
    ref = finetune(settings, tiny_encoder, train, 1.0, progress=False)
    ref_state = torch.load(ref.path, weights_only=True)

    s2 = hybrid_settings(tiny_cfg(tiny_encoder, isolated / "b"))
    steps = {"n": 0}
    real_step = torch.optim.AdamW.step

    def flaky(self, *a, **k):
        steps["n"] += 1
        if steps["n"] == 3:
            raise KeyboardInterrupt
        return real_step(self, *a, **k)

    monkeypatch.setattr(torch.optim.AdamW, "step", flaky)
    with pytest.raises(KeyboardInterrupt):
        finetune(s2, tiny_encoder, train, 1.0, progress=False)
    monkeypatch.setattr(torch.optim.AdamW, "step", real_step)
    ckpts = list((isolated / "b" / "adapters").glob("*/checkpoint.pt"))
    assert len(ckpts) == 1 and torch.load(ckpts[0], weights_only=False)["step"] == 2
    with caplog.at_level(logging.INFO, logger="certdp"):
        again = finetune(s2, tiny_encoder, train, 1.0, progress=False)
    assert any("resuming" in r.message and "step 2/" in r.message for r in caplog.records)
    got = torch.load(again.path, weights_only=True)
    assert got.keys() == ref_state.keys()
    for k in got:
        torch.testing.assert_close(got[k], ref_state[k])
    assert again.meta["eps1_certified"] <= 1.0


def test_split_is_the_sst2_datasets(tiny_encoder, tmp_path):
    """Same seed, same files: the hybrid's private / public / test sentences are the ``sst2``
    dataset's (``load_texts``, what ``certdp ags dataset=sst2`` embeds), its size-sweep subsets
    that dataset's ``n_private`` subsets."""
    from certdp.data.text import load_texts
    for seed in (0, 3):
        cfg = {**tiny_cfg(tiny_encoder, tmp_path, **{"dataset.n_public": 10}), "seed": seed}
        data = load_split(hybrid_settings(cfg))
        ref = load_texts("sst2", {"path": str(FIXTURE), "n_test": 16, "n_public": 10}, seed)
        for part in ("private", "public", "test"):
            got, want = getattr(data, part), getattr(ref, part)
            assert got.texts == want.texts and got.y01.tolist() == want.y01.tolist(), part
        sub = load_texts("sst2", {"path": str(FIXTURE), "n_test": 16, "n_private": 24}, seed)
        assert private_subset(data, 24).texts == sub.private.texts
        assert set(data.test.index.tolist()).isdisjoint(data.private.index.tolist())
    seeded = load_split(hybrid_settings(tiny_cfg(tiny_encoder, tmp_path, **{"dataset.split_seed": 7})))
    assert seeded.test.texts == load_texts("sst2", {"path": str(FIXTURE), "n_test": 16}, 7).test.texts
    head = load_split(hybrid_settings(tiny_cfg(tiny_encoder, tmp_path, **{"dataset.n_test_eval": 5})))
    assert head.test.texts == load_texts("sst2", {"path": str(FIXTURE), "n_test": 16}, 0).test.texts[:5]


@pytest.mark.parametrize("key,value,match", [
    ("dataset.encoder", "bert", "dataset.encoder"),
    ("split.fractions", [1.5], "split.fractions"),
    ("dpsgd.delta", 9e-6, "privacy.delta"),
    ("head.releases", ["gauss"], "head.releases"),
    ("privacy.epsilons", [0], "privacy.epsilons"),
    ("hybrid.arms", ["pate"], "hybrid.arms"),
    ("dpsgd.accountant", "gdp", "dpsgd.accountant"),
    ("head.certificate", "no_such_engine", "head.certificate"),
    ("lora.rank", 0, "lora.rank"),
])
def test_bad_config_fails_fast(tiny_encoder, tmp_path, key, value, match):
    with pytest.raises(ConfigError, match=rf"^{re.escape(match)}: "):
        hybrid_settings(tiny_cfg(tiny_encoder, tmp_path, **{key: value}))


def test_split_sizes_fail_fast(tiny_encoder, tmp_path):
    with pytest.raises(ConfigError, match=r"^dataset\.n_test: "):
        load_split(hybrid_settings(tiny_cfg(tiny_encoder, tmp_path, **{"dataset.n_test": 48})))
    data = load_split(hybrid_settings(tiny_cfg(tiny_encoder, tmp_path)))
    with pytest.raises(ConfigError, match=r"^dataset\.n_private: at most 32 "):
        private_subset(data, 33)
    with pytest.raises(ConfigError, match=r"^hybrid\.size_sweep\.n_private: at most 32 "):
        hybrid.run(hybrid_settings(tiny_cfg(tiny_encoder, tmp_path,
                                            **{"hybrid.size_sweep": {"epsilon": 2, "n_private": [40]}})),
                   progress=False)


def test_fixed_selection_refuses_several_candidates(tiny_encoder, tmp_path):
    """selection=fixed trains the configured candidate only: two allocations (or fractions, or
    re-used adapters) are refused before any work, naming the key; one of each is accepted."""
    cfg = {**tiny_cfg(tiny_encoder, tmp_path), "selection": "fixed"}
    with pytest.raises(ConfigError, match=r"^head\.allocations: selection=fixed"):
        hybrid_settings(cfg)
    one = {**cfg, "head": {**cfg["head"], "allocations": ["l1"]}}
    with pytest.raises(ConfigError, match=r"^split\.reuse_end_to_end: selection=fixed"):
        hybrid_settings(one)
    ok = hybrid_settings({**one, "split": {"fractions": [0.5], "reuse_end_to_end": False}})
    assert ok.run.selection == "fixed"
