"""The probes of the surfaces around the runs (issue 22): ``certdp predict`` on untrusted
documents, tables and output paths, ``certdp rerun`` on edited records, run folders that must
never be replaced or nested wrongly, sweeps checked as a whole, the settings edges of dpaudit,
feasibility and the accountants, Hydra's flags, experiment files of ``certdp figures``, signals
during start-up, and closed or failing output streams.

Each probe has the issue's category (``Probe.category``): ``data-loss``, ``traceback``,
``wrong-result``, ``refusal`` (a refusal must name the key and say what is allowed),
``usage`` (one line), ``signal``, ``stream``.  ``--surfaces`` selects them (``extra["surface"]``).
"""

from __future__ import annotations

import re

from tools.prober.bases import CSV, LIN
from tools.prober.fixtures_surfaces import BAD_DOCS, EXPERIMENTS, PRED, RUNS
from tools.prober.model import Probe, Table


def build(t: Table) -> None:
    """Add the surfaces' probes to ``t`` (each marked ``extra["surface"]``: ``--surfaces`` selects them)."""
    n0 = len(t.probes)
    _build(t)
    for p in t.probes[n0:]:
        p.extra["surface"] = True


def _pred(t: Table, pid, argv, expect, keys=(), cat="refusal", **kw) -> None:
    t.probes.append(Probe(f"predict:{pid}", ["predict", *argv], expect, tuple(keys),
                          "predict" if not keys else keys[0], cat, out_root=False, **kw))


def _build(t: Table) -> None:
    _predict_documents(t)
    _predict_output_paths(t)
    _rerun(t)
    _run_folders(t)
    _sweeps(t)
    _settings_edges(t)
    _hydra_flags(t)
    _figures_experiment_files(t)
    _signals_and_streams(t)


def _predict_documents(t: Table) -> None:
    """Predict: documents."""
    for fmt in (1, 2):
        for table in ("t", "t01", "t10", "t1e0"):
            _pred(t, f"format {fmt} labels {table}", [f"{PRED}/ok{fmt}.json", "--input", f"{PRED}/{table}.csv"], "run",
                  cat="wrong-result", extra={"judge": "predict", "acc": table})
        _pred(t, f"format {fmt} text classes 00/01", [f"{PRED}/text{fmt}.json", "--input", f"{PRED}/t01.csv"], "run",
              cat="wrong-result", extra={"judge": "predict", "acc": "t01"})
        for name, _, _, key in BAD_DOCS:
            _pred(t, f"format {fmt} {name}", [f"{PRED}/bad{fmt}-{name}.json", "--input", f"{PRED}/t.csv"], "refuse",
                  (key, key + ".*"),
                  cat="traceback" if name in ("no-model", "no-releases", "no-mechanism", "string-parameter",
                                              "string-shift", "null-preprocessing") else "wrong-result")
    for name in ("deep", "binary", "notjson", "list"):
        _pred(t, f"{name} document", [f"{PRED}/{name}.json", "--input", f"{PRED}/t.csv"], "refuse", ("released.json",),
              cat="traceback", timeout=60)
    for name, key in (("header", "--input"), ("dup", "--input"), ("badlabel", "--input"), ("nocol", "--input"),
                      ("nan", "--input")):
        _pred(t, f"{name} table", [f"{PRED}/ok1.json", "--input", f"{PRED}/{name}.csv"], "refuse", (key,),
              cat="wrong-result")
    _pred(t, "missing input", [f"{PRED}/ok1.json", "--input", f"{PRED}/none.csv"], "refuse", ("--input",))
    _pred(t, "input is a folder", [f"{PRED}/ok1.json", "--input", PRED], "refuse", ("--input",))
    _pred(t, "binary input", [f"{PRED}/ok1.json", "--input", f"{PRED}/binary.json"], "refuse", ("--input",))
    _pred(t, "staging folder", [f"{PRED}/r.incomplete-1-abcd", "--input", f"{PRED}/t.csv"], "refuse", ("RUN_DIR",),
          cat="wrong-result")
    _pred(t, "staging file", [f"{PRED}/r.incomplete-1-abcd/released.json", "--input", f"{PRED}/t.csv"], "refuse",
          ("RUN_DIR",), cat="wrong-result")
    _pred(t, "folder without released.json", [PRED, "--input", f"{PRED}/t.csv"], "refuse", ("RUN_DIR",))
    _pred(t, "missing source", [f"{PRED}/nope", "--input", f"{PRED}/t.csv"], "refuse", ("RUN_DIR",))
    _pred(t, "no source", ["--input", f"{PRED}/t.csv"], "refuse", ("RUN_DIR",))
    _pred(t, "no input", [f"{PRED}/ok1.json"], "refuse", ("--input",))
    _pred(t, "extra argument", [f"{PRED}/ok1.json", "--input", f"{PRED}/t.csv", "extra"], "refuse", ("extra",))
    _pred(t, "epsilon not a number", [f"{PRED}/ok1.json", "--input", f"{PRED}/t.csv", "--epsilon", "x"], "refuse",
          ("--epsilon",))
    _pred(t, "epsilon not released", [f"{PRED}/ok1.json", "--input", f"{PRED}/t.csv", "--epsilon", "3"], "refuse",
          ("--mechanism/--epsilon",))
    _pred(t, "unknown mechanism", [f"{PRED}/ok1.json", "--input", f"{PRED}/t.csv", "--mechanism", "nope"], "refuse",
          ("--mechanism/--epsilon",))
    _pred(t, "unknown option", [f"{PRED}/ok1.json", "--input", f"{PRED}/t.csv", "--bogus"], "usage",
          extra={"token": "--bogus"}, cat="usage")


