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
"""

from __future__ import annotations

PUBLISH_DIR = "publish"


def frame_name(name: str) -> str:
    """The frame name of a publishable file (``publish/<name>``)."""
    return f"{PUBLISH_DIR}/{name}"


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
           reason: str | None, partly: bool = False) -> str:
    """``publish/README.txt``: what the files are, what publishing all of them spends, and that
    nothing else in the run folder may be published.  Data-independent text only: it reads the
    settings and the budget, no value computed from the records.  ``reason``: why (some of) the
    releases may not be published; ``partly``: only the rows marked ``publishable=false``."""
    lines = [f"publish/ of a certdp {command} run: the only files of this run folder that may leave the machine.", ""]
    lines += [f"  {name:<14} {desc}" for name, desc in files.items()]
    lines += ["",
              "Every value in these files is a differentially private release (noise drawn from the operating",
              "system's CSPRNG; no seed is stored, so nothing published can regenerate the noise) or",
              "data-independent metadata (epsilon, delta, mechanism, model shape, public preprocessing).",
              "",
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
