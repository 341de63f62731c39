"""SST-2 hybrid (paper S5.3 and its settings table): a DP-LoRA encoder with an AGS head.

Pipeline, for a total budget (eps, delta) with delta = delta_1 + delta_2 (5e-6 each by default):

1. **DP-LoRA** (``finetune``).  Rank-r LoRA adapters (``peft``) on the query and value
   projections of every attention layer of the sentence encoder, plus a linear classification
   head on its pooled, normalised embedding, trained by DP-SGD (Abadi et al. 2016): Poisson
   sampling with rate q = B/N, per-sample gradients of all trainable parameters (Opacus
   ``GradSampleModule``, hooks mode, which covers the LoRA ``nn.Linear`` factors), each clipped
   to l2 norm ``clip``, summed, plus N(0, sigma^2 clip^2) per coordinate, divided by q*N, then
   AdamW.  sigma is the smallest noise multiplier for which Opacus' PRV accountant certifies
   (eps_1, delta_1) after T = epochs/q steps (``get_noise_multiplier``, re-checked with
   ``PRVAccountant.get_epsilon``).  Adjacency is substitution of one sentence; each step's batch
   is drawn from a generator seeded by (seed, step), so a resumed run continues exactly.  The
   fine-tuned model scored with its own head is the **end-to-end DP-LoRA** arm.
2. **AGS head** (``ags_certificate`` + ``ags_release``).  The adapted encoder (already
   (eps_1, delta_1)-DP, so everything after it is post-processing of it plus the head release)
   embeds the private, public and test sentences; PCA-8 is fitted on the *public* embeddings
   only; a logistic head (P = 18) is trained by contractive clipped full-batch GD and certified
   by AGT (CROWN, k = 1..k_max and N); the parameters are released once with the P-parameter
   smooth-sensitivity mechanism of ``privacy.mechanisms`` at (eps_2, delta_2) (``laplace_p``) or
   pure eps_2 (``cauchy_p``).  By basic composition the pipeline is (eps_1 + eps_2,
   delta_1 + delta_2)-DP.
3. **Frozen-encoder arms**: the un-adapted encoder (public weights, no privacy cost) with the
   same AGS head at the whole (eps, delta), and with a DP-SGD logistic head (Poisson sampling,
   l2 clipping, Gaussian noise, PRV accounting) at the whole (eps, delta).

Allocation.  ``l1``: noise calibrated to the l1 smooth sensitivity of theta.  ``anisotropic``:
the release of theta' = theta / w (coordinate-wise) for weights w fixed *before* seeing the
private data -- the per-coordinate k = 1 envelope widths of the same head certified on the
public set -- so the l1 sensitivity of theta' is bounded by the staircase of the rescaled
envelopes, and theta = w * theta' is post-processing.  Coordinates that move little get little
noise.

Chosen on the public set (872 GLUE validation sentences), as in the paper: the split
eps_1 = f * eps (``split.fractions``; with ``split.reuse_end_to_end`` the end-to-end adapters
of smaller budgets are candidates too), the allocation, the DP-SGD head's learning rate and
every arm's decision threshold on the logit margin.  The threshold is post-processing of the
released model with public data.  Choosing among several private candidates by their public
accuracy is the paper's protocol; its own privacy cost (Papernot & Steinke 2022) is not
accounted here -- a single fraction and allocation gives the strict (eps, delta) guarantee.

Resume.  Every unit of work is stored under ``hybrid.work_dir`` (default
``<cache>/hybrid``), keyed by a digest of exactly the settings it depends on: DP-LoRA
checkpoints after every ``checkpoint_every`` steps (adapter, head, optimiser, step), embeddings
in chunks (``certdp.data.encoders.embed``), AGS certificates, and one JSON file per
(N, eps) cell of result rows.  A rerun with the same configuration skips finished units and
continues an interrupted fine-tune at its last checkpoint.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from certdp import DTYPE
from certdp.errors import ConfigError
from certdp.methods.common import generator_for

log = logging.getLogger("certdp")

ARMS = ("dplora", "hybrid", "frozen_ags", "frozen_dpsgd")
HEAD_RELEASES = ("laplace_p", "cauchy_p", "laplace_union_p", "cauchy6_p")
ALLOCATIONS = ("l1", "anisotropic")


# ============================================================================ settings
@dataclass(frozen=True)
class LoraSettings:
    rank: int = 16
    alpha: float = 16.0
    dropout: float = 0.0
    targets: tuple[str, ...] = ()          # () = the q and v projections of the architecture


@dataclass(frozen=True)
class DPSGDSettings:
    """DP-LoRA fine-tuning: expected batch B (Poisson rate B/N), epochs, l2 clip, AdamW lr."""
    batch_size: int = 1024
    epochs: float = 3.0
    clip: float = 1.0
    lr: float = 1e-3
    accountant: str = "prv"
    delta: float = 5e-6
    physical_tokens: int = 4096            # tokens per physical micro-batch (memory only)
    checkpoint_every: int = 1


@dataclass(frozen=True)
class HeadSettings:
    """AGS logistic head on PCA-``pca_dim`` of the (adapted or frozen) embedding."""
    pca_dim: int = 8
    steps: int = 150
    lr: float = 2.0
    clip: float = 0.05
    contraction: float = 0.3
    certificate: str = "crown"
    k_max: int = 512
    include_n: bool = True
    releases: tuple[str, ...] = ("laplace_p",)
    allocations: tuple[str, ...] = ("l1", "anisotropic")
    n_draws: int = 41
    delta: float = 5e-6
    beta: float | None = None


@dataclass(frozen=True)
class DPSGDHeadSettings:
    """Frozen encoder + DP-SGD logistic head (same PCA features as the AGS head)."""
    batch_size: int = 256
    epochs: float = 10.0
    clip: float = 1.0
    lrs: tuple[float, ...] = (0.5, 2.0)
    n_runs: int = 5


@dataclass(frozen=True)
class HybridSettings:
    encoder: str
    max_seq_length: int
    n_test: int                            # held out of GLUE train as the test set
    n_private: int | None                  # None = every remaining training sentence
    n_test_eval: int | None                # evaluate on the first n of the test set
    n_public: int | None
    epsilons: tuple[float, ...]
    delta: float
    fractions: tuple[float, ...]
    reuse_end_to_end: bool
    arms: tuple[str, ...]
    size_epsilon: float | None
    sizes: tuple[int, ...]
    threshold: str
    lora: LoraSettings
    dpsgd: DPSGDSettings
    head: HeadSettings
    dpsgd_head: DPSGDHeadSettings
    seed: int
    work_dir: Path
    dataset_cfg: dict = field(default_factory=dict)


def _floats(v, key: str) -> tuple[float, ...]:
    v = v if isinstance(v, (list, tuple)) else [v]
    out = []
    for e in v:
        try:
            e = float(e)
        except (TypeError, ValueError):
            raise ConfigError(key, f"must be numbers (got {e!r})")
        if not math.isfinite(e):
            raise ConfigError(key, f"must be finite numbers (got {e})")
        out.append(e)
    return tuple(out)


def _num(d: dict, key: str, prefix: str, default, cast=float, lo=None, hi=None, lo_open=False):
    v = d.get(key, default)
    if v is None:
        return None
    try:
        v = cast(v)
    except (TypeError, ValueError):
        raise ConfigError(f"{prefix}.{key}", f"must be a number (got {v!r})")
    if lo is not None and (v < lo or (lo_open and v <= lo)):
        raise ConfigError(f"{prefix}.{key}", f"must be {'>' if lo_open else '>='} {lo} (got {v})")
    if hi is not None and v > hi:
        raise ConfigError(f"{prefix}.{key}", f"must be <= {hi} (got {v})")
    return v


def hybrid_settings(cfg: dict) -> HybridSettings:
    """Read and check the composed config (fail fast, one-line :class:`ConfigError`)."""
    d = dict(cfg.get("dataset") or {})
    if d.get("name", "sst2") != "sst2":
        raise ConfigError("dataset", f"certdp hybrid runs on sst2 only (got '{d.get('name')}')")
    enc = d.get("encoder", "mpnet")
    if enc not in ("mpnet", "minilm"):
        raise ConfigError("dataset.encoder", f"unknown encoder '{enc}'; allowed: mpnet, minilm")
    msl = _num(d, "max_seq_length", "dataset", 128, int, lo=8)
    n_test = _num(d, "n_test", "dataset", 5000, int, lo=1)
    n_priv = _num(d, "n_private", "dataset", None, int, lo=2)
    n_te = _num(d, "n_test_eval", "dataset", None, int, lo=1)
    n_pub = _num(d, "n_public", "dataset", None, int, lo=2)

    p = dict(cfg.get("privacy") or {})
    eps = _floats(p.get("epsilons", [0.5, 1, 2, 3, 5, 8]), "privacy.epsilons")
    if not eps or any(e <= 0 for e in eps):
        raise ConfigError("privacy.epsilons", f"must be a non-empty list of numbers > 0 (got {list(eps)})")
    delta = _num(p, "delta", "privacy", 1e-5, lo=0, lo_open=True, hi=1)

    s = dict(cfg.get("split") or {})
    fr = _floats(s.get("fractions", [0.5, 0.75]), "split.fractions")
    if not fr or any(not 0 < f < 1 for f in fr):
        raise ConfigError("split.fractions", f"each fraction eps_1/eps must be in (0, 1) (got {list(fr)})")

    h = dict(cfg.get("hybrid") or {})
    arms = tuple(h.get("arms") or ARMS)
    for a in arms:
        if a not in ARMS:
            raise ConfigError("hybrid.arms", f"unknown arm '{a}'; allowed: {', '.join(ARMS)}")
    sw = dict(h.get("size_sweep") or {})
    size_eps = _num(sw, "epsilon", "hybrid.size_sweep", 3.0, lo=0, lo_open=True)
    sizes = tuple(int(v) for v in (sw.get("n_private") or ()))
    if any(v < 2 for v in sizes):
        raise ConfigError("hybrid.size_sweep.n_private", f"every size must be >= 2 (got {list(sizes)})")
    thr = h.get("threshold", "public")
    if thr not in ("public", "zero"):
        raise ConfigError("hybrid.threshold", f"unknown '{thr}'; allowed: public, zero")

    lc = dict(cfg.get("lora") or {})
    lora = LoraSettings(rank=_num(lc, "rank", "lora", 16, int, lo=1), alpha=_num(lc, "alpha", "lora", 16.0, lo=0, lo_open=True),
                        dropout=_num(lc, "dropout", "lora", 0.0, lo=0, hi=0.99),
                        targets=tuple(lc.get("targets") or ()))
    dc = dict(cfg.get("dpsgd") or {})
    acc = dc.get("accountant", "prv")
    if acc not in ("prv", "rdp"):
        raise ConfigError("dpsgd.accountant", f"unknown accountant '{acc}'; allowed: prv, rdp")
    dps = DPSGDSettings(batch_size=_num(dc, "batch_size", "dpsgd", 1024, int, lo=1),
                        epochs=_num(dc, "epochs", "dpsgd", 3.0, lo=0, lo_open=True),
                        clip=_num(dc, "clip", "dpsgd", 1.0, lo=0, lo_open=True),
                        lr=_num(dc, "lr", "dpsgd", 1e-3, lo=0, lo_open=True), accountant=acc,
                        delta=_num(dc, "delta", "dpsgd", 5e-6, lo=0, lo_open=True, hi=1),
                        physical_tokens=_num(dc, "physical_tokens", "dpsgd", 4096, int, lo=8),
                        checkpoint_every=_num(dc, "checkpoint_every", "dpsgd", 1, int, lo=1))
    hc = dict(cfg.get("head") or {})
    rel = tuple(hc.get("releases") or ("laplace_p",))
    for r in rel:
        if r not in HEAD_RELEASES:
            raise ConfigError("head.releases", f"unknown release '{r}'; allowed: {', '.join(HEAD_RELEASES)}")
    alloc = tuple(hc.get("allocations") or ("l1",))
    for a in alloc:
        if a not in ALLOCATIONS:
            raise ConfigError("head.allocations", f"unknown allocation '{a}'; allowed: {', '.join(ALLOCATIONS)}")
    beta = hc.get("beta", "auto")
    beta = None if beta in (None, "auto") else _num(hc, "beta", "head", None, lo=0, lo_open=True)
    head = HeadSettings(pca_dim=_num(hc, "pca_dim", "head", 8, int, lo=1),
                        steps=_num(hc, "steps", "head", 150, int, lo=1),
                        lr=_num(hc, "lr", "head", 2.0, lo=0, lo_open=True),
                        clip=_num(hc, "clip", "head", 0.05, lo=0, lo_open=True),
                        contraction=_num(hc, "contraction", "head", 0.3, lo=0, lo_open=True, hi=1),
                        certificate=str(hc.get("certificate", "crown")),
                        k_max=_num(hc, "k_max", "head", 512, int, lo=1),
                        include_n=bool(hc.get("include_n", True)), releases=rel, allocations=alloc,
                        n_draws=_num(hc, "n_draws", "head", 41, int, lo=1),
                        delta=_num(hc, "delta", "head", 5e-6, lo=0, lo_open=True, hi=1), beta=beta)
    if dps.delta + head.delta > delta * (1 + 1e-12):
        raise ConfigError("privacy.delta", f"delta_1 + delta_2 = {dps.delta:g} + {head.delta:g} exceeds the total "
                                           f"delta {delta:g}; lower dpsgd.delta or head.delta")
    from certdp.bounds import get_certificate
    get_certificate(head.certificate)        # unknown names fail here
    gc = dict(cfg.get("dpsgd_head") or {})
    lrs = _floats(gc.get("lrs", [0.5, 2.0]), "dpsgd_head.lrs")
    if not lrs or any(v <= 0 for v in lrs):
        raise ConfigError("dpsgd_head.lrs", f"must be a non-empty list of learning rates > 0 (got {list(lrs)})")
    dh = DPSGDHeadSettings(batch_size=_num(gc, "batch_size", "dpsgd_head", 256, int, lo=1),
                           epochs=_num(gc, "epochs", "dpsgd_head", 10.0, lo=0, lo_open=True),
                           clip=_num(gc, "clip", "dpsgd_head", 1.0, lo=0, lo_open=True), lrs=lrs,
                           n_runs=_num(gc, "n_runs", "dpsgd_head", 5, int, lo=1))
    wd = h.get("work_dir")
    if not wd:
        from certdp.data.sources import cache_dir
        wd = cache_dir() / "hybrid"
    return HybridSettings(encoder=enc, max_seq_length=msl, n_test=n_test, n_private=n_priv, n_test_eval=n_te,
                          n_public=n_pub, epsilons=eps, delta=delta, fractions=fr,
                          reuse_end_to_end=bool(s.get("reuse_end_to_end", True)), arms=arms,
                          size_epsilon=size_eps, sizes=sizes, threshold=thr, lora=lora, dpsgd=dps, head=head,
                          dpsgd_head=dh, seed=int(cfg.get("seed", 0)), work_dir=Path(wd).expanduser(),
                          dataset_cfg=d)


def digest(*parts) -> str:
    """A short, stable key of the settings a unit of work depends on."""
    def norm(o):
        if hasattr(o, "__dataclass_fields__"):
            return norm(asdict(o))
        if isinstance(o, dict):
            return {str(k): norm(v) for k, v in sorted(o.items())}
        if isinstance(o, (list, tuple)):
            return [norm(v) for v in o]
        if isinstance(o, float):
            return round(o, 12)
        if isinstance(o, Path):
            return str(o)
        return o
    return hashlib.sha256(json.dumps(norm(list(parts)), sort_keys=True, default=str).encode()).hexdigest()[:16]


def _atomic_torch_save(obj, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _atomic_json(obj, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(json.dumps(obj, default=float))
    os.replace(tmp, path)


# ============================================================================ data
@dataclass(frozen=True)
class Split:
    texts: list[str]
    y: np.ndarray           # int64 in {0, 1}


@dataclass(frozen=True)
class SST2:
    private: Split          # the private pool (GLUE train minus the held-out test set), seeded order
    public: Split           # GLUE validation
    test: Split


def load_sst2(s: HybridSettings) -> SST2:
    """SST-2 (GLUE) through ``certdp.data.text.sst2_splits`` (``dataset.path``,
    ``$CERTDP_DATA_DIR/sst2``, the cache or HF ``datasets``): ``train.tsv`` split into the test set
    (``dataset.n_test`` sentences, seeded) and the private pool; ``dev.tsv`` is the public set."""
    from certdp.data.text import sst2_splits
    tr, dv = sst2_splits(s.dataset_cfg)
    train, dev = Split(list(tr[0]), np.asarray(tr[1], np.int64)), Split(list(dv[0]), np.asarray(dv[1], np.int64))
    n = len(train.texts)
    if s.n_test >= n:
        raise ConfigError("dataset.n_test", f"must be < the {n} training sentences (got {s.n_test})")
    perm = np.random.default_rng(s.seed + 20_000).permutation(n)
    te, pr = perm[:s.n_test], perm[s.n_test:]
    if s.n_test_eval:
        te = te[:s.n_test_eval]
    pub_idx = np.arange(len(dev.texts)) if not s.n_public else np.random.default_rng(s.seed + 30_000).permutation(len(dev.texts))[:s.n_public]
    pick = lambda sp, idx: Split([sp.texts[i] for i in idx], sp.y[idx])
    return SST2(pick(train, pr), pick(dev, pub_idx), pick(train, te))


def private_subset(data: SST2, n: int | None) -> Split:
    """The first n sentences of the (seeded) private pool: nested subsets for the size sweep."""
    if n is None:
        return data.private
    if n > len(data.private.texts):
        raise ConfigError("dataset.n_private", f"at most {len(data.private.texts)} private sentences (got {n})")
    return Split(data.private.texts[:n], data.private.y[:n])


# ============================================================================ encoder + LoRA
def encoder_folder(s: HybridSettings) -> Path:
    from certdp.data.encoders import MODELS
    from certdp.data.sources import resolve_model
    return Path(resolve_model(MODELS[s.encoder], s.dataset_cfg.get("encoder_path")))


def _transformer_subfolder(folder: Path) -> tuple[Path, str, bool]:
    """(HF model folder, pooling mode, normalise) from a sentence-transformers folder."""
    sub, pool, norm = folder, "mean", False
    mods = folder / "modules.json"
    if mods.exists():
        for m in json.loads(mods.read_text()):
            t = m.get("type", "")
            if t.endswith("Transformer"):
                sub = folder / m.get("path", "")
            elif t.endswith("Pooling"):
                pc = folder / m.get("path", "") / "config.json"
                if pc.exists():
                    c = json.loads(pc.read_text())
                    pool = "cls" if c.get("pooling_mode_cls_token") else "mean"
            elif t.endswith("Normalize"):
                norm = True
    return sub, pool, norm


def _default_targets(model) -> list[str]:
    names = {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    for q, v in (("query", "value"), ("q", "v"), ("q_proj", "v_proj"), ("q_lin", "v_lin")):
        if q in names and v in names:
            return [q, v]
    raise ConfigError("lora.targets", f"cannot find the q/v projections of this encoder; set lora.targets (linear layers: {sorted(names)[:12]})")


class LoraClassifier(torch.nn.Module):
    """Encoder with LoRA on q and v, sentence-transformers pooling, and a linear head [2]."""

    def __init__(self, folder: Path, lora: LoraSettings, seed: int):
        super().__init__()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from peft import LoraConfig, get_peft_model
            from transformers import AutoModel, AutoTokenizer
            from transformers.utils import logging as hf_logging
        except ImportError:
            raise ConfigError("lora", "the hybrid needs the optional extra: pip install 'certdp[hybrid]' (peft, transformers)")
        hf_logging.set_verbosity_error()
        sub, self.pool, self.normalise = _transformer_subfolder(Path(folder))
        self.tokenizer = AutoTokenizer.from_pretrained(str(sub), local_files_only=True)
        base = AutoModel.from_pretrained(str(sub), local_files_only=True)
        targets = list(lora.targets) or _default_targets(base)
        torch.manual_seed(int(seed))           # LoRA A init and the head are seeded
        self.encoder = get_peft_model(base, LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                                       target_modules=targets, bias="none"))
        self.dim = int(base.config.hidden_size)
        self.head = torch.nn.Linear(self.dim, 2)
        self.targets = targets

    def embed(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        if self.pool == "cls":
            e = h[:, 0]
        else:
            m = mask.unsqueeze(-1).to(h.dtype)
            e = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(e, dim=-1) if self.normalise else e

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids, mask))

    def trainable(self) -> dict[str, torch.nn.Parameter]:
        return {n: p for n, p in self.named_parameters() if p.requires_grad}

    def tokenize(self, texts: Sequence[str], max_len: int) -> list[list[int]]:
        return self.tokenizer(list(texts), truncation=True, max_length=max_len)["input_ids"]


def _pad(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    L = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), L), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.as_tensor(s)
        mask[i, :len(s)] = 1
    return ids, mask


def _micro_batches(idx: np.ndarray, lens: np.ndarray, tokens: int) -> list[np.ndarray]:
    """Split ``idx`` into chunks of similar length (sorted) with at most ``tokens`` padded
    tokens each.  Per-sample gradients do not depend on the chunking."""
    order = idx[np.argsort(lens[idx], kind="stable")]
    out, cur, cur_max = [], [], 0
    for i in order:
        m = max(cur_max, int(lens[i]))
        if cur and m * (len(cur) + 1) > tokens:
            out.append(np.asarray(cur))
            cur, m = [], int(lens[i])
        cur.append(i)
        cur_max = m
    if cur:
        out.append(np.asarray(cur))
    return out


@functools.lru_cache(maxsize=256)
def noise_multiplier(*, epsilon: float, delta: float, sample_rate: float, steps: int, accountant: str) -> tuple[float, float]:
    """(sigma, certified epsilon): the Opacus accountant's smallest sigma with eps(sigma) <= epsilon."""
    from opacus.accountants import create_accountant
    from opacus.accountants.utils import get_noise_multiplier
    sigma = float(get_noise_multiplier(target_epsilon=epsilon, target_delta=delta, sample_rate=sample_rate,
                                       steps=steps, accountant=accountant, epsilon_tolerance=0.01))
    acc = create_accountant(accountant)
    acc.history = [(sigma, sample_rate, steps)]
    eps = float(acc.get_epsilon(delta=delta))
    if eps > epsilon * (1 + 1e-6):
        raise RuntimeError(f"accountant gives eps={eps:.4f} > target {epsilon} for sigma={sigma:.4f}")
    return sigma, eps


