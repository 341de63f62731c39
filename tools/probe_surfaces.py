"""The probes of the surfaces around the runs (issue 22), for ``tools/probe.py``: ``certdp predict``
on untrusted documents, tables and output paths, ``certdp rerun`` on edited records, run folders
that must never be replaced or nested wrongly, sweeps checked as a whole, the settings edges of
dpaudit, feasibility and the accountants, Hydra's flags, experiment files of ``certdp figures``,
signals during start-up, and closed or failing output streams.

Each probe has the issue's category (``Probe.category``): ``data-loss``, ``traceback``,
``wrong-result``, ``refusal`` (a refusal must name the key and say what is allowed),
``usage`` (one line), ``signal``, ``stream``.  The special probes here return the behaviours of
``tools/probe.py`` (``data-loss`` when a finished run, an input or a FIFO changed).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

import probe as P       # tools/probe.py (registered under this name before this module is imported)

PRED = "{fx}/pred"
RUNS = "{fx}/runs"


# --------------------------------------------------------------------------------------------
# fixtures
def _prep(classes) -> dict:
    """A certdp.preprocessing/1 map: identity on columns a, b; binary labels ``classes`` (sign coding)."""
    return {"format": "certdp.preprocessing/1", "columns": ["a", "b"], "shift": [0.0, 0.0], "scale": [1.0, 1.0],
            "feature_source": "public", "input": "table columns", "lower": None, "upper": None, "components": None,
            "pca_shift": None, "pca_scale": None, "task": "binary", "target": "y", "target_source": None,
            "target_shift": 0.0, "target_scale": 1.0, "output_range": None, "classes": list(classes),
            "label_coding": "sign", "not_dp": []}


def released_doc(fmt: int, classes=(0, 1)) -> dict:
    """A hand-made released.json: a linear hinge model predicting sign(a - b)."""
    rel = {"mechanism": "laplace_p", "epsilon": 1.0, "delta": 1e-5, "n_releases": 1, "composition": "basic",
           "parameters": [1.0, -1.0, 0.0]}
    doc = {"format": f"certdp.released/{fmt}", "command": "ags", "dataset": "csv", "task": "binary",
           "dp_end_to_end": True, "model": {"widths": [2, 1], "loss": "hinge", "n_params": 3},
           "preprocessing": _prep(classes), "releases": [rel]}
    if fmt == 1:
        doc["seed"] = 0
        rel.update(draw=0, test_accuracy=0.5)
    else:
        doc.update(publishable=True, note="DP values and data-independent metadata only")
        rel["regime"] = "approx"
    return doc


BAD_DOCS = [  # (name, path in the document, value (KeyError: delete), the key the refusal must name)
    ("no-model", ("model",), KeyError, "released.json.model"),
    ("no-releases", ("releases",), KeyError, "released.json.releases"),
    ("no-mechanism", ("releases", 0, "mechanism"), KeyError, "released.json.releases[0].mechanism"),
    ("unknown-mechanism", ("releases", 0, "mechanism"), "cauchy", "released.json.releases[0].mechanism"),
    ("string-parameter", ("releases", 0, "parameters", 1), "x", "released.json.releases[0].parameters[1]"),
    ("nan-parameter", ("releases", 0, "parameters", 2), float("nan"), "released.json.releases[0].parameters[2]"),
    ("inf-parameter", ("releases", 0, "parameters", 0), float("inf"), "released.json.releases[0].parameters[0]"),
    ("short-parameters", ("releases", 0, "parameters"), [1.0, 2.0], "released.json.releases[0].parameters"),
    ("negative-epsilon", ("releases", 0, "epsilon"), -1, "released.json.releases[0].epsilon"),
    ("bool-epsilon", ("releases", 0, "epsilon"), True, "released.json.releases[0].epsilon"),
    ("empty-releases", ("releases",), [], "released.json.releases"),
    ("wrong-n_params", ("model", "n_params"), 4, "released.json.model.n_params"),
    ("string-width", ("model", "widths"), [2, "x"], "released.json.model.widths[1]"),
    ("huge-width", ("model", "widths"), [2, 10 ** 9], "released.json.model.widths[1]"),
    ("regression-loss", ("model", "loss"), "mse", "released.json.model.loss"),
    ("string-shift", ("preprocessing", "shift"), ["a", 0], "released.json.preprocessing"),
    ("zero-scale", ("preprocessing", "scale"), [0, 1], "released.json.preprocessing"),
    ("short-columns", ("preprocessing", "columns"), ["a"], "released.json.preprocessing"),
    ("null-preprocessing", ("preprocessing",), None, "released.json.preprocessing"),
    ("unknown-preprocessing-key", ("preprocessing", "bogus"), 1, "released.json.preprocessing"),
    ("wrong-coding", ("preprocessing", "label_coding"), "index", "released.json.preprocessing"),
    ("unknown-format", ("format",), "certdp.released/9", "released.json.format"),
    ("unknown-field", ("bogus",), 1, "released.json.bogus"),
    ("regression-task", ("task",), "regression", "released.json.task"),
    ("not-ags", ("command",), "agtr", "released.json.command"),
]


def _set(doc, path, value):
    node = doc
    for k in path[:-1]:
        node = node[k]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value


def _labelled(path: Path, labels, n: int = 60, seed: int = 0) -> float:
    """Rows (a, b, y), y = [a > b] except every fifth row, labels written ``labels``; the true
    accuracy of sign(a - b) on them."""
    import numpy as np
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=n), rng.normal(size=n)
    truth = (a > b).astype(int)
    y = truth.copy()
    y[::5] = 1 - y[::5]
    path.write_text("a,b,y\n" + "".join(f"{float(x)!r},{float(z)!r},{labels[int(v)]}\n" for x, z, v in zip(a, b, y)))
    return float(np.mean(truth == y))


def make_fixtures(fx: Path, python: str, root: Path, have: dict, needs: set) -> None:
    """The surfaces' fixtures: hand-made released.json documents and tables, bad experiment
    files, FIFO and device nodes, and (only when a selected probe needs them) finished runs to
    rerun and predict from."""
    pred = fx / "pred"
    pred.mkdir(parents=True, exist_ok=True)
    acc = {}
    for name, labels in (("t", ("0", "1")), ("t01", ("00", "01")), ("t10", ("0.0", "1.0")), ("t1e0", ("0", "1e0"))):
        acc[name] = _labelled(pred / f"{name}.csv", labels)
    have["pred_acc"] = acc
    for fmt in (1, 2):
        (pred / f"ok{fmt}.json").write_text(json.dumps(released_doc(fmt)))
        (pred / f"text{fmt}.json").write_text(json.dumps(released_doc(fmt, ("00", "01"))))
        for name, path, value, _ in BAD_DOCS:
            doc = released_doc(fmt)
            _set(doc, path, value)
            (pred / f"bad{fmt}-{name}.json").write_text(json.dumps(doc))
    (pred / "deep.json").write_bytes(b"[" * 200_000 + b"]" * 200_000)
    (pred / "binary.json").write_bytes(bytes(range(256)) * 8)
    (pred / "notjson.json").write_text("not json at all\n")
    (pred / "list.json").write_text("[1, 2, 3]\n")
    (pred / "header.csv").write_text("a,b,y\n")
    (pred / "dup.csv").write_text("a,b,a,y\n1,2,3,0\n")
    (pred / "badlabel.csv").write_text("a,b,y\n1,2,0\n1,2,1.5\n")
    (pred / "nocol.csv").write_text("a,y\n1,0\n")
    (pred / "nan.csv").write_text("a,b,y\n1,,0\n")
    stg = pred / "r.incomplete-1-abcd"
    stg.mkdir(exist_ok=True)
    (stg / "released.json").write_text(json.dumps(released_doc(1)))
    (pred / "mine.csv").write_text("precious,data\n1,2\n")
    dev = fx / "dev"
    dev.mkdir(exist_ok=True)
    if not (dev / "fifo").exists():
        os.mkfifo(dev / "fifo")
    try:                                 # a device node of our own: a bug replaces it, not /dev/null
        if not (dev / "null").exists():
            os.mknod(dev / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        have["device"] = True
    except (PermissionError, OSError) as e:
        have["device"] = f"no device node ({e})"
    _experiments(fx / "exp")
    if needs & {"surf-runs"}:
        have["surf-runs"] = _runs(fx / "runs", python, root)
    if needs & {"surf-ags"}:
        have["surf-ags"] = _ags_run(fx / "agsrun", python, root, fx)


EXPERIMENTS = {  # bad experiment files of certdp figures: (body after the header, the field named)
    "runs-scalar": ("runs: 5\n", "runs"),
    "run-scalar": ("runs: [5]\n", "runs[0]"),
    "profiles-list": ("runs:\n  - {id: f, command: feasibility, profiles: [quick]}\n", "runs[0].profiles"),
    "overrides-scalar": ("runs:\n  - {id: f, command: feasibility, overrides: feasibility.c=2}\n", "runs[0].overrides"),
    "overrides-syntax": ("runs:\n  - {id: f, command: feasibility, overrides: ['feasibility.c=[1,2']}\n", "runs"),
    "sweep-scalar": ("runs:\n  - {id: f, command: feasibility, sweep: {feasibility.c: 3}}\n", "runs[0].sweep"),
    "unknown-command": ("runs:\n  - {id: f, command: nope}\n", "runs[0].command"),
    "profile-overrides-scalar": ("runs:\n  - {id: f, command: feasibility, profiles: {quick: {overrides: 3}}}\n",
                                 "runs[0].profiles.quick.overrides"),
    "laughs": (None, ""),
    "not-a-mapping": (None, ""),
}


def _experiments(d: Path) -> None:
    head = "name: a\ncaption: c\nplot: cond_table\n"
    for name, (body, _) in EXPERIMENTS.items():
        (d / name).mkdir(parents=True, exist_ok=True)
        if name == "laughs":
            text = "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
                f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 10))
        elif name == "not-a-mapping":
            text = "- just\n- a list\n"
        else:
            text = head + body
        (d / name / "a.yaml").write_text(text)


def _certdp(python: str, root: Path, argv: list, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root), "CERTDP_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([python, "-m", "certdp.cli", *argv], capture_output=True, text=True, env=env,
                          cwd=str(cwd), timeout=timeout)


LIN_SMALL = ["dataset.n_test=40", "train.steps=3", "staircase.k_max=4", "privacy.n_draws=5", "progress=false"]


def _runs(d: Path, python: str, root: Path) -> bool | str:
    """A finished agtr run on a csv (``orig``) and its edited copies for ``certdp rerun``."""
    d.mkdir(parents=True, exist_ok=True)
    data = d / "data.csv"
    data.write_text("x1,x2,y\n" + "".join(f"{i / 100 - 1},{(i * 7 % 200) / 100 - 1},{(i % 13) / 6.5 - 1}\n"
                                          for i in range(200)))
    shutil.copy(data, d / "data2.csv")
    base = ["agtr", "dataset=csv", "dataset.target=y", "dataset.output_range=[-5,5]", *LIN_SMALL, f"out_root={d / 'o'}"]
    for run, path in (("orig", data), ("changed", d / "data2.csv")):
        r = _certdp(python, root, [*base, f"dataset.path={path}", f"run={run}"], d)
        if r.returncode != 0:
            return f"fixture run failed: {r.stderr.strip()[-200:]}"
    with (d / "data2.csv").open("a") as f:       # the input of run "changed" changes after the run
        f.write("0.5,0.5,0.5\n")
    orig = d / "o" / "agtr" / "csv" / "orig"

    def variant(name, edit, rerecord=False):
        v = d / name
        if v.exists():
            shutil.rmtree(v)
        shutil.copytree(orig, v)
        edit(v)
        if rerecord:                     # run.json agrees with the edited config (only the content check stops it)
            rec = json.loads((v / "run.json").read_text())
            import hashlib
            rec["config"]["sha256"] = hashlib.sha256((v / "config.yaml").read_bytes()).hexdigest()
            (v / "run.json").write_text(json.dumps(rec))

    def drop(key):
        return lambda v: (v / "config.yaml").write_text("".join(
            line + "\n" for line in (v / "config.yaml").read_text().splitlines() if not line.startswith(f"{key}:")))

    def sub(old, new):
        return lambda v: (v / "config.yaml").write_text((v / "config.yaml").read_text().replace(old, new))

    laughs = "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
        f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 12))
    variant("noseed", drop("seed"))
    variant("noseed-rerecorded", drop("seed"), rerecord=True)
    variant("nontest", sub("n_test:", "n_tset:"))
    variant("command-list", sub("command: agtr", "command: [agtr]"), rerecord=True)
    variant("binary", lambda v: (v / "config.yaml").write_bytes(bytes(range(256)) * 4))
    variant("binary-rerecorded", lambda v: (v / "config.yaml").write_bytes(bytes(range(256)) * 4), rerecord=True)
    variant("laughs", lambda v: (v / "config.yaml").write_text(laughs), rerecord=True)
    variant("format1", sub("config_format: 2", "config_format: 1"), rerecord=True)
    variant("nojson", lambda v: (v / "run.json").unlink())
    variant("badjson", lambda v: (v / "run.json").write_text('{"format": "certdp.run/1", "command": ["agtr"]}'))
    variant("deepjson", lambda v: (v / "run.json").write_text("[" * 100_000 + "]" * 100_000))
    variant("r.incomplete-1-abcd", lambda v: None)
    variant("r.replaced-1-abcd", lambda v: None)
    return True


def _ags_run(d: Path, python: str, root: Path, fx: Path) -> bool | str:
    """A finished ags run on a binary csv (labels 0/1) for ``certdp predict`` on a real run."""
    d.mkdir(parents=True, exist_ok=True)
    import numpy as np
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 2))
    y = (x[:, 0] - x[:, 1] > 0).astype(int)
    rows = "".join(f"{float(a)!r},{float(b)!r},{int(v)}\n" for (a, b), v in zip(x, y))
    (d / "train.csv").write_text("a,b,y\n" + rows)
    for name, lab in (("t", ("0", "1")), ("t01", ("00", "01")), ("t10", ("0.0", "1.0"))):
        (d / f"{name}.csv").write_text("a,b,y\n" + "".join(f"{float(a)!r},{float(b)!r},{lab[int(v)]}\n"
                                                           for (a, b), v in zip(x[:80], y[:80])))
    r = _certdp(python, root, ["ags", "dataset=csv", f"dataset.path={d / 'train.csv'}", "dataset.target=y",
                               "dataset.task=binary", "train.steps=10", "privacy.epsilons=[10]", "privacy.n_draws=3",
                               "ags.baselines=[]", "progress=false", "run=r", f"out_root={d / 'o'}"], d)
    return True if r.returncode == 0 else f"fixture ags run failed: {r.stderr.strip()[-200:]}"


# --------------------------------------------------------------------------------------------
# the probes
def build(t: "P.Table") -> None:
    """Add the surfaces' probes to ``t`` (each marked ``extra["surface"]``: ``--surfaces`` selects them)."""
    n0 = len(t.probes)
    _build(t)
    for p in t.probes[n0:]:
        p.extra["surface"] = True


