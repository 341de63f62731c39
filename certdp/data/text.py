"""Text datasets ``imdb`` and ``sst2``: real reviews / sentences -> sentence encoder -> PCA-8.

Neither is on a package registry, so the files come from (first found wins):

  (a) ``dataset.path=FOLDER`` holding the files below,
  (b) ``$CERTDP_DATA_DIR/imdb/`` and ``$CERTDP_DATA_DIR/sst2/`` (e.g. the project's ``shared/data``),
  (c) the cache (``$CERTDP_CACHE``, default ``~/.cache/certdp``), filled by (d),
  (d) the HF ``datasets`` library (``stanfordnlp/imdb``, ``nyu-mll/glue`` sst2) when it is
      installed and a network exists; the rows are written once into the cache in the formats
      below.  ``CERTDP_OFFLINE=1`` forbids it.

Formats (as in ``shared/data/README.md``):

* IMDB: ``train.csv.gz``, ``test.csv.gz``: gzip CSV (UTF-8) with header ``text,label``; label 1 =
  positive.  The official aclImdb 25,000 / 25,000 split.
* SST-2: ``train.tsv`` (67,349 rows), ``dev.tsv`` (872 rows): the GLUE files, header
  ``sentence\\tlabel``, one ``<sentence>\\t<label>`` per line, no quoting.

Splits (deterministic from ``split_seed``, by default the run seed):

* IMDB: the 25,000 training reviews are permuted: 20,000 private, 5,000 public; the 25,000 test
  reviews are the test set.
* SST-2: 5,000 of the 67,349 training sentences are held out as the test set, the other 62,349
  are private; the 872 GLUE dev sentences are the public set (the GLUE test labels are not
  public).

A private record is one review (a record of the csv grammar) or one SST-2 line.  The split is a
permutation of the records' positions, drawn before any text or label is read, and nothing a
private record holds refuses, drops or moves anything: text that is not UTF-8 is decoded with
U+FFFD, an empty text is a text, a label other than 0/1 (or a malformed record) is coded negative;
only ``\\n`` ends an SST-2 line (``str.splitlines`` also split at U+2028 and friends, so one
private sentence could add a record).  Public and test records are checked strictly
(:func:`check_records`).  Embeddings are clipped to :data:`EMBEDDING_RANGE`.

Subsets (``n_private``, ``n_public``, ``n_test``) and truncation (``max_chars`` before the
encoder, ``max_seq_length`` tokens inside it) make CPU runs affordable: the encoder dominates
(see :mod:`certdp.data.encoders`).  Embeddings of a source file are cached once per encoder and
reused by every seed and split; features are PCA-``pca_dim`` fitted on the public embeddings
only, standardised with public statistics.

The reference copies' SHA-256 are in :data:`REFERENCE_SHA256`; a user's own copy is trusted and
``info["matches_reference"]`` says whether it is byte-identical.
"""

from __future__ import annotations

import csv
import gzip
import importlib.util
import io
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from certdp.data import Dataset, records, register, settings
from certdp.data.features import binary_labels, fit_public_map
from certdp.data.text_profiles import PROFILES, profile_of, resolved, row_labels, size, text_fields
from certdp.data.sources import DataFile, DataUnavailable, cache_dir, is_offline, locate, sha256_of
from certdp.errors import ConfigError
from certdp.results import atomic_write_bytes

log = logging.getLogger("certdp")

FILES: dict[str, dict[str, DataFile]] = {
    "imdb": {"train": DataFile("imdb", "imdb/train.csv.gz", hf="stanfordnlp/imdb:train"),
             "test": DataFile("imdb", "imdb/test.csv.gz", hf="stanfordnlp/imdb:test")},
    "sst2": {"train": DataFile("sst2", "sst2/train.tsv", hf="nyu-mll/glue:sst2:train"),
             "dev": DataFile("sst2", "sst2/dev.tsv", hf="nyu-mll/glue:sst2:validation")},
}
REFERENCE_SHA256 = {
    "imdb/train.csv.gz": "88f1be071c27b7e86720fe72a76422d3a13d588aa638ac6d80b664c1a5a8a758",
    "imdb/test.csv.gz": "2118d1a372e34228def776adf11a81c88ffb924db427cb0f2e1eb0e9dca9f611",
    "sst2/train.tsv": "48eac26399f8456935f81dd9e3a745c1430adb6c62e233ccfe22db4a0d15d1d1",
    "sst2/dev.tsv": "54a9c12c77e402fc14d6a66a506f24d999f596b0176eb777c972cccc2f9cc4b0",
}
# The declared range of an embedding coordinate: both encoders end in a Normalize module (unit-length
# embeddings), so every coordinate lies in [-1, 1] whatever the text
EMBEDDING_RANGE = (-1.0, 1.0)
FORMATS = {"imdb": "train.csv.gz, test.csv.gz (gzip CSV text,label)",
           "sst2": "train.tsv, dev.tsv (GLUE sentence<TAB>label)"}


