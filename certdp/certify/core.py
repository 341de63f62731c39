"""Nominal training, envelopes and the two staircases (prediction and parameter), with the
finite checks at each boundary: a non-finite value is a one-line refusal naming where it arose,
never a number written to a results file."""

from __future__ import annotations

import time

import torch

from certdp import DTYPE
from certdp.agt import Envelopes, run_agt
from certdp.bounds import check_supported, get_certificate
from certdp.bounds.base import Certificate
from certdp.bounds.interval import Interval
from certdp.certify.experiment import Experiment, diverged_at, require_finite
from certdp.errors import ConfigError
from certdp.models import ModelSpec
from certdp.privacy.sensitivity import Staircase, staircase
from certdp.training import TrainSettings, train


# --------------------------------------------------------------------------- training
def nominal(exp: Experiment, theta0: torch.Tensor | None = None) -> torch.Tensor:
    """The nominal algorithm's parameters M(f, theta_init, D) [P]; a run whose parameters stop
    being finite is refused naming the step (lower ``train.lr``)."""
    theta0 = exp.model.init(exp.train.seed) if theta0 is None else theta0
    x, y, plan = exp.on_device
    theta = train(exp.model, theta0, x, y, exp.train, plan=plan, device=exp.device, resumable="nominal").cpu()
    if not torch.isfinite(theta).all():
        t = diverged_at(exp, theta0)
        raise ConfigError("train.lr", f"training diverged at step {t}: parameters not finite; "
                                      f"allowed: a smaller train.lr")
    return theta


def envelopes(exp: Experiment, *, theta_start: torch.Tensor | None = None, window: tuple[int, int] | None = None,
              progress: bool = False, check: bool = True) -> Envelopes:
    """AGT envelopes T_k for every radius of ``exp.ks``, from ``theta_start`` (default the
    initialisation) over the whole run or one ``window`` of steps [a, b) of the batch plan,
    computed on ``exp.device`` and returned on the CPU (an exact copy of the float64 boxes).
    Non-finite envelopes are refused unless ``check`` is false (the audit counts them as
    violations instead)."""
    theta0 = exp.model.init(exp.train.seed) if theta_start is None else theta_start
    x, y, plan = exp.on_device
    env = run_agt(exp.model, theta0, x, y, exp.train, exp.ks, certificate=exp.engine, plan=plan,
                  progress=progress, steps=None if window is None else range(*window), device=exp.device,
                  resumable="agt")
    env = Envelopes(env.k_values.cpu(), env.lo.cpu(), env.hi.cpu(), env.nominal.cpu())
    if not torch.isfinite(env.nominal).all():
        t = diverged_at(exp, theta0)
        raise ConfigError("train.lr", f"training diverged at step {t}: parameters not finite; "
                                      f"allowed: a smaller train.lr")
    bad = ~(torch.isfinite(env.lo) & torch.isfinite(env.hi)).all(-1)
    if check and bad.any():
        k = int(env.k_values[bad.nonzero()[0, 0]])
        require_finite(torch.tensor(float("nan")), what=f"the envelope T_{k} (radius {k}) is")
    return env


# --------------------------------------------------------------------------- prediction
def trajectory_ceiling(settings: TrainSettings) -> float:
    """Largest change of any parameter coordinate between the runs on two datasets that
    differ in one record, for the nominal algorithm with element-wise clipping.

    Once the substituted record has entered a batch the two trajectories separate, and from
    then on *every* sample's clipped gradient may differ (they are evaluated at different
    parameters), so a step can move a coordinate apart by up to lr * 2*gamma (the mean of b
    differences each in [-2 gamma, 2 gamma]); earlier differences are contracted by lambda:
    c = sum_t lr * 2 gamma * lambda^(T-1-t).  (Counting only the steps that contain the
    substituted record, 2 gamma / b each, would ignore that divergence and is not sound.)"""
    T = settings.steps
    lam = torch.as_tensor(settings.contraction, dtype=DTYPE) ** torch.arange(T - 1, -1, -1, dtype=DTYPE)
    return float((settings.lr * 2 * settings.clip * lam).sum())