@dataclass(frozen=True)
class Adapter:
    key: str
    path: Path
    eps1: float
    meta: dict


def finetune(s: HybridSettings, folder: Path, train: Split, eps1: float, *, progress: bool) -> Adapter:
    """DP-LoRA fine-tuning to (eps1, dpsgd.delta) (see the module docstring); resumable."""
    d = s.dpsgd
    n = len(train.texts)
    B = min(d.batch_size, n)
    q = B / n
    T = max(1, int(round(d.epochs / q)))
    key = digest("dplora", s.encoder, folder.name, s.max_seq_length, s.lora, d, eps1, n,
                 s.n_test, s.seed, hashlib.sha256("\n".join(train.texts).encode()).hexdigest())
    wdir = s.work_dir / "adapters" / key
    final = wdir / "adapter.pt"
    if final.exists():
        meta = json.loads((wdir / "meta.json").read_text())
        log.info("DP-LoRA eps1=%g N=%d: finished adapter %s (cached)", eps1, n, key)
        return Adapter(key, final, eps1, meta)
    sigma, eps_cert = noise_multiplier(epsilon=eps1, delta=d.delta, sample_rate=q, steps=T, accountant=d.accountant)
    from opacus import GradSampleModule
    net = LoraClassifier(folder, s.lora, s.seed)
    params = net.trainable()
    opt = torch.optim.AdamW(params.values(), lr=d.lr, weight_decay=0.0)
    ckpt = wdir / "checkpoint.pt"
    start = 0
    if ckpt.exists():
        st = torch.load(ckpt, map_location="cpu", weights_only=False)
        net.load_state_dict(st["trainable"], strict=False)
        opt.load_state_dict(st["optimizer"])
        start = int(st["step"])
        log.info("DP-LoRA eps1=%g N=%d: resuming %s at step %d/%d", eps1, n, key, start, T)
    gsm = GradSampleModule(net, batch_first=True, loss_reduction="sum")
    gsm.train()
    toks = net.tokenize(train.texts, s.max_seq_length)
    lens = np.asarray([len(t) for t in toks])
    y = torch.as_tensor(train.y)
    pad_id = net.tokenizer.pad_token_id or 0
    log.info("DP-LoRA eps1=%g (delta1=%g): N=%d, B=%d (q=%.4f), T=%d steps, sigma=%.4f (PRV eps %.4f), %d trainable params",
             eps1, d.delta, n, B, q, T, sigma, eps_cert, sum(p.numel() for p in params.values()))
    from tqdm.auto import tqdm
    bar = tqdm(total=T, initial=start, desc=f"DP-LoRA eps1={eps1:g}", disable=not progress, leave=False)
    t0 = time.perf_counter()
    for t in range(start, T):
        g = generator_for(s.seed, "dplora-step", key, t)
        take = (torch.rand(n, generator=g, dtype=torch.float64) < q).numpy().nonzero()[0]
        torch.manual_seed(int(torch.randint(0, 2 ** 62, (1,), generator=g)))   # dropout, if any
        summed = {k: torch.zeros_like(p) for k, p in params.items()}
        for mb in _micro_batches(take, lens, d.physical_tokens) if len(take) else []:
            ids, mask = _pad([toks[i] for i in mb], pad_id)
            out = gsm(ids, mask)
            loss = torch.nn.functional.cross_entropy(out, y[mb], reduction="sum")
            loss.backward()
            gs = {k: p.grad_sample for k, p in params.items()}
            norms = torch.sqrt(sum(v.reshape(v.shape[0], -1).pow(2).sum(1) for v in gs.values()))
            factor = (d.clip / (norms + 1e-6)).clamp(max=1.0)
            for k, v in gs.items():
                summed[k] += torch.einsum("i,i...->...", factor, v)
            for p in params.values():
                p.grad_sample = None
                p.grad = None
        for k, p in params.items():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype)
            p.grad = (summed[k] + sigma * d.clip * noise) / (q * n)
        opt.step()
        opt.zero_grad(set_to_none=True)
        bar.update(1)
        if (t + 1) % d.checkpoint_every == 0 and t + 1 < T:
            _atomic_torch_save({"step": t + 1, "trainable": {k: p.detach().clone() for k, p in params.items()},
                                "optimizer": opt.state_dict()}, ckpt)
    bar.close()
    meta = {"eps1": eps1, "eps1_certified": eps_cert, "delta1": d.delta, "sigma": sigma, "steps": T,
            "sample_rate": q, "batch_size": B, "n_private": n, "accountant": d.accountant,
            "seconds": time.perf_counter() - t0, "targets": net.targets, "trainable": sum(p.numel() for p in params.values())}
    gsm._close() if hasattr(gsm, "_close") else None
    _atomic_torch_save({k: p.detach().clone() for k, p in params.items()}, final)
    _atomic_json(meta, wdir / "meta.json")
    if ckpt.exists():
        ckpt.unlink()
    log.info("DP-LoRA eps1=%g done in %.0f s", eps1, meta["seconds"])
    return Adapter(key, final, eps1, meta)