def _build(t: "P.Table") -> None:  # noqa: C901 - one table
    LIN, CSV = P.LIN, P.CSV

    def pred(pid, argv, expect, keys=(), cat="refusal", **kw):
        t.probes.append(P.Probe(f"predict:{pid}", ["predict", *argv], expect, tuple(keys),
                                "predict" if not keys else keys[0], cat, out_root=False, **kw))

    # ---------------------------------------------------------------- predict: documents
    for fmt in (1, 2):
        for table in ("t", "t01", "t10", "t1e0"):
            pred(f"format {fmt} labels {table}", [f"{PRED}/ok{fmt}.json", "--input", f"{PRED}/{table}.csv"], "run",
                 cat="wrong-result", extra={"judge": "predict", "acc": table})
        pred(f"format {fmt} text classes 00/01", [f"{PRED}/text{fmt}.json", "--input", f"{PRED}/t01.csv"], "run",
             cat="wrong-result", extra={"judge": "predict", "acc": "t01"})
        for name, _, _, key in BAD_DOCS:
            pred(f"format {fmt} {name}", [f"{PRED}/bad{fmt}-{name}.json", "--input", f"{PRED}/t.csv"], "refuse",
                 (key, key + ".*"),
                 cat="traceback" if name in ("no-model", "no-releases", "no-mechanism", "string-parameter",
                                             "string-shift", "null-preprocessing") else "wrong-result")
    for name in ("deep", "binary", "notjson", "list"):
        pred(f"{name} document", [f"{PRED}/{name}.json", "--input", f"{PRED}/t.csv"], "refuse", ("released.json",),
             cat="traceback", timeout=60)
    for name, key in (("header", "--input"), ("dup", "--input"), ("badlabel", "--input"), ("nocol", "--input"),
                      ("nan", "--input")):
        pred(f"{name} table", [f"{PRED}/ok1.json", "--input", f"{PRED}/{name}.csv"], "refuse", (key,),
             cat="wrong-result")
    pred("missing input", [f"{PRED}/ok1.json", "--input", f"{PRED}/none.csv"], "refuse", ("--input",))
    pred("input is a folder", [f"{PRED}/ok1.json", "--input", PRED], "refuse", ("--input",))
    pred("binary input", [f"{PRED}/ok1.json", "--input", f"{PRED}/binary.json"], "refuse", ("--input",))
    pred("staging folder", [f"{PRED}/r.incomplete-1-abcd", "--input", f"{PRED}/t.csv"], "refuse", ("RUN_DIR",),
         cat="wrong-result")
    pred("staging file", [f"{PRED}/r.incomplete-1-abcd/released.json", "--input", f"{PRED}/t.csv"], "refuse",
         ("RUN_DIR",), cat="wrong-result")
    pred("folder without released.json", [PRED, "--input", f"{PRED}/t.csv"], "refuse", ("RUN_DIR",))
    pred("missing source", [f"{PRED}/nope", "--input", f"{PRED}/t.csv"], "refuse", ("RUN_DIR",))
    pred("no source", ["--input", f"{PRED}/t.csv"], "refuse", ("RUN_DIR",))
    pred("no input", [f"{PRED}/ok1.json"], "refuse", ("--input",))
    pred("extra argument", [f"{PRED}/ok1.json", "--input", f"{PRED}/t.csv", "extra"], "refuse", ("extra",))
    pred("epsilon not a number", [f"{PRED}/ok1.json", "--input", f"{PRED}/t.csv", "--epsilon", "x"], "refuse",
         ("--epsilon",))
    pred("epsilon not released", [f"{PRED}/ok1.json", "--input", f"{PRED}/t.csv", "--epsilon", "3"], "refuse",
         ("--mechanism/--epsilon",))
    pred("unknown mechanism", [f"{PRED}/ok1.json", "--input", f"{PRED}/t.csv", "--mechanism", "nope"], "refuse",
         ("--mechanism/--epsilon",))
    pred("unknown option", [f"{PRED}/ok1.json", "--input", f"{PRED}/t.csv", "--bogus"], "usage",
         extra={"token": "--bogus"}, cat="usage")
    # ---------------------------------------------------------------- predict: output paths (data loss)
    for pid, target, extra in (("output is the input", f"{PRED}/t.csv", []),
                               ("output is the input, --overwrite", f"{PRED}/t.csv", ["--overwrite"]),
                               ("output is released.json, --overwrite", f"{PRED}/ok2.json", ["--overwrite"]),
                               ("output is a FIFO", "{fx}/dev/fifo", []),
                               ("output is a device", "{fx}/dev/null", []),
                               ("output is a folder", PRED, []),
                               ("output is a foreign file", f"{PRED}/mine.csv", []),
                               ("output is a foreign file, --overwrite", f"{PRED}/mine.csv", ["--overwrite"])):
        t.probes.append(P.Probe(f"predict:{pid}", [], "special", ("--output",), "--output", "data-loss",
                                special="predict-output", out_root=False, timeout=120,
                                extra={"target": target, "flags": extra, "needs": "device" if "device" in pid else None}))
    t.probes.append(P.Probe("predict:output inside a finished run", [], "special", ("--output",), "--output",
                            "data-loss", special="predict-output", out_root=False, timeout=120,
                            extra={"target": "{fx}/agsrun/o/ags/csv/r/p.csv", "flags": [], "needs": "surf-ags"}))
    t.probes.append(P.Probe("predict:labels 01 and 1.0 on a real ags run", [], "special", (), "predict",
                            "wrong-result", special="predict-labels", out_root=False, timeout=180,
                            extra={"needs": "surf-ags"}))
    # ---------------------------------------------------------------- rerun
    for name, key in (("noseed", "config.yaml"), ("noseed-rerecorded", "config.yaml.seed"),
                      ("nontest", "config.yaml"), ("command-list", "run.json.command|config.yaml.command"),
                      ("binary", "config.yaml"), ("binary-rerecorded", "config.yaml"), ("laughs", "config.yaml"),
                      ("format1", "config.yaml.config_format"), ("nojson", "RUN_DIR"), ("badjson", "run.json.command"),
                      ("deepjson", "run.json"), ("r.incomplete-1-abcd", "RUN_DIR"), ("r.replaced-1-abcd", "RUN_DIR")):
        t.probes.append(P.Probe(f"rerun:{name}", ["rerun", f"{RUNS}/{name}"], "refuse", tuple(key.split("|")),
                                "rerun", "wrong-result" if "noseed" in name or name == "nontest" else "traceback",
                                out_root=False, timeout=60, extra={"needs": "surf-runs", "cwd_clean": True}))
    t.probes.append(P.Probe("rerun:an input changed since the run", [], "special", (), "rerun", "wrong-result",
                            special="rerun-changed", out_root=False, timeout=240, extra={"needs": "surf-runs"}))
    t.probes.append(P.Probe("rerun:bad setting", ["rerun", f"{RUNS}/o/agtr/csv/orig", "train.steps=5"], "refuse",
                            ("rerun",), "rerun", "refusal", out_root=False, extra={"needs": "surf-runs"}))
    # ---------------------------------------------------------------- run folders
    for v in ("../..", "../../../escape", "/abs/path", "fake.incomplete-1-abcd", "x.replaced-1-ab", "a//b", "a/./b"):
        t.add("agtr", [f"run={v}"], "refuse", "run", category="data-loss", pid=f"agtr:run={v}")
    t.add("agtr", ["hydra.run.dir={out}/o/x.incomplete-1-ab"], "refuse", ("hydra.run.dir", "run"),
          category="data-loss")
    same = ["agtr", *LIN]
    abl = ["agtr", "dataset=linear", "+preset/ablation=linear_frequency", "dataset.n_train=200", "dataset.n_test=40",
           "train.steps=3", "staircase.k_max=4", "privacy.n_draws=5", "certificate.time_limit=20"]

    def seq(pid, steps, **kw):
        t.probes.append(P.Probe(f"runs:{pid}", [], "special", (), "run", "data-loss", special="sequence",
                                out_root=False, timeout=kw.pop("timeout", 600), extra={"steps": steps, **kw}))
    seq("overwrite=true on a folder of two runs", [(same + ["run=grp/a"], "run"), (same + ["run=grp/b", "seed=1"], "run"),
                                                   (same + ["run=grp", "overwrite=true"], "refuse")])
    seq("preset's pinned folder with overwrite=true", [(abl + ["certificate.name=crown"], "run"),
                                                       (abl + ["certificate.name=ibp"], "run"),
                                                       (same + ["run=ablation_frequency", "overwrite=true"], "refuse")])
    seq("run inside a finished run", [(same + ["run=grp/a"], "run"), (same + ["run=grp/a/nested"], "refuse")])
    seq("hydra.run.dir inside a finished run", [(same + ["run=r"], "run"),
                                                (same + ["hydra.run.dir={out}/o/agtr/linear/r/sub"], "refuse")])
    seq("hydra.sweep.dir is a finished run", [(same + ["run=r"], "run"),
                                              (["agtr", "-m", *LIN, "hydra.sweep.dir={out}/o/agtr/linear/r",
                                                "train.clip=0.5,1.0"], "refuse")])
    seq("overwrite=true on a folder that is not a run", [("mkdir:{out}/o/agtr/linear/mine", "setup"),
                                                         (same + ["run=mine", "overwrite=true"], "refuse")])
    seq("overwrite=true replaces exactly one run", [(same + ["run=one"], "run"),
                                                    (same + ["run=one", "seed=3", "overwrite=true"], "run")],
        replaced=["agtr/linear/one"])
    # ---------------------------------------------------------------- sweeps
    good, nope = "{fx}/csv/good.csv", "{fx}/csv/nope.csv"
    t.add("agtr", ["-m", f"dataset.path={good},{nope}"], "refuse", "dataset.path", base=CSV, category="data-loss",
          pid="sweep:dataset.path=good.csv,nope.csv")
    t.add("agtr", ["-m", f"dataset.path={good},{{fx}}/csv/header.csv"], "refuse", "dataset.path", base=CSV,
          category="data-loss", pid="sweep:dataset.path=good.csv,header.csv")
    t.add("agtr", ["-m", "dataset.target=y,nocolumn"], "refuse", "dataset.target", base=CSV, category="data-loss",
          pid="sweep:dataset.target=y,nocolumn")
    t.add("agtr", ["-m", "train.clip=interval(0,1)"], "refuse", "train.clip", category="traceback")
    t.add("agtr", ["-m", "seed=range(0,20000)"], "refuse", ("-m", "seed"), category="refusal")
    t.run("agtr", ["-m", "dataset=glob(lin*)"], category="traceback", pid="sweep:dataset=glob(lin*)")
    t.add("agtr", ["train.clip=0.5,1.0"], "refuse", "train.clip", category="refusal", pid="agtr:sweep value without -m")
    t.add("agtr", ["-m", "train.clip=0.5,1.0", "--cfg", "job"], "refuse", ("-m", "--cfg"), category="usage")
    t.probes.append(P.Probe("sweep:overrides on both sides of -m", ["agtr", *LIN[:3], "-m", *LIN[3:],
                                                                     "privacy.releases=[cauchy]", "train.clip=0.5,1.0"],
                            "run", (), "-m", "usage", runs=2))
    # ---------------------------------------------------------------- settings edges
    DPA = ["dataset=linear", "dataset.n_train=200", "dataset.n_test=40", "train.steps=3", "staircase.k_max=4",
           "privacy.n_draws=2000", "privacy.epsilons=[1]"]
    t.add("dpaudit", ["privacy.n_draws=1"], "refuse", "privacy.n_draws", base=DPA, category="traceback")
    t.add("dpaudit", ["privacy.n_draws=0"], "refuse", "privacy.n_draws", base=DPA, category="refusal")
    t.add("dpaudit", ["privacy.epsilons=[1e6]"], "refuse", "privacy.epsilons", base=DPA, category="traceback")
    t.add("dpaudit", ["privacy.epsilons=[750]"], "refuse", "privacy.epsilons", base=DPA, category="traceback")
    t.either("dpaudit", ["privacy.epsilons=[700]"], "privacy.epsilons", base=DPA, category="traceback", timeout=240,
             files=("results",))
    t.add("ags", ["privacy.epsilons=[1e6]", "ags.composition=pld", "ags.releases_n=2"], "either", "privacy.epsilons",
          category="traceback", timeout=300)
    t.add("ags", ["privacy.epsilons=[1e6]", "ags.composition=optimal", "ags.releases_n=2"], "either",
          "privacy.epsilons", category="traceback", timeout=300)
    t.add("agtr", ["privacy.epsilons=[5e-324]"], "refuse", "privacy.epsilons", category="refusal")
    t.add("ags", ["privacy.epsilons=[5e-324]"], "refuse", "privacy.epsilons", category="refusal")
    t.add("feasibility", ["feasibility.confidence.values=[1e-300,0.5]"], "refuse", "feasibility.confidence.values",
          category="wrong-result")
    t.add("feasibility", ["feasibility.confidence.start=1e-300"], "refuse", "feasibility.confidence.start",
          category="wrong-result")
    t.add("agtr", ["train.lr=${nope}"], "refuse", "train.lr", category="refusal")
    t.add("agtr", ["+preset=nope"], "refuse", "preset", category="refusal")
    t.add("agtr", ["dataset=nope"], "refuse", "dataset", category="refusal", pid="agtr:dataset=nope (surfaces)")
    # ---------------------------------------------------------------- Hydra's flags
    t.add("agtr", ["--cfg", "job", "train.steps=4"], "info", out_root=False, category="usage",
          pid="agtr:--cfg job then an override")
    t.add("agtr", ["--config-dir", "{out}/nope"], "refuse", "--config-dir", category="usage")
    t.add("agtr", ["--info", "bogus"], "refuse", "--info", category="usage")
    t.add("agtr", ["--package"], "refuse", "--package", category="usage")
    t.add("agtr", ["--config-name", "x"], "refuse", "--config-name", category="usage")
    # ---------------------------------------------------------------- figures experiment files
    for name, (_, field) in EXPERIMENTS.items():
        t.probes.append(P.Probe(f"figures:experiment file {name}", ["figures", "profile=quick", "out_root={out}/o"],
                                "refuse", ("a.yaml",), "figures", "traceback", out_root=False,
                                env={"CERTDP_EXPERIMENTS_DIR": f"{{fx}}/exp/{name}"},
                                must_say=re.escape(f"a.yaml:{field}") if field else None))
    t.probes.append(P.Probe("figures:--list with a bad experiment file", ["figures", "--list"], "refuse", ("a.yaml",),
                            "figures", "traceback", out_root=False,
                            env={"CERTDP_EXPERIMENTS_DIR": "{fx}/exp/run-scalar"}))
    # ---------------------------------------------------------------- signals and streams
    slow = ["agtr", *LIN]
    for sig in ("INT", "TERM"):
        t.probes.append(P.Probe(f"signal:SIG{sig} during start-up", [], "special", (), "signal", "signal",
                                special="startup-signal", out_root=False, timeout=120,
                                extra={"argv": slow, "sig": sig}))
        t.probes.append(P.Probe(f"signal:SIG{sig} during start-up of predict", [], "special", (), "signal", "signal",
                                special="startup-signal", out_root=False, timeout=120,
                                extra={"argv": ["predict", f"{PRED}/ok1.json", "--input", f"{PRED}/t.csv"], "sig": sig}))
    for pid, argv, mode, want in (("agtr > /dev/full", slow, "full", 0), ("agtr | head -c 1", slow, "head", 0),
                                  ("agtr -m | head -c 1", ["agtr", "-m", *LIN, "train.clip=0.5,1.0"], "head", 0),
                                  ("predict > /dev/full", ["predict", f"{PRED}/ok1.json", "--input", f"{PRED}/t.csv"],
                                   "full", 1),
                                  ("list > /dev/full", ["list"], "full", 1),
                                  ("agtr --cfg job > /dev/full", ["agtr", "--cfg", "job"], "full", 1),
                                  ("--help > /dev/full", ["--help"], "full", 1)):
        t.probes.append(P.Probe(f"stream:{pid}", [], "special", (), "stream", "stream", special="stream",
                                out_root=False, timeout=240, extra={"argv": argv, "mode": mode, "want": want}))