# --------------------------------------------------------------------------------------------
# Reading and writing the two formats

@dataclass(frozen=True)
class TextRecords:
    """Every record of one file as read, nothing refused: ``texts`` (bytes that are not UTF-8
    replaced by U+FFFD), ``y`` 0/1 (-1 where the label is neither), ``bad`` True where the text is
    not UTF-8 or the record is malformed (more fields than the header; no tab in an SST-2 line).
    The split decides which records are private (used as read, an unknown label coded negative)
    and which public or test (checked strictly: :func:`check_records`)."""
    texts: list
    y: np.ndarray
    bad: np.ndarray
    fname: str

    def __len__(self) -> int:
        return len(self.texts)


def _label01(cells) -> np.ndarray:
    text = np.array([str(c).strip() for c in cells], dtype=object)
    return np.where(text == "1", 1, np.where(text == "0", 0, -1)).astype(np.int64)


def _text(s: str) -> str:
    return s.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def imdb_records(path) -> TextRecords:
    """The records of an IMDB csv (:mod:`certdp.data.records`: the csv grammar, quoted reviews may
    hold commas, quotes and line breaks; cells decoded one by one)."""
    p = Path(path)
    fname, allowed = records.shown_name(p), FORMATS["imdb"]
    data = records.file_bytes(p, key="dataset", allowed=allowed)
    records.check_header_line(data, fname, key="dataset", allowed=allowed)
    cells, extra, utf8 = records.parse(data, fname, key="dataset", allowed=allowed)
    if cells.iloc[0].tolist() != ["text", "label"]:
        raise DataUnavailable(f"dataset 'imdb': {path} must have the header text,label (got "
                              f"{','.join(records.shown(str(c)) for c in cells.iloc[0])})")
    text, extra = cells[0].iloc[1:], extra[1:]
    bad = extra | (False if utf8 else records.not_utf8(text))
    y = _label01(cells[1].iloc[1:])
    y[extra] = -1
    return TextRecords(text.tolist() if utf8 else [_text(t) for t in text], y, np.asarray(bad, bool), fname)


def sst2_records(path) -> TextRecords:
    """The records of a GLUE SST-2 file: one ``<sentence>\\t<label>`` per line (``\\n``-ended; the
    last tab separates the label; no quoting); an empty line is not a record."""
    p = Path(path)
    data = records.file_bytes(p, key="dataset", allowed=FORMATS["sst2"])
    lines = data.split(b"\n")
    if lines[0] != b"sentence\tlabel":
        raise DataUnavailable(f"dataset 'sst2': {path} must start with the header sentence<TAB>label")
    parts = [ln.rsplit(b"\t", 1) for ln in lines[1:] if ln]
    texts, bad = [], np.zeros(len(parts), bool)
    for i, r in enumerate(parts):
        try:
            texts.append(r[0].decode("utf-8"))
        except UnicodeDecodeError:
            texts.append(r[0].decode("utf-8", "replace"))
            bad[i] = True
    y = _label01(r[1].decode("utf-8", "replace") if len(r) == 2 else "" for r in parts)
    bad |= np.array([len(r) != 2 for r in parts], bool)
    return TextRecords(texts, y, bad, records.shown_name(p))


def check_records(name: str, rec: TextRecords, rows: np.ndarray, role: str) -> None:
    """Refuse, in one line, a public or test record (``rows`` of ``rec``; never a private one)
    that is malformed, not UTF-8, or whose label is not 0 or 1 (naming it: it is not private)."""
    wrong = rows[rec.bad[rows] | (rec.y[rows] < 0)]
    if wrong.size:
        i = int(np.sort(wrong)[0])
        what = "a label that is not 0 or 1" if not rec.bad[i] else "a text that is not UTF-8, or a malformed line"
        raise ConfigError("dataset", f"{name}: {rec.fname} record {i + 1} (a {role} record) has {what}; allowed: "
                                     f"{FORMATS[name]}, UTF-8, labels 0 and 1")


def _strict(name: str, rec: TextRecords, path) -> tuple[list[str], np.ndarray]:
    try:
        check_records(name, rec, np.arange(len(rec)), "checked")
    except ConfigError as e:
        raise DataUnavailable(f"dataset '{name}': {path}: {e.message.split(': ', 1)[1]}") from None
    return rec.texts, rec.y


