"""The settings of the text datasets ``imdb`` and ``sst2``, and imdb's profiles.

IMDB's encoder and subset sizes default to a *profile* (``dataset.profile``):

* ``paper``: the paper's all-mpnet-base-v2 at its own 384 tokens on the whole split (20,000
  private / 5,000 public / all 25,000 test reviews): about 7.4 CPU hours of embeddings, minutes
  on a GPU;
* ``cpu``: :data:`PROFILES` ``["cpu"]``, a smaller encoder on shorter inputs and a subset of the
  split (embeddings about 6 minutes on two idle cores), aiming at 30 minutes for the whole
  ``certdp ags dataset=imdb`` (not yet shown: docs/datasets.md has the measurements and the
  estimate's breakdown);
* ``auto`` (the default): ``paper`` when the run computes on a GPU (``dataset.device``, which the
  configs set to the run's ``device``), else ``cpu``.

An explicit ``dataset.encoder``, ``dataset.max_seq_length`` or ``dataset.n_*`` wins over the
profile's.  Every results row and the log say what was used (:func:`row_labels`): the profile,
the encoder (its tag: name and tokens) and the subset of the paper's split.  The subset itself is
the split's (:func:`certdp.data.text.load_texts`): the first rows of a permutation drawn from the
row count and the seed, never from the texts.
"""

from __future__ import annotations

from functools import partial

from certdp.data.params import Field, boolean, choice, integer, text

# The paper's IMDB split (and the sizes a subset is labelled against)
IMDB_SPLIT = {"n_private": 20000, "n_public": 5000, "n_test": 25000}
PROFILES = {
    "paper": {"encoder": "mpnet", "max_seq_length": None, **IMDB_SPLIT},
    "cpu": {"encoder": "minilm", "max_seq_length": 128, "n_private": 10000, "n_public": 2000, "n_test": 5000},
}
PROFILE_KEYS = ("encoder", "max_seq_length", "n_private", "n_public", "n_test")
DEVICES = ("auto", "cpu", "cuda", "cuda:N")


def parse_device(value, key):
    """``auto`` (a GPU when present), ``cpu``, ``cuda`` or ``cuda:N``."""
    if isinstance(value, str) and value.strip().lower().startswith("cuda:") and value.strip()[5:].isdigit():
        return value.strip().lower()
    v = choice(value.strip().lower() if isinstance(value, str) else value, key, allowed=DEVICES, none=True,
               null_means="auto")
    return v or "auto"


parse_device.describe = lambda: "auto (the run's device when set by the configs) | cpu | cuda | cuda:N"


def profile_of(s: dict) -> str | None:
    """The profile ``auto`` resolves to (``paper`` on a GPU, ``cpu`` otherwise); None for a
    dataset without profiles (sst2)."""
    p = s.get("profile")
    if p is None:
        return None
    if p == "auto":
        from certdp.data.encoders import resolve_device
        try:
            dev = resolve_device(parse_device(s.get("device"), "dataset.device"))
        except Exception:             # an unresolved ${device} in a raw YAML (certdp list): the CPU's
            dev = "cpu"
        return "paper" if dev.startswith("cuda") else "cpu"
    return p


def resolved(s: dict) -> dict:
    """The parsed settings ``s`` with the profile's value for every profile key left null, and
    ``profile`` resolved (:func:`profile_of`); unchanged for a dataset without profiles."""
    prof = profile_of(s)
    if prof is None:
        return s
    out = dict(s, profile=prof)
    for k in PROFILE_KEYS:
        if out.get(k) is None:
            out[k] = PROFILES[prof][k]
    return out


def row_labels(name: str, s: dict, encoder_tag: str, sizes: dict) -> dict:
    """The columns every results row of an imdb run carries: ``data_profile``, ``encoder`` (the
    cache tag, and the characters kept when ``max_chars`` truncates) and ``subset`` (``none``, or
    which part of the paper's split was used).  Settings and public counts only."""
    if name != "imdb":
        return {}
    enc = encoder_tag + (f"-chars{s['max_chars']}" if s.get("max_chars") else "")
    parts = [f"{k[2:]} {sizes[k]} of {IMDB_SPLIT[k]}" for k in IMDB_SPLIT if sizes[k] != IMDB_SPLIT[k]]
    return {"data_profile": s.get("profile") or "none", "encoder": enc, "subset": "; ".join(parts) or "none"}


