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
from typing import Any

from certdp.data import dataset_settings
from certdp.data.params import (Field, Names, boolean, check_settings, choice, choices, integer, integers, names,
                                parse_settings, real, reals, section, setting, settings_of, text)
from certdp.data.sources import cache_dir
from certdp.errors import ConfigError
from certdp.privacy.dpsgd_core import DPSGD_ACCOUNTANTS
from certdp.bounds import get_certificate
from certdp.privacy.mechanisms import make_mechanism, names as names_of
from certdp.privacy.smoothness import POLICIES, release_proof
from certdp.settings.base import RunOptions, Subsection, strict, top_level
from certdp.settings.privacy import MAX_DRAWS, _beta
from certdp.settings.training import MAX_STEPS

ARMS = ("dplora", "hybrid", "frozen_ags", "frozen_dpsgd")
ALLOCATIONS = ("l1", "anisotropic")
ENCODERS = ("mpnet", "minilm")
THRESHOLDS = ("public", "zero")


POS = partial(real, lo=0, lo_open=True)
DELTA = partial(real, lo=0, lo_open=True, hi=1, hi_open=True)


def _targets(value: Any, key: str) -> tuple[str, ...]:
    """A list of module names ([] = the q and v projections)."""
    if value is None or (isinstance(value, (list, tuple)) and not value):
        return ()
    return names(value, key, what="a list of module names ([] = the q and v projections)")


_targets.describe = lambda: "list of module names ([] = the q and v projections)"


def _certificate_names() -> tuple[str, ...]:
    from certdp.bounds import CERTIFICATES
    return tuple(sorted(CERTIFICATES))


@dataclass(frozen=True)
class LoraSettings:
    """``lora``: LoRA adapters (rank, scaling alpha, dropout) on ``targets`` (() = the q and v
    projections).  Each field declares its setting."""
    rank: int = setting(16, partial(integer, lo=1, hi=4096), help="LoRA rank")
    alpha: float = setting(16.0, POS, help="LoRA scaling alpha")
    dropout: float = setting(0.0, partial(real, lo=0, hi=0.99), help="LoRA dropout")
    targets: tuple[str, ...] = setting([], _targets,
                                       help="module names LoRA adapts (empty: the encoder's attention projections)")

    def __post_init__(self):
        check_settings(self, "lora")


@dataclass(frozen=True)
class DPLoraSettings:
    """``dpsgd`` of certdp hybrid: DP-LoRA fine-tuning: expected batch B (Poisson rate B/N),
    epochs, l2 clip, AdamW lr, the accountant and delta_1; ``physical_tokens`` bounds a
    micro-batch (memory only).  Each field declares its setting."""
    batch_size: int = setting(1024, partial(integer, lo=1), help="DP-LoRA logical batch size")
    epochs: float = setting(3.0, POS, help="DP-LoRA epochs")
    clip: float = setting(1.0, POS, help="DP-LoRA per-sample clipping norm")
    lr: float = setting(1e-3, POS, help="DP-LoRA learning rate")
    accountant: str = setting("pld", partial(choice, allowed=DPSGD_ACCOUNTANTS), help="DP-LoRA accountant")
    delta: float = setting(5e-6, DELTA, help="delta_1 spent by DP-LoRA")
    physical_tokens: int = setting(4096, partial(integer, lo=8), help="tokens per physical batch (memory)")
    checkpoint_every: int = setting(1, partial(integer, lo=1), help="DP-LoRA steps between checkpoints")

    def __post_init__(self):
        check_settings(self, "dpsgd")


@dataclass(frozen=True)
class HeadSettings:
    """``head``: AGS logistic head on PCA-``pca_dim`` of the (adapted or frozen) embedding:
    contractive clipped full-batch GD, AGT certificate for k = 1..k_max (and N), releases at
    delta_2.  Each field declares its setting."""
    pca_dim: int = setting(8, partial(integer, lo=1), help="public PCA dimension of the head's features")
    steps: int = setting(150, partial(integer, lo=1, hi=MAX_STEPS), help="AGS head training steps")
    lr: float = setting(2.0, POS, help="AGS head learning rate")
    clip: float = setting(0.05, POS, help="AGS head clipping bound gamma")
    contraction: float = setting(0.3, partial(real, lo=0, lo_open=True, hi=1), help="AGS head contraction lambda")
    certificate: str = setting("crown", partial(choice, allowed=Names(_certificate_names)),
                               help="the head's certificate engine")
    k_max: int = setting(512, partial(integer, lo=1), help="the head's largest radius")
    include_n: bool = setting(True, boolean, help="add k = N to the head's radii")
    releases: tuple[str, ...] = setting(["laplace_p", "cauchy_p"],
                                        partial(choices, allowed=Names(partial(names_of, "parameter"))),
                                        help="the head's parameter releases")
    allocations: tuple[str, ...] = setting(["l1", "anisotropic"], partial(choices, allowed=ALLOCATIONS),
                                           help="how the head's budget is spread over parameters: l1 | anisotropic")
    n_draws: int = setting(41, partial(integer, lo=1, hi=MAX_DRAWS), help="noise draws per head release")
    delta: float = setting(5e-6, DELTA, help="delta_2 spent by the head")
    beta: float | None = setting("auto", _beta, help="the head's smoothness beta (auto: each mechanism's rule)")

    def __post_init__(self):
        check_settings(self, "head")