def _predict_output_paths(t: Table) -> None:
    """Predict: output paths (data loss)."""
    for pid, target, extra in (("output is the input", f"{PRED}/t.csv", []),
                               ("output is the input, --overwrite", f"{PRED}/t.csv", ["--overwrite"]),
                               ("output is released.json, --overwrite", f"{PRED}/ok2.json", ["--overwrite"]),
                               ("output is a FIFO", "{fx}/dev/fifo", []),
                               ("output is a device", "{fx}/dev/null", []),
                               ("output is a folder", PRED, []),
                               ("output is a foreign file", f"{PRED}/mine.csv", []),
                               ("output is a foreign file, --overwrite", f"{PRED}/mine.csv", ["--overwrite"])):
        t.probes.append(Probe(f"predict:{pid}", [], "special", ("--output",), "--output", "data-loss",
                              special="predict-output", out_root=False, timeout=120,
                              extra={"target": target, "flags": extra, "needs": "device" if "device" in pid else None}))
    t.probes.append(Probe("predict:output inside a finished run", [], "special", ("--output",), "--output",
                          "data-loss", special="predict-output", out_root=False, timeout=120,
                          extra={"target": "{fx}/agsrun/o/ags/csv/r/p.csv", "flags": [], "needs": "surf-ags"}))
    t.probes.append(Probe("predict:labels 01 and 1.0 on a real ags run", [], "special", (), "predict",
                          "wrong-result", special="predict-labels", out_root=False, timeout=180,
                          extra={"needs": "surf-ags"}))


def _rerun(t: Table) -> None:
    """Rerun."""
    for name, key in (("noseed", "config.yaml"), ("noseed-rerecorded", "config.yaml.seed"),
                      ("nontest", "config.yaml"), ("command-list", "run.json.command|config.yaml.command"),
                      ("binary", "config.yaml"), ("binary-rerecorded", "config.yaml"), ("laughs", "config.yaml"),
                      ("format1", "config.yaml.config_format"), ("nojson", "RUN_DIR"), ("badjson", "run.json.command"),
                      ("deepjson", "run.json"), ("r.incomplete-1-abcd", "RUN_DIR"), ("r.replaced-1-abcd", "RUN_DIR")):
        t.probes.append(Probe(f"rerun:{name}", ["rerun", f"{RUNS}/{name}"], "refuse", tuple(key.split("|")),
                              "rerun", "wrong-result" if "noseed" in name or name == "nontest" else "traceback",
                              out_root=False, timeout=60, extra={"needs": "surf-runs", "cwd_clean": True}))
    t.probes.append(Probe("rerun:an input changed since the run", [], "special", (), "rerun", "wrong-result",
                          special="rerun-changed", out_root=False, timeout=240, extra={"needs": "surf-runs"}))
    t.probes.append(Probe("rerun:bad setting", ["rerun", f"{RUNS}/o/agtr/csv/orig", "train.steps=5"], "refuse",
                          ("rerun",), "rerun", "refusal", out_root=False, extra={"needs": "surf-runs"}))