class AdaptedEncoder:
    """The fine-tuned encoder as a ``certdp.data.encoders.Encoder`` (cached, chunked embedding)."""

    def __init__(self, s: HybridSettings, folder: Path, adapter: Adapter | None):
        self.s, self.folder, self.adapter = s, folder, adapter
        self.tag = f"{s.encoder}-len{s.max_seq_length}-" + (f"dplora-{adapter.key}" if adapter else "frozen")
        self._net = None
        self.dim = 0

    def net(self) -> LoraClassifier:
        if self._net is None:
            net = LoraClassifier(self.folder, self.s.lora, self.s.seed)
            if self.adapter is not None:
                net.load_state_dict(torch.load(self.adapter.path, map_location="cpu", weights_only=True), strict=False)
            self._net = net.eval()
            self.dim = net.dim
        return self._net

    @torch.no_grad()
    def encode(self, texts: Sequence[str]) -> np.ndarray:
        net = self.net()
        toks = net.tokenize(texts, self.s.max_seq_length)
        lens = np.asarray([len(t) for t in toks])
        out = np.zeros((len(texts), net.dim), np.float32)
        for mb in _micro_batches(np.arange(len(texts)), lens, 8192):
            ids, mask = _pad([toks[i] for i in mb], net.tokenizer.pad_token_id or 0)
            out[mb] = net.embed(ids, mask).float().numpy()
        return out

    @torch.no_grad()
    def head_margin(self, emb: np.ndarray) -> np.ndarray:
        """The fine-tuned head's logit margin (class 1 - class 0) on embeddings."""
        net = self.net()
        z = net.head(torch.as_tensor(emb, dtype=torch.float32))
        return (z[:, 1] - z[:, 0]).double().numpy()


