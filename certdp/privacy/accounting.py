"""Privacy accounting: amplification by subsampling and composition of several releases.

Adjacency everywhere is *substitution* of one record in a dataset of fixed size (d(D, D') = 1),
the paper's relation.  Budgets are (epsilon, delta) pairs with epsilon in nats (>= 0) and delta a
probability in [0, 1); "pure" means delta = 0.  Every function is keyword-only, validates its
input (``ValueError``) and returns plain floats.

Amplification (paper Lemma 3.1; Balle, Barthe, Gaboardi 2018, Theorem 9).  Running an
(eps_b, delta_b)-DP mechanism on a uniformly random subset of m of the N records (sampling
without replacement, q = m/N, the subset kept secret) is

    ( ln(1 + q (e^eps_b - 1)),  q delta_b )-DP                     (:func:`amplify_wor`)

with respect to the full dataset under substitution.  Inverting it, a target (eps, delta) is met
by eps_b = ln(1 + (e^eps - 1)/q), delta_b = delta/q (:func:`base_budget_wor`); delta_b must stay
below 1 for the base mechanism to mean anything.

Composition of n releases, each (eps0, delta0)-DP (adaptively chosen):

* basic:    (n eps0, n delta0)                                       (:func:`compose_basic`)
* advanced: (eps0 sqrt(2 n ln(1/delta')) + n eps0 (e^eps0 - 1), n delta0 + delta')
            for any delta' > 0 (Dwork, Rothblum, Vadhan 2010)         (:func:`compose_advanced`)
* optimal:  the exact privacy profile of the n-fold composition (Kairouz, Oh, Viswanath 2015,
            Theorem 3.3, in the continuous form of Murtagh & Vadhan 2016): the composition is
            (eps, delta)-DP iff  delta >= 1 - (1 - delta0)^n (1 - delta_hom(eps)),

                delta_hom(eps) = sum_{l=0}^{n} Binom(l; n, 1/(1+e^eps0)) [1 - e^{eps - (n-2l) eps0}]_+ ,

            i.e. the hockey-stick divergence of n-fold randomised response, whose privacy loss is
            (n - 2l) eps0 with l ~ Binomial(n, 1/(1+e^eps0)).  At eps = (n - 2i) eps0 this is
            Kairouz et al.'s delta_i.  :func:`compose_optimal` returns the smallest such eps,
            :func:`optimal_per_release_epsilon` the largest eps0 whose composition fits a total.
* numerical: n Laplace releases composed with privacy-loss distributions (``dp_accounting``'s
            PLD accountant, pessimistic discretisation: the epsilon it returns is an upper bound)
            (:func:`pld_laplace_epsilon`).

Accountants (AGS budgets and DP-SGD calibration): one interface and one registry, at the end.
"""

from __future__ import annotations

import math
import warnings
from typing import ClassVar

import numpy as np

from certdp.privacy.calibrate import largest
from certdp.registry import Registry


# math.exp overflows float64 above ~709.78: compositions that need e^eps0 stop short of it.
MAX_EXP_ARG = 700.0


def _float(name: str, v, what: str = "a number") -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be {what} (got {v!r})") from None


def _check_eps(name: str, v: float, *, allow_zero: bool = True) -> float:
    v = _float(name, v)
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise ValueError(f"{name} must be a finite number {'>=' if allow_zero else '>'} 0 (got {v})")
    return v


def _check_delta(name: str, v: float, *, allow_zero: bool = True) -> float:
    v = _float(name, v)
    if not (0 <= v < 1) or (v == 0 and not allow_zero):
        raise ValueError(f"{name} must be in {'[0' if allow_zero else '(0'}, 1) (got {v})")
    return v


def _check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n (the number of composed releases) must be an integer >= 1 (got {n!r})")
    return int(n)


def _check_q(q: float) -> float:
    q = _float("q", q, "a number in (0, 1]")
    if not 0 < q <= 1:
        raise ValueError(f"q (the sampling fraction m/N) must be in (0, 1] (got {q})")
    return q


# ------------------------------------------------------------------ amplification (Lemma 3.1)

