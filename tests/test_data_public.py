"""Public-only preprocessing: no statistic of a private record shapes what a release uses.

* Neighbouring tables (one private record substituted) give byte-identical test queries, scaled
  targets, output range, public rows and feature map, for a real csv table (scikit-learn's
  diabetes data) and a California-shaped parquet; the paper's private-statistics scaling does not,
  and says so (``dp_end_to_end`` false).
* ``dataset=csv`` classification: labels from strings or integers, the class list from the
  public rows or declared, unknown labels refused in one line.
* The :class:`Preprocessing` value: JSON round trip, and applied to the raw rows it reproduces
  the dataset's arrays bit for bit.
* The CLI end to end on small real tables bundled with scikit-learn (ags, dpsgd, agtr).
"""

import json
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from certdp.data import load_dataset, provenance
from certdp.data.preprocessing import Preprocessing, label_text, sorted_classes
from certdp.data.tabular import split_rows, split_sizes
from neighbourhoods import table_neighbour
from certdp.errors import ConfigError

ONE_LINE = re.compile(r"^dataset(\.[a-z_]+)?: [^\n]+; allowed: [^\n]+$")


def _diabetes(tmp_path, name="diabetes.csv") -> tuple[pd.DataFrame, str]:
    from sklearn.datasets import load_diabetes
    frame = load_diabetes(as_frame=True, scaled=False).frame
    frame.to_csv(tmp_path / name, index=False)
    return frame, str(tmp_path / name)


def _private_row(n: int, cfg: dict, seed: int) -> int:
    """A row of the table that the loader puts in the private split (the split depends only
    on the number of rows and the seed)."""
    t, p = split_sizes(n, n_test=cfg.get("n_test"), n_public=cfg.get("n_public"))
    priv, _, _ = split_rows(n, n_test=t, n_public=p, seed=seed)
    return int(priv[7])


def _released_inputs(ds) -> dict:
    """Everything a release uses besides the private rows, as bytes."""
    return {"x_test": ds.x_test.tobytes(), "y_test": ds.y_test.tobytes(),
            "x_public": ds.x_public.tobytes(), "y_public": ds.y_public.tobytes(),
            "output_range": np.asarray(ds.output_range, np.float64).tobytes(),
            "preprocessing": json.dumps(ds.preprocessing.to_dict(), sort_keys=True).encode()}


@pytest.mark.parametrize("output_range", [10.0, [0, 400]], ids=["width", "raw"])
def test_one_private_record_changes_nothing_a_release_uses_csv(tmp_path, output_range):
    frame, path = _diabetes(tmp_path)
    cfg = {"name": "csv", "path": path, "target": "target", "output_range": output_range}
    row = _private_row(len(frame), cfg, seed=3)
    table_neighbour(frame, row, "target").to_csv(tmp_path / "neighbour.csv", index=False)
    a = load_dataset(cfg, 3)
    b = load_dataset({**cfg, "path": str(tmp_path / "neighbour.csv")}, 3)
    assert _released_inputs(a) == _released_inputs(b)
    assert a.dp_end_to_end and b.dp_end_to_end and a.scaling == "public"
    # the private rows do differ, in exactly one row: the neighbour is a real neighbour
    differs = np.flatnonzero((a.x_train != b.x_train).any(1) | (a.y_train != b.y_train))
    assert len(differs) == 1
    # the paper's scaling moves every test query, every target and the range: not DP, and labelled so
    cfg_p = {**cfg, "scaling": "private_stats_not_dp"}
    ap, bp = load_dataset(cfg_p, 3), load_dataset({**cfg_p, "path": str(tmp_path / "neighbour.csv")}, 3)
    assert ap.x_test.tobytes() != bp.x_test.tobytes() and ap.y_test.tobytes() != bp.y_test.tobytes()
    if isinstance(output_range, float):     # the raw range (the model-unit one is +-5 sd on both sides)
        assert ap.preprocessing.output_range != bp.preprocessing.output_range
    assert not ap.dp_end_to_end and ap.scaling == "private_stats_not_dp"