def embeddings(s: HybridSettings, enc, splits: dict[str, Split], *, progress: bool) -> dict[str, np.ndarray]:
    from certdp.data.encoders import embed
    return {name: embed(sp.texts, enc, dataset="sst2", split=name, progress=progress) for name, sp in splits.items()}


def frozen_encoder(s: HybridSettings):
    """The un-adapted encoder: engineer C's sentence-transformers encoder and cache."""
    from certdp.data.encoders import load_encoder
    return load_encoder({**s.dataset_cfg, "encoder": s.encoder, "max_seq_length": s.max_seq_length})


# ============================================================================ heads
def best_threshold(m_pub: torch.Tensor, y_pub: torch.Tensor) -> torch.Tensor:
    """Per row of margins [D, n], the threshold t maximising the public accuracy of 1[m > t]."""
    D, n = m_pub.shape
    ms, order = torch.sort(m_pub, dim=-1)
    ys = y_pub[order].to(DTYPE)                         # labels in sorted order
    # threshold below position i (0..n): predict 0 for the first i, 1 for the rest
    neg_below = torch.cat([torch.zeros(D, 1, dtype=DTYPE), (1 - ys).cumsum(-1)], -1)
    pos_above = ys.sum(-1, keepdim=True) - torch.cat([torch.zeros(D, 1, dtype=DTYPE), ys.cumsum(-1)], -1)
    i = (neg_below + pos_above).argmax(-1)
    lo = torch.where(i > 0, ms.gather(-1, (i - 1).clamp(min=0).unsqueeze(-1)).squeeze(-1), ms[:, 0] - 1)
    hi = torch.where(i < n, ms.gather(-1, i.clamp(max=n - 1).unsqueeze(-1)).squeeze(-1), ms[:, -1] + 1)
    return (lo + hi) / 2


