"""The built-in loaders go through the hardened path of ``dataset=csv`` (issue 28, item 1): the
split is drawn from the number of records and the seed before any cell is read, and nothing a
private record holds refuses, drops or moves anything; public and test records are strict.

* adult: one private record with a '?', an unknown category, an infinite, a text or a 1e300 age:
  the split, sizes, public and test arrays, the fitted map, and ``certdp ags``'s ``publish/``
  files (all but the noised parameters) are those of the unchanged files, the private arrays
  differ in that record only and are finite and clipped; no message shows a private value.
  A public record with a '?' is dropped, one with an unknown category refused (naming it).
* mnist5: a private image's pixels NaN, infinite, 1e300 or negative: clipped or imputed.
* imdb / sst2: a private record whose label is not 0/1, whose text is not UTF-8, an SST-2 line
  without a tab or holding U+2028 (a line break to ``str.splitlines``): same split and public
  arrays, the record kept; the same in a public or test record is refused.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from certdp.data import load_dataset
from certdp.data.text import text_dataset
from certdp.errors import ConfigError
from test_e2e import run

FIX = Path(__file__).parent / "fixtures"
ADULT = {"name": "adult", "n_private": 35, "n_public": 8, "pca_dim": 4}
ARRAYS = ("x_test", "y_test", "x_public", "y_public")


def _public_part(ds) -> dict:
    """Everything a release uses besides the private records, as bytes."""
    return {**{a: getattr(ds, a).tobytes() for a in ARRAYS}, "n_train": ds.n_train,
            "preprocessing": json.dumps(ds.preprocessing.to_dict(), sort_keys=True),
            "info": json.dumps({k: v for k, v in ds.info.items() if k != "source"}, sort_keys=True)}


def _one_record_differs(a, b) -> int:
    differs = np.flatnonzero((a.x_train != b.x_train).any(1) | (a.y_train != b.y_train))
    assert len(differs) <= 1, differs
    # every model input is within the map's a-priori bound (declared ranges or clip_sd, then the PCA)
    bound = b.preprocessing.input_bound
    assert np.isfinite(b.x_train).all() and bound is not None and np.abs(b.x_train).max() <= bound
    return int(differs[0]) if len(differs) else -1


# ---------------------------------------------------------------------------------------------
# adult: the fixture's 36 + 24 records (6 + 4 with a '?'), split=paper with 35 private

def _adult_roles(n_private=35, seed=0, n=60):
    perm = np.random.default_rng(seed).permutation(n)
    return perm[:n_private], perm[n_private:]


def _adult_line(i: int) -> tuple[str, int]:
    """(file, line index) of pooled record i (adult.data's 36 first; adult.test has a first line)."""
    return ("adult.data", i) if i < 36 else ("adult.test", i - 36 + 1)


def _adult_copy(tmp: Path, name: str, edits: dict[int, dict[int, str]]) -> Path:
    """A copy of the fixture with fields replaced: {pooled record: {field: text}}."""
    d = tmp / name
    d.mkdir()
    lines = {f: (FIX / "adult" / f).read_text().split("\n") for f in ("adult.data", "adult.test")}
    for i, fields in edits.items():
        f, k = _adult_line(i)
        cells = lines[f][k].split(", ")
        for j, v in fields.items():
            cells[j] = v
        lines[f][k] = ", ".join(cells)
    for f, ls in lines.items():
        (d / f).write_text("\n".join(ls))
    return d


def _complete_private(k: int) -> list[int]:
    """k private records of the fixture without a '?' (so that each edit is the only change)."""
    priv, _ = _adult_roles()
    out = []
    for i in priv:
        f, line = _adult_line(int(i))
        if "?" not in (FIX / "adult" / f).read_text().split("\n")[line]:
            out.append(int(i))
    return out[:k]


# field 0 is age, 1 workclass, 13 native_country
PRIVATE_EDITS = {
    "question_mark": {1: "?"},
    "unknown_category": {13: "Mars"},
    "inf_age": {0: "inf"},
    "text_age": {0: "old"},
    "huge_age": {0: "1e300"},
    "more_fields": {14: "<=50K, surplus"},
    "unknown_label": {14: "rich"},
    "not_utf8": {1: "PRIVATE_BYTE"},          # written as the bytes b"Priv\xffate"
}


@pytest.mark.parametrize("kind", list(PRIVATE_EDITS))
def test_adult_private_record_changes_only_its_own_row(tmp_path, kind, caplog):
    i = _complete_private(1)[0]
    edit = PRIVATE_EDITS[kind]
    base = load_dataset({**ADULT, "path": str(_adult_copy(tmp_path, "clean", {}))}, 0)
    folder = _adult_copy(tmp_path, "edited", {i: edit})
    if kind == "not_utf8":
        f, _ = _adult_line(i)
        p = folder / f
        p.write_bytes(p.read_bytes().replace(b"PRIVATE_BYTE", b"Priv\xffate"))
    with caplog.at_level(logging.DEBUG, logger="certdp"):
        ds = load_dataset({**ADULT, "path": str(folder)}, 0)
    assert _public_part(ds) == _public_part(base)
    row = _one_record_differs(base, ds)
    # an unknown label is coded <=50K: unchanged when the record's label was <=50K
    assert row == list(_adult_roles()[0]).index(i) or (kind == "unknown_label" and row == -1)
    for secret in ("Mars", "old", "1e300", "rich", "surplus", "Priv\\xff", "Priv\ufffd"):
        assert secret not in caplog.text


def test_adult_public_records_are_strict(tmp_path):
    _, held = _adult_roles()
    i = int(held[0])
    # a '?' in a public or test record drops it (the UCI convention) ...
    base = load_dataset({**ADULT, "path": str(_adult_copy(tmp_path, "clean", {}))}, 0)
    ds = load_dataset({**ADULT, "path": str(_adult_copy(tmp_path, "gap", {i: {1: "?"}}))}, 0)
    assert ds.n_train == base.n_train and ds.info["held_out_dropped"] == base.info["held_out_dropped"] + 1
    # ... any other problem refuses the run in one line naming the (public) record
    f, line = _adult_line(i)
    with pytest.raises(ConfigError) as e:
        load_dataset({**ADULT, "path": str(_adult_copy(tmp_path, "mars", {i: {13: "Mars"}}))}, 0)
    assert e.value.key == "dataset.path"
    assert f"{f} record {line + (1 if f == 'adult.data' else 0)} (a public or test record)" in str(e.value)
    assert "native_country outside adult.names" in str(e.value)


def _released_without_noise(run_dir: Path) -> dict:
    doc = json.loads((run_dir / "publish" / "released.json").read_text())
    for r in doc["releases"]:
        r.pop("parameters")
    return doc


def test_adult_ags_publish_is_identical_apart_from_the_noise(tmp_path):
    """``certdp ags dataset=adult`` (dp_end_to_end, publishable) on the fixture and on a copy with
    five private records changed (a '?', an unknown category, an infinite, a text and a 1e300
    age): publish/ holds the same preprocessing, metadata and README; only the noised parameters
    differ.  Before issue 28 the edited copy moved the split (the '?') or refused the run."""
    recs = _complete_private(5)
    edits = dict(zip(recs, [{1: "?"}, {13: "Mars"}, {0: "inf"}, {0: "old"}, {0: "1e300"}]))
    args = ["ags", "dataset=adult", "dataset.n_private=35", "dataset.n_public=8", "dataset.pca_dim=4",
            "train.steps=4", "staircase.k_max=4", "privacy.epsilons=[1]", "privacy.n_draws=2", "ags.ablation_n=[]",
            "ags.baselines=[]", "seed=0"]
    out = tmp_path / "out"
    dirs = {}
    for name, ed in (("clean", {}), ("edited", edits)):
        code, err = run([*args, f"dataset.path={_adult_copy(tmp_path, name, ed)}", f"run={name}"], out)
        assert code == 0, err
        dirs[name] = out / "ags" / "adult" / name
        for secret in ("Mars", "old", "1e300"):
            assert secret not in err and secret not in (dirs[name] / "log.txt").read_text()
    a, b = (_released_without_noise(d) for d in dirs.values())
    assert a["publishable"] and a["dp_end_to_end"] and a == b
    assert a["preprocessing"]["clip"] == 1e4 and a["preprocessing"]["unknown_label"] == "<=50K"
    assert (dirs["clean"] / "publish" / "README.txt").read_bytes() == (dirs["edited"] / "publish" / "README.txt").read_bytes()
    assert sorted(p.name for p in (dirs["clean"] / "publish").iterdir()) == ["README.txt", "released.json"]


@pytest.mark.slow
def test_adult_real_files_private_edits_change_nothing_published(tmp_path):
    """The same on the real UCI files (the cache's copy; skipped without it): one private record
    edited in each way; the public and test arrays and the map are those of the real files."""
    from certdp.data.adult import ADULT_FILES
    from certdp.data.sources import cache_dir
    src = [cache_dir() / f.relpath for f in ADULT_FILES]
    if not all(p.exists() for p in src):
        pytest.skip("the real adult files are not in the cache")
    clean = tmp_path / "clean"
    clean.mkdir()
    for p in src:
        shutil.copy(p, clean / p.name)
    cfg = {"name": "adult", "n_public": 1000}
    base = load_dataset({**cfg, "path": str(clean)}, 0)
    assert (base.n_train, base.x_public.shape[0]) == (30222, 1000)
    priv = np.random.default_rng(0).permutation(32561 + 16281)[:30222]
    i = int(priv[priv < 32561][0])                     # a private record of adult.data
    lines = (clean / "adult.data").read_text().split("\n")
    for kind, edit in PRIVATE_EDITS.items():
        if kind == "not_utf8":
            continue
        cells = lines[i].split(", ")
        for j, v in edit.items():
            cells[j] = v
        d = tmp_path / kind
        d.mkdir()
        shutil.copy(clean / "adult.test", d / "adult.test")
        (d / "adult.data").write_text("\n".join(lines[:i] + [", ".join(cells)] + lines[i + 1:]))
        ds = load_dataset({**cfg, "path": str(d)}, 0)
        assert _public_part(ds) == _public_part(base), kind
        _one_record_differs(base, ds)


# ---------------------------------------------------------------------------------------------
# mnist5: a private image's pixels

MNIST = {"name": "mnist5", "n_public": 10, "public_split": [5, 5]}


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf, 3e38, -5.0])   # pixels are float32
def test_mnist5_private_pixels_are_clipped_or_imputed(tmp_path, value):
    with gzip.open(FIX / "mnist_tiny.pkl.gz", "rb") as f:
        train, valid, test = pickle.load(f, encoding="latin1")
    base = load_dataset({**MNIST, "path": str(FIX / "mnist_tiny.pkl.gz")}, 3)
    # the split permutes the positions of the 30 + 10 training images of digits 0-4
    y = np.concatenate([train[1], valid[1]])
    kept = np.flatnonzero(np.isin(y, range(5)))
    perm = np.random.default_rng(3).permutation(len(kept))
    first = next(k for k in range(10, len(kept)) if kept[perm[k]] < len(train[1]))   # a private image of train
    x = train[0].copy()
    x[int(kept[perm[first]]), :50] = value
    with gzip.open(tmp_path / "m.pkl.gz", "wb") as f:
        pickle.dump(((x, train[1]), valid, test), f, protocol=2)
    ds = load_dataset({**MNIST, "path": str(tmp_path / "m.pkl.gz")}, 3)
    assert _public_part(ds) == _public_part(base)
    assert _one_record_differs(base, ds) in (first - 10, -1)
    # the same pixels in a public image are refused (non-finite) or clipped to the declared [0, 1]
    x = train[0].copy()
    x[int(kept[perm[next(k for k in range(10) if kept[perm[k]] < len(train[1]))]]), :50] = value
    with gzip.open(tmp_path / "p.pkl.gz", "wb") as f:
        pickle.dump(((x, train[1]), valid, test), f, protocol=2)
    if np.isfinite(value):
        load_dataset({**MNIST, "path": str(tmp_path / "p.pkl.gz")}, 3)
    else:
        with pytest.raises(ConfigError, match="^dataset.path: .*missing or infinite"):
            load_dataset({**MNIST, "path": str(tmp_path / "p.pkl.gz")}, 3)


