"""The surfaces' fixtures (:mod:`tools.prober.catalogue.surfaces`): hand-made ``released.json``
documents and tables for ``certdp predict``, bad experiment files of ``certdp figures``, FIFO and
device nodes, and (only when a selected probe needs them) finished runs to rerun and predict
from."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

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


# what the surfaces' probes may need (built only when a selected probe does)
NEEDS = {"surf-runs", "surf-ags", "device"}