def test_one_private_record_changes_nothing_a_release_uses_california(tmp_path):
    cols = ["MedInc", "HouseAge", "AveRooms", "AveBedrms", "Population", "AveOccup", "Latitude", "Longitude"]
    rng = np.random.default_rng(0)
    n = 300
    t = pd.DataFrame(rng.lognormal(size=(n, 8)), columns=cols)
    t["MedHouseVal"] = 0.4 * t.MedInc + rng.normal(0, 0.3, n) + 1
    t.to_parquet(tmp_path / "cal.parquet")
    cfg = {"name": "california", "path": str(tmp_path / "cal.parquet"), "n_test": 40, "n_public": 30}
    row = _private_row(n, cfg, seed=0)
    table_neighbour(t, row, "MedHouseVal").to_parquet(tmp_path / "cal2.parquet")
    a, b = load_dataset(cfg, 0), load_dataset({**cfg, "path": str(tmp_path / "cal2.parquet")}, 0)
    assert _released_inputs(a) == _released_inputs(b)
    assert (a.n_train, len(a.y_test), len(a.y_public)) == (230, 40, 30) and a.dp_end_to_end


def test_california_defaults_keep_the_papers_private_set():
    # 20,640 rows: the paper's 4,128 held out = 1,000 public + 3,128 test, 16,512 private
    t, p = split_sizes(20640, n_test=3128, n_public=1000)
    priv, pub, test = split_rows(20640, n_test=t, n_public=p, seed=0)
    assert (len(priv), len(pub), len(test)) == (16512, 1000, 3128)
    assert len(np.unique(np.concatenate([priv, pub, test]))) == 20640
    # the private rows are the rows the previous 16,512 / 4,128 split trained on
    assert np.array_equal(priv, np.random.default_rng(0).permutation(20640)[4128:])


# ---------------------------------------------------------------------------------------------
# Scaling modes, declared bounds, the output range

def test_dp_end_to_end_and_scaling_per_mode(tmp_path):
    frame, path = _diabetes(tmp_path)
    base = {"name": "csv", "path": path, "target": "target"}
    bounds = {c: [float(frame[c].min()) - 1, float(frame[c].max()) + 1] for c in frame.columns if c != "target"}
    cases = [({}, True, "public"), ({"scaling": "none"}, True, "none"),
             ({"feature_bounds": bounds, "scaling": "none"}, True, "bounds"),
             ({"scaling": "private_stats_not_dp"}, False, "private_stats_not_dp"),
             ({"feature_bounds": bounds, "scaling": "private_stats_not_dp"}, False, "private_stats_not_dp")]
    for extra, dp, scaling in cases:
        ds = load_dataset({**base, **extra}, 0)
        assert provenance(ds) == {"dp_end_to_end": dp, "scaling": scaling}, extra
        assert ds.preprocessing.dp_end_to_end == dp and bool(ds.preprocessing.not_dp) == (not dp)
    for name, cfg in [("linear", {"n_train": 20, "n_test": 5}), ("blobs", {"n_train": 20, "n_test": 5})]:
        assert provenance(load_dataset({"name": name, **cfg}, 0)) == {"dp_end_to_end": True, "scaling": "generated"}


def test_feature_bounds_clip_and_map_to_the_unit_box_in_either_form(tmp_path):
    frame, path = _diabetes(tmp_path)
    feats = ["age", "bmi"]
    base = {"name": "csv", "path": path, "target": "target", "features": feats, "scaling": "none", "n_public": 0}
    as_list = load_dataset({**base, "feature_bounds": [[20, 60], [18, 40]]}, 0)
    as_map = load_dataset({**base, "feature_bounds": {"bmi": [18, 40], "age": [20, 60]}}, 0)
    assert as_list.x_train.tobytes() == as_map.x_train.tobytes() and as_list.x_public is None
    for ds in (as_list, as_map):
        assert ds.x_train.min() >= -1 and ds.x_train.max() <= 1 and (np.abs(ds.x_train) == 1).any()
    # a row inside the bounds maps linearly: age 40 -> 0, bmi 29 -> 0
    assert np.allclose(as_list.preprocessing.apply(np.array([[40.0, 29.0], [20.0, 40.0]])), [[0, 0], [-1, 1]])
    # scaling=none: the target in its own units
    assert np.isin(as_list.y_test, frame.target.to_numpy()).all()
    for bad, words in [({"feature_bounds": [[20, 60]]}, ["1 pair for 2 features"]),
                       ({"feature_bounds": {"age": [20, 60]}}, ["no bounds for 'bmi'"]),
                       ({"feature_bounds": {"age": [20, 60], "bmi": [1, 2], "sex": [0, 3]}}, ["'sex' is not a feature"])]:
        with pytest.raises(ConfigError) as e:
            load_dataset({**base, **bad}, 0)
        assert e.value.key == "dataset.feature_bounds" and ONE_LINE.match(str(e.value))
        assert all(w in str(e.value) for w in words), str(e.value)
    # without public rows the public scaling has nothing to fit on: refused, naming what to declare
    with pytest.raises(ConfigError, match=r"^dataset\.n_public: got 0, but the feature scaling and the target "
                                          r"scaling come from the public rows"):
        load_dataset({**base, "scaling": "public"}, 0)