def read_imdb_csv(path) -> tuple[list[str], np.ndarray]:
    """(texts, 0/1 labels) of a whole IMDB file, every record checked (:func:`imdb_records`)."""
    return _strict("imdb", imdb_records(path), path)


def read_sst2_tsv(path) -> tuple[list[str], np.ndarray]:
    """(texts, 0/1 labels) of a whole SST-2 file, every record checked (:func:`sst2_records`)."""
    return _strict("sst2", sst2_records(path), path)


def write_text_file(df: DataFile, texts: list[str], labels, dest: Path) -> Path:
    """Write rows in the dataset's format (atomically: :func:`certdp.results.atomic_write_bytes`),
    e.g. from the HF route."""
    if dest.name.endswith(".csv.gz"):
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["text", "label"])
        w.writerows(zip(texts, (int(v) for v in labels)))
        data = gzip.compress(buf.getvalue().encode("utf-8"), compresslevel=9, mtime=0)
    else:
        body = "".join(f"{t.replace(chr(9), ' ').replace(chr(10), ' ')}\t{int(v)}\n" for t, v in zip(texts, labels))
        data = ("sentence\tlabel\n" + body).encode("utf-8")
    atomic_write_bytes(dest, data)
    return dest


# --------------------------------------------------------------------------------------------
# Where the files come from

def _routes(name: str) -> str:
    hf = ", ".join(sorted({f.hf.split(":")[0] for f in FILES[name].values()}))
    return (f"set dataset.path=FOLDER holding {FORMATS[name]}; or put them in $CERTDP_DATA_DIR/{name}/; "
            f"or `pip install datasets` and allow network access to the HF hub ({hf})")


def _fetch_hf(df: DataFile) -> Path:
    import datasets  # noqa: WPS433 (optional, only for this route)

    repo, *rest = df.hf.split(":")
    config, split = (rest[0], rest[1]) if len(rest) == 2 else (None, rest[0])
    try:
        ds = datasets.load_dataset(repo, config, split=split)
        text_col = "text" if "text" in ds.column_names else "sentence"
        texts, labels = list(ds[text_col]), list(ds["label"])
    except Exception as e:  # any network / hub failure becomes the one-line message
        msg = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise DataUnavailable(f"dataset '{df.key}': HF datasets {repo} failed ({msg}); {_routes(df.key)}")
    return write_text_file(df, texts, labels, cache_dir() / df.relpath)


def text_file(df: DataFile, folder: str | None = None) -> tuple[Path, str]:
    """(local path, route) of one text-dataset file; see the module docstring for the order."""
    path, route = locate(df, folder)
    if path is not None:
        return path, route
    if route == "path":
        raise DataUnavailable(f"dataset '{df.key}': dataset.path={folder} has no {Path(df.relpath).name} "
                              f"(expected {FORMATS[df.key]})")
    if is_offline():
        raise DataUnavailable(f"dataset '{df.key}' not found (offline: CERTDP_OFFLINE=1): {_routes(df.key)}")
    if importlib.util.find_spec("datasets") is None:
        raise DataUnavailable(f"dataset '{df.key}' not found: {_routes(df.key)}")
    return _fetch_hf(df), "hf"


def read_sources(name: str, cfg: dict) -> tuple[dict[str, TextRecords], dict]:
    """The whole files of ``imdb`` (train, test) or ``sst2`` (train, dev) as their records
    (:class:`TextRecords`, nothing refused), in file order, through the routes of the module
    docstring; and where each came from."""
    if name not in FILES:
        raise ConfigError("dataset.name", f"unknown text dataset '{name}'; allowed: {', '.join(FILES)}")
    raw, files = {}, {}
    for split, df in FILES[name].items():
        p, route = text_file(df, cfg.get("path"))
        raw[split] = imdb_records(p) if name == "imdb" else sst2_records(p)
        ref = REFERENCE_SHA256.get(df.relpath)
        files[split] = {"path": str(p), "route": route, "rows": len(raw[split]),
                        "matches_reference": (sha256_of(p) == ref) if ref else None}
    return raw, files


# --------------------------------------------------------------------------------------------
# Splits of the raw texts (one split per seed for every command: the hybrid uses it too)

@dataclass(frozen=True)
class TextPart:
    source: str                 # which file split ("train", "test", "dev")
    index: np.ndarray           # rows of that file, in the order of the part
    texts: list[str]
    y01: np.ndarray             # 0 = negative, 1 = positive

    def first(self, n: int) -> "TextPart":
        """The first ``n`` rows of the part (nested subsets: the parts are in seeded order)."""
        return TextPart(self.source, self.index[:n], self.texts[:n], self.y01[:n])


