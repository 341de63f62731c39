"""Per-sample training losses and the bounds of their output gradients that the engines use.

Each loss is a small frozen value (hashable, so that a :class:`certdp.models.ModelSpec` holding it
can key caches) with, for model outputs ``out`` [..., n, C] and labels ``y`` [..., n]:

* ``value(out, y)``: the per-sample loss [..., n] (the training objective is its batch mean);
* ``grad(out, y)``: phi = d loss / d out, per sample [..., n, C] (nominal);
* ``grad_bounds(lo, hi, y)``: bounds (lo', hi') containing phi(z) for every z in the output box
  [lo, hi] (plain tensors, so that this module stays below ``certdp.bounds``);
* ``grad_linear_bounds(zl, zu, y)``: affine bounds  alpha_L z + beta_L <= phi(z) <= alpha_U z + beta_U
  over the box [zl, zu] [K, n, C], as (alpha_L, alpha_U [K|1, n, C, C'], beta_L, beta_U [K, n, C],
  r_L, r_U [K, n, C]); ``C' = 1`` where phi_c depends on z_c only, else ``C' = C``; r_L <= the
  minimum of the lower bound over the box, r_U >= the maximum of the upper one.  The bounds form an
  *inclusion-monotone family* (for boxes Z inside Z', the bounds of Z' are no tighter than those of
  Z at every z of Z) and r_L, r_U are inclusion-monotone numbers, which is what keeps CROWN's step
  map nesting (certdp/bounds/crown.py, certdp/privacy/sensitivity.py);
* ``labels(y)``: labels in the dtype ``value``/``grad`` read (targets and +-1 labels as float64,
  class indices unchanged); ``classify(out)``: predicted labels [..., n].

Derivations of the bounds (z ranges over a box; all bounds are sound in exact arithmetic):

* ``mse``   l = (z - y)^2, phi = 2(z - y): affine, so both bounds are exact (alpha = 2, beta = -2y)
  and box-independent; r_L, r_U are the exact range.
* ``hinge`` l = max(0, 1 - y z), y in {-1, +1}: phi = -y a(m), m = y z, a(m) = 1[m < 1] (a step;
  torch's hinge' is 0 at m = 1, as here).  Surely active (mU < 1) or inactive (mL >= 1): phi is
  constant; otherwise it takes both values.  The linear bounds are the interval constants
  (alpha = 0): chords through the kink, t (1 - m) / (1 - mL), are tighter but not an
  inclusion-monotone family (for m > 1 a larger box, i.e. a smaller mL, gives a *higher* lower
  line), and the choice between two chords by area is not monotone either.
* ``ce``    softmax cross-entropy, y in {0..C-1}: phi = softmax(z) - onehot(y).  Interval: p_c =
  1 / (1 + sum_{j != c} exp(z_j - z_c)) is increasing in z_c and decreasing in z_j, so its
  extremes are at opposite corners; they are evaluated in log-sum-exp form
  (:func:`softmax_bounds`), finite for every finite box however wide.  Linear (mean-value form): for z0 the box centre,
  p_c(z) = p_c(z0) + J_c(xi) . (z - z0) for some xi in the box (the segment lies in it), and the
  Jacobian J_cc' = p_c (delta_cc' - p_c') lies in an interval [J_lo, J_hi] computed from the
  probability bounds [pl, pu] (q(1-q) over [pl, pu] on the diagonal; -p_c p_c' in
  [-pu_c pu_c', -pl_c pl_c'] off it).  With J_mid, J_rad and |z - z0| <= z_rad:

      p_c(z) in  p_c(z0) + J_mid,c . (z - z0)  +-  J_rad,c . z_rad,

  so alpha_L = alpha_U = J_mid and the offsets differ by the O(rad^2) remainder; this is what
  lets a contracting step (lambda < 1, PSD Hessian) contract the envelope.  *Monotone although
  the centre moves*: for Z inside Z' (centre z0', radius z_rad', J-interval containing Z's) and z
  in Z, p(z0') = p(z0) + J(xi)(z0' - z0) with xi in Z', so the lower line of Z' at z is at most
  p(z0) + J_mid' (z - z0) + J_rad' (|z0' - z0| - z_rad') <= p(z0) + J_mid' (z - z0) - J_rad' z_rad
  (containment: |z0' - z0| + z_rad <= z_rad'), and the difference to Z's lower line,
  (J_mid' - J_mid) (z - z0) - (J_rad' - J_rad) z_rad, is <= 0 because |J_mid' - J_mid| <= J_rad' -
  J_rad (nested J-intervals); mirror for the upper line.  The rounding margin is relative to
  the isotone magnitudes max(|z_lo|, |z_hi|) and max(|J_lo|, |J_hi|).  Range of the lines:
  |J_mid| + J_rad = max(|J_lo|, |J_hi|) =: J_mag, so the lower line's minimum over the box is
  p(z0) - J_mag . z_rad >= pl - J_mag . z_rad = r_L (and the mirror r_U), isotone.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import torch

from certdp import DTYPE, kernels
from certdp.registry import Registry

# every exp of the bounds below runs after each elementary function's first call on one thread
# (certdp/kernels.py: a first call split over threads can be off by 1e7 ulps on one chunk)
kernels.settle()

# float64 unit roundoff: the margin of softmax_bounds is a multiple of it
_U = 2.0 ** -53
# classes up to which softmax_bounds works class by class (_softmax_bounds_cols: a graph of ~50C
# element-wise operations); beyond, the log-cumulative-sum form
UNROLL_CLASSES = 16


def _logsumexp_others(v: torch.Tensor) -> torch.Tensor:
    """``L_c = log sum_{j != c} exp(v_j)`` over the last axis, for every c, without cancellation:
    the log-sum-exp of the prefix before c and of the suffix after c (``torch.logcumsumexp``
    shifts by the running maximum, so nothing overflows or underflows to 0/0), joined by
    ``logaddexp``.  ``-inf`` where there is no other entry (C = 1)."""
    pad = torch.full_like(v[..., :1], -torch.inf)
    pre = torch.cat([pad, torch.logcumsumexp(v, -1)[..., :-1]], -1)                 # log sum_{j < c}
    suf = torch.cat([torch.logcumsumexp(v.flip(-1), -1).flip(-1)[..., 1:], pad], -1)  # log sum_{j > c}
    return torch.logaddexp(pre, suf)


def _logistic(t: torch.Tensor) -> torch.Tensor:
    """1 / (1 + exp(-t)) to a few ulps for every t, subnormal results included: e^t / (1 + e^t)
    below 0 (``torch.sigmoid`` gives 0 at t = -740, where e^t is still 4e-322)."""
    e = torch.exp(-t.abs())
    return torch.where(t >= 0, 1 / (1 + e), e / (1 + e))


# absolute margin of softmax_bounds: a few spacings of float64's subnormals (5e-324), which the
# relative margin cannot cover for probabilities below 2.2e-308
_TINY = 1e-322


def softmax_bounds(lo: torch.Tensor, hi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Bounds ``(pl, pu)`` [..., C] of ``softmax(z)`` over the box ``lo <= z <= hi`` (last axis),
    finite and in [0, 1] for every input, sound in floating point.

    ``p_c = 1 / (1 + sum_{j != c} exp(z_j - z_c)) = sigmoid(z_c - log sum_{j != c} exp(z_j))`` is
    increasing in z_c and decreasing in every z_j, so ``pl_c = sigmoid(lo_c - L_c(hi))`` and
    ``pu_c = sigmoid(hi_c - L_c(lo))`` with ``L_c`` the log-sum-exp of the *other* coordinates
    (:func:`_logsumexp_others`).  Written this way nothing is exponentiated except through
    log-sum-exp and the logistic function, which are exact to a few ulps for any finite input:
    the naive ``exp(z - max z)`` form underflows to 0/0 once the box is a few hundred wide (a
    record of 100 in the iris table, an MLP at |x| = 16).  Rounding: the argument of the
    logistic is off by at most a few ulps of the largest magnitude in the box (times C for the
    running sums), so it is moved outward by ``delta = 4u (C + 2)(1 + max_j max(|lo_j|, |hi_j|))``
    (u = 2^-53) before the logistic; the logistic's own rounding (three operations) is covered
    by a relative 8u on its result, and 1e-322 more covers probabilities in float64's subnormal
    range.  (Without the relative margin a bound near 1 fell one ulp below the exact value.)  ``delta`` only
    grows with the box, and the arguments only move outward as the box grows, so the bounds
    stay an inclusion-monotone family (what CROWN's nesting needs).  A NaN (only from a NaN or
    infinite input box) becomes the trivial bound 0 or 1."""
    C = lo.shape[-1]
    if 1 < C <= UNROLL_CLASSES:
        return _softmax_bounds_cols(lo, hi)
    zmag = torch.maximum(lo.abs(), hi.abs()).amax(-1, keepdim=True)
    delta = 4 * _U * (C + 2) * (1 + zmag)
    pl = _logistic(lo - _logsumexp_others(hi) - delta) * (1 - 8 * _U) - _TINY
    pu = _logistic(hi - _logsumexp_others(lo) + delta) * (1 + 8 * _U) + _TINY
    return _unit_lo(pl), _unit_hi(pu)