def test_output_range_is_in_the_targets_units_and_clipping_commutes_with_scaling(tmp_path):
    frame, path = _diabetes(tmp_path)
    ds = load_dataset({"name": "csv", "path": path, "target": "target", "output_range": [25, 346]}, 1)
    pp = ds.preprocessing
    assert pp.output_range == (25.0, 346.0)
    # the dataset's range (model units) is the raw range through the target map: clipping either way agrees
    np.testing.assert_allclose(pp.target_to_raw(np.array(ds.output_range)), [25, 346])
    z = np.linspace(-10, 10, 41)
    np.testing.assert_allclose(pp.target_to_raw(np.clip(z, *ds.output_range)), np.clip(pp.target_to_raw(z), 25, 346))
    # a width w: w public standard deviations around the public mean
    w = load_dataset({"name": "csv", "path": path, "target": "target", "output_range": 6}, 1)
    y_pub = w.preprocessing.target_to_raw(w.y_public)
    np.testing.assert_allclose(w.preprocessing.output_range, [y_pub.mean() - 3 * y_pub.std(), y_pub.mean() + 3 * y_pub.std()])
    assert w.output_range == pytest.approx((-3, 3))


# ---------------------------------------------------------------------------------------------
# Classification from a user's table

def _iris(tmp_path) -> tuple[pd.DataFrame, str]:
    from sklearn.datasets import load_iris
    bunch = load_iris(as_frame=True)
    frame = bunch.frame.drop(columns="target")
    frame["species"] = np.asarray(bunch.target_names)[bunch.target]
    frame.to_csv(tmp_path / "iris.csv", index=False)
    return frame, str(tmp_path / "iris.csv")


def test_string_labels_give_a_sorted_public_class_list(tmp_path):
    frame, path = _iris(tmp_path)
    ds = load_dataset({"name": "csv", "path": path, "target": "species", "task": "multiclass"}, 0)
    pp = ds.preprocessing
    assert pp.classes == ("setosa", "versicolor", "virginica") and ds.n_classes == 3 and ds.task == "multiclass"
    assert ds.y_train.dtype == np.int64 and set(np.unique(ds.y_train)) <= {0, 1, 2}
    assert (ds.n_train, len(ds.y_public), len(ds.y_test)) == (105, 15, 30)
    # the codes decode to the labels of the rows they came from
    rows = split_rows(150, n_test=30, n_public=15, seed=0)
    assert pp.decode_labels(ds.y_test) == frame.species.to_numpy()[rows[2]].tolist()
    assert ds.dp_end_to_end and ds.output_range is None


def test_integer_labels_sort_numerically_and_binary_codes_are_plus_minus_one(tmp_path):
    from sklearn.datasets import load_breast_cancer, load_wine
    load_wine(as_frame=True).frame.assign(target=lambda f: f.target * 5).to_parquet(tmp_path / "wine.parquet")
    ds = load_dataset({"name": "csv", "path": str(tmp_path / "wine.parquet"), "target": "target", "task": "multiclass"}, 0)
    assert ds.preprocessing.classes == (0, 5, 10)           # numeric order, not text order ('10' < '5')
    cancer = load_breast_cancer(as_frame=True).frame
    cancer.to_csv(tmp_path / "cancer.csv", index=False)
    ds = load_dataset({"name": "csv", "path": str(tmp_path / "cancer.csv"), "target": "target", "task": "binary"}, 0)
    assert ds.preprocessing.classes == (0, 1) and ds.preprocessing.label_coding == "sign"
    assert set(np.unique(ds.y_train)) == {-1, 1} and ds.n_classes == 2
    rows = split_rows(len(cancer), n_test=round(0.2 * len(cancer)), n_public=round(0.1 * len(cancer)), seed=0)
    assert np.array_equal(ds.y_test, 2 * cancer.target.to_numpy()[rows[2]] - 1)
    multi = load_dataset({"name": "csv", "path": str(tmp_path / "cancer.csv"), "target": "target", "task": "multiclass"}, 0)
    assert np.array_equal(2 * multi.y_test - 1, ds.y_test)