# --------------------------------------------------------------------------------------------
# judging predict and the special probes
def judge_predict(p, rc, so, se, out: Path) -> tuple[str, str]:
    """A valid predict: exit 0, the predictions CSV on stdout, and each release's accuracy the
    true one (computed when the fixture was written)."""
    want = P.CTX.have.get("pred_acc", {}).get(p.extra.get("acc"))
    if rc != 0:
        return "wrong-refusal", f"exit {rc}"
    lines = [x for x in so.splitlines() if x.strip()]
    if not lines or lines[0] != "mechanism,epsilon,row,prediction" or len(lines) < 2:
        return "exit0-bad-output", "no predictions CSV on stdout"
    got = [float(m) for m in re.findall(r"accuracy ([0-9.]+)", se)]
    if want is not None and (not got or any(abs(g - want) > 6e-5 for g in got)):
        return "silent-replacement", f"accuracy {got} (true {want:.4f})"
    return "ran-ok", ""


def _line(se: str) -> tuple[list[str], dict]:
    lines = P.nonempty_lines(se)
    return lines, {"first": (lines or [""])[0][:300], "last": (lines or [""])[-1][:300]}


def _refusal(rc, se, keys=()) -> tuple[str, str] | None:
    """None when ``se`` is one refusal line naming one of ``keys`` with an allowed part."""
    lines = P.nonempty_lines(se)
    if P.TRACEBACK.search(se):
        return "traceback", ""
    if rc != 2 or len(lines) != 1 or not P.ERRLINE.match(lines[0]):
        return "unclean-refusal", f"exit {rc}, {len(lines)} stderr line(s)"
    if keys and not P.key_matches(P.ERRLINE.match(lines[0]).group(1), keys):
        return "wrong-key", f"named {P.ERRLINE.match(lines[0]).group(1)}"
    if not re.search(r"; allowed\b[^:;]*: \S", lines[0]):
        return "no-allowed-part", ""
    return None