def amplify_wor(*, epsilon_base: float, delta_base: float = 0.0, q: float) -> tuple[float, float]:
    """Guarantee of an (eps_b, delta_b)-DP mechanism run on a secret uniformly random subset of
    m = qN records (without replacement), w.r.t. the full dataset under substitution:
    ``(ln(1 + q (e^eps_b - 1)), q delta_b)`` (paper Lemma 3.1)."""
    eb = _check_eps("epsilon_base", epsilon_base)
    db = _check_delta("delta_base", delta_base)
    q = _check_q(q)
    return math.log1p(q * math.expm1(eb)), q * db


def base_budget_wor(*, epsilon: float, delta: float = 0.0, q: float) -> tuple[float, float]:
    """Base budget (eps_b, delta_b) that a mechanism on a q-subsample may spend so that the
    subsampled mechanism is (eps, delta)-DP: ``eps_b = ln(1 + (e^eps - 1)/q)``,
    ``delta_b = delta/q`` (the inverse of :func:`amplify_wor`).  Raises ``ValueError`` when
    delta/q >= 1, where no base mechanism can be calibrated."""
    e = _check_eps("epsilon", epsilon)
    d = _check_delta("delta", delta)
    q = _check_q(q)
    db = d / q
    if db >= 1:
        raise ValueError(f"delta/q = {d:g}/{q:g} = {db:g} >= 1: the amplified base budget is meaningless; "
                         "use fewer shards (larger q) or a smaller delta")
    # log1p(expm1(e)/q) loses nothing for small e; for large e use e + log(1/q) + log1p(...)
    x = math.expm1(e) / q if e < 700 else math.inf
    eb = math.log1p(x) if math.isfinite(x) else e - math.log(q)
    return eb, db


# ------------------------------------------------------------------ composition

def compose_basic(*, epsilon: float, delta: float = 0.0, n: int) -> tuple[float, float]:
    """Basic composition of n (eps0, delta0)-DP releases: ``(n eps0, n delta0)`` (delta capped
    at 1)."""
    e = _check_eps("epsilon", epsilon)
    d = _check_delta("delta", delta)
    n = _check_n(n)
    return n * e, min(1.0, n * d)


def compose_advanced(*, epsilon: float, delta: float = 0.0, n: int, delta_prime: float) -> tuple[float, float]:
    """Advanced composition (Dwork, Rothblum, Vadhan 2010; Dwork & Roth Thm 3.20): n adaptive
    (eps0, delta0)-DP releases are
    ``(eps0 sqrt(2 n ln(1/delta')) + n eps0 (e^eps0 - 1),  n delta0 + delta')``-DP for any
    delta' in (0, 1)."""
    e = _check_eps("epsilon", epsilon)
    d = _check_delta("delta", delta)
    n = _check_n(n)
    dp = _check_delta("delta_prime", delta_prime, allow_zero=False)
    # e^eps0 overflows float64 above ~709: the bound is then infinite (no finite guarantee)
    eps = e * math.sqrt(2 * n * math.log(1 / dp)) + n * e * (math.expm1(e) if e < MAX_EXP_ARG else math.inf)
    return eps, min(1.0, n * d + dp)


def _log_binom_pmf(n: int, log_p: float, log_q: float) -> np.ndarray:
    """log P(l flips of n), flip probability e^log_p, no-flip e^log_q (logs: e^log_p may underflow)."""
    from scipy.special import gammaln
    l = np.arange(n + 1, dtype=np.float64)
    return gammaln(n + 1) - gammaln(l + 1) - gammaln(n - l + 1) + l * log_p + (n - l) * log_q


def optimal_delta(*, epsilon0: float, delta0: float = 0.0, n: int, epsilon: float) -> float:
    """The smallest delta such that every n-fold composition of (eps0, delta0)-DP mechanisms is
    (eps, delta)-DP (Kairouz, Oh, Viswanath 2015, Theorem 3.3; exact, attained by randomised
    response): ``1 - (1 - delta0)^n (1 - delta_hom(eps))``."""
    e0 = _check_eps("epsilon0", epsilon0)
    d0 = _check_delta("delta0", delta0)
    n = _check_n(n)
    e = _check_eps("epsilon", epsilon)
    return 1.0 - (1.0 - d0) ** n * (1.0 - _delta_hom(e0, n, e))