def _others(cols) -> tuple[list, list]:
    """For the columns v_0..v_{C-1} (C >= 2): per class c the shift s_c = max_{j != c} v_j and
    t_c = sum_{j != c} exp(v_j - s_c), so that log sum_{j != c} exp(v_j) = s_c + log t_c, with
    t_c >= 1 (its largest term is exp(0) = 1: no underflow to 0/0, no cancellation).  s_c is the
    maximum m of all columns except at the unique argmax, where it is the second largest value
    M2 = min_c s_c; so two exponentials per column suffice, exp(v_j - m) and exp(v_j - M2)."""
    C = len(cols)
    pre = [cols[0]]
    for c in range(1, C - 1):
        pre.append(torch.maximum(pre[-1], cols[c]))                     # max_{j <= c}
    suf = [cols[C - 1]]
    for c in range(C - 2, 0, -1):
        suf.append(torch.maximum(suf[-1], cols[c]))
    suf = suf[::-1]                                                     # suf[c - 1] = max_{j >= c}
    s = [suf[0]] + [torch.maximum(pre[c - 1], suf[c]) for c in range(1, C - 1)] + [pre[C - 2]]
    m = torch.maximum(cols[0], s[0])
    m2 = s[0]
    for c in range(1, C):
        m2 = torch.minimum(m2, s[c])
    out = []
    for shift in (m, m2):
        e = [torch.exp(v - shift) for v in cols]
        ps = [e[0]]                                                     # sums over j < c + 1, j > c - 1
        for c in range(1, C - 1):
            ps.append(ps[-1] + e[c])
        ss = [e[C - 1]]
        for c in range(C - 2, 0, -1):
            ss.append(ss[-1] + e[c])
        ss = ss[::-1]
        out.append([ss[0]] + [ps[c - 1] + ss[c] for c in range(1, C - 1)] + [ps[C - 2]])
    t = [torch.where(s[c] < m, out[1][c], out[0][c]) for c in range(C)]
    return s, t