def _state(path: Path):
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(st.st_mode):
        return ("dir", P._digest(path))
    if stat.S_ISREG(st.st_mode):
        return ("file", path.read_bytes())
    return ("node", stat.S_IFMT(st.st_mode), st.st_rdev)


def sp_predict_output(p, ctx, out: Path) -> dict:
    if p.extra.get("needs") and ctx.have.get(p.extra["needs"]) is not True:
        return {"behaviour": "skipped", "note": str(ctx.have.get(p.extra["needs"])), "named": "", "first": "", "last": ""}
    target = Path(P.fill(p.extra["target"], ctx, out))
    argv = ["predict", str(ctx.fx / "pred" / "ok2.json"), "--input", str(ctx.fx / "pred" / "t.csv"),
            "--output", str(target), *p.extra["flags"]]
    if "agsrun" in str(target):
        argv[1] = str(ctx.fx / "agsrun" / "o" / "ags" / "csv" / "r")
    watched = [target, ctx.fx / "pred" / "t.csv", ctx.fx / "pred" / "ok2.json"]
    if "agsrun" in str(target):
        watched.append(target.parent)
    before = [_state(w) for w in watched]
    rc, so, se, to = P.finish(P.launch(ctx, argv, out, P.base_env(ctx, out)), p.timeout, out)
    lines, info = _line(se)
    info.update(argv=argv, rc=rc, named=(P.ERRLINE.match(info["first"]).group(1) if P.ERRLINE.match(info["first"]) else ""))
    changed = [str(w) for w, b in zip(watched, before) if _state(w) != b]
    if to:
        return {**info, "behaviour": "timeout", "note": ""}
    if changed:
        return {**info, "behaviour": "data-loss", "note": f"exit {rc}; changed {', '.join(changed)}"}
    bad = _refusal(rc, se, ("--output",))
    return {**info, "behaviour": bad[0] if bad else "refused-ok", "note": bad[1] if bad else ""}


