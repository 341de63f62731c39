"""The special probes of runs as a whole (:mod:`tools.prober.specials.runs`): same-second pairs,
reruns into a fixed name, signals, ``certdp rerun``."""

from __future__ import annotations

from tools.prober.bases import BLOBS, LIN
from tools.prober.model import Probe, Table


def add(t: Table) -> None:
    # ---------------------------------------------------------------- runs never collide
    def special(kind, pid, timeout=240, **extra):
        t.probes.append(Probe(pid, [], "special", (), kind.replace("figures-", ""), kind, special=kind,
                              timeout=timeout, out_root=False, extra=extra))
    same = ["agtr", *LIN]
    for i in range(3):
        special("concurrent", f"concurrent:agtr identical pair #{i + 1}", argvs=[same, same])
    special("concurrent", "concurrent:agtr pair seed=1 / seed=2", argvs=[same + ["seed=1"], same + ["seed=2"]])
    special("concurrent", "concurrent:feasibility identical pair", argvs=[["feasibility"], ["feasibility"]])
    special("concurrent", "concurrent:ags identical pair", argvs=[["ags", *BLOBS], ["ags", *BLOBS]])
    sweep = ["agtr", "-m", *LIN, "privacy.releases=[cauchy]", "train.clip=0.5,1.0"]
    special("concurrent", "concurrent:agtr sweep pair (-m)", argvs=[sweep, sweep], runs_each=2)
    special("overwrite", "overwrite:run=fixed rerun with another seed",
            first=same + ["run=fixed", "seed=1"], second=same + ["run=fixed", "seed=2"])
    abl = ["agtr", "dataset=linear", "+preset/ablation=linear_frequency", "certificate.name=crown",
           "dataset.n_train=200", "dataset.n_test=40", "train.steps=3", "staircase.k_max=4", "privacy.n_draws=5"]
    special("overwrite", "overwrite:preset fixed run (linear_frequency) rerun with another seed",
            first=abl + ["seed=1"], second=abl + ["seed=2"])
    special("overwrite", "overwrite:overwrite=true replaces a finished run",
            first=same + ["run=fixed", "seed=1"], second=same + ["run=fixed", "seed=2", "overwrite=true"],
            allow=True)
    # minutes of small steps: the signal lands mid-computation, and Python checks for it often
    long = ["agtr", "dataset=linear", "dataset.n_train=5000", "dataset.n_test=100", "train.steps=1000",
            "staircase.k_max=16", "privacy.n_draws=20"]
    special("signal", "signal:SIGTERM during agtr", argv=long, sig="TERM")
    special("signal", "signal:SIGINT during agtr", argv=long, sig="INT")
    special("figures-signal", "signal:SIGTERM to figures leaves no orphan",
            argv=["figures", "cond_table", "profile=quick"])
    special("rerun", "rerun:finished agtr run is byte-identical", first=same + ["run=orig"])
    for name, where in (("missing folder", "{out}/nope"), ("folder without config.yaml", "{fx}/csv/dir"),
                        ("regular file", "{fx}/afile")):
        t.probes.append(Probe(f"rerun:{name}", ["rerun", where], "refuse", ("RUN_DIR",), "rerun", "bad-run-dir",
                              out_root=False, extra={"needs": "rerun"}))