def _delta_hom(e0: float, n: int, eps: float) -> float:
    if e0 == 0:
        return 0.0
    # flip probability of randomised response 1/(1 + e^eps0), in logs: it underflows to 0 above
    # eps0 ~ 745, where log(0) would fail
    log_q = -math.log1p(math.exp(-e0))
    logw = _log_binom_pmf(n, -e0 + log_q, log_q)
    loss = (n - 2 * np.arange(n + 1)) * e0
    pos = loss > eps
    if not pos.any():
        return 0.0
    w = np.exp(logw[pos])
    return float(np.sum(w * -np.expm1(eps - loss[pos])))


def compose_optimal(*, epsilon: float, delta: float = 0.0, n: int, target_delta: float) -> float:
    """Optimal homogeneous composition: the smallest eps such that n adaptive (eps0, delta0)-DP
    releases (eps0 = ``epsilon``, delta0 = ``delta``) are (eps, target_delta)-DP (Kairouz, Oh,
    Viswanath 2015, Theorem 3.3 -- exact, so never larger than the basic or advanced bound).

    Raises ``ValueError`` if target_delta < 1 - (1 - delta0)^n, which no eps can reach."""
    e0 = _check_eps("epsilon", epsilon)
    d0 = _check_delta("delta", delta)
    n = _check_n(n)
    td = _check_delta("target_delta", target_delta)
    floor = 1.0 - (1.0 - d0) ** n
    if td < floor - 1e-15:
        raise ValueError(f"target_delta={td:g} is below 1-(1-delta0)^n = {floor:g}: unreachable at any epsilon")
    # delta_hom(eps) must be <= 1 - (1 - td)/(1 - d0)^n =: h (decreasing in eps, 0 at n*eps0)
    h = 1.0 - (1.0 - td) / (1.0 - d0) ** n
    if h <= 0:
        return n * e0
    if _delta_hom(e0, n, 0.0) <= h:
        return 0.0
    # delta_hom is continuous and decreasing in eps: bisection, returning the upper end (whose
    # delta_hom <= h), so the epsilon reported is always a valid guarantee.
    lo, hi = 0.0, n * e0
    for _ in range(200):
        mid = (lo + hi) / 2
        if _delta_hom(e0, n, mid) > h:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * max(1.0, hi):
            break
    return hi


def optimal_per_release_epsilon(*, epsilon: float, delta: float, n: int, delta0: float = 0.0) -> float:
    """Inverse of :func:`compose_optimal`: the largest per-release eps0 such that n adaptive
    (eps0, delta0)-DP releases are (eps, delta)-DP under optimal composition (bisection on the
    monotone map eps0 -> compose_optimal; the result is rounded down, so it is always safe).
    At least eps/n (basic composition) whenever delta >= 1 - (1 - delta0)^n."""
    e = _check_eps("epsilon", epsilon, allow_zero=False)
    d = _check_delta("delta", delta)
    n = _check_n(n)
    d0 = _check_delta("delta0", delta0)
    if d < 1.0 - (1.0 - d0) ** n - 1e-15:
        raise ValueError(f"delta={d:g} is below 1-(1-delta0)^n = {1.0 - (1.0 - d0) ** n:g}: no eps0 fits")

    def fits(e0: float) -> bool:
        return compose_optimal(epsilon=e0, delta=d0, n=n, target_delta=d) <= e

    lo = e / n                       # basic composition always fits
    hi = max(e, lo) * 2
    while fits(hi):
        lo, hi = hi, hi * 2
        if hi > 1e6:
            return lo
    for _ in range(200):
        mid = (lo + hi) / 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return lo


