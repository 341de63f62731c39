"""Per-sample training losses and the bounds of their output gradients that the engines use.

Each loss is a small frozen value (hashable, so that a :class:`certdp.models.ModelSpec` holding it
can key caches) with, for model outputs ``out`` [..., n, C] and labels ``y`` [..., n]:

* ``value(out, y)``: the per-sample loss [..., n] (the training objective is its batch mean);
* ``grad(out, y)``: phi = d loss / d out, per sample [..., n, C] (nominal);
* ``grad_bounds(lo, hi, y)``: bounds (lo', hi') containing phi(z) for every z in the output box
  [lo, hi] (plain tensors, so that this module stays below ``certdp.bounds``);
* ``grad_linear_bounds(zl, zu, y)``: affine bounds  alpha_L z + beta_L <= phi(z) <= alpha_U z + beta_U
  over the box [zl, zu] [K, n, C], as (alpha_L, alpha_U [K|1, n, C, C'], beta_L, beta_U [K, n, C]);
  ``C' = 1`` where phi_c depends on z_c only, else ``C' = C``;
* ``labels(y)``: labels in the dtype ``value``/``grad`` read (targets and +-1 labels as float64,
  class indices unchanged); ``classify(out)``: predicted labels [..., n].

Derivations of the bounds (z ranges over a box; all bounds are sound in exact arithmetic):

* ``mse``   l = (z - y)^2, phi = 2(z - y): affine, so both bounds are exact (alpha = 2, beta = -2y).
* ``hinge`` l = max(0, 1 - y z), y in {-1, +1}: phi = -y a(m), m = y z, a(m) = 1[m < 1] (a step;
  torch's hinge' is 0 at m = 1, as here).  Surely active (mU < 1) or inactive (mL >= 1): phi is
  constant.  Otherwise every member of

      L_t(m) = t (1 - m) / (1 - mL),        U_t(m) = 1 + t (1 - m) / (mU - 1),     t in [0, 1]

  is valid on [mL, mU]: L_t <= 1 left of the kink and <= 0 right of it; U_t >= 1 left and >= 0
  right.  t in {0, 1} is picked per sample by the smaller area between bound and step (t = 1 for
  L iff 1 - mL > mU - 1, for U iff mU - 1 > 1 - mL).
* ``ce``    softmax cross-entropy, y in {0..C-1}: phi = softmax(z) - onehot(y).  Interval: p_c =
  1 / (1 + sum_{j != c} exp(z_j - z_c)) is increasing in z_c and decreasing in z_j, so its
  extremes are at opposite corners.  Linear (mean-value form): for z0 the box centre,
  p_c(z) = p_c(z0) + J_c(xi) . (z - z0) for some xi in the box (the segment lies in it), and the
  Jacobian J_cc' = p_c (delta_cc' - p_c') lies in an interval [J_lo, J_hi] computed from the
  probability bounds [pl, pu] (q(1-q) over [pl, pu] on the diagonal; -p_c p_c' in
  [-pu_c pu_c', -pl_c pl_c'] off it).  With J_mid, J_rad and |z - z0| <= z_rad:

      p_c(z) in  p_c(z0) + J_mid,c . (z - z0)  +-  J_rad,c . z_rad,

  so alpha_L = alpha_U = J_mid and the offsets differ by the O(rad^2) remainder; this is what
  lets a contracting step (lambda < 1, PSD Hessian) contract the envelope.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import torch

from certdp import DTYPE


@dataclass(frozen=True)
class Loss(ABC):
    """A per-sample loss; see the module docstring for the meaning of every method."""

    name: ClassVar[str]
    one_output: ClassVar[bool] = False      # the model must have exactly one output

    def __str__(self) -> str:
        return self.name

    def check_outputs(self, n_out: int) -> None:
        """ValueError unless a model with ``n_out`` outputs can be trained with this loss."""
        if self.one_output and n_out != 1:
            raise ValueError(f"loss {self.name} needs one output, got {n_out}")

    def labels(self, y: torch.Tensor) -> torch.Tensor:
        return y.to(DTYPE)

    def classify(self, out: torch.Tensor) -> torch.Tensor:
        return out.argmax(-1)

    @abstractmethod
    def value(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor: ...

    @abstractmethod
    def grad(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor: ...

    @abstractmethod
    def grad_bounds(self, lo: torch.Tensor, hi: torch.Tensor, y: torch.Tensor): ...

    @abstractmethod
    def grad_linear_bounds(self, zl: torch.Tensor, zu: torch.Tensor, y: torch.Tensor): ...


@dataclass(frozen=True)
class MSE(Loss):
    """Squared error (z - y)^2 of a one-output regression model."""

    name: ClassVar[str] = "mse"
    one_output: ClassVar[bool] = True

    def value(self, out, y):
        return (out.squeeze(-1) - y) ** 2

    def grad(self, out, y):
        return 2.0 * (out - y.unsqueeze(-1))

    def grad_bounds(self, lo, hi, y):
        t = y.unsqueeze(-1)
        return 2.0 * (lo - t), 2.0 * (hi - t)

    def grad_linear_bounds(self, zl, zu, y):
        K, n, _ = zl.shape
        al = torch.full((K, n, 1, 1), 2.0, dtype=zl.dtype)
        bl = (-2.0 * y).view(1, n, 1).expand(K, n, 1)
        return al, al, bl, bl


@dataclass(frozen=True)
class Hinge(Loss):
    """max(0, 1 - y z) of a one-output binary classifier, labels y in {-1, +1}."""

    name: ClassVar[str] = "hinge"
    one_output: ClassVar[bool] = True

    def classify(self, out):
        return torch.where(out.squeeze(-1) >= 0, 1, -1)

    def value(self, out, y):
        return (1 - y.to(out.dtype) * out.squeeze(-1)).clamp(min=0)

    def grad(self, out, y):
        ys = y.unsqueeze(-1).to(out.dtype)
        return torch.where(ys * out < 1.0, -ys, torch.zeros_like(out))

    def grad_bounds(self, lo, hi, y):
        ys = y.unsqueeze(-1).to(lo.dtype)
        m_lo = torch.where(ys > 0, lo, -hi)   # bounds of the margin y*f
        m_hi = torch.where(ys > 0, hi, -lo)
        active_sure = m_hi < 1.0
        inactive_sure = m_lo >= 1.0
        g = -ys.expand_as(lo)
        zero = torch.zeros_like(lo)
        return (torch.where(active_sure, g, torch.where(inactive_sure, zero, torch.minimum(g, zero))),
                torch.where(active_sure, g, torch.where(inactive_sure, zero, torch.maximum(g, zero))))

    def grad_linear_bounds(self, zl, zu, y):
        K, n, _ = zl.shape
        dt = zl.dtype
        ys = y.to(dt).view(1, n, 1)
        ml = torch.where(ys > 0, zl, -zu)
        mu = torch.where(ys > 0, zu, -zl)
        act = mu < 1.0
        inact = ml >= 1.0
        mixed = ~(act | inact)
        one_ml = (1.0 - ml).clamp(min=1e-300)
        mu_one = (mu - 1.0)
        tl = (mixed & (1.0 - ml > mu - 1.0)).to(dt)
        tu = (mixed & (mu - 1.0 > 1.0 - ml) & (mu_one > 0)).to(dt)
        # a(m) >= cL + sL m and a(m) <= cU + sU m  (m = y z)
        sL = -tl / one_ml
        cL = torch.where(act, torch.ones_like(ml), tl / one_ml)
        sL = torch.where(mixed, sL, torch.zeros_like(sL))
        cL = torch.where(inact, torch.zeros_like(cL), cL)
        sU = torch.where(mixed, -tu / mu_one.clamp(min=1e-300), torch.zeros_like(ml))
        cU = torch.where(mixed, 1.0 + tu / mu_one.clamp(min=1e-300), act.to(dt))
        # in z: a >= cL + sL y z ...; phi = -y a, so y > 0 flips the bounds
        aL_z, aU_z = sL * ys, sU * ys
        pos = ys > 0
        al = torch.where(pos, -aU_z, aL_z)          # phi >= al z + bl
        bl = torch.where(pos, -cU, cL)
        au = torch.where(pos, -aL_z, aU_z)
        bu = torch.where(pos, -cL, cU)
        return al.unsqueeze(-1), au.unsqueeze(-1), bl, bu


@dataclass(frozen=True)
class SoftmaxCE(Loss):
    """Softmax cross-entropy of a C-output classifier, labels y in {0..C-1}."""

    name: ClassVar[str] = "ce"

    def labels(self, y):
        return y

    def value(self, out, y):
        logp = torch.log_softmax(out, dim=-1)
        return -logp.gather(-1, y.long().expand(out.shape[:-1]).unsqueeze(-1)).squeeze(-1)

    def grad(self, out, y):
        p = torch.softmax(out, dim=-1)
        return p - torch.nn.functional.one_hot(y.long(), out.shape[-1]).to(out.dtype)

    def grad_bounds(self, lo, hi, y):
        lo_z, hi_z = lo, hi
        shift = hi_z.max(dim=-1, keepdim=True).values
        el, eu = torch.exp(lo_z - shift), torch.exp(hi_z - shift)
        su, sl = eu.sum(-1, keepdim=True), el.sum(-1, keepdim=True)
        p_lo = el / (el + (su - eu))
        p_hi = eu / (eu + (sl - el))
        p_lo, p_hi = p_lo.clamp(0, 1), p_hi.clamp(0, 1)
        onehot = torch.nn.functional.one_hot(y.long(), lo.shape[-1]).to(lo.dtype)
        return p_lo - onehot, p_hi - onehot

    def grad_linear_bounds(self, zl, zu, y):
        K, n, C = zl.shape
        dt = zl.dtype
        z0, zr = (zl + zu) / 2, (zu - zl) / 2
        p0 = torch.softmax(z0, dim=-1)
        pl, pu = self.grad_bounds(zl, zu, torch.zeros(n, dtype=torch.long))
        # onehot(0) was subtracted from column 0: undo
        pl = pl.clone(); pu = pu.clone()
        pl[..., 0] += 1.0; pu[..., 0] += 1.0
        pl, pu = pl.clamp(0, 1), pu.clamp(0, 1)
        qa, qb = pl * (1 - pl), pu * (1 - pu)
        d_lo = torch.minimum(qa, qb)
        d_hi = torch.where((pl <= 0.5) & (pu >= 0.5), torch.full_like(qa, 0.25), torch.maximum(qa, qb))
        j_lo = -(pu.unsqueeze(-1) * pu.unsqueeze(-2))
        j_hi = -(pl.unsqueeze(-1) * pl.unsqueeze(-2))
        eye = torch.eye(C, dtype=torch.bool)
        j_lo = torch.where(eye, d_lo.unsqueeze(-1).expand_as(j_lo), j_lo)
        j_hi = torch.where(eye, d_hi.unsqueeze(-1).expand_as(j_hi), j_hi)
        jm, jr = (j_lo + j_hi) / 2, (j_hi - j_lo) / 2
        onehot = torch.nn.functional.one_hot(y.long(), C).to(dt)
        base = p0 - onehot - (jm * z0.unsqueeze(-2)).sum(-1)
        rem = (jr * zr.unsqueeze(-2)).sum(-1) + 1e-14 * (1 + (jm.abs() * z0.abs().unsqueeze(-2)).sum(-1))
        return jm, jm, base - rem, base + rem


LOSSES: dict[str, Loss] = {loss.name: loss for loss in (MSE(), Hinge(), SoftmaxCE())}


def get_loss(loss: str | Loss) -> Loss:
    """The loss named ``loss`` (a :class:`Loss` passes through); ValueError naming the allowed ones."""
    if isinstance(loss, Loss):
        return loss
    try:
        return LOSSES[loss]
    except (KeyError, TypeError):
        raise ValueError(f"unknown loss {loss!r}; allowed: {', '.join(LOSSES)}") from None
