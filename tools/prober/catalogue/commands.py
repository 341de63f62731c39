"""The probes of ``certdp audit``, ``pate``, ``feasibility``, ``ags`` and ``dpsgd``."""

from __future__ import annotations

from tools.prober.bases import BLOBS, DPSGD, DPSGD_OPT, PATE
from tools.prober.model import Table, merge


def add(t: Table) -> None:
    _audit(t)
    _pate(t)
    _feasibility(t)
    _ags(t)
    _dpsgd(t)


def _audit(t: Table) -> None:
    """Audit."""
    t.run("audit", [])
    t.refuse("audit", "audit.repeats", ["abc", "0", "2.7", "-1", "inf"])
    t.refuse("audit", "audit.radii", ["[]", "[abc]", "[0]", "[-1]", "[2.5]", "[1000]"])
    t.either("audit", ["audit.radii=3"], "audit.radii", category="scalar-for-list")
    t.either("audit", ["audit.radii=[2,1,2]"], "audit.radii", category="unordered-list")
    t.refuse("audit", "audit.modes", ["[]", "[foo]", "foo"])
    t.refuse("audit", "audit.n_test", ["abc", "0", "2.7", "-1"])
    t.refuse("audit", "audit.smoothness", ["abc", "-1", "2.7"])
    t.refuse("audit", "train.clip", ["inf", "nan"])
    t.refuse("audit", "train.lr", ["inf"])
    t.refuse("audit", "dataset.output_range", ["[6,-6]"])
    t.refuse("audit", "staircase.k_max", ["many"])
    t.refuse("audit", "seed", ["abc"])
    t.run("audit", ["audit.smoothness=1", "audit.radii=[1]", "audit.repeats=3"], timeout=200)
    t.run("audit", ["audit.modes=[random]", "certificate=ibp", "certificate.name=ibp"])


def _pate(t: Table) -> None:
    """Pate."""
    t.run("pate", [])
    t.refuse("pate", "pate.shards", ["[]", "[abc]", "[0]", "[2.5]", "[1000]", "[-2]"])
    t.either("pate", ["pate.shards=2"], "pate.shards", category="scalar-for-list")
    t.either("pate", ["pate.shards=[2,1,2]"], "pate.shards", category="unordered-list")
    t.refuse("pate", "pate.arms", ["[]", "[foo]", "foo"])
    t.refuse("pate", "pate.max_train", ["abc", "0", "2.7", "-1"])
    t.refuse("pate", "pate.full_staircase", ["foo"])
    t.refuse("pate", "pate.staircase.kind", ["foo"])
    t.refuse("pate", "pate.staircase.k_max", ["abc", "0"])
    t.refuse("pate", "pate.staircase.k_min", ["0", "abc"])
    t.refuse("pate", "pate.staircase.ratio", ["0.5", "abc"], base=merge(PATE, ["pate.staircase.kind=geometric"]))
    t.refuse("pate", "pate.staircase.values", ["[]", "[-1,2]"], base=merge(PATE, ["pate.staircase.kind=list"]))
    t.refuse("pate", "privacy.epsilons", ["[]", "[nan]"])
    t.refuse("pate", "train.lr", ["inf"])
    t.refuse("pate", "privacy.beta", ["nan"])
    t.add("pate", ["dataset=blobs"], "refuse", "dataset", base=[x for x in PATE if not x.startswith("dataset")])
    t.run("pate", ["pate.max_train=100", "pate.shards=[1,4]", "pate.arms=[pate_r,agtr_wor]"])
    t.run("pate", ["pate.full_staircase=agtr", "pate.staircase.kind=list", "pate.staircase.values=[1,2]"])


