"""The shared-candidate aggregation (certdp.bounds.aggregate) computes the same sums, bit for bit,
as the direct forms it replaces: :func:`top_values` against ``torch.topk`` on values built to
stress it (ties at the clip, nested boxes, many radii, NaN), a planted bug (a dropped candidate)
that the comparison catches, and :func:`top_sum`'s transform against selecting the shifted values.

The blocked IBP sums are pinned in test_ibp.py, CROWN's coupled MSE step in test_crown.py;
soundness and nesting of the engines in test_soundness.py and test_smoothness.py."""

from __future__ import annotations

import pytest
import torch

from certdp.bounds import aggregate
from certdp.bounds.aggregate import top_sum, top_values

D = torch.float64


def _nested_rows(M, C, n, *, seed, clip=None, spread=1e-3):
    """[M, C, n] values of M nested boxes: a common base plus offsets that grow with the box."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(C, n, generator=g, dtype=D)
    off = torch.rand(M, C, n, generator=g, dtype=D) * spread * torch.arange(1, M + 1, dtype=D).view(-1, 1, 1)
    v = base - off
    return v.clamp(-clip, clip) if clip is not None else v


@pytest.mark.parametrize("M,C,n,k,clip", [(6, 3, 2000, 64, None), (12, 2, 4000, 200, 0.5), (3, 8, 1000, 100, 0.05),
                                         (40, 1, 3000, 300, None)])
def test_shared_candidates_select_the_same_sorted_values(M, C, n, k, clip):
    v = _nested_rows(M, C, n, seed=M + n, clip=clip)
    for largest in (True, False):
        ref = torch.topk(v, k, dim=-1, largest=largest, sorted=True).values
        got = top_values(v, k, largest=largest)
        assert got.numpy().tobytes() == ref.numpy().tobytes()


def test_shared_candidates_on_a_middle_axis_and_with_nan():
    v = _nested_rows(5, 4, 2000, seed=3).movedim(-1, 1).contiguous()          # samples on axis 1
    ref = torch.topk(v, 80, dim=1, sorted=True).values
    assert torch.equal(top_values(v, 80, largest=True, dim=1), ref)
    w = _nested_rows(5, 2, 2000, seed=4)
    w[2, 1, 17] = float("nan")                                               # order undefined: the plain top-k
    assert aggregate._candidate_index(w, 80, True) is None
    same = top_values(w, 80, largest=True).numpy().tobytes() == torch.topk(w, 80, dim=-1, sorted=True).values.numpy().tobytes()
    assert same                                                              # NaN != NaN: compare the bytes


def test_a_dropped_candidate_is_caught(monkeypatch):
    """Planted bug: the candidate set loses its best sample; the bitwise comparison fails."""
    v = _nested_rows(6, 2, 3000, seed=5)
    ref = torch.topk(v, 100, dim=-1, sorted=True).values
    real = aggregate._candidate_index

    def lossy(w, kmax, largest, bounds=None):
        idx = real(w, kmax, largest, bounds)
        best = torch.topk(w.amin(0), 1, dim=-1).indices                    # a sample of the true top set
        return torch.where(idx == best, -1, idx)
    monkeypatch.setattr(aggregate, "_candidate_index", lossy)
    assert not torch.equal(top_values(v, 100, largest=True), ref)


def test_top_sum_transform_equals_selecting_the_shifted_values():
    v = _nested_rows(8, 3, 1500, seed=6, clip=1.0)
    subs = torch.arange(60, 68)
    a = top_sum(v, subs, largest=True, transform=lambda t: t + 1.0)
    b = top_sum(v + 1.0, subs, largest=True)
    c = top_sum(v, subs, largest=False, transform=lambda t: 1.0 - t)
    d = top_sum(1.0 - v, subs, largest=True)
    assert torch.equal(a, b) and torch.equal(c, d)
