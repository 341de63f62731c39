"""Models certdp can bound: stacks of Linear layers with ReLU between them.

A model is a :class:`ModelSpec` (layer widths and loss) acting on a *flat* float64 parameter
vector ``theta`` of length ``P``.  Layout, layer by layer: ``W_l`` row-major ([out, in]) then
``b_l``.  Every function accepts leading batch dimensions on ``theta`` ([..., P]) so that one
call serves all radii ``k`` (or all retrained neighbours) at once.

Losses (per sample; the training objective is their batch mean):

* ``mse``:   l = (f(x) - y)^2, one output;
* ``hinge``: l = max(0, 1 - y f(x)), labels y in {-1, +1}, one output;
* ``ce``:    softmax cross-entropy, labels y in {0..C-1}, C outputs.

``relu'(0) = 0`` and ``hinge'`` at the kink is 0, as in ``torch.autograd``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from certdp import DTYPE

LOSSES = ("mse", "hinge", "ce")


@dataclass(frozen=True)
class ModelSpec:
    widths: tuple[int, ...]
    loss: str = "mse"

    def __post_init__(self):
        if len(self.widths) < 2:
            raise ValueError("a model needs at least an input and an output width")
        if self.loss not in LOSSES:
            raise ValueError(f"unknown loss {self.loss!r}; allowed: {', '.join(LOSSES)}")
        if self.loss in ("mse", "hinge") and self.widths[-1] != 1:
            raise ValueError(f"loss {self.loss} needs one output, got {self.widths[-1]}")

    @property
    def n_layers(self) -> int:
        return len(self.widths) - 1

    @property
    def n_params(self) -> int:
        return sum(o * i + o for i, o in zip(self.widths[:-1], self.widths[1:]))

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

    def loss_grad_output(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """d loss / d output, per sample: [..., n, out]."""
        if self.loss == "mse":
            return 2.0 * (out - y.unsqueeze(-1))
        if self.loss == "hinge":
            ys = y.unsqueeze(-1).to(out.dtype)
            return torch.where(ys * out < 1.0, -ys, torch.zeros_like(out))
        p = torch.softmax(out, dim=-1)
        return p - torch.nn.functional.one_hot(y.long(), out.shape[-1]).to(out.dtype)

    def per_sample_loss(self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = self.forward(theta, x)
        if self.loss == "mse":
            return (out.squeeze(-1) - y) ** 2
        if self.loss == "hinge":
            return (1 - y.to(out.dtype) * out.squeeze(-1)).clamp(min=0)
        logp = torch.log_softmax(out, dim=-1)
        return -logp.gather(-1, y.long().expand(out.shape[:-1]).unsqueeze(-1)).squeeze(-1)

    def per_sample_grads(self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Closed-form per-sample gradients [..., n, P] (backpropagation written out)."""
        out, acts, pres = self.forward(theta, x, return_cache=True)
        layers = self.unflatten(theta)
        delta = self.loss_grad_output(out, y)
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

    def classify(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        out = self.forward(theta, x)
        if self.loss == "hinge":
            return torch.where(out.squeeze(-1) >= 0, 1, -1)
        return out.argmax(-1)


def build_model(arch: str, d_in: int, *, hidden=(), n_out: int = 1, loss: str = "mse") -> ModelSpec:
    """``linear`` (no hidden layer), ``mlp`` (ReLU hidden layers), ``logistic`` (softmax head)."""
    if arch == "linear":
        return ModelSpec((d_in, 1), loss)
    if arch == "mlp":
        return ModelSpec((d_in, *[int(h) for h in hidden], n_out), loss)
    if arch == "logistic":
        return ModelSpec((d_in, n_out), "ce")
    raise ValueError(f"unknown model {arch!r}; allowed: linear, mlp, logistic")
