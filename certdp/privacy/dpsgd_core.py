"""Poisson-sampled DP-SGD (Abadi et al. 2016): the one training loop and the one noise calibration
shared by ``certdp dpsgd`` / ``certdp ags`` (the optimised baseline) and ``certdp hybrid``
(DP-LoRA fine-tuning and the DP-SGD head).

One step t of :func:`dpsgd_steps`, for a dataset of N records, sampling rate q, clipping norm C
and noise multiplier sigma:

1. every record enters the batch independently with probability q (one uniform draw per record
   from the step's generator, float64);
2. each sampled record's gradient g_i (all trainable tensors together, one vector) is scaled to
   l2 norm at most C: g_i * min(1, C / ||g_i||_2);
3. the clipped sum gets N(0, (sigma C)^2) noise on every coordinate (float64 draws from the same
   generator, after the sampling draws, tensor by tensor in the order the sum lists them);
4. the noisy sum divided by the *expected* batch q N is the private gradient of the update.

Accounting (:func:`noise_multiplier`, :func:`accounted_epsilon`) is under **substitution of one
record** (replace-one adjacency, datasets of a fixed size N), the adjacency of every other
certdp guarantee (AGT-R, AGS), so that budgets of DP-SGD and AGS parts add up (the hybrid's
eps_1 + eps_2):

* ``pld`` (default): dp-accounting's privacy-loss-distribution accountant with
  ``NeighboringRelation.REPLACE_ONE``.  Replacing record i by i' changes only that record's
  clipped gradient (each of l2 norm <= C), so one step's output is the other records' sum plus
  N(0, sigma^2 C^2) plus, with probability q, g_i (resp. g_i'); the dominating pair is the
  one-dimensional q N(+C) + (1 - q) N(0) against q N(-C) + (1 - q) N(0) (in units of sigma C),
  composed T times;
* ``prv`` (Gopi, Lee & Wutschitz 2021) and ``rdp`` (Mironov, Talwar & Zhang 2019): Opacus'
  accountants, which bound the add/remove-one composition.  A substitution is a removal followed
  by an addition, so by group privacy (k = 2) an add/remove (eps_a, delta_a) guarantee gives
  (2 eps_a, (1 + e^{eps_a}) delta_a) under substitution; the noise is calibrated to
  eps_a = eps / 2, delta_a = delta / (1 + e^{eps / 2}) (looser than ``pld``).

Everything drawn comes from the generators the caller passes, so a run is reproducible and a
loop resumed at step ``start`` with per-step generators continues exactly.
"""

from __future__ import annotations

import functools
from typing import Callable

import torch

from certdp import DTYPE, checkpoint
from certdp.errors import ConfigError
from certdp.privacy import noise
from certdp.privacy.accounting import accountant_names, get_accountant

# the substitution-adjacent DP-SGD accountants (module docstring): the ``dpsgd`` use of the one
# accountant registry, certdp/privacy/accounting.py, which also holds their arithmetic
DPSGD_ACCOUNTANTS = accountant_names("dpsgd")


@functools.lru_cache(maxsize=256)
def noise_multiplier(*, epsilon: float, delta: float, sample_rate: float, steps: int, accountant: str,
                     key: str = "dpsgd.optimised.accountants") -> float:
    """sigma (noise std / clipping norm): the smallest noise multiplier (to 1% in epsilon) for
    which ``accountant`` certifies (epsilon, delta)-DP under substitution of one record after
    ``steps`` Poisson-sampled steps at ``sample_rate`` (module docstring).  Cached: pure
    function of its arguments.  A budget the accountant cannot calibrate is a ConfigError on
    ``key`` (the setting that chose the accountant): group privacy asks ``prv`` and ``rdp`` for
    delta_a = delta / (1 + e^{epsilon/2}), below what opacus' PRV can resolve at large epsilon."""
    acc = get_accountant(accountant, use="dpsgd")
    try:
        return acc.dpsgd_noise_multiplier(epsilon=epsilon, delta=delta, sample_rate=sample_rate, steps=steps)
    except ValueError as e:
        raise ConfigError(key, f"the {accountant} accountant cannot calibrate sigma for epsilon {epsilon:g}, delta "
                               f"{delta:g} ({sample_rate:.3g} sampling rate, {steps} steps): "
                               f"{str(e).splitlines()[0] if str(e) else type(e).__name__}; allowed: pld (exact "
                               f"replace-one accounting), or rdp, at this epsilon") from None


def accounted_epsilon(*, sigma: float, delta: float, sample_rate: float, steps: int, accountant: str) -> float:
    """The epsilon, under substitution of one record, that ``accountant`` certifies at ``delta``
    for ``steps`` Poisson-sampled Gaussian steps with noise multiplier ``sigma`` at
    ``sample_rate``.  For ``prv``/``rdp`` the smallest epsilon found with
    2 eps_a(delta / (1 + e^{epsilon/2})) <= epsilon (group privacy, k = 2), which makes the
    substitution delta (1 + e^{eps_a}) delta_a at most ``delta``."""
    return get_accountant(accountant, use="dpsgd").dpsgd_epsilon(sigma=sigma, delta=delta, sample_rate=sample_rate,
                                                                 steps=steps)


