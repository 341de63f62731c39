"""The user's own table (``dataset=csv``, certdp.data.tables): every way a file can be unusable is
refused in one line naming the key; a bad cell -- non-numeric, missing, infinite, overflowing -- in
a public or test row is refused, the same cell in a private row is imputed or clipped and never
refused; ``dataset.dropna`` on public and test rows; good tables load (csv, parquet, tsv, gzip);
and the CLI end to end on a real table (scikit-learn's bundled diabetes data) and on the README's
own csv example.  (The typed parsing of every dataset's settings: test_data_params.py.)
"""

import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from certdp.data import load_dataset
from certdp.data.tabular import split_rows, split_sizes
from cli_helpers import refused_dataset


def _table(n=40, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2))
    return pd.DataFrame({"a": x[:, 0], "b": x[:, 1], "price": 2 * x[:, 0] - x[:, 1] + 0.1 * rng.normal(size=n)})


# ---------------------------------------------------------------------------------------------
# The user's table: each way a file can be unusable, and the key the message names.

def _write(kind, d):
    """Write a bad file of the given kind under d; return (file name, extra settings)."""
    t = _table()
    if kind == "directory":
        (d / "folder.csv").mkdir()
        return "folder.csv", {}
    if kind == "missing":
        return "nowhere.csv", {}
    if kind == "fifo":
        os.mkfifo(d / "pipe.csv")       # reading it would block for ever
        return "pipe.csv", {}
    if kind == "empty":
        (d / "empty.csv").write_bytes(b"")
        return "empty.csv", {}
    if kind == "header_only":
        (d / "header.csv").write_text("a,b,price\n")
        return "header.csv", {}
    if kind == "binary":
        (d / "binary.csv").write_bytes(b"PK\x03\x04\x14\x00\x00\x00" + bytes(range(256)))
        return "binary.csv", {}
    if kind == "not_utf8":        # the header is the schema: checked as a whole (a cell is not: below)
        (d / "latin1.csv").write_bytes("a,b,caf\xe9\n".encode("latin-1") + b"1,2,3\n" * 5)
        return "latin1.csv", {}
    if kind == "cr_line_endings":
        (d / "mac.csv").write_bytes(b"a,price\r" + b"".join(b"%d,%d\r" % (i, i % 3) for i in range(10)))
        return "mac.csv", {}
    if kind == "unclosed_quote":
        (d / "quote.csv").write_text("a,price\n" + "".join(f"{i},{i % 3}\n" for i in range(10)) + '"5,6\n7,8\n')
        return "quote.csv", {}
    if kind == "ragged":          # every row longer than the header: some public or test row is refused
        (d / "ragged.csv").write_text("a,price\n" + "".join(f"{i},{i % 3},{i}\n" for i in range(10)))
        return "ragged.csv", {}
    if kind == "too_few_rows":
        (d / "two.csv").write_text("a,price\n1,2\n3,4\n")
        return "two.csv", {}
    if kind == "not_parquet":
        (d / "fake.parquet").write_text("a,price\n1,2\n")
        return "fake.parquet", {}
    if kind == "parquet_header_only":
        t.iloc[:0].to_parquet(d / "none.parquet")
        return "none.parquet", {}
    if kind == "string_parquet":
        t.assign(city="Paris").to_parquet(d / "city.parquet")
        return "city.parquet", {}
    if kind == "constant_target":
        t.assign(price=3.7).to_csv(d / "const.csv", index=False)
        return "const.csv", {}
    if kind == "duplicate_feature":
        (d / "dup.csv").write_text("a,price,a\n" + "".join(f"{i},{i * 3 % 7},{i}\n" for i in range(10)))
        return "dup.csv", {}
    if kind == "duplicate_target":
        (d / "dupt.csv").write_text("price,a,price\n" + "".join(f"{i},{i * 3 % 7},{i}\n" for i in range(10)))
        return "dupt.csv", {}
    if kind == "unknown_target":
        t.to_csv(d / "ok.csv", index=False)
        return "ok.csv", {"target": "nope"}
    if kind == "unknown_feature":
        t.to_csv(d / "ok.csv", index=False)
        return "ok.csv", {"features": ["a", "zzz"]}
    if kind == "target_as_feature":
        t.to_csv(d / "ok.csv", index=False)
        return "ok.csv", {"features": ["a", "price"]}
    if kind == "only_target":
        t[["price"]].to_csv(d / "one.csv", index=False)
        return "one.csv", {}
    if kind == "no_target":
        t.to_csv(d / "ok.csv", index=False)
        return "ok.csv", {"target": None}
    if kind == "no_header":
        (d / "nohead.csv").write_text("1.5,2.5\n1,2\n3,4\n5,6\n")
        return "nohead.csv", {}
    raise AssertionError(kind)