def sp_predict_labels(p, ctx, out: Path) -> dict:
    if ctx.have.get("surf-ags") is not True:
        return {"behaviour": "skipped", "note": str(ctx.have.get("surf-ags")), "named": "", "first": "", "last": ""}
    run = ctx.fx / "agsrun" / "o" / "ags" / "csv" / "r"
    accs, info = {}, {"named": "", "first": "", "last": ""}
    for name in ("t", "t01", "t10"):
        argv = ["predict", str(run), "--input", str(ctx.fx / "agsrun" / f"{name}.csv")]
        rc, so, se, to = P.finish(P.launch(ctx, argv, out, P.base_env(ctx, out)), p.timeout, out)
        info.update(_line(se)[1], argv=argv, rc=rc)
        if to or rc != 0 or P.TRACEBACK.search(se):
            return {**info, "behaviour": "timeout" if to else "traceback" if P.TRACEBACK.search(se) else "wrong-refusal",
                    "note": f"{name}: exit {rc}"}
        accs[name] = re.findall(r"accuracy ([0-9.]+)", se)
    if not accs["t"] or any(accs[k] != accs["t"] for k in accs):
        return {**info, "behaviour": "silent-replacement", "note": f"accuracies {accs}"}
    return {**info, "behaviour": "ran-ok", "note": f"accuracy {accs['t']} whatever way the labels are written"}


