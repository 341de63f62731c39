"""The device axis: ``device=auto|cpu|cuda|cuda:N`` parsed once, refused in one line where it
cannot hold, recorded in every results row, and honoured by every engine that runs on torch.

Without CUDA the engines are checked for placement with a trap: inside ``torch.device("meta")``
every tensor created without an explicit device is a meta tensor, and an operation mixing it
with the real inputs fails, so a pass that completes placed every tensor on its inputs' device.
With CUDA (skipped otherwise, saying so) the GPU envelopes are compared with the CPU's."""

from __future__ import annotations

import subprocess
from pathlib import Path
import sys

import pandas as pd
import pytest
import torch

from certdp import agt
from certdp.agt import memory_budget, run_agt
from certdp.bounds import check_device, get_certificate
from certdp.bounds.shared import SharedBoxes
from certdp.errors import ConfigError
from certdp.models import ModelSpec
from certdp.settings.base import device_setting
from certdp.training import TrainSettings, train

D = torch.float64
CUDA = torch.cuda.is_available()
NO_CUDA = "torch sees no CUDA device on this machine: the GPU half of the device axis is checked by benchmarks/gpu_check.sh"


def _cases():
    g = torch.Generator().manual_seed(0)
    out = []
    x = torch.rand(60, 1, generator=g, dtype=D)
    out.append(("linear crown (coupled)", ModelSpec((1, 1), "mse"), x, 2 * x[:, 0] + 0.1,
                TrainSettings(steps=3, lr=0.3, clip=1.0), [1, 2, 3, 60], lambda: get_certificate("crown")))
    x = torch.randn(40, 3, generator=g, dtype=D)
    mlp = ModelSpec((3, 4, 1), "mse")
    for agg in ("topk", "tau"):
        out.append((f"mlp ibp {agg}", mlp, x, x[:, 0], TrainSettings(steps=3, lr=0.1, clip=0.1), [1, 2, 3],
                    lambda agg=agg: get_certificate("ibp", aggregation=agg)))
    out.append(("mlp crown (exact ranges)", mlp, x, x[:, 0], TrainSettings(steps=3, lr=0.1, clip=0.1), [1, 2, 3],
                lambda: get_certificate("crown")))
    lab = torch.randint(0, 3, (40,), generator=g)
    out.append(("softmax crown (coupled)", ModelSpec((3, 3), "ce"), x, lab,
                TrainSettings(steps=3, lr=0.5, clip=0.1, contraction=0.6), [1, 2, 40], lambda: get_certificate("crown")))
    out.append(("softmax crown (flat)", ModelSpec((4, 4), "ce"), torch.randn(40, 4, generator=g, dtype=D), lab,
                TrainSettings(steps=3, lr=0.5, clip=0.1), [1, 2, 40], lambda: get_certificate("crown")))
    out.append(("softmax shared boxes", ModelSpec((3, 3), "ce"), x, lab, TrainSettings(steps=3, lr=0.5, clip=0.1),
                [1, 2, 3, 4, 5, 40], lambda: SharedBoxes(get_certificate("crown"), 2.0)))
    yh = (2 * (x[:, 0] > 0) - 1).to(D)
    for name in ("ibp", "crown"):
        out.append((f"hinge {name} ledger", ModelSpec((3, 1), "hinge"), x, yh,
                    TrainSettings(steps=8, lr=0.5, clip=0.1, batch_size=5), [1, 2, 4], lambda name=name: get_certificate(name)))
    return out


CASES = _cases()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_every_tensor_follows_the_inputs_device(case):
    _, m, x, y, s, ks, make = case
    th = m.init(0)
    with torch.device("meta"):                 # a tensor created without a device would be meta
        env = run_agt(m, th, x, y, s, ks, certificate=make(), progress=False, device="cpu")
        theta = train(m, th, x, y, s, device="cpu")
    assert env.lo.device.type == "cpu" and theta.device.type == "cpu"
    assert bool(torch.isfinite(env.lo).all() and torch.isfinite(env.hi).all())


def test_the_trap_catches_a_tensor_created_without_a_device(monkeypatch):
    """Planted bug: the tau grid created without ``device=``; the meta trap fails the pass."""
    from certdp.bounds import aggregate
    real = aggregate.batch_sum_from_stats

    def careless(stats, *, subs, src=None, clip, b):
        torch.zeros(1) + stats[0].flatten()[:1]                              # no device: meta under the trap
        return real(stats, subs=subs, src=src, clip=clip, b=b)
    monkeypatch.setattr("certdp.bounds.ibp.batch_sum_from_stats", careless)
    _, m, x, y, s, ks, _ = CASES[2]
    th = m.init(0)
    with pytest.raises(RuntimeError, match="meta"):
        with torch.device("meta"):
            run_agt(m, th, x, y, s, ks, certificate=get_certificate("ibp", aggregation="tau"), progress=False,
                    device="cpu")