def _feasibility(t: Table) -> None:
    """Feasibility."""
    for step in ("0.01", "0.005", "0.05", "0.1"):
        t.run("feasibility", [f"feasibility.confidence.step={step}"], category="valid-refused-today")
    t.run("feasibility", [])
    t.run("feasibility", ["feasibility.confidence.values=[0.5,0.9,0.99]", "feasibility.c=2",
                          "feasibility.delta=[1e-5,1e-6]", "feasibility.cauchy_factor=2"])
    t.refuse("feasibility", "feasibility.confidence.step", ["0", "-0.01", "abc", "nan", "[0.1]"])
    t.add("feasibility", ["feasibility.confidence.step=1e-9"], "refuse",
          ("feasibility.confidence.step", "feasibility.confidence"), category="huge-grid", timeout=240)
    t.add("feasibility", ["feasibility.confidence.step=1e-7", "feasibility.confidence.start=0.1",
                          "feasibility.confidence.stop=0.9"], "refuse",
          ("feasibility.confidence.step", "feasibility.confidence"), category="huge-grid", timeout=240)
    t.refuse("feasibility", "feasibility.confidence.start", ["abc", "0", "-0.1", "1.5", "nan"])
    t.refuse("feasibility", "feasibility.confidence.stop", ["abc", "1", "1.5"])
    t.add("feasibility", ["feasibility.confidence.start=0.5", "feasibility.confidence.stop=0.4"], "refuse",
          ("feasibility.confidence.stop", "feasibility.confidence.start", "feasibility.confidence"),
          category="unordered-range")
    t.refuse("feasibility", "feasibility.confidence.values", ["[0.5,abc]", "[0]", "[1]", "[1.5]", "[nan]"])
    t.either("feasibility", ["feasibility.confidence.values=[]"], "feasibility.confidence.values", category="empty-list")
    t.either("feasibility", ["feasibility.confidence.values=[0.9,0.5,0.9]"], "feasibility.confidence.values",
             category="unordered-list")
    t.either("feasibility", ["feasibility.confidence.values=0.5"], "feasibility.confidence.values",
             category="scalar-for-list")
    t.refuse("feasibility", "feasibility.c", ["[]", "[abc]", "[0]", "[-1]", "[inf]", "[nan]"])
    t.refuse("feasibility", "feasibility.delta", ["[]", "0", "1", "abc", "nan", "[1e-5,2]"])
    t.refuse("feasibility", "feasibility.cauchy_factor", ["abc", "0", "-1", "inf", "[6,2]"])
    t.refuse("feasibility", "feasibility.approx_window", ["[1.0,0.8]", "[0.8]", "[]", "[abc,1]", "0.8", "[-0.1,1]",
                                                          "[0.8,nan]"])
    t.refuse("feasibility", "feasibility.confidence", ["abc"])