def sp_sequence(p, ctx, out: Path) -> dict:
    """Steps of runs and refusals; after each refusal every finished run is unchanged."""
    root = out / "o"
    info = {"named": "", "first": "", "last": "", "rc": None}
    finished: dict = {}
    for i, (argv, want) in enumerate(p.extra["steps"]):
        if want == "setup":
            d = Path(P.fill(argv.split(":", 1)[1], ctx, out))
            d.mkdir(parents=True, exist_ok=True)
            (d / "notes.txt").write_text("the user's own file\n")
            finished[d] = P._digest(d)
            continue
        av = [P.fill(a, ctx, out) for a in argv] + [f"out_root={root}"]
        step = out / f"s{i}"
        step.mkdir(parents=True, exist_ok=True)
        rc, so, se, to = P.finish(P.launch(ctx, av, step, P.base_env(ctx, step)), p.timeout, step)
        info.update(_line(se)[1], argv=av, rc=rc)
        if to:
            return {**info, "behaviour": "timeout", "note": f"step {i}"}
        lost = [str(d) for d, dig in finished.items()
                if not any(str(d).endswith(r) for r in p.extra.get("replaced", ())) and
                (not d.exists() or P._digest(d) != dig)]
        if lost:
            return {**info, "behaviour": "data-loss", "note": f"step {i} (exit {rc}) changed {', '.join(lost[:2])}"}
        if want == "run":
            if rc != 0:
                return {**info, "behaviour": "inconclusive" if i < len(p.extra["steps"]) - 1 else "wrong-refusal",
                        "note": f"step {i}: exit {rc}: {info['last']}"}
        else:
            bad = _refusal(rc, se)
            if bad:
                return {**info, "behaviour": bad[0], "note": f"step {i}: {bad[1]}"}
            m = P.ERRLINE.match(info["first"])
            info["named"] = m.group(1) if m else ""
        nested = [d for d in P.run_dirs(root) if any((a / "run.json").exists() for a in d.parents)]
        if nested:
            return {**info, "behaviour": "data-loss", "note": f"a run inside another run: {nested[0]}"}
        finished.update({d: P._digest(d) for d in P.run_dirs(root)})
    return {**info, "behaviour": "refused-ok" if p.extra["steps"][-1][1] == "refuse" else "ran-ok", "note": ""}


