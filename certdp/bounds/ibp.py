"""Interval bound propagation (IBP) through the forward *and* backward pass (``certificate=ibp``).

Given boxes of parameters ``Theta = [theta_L, theta_U]`` ([M, P]) and an exact batch ``(x, y)``,
:func:`gradient_bounds` returns intervals [M, P, n] that contain
``clip(grad_theta l(f_theta(x_i), y_i), -gamma, gamma)`` for every ``theta`` in each box.

Forward: :func:`certdp.bounds.interval.forward_bounds` (exact first-layer inputs, sign-split
products with the non-negative post-ReLU activations).  Backward: the output gradient of the loss
is bounded from the output interval (the loss object's ``grad_bounds``); it is pushed through the
transposed weights with midpoint-radius products and through the ReLU derivative (1 if the
pre-activation is surely > 0, 0 if surely <= 0, [0, 1] otherwise).  The weight gradient is an
outer product of a delta interval with the (exact or >= 0) layer input.
"""

from __future__ import annotations

import logging
import os

import torch

from certdp.bounds.aggregate import MODES, TAU_FRACTIONS, _rows, batch_sum_from_stats, tau_sums, top_sum
from certdp.bounds.base import Certificate
from certdp.bounds.interval import Interval, forward_bounds, matmul_interval
from certdp.errors import ConfigError
from certdp.models import ModelSpec

log = logging.getLogger("certdp")


def loss_grad_bounds(model: ModelSpec, out: Interval, y: torch.Tensor) -> Interval:
    """Interval of d loss / d output given the output interval (the loss object's bound)."""
    return Interval(*model.loss.grad_bounds(out.lo, out.hi, y))


def backprop_relu(delta: Interval, w: Interval, z: Interval) -> Interval:
    """Delta of the previous layer: (delta @ W) times the ReLU derivative s in [s_lo, s_hi]
    (1 if the pre-activation z is surely > 0, 0 if surely <= 0, else [0, 1]); written as
    arithmetic because torch.where is slow on CPU here."""
    back = matmul_interval(delta, w)
    s_lo = (z.lo > 0).to(back.lo.dtype)
    s_un = (z.hi > 0).to(back.lo.dtype) - s_lo
    return Interval(s_lo * back.lo + s_un * back.lo.clamp(max=0),
                    s_lo * back.hi + s_un * back.hi.clamp(min=0))


def _layer_deltas(model: ModelSpec, theta: Interval, x: torch.Tensor, y: torch.Tensor):
    """The interval backward pass, layer by layer from the last: yields ``(l, dlo, dhi, a1, a2,
    exact)`` with the bounds [K, o, 1, n] of the layer's output delta and its input, either exact
    (``exact``: (x+, x-) as [i, n] each) or post-ReLU (>= 0: its bounds [K, 1, i, n])."""
    fwd, acts, pres = forward_bounds(model, theta, x)
    delta = loss_grad_bounds(model, fwd, y)
    lo_layers, hi_layers = model.unflatten(theta.lo), model.unflatten(theta.hi)
    xt = x.transpose(0, 1).contiguous()
    xp, xn = xt.clamp(min=0), xt.clamp(max=0)
    for l in range(model.n_layers - 1, -1, -1):
        dlo = delta.lo.transpose(-1, -2).contiguous().unsqueeze(-2)     # [K, o, 1, n]
        dhi = delta.hi.transpose(-1, -2).contiguous().unsqueeze(-2)
        if l == 0:
            yield l, dlo, dhi, xp, xn, True
        else:
            alo = acts[l].lo.transpose(-1, -2).contiguous().unsqueeze(-3)  # [K, 1, i, n], >= 0
            ahi = acts[l].hi.transpose(-1, -2).contiguous().unsqueeze(-3)
            yield l, dlo, dhi, alo, ahi, False
        if l > 0:
            delta = backprop_relu(delta, Interval(lo_layers[l][0], hi_layers[l][0]), pres[l - 1])


