"""Models certdp can bound: stacks of Linear layers with ReLU between them.

A model is a :class:`ModelSpec` (layer widths and loss) acting on a *flat* float64 parameter
vector ``theta`` of length ``P``.  Layout, layer by layer: ``W_l`` row-major ([out, in]) then
``b_l``.  Every function accepts leading batch dimensions on ``theta`` ([..., P]) so that one
call serves all radii ``k`` (or all retrained neighbours) at once.

The loss is a :mod:`certdp.losses` object (``mse``: squared error, one output; ``hinge``: labels
y in {-1, +1}, one output; ``ce``: softmax cross-entropy, labels y in {0..C-1}, C outputs); the
training objective is the batch mean of the per-sample loss.  ``relu'(0) = 0`` and ``hinge'`` at
the kink is 0, as in ``torch.autograd``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from certdp import DTYPE
from certdp.losses import MSE, Loss, get_loss


def n_params_of(widths) -> int:
    """Weights and biases of a dense network of layer ``widths`` (d_in, hidden..., n_out)."""
    return sum(o * i + o for i, o in zip(widths[:-1], widths[1:]))


@dataclass(frozen=True)
class ModelSpec:
    """Layer widths ``(d_in, hidden..., n_out)`` and the loss (a :class:`certdp.losses.Loss`;
    its name, e.g. ``"mse"``, is accepted and resolved).  Frozen and hashable: it keys caches."""

    widths: tuple[int, ...]
    loss: Loss = MSE()

    def __post_init__(self):
        if len(self.widths) < 2:
            raise ValueError("a model needs at least an input and an output width")
        object.__setattr__(self, "loss", get_loss(self.loss))
        self.loss.check_outputs(self.widths[-1])

    @property
    def n_layers(self) -> int:
        return len(self.widths) - 1

    @property
    def n_params(self) -> int:
        return n_params_of(self.widths)

    def slices(self) -> list[tuple[slice, slice, tuple[int, int]]]:
        out, off = [], 0
        for i, o in zip(self.widths[:-1], self.widths[1:]):
            out.append((slice(off, off + o * i), slice(off + o * i, off + o * i + o), (o, i)))
            off += o * i + o
        return out

    def unflatten(self, theta: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        lead = theta.shape[:-1]
        return [(theta[..., sw].reshape(*lead, *shape), theta[..., sb]) for sw, sb, shape in self.slices()]

    def param_names(self) -> list[str]:
        names = []
        for l, (_, _, (o, i)) in enumerate(self.slices()):
            names += [f"W{l}[{a},{b}]" for a in range(o) for b in range(i)]
            names += [f"b{l}[{a}]" for a in range(o)]
        return names

    def init(self, seed: int) -> torch.Tensor:
        """torch.nn.Linear's default init (U(+-1/sqrt(fan_in))) from a seeded generator."""
        g = torch.Generator().manual_seed(int(seed))
        parts = []
        for i, o in zip(self.widths[:-1], self.widths[1:]):
            bound = 1.0 / i ** 0.5
            parts.append((torch.rand(o * i, generator=g, dtype=DTYPE) * 2 - 1) * bound)
            parts.append((torch.rand(o, generator=g, dtype=DTYPE) * 2 - 1) * bound)
        return torch.cat(parts)

    # ---------------------------------------------------------------- nominal passes
    def forward(self, theta: torch.Tensor, x: torch.Tensor, return_cache: bool = False):
        """Outputs [..., n, out] for parameters [..., P] and inputs [n, d] or [..., n, d]."""
        layers = self.unflatten(theta)
        acts, pres = [x], []
        a = x
        for l, (w, b) in enumerate(layers):
            z = a @ w.transpose(-1, -2) + b.unsqueeze(-2)
            pres.append(z)
            a = z.clamp(min=0) if l < self.n_layers - 1 else z
            acts.append(a)
        return (a, acts, pres) if return_cache else a

    def predict(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Regression value / binary margin [..., n], or class logits [..., n, C]."""
        out = self.forward(theta, x)
        return out.squeeze(-1) if self.widths[-1] == 1 else out

    def per_sample_loss(self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-sample loss [..., n]."""
        return self.loss.value(self.forward(theta, x), y)

    def per_sample_grads(self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Closed-form per-sample gradients [..., n, P] (backpropagation written out)."""
        out, acts, pres = self.forward(theta, x, return_cache=True)
        layers = self.unflatten(theta)
        delta = self.loss.grad(out, y)
        parts = []
        for l in range(self.n_layers - 1, -1, -1):
            a = acts[l]
            if a.dim() < delta.dim():
                a = a.expand(*delta.shape[:-1], a.shape[-1])
            gw = delta.unsqueeze(-1) * a.unsqueeze(-2)
            parts.append(delta)
            parts.append(gw.flatten(-2))
            if l > 0:
                delta = (delta @ layers[l][0]) * (pres[l - 1] > 0).to(delta.dtype)
        return torch.cat(parts[::-1], dim=-1)

    def magnitude_bound(self, *, input_bound: float, param_bound: float, target_bound: float | None) -> float:
        """An upper bound on |every number| the nominal passes and the interval passes compute
        (activations, output gradients, deltas, per-sample gradients before clipping) for any
        input with |x| <= ``input_bound``, any parameters (or parameter boxes) within
        ``param_bound`` of 0 in every coordinate, and (mse) any target with |y| <= ``target_bound``.

        Layer l with fan-in i: |z| <= i * R * A_l + R (A_0 = input bound, R = param bound; ReLU
        does not increase it).  Output gradient: |softmax - onehot| <= 1, |hinge'| <= 1,
        |2(z - y)| <= 2(A_L + target bound).  Backward through a layer with fan-out o:
        |delta_l| <= o * R * |delta_{l+1}|; a weight gradient is delta times an activation.
        Interval passes over boxes inside [-R, R] obey the same bounds (each end of an interval
        product is one such product, each end of a sum such a sum).  float('inf') when the
        arithmetic of the bound itself overflows."""
        R = float(param_bound)
        acts = [float(input_bound)]
        with np.errstate(over="ignore"):
            for i in self.widths[:-1]:
                acts.append(i * R * acts[-1] + R)
            if self.loss.name == "mse":
                if target_bound is None:
                    return float("inf")
                d = 2 * (acts[-1] + float(target_bound))
            else:
                d = 1.0
            worst = max(acts + [d])
            for l in range(self.n_layers - 1, -1, -1):
                worst = max(worst, d * acts[l], d)
                d = self.widths[l + 1] * R * d
        return float(worst)

    def classify(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Predicted labels [..., n] (+-1 for hinge, class indices otherwise)."""
        return self.loss.classify(self.forward(theta, x))


def build_model(arch: str, d_in: int, *, hidden=(), n_out: int = 1, loss: str | Loss = "mse") -> ModelSpec:
    """``linear`` (no hidden layer; ``n_out`` outputs: one for regression and the binary hinge,
    one per class for a multiclass softmax), ``mlp`` (ReLU hidden layers), ``logistic`` (softmax head)."""
    if arch == "linear":
        return ModelSpec((d_in, n_out), loss)
    if arch == "mlp":
        return ModelSpec((d_in, *[int(h) for h in hidden], n_out), loss)
    if arch == "logistic":
        return ModelSpec((d_in, n_out), "ce")
    raise ValueError(f"unknown model {arch!r}; allowed: linear, mlp, logistic")