# ---------------------------------------------------------------------------------------------
# imdb / sst2: labels, bytes and line breaks of a private record

class UnitEncoder:
    """Deterministic unit-length 'embeddings' (as both real encoders give)."""
    tag, name, dim = "unit", "fake", 8

    def encode(self, texts):
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            v = np.frombuffer(hashlib.sha256(t.encode()).digest()[: self.dim], np.uint8).astype(np.float32) - 127.5
            out[i] = v / np.linalg.norm(v)
        return out


def _text_copy(tmp: Path, name: str, edit=None) -> Path:
    d = tmp / name
    shutil.copytree(FIX / name.split("-")[0], d)
    if edit is not None:
        edit(d)
    return d


SST2 = {"n_test": 15, "pca_dim": 4}


def _sst2_edit(line_no: int, new: bytes):
    def edit(d: Path):
        lines = (d / "train.tsv").read_bytes().split(b"\n")
        lines[line_no] = new
        (d / "train.tsv").write_bytes(b"\n".join(lines))
    return edit


def _sst2_private_line() -> int:
    perm = np.random.default_rng(0).permutation(60)     # the fixture's 60 training sentences
    return int(perm[15]) + 1                             # the first private one (+1: the header)


SST2_EDITS = [  # (a private record's line, whether it is a valid record: else a test record is refused)
    (b"a dull film \t7", False), (b"a dull film \tpositive", False), (b"no label here", False),
    (b"caf\xe9 \t1", False), ("a\u2028line separator \t0".encode(), True), (b"\t1", True)]


