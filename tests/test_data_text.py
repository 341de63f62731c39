"""certdp/data/text.py and text_profiles.py: imdb's profiles follow the run's device (cpu: a
smaller encoder on a subset; paper: mpnet on the whole split), an explicit setting wins, the
subset is drawn from the row count and the seed, and every results row says what was used."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from certdp.data import load_dataset, provenance
from certdp.data.text import load_texts, text_dataset
from certdp.data.text_profiles import IMDB_SPLIT, PROFILES, embedding_cost, resolved
from certdp.data import settings as dataset_settings

FIX = Path(__file__).parent / "fixtures"


def compose(command: str, overrides: list[str]) -> dict:
    """The resolved config of ``certdp <command> <overrides>`` as the CLI composes it."""
    from hydra import compose as hydra_compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from certdp import results
    from certdp.settings import config_dir
    results.register_resolvers()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
            return OmegaConf.to_container(hydra_compose(config_name=command, overrides=overrides), resolve=True)
    finally:
        GlobalHydra.instance().clear()


class UnitEncoder:
    """Unit-length 'embeddings' from the text's hash (as both real encoders end normalised)."""
    tag, name, dim, device = "unit", "fake", 8, "cpu"

    def encode(self, texts):
        import hashlib
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            v = np.frombuffer(hashlib.sha256(t.encode()).digest()[: self.dim], np.uint8).astype(np.float32) - 127.5
            out[i] = v / np.linalg.norm(v)
        return out


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CERTDP_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CERTDP_DATA_DIR", raising=False)
    return tmp_path / "cache"


def test_the_profile_follows_the_run_device():
    cpu = resolved(dataset_settings(compose("ags", ["dataset=imdb", "device=cpu"])["dataset"], "imdb"))
    gpu = resolved(dataset_settings(compose("ags", ["dataset=imdb", "device=cuda"])["dataset"], "imdb"))
    assert cpu["profile"] == "cpu" and {k: cpu[k] for k in PROFILES["cpu"]} == PROFILES["cpu"]
    assert gpu["profile"] == "paper" and (gpu["encoder"], gpu["max_seq_length"]) == ("mpnet", None)
    assert {k: gpu[k] for k in IMDB_SPLIT} == IMDB_SPLIT == {"n_private": 20000, "n_public": 5000, "n_test": 25000}
    # an explicit profile wins over the device, an explicit setting over the profile
    paper = resolved(dataset_settings(compose("ags", ["dataset=imdb", "device=cpu", "dataset.profile=paper"])["dataset"],
                                      "imdb"))
    assert (paper["profile"], paper["encoder"], paper["n_private"]) == ("paper", "mpnet", 20000)
    mixed = resolved(dataset_settings(compose("ags", ["dataset=imdb", "device=cpu", "dataset.encoder=mpnet",
                                                      "dataset.n_private=300"])["dataset"], "imdb"))
    assert (mixed["profile"], mixed["encoder"], mixed["max_seq_length"], mixed["n_private"]) == ("cpu", "mpnet", 128, 300)


def test_the_ags_preset_proves_on_every_device():
    """IBP tau, every radius its own box, proven: k = 1..512 on a GPU, 1..128 on a CPU."""
    for device, k in (("cuda", 512), ("cpu", 128)):
        cfg = compose("ags", ["dataset=imdb", f"device={device}"])
        assert (cfg["staircase"]["k_max"], cfg["certificate"]["name"], cfg["certificate"]["aggregation"]) == (k, "ibp", "tau")
        assert cfg["ags"]["share_ratio"] is None and cfg["privacy"]["smoothness"] == "proven"
        assert cfg["staircase"]["include_n"] is True
    assert compose("ags", ["dataset=imdb", "device=cpu", "staircase.k_max=64"])["staircase"]["k_max"] == 64


def test_the_cpu_subset_is_drawn_from_the_row_count_and_the_seed(tmp_path, cache):
    """Which reviews are private depends on the number of records and the seed only: another
    text in every record moves nothing; the profile's sizes are capped by the rows there are."""
    other = tmp_path / "imdb"
    shutil.copytree(FIX / "imdb", other)
    for f in ("train.csv.gz", "test.csv.gz"):
        lines = gzip.decompress((other / f).read_bytes()).decode().split("\n")
        lines = [lines[0]] + [f'"another review, {i}",{ln.rsplit(",", 1)[1]}' if ln else ln for i, ln in enumerate(lines[1:])]
        (other / f).write_bytes(gzip.compress("\n".join(lines).encode()))
    cfg = {"device": "cpu", "n_private": 20, "n_public": 5, "n_test": 7}
    a = load_texts("imdb", {**cfg, "path": str(FIX / "imdb")}, 3)
    b = load_texts("imdb", {**cfg, "path": str(other)}, 3)
    for part in ("private", "public", "test"):
        np.testing.assert_array_equal(getattr(a, part).index, getattr(b, part).index)
    assert a.private.texts != b.private.texts
    c = load_texts("imdb", {**cfg, "path": str(FIX / "imdb")}, 4)
    assert not np.array_equal(a.private.index, c.private.index)
    whole = load_texts("imdb", {"device": "cpu", "path": str(FIX / "imdb")}, 3)      # cpu sizes > the fixture's rows
    assert len(whole.private.texts) == 39 and len(whole.public.texts) == 1 and len(whole.test.texts) == 30


def test_rows_and_info_say_profile_encoder_and_subset(cache):
    ds = text_dataset("imdb", {"device": "cpu", "path": str(FIX / "imdb"), "n_private": 30, "n_public": 10,
                               "n_test": 12, "max_chars": 20}, 0, encoder=UnitEncoder())
    labels = {"data_profile": "cpu", "encoder": "unit-chars20",
              "subset": "private 30 of 20000; public 10 of 5000; test 12 of 25000"}
    assert ds.info["row_labels"] == labels
    assert provenance(ds) == {**labels, "dp_end_to_end": True, "scaling": ds.scaling}
    from certdp.certify import with_provenance
    out = with_provenance({"results": pd.DataFrame({"epsilon": [1.0, 2.0]})}, ds, device="cpu")["results"]
    assert out[["data_profile", "encoder", "subset"]].drop_duplicates().to_dict("records") == [labels]
    # other datasets carry no such columns (their CSVs unchanged)
    lin = load_dataset({"name": "linear", "n_train": 20, "n_test": 5}, 0)
    assert set(with_provenance({"r": pd.DataFrame({"a": [1]})}, lin, device="cpu")["r"].columns) == \
        {"a", "scaling", "dp_end_to_end", "device"}


def test_the_embedding_cost_of_each_profile():
    """What the settings estimate counts: the texts of each profile, and on a CPU the time."""
    cpu = embedding_cost("imdb", dataset_settings({"name": "imdb", "device": "cpu"}, "imdb"))
    assert cpu["texts"] == sum(PROFILES["cpu"][k] for k in IMDB_SPLIT) and cpu["device"] == "cpu"
    paper = embedding_cost("imdb", dataset_settings({"name": "imdb", "device": "cpu", "profile": "paper"}, "imdb"))
    assert paper["texts"] == 50000 and paper["encoder"] == "mpnet-lendefault"
    assert cpu["seconds"] < 15 * 60 < 3 * 3600 < paper["seconds"]
    assert "seconds" not in embedding_cost("imdb", dataset_settings({"name": "imdb", "device": "cuda"}, "imdb"))