def margin_accuracy(m_pub: torch.Tensor, y_pub: torch.Tensor, m_test: torch.Tensor, y_test: torch.Tensor,
                    threshold: str) -> tuple[np.ndarray, np.ndarray]:
    """(public, test) accuracies [D] of margins [D, n] with the public-chosen threshold."""
    t = best_threshold(m_pub, y_pub) if threshold == "public" else torch.zeros(m_pub.shape[0], dtype=m_pub.dtype)
    acc = lambda m, y: ((m > t.unsqueeze(-1)).long() == y).to(DTYPE).mean(-1).numpy()
    return acc(m_pub, y_pub), acc(m_test, y_test)


def _head_margins(model, thetas: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    z = model.forward(thetas, x)                       # [D, n, 2]
    return z[..., 1] - z[..., 0]


@dataclass
class Features:
    """PCA-k features (fitted on public) of one encoder, in float64 tensors."""
    x_priv: torch.Tensor
    y_priv: torch.Tensor
    x_pub: torch.Tensor
    y_pub: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    explained: float


def pca_features(s: HybridSettings, emb: dict[str, np.ndarray], data: dict[str, Split]) -> Features:
    from certdp.data.features import fit_public_pca
    pca = fit_public_pca(emb["public"], s.head.pca_dim, key="head.pca_dim")
    T = lambda a: torch.as_tensor(pca.transform(a), dtype=DTYPE)
    Y = lambda sp: torch.as_tensor(sp.y)
    return Features(T(emb["private"]), Y(data["private"]), T(emb["public"]), Y(data["public"]), T(emb["test"]),
                    Y(data["test"]), pca.explained)


def head_train_settings(s: HybridSettings):
    from certdp.training import TrainSettings
    h = s.head
    return TrainSettings(steps=h.steps, lr=h.lr, clip=h.clip, batch_size=None, contraction=h.contraction, seed=s.seed)


def ags_certificate(s: HybridSettings, f: Features, key: str, *, progress: bool) -> dict:
    """Nominal head and its AGT envelopes (CROWN, k = 1..k_max and N) on the private features,
    plus the anisotropic weights from the same certificate on the public features; cached."""
    path = s.work_dir / "ags" / f"{digest('ags', key, s.head, s.seed, f.x_priv.shape)}.pt"
    if path.exists():
        return torch.load(path, map_location="cpu", weights_only=False)
    from certdp.agt import run_agt
    from certdp.bounds import get_certificate
    from certdp.models import build_model
    d = f.x_priv.shape[1]
    model = build_model("logistic", d, n_out=2)
    ts = head_train_settings(s)
    n = f.x_priv.shape[0]
    ks = sorted({min(k, n) for k in range(1, s.head.k_max + 1)} | ({n} if s.head.include_n else set()))
    cert = get_certificate(s.head.certificate)
    theta0 = model.init(s.seed)
    t0 = time.perf_counter()
    env = run_agt(model, theta0, f.x_priv, f.y_priv, ts, ks, certificate=cert, progress=progress)
    secs = time.perf_counter() - t0
    # anisotropic weights: k = 1 envelope widths of the same training run on the *public* set
    env_pub = run_agt(model, theta0, f.x_pub, f.y_pub, ts, [1], certificate=cert, progress=False)
    w = (env_pub.hi[0] - env_pub.lo[0]).clamp(min=0)
    w = w / w.mean().clamp(min=1e-300)
    w = w.clamp(min=1e-3)
    out = {"k": env.k_values, "lo": env.lo, "hi": env.hi, "nominal": env.nominal, "weights": w,
           "seconds": secs, "n": n, "d": d}
    _atomic_torch_save(out, path)
    log.info("AGS head certified: N=%d, |K|=%d, %.1f s", n, len(ks), secs)
    return out


def ags_release(s: HybridSettings, cert: dict, f: Features, *, epsilon: float, delta: float, release: str,
                allocation: str, label) -> dict:
    """Released heads (``head.n_draws`` draws) at (epsilon, delta) and their accuracies."""
    from certdp.agt import Envelopes
    from certdp.methods.ags import trivial_cover
    from certdp.privacy.mechanisms import parameter_mechanism
    from certdp.privacy.sensitivity import staircase
    model = _head_model_for(cert["d"])
    P = model.n_params
    w = cert["weights"] if allocation == "anisotropic" else torch.ones(P, dtype=DTYPE)
    per_coord = trivial_cover(head_train_settings(s), P, (0, s.head.steps)) / P
    cover = float((per_coord / w).sum())
    sc = staircase(cert["lo"] / w, cert["hi"] / w, cert["nominal"] / w, cert["k"], n_total=cert["n"],
                   global_sensitivity=cover)
    mech = parameter_mechanism(release, epsilon=epsilon, n_params=P, delta=delta, beta=s.head.beta)
    u = float(sc.smooth(mech.beta))
    gen = generator_for(s.seed, "hybrid-ags", label, release, allocation, epsilon)
    z = mech.sample(gen, (s.head.n_draws, P))
    thetas = cert["nominal"] + w * (mech.scale(u) * z)
    acc_pub, acc_test = margin_accuracy(_head_margins(model, thetas, f.x_pub), f.y_pub,
                                        _head_margins(model, thetas, f.x_test), f.y_test, s.threshold)
    nom_pub, nom_test = margin_accuracy(_head_margins(model, cert["nominal"].unsqueeze(0), f.x_pub), f.y_pub,
                                        _head_margins(model, cert["nominal"].unsqueeze(0), f.x_test), f.y_test, s.threshold)
    return {"u": u, "beta": float(mech.beta), "scale": float(mech.scale(u)), "regime": mech.regime,
            "acc_pub": acc_pub, "acc_test": acc_test, "nonprivate_head_accuracy": float(nom_test[0])}


def _head_model_for(d: int):
    from certdp.models import build_model
    return build_model("logistic", d, n_out=2)


def dpsgd_head(s: HybridSettings, f: Features, *, epsilon: float, delta: float, label) -> dict:
    """Frozen encoder + DP-SGD logistic head: Poisson rate B/N, per-sample l2 clipping, Gaussian
    noise sigma*clip, PRV accounting at (epsilon, delta); learning rate chosen on the public set."""
    g = s.dpsgd_head
    model = _head_model_for(f.x_priv.shape[1])
    n = f.x_priv.shape[0]
    B = min(g.batch_size, n)
    q = B / n
    T = max(1, int(round(g.epochs / q)))
    sigma, eps_cert = noise_multiplier(epsilon=epsilon, delta=delta, sample_rate=q, steps=T, accountant=s.dpsgd.accountant)
    best = None
    for lr in g.lrs:
        gen = generator_for(s.seed, "hybrid-dpsgd-head", label, epsilon, lr)
        thetas = []
        for _ in range(g.n_runs):
            theta = model.init(s.seed)
            for _t in range(T):
                take = (torch.rand(n, generator=gen, dtype=DTYPE) < q).nonzero().flatten()
                tot = torch.zeros_like(theta)
                if len(take):
                    gr = model.per_sample_grads(theta, f.x_priv[take], f.y_priv[take])
                    nrm = gr.norm(dim=-1, keepdim=True)
                    tot = (gr * (g.clip / (nrm + 1e-12)).clamp(max=1.0)).sum(0)
                tot = tot + sigma * g.clip * torch.randn(theta.shape, generator=gen, dtype=DTYPE)
                theta = theta - lr * tot / (q * n)
            thetas.append(theta)
        th = torch.stack(thetas)
        acc_pub, acc_test = margin_accuracy(_head_margins(model, th, f.x_pub), f.y_pub,
                                            _head_margins(model, th, f.x_test), f.y_test, s.threshold)
        if best is None or np.median(acc_pub) > np.median(best["acc_pub"]):
            best = {"lr": lr, "acc_pub": acc_pub, "acc_test": acc_test}
    return {**best, "sigma": sigma, "eps_certified": eps_cert, "steps": T, "sample_rate": q}


# ============================================================================ runner
def _head_fields(s, r: dict, f, cert: dict) -> dict:
    """The result columns every AGS-head row shares (hybrid and frozen_ags arms)."""
    return {"u": r["u"], "beta": r["beta"], "noise_scale": r["scale"], "n_draws": s.head.n_draws,
            "nonprivate_head_accuracy": r["nonprivate_head_accuracy"], "pca_explained": f.explained,
            "certify_seconds": cert["seconds"],
            **_stats("accuracy_", r["acc_test"]), **_stats("public_accuracy_", r["acc_pub"])}


def _stats(prefix: str, a: np.ndarray) -> dict:
    a = np.asarray(a, float)
    return {f"{prefix}median": float(np.median(a)), f"{prefix}mean": float(a.mean()),
            f"{prefix}q25": float(np.quantile(a, 0.25)), f"{prefix}q75": float(np.quantile(a, 0.75))}


def plan_cells(s: HybridSettings) -> list[tuple[int | None, float, str]]:
    """(n_private, epsilon, sweep) cells: the main eps sweep and the private-set-size sweep."""
    cells = [(s.n_private, e, "epsilon") for e in s.epsilons]
    for n in s.sizes:
        cells.append((n, s.size_epsilon, "size"))
    return cells


def eps1_candidates(s: HybridSettings, eps: float, n, cells) -> list[float]:
    c = {round(f * eps, 10) for f in s.fractions}
    if s.reuse_end_to_end:
        c |= {round(e, 10) for (m, e, _) in cells if m == n and e < eps and "dplora" in s.arms}
    return sorted(c)


def run(cfg: dict, *, progress: bool = True) -> dict[str, pd.DataFrame]:
    s = hybrid_settings(cfg)
    t_start = time.perf_counter()
    data = load_sst2(s)
    folder = encoder_folder(s)
    cells = plan_cells(s)
    log.info("hybrid SST-2 (%s, max len %d): private pool %d, public %d, test %d; cells %s",
             s.encoder, s.max_seq_length, len(data.private.texts), len(data.public.texts), len(data.test.texts),
             [(n or len(data.private.texts), e) for n, e, _ in cells])
    d1, d2 = s.dpsgd.delta, s.head.delta
    frozen = frozen_encoder(s)
    adapters: dict = {}
    feats: dict = {}
    certs: dict = {}

    def split_dict(n):
        return {"private": private_subset(data, n), "public": data.public, "test": data.test}

    def adapter_for(n, e1):
        k = (n, round(e1, 10))
        if k not in adapters:
            adapters[k] = finetune(s, folder, private_subset(data, n), e1, progress=progress)
        return adapters[k]

    def features_for(n, adapter):
        k = (n, adapter.key if adapter else "frozen")
        if k not in feats:
            enc = AdaptedEncoder(s, folder, adapter) if adapter else frozen
            sp = split_dict(n)
            emb = embeddings(s, enc, sp, progress=progress)
            feats[k] = (enc, emb, pca_features(s, emb, sp))
        return feats[k]

    def cert_for(n, adapter):
        k = (n, adapter.key if adapter else "frozen")
        if k not in certs:
            _, _, f = features_for(n, adapter)
            tag = f"{s.encoder}-len{s.max_seq_length}-{k[1]}"
            certs[k] = ags_certificate(s, f, tag, progress=progress)
        return certs[k]

    frames = []
    for n, eps, sweep in cells:
        n_eff = n or len(data.private.texts)
        ckey = digest("cell", s.encoder, s.max_seq_length, s.lora, s.dpsgd, s.head, s.dpsgd_head, s.fractions,
                      s.reuse_end_to_end, s.arms, s.threshold, s.seed, s.n_test, s.n_test_eval, s.n_public, n_eff, eps,
                      s.delta, eps1_candidates(s, eps, n, cells), str(folder))
        cpath = s.work_dir / "cells" / f"{ckey}.json"
        if cpath.exists():
            rows = json.loads(cpath.read_text())
            log.info("cell N=%d eps=%g: cached (%d rows)", n_eff, eps, len(rows))
        else:
            rows = _cell(s, data, n, eps, sweep, cells, adapter_for, features_for, cert_for, d1, d2)
            _atomic_json(rows, cpath)
        for r in rows:
            r["sweep"] = sweep
        frames.append(pd.DataFrame(rows))
        summary = pd.DataFrame(rows)
        summary = summary[summary.chosen]
        log.info("N=%d eps=%g: %s", n_eff, eps,
                 ", ".join(f"{a}={v:.4f}" for a, v in zip(summary.arm + "/" + summary.head_release.fillna(""), summary.accuracy_median)))
    results = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    accounting = _accounting_frame(results)
    log.info("hybrid finished in %.0f s", time.perf_counter() - t_start)
    return {"results": results, "accounting": accounting}


def _accounting_frame(results: pd.DataFrame) -> pd.DataFrame:
    """One row per chosen result: the two budgets and their basic composition."""
    if results.empty:
        return results
    r = results[results.chosen].copy()
    out = r[["sweep", "arm", "head_release", "n_private", "epsilon", "delta", "eps1", "delta1", "eps1_certified",
             "eps2", "delta2"]].copy()
    out["eps_total"] = out.eps1.fillna(0) + out.eps2.fillna(0)
    out["delta_total"] = out.delta1.fillna(0) + out.delta2.fillna(0)
    out["within_budget"] = (out.eps_total <= out.epsilon * (1 + 1e-9)) & (out.delta_total <= out.delta * (1 + 1e-9))
    return out


def _cell(s: HybridSettings, data: SST2, n, eps: float, sweep: str, cells, adapter_for, features_for, cert_for,
          d1: float, d2: float) -> list[dict]:
    n_eff = n or len(data.private.texts)
    base = {"dataset": "sst2", "encoder": s.encoder, "max_seq_length": s.max_seq_length, "n_private": n_eff,
            "n_public": len(data.public.texts), "n_test": len(data.test.texts), "epsilon": eps, "delta": s.delta,
            "seed": s.seed}
    rows: list[dict] = []
    y_pub = torch.as_tensor(data.public.y)
    y_test = torch.as_tensor(data.test.y)
    if "dplora" in s.arms:
        ad = adapter_for(n, eps)
        # the end-to-end arm needs public and test embeddings only (same chunk cache as the features)
        enc = AdaptedEncoder(s, encoder_folder(s), ad)
        emb = embeddings(s, enc, {"public": data.public, "test": data.test}, progress=False)
        mp = torch.as_tensor(enc.head_margin(emb["public"])).unsqueeze(0)
        mt = torch.as_tensor(enc.head_margin(emb["test"])).unsqueeze(0)
        ap, at = margin_accuracy(mp, y_pub, mt, y_test, s.threshold)
        rows.append({**base, "arm": "dplora", "head_release": None, "allocation": None, "split_fraction": 1.0,
                     "eps1": eps, "delta1": d1, "eps1_certified": ad.meta["eps1_certified"], "eps2": 0.0, "delta2": 0.0,
                     "sigma": ad.meta["sigma"], "steps": ad.meta["steps"], "chosen": True, "n_draws": 1,
                     **_stats("accuracy_", at), **_stats("public_accuracy_", ap)})
    for release in s.head.releases:
        regime_delta = d2 if release.startswith("laplace") else 0.0
        if "hybrid" in s.arms:
            cand = []
            for e1 in eps1_candidates(s, eps, n, cells):
                ad = adapter_for(n, e1)
                _, _, f = features_for(n, ad)
                cert = cert_for(n, ad)
                for alloc in s.head.allocations:
                    r = ags_release(s, cert, f, epsilon=eps - e1, delta=d2, release=release, allocation=alloc,
                                    label=(n_eff, ad.key))
                    cand.append({**base, "arm": "hybrid", "head_release": release, "allocation": alloc,
                                 "split_fraction": e1 / eps, "eps1": e1, "delta1": d1,
                                 "eps1_certified": ad.meta["eps1_certified"], "eps2": eps - e1, "delta2": regime_delta,
                                 "sigma": ad.meta["sigma"], "steps": ad.meta["steps"], **_head_fields(s, r, f, cert)})
            _choose(cand)
            rows += cand
        if "frozen_ags" in s.arms:
            _, _, f = features_for(n, None)
            cert = cert_for(n, None)
            cand = []
            for alloc in s.head.allocations:
                r = ags_release(s, cert, f, epsilon=eps, delta=s.delta if release.startswith("laplace") else 0.0,
                                release=release, allocation=alloc, label=(n_eff, "frozen"))
                cand.append({**base, "arm": "frozen_ags", "head_release": release, "allocation": alloc,
                             "split_fraction": 0.0, "eps1": 0.0, "delta1": 0.0, "eps1_certified": 0.0, "eps2": eps,
                             "delta2": s.delta if release.startswith("laplace") else 0.0, **_head_fields(s, r, f, cert)})
            _choose(cand)
            rows += cand
    if "frozen_dpsgd" in s.arms:
        _, _, f = features_for(n, None)
        r = dpsgd_head(s, f, epsilon=eps, delta=s.delta, label=n_eff)
        rows.append({**base, "arm": "frozen_dpsgd", "head_release": None, "allocation": None, "split_fraction": 0.0,
                     "eps1": 0.0, "delta1": 0.0, "eps1_certified": 0.0, "eps2": eps, "delta2": s.delta,
                     "sigma": r["sigma"], "steps": r["steps"], "lr": r["lr"], "chosen": True, "n_draws": s.dpsgd_head.n_runs,
                     **_stats("accuracy_", r["acc_test"]), **_stats("public_accuracy_", r["acc_pub"])})
    return rows


def _choose(cand: list[dict]) -> None:
    """Mark the candidate (split, allocation) with the best median public accuracy."""
    if not cand:
        return
    best = max(range(len(cand)), key=lambda i: (cand[i]["public_accuracy_median"], -i))
    for i, c in enumerate(cand):
        c["chosen"] = i == best
