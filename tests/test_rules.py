"""One bound rule per loss (certdp/bounds/rules): every built-in loss has its rule, engines read
what they do differently for a loss from it (not from a branch on the loss), and a loss without
one gets the general rules."""

import dataclasses

import torch

from certdp.bounds import get_certificate
from certdp.bounds.base import LOSS_RULES, Batch, LossRule, loss_rule
from certdp.bounds.crown import ibp_step
from certdp.bounds.interval import Interval
from certdp.losses import LOSSES
from certdp.models import ModelSpec
from certdp.training import TrainSettings

D = torch.float64


def test_every_builtin_loss_has_its_rule_and_engines_support_what_the_rules_declare():
    assert set(LOSSES) <= set(LOSS_RULES)
    assert loss_rule("hinge").crown_joint is False and loss_rule("mse").crown_coupled is not None
    assert loss_rule("ce").milp_steps is None and loss_rule("unknown") == LossRule("unknown")
    milp, ctt = get_certificate("milp"), get_certificate("crowntt")
    for name in LOSSES:
        m = ModelSpec((2, 1) if name != "ce" else (2, 3), name)
        assert milp.supports(m) == (loss_rule(name).milp_steps is not None)
        assert ctt.supports(m) == (loss_rule(name).crowntt_neurons is not None)


def test_crown_reads_the_rule_of_the_loss():
    """A planted rule (ce's linear gradient bounds declared interval constants) turns CROWN's
    joint step into the IBP step: the engine dispatches on the rule."""
    g = torch.Generator().manual_seed(0)
    m = ModelSpec((3, 3), "ce")
    x = torch.randn(8, 3, generator=g, dtype=D)
    y = torch.randint(0, 3, (8,), generator=g)
    c = m.init(0)
    box = Interval((c - 0.05).unsqueeze(0), (c + 0.05).unsqueeze(0))
    st = TrainSettings(steps=1, lr=0.5, clip=1.0)
    subs = torch.tensor([1])
    crown = get_certificate("crown")
    ibp = ibp_step(m, box, x, y, subs=subs, settings=st)
    joint = crown.step_bounds(m, box, Batch(x, y), subs=subs, settings=st)
    assert bool((joint.hi - joint.lo < ibp.hi - ibp.lo - 1e-12).any())      # the relaxation is tighter
    held = LOSS_RULES.pop("ce")                     # the registry refuses a second rule under a name
    try:
        LOSS_RULES["ce"] = dataclasses.replace(held, crown_joint=False)
        planted = crown.step_bounds(m, box, Batch(x, y), subs=subs, settings=st)
    finally:
        LOSS_RULES.pop("ce")
        LOSS_RULES["ce"] = held
    assert torch.equal(planted.lo, ibp.lo) and torch.equal(planted.hi, ibp.hi)