@dataclass(frozen=True)
class TextSplits:
    name: str
    private: TextPart
    public: TextPart
    test: TextPart
    info: dict = field(default_factory=dict)


def _count(value: int | None, key: str, default: int, upper: int) -> int:
    """A subset size already parsed as an integer >= 1 or None; checked against the data."""
    v = default if value is None else value
    if not 0 < v <= upper:
        raise ConfigError(f"dataset.{key}", f"got {v} with {upper} available; allowed: an integer in [1, {upper}], "
                                            f"or null (the default)")
    return v


def load_texts(name: str, cfg: dict, seed: int) -> TextSplits:
    """Raw texts of ``imdb`` or ``sst2`` split into private / public / test (see the module
    docstring), subsets and ``max_chars`` applied."""
    if name not in FILES:
        raise ConfigError("dataset.name", f"unknown text dataset '{name}'; allowed: {', '.join(FILES)}")
    params = settings(cfg, name)
    raw, where = read_sources(name, params)
    info = {"files": where}
    split_seed = seed if params["split_seed"] is None else params["split_seed"]
    rng = np.random.default_rng(split_seed)
    if name == "imdb":            # the profile's sizes are defaults (capped by the rows there are), a value given is checked
        n_tr, n_te = len(raw["train"]), len(raw["test"])
        prof = PROFILES[resolved(params)["profile"]]
        n_private = _count(params["n_private"], "n_private", min(prof["n_private"], n_tr - 1), n_tr - 1)
        n_public = _count(params["n_public"], "n_public", min(prof["n_public"], n_tr - n_private), n_tr - n_private)
        perm = rng.permutation(n_tr)
        idx = {"private": ("train", perm[:n_private]), "public": ("train", perm[n_private:n_private + n_public])}
        n_test = _count(params["n_test"], "n_test", min(prof["n_test"], n_te), n_te)
        idx["test"] = ("test", np.sort(rng.permutation(n_te)[:n_test]) if n_test < n_te else np.arange(n_te))
    else:
        n_tr, n_dev = len(raw["train"]), len(raw["dev"])
        n_test = _count(params["n_test"], "n_test", min(5000, n_tr - 1), n_tr - 1)
        n_private = _count(params["n_private"], "n_private", n_tr - n_test, n_tr - n_test)
        perm = rng.permutation(n_tr)
        idx = {"test": ("train", perm[:n_test]), "private": ("train", perm[n_test:n_test + n_private])}
        n_public = _count(params["n_public"], "n_public", n_dev, n_dev)
        idx["public"] = ("dev", np.sort(rng.permutation(n_dev)[:n_public]) if n_public < n_dev else np.arange(n_dev))
    max_chars = params["max_chars"]

    def part(key):      # a private record is used as read (an unknown label: negative); others are checked
        src, ix = idx[key]
        rec = raw[src]
        ix = np.asarray(ix)
        if key != "private":
            check_records(name, rec, ix, key)
        ts = [rec.texts[i] for i in ix]
        if max_chars:
            ts = [t[:max_chars] for t in ts]
        return TextPart(src, ix, ts, np.maximum(rec.y[ix], 0))

    info.update({"split_seed": split_seed, "max_chars": max_chars})
    return TextSplits(name, part("private"), part("public"), part("test"), info)


# --------------------------------------------------------------------------------------------
# Texts -> features

def embed_parts(splits: TextSplits, encoder, *, progress: bool | None = None) -> dict[str, np.ndarray]:
    """Embeddings of the three parts.  Each source file is embedded once, in file order, over
    the rows any part uses (all of them for the paper's split, so its cache serves every seed; a
    subset's rows depend on the seed, and so does its cache); the parts are then gathered from it."""
    from certdp.data.encoders import announce_pending, embed, pending

    parts = {"private": splits.private, "public": splits.public, "test": splits.test}
    by_src: dict[str, np.ndarray] = {}
    for p in parts.values():
        by_src[p.source] = np.union1d(by_src.get(p.source, np.array([], np.int64)), p.index).astype(np.int64)
    texts_of: dict[str, list[str]] = {}
    for src, rows in by_src.items():
        texts_by_row = {}
        for p in parts.values():
            if p.source == src:
                texts_by_row.update(zip(p.index.tolist(), p.texts))
        texts_of[src] = [texts_by_row[r] for r in rows.tolist()]
    # what the cache lacks, said before anything is computed (the run's estimate: certdp.estimate.Announcer)
    todo = [ts[i] for src, ts in texts_of.items() for i in pending(ts, encoder, dataset=splits.name, split=src)]
    announce_pending(todo, sum(map(len, texts_of.values())), encoder)
    out = {}
    for src, rows in by_src.items():
        emb = embed(texts_of[src], encoder, dataset=splits.name, split=src, progress=progress)
        pos = {r: i for i, r in enumerate(rows.tolist())}
        for key, p in parts.items():
            if p.source == src:
                out[key] = emb[[pos[r] for r in p.index.tolist()]]
    return out