def _logistic_over(d: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """sigmoid(d - log t) = 1 / (1 + t e^{-d}) for t >= 1, written without the logarithm:
    e^{-|d|} never overflows, and below 0 the form e^d / (e^d + t) keeps subnormal results."""
    e = torch.exp(-d.abs())
    return torch.where(d >= 0, 1 / (1 + t * e), e / (e + t))


def _softmax_bounds_cols(lo: torch.Tensor, hi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`softmax_bounds` class by class (C >= 2): no reduction or stack over the class axis
    until the end, so a compiled caller keeps its own memory layout, and no logarithm.

    ``p_c`` bounds as there, sigmoid(lo_c - L_c(hi) - delta) and sigmoid(hi_c - L_c(lo) + delta),
    with L_c = s_c + log t_c (:func:`_others`) folded into the logistic (:func:`_logistic_over`).
    Rounding: the shift differences, each exponential (<= 1 ulp) and the C - 2 additions of t_c
    perturb the argument by at most u (2 |v_j - s_c| + |d| + C + 4) <= u (6 zmag + C + 4 + 2 delta),
    inside delta = 4u (C + 2)(1 + zmag); the last two or three operations (t e, 1 + ., the
    division) are covered by the relative 8u; a subnormal e^{-|d|} errs by less than _TINY.  A
    NaN (only from a NaN or infinite box) becomes the trivial bound 0 or 1."""
    ls, hs = lo.unbind(-1), hi.unbind(-1)
    C = len(ls)
    zmag = torch.maximum(ls[0].abs(), hs[0].abs())
    for c in range(1, C):
        zmag = torch.maximum(zmag, torch.maximum(ls[c].abs(), hs[c].abs()))
    delta = 4 * _U * (C + 2) * (1 + zmag)
    sh, th = _others(hs)
    sl, tl = _others(ls)
    pl = [_unit_lo(_logistic_over((ls[c] - delta) - sh[c], th[c]) * (1 - 8 * _U) - _TINY) for c in range(C)]
    pu = [_unit_hi(_logistic_over((hs[c] + delta) - sl[c], tl[c]) * (1 + 8 * _U) + _TINY) for c in range(C)]
    return torch.stack(pl, -1), torch.stack(pu, -1)


def _unit_lo(p: torch.Tensor) -> torch.Tensor:
    """``nan_to_num(p, nan=0).clamp(0, 1)``, the same numbers (NaN and -inf fail ``p > 0``), as a
    select that compiles to a vectorised loop."""
    return torch.where(p > 0, p, 0.0).clamp(max=1.0)


def _unit_hi(p: torch.Tensor) -> torch.Tensor:
    """``nan_to_num(p, nan=1).clamp(0, 1)``, the same numbers (NaN and +inf fail ``p < 1``)."""
    return torch.where(p < 1, p, 1.0).clamp(min=0.0)


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
        al = torch.full((K, n, 1, 1), 2.0, dtype=zl.dtype, device=zl.device)
        bl = (-2.0 * y).view(1, n, 1).expand(K, n, 1)
        rl, ru = self.grad_bounds(zl, zu, y)
        return al, al, bl, bl, rl, ru


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
        lo, hi = self.grad_bounds(zl, zu, y)
        zero = torch.zeros(K, n, 1, 1, dtype=zl.dtype, device=zl.device)
        return zero, zero, lo, hi, lo, hi


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
        pl, pu = softmax_bounds(lo, hi)
        onehot = torch.nn.functional.one_hot(y.long(), lo.shape[-1]).to(lo.dtype)
        return pl - onehot, pu - onehot

    def grad_linear_bounds(self, zl, zu, y):
        K, n, C = zl.shape
        dt = zl.dtype
        z0, zr = (zl + zu) / 2, (zu - zl) / 2
        p0 = torch.softmax(z0, dim=-1)
        pl, pu = softmax_bounds(zl, zu)
        qa, qb = pl * (1 - pl), pu * (1 - pu)
        d_lo = torch.minimum(qa, qb)
        d_hi = torch.where((pl <= 0.5) & (pu >= 0.5), torch.full_like(qa, 0.25), torch.maximum(qa, qb))
        j_lo = -(pu.unsqueeze(-1) * pu.unsqueeze(-2))
        j_hi = -(pl.unsqueeze(-1) * pl.unsqueeze(-2))
        eye = torch.eye(C, dtype=torch.bool, device=zl.device)
        j_lo = torch.where(eye, d_lo.unsqueeze(-1).expand_as(j_lo), j_lo)
        j_hi = torch.where(eye, d_hi.unsqueeze(-1).expand_as(j_hi), j_hi)
        jm, jr = (j_lo + j_hi) / 2, (j_hi - j_lo) / 2
        jmag = torch.maximum(j_hi, -j_lo).clamp(min=0)                    # = |J_mid| + J_rad, isotone
        zmag = torch.maximum(zu, -zl).clamp(min=0).unsqueeze(-2)         # >= |z|, isotone
        onehot = torch.nn.functional.one_hot(y.long(), C).to(dt)
        base = p0 - onehot - (jm * z0.unsqueeze(-2)).sum(-1)
        margin = 1e-14 * (1 + (jmag * zmag).sum(-1))                      # rounding of p0 and the products
        rem = (jr * zr.unsqueeze(-2)).sum(-1) + margin
        spread = (jmag * zr.unsqueeze(-2)).sum(-1)
        rl = pl - onehot - spread - margin
        ru = pu - onehot + spread + margin
        return jm, jm, base - rem, base + rem, rl, ru


LOSSES: Registry[Loss] = Registry("loss", ((loss.name, loss) for loss in (MSE(), Hinge(), SoftmaxCE())))


def get_loss(loss: str | Loss) -> Loss:
    """The loss named ``loss`` (a :class:`Loss` passes through); ValueError naming the allowed ones."""
    if isinstance(loss, Loss):
        return loss
    try:
        return LOSSES[loss]
    except (KeyError, TypeError):
        raise ValueError(f"unknown loss {loss!r}; allowed: {', '.join(LOSSES)}") from None