def sp_rerun_changed(p, ctx, out: Path) -> dict:
    if ctx.have.get("surf-runs") is not True:
        return {"behaviour": "skipped", "note": str(ctx.have.get("surf-runs")), "named": "", "first": "", "last": ""}
    run = ctx.fx / "runs" / "o" / "agtr" / "csv" / "changed"
    before = P._digest(run)
    argv = ["rerun", str(run), f"out_root={out / 'o'}"]
    rc, so, se, to = P.finish(P.launch(ctx, argv, out, P.base_env(ctx, out)), p.timeout, out)
    info = {**_line(se)[1], "argv": argv, "rc": rc, "named": ""}
    if to:
        return {**info, "behaviour": "timeout", "note": ""}
    if P.TRACEBACK.search(se):
        return {**info, "behaviour": "traceback", "note": ""}
    if P._digest(run) != before:
        return {**info, "behaviour": "data-loss", "note": "the original run changed"}
    if rc != 0:
        return {**info, "behaviour": "wrong-refusal", "note": f"exit {rc}"}
    if "dataset.path" not in se or "changed since the run" not in se:
        return {**info, "behaviour": "silent-replacement", "note": "no warning about the changed input"}
    if len(P.run_dirs(out / "o")) != 1 or (out / "outputs").exists():
        return {**info, "behaviour": "exit0-bad-output", "note": "no new run folder (or outputs/ in the cwd)"}
    return {**info, "behaviour": "ran-ok", "note": "warned and reran"}


