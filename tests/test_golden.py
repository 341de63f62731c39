"""Golden files for IBP envelopes and the staircase (tests/golden/, as the CROWN and MILP ones):
small fixed cases whose bounds are stored and compared, so that a refactor can neither loosen
nor tighten them unnoticed.  A missing file FAILS (the ``check_golden`` fixture never writes one
silently).  Regenerate after an intended change, then review the diff:

    CERTDP_REGEN_GOLDEN=1 python -m pytest -q tests/test_golden.py

``ibp_*``: AGT's IBP envelopes T_k (lo, hi [K, P]) of a whole run.  ``staircase_*``: the file's
"lo" holds the staircase values a_bar (prediction: [n_test, C]; parameter: [C]) and its "hi" the
smooth sensitivity SS^beta at the betas below -- together the whole released scale.
"""

from __future__ import annotations

import pytest
import torch

from certdp.agt import AGTOptions, run_agt
from certdp.bounds import get_certificate
from certdp.bounds.interval import output_bounds
from certdp.certify import parameter_staircase, trivial_cover
from certdp.models import ModelSpec
from certdp.privacy.sensitivity import staircase
from certdp.training import TrainSettings, batch_plan
from neighbourhoods import toy_data

D = torch.float64
BETAS = torch.tensor([0.0, 0.05, 0.5], dtype=D)
# (widths, loss, batch size, steps, lr, clip, contraction): full batch and the per-epoch ledger
CASES = [((3, 4, 1), "mse", None, 5, 0.1, 0.5, 1.0),
         ((3, 1), "hinge", 4, 8, 0.2, 0.3, 1.0),
         ((3, 3), "ce", 4, 6, 0.3, 0.2, 0.8)]
KS = [1, 2, 4, 16]
N = 16


def _case(widths, loss, b, steps, lr, clip, lam):
    gen = torch.Generator().manual_seed(5)
    x, y = toy_data(loss, N, widths[0], gen)
    m = ModelSpec(widths, loss)
    s = TrainSettings(steps=steps, lr=lr, clip=clip, batch_size=b, contraction=lam, seed=1)
    env = run_agt(m, m.init(3), (x, y), s, KS,
                  AGTOptions(certificate=get_certificate("ibp"), plan=batch_plan(N, s), progress=False))
    return m, s, env, torch.rand(6, widths[0], generator=gen, dtype=D) * 2 - 1


def _tag(widths, loss):
    return f"{loss}_{'x'.join(map(str, widths))}"


@pytest.mark.parametrize("case", CASES, ids=[_tag(c[0], c[1]) for c in CASES])
def test_golden_ibp_envelopes(case, check_golden):
    _, _, env, _ = _case(*case)
    assert bool(env.contains(env.nominal.unsqueeze(0)).all())
    check_golden(f"ibp_envelopes_{_tag(case[0], case[1])}.json", env.lo, env.hi, atol=1e-9)


@pytest.mark.parametrize("case", CASES[:1], ids=[_tag(CASES[0][0], CASES[0][1])])
def test_golden_prediction_staircase(case, check_golden):
    """AGT-R's staircase of an (unclipped) prediction per test point, radii reaching N."""
    m, _, env, xt = _case(*case)
    out = output_bounds(m, env.box, xt)                      # [K, n_test, 1]
    sc = staircase(out.lo, out.hi, m.forward(env.nominal, xt), env.k_values, n_total=N, global_sensitivity=None)
    assert sc.k.tolist() == [0] + KS and sc.source[-1] == "ceiling"
    check_golden(f"staircase_prediction_{_tag(case[0], case[1])}.json", sc.a_bar, sc.smooth(BETAS), atol=1e-9)


@pytest.mark.parametrize("case", CASES[1:2], ids=[_tag(CASES[1][0], CASES[1][1])])
def test_golden_parameter_staircase(case, check_golden):
    """AGS's staircase of the parameter vector (l1), capped by the trivial cover."""
    _, s, env, _ = _case(*case)
    sc = parameter_staircase(env, n_total=N, cover=trivial_cover(s, env.nominal.numel(), (0, s.steps)))
    check_golden(f"staircase_parameter_{_tag(case[0], case[1])}.json", sc.a_bar, sc.smooth(BETAS), atol=1e-9)


def test_a_changed_bound_fails_its_golden(check_golden, monkeypatch):
    """The planted bug: envelopes widened by 1e-6 (a looser bound) no longer match their file
    (never in regeneration mode: the widened bound must not be written)."""
    monkeypatch.delenv("CERTDP_REGEN_GOLDEN", raising=False)
    _, _, env, _ = _case(*CASES[0])
    with pytest.raises(AssertionError):
        check_golden(f"ibp_envelopes_{_tag(CASES[0][0], CASES[0][1])}.json", env.lo - 1e-6, env.hi, atol=1e-9)