def global_sensitivity(exp: Experiment, xt: torch.Tensor | None = None) -> torch.Tensor | None:
    """Per-test-point global (l1) sensitivity of the released prediction, or None.

    ``range``: the width of the output range (the released value is the prediction clipped to
    it).  ``trajectory``: for a linear model f = w.x + b, sum_j c |x_j| + c with c the
    trajectory ceiling.  ``min``: the smaller of the available ones.  ``none``: no GS."""
    xt = exp.xt if xt is None else xt
    mode = exp.privacy.global_sensitivity
    rng = exp.dataset.output_range
    n = xt.shape[0]
    cands = []
    if mode in ("range", "min") and rng is not None:
        cands.append(torch.full((n,), float(rng[1] - rng[0]), dtype=DTYPE))
    if mode in ("trajectory", "min"):
        if exp.model.n_layers != 1 or exp.model.widths[-1] != 1:
            if mode == "trajectory":
                raise ConfigError("privacy.global_sensitivity", "trajectory is only defined for a linear model; "
                                                                "allowed: range, none")
        else:
            c = trajectory_ceiling(exp.train)
            cands.append(c * (xt.abs().sum(-1) + 1))
    if mode == "range" and rng is None:
        raise ConfigError("privacy.global_sensitivity", "range needs dataset.output_range; allowed: trajectory (linear model), "
                                                            "none, or range with dataset.output_range set")
    if not cands:
        return None
    out = cands[0]
    for c in cands[1:]:
        out = torch.minimum(out, c)
    require_finite(out, what="the global sensitivity is", key="dataset.output_range",
                   allowed="a finite output range, or privacy.global_sensitivity=range with one")
    return out


def check_prediction_radii(exp: Experiment, gs: torch.Tensor | None) -> None:
    """Before any training: without a global sensitivity the radii must reach N (T_N is the
    ceiling of the staircase)."""
    if gs is None and exp.ks[-1] < exp.n_train:
        raise ConfigError("staircase", f"the radii stop at {exp.ks[-1]} < N={exp.n_train} and the output has no "
                          "global sensitivity; allowed: radii up to N (staircase.include_n=true) or an output range "
                          "(dataset.output_range)")


def prediction_staircase(exp: Experiment, env: Envelopes, xt: torch.Tensor | None = None, *, check: bool = True):
    """The per-test-point staircase of the clipped prediction and the released prediction [n].

    Non-finite values are refused unless ``check`` is false.  The released prediction is the bound of the same (inclusion-monotone) forward pass over the
    nominal point box, so that it lies in the query bounds of every box containing the nominal
    (the smoothness proof's T_0, privacy/sensitivity.py); it equals model.forward up to rounding."""
    xt = exp.xt if xt is None else xt
    bound = exp.engine.output_bounds
    dev, xd = exp.device, xt.to(exp.device)
    # the engine's output pass on the device; the staircase itself on the CPU ([K, n] numbers)
    out = bound(exp.model, Interval(env.lo.to(dev), env.hi.to(dev)), xd)          # [K, n, 1]
    out = Interval(out.lo.cpu(), out.hi.cpu())
    nom = env.nominal.to(dev).unsqueeze(0)
    p0 = bound(exp.model, Interval(nom, nom), xd)
    p_lo, p_hi = p0.lo[0].cpu(), p0.hi[0].cpu()                                     # [n, 1]
    rng = exp.dataset.output_range
    lo, hi = out.lo, out.hi
    if rng is not None:
        lo, hi, p_lo, p_hi = lo.clamp(*rng), hi.clamp(*rng), p_lo.clamp(*rng), p_hi.clamp(*rng)
    gs = global_sensitivity(exp, xt)
    sc = staircase(lo, hi, (p_lo, p_hi), env.k_values, n_total=exp.n_train, global_sensitivity=gs)
    if check:
        require_finite(sc.a_bar, what="the sensitivity staircase (unbounded output intervals) is")
    return sc, p_lo.squeeze(-1)


def certify_predictions(exp: Experiment, *, progress: bool = False):
    """Envelopes and the per-test-point staircase: ``(env, staircase, prediction, timing)``."""
    t0 = time.perf_counter()
    env = envelopes(exp, progress=progress)
    t_agt = time.perf_counter() - t0
    sc, pred = prediction_staircase(exp, env)
    return env, sc, pred, {"agt_seconds": t_agt, "radii": len(exp.ks), "k_max": exp.ks[-1]}