def _weight_block(dlo, dhi, a1, a2, exact: bool, vlo: torch.Tensor, vhi: torch.Tensor) -> None:
    """Unclipped weight-gradient bounds of one layer (or of some of its output units) into
    ``vlo``, ``vhi`` [K, o, i, n]: delta times the layer input, element by element."""
    if exact:
        # exact input: d*x is smallest at d_lo where x >= 0 and at d_hi where x < 0
        torch.mul(dlo, a1, out=vlo); vlo.addcmul_(dhi, a2)
        torch.mul(dhi, a1, out=vhi); vhi.addcmul_(dlo, a2)
    else:
        torch.mul(dlo.clamp(min=0), a1, out=vlo); vlo.addcmul_(dlo.clamp(max=0), a2)
        torch.mul(dhi.clamp(min=0), a2, out=vhi); vhi.addcmul_(dhi.clamp(max=0), a1)


def gradient_bounds(model: ModelSpec, theta: Interval, x: torch.Tensor, y: torch.Tensor, *,
                    clip: float, out: tuple[torch.Tensor, torch.Tensor] | None = None) -> Interval:
    """Clipped per-sample gradient intervals [K, P, n] (samples last) over the boxes [K, P].

    Samples are the last axis so that the batch aggregation (sums and top-k over samples)
    runs over contiguous memory.  The result is written into ``out`` (two [K, P, n] tensors the
    caller owns) when given, else into fresh tensors."""
    K, n, P = theta.lo.shape[0], x.shape[0], model.n_params
    if out is None:
        lo_buf = torch.empty(K, P, n, dtype=theta.lo.dtype, device=theta.lo.device)
        hi_buf = torch.empty(K, P, n, dtype=theta.lo.dtype, device=theta.lo.device)
    else:
        lo_buf, hi_buf = out
    for l, dlo, dhi, a1, a2, exact in _layer_deltas(model, theta, x, y):
        sw, sb, (o, i) = model.slices()[l]
        _weight_block(dlo, dhi, a1, a2, exact, lo_buf[:, sw].view(K, o, i, n), hi_buf[:, sw].view(K, o, i, n))
        lo_buf[:, sb] = dlo.squeeze(-2)
        hi_buf[:, sb] = dhi.squeeze(-2)
    # NaN-safe clip: a NaN end (0 * inf, inf - inf: only where a pass overflowed) becomes the
    # trivial bound -gamma / +gamma, which holds for every clipped gradient
    torch.nan_to_num_(lo_buf, nan=-clip).clamp_(-clip, clip)
    torch.nan_to_num_(hi_buf, nan=clip).clamp_(-clip, clip)
    return Interval(lo_buf, hi_buf)


# Elements (boxes x coordinates x samples) of one block of per-sample bounds that
# :func:`gradient_topk_sums` forms at a time on the CPU (64 MB): no [K, P, n] tensor, and blocks
# large enough that a loaded machine's thread barriers (two per torch operation) do not dominate;
# 2^20 (cache-sized) was faster on an idle core and 1.5-2x slower at load 2.  A CUDA device takes
# whole layers.
BLOCK_ELEMENTS = 2 ** 23


