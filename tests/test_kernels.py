"""The elementary functions the bounds rest on (certdp/kernels.py): settled before any certified
computation, checked over all threads against Python's math, and a wrong one refused -- shown
with planted kernels: one thread's chunk off by 3e-9 relative (what MKL's first parallel exp
returned under contention), wrong on the first call only (retried), wrong on every call."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from certdp import kernels
from certdp.errors import ConfigError


def _chunk_off(fn, rel=3.3e-9):
    """``fn`` with its first half (one of two threads' chunks) off by ``rel`` relative."""
    def wrong(x):
        out = fn(x).clone()
        h = out.numel() // 2
        out.view(-1)[:h] *= 1 + rel
        return out
    return wrong


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(kernels, "_verified", False)
    return monkeypatch


def test_every_function_is_within_the_accepted_ulps_on_all_threads():
    for name in kernels.FUNCTIONS:
        assert kernels.worst_ulps(name) <= kernels.MAX_ULPS, name
    kernels.verify()


@pytest.mark.parametrize("name", sorted(kernels.FUNCTIONS))
def test_a_kernel_off_on_one_threads_chunk_is_measured(name):
    fn = kernels.FUNCTIONS[name][0]
    assert kernels.worst_ulps(name, _chunk_off(fn)) > 1e5


def test_a_kernel_wrong_on_every_call_refuses_the_run(fresh):
    fn, ref, ranges = kernels.FUNCTIONS["exp"]
    fresh.setitem(kernels.FUNCTIONS, "exp", (_chunk_off(fn), ref, ranges))
    with pytest.raises(ConfigError) as e:
        kernels.verify()
    assert e.value.key == "device" and "exp" in str(e.value) and "ulps" in str(e.value)
    assert not kernels._verified


def test_a_kernel_wrong_on_its_first_call_only_is_retried(fresh):
    fn, ref, ranges = kernels.FUNCTIONS["log1p"]
    calls = []

    def first_wrong(x):
        calls.append(1)
        return _chunk_off(fn)(x) if len(calls) == 1 else fn(x)

    fresh.setitem(kernels.FUNCTIONS, "log1p", (first_wrong, ref, ranges))
    kernels.verify()
    assert kernels._verified and len(calls) == 2


def test_an_exp_off_by_4_ulps_everywhere_is_refused(fresh):
    """MAX_ULPS is a real threshold: an exp off by 4 ulps everywhere is refused."""
    fn, ref, ranges = kernels.FUNCTIONS["exp"]
    fresh.setitem(kernels.FUNCTIONS, "exp", (lambda x: fn(x) * (1 + 4 * 2.0 ** -52), ref, ranges))
    with pytest.raises(ConfigError):
        kernels.verify()


def test_importing_the_losses_settles_and_agt_verifies_before_its_first_step(monkeypatch):
    out = subprocess.run([sys.executable, "-c", "import certdp.kernels as k; a = k._settled; import certdp.losses; "
                          "print(a, k._settled)"], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
    from certdp.agt import run_agt
    from certdp.models import ModelSpec
    from certdp.training import TrainSettings

    def refuse():
        raise ConfigError("device", "planted")

    monkeypatch.setattr(kernels, "verify", refuse)
    m = ModelSpec((2, 1), "mse")
    x, y = torch.zeros(4, 2, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)
    with pytest.raises(ConfigError, match="planted"):
        run_agt(m, m.init(0), (x, y), TrainSettings(steps=1, lr=0.1, clip=1.0), [1])