def _ags(t: Table) -> None:
    """Ags."""
    t.run("ags", [])
    t.run("ags", ["ags.releases_n=2", "ags.composition=basic"])
    t.run("ags", ["ags.sampling_steps=[2,5]", "ags.composition=pld"], timeout=200)
    t.run("ags", ["ags.ablation_n=[1,5]", "ags.ablation_draws=2"])
    # shared boxes break envelope nesting, so smooth releases may refuse them (naming the key)
    t.either("ags", ["ags.share_ratio=2.0", "staircase.kind=range", "staircase.k_max=16"], "ags.share_ratio")
    t.run("ags", ["privacy.releases=[cauchy6_p,laplace_union_p]"])
    t.refuse("ags", "ags.releases_n", ["two", "2.7", "0", "-1", "100", "[2]"])
    t.refuse("ags", "ags.sampling_steps", ["[3,2,5]", "[2,2,5]", "[1,3]", "[abc]", "[0,5]", "[2.5,5]"])
    t.either("ags", ["ags.sampling_steps=5"], "ags.sampling_steps", category="scalar-for-list")
    t.refuse("ags", "ags.composition", ["foo", "[basic]"])
    t.refuse("ags", "ags.share_ratio", ["abc", "1", "0.5", "nan", "inf"])
    t.refuse("ags", "ags.ablation_n", ["[0]", "[abc]", "[100]", "[2.5]"])
    t.refuse("ags", "ags.ablation_compositions", ["[foo]", "[]"], base=merge(BLOBS, ["ags.ablation_n=[1]"]))
    t.refuse("ags", "ags.ablation_draws", ["0", "-1", "abc", "2.7"], base=merge(BLOBS, ["ags.ablation_n=[1]"]))
    t.refuse("ags", "ags.baselines", ["[foo]", "foo"])
    t.refuse("ags", "+ags.baseline_draws", ["0", "abc", "2.7"], base=merge(BLOBS, ["ags.baselines=[dpsgd_matched]"]),
             section="ags.baseline_draws")
    t.refuse("ags", "privacy.epsilons", ["[]", "[0]", "[abc]", "[nan]", "[inf]"])
    t.refuse("ags", "privacy.delta", ["0", "1", "abc", "nan"])
    t.refuse("ags", "privacy.releases", ["[cauchy]", "[]", "[foo]"])
    t.add("ags", ["privacy.beta=1e6"], "refuse", "privacy.beta", early=True, category="beta-above-limit")
    t.refuse("ags", "privacy.beta", ["nan", "abc", "-1"])
    t.refuse("ags", "privacy.n_draws", ["0", "abc", "2.7"])
    t.refuse("ags", "train.steps", ["abc", "0", "2.7"])
    t.refuse("ags", "train.lr", ["inf", "nan"])
    t.refuse("ags", "train.clip", ["inf"])
    t.refuse("ags", "train.batch_size", ["0", "abc"])
    t.refuse("ags", "train.contraction", ["nan"])
    t.refuse("ags", "dataset.n_features", ["0", "abc", "2.7"])
    t.refuse("ags", "dataset.n_train", ["1", "abc", "0"])
    t.refuse("ags", "dataset.n_test", ["0", "abc"])
    t.refuse("ags", "dataset.n_public", ["-1", "abc"])
    t.refuse("ags", "dataset.separation", ["abc", "nan", "inf"])
    t.refuse("ags", "dataset.cluster_std", ["0", "-1", "abc", "nan"])
    t.refuse("ags", "staircase.values", ["[]", "[abc]", "[-1,2]", "[0]"])
    t.refuse("ags", "certificate.name", ["foo"])
    t.refuse("ags", "seed", ["abc"])
    t.add("ags", ["dataset=linear"], "refuse", "dataset",
          base=[x for x in BLOBS if not x.startswith("dataset")])


def _dpsgd(t: Table) -> None:
    """Dpsgd."""
    t.run("dpsgd", [])
    t.run("dpsgd", [], base=DPSGD_OPT, pid="dpsgd:optimised+pate small grid", timeout=200)
    t.refuse("dpsgd", "dpsgd.arms", ["[foo]", "[]", "foo"])
    t.refuse("dpsgd", "dpsgd.optimised.accountants", ["[foo]", "[]"], base=DPSGD_OPT)
    t.refuse("dpsgd", "dpsgd.optimised.grid.lr", ["[abc]", "[-1]", "[]", "[inf]"], base=DPSGD_OPT)
    t.refuse("dpsgd", "dpsgd.optimised.grid.clip", ["[0]", "[abc]"], base=DPSGD_OPT)
    t.refuse("dpsgd", "dpsgd.optimised.grid.epochs", ["[0]", "[abc]"], base=DPSGD_OPT)
    t.refuse("dpsgd", "dpsgd.optimised.grid.batch_size", ["[0]", "[abc]", "[2.5]"], base=DPSGD_OPT)
    t.refuse("dpsgd", "pate.teachers", ["[abc]", "[0]", "[]"], base=DPSGD_OPT)
    t.refuse("dpsgd", "pate.queries", ["[0]", "[abc]"], base=DPSGD_OPT)
    t.refuse("dpsgd", "+pate.student_steps", ["abc", "0"], base=DPSGD_OPT, section="pate.student_steps")
    t.refuse("dpsgd", "privacy.epsilons", ["[]", "[0]", "[nan]"])
    t.refuse("dpsgd", "privacy.delta", ["0", "abc"])
    t.refuse("dpsgd", "privacy.n_draws", ["0", "abc"])
    t.refuse("dpsgd", "train.lr", ["inf"])
    t.refuse("dpsgd", "train.clip", ["0", "nan"])
    t.add("dpsgd", ["dataset=linear"], "refuse", "dataset",
          base=[x for x in DPSGD if not x.startswith("dataset")])