def calibrated_noise(*, epsilon: float, delta: float, sample_rate: float, steps: int,
                     accountant: str, key: str = "dpsgd.accountant") -> tuple[float, float]:
    """(sigma, accounted epsilon): :func:`noise_multiplier`, and the epsilon the accountant
    certifies for it, checked to be within the target (a ``RuntimeError`` otherwise)."""
    sigma = noise_multiplier(epsilon=epsilon, delta=delta, sample_rate=sample_rate, steps=steps, accountant=accountant,
                             key=key)
    eps = accounted_epsilon(sigma=sigma, delta=delta, sample_rate=sample_rate, steps=steps, accountant=accountant)
    if eps > epsilon * (1 + 1e-6):
        raise RuntimeError(f"{accountant} accountant gives eps={eps:.4f} > target {epsilon} for sigma={sigma:.4f}")
    return sigma, eps


def poisson_schedule(*, batch_size: float, epochs: float, n: int) -> tuple[float, float, int]:
    """(expected batch B = min(batch_size, N), sampling rate q = B/N, steps T = max(1, round(epochs/q)))."""
    b = min(batch_size, n)
    q = b / n
    return b, q, max(1, int(round(epochs / q)))


def poisson_indices(n: int, sample_rate: float, gen: torch.Generator) -> torch.Tensor:
    """Indices (ascending) of the records in one Poisson-sampled batch: n float64 draws."""
    return (torch.rand(n, generator=gen, dtype=DTYPE) < sample_rate).nonzero().flatten()


def clip_factors(norms: torch.Tensor, clip: float) -> torch.Tensor:
    """min(1, clip / ||g_i||): the per-sample factors that bring l2 norms to at most ``clip``."""
    return (clip / norms.clamp(min=1e-12)).clamp(max=1.0)


def dpsgd_steps(*, n: int, steps: int, sample_rate: float, clip: float, sigma: float,
                clipped_grad_sum: Callable[[torch.Tensor, torch.Generator], dict[str, torch.Tensor]],
                apply_update: Callable[[dict[str, torch.Tensor], float], None],
                generator_at: Callable[[int], torch.Generator], start: int = 0,
                after_step: Callable[[int], None] | None = None) -> None:
    """Steps ``start..steps-1`` of DP-SGD (see the module docstring).

    ``clipped_grad_sum(indices, gen)`` returns, per trainable tensor, the sum over the sampled
    records of their gradients clipped jointly to l2 norm ``clip`` (zeros for an empty batch);
    ``apply_update(noisy_sum, expected_batch)`` applies the update (the private gradient is
    ``noisy_sum / expected_batch``); ``generator_at(t)`` is step t's generator (the same one for
    every step, or one per step for resumable runs); ``after_step(t + 1)`` runs after each step.
    """
    std = sigma * clip
    expected_batch = sample_rate * n
    for t in range(start, steps):
        gen = generator_at(t)
        total = clipped_grad_sum(poisson_indices(n, sample_rate, gen), gen)
        noisy = {k: v + std * noise.gaussian(gen, v.shape).to(v.dtype) for k, v in total.items()}
        apply_update(noisy, expected_batch)
        if after_step is not None:
            after_step(t + 1)


def train_dpsgd(model, theta0: torch.Tensor, x: torch.Tensor, y: torch.Tensor, *, lr: float, clip: float,
                sigma: float, sample_rate: float, steps: int, gen: torch.Generator) -> torch.Tensor:
    """DP-SGD of a flat-parameter certdp model (``per_sample_grads``): ``steps`` steps of
    theta <- theta - lr * (clipped sum + N(0, (sigma clip)^2)) / (q N) from ``theta0`` [P],
    all draws from ``gen``.  Returns the final parameters [P]."""
    state = {"theta": theta0.to(DTYPE).clone()}

    def clipped_grad_sum(idx: torch.Tensor, _gen) -> dict[str, torch.Tensor]:
        theta = state["theta"]
        if not len(idx):
            return {"theta": torch.zeros_like(theta)}
        g = model.per_sample_grads(theta, x[idx], y[idx])
        return {"theta": (g * clip_factors(g.norm(dim=-1, keepdim=True), clip)).sum(0)}

    def apply_update(noisy: dict[str, torch.Tensor], expected_batch: float) -> None:
        state["theta"] = state["theta"] - lr * noisy["theta"] / expected_batch

    with checkpoint.current().loop("dpsgd", total=steps) as lp:
        if lp.state is not None:                  # resumed: the trajectory and the generator as saved
            state["theta"] = lp.state["theta"].to(state["theta"].device)
            lp.generator(gen)

        def carried():
            return {"theta": state["theta"], "gen": gen}

        dpsgd_steps(n=x.shape[0], steps=steps, sample_rate=sample_rate, clip=clip, sigma=sigma,
                    clipped_grad_sum=clipped_grad_sum, apply_update=apply_update, generator_at=lambda _t: gen,
                    start=lp.step, after_step=lambda t: lp.tick(t, carried))
        lp.finish(carried)
    return state["theta"]
