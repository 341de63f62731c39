"""The typed parsing of every dataset's settings (certdp.data.params, read by
certdp.data.dataset_settings): table-driven cases, each refused in one line naming the key, before
any file is read; cross-checks between settings; the shipped dataset configs; and properties of the
parsers over their whole input space.
"""

import math

import pytest
import yaml
from hypothesis import given, settings as hsettings, strategies as st

from certdp.settings import config_dir
from certdp.data import dataset_settings, entries, load_dataset
from certdp.data import params
from certdp.errors import ConfigError
from cli_helpers import ONE_LINE_DATASET as ONE_LINE, refused_dataset

# ---------------------------------------------------------------------------------------------
# Dataset settings: typed and range-checked for every dataset, before any file is read.

SETTINGS = [
    # dataset, key, value, words the message must hold
    ("linear", "n_train", 0, ["got 0", "integer in [2,"]),
    ("linear", "n_train", 2.7, ["got 2.7", "not a whole number"]),
    ("linear", "n_train", "abc", ["'abc'", "a string"]),
    ("linear", "n_train", True, ["a boolean"]),
    ("linear", "n_train", 1e12, ["too large"]),
    ("linear", "n_test", -1, ["too small"]),
    ("linear", "noise", -0.1, ["finite number >= 0"]),
    ("linear", "noise", float("nan"), ["not finite"]),
    ("linear", "slope", "steep", ["not a number"]),
    ("linear", "x_low", float("-inf"), ["not finite"]),
    ("linear", "output_range", [6], ["1 value, not 2", "lo < hi"]),
    ("linear", "output_range", [6, -6], ["lo must be below hi"]),
    ("linear", "output_range", [0, 0], ["lo must be below hi"]),
    ("linear", "output_range", [0, float("inf")], ["not finite"]),
    ("linear", "output_range", ["a", 1], ["is not a number"]),
    ("linear", "output_range", -3, ["width must be finite and > 0"]),
    ("linear", "data_seed", -1, ["too small"]),
    ("blobs", "n_features", 0, ["integer in [1,"]),
    ("blobs", "n_public", -1, ["too small"]),
    ("blobs", "separation", "far", ["not a number"]),
    ("blobs", "cluster_std", 0, ["> 0"]),
    ("california", "n_test", 0, ["too small"]),
    ("california", "scaling", 1, ["unknown option", "public, none, private_stats_not_dp"]),
    ("california", "scaling", "private", ["unknown option", "private_stats_not_dp"]),
    ("california", "output_range", [1, 2, 3], ["3 values", "target's own units"]),
    ("california", "output_range", 0, ["width must be finite and > 0", "standard deviations"]),
    ("california", "n_public", -1, ["too small"]),
    ("california", "feature_bounds", [[0, 1], [2, 2]], ["feature 2", "lo must be below hi"]),
    ("csv", "feature_bounds", {"a": [0, "x"]}, ["column 'a'", "is not a number"]),
    ("csv", "feature_bounds", [], ["empty"]),
    ("csv", "feature_bounds", "wide", ["not a list"]),
    ("csv", "task", "classification", ["regression, binary, multiclass"]),
    ("csv", "classes", [], ["empty"]),
    ("csv", "classes", ["a", "a"], ["'a' repeated"]),
    ("csv", "n_public", 1.5, ["not a whole number"]),
    ("csv", "scaling", "paper", ["public, none, private_stats_not_dp"]),
    ("csv", "n_test", 2.5, ["not a whole number"]),
    ("csv", "dropna", "true", ["a string, not a boolean"]),
    ("csv", "impute", "mean", ["unknown option", "centre, public_median"]),
    ("csv", "impute", {"a": "x"}, ["column 'a'", "not a finite number"]),
    ("csv", "impute", {}, ["empty"]),
    ("csv", "impute", 3, ["not a rule or a mapping"]),
    ("csv", "clip_sd", 0, ["too small", "(0.0, 1e+100]"]),
    ("csv", "clip_sd", float("inf"), ["not finite"]),
    ("csv", "unknown_label", "", ["empty"]),
    ("california", "clip_sd", -1, ["too small"]),
    ("csv", "features", [], ["empty"]),
    ("csv", "features", ["a", "a"], ["'a' repeated"]),
    ("csv", "target", "", ["empty"]),
    ("csv", "target", ["price"], ["a list, not a string"]),
    ("csv", "split_seed", "x", ["not an integer"]),
    ("adult", "split", "random", ["unknown option", "paper, official"]),
    ("adult", "n_public", 0, ["too small"]),
    ("adult", "n_private", 3.5, ["not a whole number"]),
    ("adult", "task", "regression", ["multiclass, binary"]),
    ("adult", "features", "tsne", ["pca, raw"]),
    ("adult", "pca_dim", 0, ["too small"]),
    ("mnist5", "digits", [1, 1], ["values repeated"]),
    ("mnist5", "digits", [3], ["at least 2"]),
    ("mnist5", "digits", [0, 12], ["12 is not such an integer"]),
    ("mnist5", "public_split", [1000], ["1 value, not 2"]),
    ("mnist5", "public_split", [-1, 2001], ["not such an integer"]),
    ("mnist5", "n_public", "many", ["a string"]),
    ("mnist5", "task", "binary", ["allowed: multiclass"]),
    ("imdb", "n_private", 0, ["too small"]),
    ("imdb", "max_chars", 0, ["too small"]),
    ("imdb", "max_seq_length", 4, ["too small"]),
    ("imdb", "batch_size", 2.5, ["not a whole number"]),
    ("imdb", "encoder", "bert", ["mpnet, minilm"]),
    ("imdb", "device", "tpu", ["auto, cpu, cuda"]),
    ("imdb", "progress", "yes", ["not a boolean"]),
    ("sst2", "n_test", "two", ["a string"]),
    ("sst2", "n_public", -5, ["too small"]),
    ("sst2", "max_chars", 1.5, ["not a whole number"]),
    ("sst2", "features", "none", ["pca, raw"]),
]


