"""Interval bound propagation (IBP) through the forward *and* backward pass.

Given a box of parameters ``Theta = [theta_L, theta_U]`` ([K, P], one box per radius) and an
exact batch ``(x, y)``, :func:`gradient_bounds` returns intervals [K, n, P] that contain
``clip(grad_theta l(f_theta(x_i), y_i), -gamma, gamma)`` for every ``theta`` in the box.

Forward: the first layer has exact inputs (``x+ W_L + x- W_U``); later layers have
non-negative post-ReLU inputs, for which each product w*a is bounded exactly by sign-splitting
the weight bound.  Backward: the output gradient of the loss is bounded from the output
interval (MSE: 2(f - y); hinge: -y on the active side; cross-entropy: softmax bounds minus the
one-hot); it is pushed through the transposed weights with midpoint-radius products and through
the ReLU derivative (1 if the pre-activation is surely > 0, 0 if surely <= 0, [0, 1] otherwise).
The weight gradient is an outer product of a delta interval with the (exact or >= 0) layer input.
"""

from __future__ import annotations

import os

import torch

from certdp.bounds import register_certificate
from certdp.bounds.interval import (Interval, matmul_exact_left, matmul_midrad,
                                    matmul_nonneg_left, mul_exact, mul_nonneg)
from certdp.models import ModelSpec


_WORKSPACE: dict[str, torch.Tensor] = {}


def workspace(name: str, shape: tuple, dtype) -> torch.Tensor:
    """A reusable buffer: AGT asks for the same large [K, P, n] tensors every step, and fresh
    allocations of that size cost more than the arithmetic (page faults)."""
    buf = _WORKSPACE.get(name)
    numel = 1
    for s_ in shape:
        numel *= s_
    if buf is None or buf.dtype != dtype or buf.numel() < numel:
        buf = torch.empty(numel, dtype=dtype)
        _WORKSPACE[name] = buf
    return buf[:numel].view(shape)


def release_workspace() -> None:
    _WORKSPACE.clear()


def forward_bounds(model: ModelSpec, theta: Interval, x: torch.Tensor):
    """Output interval [K, n, out] plus the cached pre-activation and activation intervals."""
    lo_layers = model.unflatten(theta.lo)
    hi_layers = model.unflatten(theta.hi)
    acts: list = [x]
    pres: list[Interval] = []
    a = None
    for l in range(model.n_layers):
        w = Interval(lo_layers[l][0], hi_layers[l][0])
        b = Interval(lo_layers[l][1].unsqueeze(-2), hi_layers[l][1].unsqueeze(-2))
        z = matmul_exact_left(x, w) if l == 0 else matmul_nonneg_left(a, w)
        z = Interval(z.lo + b.lo, z.hi + b.hi)
        pres.append(z)
        a = z.clamp(0.0, float("inf")) if l < model.n_layers - 1 else z
        acts.append(a)
    return a, acts, pres


def output_bounds(model: ModelSpec, theta: Interval, x: torch.Tensor) -> Interval:
    out, _, _ = forward_bounds(model, theta, x)
    return out


def loss_grad_bounds(model: ModelSpec, out: Interval, y: torch.Tensor) -> Interval:
    """Interval of d loss / d output given the output interval."""
    if model.loss == "mse":
        t = y.unsqueeze(-1)
        return Interval(2.0 * (out.lo - t), 2.0 * (out.hi - t))
    if model.loss == "hinge":
        ys = y.unsqueeze(-1).to(out.lo.dtype)
        m_lo = torch.where(ys > 0, out.lo, -out.hi)   # bounds of the margin y*f
        m_hi = torch.where(ys > 0, out.hi, -out.lo)
        active_sure = m_hi < 1.0
        inactive_sure = m_lo >= 1.0
        g = -ys.expand_as(out.lo)
        zero = torch.zeros_like(out.lo)
        lo = torch.where(active_sure, g, torch.where(inactive_sure, zero, torch.minimum(g, zero)))
        hi = torch.where(active_sure, g, torch.where(inactive_sure, zero, torch.maximum(g, zero)))
        return Interval(lo, hi)
    # Softmax cross-entropy: p_c = 1 / (1 + sum_{j != c} exp(z_j - z_c)) is increasing in z_c
    # and decreasing in z_j, so its extremes are at opposite corners.
    lo_z, hi_z = out.lo, out.hi
    shift = hi_z.max(dim=-1, keepdim=True).values
    el, eu = torch.exp(lo_z - shift), torch.exp(hi_z - shift)
    su, sl = eu.sum(-1, keepdim=True), el.sum(-1, keepdim=True)
    p_lo = el / (el + (su - eu))
    p_hi = eu / (eu + (sl - el))
    p_lo, p_hi = p_lo.clamp(0, 1), p_hi.clamp(0, 1)
    onehot = torch.nn.functional.one_hot(y.long(), out.lo.shape[-1]).to(out.lo.dtype)
    return Interval(p_lo - onehot, p_hi - onehot)