@pytest.mark.parametrize("new,valid", SST2_EDITS,
                         ids=["label_7", "label_text", "no_tab", "not_utf8", "u2028", "empty_text"])
def test_sst2_private_record_is_kept_public_one_refused(tmp_path, cache_env, new, valid):
    base = text_dataset("sst2", {**SST2, "path": str(_text_copy(tmp_path, "sst2"))}, 0, encoder=UnitEncoder())
    d = _text_copy(tmp_path, "sst2-edited", _sst2_edit(_sst2_private_line(), new))
    ds = text_dataset("sst2", {**SST2, "path": str(d)}, 0, encoder=UnitEncoder())
    assert _public_part(ds) == {**_public_part(base), "info": _public_part(ds)["info"]}
    assert _one_record_differs(base, ds) in (0, -1)
    perm = np.random.default_rng(0).permutation(60)
    d = _text_copy(tmp_path, "sst2-test", _sst2_edit(int(perm[0]) + 1, new))     # a test record
    if valid:
        text_dataset("sst2", {**SST2, "path": str(d)}, 0, encoder=UnitEncoder())
        return
    with pytest.raises(ConfigError, match=r"^dataset: sst2: train.tsv record \d+ \(a test record\)"):
        text_dataset("sst2", {**SST2, "path": str(d)}, 0, encoder=UnitEncoder())