def draw_errors(draw, *, n: int, n_draws: int, target: torch.Tensor, output_range) -> tuple[float, float]:
    """MAE and MSE over ``n_draws`` draws of ``n`` released values: ``draw(m)`` returns ``m``
    draws [m, n] (unclipped), taken in chunks of about 4e6 values, then clipped to
    ``output_range`` and compared with ``target`` [n]."""
    abs_sum, sq_sum = 0.0, 0.0
    chunk = max(1, int(4e6 // max(n, 1)))
    done = 0
    while done < n_draws:
        m = min(chunk, n_draws - done)
        r = draw(m)
        if output_range is not None:
            r = r.clamp(float(output_range[0]), float(output_range[1]))
        err = r - target
        abs_sum += float(err.abs().sum())
        sq_sum += float((err ** 2).sum())
        done += m
    tot = n * n_draws
    return abs_sum / tot, sq_sum / tot


def release_errors(pred: torch.Tensor, target: torch.Tensor, scale: torch.Tensor, mech,
                   n_draws: int, gen: torch.Generator, output_range) -> tuple[float, float]:
    """MAE and MSE of ``clip(pred + scale * Z)`` over ``n_draws`` draws per point (chunked)."""
    require_finite(scale, what=f"the noise scale of {mech.name} at eps={mech.epsilon:g} is")
    n = pred.shape[0]
    return draw_errors(lambda m: pred + scale * mech.sample(gen, (m, n)), n=n, n_draws=n_draws, target=target,
                       output_range=output_range)


# --------------------------------------------------------------------------- parameters
def trivial_cover(settings: TrainSettings, n_params: int, window: tuple[int, int]) -> float:
    """l1 distance bound between any two runs of the window [a, b) from the same start: every
    clipped gradient coordinate lies in [-gamma, gamma], so per coordinate and step two runs
    separate by at most lam*|diff| + 2 gamma lr; P * 2 gamma lr sum_t lam^(b-1-t) (T_N's width)."""
    a, b = window
    lam = settings.contraction
    per_coord = 2 * settings.clip * settings.lr * sum(lam ** (b - 1 - t) for t in range(a, b))
    return n_params * per_coord


def parameter_staircase(env: Envelopes, *, n_total: int, cover: float, weights: torch.Tensor | None = None,
                        key: str = "train.lr", allowed: str | None = None) -> Staircase:
    """The sound-bounding staircase of the parameter vector (query = theta, l1 over coordinates),
    capped by the global ``cover``.  ``weights`` [P] (> 0, data-independent): the staircase of
    theta / weights (an anisotropic release adds weights * noise; ``cover`` is then in those
    units).  A non-finite staircase is refused naming ``key``."""
    lo, hi, nom = (env.lo, env.hi, env.nominal) if weights is None else (env.lo / weights, env.hi / weights,
                                                                        env.nominal / weights)
    sc = staircase(lo, hi, nom, env.k_values, n_total=n_total, global_sensitivity=cover)
    require_finite(sc.a_bar, what="the parameter staircase is", key=key,
                   **({} if allowed is None else {"allowed": allowed}))
    return sc


def build_engine(name: str, *, model: ModelSpec | None = None, **options) -> Certificate:
    """The certificate engine ``name`` with its ``certificate.<opt>`` ``options``, checked to bound
    ``model``: where a runner without an :class:`Experiment` (the hybrid's head) gets its engine."""
    engine = get_certificate(name, **options)
    if model is not None:
        check_supported(engine, model)
    return engine


def model_envelopes(model: ModelSpec, theta0: torch.Tensor, x: torch.Tensor, y: torch.Tensor, settings: TrainSettings,
                    ks: list[int], *, engine: Certificate, progress: bool = False,
                    resumable: str | None = None) -> Envelopes:
    """AGT envelopes T_k (radii ``ks``) of ``model`` trained from ``theta0`` on (x, y) -- data
    outside an :class:`Experiment` (the hybrid's head on encoder features), on x's device;
    ``resumable`` names the checkpointed loop (:mod:`certdp.checkpoint`)."""
    return run_agt(model, theta0, x, y, settings, ks, certificate=engine, progress=progress, resumable=resumable)


def certify_window(exp: Experiment, theta_start: torch.Tensor, window: tuple[int, int], *,
                   progress: bool = False) -> tuple[Envelopes, Staircase]:
    """Envelopes of one window of steps started from the point ``theta_start`` (collapsed
    envelopes: a previous release is already paid for) and their parameter staircase."""
    env = envelopes(exp, theta_start=theta_start, window=window, progress=progress)
    sc = parameter_staircase(env, n_total=exp.n_train, cover=trivial_cover(exp.train, exp.model.n_params, window))
    return env, sc