def backprop_relu(delta: Interval, w: Interval, z: Interval) -> Interval:
    """Delta of the previous layer: (delta @ W) times the ReLU derivative s in [s_lo, s_hi]
    (1 if the pre-activation z is surely > 0, 0 if surely <= 0, else [0, 1]); written as
    arithmetic because torch.where is slow on CPU here."""
    back = matmul_midrad(delta, w)
    s_lo = (z.lo > 0).to(back.lo.dtype)
    s_un = (z.hi > 0).to(back.lo.dtype) - s_lo
    return Interval(s_lo * back.lo + s_un * back.lo.clamp(max=0),
                    s_lo * back.hi + s_un * back.hi.clamp(min=0))


def gradient_bounds(model: ModelSpec, theta: Interval, x: torch.Tensor, y: torch.Tensor,
                    clip: float) -> Interval:
    """Clipped per-sample gradient intervals [K, P, n] (samples last) over the box [K, P].

    Samples are the last axis so that the batch aggregation (sums and top-k over samples)
    runs over contiguous memory; results are written into one preallocated buffer."""
    out, acts, pres = forward_bounds(model, theta, x)
    delta = loss_grad_bounds(model, out, y)
    lo_layers, hi_layers = model.unflatten(theta.lo), model.unflatten(theta.hi)
    K, n, P = theta.lo.shape[0], x.shape[0], model.n_params
    lo_buf = workspace("ibp_lo", (K, P, n), theta.lo.dtype)
    hi_buf = workspace("ibp_hi", (K, P, n), theta.lo.dtype)
    xt = x.transpose(0, 1).contiguous()
    xp, xn = xt.clamp(min=0), xt.clamp(max=0)
    for l in range(model.n_layers - 1, -1, -1):
        sw, sb, (o, i) = model.slices()[l]
        dlo = delta.lo.transpose(-1, -2).contiguous().unsqueeze(-2)     # [K, o, 1, n]
        dhi = delta.hi.transpose(-1, -2).contiguous().unsqueeze(-2)
        vlo = lo_buf[:, sw].view(K, o, i, n)
        vhi = hi_buf[:, sw].view(K, o, i, n)
        if l == 0:
            # exact input: d*x is smallest at d_lo where x >= 0 and at d_hi where x < 0
            torch.mul(dlo, xp, out=vlo); vlo.addcmul_(dhi, xn)
            torch.mul(dhi, xp, out=vhi); vhi.addcmul_(dlo, xn)
        else:
            alo = acts[l].lo.transpose(-1, -2).contiguous().unsqueeze(-3)  # [K, 1, i, n], >= 0
            ahi = acts[l].hi.transpose(-1, -2).contiguous().unsqueeze(-3)
            torch.mul(dlo.clamp(min=0), alo, out=vlo); vlo.addcmul_(dlo.clamp(max=0), ahi)
            torch.mul(dhi.clamp(min=0), ahi, out=vhi); vhi.addcmul_(dhi.clamp(max=0), alo)
        lo_buf[:, sb] = dlo.squeeze(-2)
        hi_buf[:, sb] = dhi.squeeze(-2)
        if l > 0:
            delta = backprop_relu(delta, Interval(lo_layers[l][0], hi_layers[l][0]), pres[l - 1])
    lo_buf.clamp_(-clip, clip)
    hi_buf.clamp_(-clip, clip)
    return Interval(lo_buf, hi_buf)


def _block_stats(dlo, dhi, alo, ahi, clip: float, exact: bool):
    """Clipped weight-gradient bounds of one layer, reduced over samples without keeping them:
    (sum of lower bounds, max of lower bounds, sum of upper bounds, min of upper bounds).

    ``d*`` [K, o, 1, n] bound the layer's output delta; ``a*`` [.., 1, i, n] its input: for an
    exact input pass (x+, x-) as (alo, ahi); for a post-ReLU input (>= 0) its bounds."""
    if exact:
        lo = dlo * alo + dhi * ahi
        hi = dhi * alo + dlo * ahi
    else:
        lo = dlo.clamp(min=0) * alo + dlo.clamp(max=0) * ahi
        hi = dhi.clamp(min=0) * ahi + dhi.clamp(max=0) * alo
    lo = lo.clamp(-clip, clip)
    hi = hi.clamp(-clip, clip)
    return lo.sum(-1), lo.amax(-1), hi.sum(-1), hi.amin(-1)