@dataclass(frozen=True)
class DPSGDHeadSettings:
    """``dpsgd_head``: frozen encoder + DP-SGD logistic head (same PCA features as the AGS
    head).  Each field declares its setting."""
    batch_size: int = setting(256, partial(integer, lo=1), help="DP-SGD head batch size")
    epochs: float = setting(10.0, POS, help="DP-SGD head epochs")
    clip: float = setting(1.0, POS, help="DP-SGD head clipping norm")
    lrs: tuple[float, ...] = setting([0.5, 2.0], partial(reals, lo=0, lo_open=True),
                                     help="DP-SGD head learning rates chosen among")
    n_runs: int = setting(5, partial(integer, lo=1, hi=10 ** 4), help="DP-SGD head runs per point")

    def __post_init__(self):
        check_settings(self, "dpsgd_head")


@dataclass(frozen=True)
class HybridPrivacySettings:
    """``privacy`` of certdp hybrid: the total budgets eps = eps_1 + eps_2, the total delta and
    the smoothness policy of the AGS head.  Each field declares its setting."""
    epsilons: tuple[float, ...] = setting([0.5, 1, 2, 3, 5, 8], partial(reals, lo=0, lo_open=True),
                                          help="total privacy budgets epsilon")
    delta: float = setting(1e-5, DELTA, help="total delta (delta_1 + delta_2 at most this)")
    smoothness: str = setting("proven", partial(choice, allowed=POLICIES),
                              help="proven | unproven (see privacy.smoothness)")

    def __post_init__(self):
        check_settings(self, "privacy")


@dataclass(frozen=True)
class SplitSettings:
    """``split``: the candidate fractions eps_1 / eps and whether end-to-end adapters of smaller
    budgets are candidates too.  Each field declares its setting."""
    fractions: tuple[float, ...] = setting([0.5, 0.75], partial(reals, lo=0, hi=1, lo_open=True, hi_open=True),
                                           help="fractions of epsilon spent by DP-LoRA (the rest by the head)")
    reuse_end_to_end: bool = setting(True, boolean,
                                     help="reuse the DP-LoRA encoder across epsilons (counted end to end)")

    def __post_init__(self):
        check_settings(self, "split")


@dataclass(frozen=True)
class SizeSweepSettings:
    """``hybrid.size_sweep``: the private-size sweep (null: none).  Each field declares its setting."""
    epsilon: float | None = setting(3.0, partial(real, lo=0, lo_open=True, none=True, null_means="no size sweep"),
                                    help="epsilon of the private-size sweep")
    n_private: tuple[int, ...] | None = setting([1000, 2500, 5000, 10000, 20000],
                                                partial(integers, lo=2, min_length=0, none=True,
                                                        null_means="no size sweep"),
                                                help="private set sizes swept")

    def __post_init__(self):
        check_settings(self, "hybrid.size_sweep")


def _size_sweep(value: Any, key: str) -> SizeSweepSettings:
    return SizeSweepSettings(**parse_settings(section(value, key), settings_of(SizeSweepSettings), prefix=key))


@dataclass(frozen=True)
class HybridOptions:
    """``hybrid``: the arms, the head's decision threshold, the work folder (as given; the
    resolved folder is :attr:`HybridSettings.work_dir`) and the size sweep.  Each field declares
    its setting."""
    arms: tuple[str, ...] = setting(list(ARMS), partial(choices, allowed=ARMS),
                                    help="the arms: dplora | hybrid | frozen_ags | frozen_dpsgd")
    threshold: str = setting("public", partial(choice, allowed=THRESHOLDS),
                             help="the head's decision threshold: public (chosen on public data) | zero")
    work_dir: str | None = setting(None, partial(text, what="a writable folder", none=True, null_means="<cache>/hybrid"),
                                   help="folder of the encoder checkpoints and embeddings")
    size_sweep: SizeSweepSettings = setting(None, Subsection(settings_of(SizeSweepSettings), _size_sweep),
                                            help="the private-size sweep")

    def __post_init__(self):
        check_settings(self, "hybrid")