def pld_laplace_epsilon(*, scale: float, n: int, delta: float, sensitivity: float = 1.0,
                        discretization: float = 1e-4) -> float:
    """Epsilon of n composed Laplace releases (noise scale ``scale`` on a query of l1 sensitivity
    ``sensitivity`` under substitution) at the given delta, by numerical composition of
    privacy-loss distributions (``dp_accounting`` PLD accountant).

    The Laplace PLD depends only on the ratio scale/sensitivity (the dominating pair is
    Lap(0, b) vs Lap(Delta, b)), so the accountant's add/remove-one Laplace event with noise
    multiplier scale/sensitivity is exactly the substitution mechanism.  The accountant's
    discretisation is pessimistic: the epsilon returned is an upper bound.  The accountant
    truncates the loss distribution's tails (their mass counts as infinite loss), so ask for a
    small delta > 0 rather than 0, which returns inf."""
    b = _check_eps("scale", scale, allow_zero=False)
    s = _check_eps("sensitivity", sensitivity, allow_zero=False)
    n = _check_n(n)
    d = _check_delta("delta", delta)
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=float(discretization))
    acc.compose(dp_event.LaplaceDpEvent(noise_multiplier=b / s), n)
    return float(acc.get_epsilon(d))


def pld_epsilon(*, epsilon0: float, delta0: float, n: int, delta: float) -> float:
    """Epsilon at total ``delta`` of n adaptively composed (eps0, delta0)-DP releases, by
    numerical composition (``dp_accounting`` PLD, pessimistic discretisation) of the
    (eps0, delta0) dominating pair; the pairs' delta0 mass is inside the PLD.  Used for releases
    whose noise scale is data-dependent (AGS), where no mechanism-specific PLD applies."""
    e0 = _check_eps("epsilon0", epsilon0, allow_zero=False)
    d0 = _check_delta("delta0", delta0)
    n = _check_n(n)
    d = _check_delta("delta", delta)
    if e0 >= MAX_EXP_ARG:
        # e^eps0 overflows float64 (the PLD of the pair needs it): no finite composed epsilon is
        # certified, so the caller (a bisection for the largest per-release eps0) treats it as too large
        return math.inf
    from dp_accounting.pld import common, privacy_loss_distribution as pld
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        # overflow in dp_accounting's tail-mass logs at large eps0: it handles the inf itself
        warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"dp_accounting\.")
        try:
            p = pld.from_privacy_parameters(common.DifferentialPrivacyParameters(e0, d0),
                                            value_discretization_interval=min(1e-4, e0 / 200))
            return float(p.self_compose(n).get_epsilon_for_delta(d))
        except OverflowError:         # a tail computation beyond float64: as above
            return math.inf


# ------------------------------------------------------------------ accountants (one interface)
#
# An accountant answers certdp's privacy questions (substitution of one record): ``compose``
# (``ags.composition``): ``per_release``, the (eps0, delta0) each of n adaptive releases may spend
# for (eps, delta) in total; ``dpsgd`` (``dpsgd.optimised.accountants``, ``dpsgd.accountant``;
# the mechanism in certdp/privacy/dpsgd_core.py): ``dpsgd_epsilon`` of Poisson-sampled Gaussian
# steps and the ``dpsgd_noise_multiplier`` meeting a target.  A subclass with a ``name`` registers
# itself (a name another holds is refused); ``uses``: the questions whose methods it implements.

USES = ("compose", "dpsgd")
_METHODS = {"compose": ("per_release",), "dpsgd": ("dpsgd_epsilon", "dpsgd_noise_multiplier")}
ACCOUNTANTS: Registry[type["Accountant"]] = Registry("accountant")


class Accountant:
    """The accountant interface (module comment above): ``per_release`` for AGS budgets,
    ``dpsgd_epsilon`` / ``dpsgd_noise_multiplier`` for DP-SGD; ``uses`` says which it answers."""

    name: ClassVar[str] = ""
    uses: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        cls.uses = tuple(u for u in USES if all(getattr(cls, m) is not getattr(Accountant, m) for m in _METHODS[u]))
        if cls.name:
            ACCOUNTANTS[cls.name] = cls

    def per_release(self, *, epsilon: float, delta: float, n: int) -> tuple[float, float]:
        """(eps0, delta0) for each of n releases so that they compose to (epsilon, delta)."""
        raise NotImplementedError(f"accountant '{self.name}' does not implement per_release")

    def dpsgd_epsilon(self, *, sigma: float, delta: float, sample_rate: float, steps: int) -> float:
        """Substitution epsilon at ``delta`` of ``steps`` Poisson-sampled Gaussian steps (noise
        multiplier ``sigma``, sampling rate ``sample_rate``)."""
        raise NotImplementedError(f"accountant '{self.name}' does not account DP-SGD")

    def dpsgd_noise_multiplier(self, *, epsilon: float, delta: float, sample_rate: float, steps: int) -> float:
        """The smallest sigma (to a tolerance) with ``dpsgd_epsilon`` <= epsilon; ValueError if none."""
        raise NotImplementedError(f"accountant '{self.name}' does not account DP-SGD")


