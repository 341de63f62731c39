"""The probes of the data: csv tables good and bad (``{fx}/csv``, :mod:`tools.prober.tables`), a
sklearn table, data files missing or corrupted in the cache."""

from __future__ import annotations

from tools.prober.bases import CSV
from tools.prober.model import Table


def add(t: Table) -> None:
    _csv_dataset(t)
    _data_files_and_cache(t)


def _csv_dataset(t: Table) -> None:
    """Csv dataset (agtr)."""
    def csvp(name, expect, keys, more=(), cat="bad-table", **kw):
        t.add("agtr", [f"dataset.path={{fx}}/csv/{name}", *more], expect, keys, base=CSV, category=cat,
              section=kw.pop("section", "dataset.path"), **kw)
    table_keys = ("dataset.path", "dataset.features", "dataset.target")
    csvp("dir", "refuse", "dataset.path")
    csvp("empty.csv", "refuse", "dataset.path")
    csvp("header.csv", "refuse", table_keys)
    csvp("binary.csv", "refuse", "dataset.path")
    # one infinite cell, in a private row (row 7 under the default split): clipped by the
    # data-independent rule (dataset.clip_sd, issue 19) -- no private record decides the outcome
    csvp("inf.csv", "run", (), cat="valid")
    csvp("nan.csv", "refuse", table_keys + ("dataset.dropna",))
    csvp("const.csv", "refuse", table_keys)
    csvp("big.csv", "refuse", table_keys)
    csvp("dup.csv", "refuse", table_keys)
    csvp("text.csv", "refuse", table_keys)
    csvp("texttarget.csv", "refuse", table_keys)
    csvp("onerow.csv", "refuse", table_keys + ("dataset.n_test",))
    csvp("ragged.csv", "refuse", "dataset.path")
    csvp("fake.parquet", "refuse", "dataset.path")
    csvp("semicolon.csv", "refuse", ("dataset.target", "dataset.path"))
    csvp("missing.csv", "refuse", "dataset.path")
    csvp("nan.csv", "run", (), ["dataset.dropna=true"], cat="valid", section="dataset.dropna")
    t.run("agtr", ["dataset.output_range=[-4,4]"], base=CSV)
    t.add("agtr", ["dataset.output_range=null"], "refuse", ("dataset.output_range", "privacy.global_sensitivity"),
          base=CSV, early=True, category="validate-before-work")
    t.add("agtr", ["dataset=csv", "dataset.path={fx}/csv/good.csv", "dataset.target=y", "dataset.output_range=[-5,5]",
                   "train.steps=3", "staircase.k_max=4", "privacy.n_draws=5"], "run", base=[],
          category="readme-example", section="dataset.n_test", pid="agtr:csv README example (no n_test)")
    t.add("agtr", ["dataset=csv", "dataset.path={fx}/csv/diabetes.csv", "dataset.target=target", "model=mlp",
                   "model.hidden=[16]", "dataset.output_range=[-5,5]", "train.steps=3", "staircase.k_max=4",
                   "privacy.n_draws=5"], "run", base=[], category="real-table", section="dataset.path",
          pid="agtr:csv sklearn diabetes, model=mlp", extra={"needs": "diabetes"})
    t.add("agtr", ["dataset.target=null"], "refuse", "dataset.target", base=CSV)
    t.add("agtr", ["dataset.target=nope"], "refuse", "dataset.target", base=CSV)
    t.add("agtr", ["dataset.path=null"], "refuse", "dataset.path", base=CSV)
    t.add("agtr", ["dataset.features=[nope]"], "refuse", "dataset.features", base=CSV)
    t.add("agtr", ["dataset.features=[y]"], "refuse", ("dataset.features", "dataset.target"), base=CSV)
    t.either("agtr", ["dataset.features=[]"], "dataset.features", base=CSV, category="empty-list")
    t.run("agtr", ["dataset.features=[x1]"], base=CSV)
    t.refuse("agtr", "dataset.n_test", ["abc", "0", "2.7", "-3", "300", "1000"], base=CSV)
    t.refuse("agtr", "dataset.output_range", ["[5,-5]", "[5]", "[nan,5]"], base=CSV)
    t.refuse("agtr", "dataset.standardise", ["maybe"], base=CSV)
    t.refuse("agtr", "+dataset.split_seed", ["abc"], base=CSV, section="dataset.split_seed")


def _data_files_and_cache(t: Table) -> None:
    """Data files and cache."""
    t.add("agtr", ["dataset=california", "dataset.path={fx}/csv/dir", "train.steps=3", "staircase.k_max=4"], "refuse",
          ("dataset.path", "dataset"), base=[], category="missing-data", section="dataset.path")
    t.add("agtr", ["dataset=california", "train.steps=3", "staircase.k_max=4"], "refuse", ("dataset", "dataset.path"),
          base=[], category="checksum-mismatch", section="cache", env={"CERTDP_CACHE": "{fx}/badcache"},
          must_say=r"(?i)(checksum|sha-?256)[^;]*(mismatch|does not match|differ|expected)", extra={"kept_aside": True},
          pid="agtr:california cache holding a corrupted file")
    t.add("agtr", ["dataset=california", "train.steps=3", "staircase.k_max=4"], "refuse", ("dataset", "dataset.path"),
          base=[], category="unreadable-cache", section="cache", env={"CERTDP_CACHE": "{fx}/afile/cache"},
          pid="agtr:california cache below a regular file")
    t.add("ags", ["dataset=mnist5", "train.steps=3"], "refuse", ("dataset", "dataset.path"), base=[],
          category="missing-data", section="dataset", pid="ags:mnist5 offline without cache")
    # (adult's preset sweeps ablation_n up to 256 releases, which 3 steps cannot hold: refused before data)
    t.add("ags", ["dataset=adult", "train.steps=3", "ags.ablation_n=[]"], "refuse", ("dataset", "dataset.path"), base=[],
          category="missing-data", section="dataset", pid="ags:adult offline without cache")
