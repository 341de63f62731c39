"""The per-batch box loop of AGT for both protocols: a step engine's ``step_bounds`` one step at a
time, a window engine's ``window_bounds`` F steps at a time (the window protocol of
:mod:`certdp.bounds.base`); what AGT adds around either is in :mod:`certdp.agt`."""

from __future__ import annotations

import torch

from certdp.agt.state import LoopState, Pass, even_chunks, intersect_down, resume
from certdp.bounds.base import Window
from certdp.bounds.interval import Interval, outward
from certdp.training import clipped_step


def _one_step(ps: Pass, lo: torch.Tensor, hi: torch.Tensor, batch, ks: torch.Tensor):
    """Boxes after one step for the rows given (radii ``ks``), one ``step_bounds`` call per chunk."""
    new_lo, new_hi = torch.empty_like(lo), torch.empty_like(hi)
    for a, z in even_chunks(lo.shape[0], ps.chunk):
        nb = ps.cert.step_bounds(ps.model, Interval(lo[a:z], hi[a:z]), batch, subs=ks[a:z], settings=ps.settings)
        new_lo[a:z], new_hi[a:z] = nb.lo, nb.hi
    return new_lo, new_hi


def box_loop(ps: Pass, state: LoopState, lp) -> LoopState:
    """The per-step (or per-window) box loop over ``ps.order``: ``state`` after the last block;
    ``lp`` (a :class:`certdp.checkpoint.Loop` or None) restores and saves it."""
    cert, settings = ps.cert, ps.settings
    window = cert.window_steps
    order = ps.order
    blocks = ([order[i:i + window] for i in range(0, len(order), window)] if window else [[t] for t in order])
    n_live = int((ps.rows < ps.limit).sum())
    q_live = ps.rows[:n_live]
    grade = ps.grade
    keys = ("lo", "hi")
    first = resume(state, lp, ps.clock, keys=keys, done_steps=lambda f: sum(len(blk) for blk in blocks[:f]))

    def saved():
        return state.saved(keys, with_s=False)

    it = ps.bar(blocks[first:], f"AGT[{cert.name}] |K|={len(ps.rows) - 1}")
    for i, block in enumerate(it, start=first):
        lo, hi = state.lo, state.hi
        if ps.trace is not None:
            ps.trace.append((lo[1:].clone(), hi[1:].clone()))
        new_theta = state.theta
        for t in block:
            batch = ps.batch(t)
            new_theta = clipped_step(ps.model, new_theta, *batch, settings)
            state.advance_cover(settings)
        if window:
            nb = cert.window_bounds(ps.model, Interval(lo[:n_live], hi[:n_live]),
                                    Window(ps.data, ps.plan, block, q_live, settings, magnitude=state.magnitude(),
                                           step_boxes=ps.step_boxes))
            new_lo, new_hi = nb.lo, nb.hi
        else:
            new_lo, new_hi = _one_step(ps, lo[:n_live], hi[:n_live], batch, q_live)
        nb = outward(Interval(new_lo, new_hi), rel=1e-12, abs_=1e-14)
        # graded widening: only an engine that nests needs it (module docstring of certdp.agt)
        slack = (cert.nesting_slack(ps.model, settings=settings, b=ps.b, k_max=int(q_live[-1]),
                                    magnitude=state.magnitude(), steps=len(block)) if cert.nesting_monotone else 0.0)
        wid = grade[:n_live] * slack
        c_lo, c_hi = state.c_lo, state.c_hi
        lo, hi = torch.empty_like(lo), torch.empty_like(hi)
        lo[:n_live], hi[:n_live] = torch.maximum(nb.lo - wid, c_lo), torch.minimum(nb.hi + wid, c_hi)
        lo[n_live:], hi[n_live:] = c_lo, c_hi
        state.lo, state.hi = intersect_down(lo, hi)        # T_k is valid for every radius below k as well
        state.theta = new_theta
        ps.check(cert, state.lo, state.hi, state.theta, step=block[-1])
        ps.clock.tick(len(block))
        if lp is not None:
            lp.tick(i + 1, saved)
    if lp is not None:
        lp.finish(saved)
    return state