def test_declared_classes_keep_their_order_and_need_no_public_rows(tmp_path):
    _, path = _iris(tmp_path)
    cfg = {"name": "csv", "path": path, "target": "species", "task": "multiclass",
           "classes": ["virginica", "setosa", "versicolor"]}
    ds = load_dataset(cfg, 0)
    ref = load_dataset({**cfg, "classes": None}, 0)
    assert ds.preprocessing.classes == ("virginica", "setosa", "versicolor")
    assert ds.preprocessing.decode_labels(ds.y_test) == ref.preprocessing.decode_labels(ref.y_test)
    # declared classes and declared feature bounds: no public row is needed
    bounds = [[4, 8], [2, 4.5], [1, 7], [0, 2.5]]
    ds0 = load_dataset({**cfg, "n_public": 0, "feature_bounds": bounds}, 0)
    assert ds0.x_public is None and ds0.n_train == 120 and ds0.dp_end_to_end


def test_label_outside_the_class_list_is_refused_in_one_line(tmp_path):
    frame, path = _iris(tmp_path)
    rows = split_rows(150, n_test=30, n_public=15, seed=0)
    bad = frame.copy()
    bad.loc[int(rows[2][4]), "species"] = "rosea"            # a test row
    bad.to_csv(tmp_path / "bad.csv", index=False)
    cfg = {"name": "csv", "path": str(tmp_path / "bad.csv"), "target": "species", "task": "multiclass"}
    with pytest.raises(ConfigError) as e:
        load_dataset(cfg, 0)
    msg = str(e.value)
    assert e.value.key == "dataset.classes" and ONE_LINE.match(msg), msg
    assert "the test rows of bad.csv" in msg and "'rosea'" in msg and "dataset.classes=[...]" in msg
    # declared with the extra class, it loads
    ds = load_dataset({**cfg, "classes": ["setosa", "versicolor", "virginica", "rosea"]}, 0)
    assert ds.n_classes == 4
    # in a private row the same label is not refused: it is coded as dataset.unknown_label (the
    # first class by default), and nothing else changes
    priv_bad = frame.copy()
    priv_bad.loc[int(rows[0][4]), "species"] = "rosea"
    priv_bad.to_csv(tmp_path / "priv.csv", index=False)
    for unk, code in ((None, 0), ("virginica", 2)):
        a = load_dataset({**cfg, "path": path, "unknown_label": unk}, 0)
        b = load_dataset({**cfg, "path": str(tmp_path / "priv.csv"), "unknown_label": unk}, 0)
        assert a.preprocessing == b.preprocessing and b.y_train[4] == code
        assert list(np.flatnonzero(a.y_train != b.y_train)) == ([4] if a.y_train[4] != code else [])
    with pytest.raises(ConfigError, match=r"^dataset\.unknown_label: got 'rosea', not among the classes"):
        load_dataset({**cfg, "path": path, "unknown_label": "rosea"}, 0)
    # a declared list missing a label of the table is refused the same way
    with pytest.raises(ConfigError, match=r"^dataset\.classes: the .* rows of iris\.csv hold label 'virginica'"):
        load_dataset({"name": "csv", "path": path, "target": "species", "task": "multiclass",
                      "classes": ["setosa", "versicolor"]}, 0)