def gradient_sum_bounds(model: ModelSpec, theta: Interval, x: torch.Tensor, y: torch.Tensor,
                        ks: torch.Tensor, clip: float) -> Interval:
    """Batch-sum bounds with the ``max`` aggregation, computed layer block by layer block with
    fused reductions: sum_i l_i - k * max_i l_i - k*gamma  and  sum_i u_i - k * min_i u_i + k*gamma.

    Same bound as ``aggregate_batch(gradient_bounds(...), mode="max")`` (up to summation order),
    without materialising the [K, P, n] per-sample intervals."""
    out, acts, pres = forward_bounds(model, theta, x)
    delta = loss_grad_bounds(model, out, y)
    lo_layers, hi_layers = model.unflatten(theta.lo), model.unflatten(theta.hi)
    K, P = theta.lo.shape[0], model.n_params
    stats = [torch.empty(K, P, dtype=theta.lo.dtype) for _ in range(4)]
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
        bl, bh = dlo.clamp(-clip, clip), dhi.clamp(-clip, clip)
        rb = (bl.sum(-1), bl.amax(-1), bh.sum(-1), bh.amin(-1))
        for j in range(4):
            stats[j][:, sw] = r[j].reshape(K, o * i)
            stats[j][:, sb] = rb[j]
        if l > 0:
            delta = backprop_relu(delta, Interval(lo_layers[l][0], hi_layers[l][0]), pres[l - 1])
    b = x.shape[0]
    kf = ks.clamp(max=b).to(theta.lo.dtype).unsqueeze(-1)
    lo_sum, lo_max, hi_sum, hi_min = stats
    return Interval(lo_sum - kf * lo_max - kf * clip, hi_sum - kf * hi_min + kf * clip)


_COMPILED: dict = {}
_COMPILE = {"failed": False}
COMPILE_MIN_ELEMENTS = 4_000_000   # K * n * P above which the fused (compiled) pass pays off
# Smaller calls are compiled too once this process has spent COMPILE_AFTER_WORK elements of eager
# work on the same (model, clip): many calls of one shape (PATE shards of a few hundred records,
# 330 steps each) amortise the ~30 s compile just as well as a few big ones.  Calls below
# COMPILE_FLOOR stay eager (tiny problems: tests, linear heads).
COMPILE_AFTER_WORK = 1_000_000_000
COMPILE_FLOOR = 100_000
_EAGER_WORK: dict = {}


def _compiled_sum_bounds(model: ModelSpec, clip: float):
    """``gradient_sum_bounds`` through ``torch.compile``: inductor fuses the interval forward,
    backward and per-layer reductions into a few loops, so the [K, P, n] per-sample bounds are
    never materialised (measured >10x faster on the California MLP).  Compiled once per model
    and clip; the same arithmetic as the eager function."""
    key = (model, float(clip))
    fn = _COMPILED.get(key)
    if fn is None:
        def fused(lo, hi, x, y, ks):
            r = gradient_sum_bounds(model, Interval(lo, hi), x, y, ks, clip)
            return r.lo, r.hi
        fn = _COMPILED[key] = torch.compile(fused, dynamic=None)
    return fn


class IBP:
    """Interval bound propagation certificate (``certificate=ibp``)."""

    name = "ibp"

    def __init__(self, aggregation: str = "topk", **_):
        if aggregation not in ("topk", "max"):
            from certdp.errors import ConfigError
            raise ConfigError("certificate.aggregation", f"unknown '{aggregation}'; allowed: topk, max")
        self.aggregation = aggregation

    def batch_sum_bounds(self, model, theta, x, y, ks, clip):
        """Bounds on the batch sum of clipped gradients for every radius (see ``agt``)."""
        if self.aggregation == "max":
            size = theta.lo.shape[0] * x.shape[0] * model.n_params
            key = (model, float(clip))
            big = size >= COMPILE_MIN_ELEMENTS or (
                size >= COMPILE_FLOOR and _EAGER_WORK.get(key, 0) >= COMPILE_AFTER_WORK)
            if big and not _COMPILE["failed"] and \
                    os.environ.get("CERTDP_NO_COMPILE", "0") in ("", "0"):
                try:
                    lo, hi = _compiled_sum_bounds(model, clip)(theta.lo, theta.hi, x, y, ks)
                    return Interval(lo, hi)
                except Exception as e:  # no C++ toolchain or unsupported op: stay correct, get slower
                    import logging
                    logging.getLogger("certdp").warning("torch.compile unavailable (%s); eager IBP", type(e).__name__)
                    _COMPILE["failed"] = True
            _EAGER_WORK[key] = _EAGER_WORK.get(key, 0) + size
            return gradient_sum_bounds(model, theta, x, y, ks, clip)
        from certdp.agt import aggregate_batch
        return aggregate_batch(gradient_bounds(model, theta, x, y, clip), ks, clip, "topk")

    def per_sample_gradient_bounds(self, model, theta, x, y, clip):
        return gradient_bounds(model, theta, x, y, clip)

    def output_bounds(self, model, theta, x):
        return output_bounds(model, theta, x)


register_certificate("ibp")(IBP)