def test_device_requests_resolve_or_refuse_in_one_line():
    assert device_setting("cpu", "device") == "cpu"
    assert device_setting(" CPU ", "device") == "cpu"
    assert device_setting("auto", "device") == ("cuda:%d" % torch.cuda.current_device() if CUDA else "cpu")
    for bad in ("tpu", "cuda:x", "gpu", 3):
        with pytest.raises(ConfigError) as e:
            device_setting(bad, "device")
        assert e.value.key == "device"
    if not CUDA:
        for req in ("cuda", "cuda:0"):
            with pytest.raises(ConfigError, match="torch sees no CUDA device"):
                device_setting(req, "device")
    else:
        with pytest.raises(ConfigError, match="does not exist"):
            device_setting(f"cuda:{torch.cuda.device_count()}", "device")


def test_engines_that_cannot_run_on_a_gpu_say_so():
    for name in ("milp", "crowntt"):
        with pytest.raises(ConfigError) as e:
            check_device(get_certificate(name), "cuda:0")
        assert e.value.key == "device" and "cpu" in str(e.value)
        check_device(get_certificate(name), "cpu")
    for name in ("ibp", "crown"):
        check_device(get_certificate(name), torch.device("cuda", 0))
    with pytest.raises(ConfigError, match="device"):
        run_agt(ModelSpec((2, 1), "mse"), torch.zeros(3, dtype=D), torch.zeros(4, 2, dtype=D), torch.zeros(4, dtype=D),
                TrainSettings(steps=1, lr=0.1, clip=1.0), [1], certificate=get_certificate("milp"), device="cuda:0",
                progress=False)