def text_fields(name: str) -> dict:
    """The settings of ``imdb`` or ``sst2``.  The subset sizes default to None: imdb's profile's
    sizes, sst2's split (:mod:`certdp.data.text`), checked against the files' row counts when read."""
    from certdp.data.encoders import MODELS
    imdb = name == "imdb"
    prof = "the profile's" if imdb else None
    fields = {
        "path": Field(None, partial(text, what="a folder holding the dataset's files", none=True,
                                    null_means="$CERTDP_DATA_DIR, the cache or HF datasets"),
                      help="a folder holding the dataset's files"),
        "encoder": Field(None, partial(choice, allowed=tuple(MODELS), none=True, null_means="the profile's"),
                         help="sentence encoder: mpnet | minilm (null: the profile's)") if imdb else
        Field("mpnet", partial(choice, allowed=tuple(MODELS)), help="sentence encoder: mpnet | minilm"),
        "encoder_path": Field(None, partial(text, what="a sentence-transformers folder", none=True,
                                            null_means="the cache or the pinned wheels"),
                              help="a local sentence-transformers folder instead of the wheels"),
        "max_seq_length": Field(None, partial(integer, lo=8, hi=100_000, none=True, null_means=prof or "the model's"),
                                help="tokens seen by the encoder"),
        "max_chars": Field(None, partial(integer, lo=1, none=True, null_means="no truncation"),
                           help="truncate each text to this many characters before encoding"),
        "batch_size": Field(32, partial(integer, lo=1, hi=1_000_000), help="encoder batch size"),
        "device": Field("auto", parse_device, help="encoder device; the configs set it to the run's device (leave it)"),
        "n_private": Field(None, partial(integer, lo=1, none=True, null_means=prof or "the dataset's split"),
                           help="private training rows"),
        "n_public": Field(None, partial(integer, lo=1, none=True, null_means=prof or "the dataset's split"),
                          help="public rows"),
        "n_test": Field(None, partial(integer, lo=1, none=True, null_means=prof or "the dataset's split"), help="test rows"),
        "split_seed": Field(None, partial(integer, lo=0, none=True, null_means="the run seed"),
                            help="seed of the split (null: the run seed)"),
        "features": Field("pca", partial(choice, allowed=("pca", "raw")),
                          help="pca (public PCA) | raw (standardised embeddings)"),
        "pca_dim": Field(8, partial(integer, lo=1, none=True, null_means="8"), help="public PCA dimension"),
        "task": Field("multiclass", partial(choice, allowed=("multiclass", "binary")),
                      help="multiclass: labels {0,1} | binary: {-1,+1} (hinge)"),
        "progress": Field(None, partial(boolean, none=True, null_means="when stderr is a terminal"),
                          help="embedding progress bar"),
    }
    if imdb:
        fields["profile"] = Field("auto", partial(choice, allowed=("auto", "cpu", "paper")),
                                  help="auto (paper on a GPU, cpu on a CPU) | cpu (MiniLM at 128 tokens, a subset) "
                                       "| paper (mpnet, the whole split)")
    return fields


def size(name: str, s: dict):
    """(private rows, features, outputs) from the settings: the split's or profile's sizes (IMDB
    25,000 training reviews, SST-2 67,349 training sentences), PCA dimension or encoder width."""
    from certdp.data.encoders import DIMS
    s = resolved(s)
    n = s["n_private"] or (67349 - (s["n_test"] or 5000))
    return n, (s["pca_dim"] or 8) if s["features"] == "pca" else DIMS.get(s["encoder"], 768), 2


def embedding_cost(name: str, s: dict) -> dict:
    """What the embeddings of a run cost if none is cached, from the settings alone (for the
    settings estimate): ``texts`` to embed, the ``encoder`` tag, the ``device`` and, on a CPU,
    ``seconds`` on two idle cores (:func:`certdp.data.encoders.cpu_seconds` at the files' mean
    length: IMDB reviews about 1,300 characters, SST-2 sentences about 100)."""
    from certdp.data.encoders import CORES, cpu_seconds, resolve_device
    s = resolved(s)
    if name == "imdb":             # the private and public rows of train.csv.gz, the test rows of test.csv.gz
        n = s["n_private"] + s["n_public"] + s["n_test"]
        chars = 1300.0
    else:                          # the test and private rows of train.tsv, the public rows of dev.tsv
        n_test = s["n_test"] or 5000
        n = n_test + (s["n_private"] or 67349 - n_test) + (s["n_public"] or 872)
        chars = 100.0
    if s.get("max_chars"):
        chars = min(chars, float(s["max_chars"]))
    enc = s["encoder"] or "mpnet"
    dev = resolve_device(parse_device(s.get("device"), "dataset.device"))
    out = {"texts": n, "encoder": f"{enc}-len{s['max_seq_length'] or 'default'}", "device": dev}
    if dev == "cpu":
        out["seconds"] = n * cpu_seconds(enc, chars, s["max_seq_length"]) / CORES
    return out