@pytest.mark.parametrize("extra,key,words", [
    ({"task": "binary"}, "dataset.classes", ["3 classes", "exactly 2", "dataset.task=multiclass"]),
    ({"task": "multiclass", "output_range": [0, 1]}, "dataset.output_range", ["dataset.task=regression"]),
    ({"task": "regression"}, "dataset.target", ["non-numeric", "dataset.task=binary or multiclass"]),
    ({"task": "multiclass", "classes": ["setosa"]}, "dataset.classes", ["1 class", "at least 2"]),
    ({"task": "multiclass", "n_public": 0}, "dataset.n_public", ["the class list"]),
])
def test_bad_classification_settings_are_refused_in_one_line(tmp_path, extra, key, words):
    _, path = _iris(tmp_path)
    with pytest.raises(ConfigError) as e:
        load_dataset({"name": "csv", "path": path, "target": "species", **extra}, 0)
    msg = str(e.value)
    assert e.value.key == key and ONE_LINE.match(msg), msg
    assert all(w in msg for w in words), msg


def test_class_labels_in_canonical_text():
    assert [label_text(v) for v in (3, 3.0, np.int64(3), " a ", True, 2.5)] == ["3", "3", "3", "a", "True", "2.5"]
    assert sorted_classes(["10", "5", "-1"]) == (-1, 5, 10)
    assert sorted_classes(["b", "a", "10"]) == ("10", "a", "b")
    assert sorted_classes(["007", "7"]) == ("007", "7")       # distinct texts stay distinct classes


# ---------------------------------------------------------------------------------------------
# The Preprocessing value

def test_preprocessing_round_trip_and_it_reproduces_the_arrays_from_raw_rows(tmp_path):
    frame, path = _diabetes(tmp_path)
    ds = load_dataset({"name": "csv", "path": path, "target": "target", "output_range": [0, 400]}, 2)
    pp = ds.preprocessing
    back = Preprocessing.from_json(pp.to_json())
    assert back == pp and back.to_dict() == pp.to_dict()
    rows = split_rows(len(frame), n_test=round(0.2 * len(frame)), n_public=round(0.1 * len(frame)), seed=2)
    raw_test = frame.iloc[rows[2]]
    # a frame with its columns shuffled and an extra column, or the bare array: the same bits
    shuffled = raw_test[list(reversed(frame.columns))].assign(extra="x")
    for m in (pp, back):
        assert m.apply(shuffled).tobytes() == ds.x_test.tobytes()
        assert m.apply(raw_test[list(pp.columns)].to_numpy()).tobytes() == ds.x_test.tobytes()
        assert m.targets(raw_test.target).tobytes() == ds.y_test.tobytes()
    np.testing.assert_allclose(back.target_to_raw(ds.y_test), raw_test.target, rtol=1e-12)
    with pytest.raises(ConfigError, match=r"^input: missing column 'bmi'"):
        pp.apply(raw_test.drop(columns="bmi"))
    with pytest.raises(ConfigError, match=r"^input: rows of shape"):
        pp.apply(np.zeros((2, 3)))
    with pytest.raises(ConfigError, match=r"^input: 1 row\(s\) with missing or infinite values"):
        pp.apply(raw_test.assign(bmi=np.where(np.arange(len(raw_test)) == 0, np.nan, raw_test.bmi)))


def test_preprocessing_round_trip_with_pca_bounds_and_classes():
    rng = np.random.default_rng(0)
    comps = rng.normal(size=(2, 3))
    pp = Preprocessing(("a", "b", "c"), rng.normal(size=3), rng.uniform(0.5, 2, 3), feature_source="public",
                       lower=np.array([-1.0, -2, -3]), upper=np.array([1.0, 2, 3]), components=comps,
                       pca_shift=np.array([0.1, 0.2]), pca_scale=np.array([1.5, 0.7]),
                       task="binary", target="y", classes=("no", "yes"), label_coding="sign")
    back = Preprocessing.from_dict(json.loads(json.dumps(pp.to_dict())))
    x = rng.normal(size=(5, 3)) * 3
    assert back == pp and back.apply(x).tobytes() == pp.apply(x).tobytes() and pp.n_features == 2
    expect = ((np.clip(x, [-1, -2, -3], [1, 2, 3]) - pp.shift) / pp.scale @ comps.T - [0.1, 0.2]) / [1.5, 0.7]
    np.testing.assert_allclose(pp.apply(x), expect, rtol=1e-12)
    assert list(pp.encode_labels(["yes", "no", "yes"])) == [1, -1, 1] and pp.decode_labels([1, -1]) == ["yes", "no"]
    with pytest.raises(ValueError, match="unknown keys"):
        Preprocessing.from_dict({**pp.to_dict(), "mean": 0})
    with pytest.raises(ValueError, match="format"):
        Preprocessing.from_dict({**pp.to_dict(), "format": "other/9"})
    with pytest.raises(ValueError, match="scale must be > 0"):
        Preprocessing(("a",), [0.0], [0.0])