def test_memory_budget_follows_the_device(monkeypatch):
    assert memory_budget("cpu") == agt.CPU_BUDGET_BYTES
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda dev=None: (8e9, 80e9))
    assert memory_budget(torch.device("cuda", 0)) == agt.DEVICE_MEMORY_FRACTION * 8e9
    small = agt._chunks(5000, 5000, 45, factor=2, device="cpu")
    big = agt._chunks(5000, 5000, 45, factor=2, device=torch.device("cuda", 0))
    assert 1 <= small <= big <= 5000
    assert small == int(agt.CPU_BUDGET_BYTES // (5000 * 45 * 8 * 2))
    assert big == int(agt.DEVICE_MEMORY_FRACTION * 8e9 // (5000 * 45 * 8 * 2))


def _cli(*args, tmp):
    return subprocess.run([sys.executable, "-m", "certdp.cli", *args, f"out_root={tmp}", "progress=false"],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_results_rows_record_the_resolved_device(tmp_path):
    r = _cli("agtr", "dataset=linear", "dataset.n_train=200", "dataset.n_test=20", "train.steps=2", "staircase.k_max=3",
             "privacy.n_draws=3", "device=cpu", tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    run = next((tmp_path / "agtr" / "linear").iterdir())
    for name in ("results.csv", "certificate.csv"):
        df = pd.read_csv(run / name)
        assert set(df["device"]) == {"cpu"}


@pytest.mark.slow
@pytest.mark.skipif(CUDA, reason="this machine has CUDA: the refusal is for machines without it")
def test_a_cuda_request_without_cuda_is_one_line(tmp_path):
    r = _cli("agtr", "dataset=linear", "device=cuda", tmp=tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == ["certdp: error: device: cuda: torch sees no CUDA device on this machine; "
                                             "allowed: auto, cpu"]
    assert not (tmp_path / "agtr").exists()


def test_cpu_only_commands_refuse_an_explicit_gpu_request():
    from certdp.settings.base import RunOptions
    run = RunOptions(command="hybrid", seed=0, default_certificate="ibp", progress=False, out_root="o", run="r",
                     overwrite=False, device="cpu", device_request="cuda:0")
    with pytest.raises(ConfigError, match="CPU only"):
        run.require_cpu("certdp hybrid")
    RunOptions(command="hybrid", seed=0, default_certificate="ibp", progress=False, out_root="o", run="r",
               overwrite=False).require_cpu("certdp hybrid")                 # auto: fine


@pytest.mark.skipif(not CUDA, reason=NO_CUDA)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_gpu_envelopes_equal_the_cpu_ones(case):
    """float64 on both devices: the envelopes agree to 1e-9 relative (different kernels sum in
    different orders, so not bit for bit)."""
    _, m, x, y, s, ks, make = case
    th = m.init(0)
    cpu = run_agt(m, th, x, y, s, ks, certificate=make(), progress=False, device="cpu")
    gpu = run_agt(m, th, x, y, s, ks, certificate=make(), progress=False, device="cuda")
    assert gpu.lo.device.type == "cuda"
    for f in ("lo", "hi", "nominal"):
        a, b = getattr(cpu, f), getattr(gpu, f).cpu()
        rel = ((a - b).abs() / a.abs().clamp(min=1e-300)).max()
        assert float(rel) <= 1e-9, (f, float(rel))


def _compose(command, overrides):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from certdp import results
    from certdp.settings import config_dir
    results.register_resolvers()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
            return OmegaConf.to_container(compose(config_name=command, overrides=overrides), resolve=True)
    finally:
        GlobalHydra.instance().clear()


@pytest.mark.slow
@pytest.mark.parametrize("dataset,k_gpu,cpu_profile", [("mnist5", 4096, (1024, "ibp", 40))])   # imdb: tests/test_data_text.py
def test_the_proven_paper_radii_are_the_gpu_default(dataset, k_gpu, cpu_profile):
    """device=cuda composes the paper's radii and steps, every radius its own box (IBP tau, no
    sharing, proven); device=cpu the CPU profile (mnist5: IBP tau, k = 1..1024 in 40 steps, the
    frontier's best point within 30 minutes, docs/frontier.md); auto follows the machine."""
    gpu = _compose("ags", [f"dataset={dataset}", "device=cuda"])
    cpu = _compose("ags", [f"dataset={dataset}", "device=cpu"])
    auto = _compose("ags", [f"dataset={dataset}"])
    assert (gpu["staircase"]["k_max"], gpu["certificate"]["name"], gpu["ags"]["share_ratio"]) == (k_gpu, "ibp", None)
    assert gpu["certificate"]["aggregation"] == "tau" and gpu["privacy"]["smoothness"] == "proven"
    assert gpu["train"]["steps"] == 1000
    assert (cpu["staircase"]["k_max"], cpu["certificate"]["name"], cpu["train"]["steps"]) == cpu_profile
    assert cpu["privacy"]["smoothness"] == "proven" and cpu["ags"]["share_ratio"] is None
    assert (auto["staircase"]["k_max"], auto["train"]["steps"]) == ((k_gpu, 1000) if CUDA else cpu_profile[::2])
    explicit = _compose("ags", [f"dataset={dataset}", "device=cpu", "staircase.k_max=64"])
    assert explicit["staircase"]["k_max"] == 64                             # an explicit value wins


@pytest.mark.slow
def test_the_paper_profile_runs_on_request_on_a_cpu(tmp_path):
    """The proven profile asked for on a CPU (certificate=ibp, the paper's k_max), tiny: it runs,
    every radius up to N is computed with its own box, and the rows say proven, end to end."""
    fx = Path(__file__).parent / "fixtures" / "mnist_tiny.pkl.gz"
    r = _cli("ags", "dataset=mnist5", f"dataset.path={fx}", "dataset.n_public=10", "dataset.public_split=[5,5]",
             "device=cpu", "certificate=ibp", "staircase.k_max=4096", "train.steps=3", "privacy.epsilons=[10]",
             "privacy.n_draws=3", "ags.baselines=[]", tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    res = pd.read_csv(next((tmp_path / "ags" / "mnist5").iterdir()) / "results.csv")
    assert set(res["certificate"]) == {"ibp"} and set(res["device"]) == {"cpu"}
    assert bool(res["smoothness_proof"].all() and res["dp_end_to_end"].all())
    assert set(res["k_max"]) == {int(res["n_train"].iloc[0])}              # radii 1..N: no radius dropped
    assert set(res["n_radii"]) == {int(res["n_train"].iloc[0])}


def test_a_long_pass_prints_its_estimate_after_the_first_step(caplog, monkeypatch):
    monkeypatch.setattr(agt.Calibration, "min_seconds", 0.0)
    m = ModelSpec((3, 1), "mse")
    x = torch.randn(30, 3, dtype=D)
    with caplog.at_level("INFO", logger="certdp"):
        run_agt(m, m.init(0), x, x[:, 0], TrainSettings(steps=4, lr=0.1, clip=0.1), [1, 2], progress=False)
    msgs = [r.getMessage() for r in caplog.records if "estimate" in r.getMessage()]
    assert len(msgs) == 1 and "2 radii x 4 steps on cpu" in msgs[0]
    monkeypatch.setattr(agt.Calibration, "min_seconds", 1e9)                # short passes stay quiet
    caplog.clear()
    with caplog.at_level("INFO", logger="certdp"):
        run_agt(m, m.init(0), x, x[:, 0], TrainSettings(steps=4, lr=0.1, clip=0.1), [1, 2], progress=False)
    assert not [r for r in caplog.records if "estimate" in r.getMessage()]


def test_on_device_resolver():
    from certdp.results import on_device
    assert on_device("cuda:1", "a", "b") == "a" and on_device("cpu", "a", "b") == "b"
    assert on_device("auto", "a", "b") == ("a" if CUDA else "b")
