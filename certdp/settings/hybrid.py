"""The ``certdp hybrid`` configuration, read once into frozen dataclasses.

Sections (``configs/hybrid.yaml``): ``dataset`` (SST-2, encoder, subsets), ``privacy`` (total
budgets), ``split`` (eps_1 / eps candidates), ``lora`` and ``dpsgd`` (DP-LoRA fine-tuning),
``head`` (AGS head), ``dpsgd_head`` (frozen encoder + DP-SGD head) and ``hybrid`` (arms, decision
threshold, work folder, size sweep).  A bad value raises a one-line :class:`ConfigError` naming
its dotted key before any work starts.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from certdp.data import dataset_settings
from certdp.data.params import (Field, boolean, choice, choices, integer, integers, names, parse_settings, real, reals,
                                section, text)
from certdp.data.sources import cache_dir
from certdp.errors import ConfigError
from certdp.privacy.dpsgd_core import DPSGD_ACCOUNTANTS
from certdp.bounds import get_certificate
from certdp.privacy.mechanisms import make_mechanism, names as names_of
from certdp.privacy.smoothness import POLICIES, release_proof
from certdp.settings.base import RunOptions, strict, subsection, top_level
from certdp.settings.privacy import MAX_DRAWS, _beta
from certdp.settings.training import MAX_STEPS

ARMS = ("dplora", "hybrid", "frozen_ags", "frozen_dpsgd")
ALLOCATIONS = ("l1", "anisotropic")
ENCODERS = ("mpnet", "minilm")
THRESHOLDS = ("public", "zero")


@dataclass(frozen=True)
class LoraSettings:
    """LoRA adapters (rank, scaling alpha, dropout) on ``targets`` (() = the q and v projections)."""
    rank: int
    alpha: float
    dropout: float
    targets: tuple[str, ...]


@dataclass(frozen=True)
class DPLoraSettings:
    """DP-LoRA fine-tuning: expected batch B (Poisson rate B/N), epochs, l2 clip, AdamW lr, the
    accountant and delta_1; ``physical_tokens`` bounds a micro-batch (memory only)."""
    batch_size: int
    epochs: float
    clip: float
    lr: float
    accountant: str
    delta: float
    physical_tokens: int
    checkpoint_every: int


@dataclass(frozen=True)
class HeadSettings:
    """AGS logistic head on PCA-``pca_dim`` of the (adapted or frozen) embedding: contractive
    clipped full-batch GD, AGT certificate for k = 1..k_max (and N), releases at delta_2."""
    pca_dim: int
    steps: int
    lr: float
    clip: float
    contraction: float
    certificate: str
    k_max: int
    include_n: bool
    releases: tuple[str, ...]
    allocations: tuple[str, ...]
    n_draws: int
    delta: float
    beta: float | None


@dataclass(frozen=True)
class DPSGDHeadSettings:
    """Frozen encoder + DP-SGD logistic head (same PCA features as the AGS head)."""
    batch_size: int
    epochs: float
    clip: float
    lrs: tuple[float, ...]
    n_runs: int


@dataclass(frozen=True)
class HybridSettings:
    encoder: str
    max_seq_length: int
    n_test: int                            # held out of GLUE train as the test set
    n_private: int | None                  # None = every remaining training sentence
    n_test_eval: int | None                # evaluate on the first n of the test set
    n_public: int | None
    epsilons: tuple[float, ...]            # total budgets eps = eps_1 + eps_2
    delta: float                           # total delta >= delta_1 + delta_2
    fractions: tuple[float, ...]           # candidate eps_1 / eps
    reuse_end_to_end: bool
    arms: tuple[str, ...]
    size_epsilon: float | None
    sizes: tuple[int, ...]
    threshold: str
    lora: LoraSettings
    dpsgd: DPLoraSettings
    head: HeadSettings
    dpsgd_head: DPSGDHeadSettings
    seed: int
    work_dir: Path
    dataset: dict = field(default_factory=dict)   # the sst2 dataset's settings, for the data layer
    smoothness: str = "proven"                    # privacy.smoothness (certdp/privacy/smoothness.py)
    run: RunOptions | None = field(default=None, compare=False)


POS = partial(real, lo=0, lo_open=True)
DELTA = partial(real, lo=0, lo_open=True, hi=1, hi_open=True)

LORA_FIELDS = {
    "rank": Field(16, partial(integer, lo=1, hi=4096), help="LoRA rank"),
    "alpha": Field(16.0, POS, help="LoRA scaling alpha"),
    "dropout": Field(0.0, partial(real, lo=0, hi=0.99), help="LoRA dropout"),
    "targets": Field([], lambda v, key: () if v in (None, []) else names(v, key, what="a list of module names "
                                                                                      "([] = the q and v projections)"),
                     help="module names LoRA adapts (empty: the encoder's attention projections)"),
}
DPLORA_FIELDS = {
    "batch_size": Field(1024, partial(integer, lo=1), help="DP-LoRA logical batch size"),
    "epochs": Field(3.0, POS, help="DP-LoRA epochs"),
    "clip": Field(1.0, POS, help="DP-LoRA per-sample clipping norm"),
    "lr": Field(1e-3, POS, help="DP-LoRA learning rate"),
    "accountant": Field("pld", partial(choice, allowed=DPSGD_ACCOUNTANTS), help="DP-LoRA accountant"),
    "delta": Field(5e-6, DELTA, help="delta_1 spent by DP-LoRA"),
    "physical_tokens": Field(4096, partial(integer, lo=8), help="tokens per physical batch (memory)"),
    "checkpoint_every": Field(1, partial(integer, lo=1), help="epochs between DP-LoRA checkpoints"),
}


def head_fields() -> dict[str, Field]:
    from certdp.bounds import CERTIFICATES
    return {
        "pca_dim": Field(8, partial(integer, lo=1), help="public PCA dimension of the head's features"),
        "steps": Field(150, partial(integer, lo=1, hi=MAX_STEPS), help="AGS head training steps"),
        "lr": Field(2.0, POS, help="AGS head learning rate"),
        "clip": Field(0.05, POS, help="AGS head clipping bound gamma"),
        "contraction": Field(0.3, partial(real, lo=0, lo_open=True, hi=1), help="AGS head contraction lambda"),
        "certificate": Field("crown", partial(choice, allowed=tuple(sorted(CERTIFICATES))),
                             help="the head's certificate engine"),
        "k_max": Field(512, partial(integer, lo=1), help="the head's largest radius"),
        "include_n": Field(True, boolean, help="add k = N to the head's radii"),
        "releases": Field(["laplace_p", "cauchy_p"], partial(choices, allowed=names_of("parameter")),
                          help="the head's parameter releases"),
        "allocations": Field(["l1", "anisotropic"], partial(choices, allowed=ALLOCATIONS),
                             help="how the head's budget is spread over parameters: l1 | anisotropic"),
        "n_draws": Field(41, partial(integer, lo=1, hi=MAX_DRAWS), help="noise draws per head release"),
        "delta": Field(5e-6, DELTA, help="delta_2 spent by the head"),
        "beta": Field("auto", _beta, help="the head's smoothness beta (auto: each mechanism's rule)"),
    }


DPSGD_HEAD_FIELDS = {
    "batch_size": Field(256, partial(integer, lo=1), help="DP-SGD head batch size"),
    "epochs": Field(10.0, POS, help="DP-SGD head epochs"),
    "clip": Field(1.0, POS, help="DP-SGD head clipping norm"),
    "lrs": Field([0.5, 2.0], partial(reals, lo=0, lo_open=True), help="DP-SGD head learning rates chosen among"),
    "n_runs": Field(5, partial(integer, lo=1, hi=10 ** 4), help="DP-SGD head runs per point"),
}
SPLIT_FIELDS = {
    "fractions": Field([0.5, 0.75], partial(reals, lo=0, hi=1, lo_open=True, hi_open=True),
                       help="fractions of epsilon spent by DP-LoRA (the rest by the head)"),
    "reuse_end_to_end": Field(True, boolean, help="reuse the DP-LoRA encoder across epsilons (counted end to end)"),
}
SIZE_FIELDS = {
    "epsilon": Field(3.0, partial(real, lo=0, lo_open=True, none=True, null_means="no size sweep"),
                     help="epsilon of the private-size sweep"),
    "n_private": Field([1000, 2500, 5000, 10000, 20000],
                       partial(integers, lo=2, min_length=0, none=True, null_means="no size sweep"),
                       help="private set sizes swept"),
}
HYBRID_FIELDS = {
    "arms": Field(list(ARMS), partial(choices, allowed=ARMS),
                  help="the arms: dplora | hybrid | frozen_ags | frozen_dpsgd"),
    "threshold": Field("public", partial(choice, allowed=THRESHOLDS),
                       help="the head's decision threshold: public (chosen on public data) | zero"),
    "work_dir": Field(None, partial(text, what="a writable folder", none=True, null_means="<cache>/hybrid"),
                      help="folder of the encoder checkpoints and embeddings"),
    "size_sweep": Field(None, subsection(SIZE_FIELDS), help="the private-size sweep"),
}
# The hybrid's own dataset keys (the rest is the sst2 dataset's table)
HYBRID_PRIVACY_FIELDS = {
    "epsilons": Field([0.5, 1, 2, 3, 5, 8], partial(reals, lo=0, lo_open=True), help="total privacy budgets epsilon"),
    "delta": Field(1e-5, DELTA, help="total delta (delta_1 + delta_2 at most this)"),
    "smoothness": Field("proven", partial(choice, allowed=POLICIES), help="proven | unproven (see privacy.smoothness)"),
}
# read by certdp hybrid beside the sst2 dataset's own table
N_TEST_EVAL = Field(None, partial(integer, lo=1, none=True, null_means="the whole test set"),
                    help="test sentences evaluated")
def hybrid_dataset_fields() -> dict[str, Field]:
    """sst2's dataset keys that certdp hybrid reads with its own defaults and ranges: the
    declarations of the sst2 loader (certdp/data/text.py; key, help) with the paper table's
    defaults (128 tokens, 5,000 test sentences), the two encoders the hybrid ships, and at least
    two private and public sentences."""
    from certdp.data import entries
    own, change = entries()["sst2"].fields, dataclasses.replace
    return {"encoder": change(own["encoder"], parse=partial(choice, allowed=ENCODERS)),
            "max_seq_length": change(own["max_seq_length"], default=128, parse=partial(integer, lo=8, hi=100_000)),
            "n_test": change(own["n_test"], default=5000, parse=partial(integer, lo=1)),
            "n_private": change(own["n_private"], parse=partial(integer, lo=2, none=True,
                                                                 null_means="the whole private pool")),
            "n_public": change(own["n_public"], parse=partial(integer, lo=2, none=True,
                                                               null_means="every GLUE dev sentence"))}


TOP = ("dataset", "privacy", "split", "lora", "dpsgd", "head", "dpsgd_head", "hybrid")


def _writable_folder(path: Path, key: str) -> Path:
    """``path`` is (or can be created as) a folder: no part of it is a file, and its nearest
    existing ancestor is writable.  Nothing is created here."""
    p = path
    while not p.exists():
        if p.parent == p:
            break
        p = p.parent
    if p.exists() and not p.is_dir():
        raise ConfigError(key, f"got {str(path)!r} ({p} is a file, not a folder); allowed: a writable folder")
    if p.exists() and not os.access(p, os.W_OK | os.X_OK):
        raise ConfigError(key, f"got {str(path)!r} ({p} is not writable); allowed: a writable folder")
    return path


def hybrid_settings(cfg: dict) -> HybridSettings:
    """Read and check the composed config of ``certdp hybrid`` (fail fast, one-line
    :class:`ConfigError`; nothing is read or created)."""
    run, sec = top_level(cfg, command="hybrid", sections=TOP)
    run.require_cpu("certdp hybrid (its encoder, heads and baselines)")
    d = section(sec["dataset"], "dataset")
    if d.get("name", "sst2") != "sst2":
        raise ConfigError("dataset", f"certdp hybrid runs on sst2 only (got '{d.get('name')}'); allowed: sst2")
    n_test_eval = N_TEST_EVAL.parse(d.pop("n_test_eval", N_TEST_EVAL.default), "dataset.n_test_eval")
    dataset = dataset_settings({**d, "name": "sst2"})
    own_fields = hybrid_dataset_fields()
    own = parse_settings({k: dataset[k] for k in own_fields if dataset.get(k) is not None}, own_fields,
                         prefix="dataset")
    p = strict(sec["privacy"], HYBRID_PRIVACY_FIELDS, prefix="privacy")
    split = strict(sec["split"], SPLIT_FIELDS, prefix="split")
    h = strict(sec["hybrid"], HYBRID_FIELDS, prefix="hybrid")
    sw = h["size_sweep"]
    dps = DPLoraSettings(**strict(sec["dpsgd"], DPLORA_FIELDS, prefix="dpsgd"))
    hd = strict(sec["head"], head_fields(), prefix="head")
    head = HeadSettings(**hd)
    # a beta above a release's limit fails here (P = 1: the loosest limit), named as the head's key
    head_keys = {"privacy.beta": "head.beta", "privacy.delta": "head.delta"}
    for release in head.releases:
        for eps in p["epsilons"]:
            for f in split["fractions"]:
                try:
                    make_mechanism(release, query="parameter", epsilon=eps * (1 - f), delta=head.delta,
                                   beta=head.beta, n_params=1)
                except ConfigError as e:
                    raise ConfigError(head_keys.get(e.key, e.key), e.message) from None
    if {"hybrid", "frozen_ags"} & set(h["arms"]):    # the AGS head's releases are smooth: refuse before any work
        release_proof(get_certificate(head.certificate), p["smoothness"])
    lora = strict(sec["lora"], LORA_FIELDS, prefix="lora")
    if dps.delta + head.delta > p["delta"] * (1 + 1e-12):
        raise ConfigError("privacy.delta", f"delta_1 + delta_2 = {dps.delta:g} + {head.delta:g} exceeds the total "
                                         f"privacy.delta {p['delta']:g}; allowed: dpsgd.delta + head.delta <= "
                                         "privacy.delta (lower dpsgd.delta or head.delta)")
    if run.selection == "fixed":      # one candidate per arm: nothing is chosen among private runs
        dpsgd_head = strict(sec["dpsgd_head"], DPSGD_HEAD_FIELDS, prefix="dpsgd_head")
        for key, values in (("split.fractions", split["fractions"]), ("head.allocations", head.allocations),
                            ("dpsgd_head.lrs", dpsgd_head["lrs"])):
            if len(values) != 1:
                raise ConfigError(key, f"selection=fixed trains only the configured candidate, but {key} holds "
                                       f"{len(values)} values; allowed: one value, or selection=grid")
        if split["reuse_end_to_end"] and "dplora" in h["arms"] and len(p["epsilons"]) > 1:
            raise ConfigError("split.reuse_end_to_end", "selection=fixed trains only the configured eps_1, but "
                                                        "reuse_end_to_end adds candidates; allowed: false, or "
                                                        "selection=grid")
    work = Path(h["work_dir"]).expanduser() if h["work_dir"] else cache_dir() / "hybrid"
    return HybridSettings(
        encoder=own["encoder"], max_seq_length=own["max_seq_length"], n_test=own["n_test"],
        n_private=own["n_private"], n_test_eval=n_test_eval, n_public=own["n_public"],
        epsilons=p["epsilons"], delta=p["delta"], fractions=split["fractions"],
        reuse_end_to_end=split["reuse_end_to_end"], arms=h["arms"],
        size_epsilon=sw["epsilon"], sizes=tuple(sw["n_private"] or ()), threshold=h["threshold"],
        lora=LoraSettings(rank=lora["rank"], alpha=lora["alpha"], dropout=lora["dropout"],
                          targets=tuple(lora["targets"] or ())),
        dpsgd=dps, head=head, dpsgd_head=DPSGDHeadSettings(**strict(sec["dpsgd_head"], DPSGD_HEAD_FIELDS,
                                                                    prefix="dpsgd_head")),
        seed=run.seed, work_dir=_writable_folder(work, "hybrid.work_dir"),
        dataset={**dataset, "encoder": own["encoder"], "max_seq_length": own["max_seq_length"]},
        smoothness=p["smoothness"], run=run)