# ---------------------------------------------------------------------------------------------
# The CLI end to end on real tables bundled with scikit-learn (a start costs ~15 s here)

def certdp(*args):
    return subprocess.run([sys.executable, "-m", "certdp.cli", *args], capture_output=True, text=True, timeout=600)


TINY = ["train.steps=10", "train.lr=0.5", "train.clip=0.05", "train.batch_size=40", "privacy.epsilons=[1]",
        "privacy.n_draws=3"]


@pytest.mark.slow
def test_cli_ags_on_a_multiclass_table_with_string_labels(tmp_path):
    _, path = _iris(tmp_path)
    r = certdp("ags", "dataset=csv", f"dataset.path={path}", "dataset.target=species", "dataset.task=multiclass",
               "model=logistic", *TINY, "staircase.kind=list", "staircase.values=[1,2]",
               "ags.baselines=[dpsgd_matched]", f"out_root={tmp_path / 'out'}", "run=iris")
    assert r.returncode == 0, r.stderr[-2000:]
    res = pd.read_csv(tmp_path / "out/ags/csv/iris/results.csv")
    assert {"AGS", "DP-SGD matched"} <= set(res.arm) and (res.n_test == 30).all() and (res.n_train == 105).all()
    assert (res.n_params == 4 * 3 + 3).all()                 # a softmax head over the 3 public classes
    acc = res[["accuracy_median", "nonprivate_accuracy"]].to_numpy()
    assert np.isfinite(acc).all() and ((acc >= 0) & (acc <= 1)).all()


@pytest.mark.slow
def test_cli_dpsgd_on_a_binary_table(tmp_path):
    from sklearn.datasets import load_breast_cancer
    load_breast_cancer(as_frame=True).frame.to_csv(tmp_path / "cancer.csv", index=False)
    r = certdp("dpsgd", "dataset=csv", f"dataset.path={tmp_path / 'cancer.csv'}", "dataset.target=target",
               "dataset.task=binary", *TINY, "dpsgd.arms=[dpsgd_matched]", f"out_root={tmp_path / 'out'}", "run=c")
    assert r.returncode == 0, r.stderr[-2000:]
    res = pd.read_csv(tmp_path / "out/dpsgd/csv/c/results.csv")
    assert set(res.arm) == {"DP-SGD matched"} and np.isfinite(res.accuracy_median).all()
    # standardised with public statistics, a linear hinge model beats the majority class
    assert (res.nonprivate_accuracy > res.majority_rate + 0.1).all()


@pytest.mark.slow
@pytest.mark.parametrize("command,extra,out", [
    ("certify", ["dataset.output_range=10"], "certificate.csv"),
    ("audit", ["dataset.output_range=[0,400]", "audit.repeats=3", "audit.radii=[1,2]", "audit.modes=[random]",
               "audit.n_test=20"], "audit.csv"),
    ("pate", ["dataset.output_range=[0,400]", "pate.shards=[1,2]", "pate.staircase.k_max=4"], "results.csv"),
])
def test_cli_regression_commands_on_a_csv_table_with_a_public_split(tmp_path, command, extra, out):
    _diabetes(tmp_path)
    r = certdp(command, "dataset=csv", f"dataset.path={tmp_path / 'diabetes.csv'}", "dataset.target=target",
               "train.steps=5", "staircase.k_max=4", "privacy.epsilons=[1]", "privacy.n_draws=5", *extra,
               f"out_root={tmp_path / 'out'}", "run=r")
    assert r.returncode == 0, r.stderr[-2000:]
    table = pd.read_csv(tmp_path / f"out/{command}/csv/r/{out}")
    assert len(table) > 0 and np.isfinite(table.select_dtypes("number").to_numpy(na_value=0.0)).all()