def accountant_names(use: str) -> tuple[str, ...]:
    """The registered accountants that answer ``use`` (``compose`` or ``dpsgd``), in registry order."""
    if use not in USES:
        raise ValueError(f"unknown accountant use {use!r}; allowed: {', '.join(USES)}")
    return tuple(n for n, cls in ACCOUNTANTS.items() if use in cls.uses)


def get_accountant(name: str, *, use: str) -> Accountant:
    """The accountant ``name``, checked to answer ``use``; ``ValueError`` naming the allowed ones."""
    allowed = accountant_names(use)
    if name not in allowed:
        what = "DP-SGD accountant" if use == "dpsgd" else "accountant"
        raise ValueError(f"unknown {what} {name!r}; allowed: {', '.join(allowed)}")
    return ACCOUNTANTS[name]()


def _bisect(ok, lo: float, hi: float, iters: int = 60) -> float:
    """Largest x in [lo, hi] with ok(x) (ok monotone: true below a threshold); 0 if none."""
    return largest(ok, lo, hi, iters)


class Basic(Accountant):
    """Basic composition: eps0 = eps/n, delta0 = delta/n (valid for pure and approximate DP)."""
    name = "basic"

    def per_release(self, *, epsilon, delta, n):
        return epsilon / n, delta / n


class _SplitDelta(Accountant):
    """delta0 = delta/(2n) to the releases, the slack delta/2 to the composition; eps0 the
    largest the composition allows, never below the basic split (basic is always valid).
    Pure DP (delta = 0) composes by basic composition only."""

    def per_release(self, *, epsilon, delta, n):
        basic = (epsilon / n, delta / n)
        if n == 1 or delta == 0:
            return basic
        d0 = delta / (2 * n)
        e0 = self.epsilon0(epsilon=epsilon, delta=delta, n=n, delta0=d0)
        return (e0, d0) if e0 > basic[0] else basic

    def epsilon0(self, *, epsilon, delta, n, delta0) -> float:
        raise NotImplementedError


class Advanced(_SplitDelta):
    """Advanced composition (Dwork, Rothblum & Vadhan 2010), inverted by bisection."""
    name = "advanced"

    def epsilon0(self, *, epsilon, delta, n, delta0):
        return _bisect(lambda e: compose_advanced(epsilon=e, delta=delta0, n=n, delta_prime=delta / 2)[0] <= epsilon,
                       0.0, epsilon)


class Optimal(_SplitDelta):
    """Optimal homogeneous composition (Kairouz, Oh & Viswanath 2015), exact inverse."""
    name = "optimal"

    def epsilon0(self, *, epsilon, delta, n, delta0):
        return optimal_per_release_epsilon(epsilon=epsilon, delta=delta, n=n, delta0=delta0)


# dp-accounting's value_discretization_interval for DP-SGD: pessimistic, so an upper bound at any
# interval; 1e-3 is 10x faster than 1e-4 and moves sigma less than the bisection's 0.1% tolerance.
PLD_DISCRETISATION = 1e-3