IMDB = {"n_private": 30, "n_public": 10, "pca_dim": 4}


def _imdb_edit(row: int, new: bytes):
    def edit(d: Path):
        raw = gzip.decompress((d / "train.csv.gz").read_bytes()).split(b"\n")
        raw[row + 1] = new
        (d / "train.csv.gz").write_bytes(gzip.compress(b"\n".join(raw)))
    return edit


IMDB_EDITS = [(b'"a fine, quiet film",7', False), (b"caf\xe9 film,1", False), (b"x\ry,0", True),
              (b"a,b,c,1", False), (b'"a review\nover two lines",1', True)]


@pytest.mark.parametrize("new,valid", IMDB_EDITS,
                         ids=["label_7", "not_utf8", "carriage_return", "more_fields", "quoted_newline"])
def test_imdb_private_record_is_kept(tmp_path, cache_env, new, valid):
    base = text_dataset("imdb", {**IMDB, "path": str(_text_copy(tmp_path, "imdb"))}, 0, encoder=UnitEncoder())
    row = int(np.random.default_rng(0).permutation(40)[0])          # the first private review
    ds = text_dataset("imdb", {**IMDB, "path": str(_text_copy(tmp_path, "imdb-edited", _imdb_edit(row, new)))}, 0,
                      encoder=UnitEncoder())
    assert _public_part(ds) == {**_public_part(base), "info": _public_part(ds)["info"]}
    assert _one_record_differs(base, ds) in (0, -1)
    pub = int(np.random.default_rng(0).permutation(40)[30])          # a public review: refused
    d = _text_copy(tmp_path, "imdb-public", _imdb_edit(pub, new))
    if valid:            # a bare \r (pandas' to_csv writes it unquoted) and a quoted line break are text
        text_dataset("imdb", {**IMDB, "path": str(d)}, 0, encoder=UnitEncoder())
        return
    with pytest.raises(ConfigError, match=r"^dataset: imdb: train.csv.gz record \d+ \(a public record\)"):
        text_dataset("imdb", {**IMDB, "path": str(d)}, 0, encoder=UnitEncoder())


@pytest.fixture
def cache_env(tmp_path, monkeypatch):
    monkeypatch.setenv("CERTDP_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CERTDP_DATA_DIR", raising=False)