BAD_FILES = [
    # kind, key named, words the message must hold
    ("directory", "dataset.path", ["is a directory"]),
    ("missing", "dataset.path", ["does not exist"]),
    pytest.param("fifo", "dataset.path", ["not a regular file"],
                 marks=pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")),
    ("empty", "dataset.path", ["is empty"]),
    ("header_only", "dataset.path", ["no data rows"]),
    ("binary", "dataset.path", ["not a text file"]),
    ("not_utf8", "dataset.path", ["not UTF-8", "header line"]),
    ("cr_line_endings", "dataset.path", ["carriage return in its header line", "LF or CRLF"]),
    ("unclosed_quote", "dataset.path", ["not a well-formed comma-separated file", "never closes"]),
    ("ragged", "dataset.path", ["more fields than its header", "same number of fields"]),
    ("too_few_rows", "dataset.path", ["has 2 data rows", "at least 3"]),
    ("not_parquet", "dataset.path", ["not a readable parquet file"]),
    ("parquet_header_only", "dataset.path", ["no data rows"]),
    ("string_parquet", "dataset.features", ["column 'city'", "non-numeric", "public rows"]),
    ("constant_target", "dataset.target", ["column 'price'", "is constant", "3.7"]),
    ("duplicate_feature", "dataset.features", ["'a' names 2 columns", "columns 1 and 3"]),
    ("duplicate_target", "dataset.target", ["'price' names 2 columns", "columns 1 and 3"]),
    ("unknown_target", "dataset.target", ["'nope'", "not a column", "a, b, price"]),
    ("unknown_feature", "dataset.features", ["'zzz' is not a column"]),
    ("target_as_feature", "dataset.features", ["lists the target 'price'"]),
    ("only_target", "dataset.path", ["no column besides the target"]),
    ("no_target", "dataset.target", ["is not set", "a, b, price"]),
    ("no_header", "dataset.target", ["does the file have a header row?"]),
]


@pytest.mark.parametrize("kind,key,needles", BAD_FILES,
                         ids=[c.values[0] if hasattr(c, "values") else c[0] for c in BAD_FILES])
def test_bad_table_is_refused_in_one_line_naming_the_key(tmp_path, kind, key, needles):
    name, extra = _write(kind, tmp_path)
    msg = refused_dataset({"name": "csv", "path": str(tmp_path / name), "target": "price", **extra}, key, *needles)
    assert "(0, 0)" not in msg


def test_missing_path_is_refused():
    refused_dataset({"name": "csv", "target": "price"}, "dataset.path", "is not set")


def _roles(n, seed=0, n_test=None, n_public=None):
    """(private, public, test) row indices of a table of n rows: the split is a function of the
    row count and the seed only (certdp.data.tabular.split_rows)."""
    t, p = split_sizes(n, n_test=n_test, n_public=n_public)
    return split_rows(n, n_test=t, n_public=p, seed=seed)


# A bad cell: (kind, column, value, extra settings, key refused on a public/test row, words)
BAD_CELLS = [
    ("non_numeric_feature", "b", "abc", {}, "dataset.features", ["column 'b'", "non-numeric", "'abc'"]),
    ("non_numeric_target", "price", "expensive", {}, "dataset.target", ["column 'price'", "non-numeric", "'expensive'"]),
    ("inf", "a", np.inf, {}, "dataset.features", ["column 'a'", "infinite"]),
    ("nan", "a", np.nan, {}, "dataset.features", ["missing values in 1 row", "'a': 1", "dataset.dropna=true"]),
    ("na_token", "a", "NA", {}, "dataset.features", ["missing values in 1 row", "'a': 1"]),
    ("nan_target", "price", np.nan, {}, "dataset.target", ["missing values in 1 row", "'price': 1"]),
    ("overflow_feature", "a", 1e300, {}, "dataset.features", ["column 'a'", "1e+300", "overflows"]),
    ("overflow_unstandardised", "a", 1e300, {"scaling": "none"}, "dataset.features", ["column 'a'", "overflows"]),
    ("overflow_target", "price", -1e300, {}, "dataset.target", ["column 'price'", "overflows"]),
]
_CELL_IDS = [c[0] for c in BAD_CELLS]


def _with_cell(d, row, col, value, name="cell.csv"):
    t = _table().astype(object)
    t.loc[row, col] = value
    t.to_csv(d / name, index=False)
    return str(d / name)


@pytest.mark.parametrize("kind,col,value,extra,key,needles", BAD_CELLS, ids=_CELL_IDS)
@pytest.mark.parametrize("role", ["public", "test"])
def test_a_bad_cell_in_a_public_or_test_row_is_refused_in_one_line(tmp_path, kind, col, value, extra, key,
                                                                     needles, role):
    _, pub, test = _roles(40)
    row = int((pub if role == "public" else test)[0])
    path = _with_cell(tmp_path, row, col, value)
    msg = refused_dataset({"name": "csv", "path": path, "target": "price", **extra}, key, *needles)
    if "overflows" not in needles:            # the row as the user counts it, and its role
        assert f"row {row + 1} after the header" in msg and f"{role} rows" in msg, msg


@pytest.mark.parametrize("kind,col,value,extra,key,needles", BAD_CELLS, ids=_CELL_IDS)
def test_the_same_cell_in_a_private_row_is_imputed_or_clipped_never_refused(tmp_path, kind, col, value, extra,
                                                                             key, needles):
    """No private value decides the outcome: the table loads with the clean table's split,
    sizes and preprocessing, and its private arrays differ from the clean ones in that row only,
    where the cell is the imputed value (missing, non-numeric) or the clip bound (infinite, huge)."""
    priv, _, _ = _roles(40)
    i = 5
    cfg = {"name": "csv", "target": "price", **extra}
    clean = load_dataset({**cfg, "path": _with_cell(tmp_path, 0, "a", _table().loc[0, "a"], "clean.csv")}, 0)
    ds = load_dataset({**cfg, "path": _with_cell(tmp_path, int(priv[i]), col, value)}, 0)
    pp = ds.preprocessing
    assert pp == clean.preprocessing and ds.info == {**clean.info, "source": ds.info["source"]}
    for a in ("x_test", "y_test", "x_public", "y_public"):
        assert getattr(ds, a).tobytes() == getattr(clean, a).tobytes(), a
    assert np.isfinite(ds.x_train).all() and np.isfinite(ds.y_train).all()
    differs = np.flatnonzero((ds.x_train != clean.x_train).any(1) | (ds.y_train != clean.y_train))
    assert list(differs) == [i]
    j = ["a", "b"].index(col) if col != "price" else None
    got = ds.x_train[i, j] if j is not None else ds.y_train[i]
    if kind.startswith(("nan", "na_", "non_numeric")):
        centre = 0.0                           # the fill is the centre of the map: 0 in model units
        assert got == centre
    else:                                      # infinite or huge: clipped to +-clip_sd model units
        assert abs(got) == pp.clip == 1e4


def test_dropna_drops_incomplete_public_and_test_rows_only_and_logs_the_count(tmp_path, caplog):
    priv, pub, test = _roles(40, n_test=7)
    t = _table().astype(object)
    t.loc[int(pub[0]), "a"] = np.nan
    t.loc[int(test[1]), "price"] = ""
    t.loc[int(priv[2]), "b"] = np.nan            # a private row: imputed, never dropped
    t.to_csv(tmp_path / "holes.csv", index=False)
    cfg = {"name": "csv", "path": str(tmp_path / "holes.csv"), "target": "price", "n_test": 7}
    refused_dataset(cfg, "dataset.features", "missing values in 1 row", "public rows")
    with caplog.at_level("WARNING", logger="certdp"):
        ds = load_dataset({**cfg, "dropna": True}, 0)
    assert (ds.n_train, len(ds.y_public), len(ds.y_test)) == (len(priv), len(pub) - 1, len(test) - 1)
    assert ds.info["rows_dropped"] == 2 and np.isfinite(ds.x_train).all()
    assert any("dropped 1 of the 4 public rows" in r.getMessage() for r in caplog.records)
    assert any("dropped 1 of the 7 test rows" in r.getMessage() for r in caplog.records)
    # the kept public and test rows are exactly the complete ones
    full = load_dataset({**cfg, "path": _with_cell(tmp_path, 0, "a", _table().loc[0, "a"], "full.csv")}, 0)
    np.testing.assert_allclose(ds.preprocessing.target_to_raw(ds.y_test),
                               np.delete(full.preprocessing.target_to_raw(full.y_test), 1), rtol=1e-12)
    assert ds.x_train[2, 1] == 0.0 and ds.x_train.shape == full.x_train.shape


def test_dropna_that_drops_every_test_row_says_so(tmp_path):
    _, _, test = _roles(40, n_test=3)
    t = _table().astype(object)
    t.loc[[int(r) for r in test], "a"] = np.nan
    t.to_csv(tmp_path / "holes.csv", index=False)
    refused_dataset({"name": "csv", "path": str(tmp_path / "holes.csv"), "target": "price", "dropna": True, "n_test": 3},
             "dataset.dropna", "dropped every test row")


def test_missing_value_tokens_and_blank_cells_are_missing_not_text(tmp_path):
    _, pub, _ = _roles(40, n_public=10)
    t = _table().astype(object)
    t.loc[int(pub[0]), "a"], t.loc[int(pub[1]), "a"], t.loc[int(pub[2]), "b"] = "NA", " ", "null"
    t.to_csv(tmp_path / "tokens.csv", index=False)
    cfg = {"name": "csv", "path": str(tmp_path / "tokens.csv"), "target": "price", "n_public": 10}
    refused_dataset(cfg, "dataset.features", "missing values in 3 rows")
    ds = load_dataset({**cfg, "dropna": True}, 0)
    assert ds.n_train + len(ds.y_test) + len(ds.y_public) == 40 - 3 and len(ds.y_public) == 7


def test_impute_rules_and_unknown_label(tmp_path):
    priv, pub, _ = _roles(40)
    r = int(priv[0])
    path = _with_cell(tmp_path, r, "a", "")
    base = {"name": "csv", "path": path, "target": "price"}
    raw = _table()
    for impute, want in [("centre", raw.a[pub].mean()), ("public_median", float(np.median(raw.a[pub]))),
                         ({"a": 0.25}, 0.25)]:
        ds = load_dataset({**base, "impute": impute}, 0)
        pp = ds.preprocessing
        assert pp.fill[0] == pytest.approx(want, rel=1e-12)
        assert ds.x_train[0, 0] == pytest.approx((want - pp.shift[0]) / pp.scale[0], abs=1e-12)
    refused_dataset({**base, "impute": {"zzz": 1}}, "dataset.impute", "'zzz' is not a feature")
    refused_dataset({**base, "impute": "mean"}, "dataset.impute", "centre, public_median")
    refused_dataset({**base, "unknown_label": "x"}, "dataset.unknown_label", "dataset.task=regression")


def test_good_table_loads_with_the_default_20_percent_test_and_10_percent_public_split(tmp_path):
    _table(50).to_csv(tmp_path / "t.csv", index=False)
    ds = load_dataset({"name": "csv", "path": str(tmp_path / "t.csv"), "target": "price", "n_test": None,
                       "output_range": [-5, 5]}, 0)
    assert (ds.n_train, len(ds.y_public), len(ds.y_test), ds.n_features) == (35, 5, 10, 2)
    # [-5, 5] is in the target's own units; the dataset carries it in model units
    pp = ds.preprocessing
    assert pp.output_range == (-5.0, 5.0)
    assert ds.output_range == pytest.approx(((-5 - pp.target_shift) / pp.target_scale, (5 - pp.target_shift) / pp.target_scale))
    np.testing.assert_allclose(ds.x_public.mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(ds.y_public.std(), 1)


def test_parquet_tsv_and_gzip_tables_load_like_the_csv(tmp_path):
    t = _table(30)
    t.to_csv(tmp_path / "t.csv", index=False)
    t.to_parquet(tmp_path / "t.parquet")
    t.to_csv(tmp_path / "t.tsv", index=False, sep="\t")
    t.to_csv(tmp_path / "t.csv.gz", index=False)
    loads = [load_dataset({"name": "csv", "path": str(tmp_path / f), "target": "price"}, 2)
             for f in ("t.csv", "t.parquet", "t.tsv", "t.csv.gz")]
    for ds in loads[1:]:
        np.testing.assert_allclose(ds.x_train, loads[0].x_train, rtol=1e-15)
        np.testing.assert_allclose(ds.y_test, loads[0].y_test, rtol=1e-15)


def test_large_but_safe_values_are_kept_not_zeroed(tmp_path):
    t = _table(30)
    t["a"] = t["a"] * 1e100          # variance 1e200: finite, so standardisation is exact
    t.to_csv(tmp_path / "scaled.csv", index=False)
    ds = load_dataset({"name": "csv", "path": str(tmp_path / "scaled.csv"), "target": "price"}, 0)
    assert np.isfinite(ds.x_train).all()
    np.testing.assert_allclose(ds.x_public.std(0), 1)
    assert 0.2 < ds.x_train[:, 0].std() < 5          # on the same scale as the public rows, not zeroed


def test_unused_bad_columns_do_not_matter(tmp_path):
    t = _table(30).assign(city="Paris", note=np.nan)
    t.to_csv(tmp_path / "mixed.csv", index=False)
    ds = load_dataset({"name": "csv", "path": str(tmp_path / "mixed.csv"), "target": "price",
                       "features": ["a", "b"]}, 0)
    assert ds.n_features == 2


def test_california_from_a_bad_user_file_is_one_line(tmp_path):
    (tmp_path / "cal.parquet").write_bytes(b"\x00\x01 not parquet")
    refused_dataset({"name": "california", "path": str(tmp_path / "cal.parquet")}, "dataset.path", "parquet")


# ---------------------------------------------------------------------------------------------
# The CLI end to end.

def certdp(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "certdp.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=600)


SMALL = ["train.steps=10", "staircase.k_max=8", "privacy.epsilons=[1]", "privacy.n_draws=20"]


@pytest.mark.slow
def test_cli_on_a_real_table_scikit_learns_diabetes_data(tmp_path):
    """442 patients x 10 measurements (shipped inside the scikit-learn wheel), a 10-16-1 MLP; the
    output range in the target's own units (disease progression, 25 to 346 in the data)."""
    from sklearn.datasets import load_diabetes
    frame = load_diabetes(as_frame=True).frame
    frame.to_csv(tmp_path / "diabetes.csv", index=False)
    r = certdp("agtr", "dataset=csv", f"dataset.path={tmp_path / 'diabetes.csv'}", "dataset.target=target",
               "model=mlp", "model.hidden=[16]", "dataset.output_range=[0,400]", *SMALL,
               f"out_root={tmp_path / 'out'}", "run=diabetes")
    assert r.returncode == 0, r.stderr[-2000:]
    res = pd.read_csv(tmp_path / "out/agtr/csv/diabetes/results.csv")
    # 20% test rows, 10% public rows (the scaling is fitted there), the rest private
    assert set(res.arm) == {"agtr", "gs"} and (res.n_test == round(0.2 * 442)).all()
    assert (res.n_train == 442 - 88 - 44).all()
    metrics = res[["mae", "mse", "nonprivate_mae", "nonprivate_mse", "ss_mean"]].to_numpy()
    assert np.isfinite(metrics).all() and (metrics > 0).all()
    # the non-private MLP predicts better than the mean (target standardised with public statistics: MSE 1 or so)
    assert (res.nonprivate_mse < 0.8).all()


@pytest.mark.slow
def test_cli_readme_csv_example_runs_as_written(tmp_path):
    rng = np.random.default_rng(0)
    n = 300
    t = pd.DataFrame({"rooms": rng.integers(1, 6, n), "area": rng.normal(80, 20, n)})
    t["price"] = 50 * t.rooms + 2 * t.area + rng.normal(0, 30, n)      # thousands
    t.to_csv(tmp_path / "my.csv", index=False)
    # README: certdp agtr dataset=csv dataset.path=my.csv dataset.target=price 'dataset.output_range=[0,1000]'
    r = certdp("agtr", "dataset=csv", "dataset.path=my.csv", "dataset.target=price", "dataset.output_range=[0,1000]",
               *SMALL, f"out_root={tmp_path / 'out'}", "run=readme", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    res = pd.read_csv(tmp_path / "out/agtr/csv/readme/results.csv")
    assert (res.n_test == 60).all() and (res.n_train == 210).all() and np.isfinite(res[["mae", "mse"]].to_numpy()).all()


@pytest.mark.slow
def test_cli_refuses_a_bad_table_in_one_line(tmp_path):
    # the other bad tables are covered in-process above; a CLI start costs seconds
    name, _ = _write("header_only", tmp_path)
    key = "dataset.path"
    r = certdp("agtr", "dataset=csv", f"dataset.path={tmp_path / name}", "dataset.target=price", *SMALL,
               f"out_root={tmp_path / 'out'}")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"certdp: error: {key}: "), r.stderr
    assert "Traceback" not in r.stderr and not list((tmp_path / "out").rglob("results.csv"))


@pytest.mark.slow
def test_cli_refuses_bad_dataset_settings_in_one_line(tmp_path):
    # it exited 0 with negative noise scales; the other values are covered in-process
    for arg, key in [("dataset.output_range=[6,-6]", "dataset.output_range")]:
        r = certdp("agtr", "dataset=linear", arg, f"out_root={tmp_path}")
        assert r.returncode == 2, (arg, r.stderr[-500:])
        assert r.stderr.strip().startswith(f"certdp: error: {key}: got "), r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and not list(tmp_path.rglob("results.csv"))