def text_dataset(name: str, cfg: dict, seed: int, *, encoder=None) -> Dataset:
    """The text dataset as features: encoder embeddings -> PCA fitted on the public part."""
    params = settings(cfg, name)
    try:
        splits = load_texts(name, params, seed)
        if encoder is None:
            from certdp.data.encoders import load_encoder
            encoder = load_encoder(resolved(params))
    except DataUnavailable as e:
        raise ConfigError("dataset", str(e))
    sizes = {"n_private": len(splits.private.texts), "n_public": len(splits.public.texts), "n_test": len(splits.test.texts)}
    labels = row_labels(name, resolved(params), encoder.tag, sizes)
    if labels:
        log.info("%s: profile %s: encoder %s on %s, subset of the paper's split: %s (every results row says so: "
                 "data_profile, encoder, subset)%s", name, labels["data_profile"], labels["encoder"],
                 getattr(encoder, "device", "cpu"), labels["subset"],
                 "; the paper's profile (mpnet, the whole split): dataset.profile=paper" if labels["subset"] != "none"
                 or labels["data_profile"] != "paper" else "")
    emb = embed_parts(splits, encoder, progress=params["progress"])
    # fitted on the public embeddings; every coordinate clipped to EMBEDDING_RANGE (a no-op for the
    # unit-length embeddings of both encoders) and a private row's non-finite one imputed
    prep, finfo = fit_public_map(params, emb["public"], default_dim=8, bounds=EMBEDDING_RANGE,
                                 columns=[f"e{j}" for j in range(emb["public"].shape[1])],
                                 input=f"sentence embeddings ({encoder.tag})")
    xp, xtr, xte = prep.apply(emb["public"]), prep.apply(emb["private"], private=True), prep.apply(emb["test"])
    task, ytr, n_classes = binary_labels(splits.private.y01, params)
    _, yp, _ = binary_labels(splits.public.y01, params)
    _, yte, _ = binary_labels(splits.test.y01, params)
    info = {**splits.info, "encoder": encoder.tag, "embedding_dim": int(emb["public"].shape[1]),
            "n_private": len(ytr), "n_public": len(yp), "n_test": len(yte),
            "labels": "positive = +1 (binary) / 1 (multiclass)", **finfo, "row_labels": labels}
    prep = replace(prep, task=task, target="label", classes=("negative", "positive"),
                   label_coding="sign" if task == "binary" else "index")
    return Dataset(name, task, xtr, ytr, xte, yte, x_public=xp, y_public=yp, n_classes=n_classes, info=info,
                   preprocessing=prep)


def files(name: str):
    """The files a text dataset reads (for ``certdp list``): its data files and its encoder (imdb:
    the profile's unless ``encoder`` is given)."""
    def _files(cfg: dict) -> list:
        from certdp.data.encoders import MODELS
        cfg = dict(cfg or {})
        enc = cfg.get("encoder")
        if enc is None and name == "imdb":
            enc = PROFILES[profile_of({"profile": cfg.get("profile") or "auto", "device": cfg.get("device")})]["encoder"]
        enc = MODELS.get(enc or "mpnet")
        return list(FILES[name].values()) + ([enc] if enc is not None else [])
    return _files


@register("imdb", task="multiclass", files=files("imdb"), size=lambda s: size("imdb", s),
          fields=text_fields("imdb"),
          summary="IMDB reviews (2 classes): 20,000 private / 5,000 public / 25,000 test; sentence encoder + PCA-8 on public "
                  "(on a CPU by default a MiniLM subset: dataset.profile)")
def load_imdb(cfg: dict, seed: int) -> Dataset:
    return text_dataset("imdb", cfg, seed)


@register("sst2", task="multiclass", files=files("sst2"), size=lambda s: size("sst2", s),
          fields=text_fields("sst2"),
          summary="SST-2 sentences (2 classes): 62,349 private / 872 public (GLUE dev) / 5,000 test; sentence encoder + PCA-8 on public")
def load_sst2(cfg: dict, seed: int) -> Dataset:
    return text_dataset("sst2", cfg, seed)