class PLD(_SplitDelta):
    """Privacy-loss distributions (dp-accounting, pessimistic): AGS budgets by numerical composition
    of the (eps0, delta0) dominating pairs (inverted by bisection); DP-SGD with the exact replace-one
    PLD of the Poisson-subsampled Gaussian (dpsgd_core.py)."""
    name = "pld"

    def epsilon0(self, *, epsilon, delta, n, delta0):
        return _bisect(lambda e: pld_epsilon(epsilon0=e, delta0=delta0, n=n, delta=delta) <= epsilon,
                       epsilon / n, epsilon, iters=25)

    def dpsgd_epsilon(self, *, sigma, delta, sample_rate, steps):
        from dp_accounting import dp_event
        from dp_accounting.pld import PLDAccountant
        from dp_accounting.privacy_accountant import NeighboringRelation
        acc = PLDAccountant(neighboring_relation=NeighboringRelation.REPLACE_ONE,
                            value_discretization_interval=PLD_DISCRETISATION)
        acc.compose(dp_event.PoissonSampledDpEvent(sample_rate, dp_event.GaussianDpEvent(sigma)), steps)
        return float(acc.get_epsilon(delta))

    def dpsgd_noise_multiplier(self, *, epsilon, delta, sample_rate, steps):
        def eps(sigma: float) -> float:     # decreasing in sigma: bisection on sigma
            return self.dpsgd_epsilon(sigma=sigma, delta=delta, sample_rate=sample_rate, steps=steps)
        lo, hi = 1e-2, 1.0
        while eps(hi) > epsilon:
            lo, hi = hi, 2 * hi
            if hi > 1e6:
                raise ValueError(f"no noise multiplier below 1e6 gives epsilon {epsilon} at delta {delta}")
        while hi - lo > 1e-3 * hi:
            mid = (lo + hi) / 2
            if eps(mid) > epsilon:
                lo = mid
            else:
                hi = mid
        return float(hi)


def group_budget(epsilon: float, delta: float) -> tuple[float, float]:
    """The add/remove budget (eps_a, delta_a) whose group-privacy bound for a substitution
    (k = 2: (2 eps_a, (1 + e^{eps_a}) delta_a)) is exactly (epsilon, delta)."""
    return epsilon / 2, delta / (1 + math.exp(epsilon / 2))


class _Opacus(Accountant):
    """An Opacus add/remove accountant made substitution-adjacent by group privacy (k = 2)."""

    def _add_remove_epsilon(self, sigma: float, delta: float, sample_rate: float, steps: int) -> float:
        from opacus.accountants import create_accountant              # seconds to import: only when accounting
        acc = create_accountant(self.name)
        acc.history = [(sigma, sample_rate, steps)]
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Optimal order is the", category=UserWarning)
            warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"opacus\.")
            return float(acc.get_epsilon(delta=delta))

    def dpsgd_epsilon(self, *, sigma, delta, sample_rate, steps):
        # the smallest e with 2 eps_a(delta / (1 + e^{e/2})) <= e: substitution delta <= delta
        def g(e: float) -> float:       # increasing in e: a larger e leaves a smaller delta_a
            return 2 * self._add_remove_epsilon(sigma, delta / (1 + math.exp(e / 2)), sample_rate, steps)

        e = g(0.0)
        for _ in range(60):
            nxt = g(e)
            if nxt <= e:
                return float(e)
            e = nxt * (1 + 1e-6) + 1e-9
        return float(e * 1.01) if g(e * 1.01) <= e * 1.01 else math.inf

    def dpsgd_noise_multiplier(self, *, epsilon, delta, sample_rate, steps):
        from opacus.accountants.utils import get_noise_multiplier     # seconds to import: only when calibrating
        eps_a, delta_a = group_budget(epsilon, delta)
        with warnings.catch_warnings():
            # RDP's "optimal order is the largest/smallest alpha": the bound is still valid (only
            # looser than with a wider alpha grid); not worth a warning per grid point.
            warnings.filterwarnings("ignore", message="Optimal order is the", category=UserWarning)
            # PRV at large epsilon overflows in an intermediate exp (handled by opacus' own np.where)
            warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"opacus\.")
            return float(get_noise_multiplier(target_epsilon=eps_a, target_delta=delta_a, sample_rate=sample_rate,
                                              steps=steps, accountant=self.name, epsilon_tolerance=0.005))


class PRV(_Opacus):
    """Opacus' PRV accountant (Gopi, Lee & Wutschitz 2021) for DP-SGD, by group privacy."""
    name = "prv"


class RDP(_Opacus):
    """Opacus' RDP accountant (Mironov, Talwar & Zhang 2019) for DP-SGD, by group privacy."""
    name = "rdp"


def per_release_budget(name: str, *, epsilon: float, delta: float, n: int) -> tuple[float, float]:
    """The per-release (eps0, delta0) that accountant ``name`` allows so that n adaptive
    releases are (epsilon, delta)-DP in total (n = 1: the whole budget)."""
    return get_accountant(name, use="compose").per_release(epsilon=epsilon, delta=delta, n=n)