@pytest.mark.parametrize("name,key,value,needles", SETTINGS, ids=[f"{c[0]}.{c[1]}={c[2]!r}" for c in SETTINGS])
def test_dataset_setting_is_typed_and_range_checked(name, key, value, needles):
    with pytest.raises(ConfigError) as e:
        dataset_settings({"name": name, key: value})
    msg = str(e.value)
    assert e.value.key == f"dataset.{key}" and msg.startswith(f"dataset.{key}: got "), msg
    assert ONE_LINE.match(msg), msg
    for n in needles:
        assert n in msg, (n, msg)


def test_every_dataset_is_refused_before_loading_on_an_unknown_key():
    for name in entries():
        with pytest.raises(ConfigError, match=rf"^dataset\.n_trian: unknown setting of dataset '{name}'; allowed: name, model"):
            load_dataset({"name": name, "n_trian": 5}, 0)


def test_bad_values_are_refused_by_load_dataset_before_any_file_is_read(tmp_path, monkeypatch):
    # the files do not exist: a settings error must come first
    monkeypatch.setenv("CERTDP_OFFLINE", "1")
    monkeypatch.setenv("CERTDP_CACHE", str(tmp_path / "none"))
    monkeypatch.delenv("CERTDP_DATA_DIR", raising=False)
    for name, key, value in [("csv", "n_test", 0), ("california", "scaling", "no"), ("adult", "split", "x"),
                             ("mnist5", "digits", [5]), ("imdb", "max_chars", -1), ("sst2", "n_test", 1.5)]:
        with pytest.raises(ConfigError) as e:
            load_dataset({"name": name, "path": str(tmp_path / "absent"), key: value}, 0)
        assert e.value.key == f"dataset.{key}", str(e.value)


def test_cross_checks_between_settings():
    refused_dataset({"name": "linear", "x_low": 1.0, "x_high": 1.0, "n_train": 10, "n_test": 5}, "dataset.x_high",
             "above dataset.x_low")
    refused_dataset({"name": "blobs", "n_features": 10_000, "n_train": 10_000, "n_test": 10}, "dataset.n_features",
             "rows x features")
    refused_dataset({"name": "mnist5", "digits": [0, 1, 2], "n_classes": 5}, "dataset.n_classes", "got 5 with 3 dataset.digits")
    refused_dataset({"name": "mnist5", "n_public": 10, "public_split": [5, 6]}, "dataset.public_split",
             "summing to dataset.n_public=10")


