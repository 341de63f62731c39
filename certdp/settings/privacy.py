"""``privacy``: budgets and releases, for prediction releases (``certdp agtr|certify|audit|pate``)
and parameter releases (``certdp ags|dpsgd``).

Every release named in ``privacy.releases`` is instantiated here at every epsilon, so a beta
above a mechanism's limit is refused before any data is loaded; parameter releases, whose beta
limit depends on the number P of released parameters, are instantiated once more with the real P
when the experiment is built (:mod:`certdp.certify`), still before any training.

``reproducible_release`` (default false): the published releases of a run (``publish/`` of
``certdp ags`` and ``certdp agtr queries=...``) draw their noise from the OS CSPRNG
(:mod:`certdp.privacy.noise`), so nothing published can regenerate it.  ``true`` seeds them from
the run seed instead, for debugging, and marks the published files ``publishable: false``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial
from typing import Any

from certdp.data.params import Field, Names, boolean, check_settings, choice, choices, integer, real, reals, setting, settings_of
from certdp.errors import ConfigError
from certdp.privacy import mechanisms
from certdp.privacy.smoothness import POLICIES
from certdp.settings.base import strict

GLOBAL_SENSITIVITIES = ("range", "trajectory", "min", "none")
MAX_DRAWS = 10 ** 7
# what runs when privacy.releases is not set (cauchy6 and the rest are opt-in)
DEFAULT_RELEASES = {"prediction": ("cauchy", "laplace", "laplace_gs", "gaussian_gs"),
                    "parameter": ("cauchy_p", "laplace_p")}


def _beta(value: Any, key: str) -> float | None:
    """'auto' (None: each mechanism's own rule) or a finite number > 0."""
    if value in (None, "auto"):
        return None
    if isinstance(value, str):
        raise ConfigError(key, f"got {value!r} (not a number); allowed: auto, or a finite number > 0")
    return real(value, key, lo=0, lo_open=True)


PREDICTION_DRAWS, PARAMETER_DRAWS = 200, 101      # noise draws per test point | per parameter vector


@dataclass(frozen=True)
class PrivacySettings:
    """Budgets (``epsilons``, ``delta``), releases of one query kind, their beta (None: each
    release's rule), noise draws per setting, the smoothness policy (``proven`` refuses a smooth
    release the proof does not cover), whether the published releases are seeded
    (``reproducible_release``: debugging only, the published files are then not publishable;
    default: the OS CSPRNG) and the global sensitivity of prediction releases.  Each field
    declares its setting, with the defaults of prediction releases; :func:`privacy_fields`
    derives the table of parameter releases from it."""
    query: str                          # prediction | parameter (not a setting: the command's)
    epsilons: tuple[float, ...] = setting(None, partial(reals, lo=0, lo_open=True),
                                          help="the privacy budgets epsilon, one release each")
    delta: float = setting(1e-5, partial(real, lo=0, hi=1, lo_open=True, hi_open=True),
                           help="delta of approximate-DP releases")
    releases: tuple[str, ...] = setting(list(DEFAULT_RELEASES["prediction"]),
                                        partial(choices, allowed=Names(partial(mechanisms.names, "prediction"))),
                                        help="the release mechanisms (certdp list: releases)")
    beta: float | None = setting("auto", _beta,
                                 help="smoothness beta: auto (each mechanism's rule) or a number checked against its limit")
    n_draws: int = setting(PREDICTION_DRAWS, partial(integer, lo=1, hi=MAX_DRAWS),
                           help="noise draws per released value (test point or parameter vector)")
    smoothness: str = setting("proven", partial(choice, allowed=POLICIES),
                              help="proven: refuse an engine the smoothness proof does not cover | unproven: run it, labelled")
    reproducible_release: bool = setting(False, boolean,
                                         help="seed the published releases from the run seed (else fresh OS noise)")
    # range | trajectory | min | none; parameter releases have none
    global_sensitivity: str = setting("range", partial(choice, allowed=GLOBAL_SENSITIVITIES),
                                      help="the global-sensitivity baseline: range | trajectory (linear) | min | none")

    def __post_init__(self):
        check_settings(self, "privacy", privacy_fields(self.query))

    def mechanisms(self, *, n_params: int | None = None) -> list:
        """Every release at every epsilon (release-major order), instantiated."""
        return [mechanisms.make_mechanism(name, query=self.query, epsilon=e, delta=self.delta, beta=self.beta,
                                          n_params=n_params)
                for name in self.releases for e in self.epsilons]

    def releases_of(self, kind: str) -> tuple[str, ...]:
        """The configured releases of one ``kind`` (``smooth`` or ``global``)."""
        return tuple(r for r in self.releases if mechanisms.REGISTRY[r].kind == kind)

    @property
    def has_smooth(self) -> bool:
        return bool(self.releases_of("smooth"))


def privacy_fields(query: str, *, n_draws: int | None = None) -> dict[str, Field]:
    """The ``privacy`` table for releases of ``query`` kind, from the declaration of
    :class:`PrivacySettings` (prediction releases): parameter releases choose among their own
    mechanisms, draw :data:`PARAMETER_DRAWS` and have no global sensitivity; ``n_draws`` is a
    command's own default number of draws (certdp dpaudit's)."""
    fields = settings_of(PrivacySettings)
    if query == "parameter":
        del fields["global_sensitivity"]
        fields["releases"] = dataclasses.replace(fields["releases"], default=list(DEFAULT_RELEASES[query]),
                                                 parse=partial(choices, allowed=Names(partial(mechanisms.names, query))))
        fields["n_draws"] = dataclasses.replace(fields["n_draws"], default=PARAMETER_DRAWS)
    if n_draws is not None:
        fields["n_draws"] = dataclasses.replace(fields["n_draws"], default=n_draws)
    return fields


def privacy_settings(cfg: Any, *, query: str = "prediction", n_draws: int | None = None) -> PrivacySettings:
    """``privacy`` for releases of ``query`` kind; every release is instantiated once at every
    epsilon (parameter releases with P = 1, the loosest beta limit) so a bad beta fails here."""
    read = strict(cfg, privacy_fields(query, n_draws=n_draws), prefix="privacy")
    out = PrivacySettings(query=query, **{"global_sensitivity": "none", **read})
    for name in out.releases:
        for e in out.epsilons:
            try:
                mechanisms.make_mechanism(name, query=query, epsilon=e, delta=out.delta, beta=out.beta,
                                          n_params=1 if query == "parameter" else None)
            except ConfigError as err:
                # beta=auto follows epsilon: when the automatic beta is out of range (0 for an epsilon
                # that small), the value to change is the epsilon, not the beta nobody set
                if err.key == "privacy.beta" and out.beta is None:
                    raise ConfigError("privacy.epsilons", f"{e:g} is too small for {name}: {err.message} with "
                                                          "beta=auto, which follows epsilon; allowed: larger "
                                                          "epsilons (1e-6 or more, say)") from None
                raise
    return out