@dataclass(frozen=True)
class HybridSettings:
    """What certdp hybrid runs on: the values of its sections, read and checked (their keys are
    declared once, by the fields of :class:`HybridPrivacySettings`, :class:`SplitSettings`,
    :class:`LoraSettings`, :class:`DPLoraSettings`, :class:`HeadSettings`,
    :class:`DPSGDHeadSettings`, :class:`HybridOptions` and the sst2 dataset's table).  The flat
    fields are copies of those values, resolved (``work_dir`` a folder, ``sizes`` a tuple);
    none has a default of its own."""
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
    smoothness: str                               # privacy.smoothness (certdp/privacy/smoothness.py)
    dataset: dict = field(default_factory=dict)   # the sst2 dataset's settings, for the data layer
    run: RunOptions | None = field(default=None, compare=False)


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
    p = HybridPrivacySettings(**strict(sec["privacy"], settings_of(HybridPrivacySettings), prefix="privacy"))
    split = SplitSettings(**strict(sec["split"], settings_of(SplitSettings), prefix="split"))
    h = HybridOptions(**strict(sec["hybrid"], settings_of(HybridOptions), prefix="hybrid"))
    sw = h.size_sweep
    dps = DPLoraSettings(**strict(sec["dpsgd"], settings_of(DPLoraSettings), prefix="dpsgd"))
    head = HeadSettings(**strict(sec["head"], settings_of(HeadSettings), prefix="head"))
    # a beta above a release's limit fails here (P = 1: the loosest limit), named as the head's key
    head_keys = {"privacy.beta": "head.beta", "privacy.delta": "head.delta"}
    for release in head.releases:
        for eps in p.epsilons:
            for f in split.fractions:
                try:
                    make_mechanism(release, query="parameter", epsilon=eps * (1 - f), delta=head.delta,
                                   beta=head.beta, n_params=1)
                except ConfigError as e:
                    raise ConfigError(head_keys.get(e.key, e.key), e.message) from None
    if {"hybrid", "frozen_ags"} & set(h.arms):    # the AGS head's releases are smooth: refuse before any work
        release_proof(get_certificate(head.certificate), p.smoothness)
    lora = LoraSettings(**strict(sec["lora"], settings_of(LoraSettings), prefix="lora"))
    if dps.delta + head.delta > p.delta * (1 + 1e-12):
        raise ConfigError("privacy.delta", f"delta_1 + delta_2 = {dps.delta:g} + {head.delta:g} exceeds the total "
                                         f"privacy.delta {p.delta:g}; allowed: dpsgd.delta + head.delta <= "
                                         "privacy.delta (lower dpsgd.delta or head.delta)")
    dpsgd_head = DPSGDHeadSettings(**strict(sec["dpsgd_head"], settings_of(DPSGDHeadSettings), prefix="dpsgd_head"))
    if run.selection == "fixed":      # one candidate per arm: nothing is chosen among private runs
        for key, values in (("split.fractions", split.fractions), ("head.allocations", head.allocations),
                            ("dpsgd_head.lrs", dpsgd_head.lrs)):
            if len(values) != 1:
                raise ConfigError(key, f"selection=fixed trains only the configured candidate, but {key} holds "
                                       f"{len(values)} values; allowed: one value, or selection=grid")
        if split.reuse_end_to_end and "dplora" in h.arms and len(p.epsilons) > 1:
            raise ConfigError("split.reuse_end_to_end", "selection=fixed trains only the configured eps_1, but "
                                                        "reuse_end_to_end adds candidates; allowed: false, or "
                                                        "selection=grid")
    work = Path(h.work_dir).expanduser() if h.work_dir else cache_dir() / "hybrid"
    return HybridSettings(
        encoder=own["encoder"], max_seq_length=own["max_seq_length"], n_test=own["n_test"],
        n_private=own["n_private"], n_test_eval=n_test_eval, n_public=own["n_public"],
        epsilons=p.epsilons, delta=p.delta, fractions=split.fractions,
        reuse_end_to_end=split.reuse_end_to_end, arms=h.arms,
        size_epsilon=sw.epsilon, sizes=tuple(sw.n_private or ()), threshold=h.threshold,
        lora=lora, dpsgd=dps, head=head, dpsgd_head=dpsgd_head,
        seed=run.seed, work_dir=_writable_folder(work, "hybrid.work_dir"),
        dataset={**dataset, "encoder": own["encoder"], "max_seq_length": own["max_seq_length"]},
        smoothness=p.smoothness, run=run)


# The tables of the sections declared in dataclass fields, under the names they had as tables:
# read from the dataclass on every access, so they cannot drift from it (no second copy).
_TABLES = {"LORA_FIELDS": LoraSettings, "DPLORA_FIELDS": DPLoraSettings, "HEAD_FIELDS": HeadSettings,
           "DPSGD_HEAD_FIELDS": DPSGDHeadSettings, "SPLIT_FIELDS": SplitSettings, "SIZE_FIELDS": SizeSweepSettings,
           "HYBRID_FIELDS": HybridOptions, "HYBRID_PRIVACY_FIELDS": HybridPrivacySettings}


def __getattr__(name: str) -> dict[str, Field]:
    if name in _TABLES:
        return settings_of(_TABLES[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