def _run_folders(t: Table) -> None:
    """Run folders."""
    for v in ("../..", "../../../escape", "/abs/path", "fake.incomplete-1-abcd", "x.replaced-1-ab", "a//b", "a/./b"):
        t.add("agtr", [f"run={v}"], "refuse", "run", category="data-loss", pid=f"agtr:run={v}")
    t.add("agtr", ["hydra.run.dir={out}/o/x.incomplete-1-ab"], "refuse", ("hydra.run.dir", "run"),
          category="data-loss")
    same = ["agtr", *LIN]
    abl = ["agtr", "dataset=linear", "+preset/ablation=linear_frequency", "dataset.n_train=200", "dataset.n_test=40",
           "train.steps=3", "staircase.k_max=4", "privacy.n_draws=5"]
    # (no certificate.time_limit: the steps name crown and ibp, which refuse a MILP option)

    def seq(pid, steps, **kw):
        t.probes.append(Probe(f"runs:{pid}", [], "special", (), "run", "data-loss", special="sequence",
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


def _sweeps(t: Table) -> None:
    """Sweeps."""
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
    t.probes.append(Probe("sweep:overrides on both sides of -m", ["agtr", *LIN[:3], "-m", *LIN[3:],
                                                                  "privacy.releases=[cauchy]", "train.clip=0.5,1.0"],
                          "run", (), "-m", "usage", runs=2))


def _settings_edges(t: Table) -> None:
    """Settings edges."""
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


def _hydra_flags(t: Table) -> None:
    """Hydra's flags."""
    t.add("agtr", ["--cfg", "job", "train.steps=4"], "info", out_root=False, category="usage",
          pid="agtr:--cfg job then an override")
    t.add("agtr", ["--config-dir", "{out}/nope"], "refuse", "--config-dir", category="usage")
    t.add("agtr", ["--info", "bogus"], "refuse", "--info", category="usage")
    t.add("agtr", ["--package"], "refuse", "--package", category="usage")
    t.add("agtr", ["--config-name", "x"], "refuse", "--config-name", category="usage")


def _figures_experiment_files(t: Table) -> None:
    """Figures experiment files."""
    for name, (_, field) in EXPERIMENTS.items():
        t.probes.append(Probe(f"figures:experiment file {name}", ["figures", "profile=quick", "out_root={out}/o"],
                              "refuse", ("a.yaml",), "figures", "traceback", out_root=False,
                              env={"CERTDP_EXPERIMENTS_DIR": f"{{fx}}/exp/{name}"},
                              must_say=re.escape(f"a.yaml:{field}") if field else None))
    t.probes.append(Probe("figures:--list with a bad experiment file", ["figures", "--list"], "refuse", ("a.yaml",),
                          "figures", "traceback", out_root=False,
                          env={"CERTDP_EXPERIMENTS_DIR": "{fx}/exp/run-scalar"}))


def _signals_and_streams(t: Table) -> None:
    """Signals and streams."""
    slow = ["agtr", *LIN]
    for sig in ("INT", "TERM"):
        t.probes.append(Probe(f"signal:SIG{sig} during start-up", [], "special", (), "signal", "signal",
                              special="startup-signal", out_root=False, timeout=120,
                              extra={"argv": slow, "sig": sig}))
        t.probes.append(Probe(f"signal:SIG{sig} during start-up of predict", [], "special", (), "signal", "signal",
                              special="startup-signal", out_root=False, timeout=120,
                              extra={"argv": ["predict", f"{PRED}/ok1.json", "--input", f"{PRED}/t.csv"], "sig": sig}))
    for pid, argv, mode, want in (("agtr > /dev/full", slow, "full", 0), ("agtr | head -c 1", slow, "head", 0),
                                  ("agtr -m | head -c 1", ["agtr", "-m", *LIN, "train.clip=0.5,1.0"], "head", 0),
                                  ("predict > /dev/full", ["predict", f"{PRED}/ok1.json", "--input", f"{PRED}/t.csv"],
                                   "full", 1),
                                  ("list > /dev/full", ["list"], "full", 1),
                                  ("agtr --cfg job > /dev/full", ["agtr", "--cfg", "job"], "full", 1),
                                  ("--help > /dev/full", ["--help"], "full", 1)):
        t.probes.append(Probe(f"stream:{pid}", [], "special", (), "stream", "stream", special="stream",
                              out_root=False, timeout=240, extra={"argv": argv, "mode": mode, "want": want}))