def sp_startup_signal(p, ctx, out: Path) -> dict:
    argv = [P.fill(a, ctx, out) for a in p.extra["argv"]] + ([f"out_root={out / 'o'}"] if p.extra["argv"][0] != "predict"
                                                             else [])
    sig = signal.SIGTERM if p.extra["sig"] == "TERM" else signal.SIGINT
    proc = P.launch(ctx, argv, out, P.base_env(ctx, out))
    time.sleep(0.7)                          # interpreter up, certdp importing (seconds of it)
    info = {"argv": argv, "named": ""}
    if proc.poll() is not None:
        rc, so, se, _ = P.finish(proc, 30, out)
        return {**info, "rc": rc, "behaviour": "inconclusive", "first": "", "last": "", "note": "ended before the signal"}
    proc.send_signal(sig)
    rc, so, se, to = P.finish(proc, 60, out)
    lines, more = _line(se)
    info.update(more, rc=rc)
    if to:
        return {**info, "behaviour": "timeout", "note": ""}
    if P.TRACEBACK.search(se) or "Traceback" in se:
        return {**info, "behaviour": "traceback", "note": f"exit {rc}"}
    if P.csv_files(out / "o") if (out / "o").exists() else []:
        return {**info, "behaviour": "data-loss", "note": "CSVs left"}
    if rc != 128 + sig or len(lines) != 1 or "interrupted" not in lines[0]:
        return {**info, "behaviour": "signal-mishandled", "note": f"exit {rc}, {len(lines)} line(s)"}
    return {**info, "behaviour": "ran-ok", "note": f"exit {rc}, one line"}


def sp_stream(p, ctx, out: Path) -> dict:
    argv = [P.fill(a, ctx, out) for a in p.extra["argv"]]
    if argv[0] in ("agtr",) and "--cfg" not in argv:
        argv.append(f"out_root={out / 'o'}")
    env = P.base_env(ctx, out)
    info = {"argv": argv, "named": ""}
    if p.extra["mode"] == "full":
        with open("/dev/full", "w") as full:
            proc = subprocess.Popen([ctx.python, "-m", "certdp.cli", *argv], cwd=str(out), env=env, stdout=full,
                                    stderr=subprocess.PIPE, text=True, start_new_session=True)
            try:
                _, se = proc.communicate(timeout=p.timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                return {**info, "rc": None, "behaviour": "timeout", "first": "", "last": "", "note": ""}
    else:
        proc = subprocess.Popen([ctx.python, "-m", "certdp.cli", *argv], cwd=str(out), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        proc.stdout.read(1)              # | head -c 1
        proc.stdout.close()
        try:
            se = proc.stderr.read().decode(errors="replace")
            proc.wait(timeout=p.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            return {**info, "rc": None, "behaviour": "timeout", "first": "", "last": "", "note": ""}
    rc = proc.returncode
    lines, more = _line(se)
    info.update(more, rc=rc)
    (out / "stderr.txt").write_text(se)
    if P.TRACEBACK.search(se) or "Logging error" in se or "Exception ignored" in se:
        return {**info, "behaviour": "traceback", "note": f"exit {rc}"}
    runs = P.run_dirs(out / "o") if (out / "o").exists() else []
    complete = all((d / "run.json").exists() for d in runs)
    if rc != p.extra["want"]:
        return {**info, "behaviour": "misleading", "note": f"exit {rc} (want {p.extra['want']})"}
    if len(lines) > 1:
        return {**info, "behaviour": "misleading", "note": f"{len(lines)} stderr lines"}
    if runs and not complete:
        return {**info, "behaviour": "data-loss", "note": "a run folder without run.json"}
    if lines and "nothing was written" in lines[0] and runs:
        return {**info, "behaviour": "misleading", "note": "says nothing was written, but the run is complete"}
    if lines and runs and "complete" not in lines[0]:
        return {**info, "behaviour": "misleading", "note": "does not say the run is complete"}
    return {**info, "behaviour": "ran-ok", "note": f"exit {rc}, {len(lines)} line(s)"}


SPECIALS = {"predict-output": sp_predict_output, "predict-labels": sp_predict_labels, "sequence": sp_sequence,
            "rerun-changed": sp_rerun_changed, "startup-signal": sp_startup_signal, "stream": sp_stream}
NEEDS = {"surf-runs", "surf-ags", "device"}