def test_valid_forms_are_accepted_and_canonical():
    params = dataset_settings({"name": "linear", "n_train": 1e3, "output_range": 10, "noise": 0})
    assert params["n_train"] == 1000 and isinstance(params["n_train"], int)
    assert params["output_range"] == (-5.0, 5.0) and params["noise"] == 0.0
    params = dataset_settings({"name": "csv", "features": "a", "target": 2020, "output_range": [-5, 5]})
    assert params["features"] == ("a",) and params["target"] == "2020" and params["output_range"] == (-5.0, 5.0)
    assert dataset_settings({"name": "imdb", "device": "cuda:1"})["device"] == "cuda:1"
    assert dataset_settings({"name": "mnist5", "digits": [0, 1, 2], "n_classes": None})["digits"] == (0, 1, 2)
    # parsing is idempotent: a parsed section parses to itself
    for name in entries():
        once = dataset_settings({"name": name})
        assert dataset_settings(once) == once


def test_the_shipped_dataset_configs_parse():
    from omegaconf import OmegaConf
    for f in sorted((config_dir() / "dataset").glob("*.yaml")):
        # composed under the top-level keys they may read (the text encoders' ${device})
        cfg = OmegaConf.to_container(OmegaConf.create({"device": "cpu", "dataset": yaml.safe_load(f.read_text())}),
                                     resolve=True)["dataset"]
        params = dataset_settings(cfg)                    # every key known, every default valid
        assert params["name"] == f.stem


def test_linear_and_blobs_run_with_checked_sizes():
    ds = load_dataset({"name": "linear", "n_train": 20, "n_test": 5, "output_range": [-6, 6]}, 1)
    assert (ds.n_train, len(ds.y_test)) == (20, 5) and ds.output_range == (-6.0, 6.0)
    ds = load_dataset({"name": "blobs", "n_train": 10, "n_test": 4, "n_public": 0}, 1)
    assert ds.x_public is None and ds.n_features == 8


# ---------------------------------------------------------------------------------------------
# The parsers themselves: properties over their whole input space.

@hsettings(max_examples=200, deadline=None)
@given(st.one_of(st.integers(-10**6, 10**6), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5),
                 st.booleans(), st.none()))
def test_integer_accepts_exactly_the_whole_numbers_in_range(v):
    ok = (not isinstance(v, (bool, str)) and v is not None and math.isfinite(v) and float(v).is_integer()
          and 1 <= v <= 1000)
    try:
        out = params.integer(v, "dataset.n", lo=1, hi=1000)
    except ConfigError as e:
        assert not ok and str(e).startswith("dataset.n: got ") and "\n" not in str(e)
    else:
        assert ok and out == v and type(out) is int


@hsettings(max_examples=200, deadline=None)
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**3, 10**3), st.text(max_size=3),
                 st.booleans()))
def test_real_is_always_finite_and_in_range(v):
    try:
        out = params.real(v, "dataset.x", lo=0, lo_open=True, hi=10)
    except ConfigError:
        assert isinstance(v, (bool, str)) or not (math.isfinite(v) and 0 < v <= 10)
    else:
        assert type(out) is float and math.isfinite(out) and 0 < out <= 10


@hsettings(max_examples=200, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=0, max_size=3))
def test_interval_accepts_exactly_finite_ordered_pairs(v):
    try:
        lo, hi = params.interval(v, "dataset.output_range")
    except ConfigError:
        assert len(v) != 2 or not (math.isfinite(v[0]) and math.isfinite(v[1]) and v[0] < v[1])
    else:
        assert len(v) == 2 and math.isfinite(lo) and math.isfinite(hi) and lo < hi and (lo, hi) == tuple(v)


def test_boolean_and_choice_are_strict():
    assert params.boolean(False, "k") is False
    for v in (0, 1, "true", None, [True]):
        with pytest.raises(ConfigError, match="^k: got .*; allowed: true or false$"):
            params.boolean(v, "k")
    assert params.choice(None, "k", allowed=("a",), none=True) is None
    with pytest.raises(ConfigError, match="^k: got 'b' \\(unknown option\\); allowed: a, c$"):
        params.choice("b", "k", allowed=("a", "c"))
