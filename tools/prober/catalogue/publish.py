"""Issue 28, items 3, 4, 10, 11: what is published and what is said about it.

* dpaudit runs the shipped code and flags planted bugs (:mod:`tools.prober.specials.audits`
  plants them through a launcher that patches certdp in the process, never the tree): the
  published noise halved, every release's noise scale halved, a refusal that depends on one
  record; the shipped releases stay below their claim.
* ``privacy.reproducible_release=true`` writes a ``publish/README.txt`` that does not contradict
  itself.
* The machine's timing rates are sane and ``certdp figures --list`` says something while it times.
"""

from __future__ import annotations

from tools.prober.model import Table

DPA_LINEAR = ["dpaudit", "dataset=linear", "dataset.n_train=200", "dataset.n_test=40", "train.steps=3",
              "staircase.k_max=4", "privacy.n_draws=20000", "privacy.epsilons=[1]"]
DPA_BLOBS = ["dpaudit", "dataset=blobs", "dpaudit.query=parameter", "dataset.n_test=400", "train.steps=5",
             "staircase.k_max=4", "privacy.n_draws=20000", "privacy.epsilons=[1]"]
# the "default settings" (docs/dpaudit.md: linear about 280 s, blobs 30 s on a loaded 2-core machine)
DPA_LINEAR_DEFAULT = ["dpaudit", "dataset=linear"]
DPA_BLOBS_DEFAULT = ["dpaudit", "dataset=blobs", "dpaudit.query=parameter"]
SHIPPED = ("exit 0: the shipped releases' lower bound stays below the claimed epsilon (exit 1, a violation, has "
           "probability at most dpaudit.alpha = 0.05 a run on correct code: run it again before believing it)")
AUDITS = [  # (id, item, argv, planted bug, what is correct, timeout)
    ("shipped releases, linear", 4, DPA_LINEAR, None, SHIPPED, 600),
    ("shipped releases, blobs", 4, DPA_BLOBS, None, SHIPPED, 600),
    ("published noise halved, linear", 3, DPA_LINEAR, "publish-half",
     "exit 1: the noise of what publish/ holds is halved (tools/prober/plant.py); dpaudit draws through the code "
     "that publishes, so it reports a violation", 600),
    ("published noise halved, blobs", 3, DPA_BLOBS, "publish-half",
     "exit 1: the published parameters' noise is halved; dpaudit reports a violation", 600),
    ("noise scale halved, default linear", 4, DPA_LINEAR_DEFAULT, "scale-half",
     "exit 1: every mechanism's scale() halved, `certdp dpaudit dataset=linear` as it is (the default search)", 1200),
    ("noise scale halved, default blobs", 4, DPA_BLOBS_DEFAULT, "scale-half",
     "exit 1: every mechanism's scale() halved, `certdp dpaudit dataset=blobs dpaudit.query=parameter` as it is", 900),
    ("refusal when a training feature exceeds 50", 4, DPA_LINEAR, "refuse-above-50",
     "exit 1: a candidate dataset that refuses while its neighbour runs is an infinite privacy loss: a violation", 600),
]
README_CORRECT = ("exit 0; publish/README.txt says 'Publishable: NO' and nowhere claims a CSPRNG draw or that no "
                  "seed is stored (with reproducible_release=false: 'Publishable: YES' and the CSPRNG)")


def add(t: Table) -> None:
    for name, item, argv, plant, correct, timeout in AUDITS:
        with t.marked(hardening=True, item=item, correct=correct):
            t.special("dpaudit-planted", f"dpaudit:{name}", section="dpaudit", category="wrong-result",
                      timeout=timeout, argv=argv, plant=plant)
    with t.marked(hardening=True, item=10, correct=README_CORRECT):
        for name, argv in (("ags", ["ags", "dataset=blobs", "dataset.n_test=400", "train.steps=5", "ags.baselines=[]",
                                    "privacy.n_draws=5", "privacy.epsilons=[1]"]),
                           ("agtr queries=", ["agtr", "dataset=csv", "dataset.path={fx}/csv/good.csv",
                                              "dataset.target=y", "dataset.n_test=40", "dataset.output_range=[-5,5]",
                                              "train.steps=3", "staircase.k_max=4", "privacy.n_draws=5",
                                              "queries={fx}/hard/queries.csv"])):
            for repro in ("true", "false"):
                t.special("publish-readme", f"publish:{name} reproducible_release={repro}", section="publish",
                          category="wrong-result", timeout=300, fixture="hard",
                          argv=argv + [f"privacy.reproducible_release={repro}"], reproducible=repro == "true")
    with t.marked(hardening=True, item=11,
                  correct="`certdp figures --list profile=quick` with an empty cache: exit 0, its first line within "
                          "30 s (it says it is timing; the issue saw 240 s of silence), and every rate it caches at "
                          "least 1e-12 s per element (a CPU core does not do 1e12 element operations a second); an "
                          "accountant's rate is one of calls: unit 0, a call's time in (0, 600] s"):
        t.special("estimates", "estimates:figures --list times this machine, says so, caches sane rates",
                  section="estimate", category="wrong-result", timeout=600)