def gradient_topk_sums(model: ModelSpec, theta: Interval, x: torch.Tensor, y: torch.Tensor, *,
                       subs: torch.Tensor, src: torch.Tensor | None = None, clip: float) -> Interval:
    """``aggregate.batch_sum(gradient_bounds(...), subs, src, clip, mode="topk")`` without the
    [K, P, n] per-sample intervals: the same per-sample values (the same element-wise
    operations), clipped, summed and top-k-reduced block by block of output units, each block
    small enough to stay in cache.  Every row sum runs over the whole sample axis of a block of
    at least two rows and the top-k sums read the same sorted values
    (:func:`certdp.bounds.aggregate.top_values`), so the result is bit-identical to the
    materialised form on the CPU."""
    K, n, P = theta.lo.shape[0], x.shape[0], model.n_params
    dev, dt = theta.lo.device, theta.lo.dtype
    kk = subs.to(dev).clamp(max=n)
    Q = len(kk)
    lo_out = torch.empty(Q, P, dtype=dt, device=dev)
    hi_out = torch.empty(Q, P, dtype=dt, device=dev)
    kg = (kk.to(dt) * clip).unsqueeze(-1)
    budget = BLOCK_ELEMENTS if dev.type == "cpu" else 1 << 62
    for l, dlo, dhi, a1, a2, exact in _layer_deltas(model, theta, x, y):
        sw, sb, (o, i) = model.slices()[l]
        h = max(1, min(o, budget // max(K * (i + 1) * n, 1)))
        # one pair of buffers per layer, reused by its blocks (fresh large allocations cost more
        # than the arithmetic on them)
        buf_lo = torch.empty(K * (h * i + h) * n, dtype=dt, device=dev)
        buf_hi = torch.empty_like(buf_lo)
        for u0 in range(0, o, h):
            u1 = min(o, u0 + h)
            m = u1 - u0
            # rows: the m x i weights of units u0..u1, then their m biases (at least two rows, so
            # that every row is summed as in the [K, P, n] form)
            r = m * i + m
            blo = buf_lo[:K * r * n].view(K, r, n)
            bhi = buf_hi[:K * r * n].view(K, r, n)
            _weight_block(dlo[:, u0:u1], dhi[:, u0:u1], a1, a2, exact,
                          blo[:, :m * i].view(K, m, i, n), bhi[:, :m * i].view(K, m, i, n))
            blo[:, m * i:] = dlo[:, u0:u1].squeeze(-2)
            bhi[:, m * i:] = dhi[:, u0:u1].squeeze(-2)
            torch.nan_to_num_(blo, nan=-clip).clamp_(-clip, clip)     # NaN-safe clip (gradient_bounds)
            torch.nan_to_num_(bhi, nan=clip).clamp_(-clip, clip)
            lo = _rows(blo.sum(-1), src) - top_sum(blo, kk, src, largest=True) - kg     # top-k lower bounds leave
            hi = _rows(bhi.sum(-1), src) - top_sum(bhi, kk, src, largest=False) + kg    # bottom-k upper bounds leave
            w0, b0 = sw.start + u0 * i, sb.start + u0
            lo_out[:, w0:w0 + m * i], lo_out[:, b0:b0 + m] = lo[:, :m * i], lo[:, m * i:]
            hi_out[:, w0:w0 + m * i], hi_out[:, b0:b0 + m] = hi[:, :m * i], hi[:, m * i:]
    return Interval(lo_out, hi_out)


def _block_stats(dlo, dhi, alo, ahi, clip: float, exact: bool):
    """Clipped weight-gradient bounds of one layer, reduced over samples without keeping them:
    the tau sums of :func:`certdp.bounds.aggregate.tau_sums` ([K, o, i, F] each).

    ``d*`` [K, o, 1, n] bound the layer's output delta; ``a*`` [.., 1, i, n] its input: for an
    exact input pass (x+, x-) as (alo, ahi); for a post-ReLU input (>= 0) its bounds."""
    if exact:
        lo = dlo * alo + dhi * ahi
        hi = dhi * alo + dlo * ahi
    else:
        lo = dlo.clamp(min=0) * alo + dlo.clamp(max=0) * ahi
        hi = dhi.clamp(min=0) * ahi + dhi.clamp(max=0) * alo
    return tau_sums(torch.nan_to_num(lo, nan=-clip).clamp(-clip, clip),
                    torch.nan_to_num(hi, nan=clip).clamp(-clip, clip), clip=clip)


def gradient_sum_stats(model: ModelSpec, theta: Interval, x: torch.Tensor, y: torch.Tensor, *,
                       clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The tau sums over samples of the clipped per-sample gradient bounds, [K, P, F] each, what
    the ``tau`` aggregation reads (:func:`certdp.bounds.aggregate.batch_sum_from_stats`).

    Computed layer block by layer block with fused reductions: the same numbers as
    ``aggregate.tau_sums`` of :func:`gradient_bounds` up to summation order, without
    materialising the [K, P, n] per-sample intervals."""
    fwd, acts, pres = forward_bounds(model, theta, x)
    delta = loss_grad_bounds(model, fwd, y)
    lo_layers, hi_layers = model.unflatten(theta.lo), model.unflatten(theta.hi)
    K, P = theta.lo.shape[0], model.n_params
    F = len(TAU_FRACTIONS)
    stats = [torch.empty(K, P, F, dtype=theta.lo.dtype, device=theta.lo.device) for _ in range(2)]
    xt = x.transpose(0, 1).contiguous()
    xp, xn = xt.clamp(min=0), xt.clamp(max=0)
    for l in range(model.n_layers - 1, -1, -1):
        sw, sb, (o, i) = model.slices()[l]
        dlo = delta.lo.transpose(-1, -2).contiguous()            # [K, o, n]
        dhi = delta.hi.transpose(-1, -2).contiguous()
        if l == 0:
            r = _block_stats(dlo.unsqueeze(-2), dhi.unsqueeze(-2), xp, xn, clip, True)
        else:
            alo = acts[l].lo.transpose(-1, -2).contiguous().unsqueeze(-3)
            ahi = acts[l].hi.transpose(-1, -2).contiguous().unsqueeze(-3)
            r = _block_stats(dlo.unsqueeze(-2), dhi.unsqueeze(-2), alo, ahi, clip, False)
        rb = tau_sums(torch.nan_to_num(dlo, nan=-clip).clamp(-clip, clip),
                      torch.nan_to_num(dhi, nan=clip).clamp(-clip, clip), clip=clip)
        for j in range(2):
            stats[j][:, sw] = r[j].reshape(K, o * i, F)
            stats[j][:, sb] = rb[j]
        if l > 0:
            delta = backprop_relu(delta, Interval(lo_layers[l][0], hi_layers[l][0]), pres[l - 1])
    return tuple(stats)


def gradient_sum_stats_blocked(model: ModelSpec, theta: Interval, x: torch.Tensor, y: torch.Tensor, *,
                               clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`gradient_sum_stats`, bit for bit, computed block by block of output units (the same
    element-wise operations and per-row sums, on blocks that stay in cache): the eager form."""
    K, n, P = theta.lo.shape[0], x.shape[0], model.n_params
    dev, dt = theta.lo.device, theta.lo.dtype
    F = len(TAU_FRACTIONS)
    stats = [torch.empty(K, P, F, dtype=dt, device=dev) for _ in range(2)]
    budget = BLOCK_ELEMENTS if dev.type == "cpu" else 1 << 62
    for l, dlo, dhi, a1, a2, exact in _layer_deltas(model, theta, x, y):
        sw, sb, (o, i) = model.slices()[l]
        h = max(1, min(o, budget // max(K * max(i, 2) * n, 1)))   # >= 2 rows per block: see gradient_topk_sums
        for u0 in range(0, o, h):
            u1 = min(o, u0 + h)
            r = _block_stats(dlo[:, u0:u1], dhi[:, u0:u1], a1, a2, clip, exact)
            w0 = sw.start + u0 * i
            for j in range(2):
                stats[j][:, w0:w0 + (u1 - u0) * i] = r[j].reshape(K, (u1 - u0) * i, F)
        rb = tau_sums(torch.nan_to_num(dlo.squeeze(-2), nan=-clip).clamp(-clip, clip),
                      torch.nan_to_num(dhi.squeeze(-2), nan=clip).clamp(-clip, clip), clip=clip)
        for j in range(2):
            stats[j][:, sb] = rb[j]
    return tuple(stats)


# --------------------------------------------------------------------------------------------
# Single-layer heads (linear, logistic: the AGS and AGT-R heads), samples on the last axis.
#
# The tau sums of a head in two passes whose memory layout is fixed by their inputs and outputs
# (a compiled pass picks its own layout otherwise, and picked the class or unit axis, 5 wide,
# as the vectorised one): (1) :func:`head_deltas`, the interval forward pass and the loss's
# output-gradient bounds, [K, o, n] with the samples contiguous, per block of samples; (2)
# :func:`head_sums`, the weight- and bias-gradient bounds formed and reduced over the samples
# in one loop per (box, unit, input), n innermost.  The per-sample bounds are the same
# interval products as :func:`gradient_bounds` (an exact input: d_lo x+ + d_hi x-), clipped
# NaN-safely, and the forward pass is the same sign-split product summed over the inputs in a
# fixed order; only the summation order (over inputs and samples) differs from the other forms.


def head_deltas(loss, lo: torch.Tensor, hi: torch.Tensor, xp: torch.Tensor, xn: torch.Tensor,
                y: torch.Tensor, o: int, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Bounds [K, o, n] of d loss / d output of a single-layer head over the boxes ``lo, hi`` [K,
    o*i + o] (weights row-major, then biases) for exact inputs ``xp = x+``, ``xn = x-`` [i, n]:
    the output interval x+ W_L + x- W_U + b_L (and its mirror) summed over the inputs in order,
    then ``loss.grad_bounds`` (inclusion-monotone: (M1))."""
    K = lo.shape[0]
    wl, wh = lo[:, :o * i].reshape(K, o, i, 1), hi[:, :o * i].reshape(K, o, i, 1)
    zl = (wl * xp + wh * xn).sum(-2) + lo[:, o * i:].unsqueeze(-1)          # [K, o, n]
    zh = (wh * xp + wl * xn).sum(-2) + hi[:, o * i:].unsqueeze(-1)
    dl, dh = loss.grad_bounds(zl.transpose(-1, -2), zh.transpose(-1, -2), y)
    return dl.transpose(-1, -2).contiguous(), dh.transpose(-1, -2).contiguous()


def _clip_lo(t: torch.Tensor, c: float) -> torch.Tensor:
    # nan_to_num(t, nan=-c).clamp(-c, c), the same numbers (NaN and -inf fail t > -c), vectorisable
    return torch.where(t > -c, t, -c).clamp(max=c)


def _clip_hi(t: torch.Tensor, c: float) -> torch.Tensor:
    return torch.where(t < c, t, c).clamp(min=-c)


def _tau(lo: torch.Tensor, hi: torch.Tensor, c: float) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`certdp.bounds.aggregate.tau_sums` of bounds already clipped to [-c, c] (its first
    fraction, f = -1, clamps at +-c: the identity there)."""
    ls = [lo.sum(-1)] + [lo.clamp(max=-f * c).sum(-1) for f in TAU_FRACTIONS[1:]]
    hs = [hi.sum(-1)] + [hi.clamp(min=f * c).sum(-1) for f in TAU_FRACTIONS[1:]]
    return torch.stack(ls, -1), torch.stack(hs, -1)


def head_sums(dlo: torch.Tensor, dhi: torch.Tensor, xp: torch.Tensor, xn: torch.Tensor, clip: float):
    """The tau sums over the samples of the clipped weight-gradient bounds ([K, o, i, F] each: the
    exact-input product d_lo x+ + d_hi x- and its mirror) and bias-gradient bounds ([K, o, F])."""
    a, b = dlo.unsqueeze(-2), dhi.unsqueeze(-2)
    wl, wh = _tau(_clip_lo(a * xp + b * xn, clip), _clip_hi(b * xp + a * xn, clip), clip)
    bl, bh = _tau(_clip_lo(dlo, clip), _clip_hi(dhi, clip), clip)
    return wl, wh, bl, bh


# samples per block of head_deltas: its temporaries ([K, o, block] per class-wise operation)
# stay in cache; the reduction reads whole rows (a block-wise reduction measured no faster)
HEAD_SAMPLE_BLOCK = 4096
_HEAD: dict = {}


def _head_fns(compiled: bool):
    if not compiled:
        return head_deltas, head_sums
    if not _HEAD:
        # the forward runs on blocks of two sizes (full and the last): dynamic shapes, one graph;
        # the reduction sees one shape per run (a dynamic graph measured 2.5x slower there) and is
        # compiled static for each shape it meets (dynamic=False): with torch's automatic dynamic
        # shapes (dynamic=None) the graph recompiled after a process had seen other shapes (the
        # settings estimate's timings, a second run) returned boxes that excluded the nominal run
        # (mnist5, K = 65 then 129, torch 2.13 CPU; caught by agt.check_boxes, never released).
        # Past torch's recompile limit a new shape runs eagerly: slower, the same numbers.
        _HEAD["deltas"] = torch.compile(head_deltas, dynamic=True)
        _HEAD["sums"] = torch.compile(head_sums, dynamic=False)
    return _HEAD["deltas"], _HEAD["sums"]


def head_sum_stats(model: ModelSpec, theta: Interval, x: torch.Tensor, y: torch.Tensor, *, clip: float,
                   compiled: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`gradient_sum_stats` of a single-layer head ([K, P, F] each) by :func:`head_deltas`
    and :func:`head_sums` (``compiled``: through ``torch.compile``).  The eager form runs the same
    functions on blocks of samples and boxes small enough for its [K, o, i, n] temporaries."""
    (sw, sb, (o, i)), = model.slices()
    K, n, P = theta.lo.shape[0], x.shape[0], model.n_params
    F = len(TAU_FRACTIONS)
    deltas, sums = _head_fns(compiled)
    xt = x.transpose(0, 1).contiguous()
    xp, xn = xt.clamp(min=0), xt.clamp(max=0)
    nb = min(n, HEAD_SAMPLE_BLOCK)
    kb = K if compiled else max(1, min(K, BLOCK_ELEMENTS // 8 // max(o * (i + 1) * nb, 1)))
    ls = torch.empty(K, P, F, dtype=theta.lo.dtype, device=theta.lo.device)
    hs = torch.empty_like(ls)
    for k0 in range(0, K, kb):
        lo, hi = theta.lo[k0:k0 + kb], theta.hi[k0:k0 + kb]
        if compiled:
            parts = [deltas(model.loss, lo, hi, xp[:, s:s + nb], xn[:, s:s + nb], y[s:s + nb], o, i)
                     for s in range(0, n, nb)]
            dl = parts[0][0] if len(parts) == 1 else torch.cat([q[0] for q in parts], -1)
            dh = parts[0][1] if len(parts) == 1 else torch.cat([q[1] for q in parts], -1)
            tot = sums(dl, dh, xp, xn, clip)
        else:
            tot = None
            for s in range(0, n, nb):
                dl, dh = deltas(model.loss, lo, hi, xp[:, s:s + nb], xn[:, s:s + nb], y[s:s + nb], o, i)
                r = sums(dl, dh, xp[:, s:s + nb], xn[:, s:s + nb], clip)
                tot = r if tot is None else tuple(p + q for p, q in zip(tot, r))
        wl, wh, bl, bh = tot
        m = wl.shape[0]
        ls[k0:k0 + m, sw], hs[k0:k0 + m, sw] = wl.reshape(m, o * i, F), wh.reshape(m, o * i, F)
        ls[k0:k0 + m, sb], hs[k0:k0 + m, sb] = bl, bh
    return ls, hs


_COMPILED: dict = {}
_COMPILE = {"failed": False}
# K * n * P above which the fused (compiled) pass pays off; below the estimate's large calibration
# problem of a softmax head (certdp.estimate: 16,384 records x 9 boxes x 27 parameters = 4.0M), so
# that the rate it times for ``ibp-tau`` is the compiled pass's (an eager step there is 10x slower)
COMPILE_MIN_ELEMENTS = 2_000_000
# Smaller calls are compiled too once this process has spent COMPILE_AFTER_WORK elements of eager
# work on the same (model, clip): many calls of one shape (PATE shards of a few hundred records,
# 330 steps each) amortise the ~30 s compile just as well as a few big ones.  Calls below
# COMPILE_FLOOR stay eager (tiny problems: tests, linear heads).
COMPILE_AFTER_WORK = 1_000_000_000
COMPILE_FLOOR = 100_000
_EAGER_WORK: dict = {}


def _compiled_sum_stats(model: ModelSpec, clip: float):
    """``gradient_sum_stats`` through ``torch.compile``: inductor fuses the interval forward,
    backward and per-layer reductions into a few loops, so the [K, P, n] per-sample bounds are
    never materialised (measured >10x faster on the California MLP).  Compiled once per model
    and clip; the same arithmetic as the eager function."""
    key = (model, float(clip))
    fn = _COMPILED.get(key)
    if fn is None:
        def fused(lo, hi, x, y):
            return gradient_sum_stats(model, Interval(lo, hi), x, y, clip=clip)
        fn = _COMPILED[key] = torch.compile(fused, dynamic=False)     # static per shape: see _head_fns
    return fn


def sum_stats(model: ModelSpec, theta: Interval, x: torch.Tensor, y: torch.Tensor, *,
              clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`gradient_sum_stats`, compiled for large problems (falls back to eager where
    ``torch.compile`` is unavailable, or with ``CERTDP_NO_COMPILE=1``)."""
    size = theta.lo.shape[0] * x.shape[0] * model.n_params
    key = (model, float(clip))
    head = model.n_layers == 1
    big = size >= COMPILE_MIN_ELEMENTS or (
        size >= COMPILE_FLOOR and _EAGER_WORK.get(key, 0) >= COMPILE_AFTER_WORK)
    if big and not _COMPILE["failed"] and os.environ.get("CERTDP_NO_COMPILE", "0") in ("", "0"):
        try:
            if head:
                return head_sum_stats(model, theta, x, y, clip=clip, compiled=True)
            return _compiled_sum_stats(model, clip)(theta.lo, theta.hi, x, y)
        except Exception as e:  # no C++ toolchain or unsupported op: stay correct, get slower
            log.warning("torch.compile unavailable (%s); eager IBP", type(e).__name__)
            _COMPILE["failed"] = True
    _EAGER_WORK[key] = _EAGER_WORK.get(key, 0) + size
    if head:
        return head_sum_stats(model, theta, x, y, clip=clip)
    return gradient_sum_stats_blocked(model, theta, x, y, clip=clip)


SUBSTITUTIONS = ("per_epoch", "per_batch")


def check_substitutions(v) -> str:
    """The validated ``certificate.substitutions`` value."""
    if v not in SUBSTITUTIONS:
        raise ConfigError("certificate.substitutions", f"unknown '{v}'; allowed: {', '.join(SUBSTITUTIONS)}")
    return v


class IBP(Certificate):
    """Interval bound propagation (``certificate=ibp``).

    Option ``aggregation``: ``topk`` (exact SEMin/SEMax of the per-sample intervals) or ``tau``
    (the data-independent tau grid of :mod:`certdp.bounds.aggregate`, from fused sums: one pass,
    no [M, P, b] tensor, no sort; single-layer heads by :func:`head_sum_stats`).  Both nest, and the interval passes are inclusion-monotone, so
    the step map satisfies (M1)-(M3) of certdp/privacy/sensitivity.py.
    Option ``substitutions``: ``per_epoch`` (default: the per-epoch ledger of :mod:`certdp.agt`
    wherever the batch plan has more than one batch per epoch; it keeps the nesting) or
    ``per_batch``."""

    name = "ibp"
    options = ("aggregation", "substitutions")
    nesting_monotone = True

    def __init__(self, *, aggregation: str = "topk", substitutions: str = "per_epoch"):
        if aggregation not in MODES:
            raise ConfigError("certificate.aggregation", f"unknown '{aggregation}'; allowed: {', '.join(MODES)}")
        self.aggregation = aggregation
        self.substitutions = check_substitutions(substitutions)

    def per_sample_gradient_bounds(self, model, theta, x, y, *, clip, out=None):
        return gradient_bounds(model, theta, x, y, clip=clip, out=out)

    def batch_sum_bounds(self, model, boxes, batch, *, subs, src=None, clip):
        x, y = batch
        if self.aggregation == "tau":
            stats = sum_stats(model, boxes, x, y, clip=clip)
            return batch_sum_from_stats(stats, subs=subs, src=src, clip=clip, b=x.shape[0])
        return gradient_topk_sums(model, boxes, x, y, subs=subs, src=src, clip=clip)
