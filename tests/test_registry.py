"""The one registry helper (certdp/registry.py) refuses a second entry under a held name, in every
registry that uses it; the one accountant interface serves the AGS budgets and the DP-SGD
calibration from one registry."""

from __future__ import annotations

import pytest
import torch

from certdp import losses
from certdp.bounds import CERTIFICATES, register
from certdp.bounds.ibp import IBP
from certdp.data import REGISTRY as DATASETS, entries
from certdp.data import register as register_dataset
from certdp.plots import PLOTS
from certdp.privacy import accounting, mechanisms
from certdp.privacy.dpsgd_core import DPSGD_ACCOUNTANTS, accounted_epsilon
from certdp.registry import Registry


def test_a_duplicate_name_is_refused_and_the_first_entry_kept():
    reg = Registry("thing")
    first, second = object(), object()
    reg["a"] = first
    reg.add("a", first)                        # the same object again: harmless
    for put in (lambda: reg.__setitem__("a", second), lambda: reg.add("a", second),
                lambda: reg.update({"a": second}), lambda: reg.__ior__({"a": second})):
        with pytest.raises(ValueError, match="duplicate thing name 'a'"):
            put()
    assert reg["a"] is first and list(reg) == ["a"]
    with pytest.raises(ValueError, match="non-empty name"):
        reg[""] = second
    # the planted bug: a plain dict (what the registries were) replaces the entry without a word
    plain = {"a": first}
    plain["a"] = second
    assert plain["a"] is second
    reg.pop("a")                               # removal stays possible (a test's temporary entry)
    reg["a"] = second
    assert reg["a"] is second


def test_every_registry_refuses_a_duplicate():
    class OtherIBP(IBP):
        pass
    with pytest.raises(ValueError, match="duplicate certificate name 'ibp'"):
        register(OtherIBP)
    assert CERTIFICATES["ibp"] is IBP
    register(IBP)                              # re-registering the same class is allowed

    held = mechanisms.REGISTRY["cauchy"]
    with pytest.raises(ValueError, match="duplicate mechanism name 'cauchy'"):
        type("Impostor", (held,), {"name": "cauchy", "__doc__": "An impostor."})
    assert mechanisms.REGISTRY["cauchy"] is held

    with pytest.raises(ValueError, match="duplicate accountant name 'basic'"):
        type("Impostor", (accounting.Accountant,), {"name": "basic",
                                                    "per_release": lambda self, **kw: (0.0, 0.0)})
    assert accounting.ACCOUNTANTS["basic"] is accounting.Basic

    entries()                                  # loads the dataset modules
    held = DATASETS["linear"]
    with pytest.raises(ValueError, match="duplicate dataset name 'linear'"):
        register_dataset("linear", task="regression", summary="an impostor")(lambda cfg, seed: None)
    assert DATASETS["linear"] is held

    for reg, name in ((losses.LOSSES, "mse"), (PLOTS, "cond_table")):
        with pytest.raises(ValueError, match=f"duplicate .* name '{name}'"):
            reg[name] = object()


def test_one_accountant_interface_for_budgets_and_dpsgd():
    assert accounting.accountant_names("compose") == ("basic", "advanced", "optimal", "pld")
    assert accounting.accountant_names("dpsgd") == DPSGD_ACCOUNTANTS == ("pld", "prv", "rdp")
    pld = accounting.get_accountant("pld", use="compose")
    assert pld.uses == ("compose", "dpsgd")
    assert accounting.get_accountant("pld", use="dpsgd").__class__ is pld.__class__
    with pytest.raises(ValueError, match="unknown DP-SGD accountant 'basic'; allowed: pld, prv, rdp"):
        accounting.get_accountant("basic", use="dpsgd")
    with pytest.raises(ValueError, match="unknown accountant 'rdp'; allowed: basic, advanced, optimal, pld"):
        accounting.per_release_budget("rdp", epsilon=1.0, delta=1e-5, n=2)
    # both questions of the one PLD accountant: its DP-SGD epsilon decreases in sigma, and its
    # calibrated sigma meets the target
    eps = [accounting.PLD().dpsgd_epsilon(sigma=s, delta=1e-5, sample_rate=0.1, steps=20) for s in (0.8, 1.6)]
    assert eps[0] > eps[1] > 0
    sigma = accounting.PLD().dpsgd_noise_multiplier(epsilon=2.0, delta=1e-5, sample_rate=0.1, steps=20)
    assert accounted_epsilon(sigma=sigma, delta=1e-5, sample_rate=0.1, steps=20, accountant="pld") <= 2.0


def test_a_new_accountant_is_one_class_and_answers_what_it_implements():
    class Conservative(accounting.Accountant):
        """sigma large enough for anything (a test accountant): a loose but valid DP-SGD bound."""
        name = "test_conservative"

        def dpsgd_epsilon(self, *, sigma, delta, sample_rate, steps):
            return accounting.PLD().dpsgd_epsilon(sigma=sigma, delta=delta, sample_rate=sample_rate, steps=steps)

        def dpsgd_noise_multiplier(self, *, epsilon, delta, sample_rate, steps):
            return 2 * accounting.PLD().dpsgd_noise_multiplier(epsilon=epsilon, delta=delta,
                                                               sample_rate=sample_rate, steps=steps)
    try:
        assert Conservative.uses == ("dpsgd",)
        assert "test_conservative" in accounting.accountant_names("dpsgd")
        assert "test_conservative" not in accounting.accountant_names("compose")
        e = accounted_epsilon(sigma=3.0, delta=1e-5, sample_rate=0.1, steps=5, accountant="test_conservative")
        assert torch.isfinite(torch.tensor(e))
    finally:
        accounting.ACCOUNTANTS.pop("test_conservative")
