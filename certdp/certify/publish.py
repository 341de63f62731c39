"""The publishable part of a run folder: ``publish/`` (docs/privacy-as-published.md).

Every run folder has two parts.  ``publish/`` holds only what may leave the machine: the DP
releases (``released.json`` of ``certdp ags``, ``answers.csv`` of ``certdp agtr queries=...``),
whose noise comes from the OS CSPRNG (:mod:`certdp.privacy.noise`), plus data-independent
metadata (epsilon, delta, mechanism, model shape, public preprocessing) and a ``README.txt``.
Everything at the top level (``results.csv``, ``certificate.csv``, ``log.txt``, ``config.yaml``,
...) is the researcher's *private report*: seeded statistics, sensitivities, noise scales,
non-private metrics and the seed, never to be published.

Runners name a publishable frame ``publish/<name>`` (:func:`certdp.results.write_outputs` writes
it into the subfolder).  What decides whether a published file may actually be published is
data-independent: the settings (``privacy.reproducible_release``, the dataset's scaling, the
smoothness policy), never a value computed from the records.

The published values themselves come from one function, :func:`release` (and :func:`answers`
for predictions in the target's units): a release's centre, its (smooth or global) sensitivity,
its mechanism and a noise source in, the values ``publish/`` holds out.  ``certdp agtr
queries=...`` and ``certdp ags`` call it with the secure source; ``certdp dpaudit`` calls the same
function with seeded sources to draw the many outputs it tests (docs/dpaudit.md), so what the
audit measures is the code that publishes, not a model of it.
"""

from __future__ import annotations

import numpy as np
import torch

from certdp import DTYPE
from certdp.certify.experiment import require_finite

PUBLISH_DIR = "publish"


def frame_name(name: str) -> str:
    """The frame name of a publishable file (``publish/<name>``)."""
    return f"{PUBLISH_DIR}/{name}"


def release(center, sensitivity, mech, source, *, draws: int | None = None, output_range=None,
            what: str | None = None) -> torch.Tensor:
    """The published values of one release: ``clip(center + mech.scale(sensitivity) * Z)``.

    ``center`` [...] (model units: predictions or parameters), ``sensitivity`` broadcastable to
    it (the smooth bound S(D) of a smooth release, the global sensitivity of a global one);
    ``Z`` standard noise of ``mech`` drawn from ``source`` (:mod:`certdp.privacy.noise`: the OS
    CSPRNG for a published release, a seeded source for statistics and audits); clipped to
    ``output_range`` (lo, hi) when given.  ``draws``: None for one release [...], else that many
    independent releases [draws, ...].  A scale that is not finite is refused (``what`` names
    it), as every release command refuses it."""
    center = torch.as_tensor(center, dtype=DTYPE)
    scale = mech.scale(torch.as_tensor(sensitivity, dtype=DTYPE))
    require_finite(scale, what=what or f"the noise scale of {mech.name} at eps={mech.epsilon:g} is")
    shape = tuple(center.shape) if draws is None else (int(draws), *center.shape)
    values = center + scale * mech.sample(source, shape).to(DTYPE)
    if output_range is not None:
        values = values.clamp(float(output_range[0]), float(output_range[1]))
    return values


def answers(prep, center, sensitivity, mech, source, *, output_range, draws: int | None = None,
            what: str | None = None) -> tuple[np.ndarray, torch.Tensor]:
    """Private answers to prediction queries as ``publish/answers.csv`` holds them: (``answer``
    in the target's raw units, ``answer_model_units``) of :func:`release` clipped to the output
    range.  ``prep``: the dataset's :class:`~certdp.data.preprocessing.Preprocessing` (None:
    model units are the raw units)."""
    model = release(center, sensitivity, mech, source, draws=draws, output_range=output_range, what=what)
    raw = model.numpy() if prep is None else prep.target_to_raw(model.numpy())
    return raw, model


def not_publishable_reason(*, reproducible: bool, dp_end_to_end: bool, data_end_to_end: bool = True,
                           scaling: str = "") -> str | None:
    """Why a run's releases may not be published (None: they may).  ``dp_end_to_end``: the
    release's guarantee holds end to end; ``data_end_to_end``: the data preparation read no
    private statistic (False with ``dataset.scaling=private_stats_not_dp``)."""
    if reproducible:
        return ("privacy.reproducible_release=true seeded these draws from the run seed (for debugging), so "
                "anyone who learns the seed can regenerate the noise")
    if not data_end_to_end:
        return (f"the data preparation read private statistics (scaling={scaling}), so the preprocessing and "
                "the releases carry no end-to-end guarantee")
    if not dp_end_to_end:
        return ("the smooth releases' staircase has no smoothness proof (privacy.smoothness=unproven), so the "
                "releases carry no proven guarantee")
    return None


def note(reason: str | None, *, what: str) -> str:
    """One sentence for a published file: what may be published and why (``what`` names the
    releases, e.g. "every parameter vector in this file")."""
    if reason is None:
        return (f"Publishable: {what} is a differentially private release whose noise came from the operating "
                "system's CSPRNG (no seed is stored), and everything else here is data-independent metadata; "
                "nothing outside publish/ may be published.")
    return f"NOT publishable: {reason}."


def readme(*, command: str, files: dict[str, str], epsilon_total: float, delta_total: float, n_releases: int,
           reason: str | None, seeded: bool, partly: bool = False) -> str:
    """``publish/README.txt``: what the files are, what publishing all of them spends, and that
    nothing else in the run folder may be published.  Data-independent text only: it reads the
    settings and the budget, no value computed from the records.  ``reason``: why (some of) the
    releases may not be published; ``partly``: only the rows marked ``publishable=false``;
    ``seeded``: the noise was drawn from the run seed (``privacy.reproducible_release=true``), so
    the text says so instead of claiming the OS CSPRNG."""
    lines = [f"publish/ of a certdp {command} run: the only files of this run folder that may leave the machine.", ""]
    lines += [f"  {name:<14} {desc}" for name, desc in files.items()]
    if seeded:
        noise = ["Every value in these files is a differentially private release or data-independent metadata",
                 "(epsilon, delta, mechanism, model shape, public preprocessing), BUT the noise of the releases was",
                 "drawn from a generator SEEDED from the run seed (privacy.reproducible_release=true, for debugging),",
                 "not from the operating system's CSPRNG: anyone who learns the seed can regenerate the noise and",
                 "recover the non-private values."]
    else:
        noise = ["Every value in these files is a differentially private release (noise drawn from the operating",
                 "system's CSPRNG; no seed is stored, so nothing published can regenerate the noise) or",
                 "data-independent metadata (epsilon, delta, mechanism, model shape, public preprocessing)."]
    lines += ["", *noise, "",
              f"Budget: publishing everything in this folder spends epsilon {epsilon_total:.6g} and delta "
              f"{delta_total:.6g} in total",
              f"(basic composition over the {n_releases} release(s) it holds, each computed on the same private data;",
              "each release states its own epsilon and delta).",
              "",
              "Publishable: YES." if reason is None else
              (f"Publishable: ONLY the rows marked publishable=true; the others: {reason}." if partly else
               f"Publishable: NO - {reason}."),
              "",
              "Everything outside publish/ (results.csv, certificate.csv and the other tables, log.txt,",
              "config.yaml, .hydra/) is the researcher's PRIVATE REPORT, not publishable: it holds seeded",
              "statistics, data-dependent sensitivities and noise scales, non-private metrics and the seed."]
    return "\n".join(lines) + "\n"
