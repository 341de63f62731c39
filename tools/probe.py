"""Hostile-input prober for every ``certdp`` command (issue 11's measuring instrument).

Runs several hundred small invocations of ``python -m certdp.cli`` against a source tree
(``--root``, put first on ``PYTHONPATH``) and classifies each outcome automatically:

* valid input (``run``) must exit 0 and leave one complete run directory whose CSVs pandas
  reads, are non-empty, hold no ``nan``/``inf`` text, have their key metrics filled in and in
  range, and whose ``config.yaml`` records the values given on the command line;
* invalid input (``refuse``) must exit 2 with exactly one stderr line
  ``certdp: error: <key>: ...`` naming the expected key, no traceback and no CSV left behind;
* ``either``: refusing (as above) or running correctly are both acceptable;
* ``usage``/``info``: top-level usage errors (exit 2, no traceback) and informational commands
  (exit 0, something printed, no traceback);
* special probes: same-second pairs of identical runs and of sweeps (distinct, complete run
  directories, nothing mixed), reruns into a fixed ``run=`` name (a finished run must never be
  overwritten), SIGTERM/SIGINT of a run and of ``certdp figures`` (exit 143/130, nothing
  half-written, no orphaned child), and ``certdp rerun`` when the tree has it.

Behaviours (the ``got`` column):

  ok:      refused-ok, ran-ok
  failing: traceback, exit0-bad-output, silent-replacement, wrong-refusal, wrong-key,
           unclean-refusal (non-zero exit without the one-line format, or CSVs left behind),
           late-refusal (refused only after training/certifying), misleading (right key, the
           message or the files do not say what happened), data-loss, signal-mishandled,
           audit-violation (a certificate failed its own audit), timeout, inconclusive

Every probe runs in its own folder ``<out>/pass-<time>/<nn>-<id>/`` with ``CERTDP_OFFLINE=1``,
``HF_HUB_OFFLINE=1``, its own ``CERTDP_CACHE``, ``umask 022``, one BLAS thread and an address-space
limit (``--mem-gb`` above the imported modules, default 4 GiB) so that a missing size cap ends in
MemoryError instead of exhausting the machine.  By default each worker keeps one process that has
imported certdp (torch, pandas, Hydra: ~3 s) and forks it per probe, which then runs
``certdp.cli.main()`` with the probe's argv, environment and working folder, exactly what
``python -m certdp.cli`` runs; ``--exec`` starts a fresh interpreter per probe instead.  The
special probes (pairs, signals, reruns) always start real ``python -m certdp.cli`` processes.
Outputs: ``probes.csv`` (one row per probe) in the pass folder and, with ``--worklist FILE``, a
Markdown worklist of the failing probes grouped by section and key.

    python tools/probe.py --root /work/main --snapshot --out /tmp/probe --worklist WORKLIST.md
    python tools/probe.py --root . --only '^feasibility' --jobs 2
    python tools/probe.py --list                       # the probes, without running them
    python tools/probe.py --from-csv /tmp/probe/pass-.../probes.csv --worklist WORKLIST.md

A whole pass (675 probes) took 15 min with --jobs 2 on the shared 2-core machine at load ~15 (6 min of
CPU); ``--exec`` gives the same behaviour and exit code on every probe (checked on 82) at ~6x the time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import resource
import shlex
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.modules.setdefault("probe", sys.modules[__name__])     # probe_surfaces imports this module as `probe`
sys.path.insert(0, str(Path(__file__).resolve().parent))

OK = ("refused-ok", "ran-ok")
BEHAVIOURS = ("refused-ok", "ran-ok", "traceback", "exit0-bad-output", "silent-replacement",
              "wrong-refusal", "wrong-key", "no-allowed-part", "unclean-refusal", "late-refusal", "misleading",
              "data-loss", "signal-mishandled", "audit-violation", "timeout", "inconclusive")
# the acceptance: what each failing behaviour counts as
FAILURE_KIND = {"traceback": "tracebacks", "data-loss": "data loss", "exit0-bad-output": "wrong results",
                "silent-replacement": "wrong results", "audit-violation": "wrong results",
                "wrong-key": "refusals without key/allowed part", "no-allowed-part": "refusals without key/allowed part",
                "unclean-refusal": "unclean or multi-line refusals", "misleading": "misleading messages",
                "wrong-refusal": "valid input refused", "late-refusal": "late refusals",
                "signal-mishandled": "signals mishandled", "timeout": "timeouts", "inconclusive": "inconclusive"}

# --------------------------------------------------------------------------------------------
# small settings for every command (valid; each probe changes one thing)
LIN = ["dataset=linear", "dataset.n_train=200", "dataset.n_test=40", "train.steps=3",
       "staircase.k_max=4", "privacy.n_draws=5"]
AUDIT = LIN + ["audit.repeats=5", "audit.radii=[1,2]", "audit.n_test=20"]
PATE = LIN + ["pate.shards=[1,2]", "pate.staircase.k_max=4", "privacy.epsilons=[1,2]"]
BLOBS = ["dataset=blobs", "dataset.n_test=400", "train.steps=5", "ags.baselines=[]",
         "privacy.n_draws=5", "privacy.epsilons=[1,10]"]
# the optimised grid and PATE sizes are small too, so that an arm list wrongly replaced by the
# default (all arms) still finishes in seconds
DPSGD = ["dataset=blobs", "dataset.n_test=400", "train.steps=5", "dpsgd.arms=[dpsgd_matched]",
         "privacy.n_draws=5", "privacy.epsilons=[1,10]", "dpsgd.optimised.accountants=[rdp]",
         "dpsgd.optimised.grid.lr=[0.5]", "dpsgd.optimised.grid.clip=[1.0]", "dpsgd.optimised.grid.epochs=[1]",
         "dpsgd.optimised.grid.batch_size=[64]", "pate.teachers=[2]", "pate.queries=[20]"]
DPSGD_OPT = ["dataset=blobs", "dataset.n_test=400", "train.steps=5", "dpsgd.arms=[dpsgd_optimised,pate]",
             "privacy.n_draws=3", "privacy.epsilons=[1]", "dpsgd.optimised.accountants=[rdp]",
             "dpsgd.optimised.grid.lr=[0.5]", "dpsgd.optimised.grid.clip=[1.0]",
             "dpsgd.optimised.grid.epochs=[1]", "dpsgd.optimised.grid.batch_size=[64]",
             "pate.teachers=[2]", "pate.queries=[20]"]
CSV = ["dataset=csv", "dataset.path={fx}/csv/good.csv", "dataset.target=y", "dataset.n_test=40",
       "dataset.output_range=[-5,5]", "train.steps=3", "staircase.k_max=4", "privacy.n_draws=5"]
HYB = ["profile=cpu", "dataset.encoder=minilm", "dataset.encoder_path={fx}/enc",
       "dataset.path={repo}/tests/fixtures/hybrid/sst2", "dataset.max_seq_length=16", "dataset.n_test=16",
       "dataset.n_private=24", "privacy.epsilons=[2]", "split.fractions=[0.5]", "lora.rank=2", "lora.alpha=2",
       "dpsgd.batch_size=8", "dpsgd.epochs=1", "dpsgd.lr=1e-2", "dpsgd.accountant=rdp", "head.pca_dim=2",
       "head.steps=10", "head.k_max=4", "head.n_draws=5", "head.releases=[laplace_p]", "head.allocations=[l1]",
       "dpsgd_head.batch_size=8", "dpsgd_head.epochs=2", "dpsgd_head.lrs=[1.0]", "dpsgd_head.n_runs=2",
       "hybrid.work_dir={out}/work", "hybrid.size_sweep.n_private=[]"]
BASE = {"agtr": LIN, "certify": LIN, "audit": AUDIT, "pate": PATE, "feasibility": [], "ags": BLOBS,
        "dpsgd": DPSGD, "hybrid": HYB}

# CSVs a finished run writes, and the cells that must be filled in (column list, optional row
# filter (column, allowed values)).
FILES = {"agtr": ("results", "certificate"), "certify": ("certificate", "envelopes"), "audit": ("audit",),
         "pate": ("results", "summary"), "feasibility": ("results", "peaks"),
         "ags": ("results", "certificate", "accounting"), "dpsgd": ("results",), "hybrid": ("results", "accounting")}
REQUIRED = {
    ("agtr", "results"): [(("mae", "mse", "ss_mean", "scale_mean", "beta", "epsilon"), None)],
    ("agtr", "certificate"): [(("a_bar_mean", "a_bar_max", "contribution_mean", "ss_mean"), None)],
    ("certify", "certificate"): [(("a_bar_mean", "a_bar_max", "contribution_mean", "ss_mean"), None)],
    ("certify", "envelopes"): [(("width_max", "width_mean", "width_l1"), None)],
    ("audit", "audit"): [(("param_violations", "output_violations", "param_tightness", "output_tightness",
                           "certified_param_bound_max", "certified_output_bound_mean"),
                          ("mode", ("random", "adversarial"))),
                         (("smoothness_ratio",), ("mode", ("smoothness-random", "smoothness-adversarial")))],
    ("pate", "results"): [(("mae", "mse"), None)],
    ("pate", "summary"): [(("error",), None)],
    ("feasibility", "results"): [(("rho", "confidence"), None)],
    ("feasibility", "peaks"): [(("peak_rho", "peak_rho_grid", "peak_confidence"), None)],
    ("ags", "results"): [(("accuracy_median",), None), (("u", "scale", "beta"), ("arm", ("AGS",)))],
    ("ags", "certificate"): [(("a_bar",), None)],
    ("dpsgd", "results"): [(("accuracy_median",), None)],
    ("hybrid", "results"): [(("accuracy_median",), None)],
}
NONNEG = re.compile(r"^(mae|mse|ss_mean|ss_median|scale|scale_mean|u|u_first|a_bar\w*|width_\w+|sens_mean|"
                    r"sens_median|certified_\w+|contribution_\w+|rho|peak_rho\w*|n_draws|repeats)$")
UNIT = re.compile(r"^(accuracy_(median|mean|q25|q75)|nonprivate_accuracy|majority_rate|confidence)$")
NONFINITE_TEXT = {"nan", "inf", "-inf", "+inf", "infinity", "-infinity", "+infinity"}
TRACEBACK = re.compile(r"Traceback \(most recent call last\)|Error executing job|"
                       r"^\w+(Error|Exception)\b(:|$)", re.M)
ERRLINE = re.compile(r"^certdp: error: ([^\s:]+):")
EXCLINE = re.compile(r"^[\w.]*(Error|Exception|Interrupt|Warning)\b.*", re.M)


def exception_line(stderr: str) -> str:
    """The last ``SomeError: ...`` line of a traceback (Hydra ends with a hint line instead)."""
    found = [m.group(0) for m in EXCLINE.finditer(stderr)]
    return found[-1] if found else (nonempty_lines(stderr) or [""])[-1]


# --------------------------------------------------------------------------------------------
@dataclass
class Probe:
    """One invocation and what it must do.  ``argv`` follows ``certdp`` (command first) and may
    use ``{fx}`` (fixtures), ``{out}`` (this probe's folder) and ``{repo}`` (the probed tree)."""
    id: str
    argv: list
    expect: str                          # refuse | run | either | usage | info | special
    keys: tuple = ()                     # keys a refusal may name ("*" = any; "x.*" = x.anything)
    section: str = ""                    # worklist group (dotted key)
    category: str = ""                   # the category
    env: dict = field(default_factory=dict)
    timeout: float = 150.0
    out_root: bool = True                # append out_root={out}/o
    runs: int = 1                        # run directories a valid invocation makes (-m sweeps)
    files: tuple | None = None           # CSVs each run directory must hold (default FILES[command])
    must_say: str | None = None          # regex the refusal line must match (else: misleading)
    early: bool = False                  # must refuse before training (log.txt shows no results)
    special: str | None = None           # concurrent | overwrite | signal | figures-signal | rerun
    extra: dict = field(default_factory=dict)


def _key(arg: str) -> str:
    return arg.split("=", 1)[0].lstrip("+~")


def merge(base, extra) -> list:
    """``base`` overrides with the keys set in ``extra`` removed, then ``extra``."""
    keys = {_key(a) for a in extra if "=" in a}
    return [a for a in base if _key(a) not in keys] + list(extra)


def category_of(value: str) -> str:
    v = value.strip().lower()
    if v in ("inf", "-inf", "nan", "+inf") or "inf" in v.split(",") or "nan" in v:
        return "non-finite"
    if v.startswith("[]"):
        return "empty-list"
    if v.startswith("["):
        return "list"
    try:
        f = float(v)
    except ValueError:
        return "non-numeric"
    if f != int(f):
        return "non-integer-or-fraction"
    return "zero-negative-or-range"


class Table:
    def __init__(self):
        self.probes: list[Probe] = []
        self.ids: set[str] = set()

    def add(self, cmd, over, expect, keys=(), *, base=None, section=None, category=None, pid=None, **kw):
        base = BASE.get(cmd, []) if base is None else base
        # Hydra's -m must come before the overrides (argparse does not take positionals after it)
        flags = [a for a in over if a in ("-m", "--multirun")]
        rest = [a for a in over if a not in flags]
        argv = [cmd] + flags + merge(base, rest) if cmd else list(over)
        if isinstance(keys, str):
            keys = (keys,)
        sect = section or (keys[0] if keys and keys[0] != "*" else (_key(over[0]) if over else cmd))
        val = over[-1].split("=", 1)[1] if over and "=" in over[-1] else ""
        pid = pid or f"{cmd or 'top'}:{' '.join(over)}"
        pid = re.sub(r"\{(\w+)\}/?", "", pid)
        base_id, n = pid, 2
        while pid in self.ids:
            pid, n = f"{base_id}#{n}", n + 1
        self.ids.add(pid)
        self.probes.append(Probe(pid, argv, expect, tuple(keys), sect,
                                 category or (category_of(val) if expect == "refuse" else expect), **kw))

    def refuse(self, cmd, key, values, *, base=None, category=None, **kw):
        for v in values:
            self.add(cmd, [f"{key}={v}"], "refuse", key.lstrip("+"), base=base, category=category, **kw)

    def run(self, cmd, over, **kw):
        self.add(cmd, over, "run", category=kw.pop("category", "valid"), **kw)

    def either(self, cmd, over, keys, **kw):
        self.add(cmd, over, "either", keys, category=kw.pop("category", "ambiguous"), **kw)


STR = ["abc"]
INT_POS = ["abc", "2.7", "0", "-1", "inf", "[3]"]
FLOAT_POS = ["abc", "0", "-1", "inf", "nan", "[1]"]
FLOAT_FIN = ["abc", "inf", "nan", "[1]"]
PROB = ["abc", "0", "1", "-0.1", "1.5", "nan", "[1e-5]"]


def build() -> list[Probe]:  # noqa: C901 - one table
    t = Table()
    # ---------------------------------------------------------------- agtr: train / seed
    t.refuse("agtr", "train.steps", INT_POS)
    t.refuse("agtr", "train.lr", FLOAT_POS)
    t.refuse("agtr", "train.clip", FLOAT_POS)
    t.refuse("agtr", "train.batch_size", ["abc", "2.7", "0", "-1", "inf"])
    t.refuse("agtr", "train.contraction", ["abc", "-0.5", "inf", "nan"])
    t.refuse("agtr", "train.seed", ["abc", "2.7", "nan"])
    t.refuse("agtr", "seed", ["abc", "2.7", "nan", "[1]"])
    t.either("agtr", ["seed=-1"], "seed")
    t.either("agtr", ["train.lr=1e6"], "train.lr", category="diverging")
    t.either("agtr", ["train.contraction=1.5"], "train.contraction")
    t.either("agtr", ["train.contraction=0"], "train.contraction")
    t.either("agtr", ["train.batch_size=1000000"], "train.batch_size")
    t.run("agtr", [])
    t.run("agtr", ["train.batch_size=full"])
    t.run("agtr", ["train.batch_size=50", "train.lr=0.1", "train.clip=0.5", "train.contraction=0.9"])
    t.run("agtr", ["seed=7", "train.seed=3"])
    # ---------------------------------------------------------------- agtr: staircase
    t.refuse("agtr", "staircase.k_min", ["abc", "2.7", "0", "-1"])
    t.refuse("agtr", "staircase.k_max", ["many", "2.7", "0", "-5", "inf", "[4]"])
    t.refuse("agtr", "staircase.step", ["abc", "0", "2.5"], base=merge(LIN, ["staircase.kind=range"]))
    t.refuse("agtr", "staircase.ratio", ["abc", "1", "0.5", "nan", "inf"], base=merge(LIN, ["staircase.kind=geometric"]))
    t.refuse("agtr", "staircase.dense_until", ["abc", "2.7"])
    t.refuse("agtr", "staircase.kind", ["foo", "[range]"])
    t.refuse("agtr", "staircase.include_n", ["maybe", "2"])
    ls = merge(LIN, ["staircase.kind=list"])
    t.refuse("agtr", "staircase.values", ["[]", "[abc]", "[0]", "[-1,2]", "[2.5]", "[-1,-2]"], base=ls)
    t.either("agtr", ["staircase.values=[4,2,2]"], "staircase.values", base=ls, category="unordered-list")
    t.either("agtr", ["staircase.values=3"], "staircase.values", base=ls, category="scalar-for-list")
    t.run("agtr", ["staircase.values=[1,3]"], base=ls)
    t.run("agtr", ["staircase.kind=range", "staircase.k_max=1000000000"], category="huge-but-capped",
          section="staircase.k_max", timeout=120)
    t.run("agtr", ["staircase.kind=range", "staircase.k_min=2", "staircase.k_max=6", "staircase.step=2"])
    t.run("agtr", ["staircase.kind=geometric", "staircase.ratio=1.5", "staircase.k_max=16"])
    # ---------------------------------------------------------------- agtr: privacy
    t.refuse("agtr", "privacy.epsilons", ["[]", "[abc]", "[0]", "[-1]", "[inf]", "[nan]", "[1,nan]", "abc"])
    t.refuse("agtr", "privacy.delta", PROB)
    t.refuse("agtr", "privacy.beta", ["abc", "0", "-1", "nan", "inf", "100", "[0.1]"])
    t.refuse("agtr", "privacy.n_draws", INT_POS)
    t.refuse("agtr", "privacy.releases", ["[]", "[bogus]", "bogus", "[cauchy_p]"])
    t.refuse("agtr", "privacy.global_sensitivity", ["foo", "[range]"])
    t.run("agtr", ["privacy.epsilons=1"], category="scalar-for-list")
    t.run("agtr", ["privacy.epsilons=[2,0.5]"], category="unordered-list")
    t.either("agtr", ["privacy.epsilons=[1,1]"], "privacy.epsilons", category="duplicate-list")
    t.either("agtr", ["privacy.releases=[cauchy,cauchy]"], "privacy.releases", category="duplicate-list")
    t.run("agtr", ["privacy.releases=cauchy"], category="scalar-for-list")
    t.run("agtr", ["privacy.beta=0.001"])
    t.run("agtr", ["privacy.delta=1e-6", "privacy.epsilons=[0.5,5]", "privacy.releases=[cauchy6,laplace]"])
    t.run("agtr", ["privacy.global_sensitivity=min", "privacy.releases=[laplace_gs,cauchy]"])
    t.add("agtr", ["dataset.output_range=null"], "refuse", ("dataset.output_range", "privacy.global_sensitivity"),
          early=True, category="validate-before-work")
    # ---------------------------------------------------------------- agtr: dataset (linear)
    t.refuse("agtr", "dataset.n_train", ["abc", "2.7", "0", "-1", "[200]"])
    t.either("agtr", ["dataset.n_train=1"], "dataset.n_train")
    t.refuse("agtr", "dataset.n_test", ["abc", "2.7", "0", "-1"])
    t.refuse("agtr", "dataset.x_low", ["abc", "nan", "-inf"])
    t.refuse("agtr", "dataset.x_high", ["abc", "inf"])
    t.add("agtr", ["dataset.x_low=2", "dataset.x_high=1"], "refuse", ("dataset.x_low", "dataset.x_high"),
          category="unordered-range")
    t.refuse("agtr", "dataset.slope", ["abc", "inf"])
    t.refuse("agtr", "dataset.intercept", ["abc", "nan"])
    t.refuse("agtr", "dataset.noise", ["abc", "-1", "inf"])
    # keys the loaders read but no config declares: with `+` they must still be checked (or refused as unknown)
    t.refuse("agtr", "+dataset.data_seed", ["abc", "2.7"], section="dataset.data_seed")
    t.refuse("agtr", "dataset.output_range", ["[6,-6]", "[6]", "[]", "[a,b]", "[-inf,inf]", "[nan,1]", "[1,1]",
                                              "[-6,0,6]", "abc"])
    t.either("agtr", ["dataset.output_range=12"], "dataset.output_range", category="scalar-for-list")
    t.run("agtr", ["dataset.output_range=[-4,8]", "dataset.noise=0.5", "dataset.x_low=-2"])
    # ---------------------------------------------------------------- agtr: model / certificate / globals
    t.refuse("agtr", "model", ["foo"])
    t.add("agtr", ["model.arch=foo"], "refuse", ("model.arch", "model"))
    t.refuse("agtr", "model.hidden", ["[]", "[0]", "[abc]", "[2.5]", "[-4]"], base=merge(LIN, ["model=mlp"]))
    t.either("agtr", ["model.hidden=8"], "model.hidden", base=merge(LIN, ["model=mlp"]), category="scalar-for-list")
    t.refuse("agtr", "model.loss", ["foo"])
    t.run("agtr", ["model=mlp", "model.hidden=[8]"])
    t.refuse("agtr", "certificate", ["foo"])
    t.refuse("agtr", "certificate.name", ["foo", "[ibp]"])
    t.refuse("agtr", "certificate.aggregation", ["foo"], base=merge(LIN, ["certificate=ibp", "certificate.name=ibp"]))
    milp = merge(LIN, ["certificate=milp", "certificate.name=milp", "dataset.n_train=40", "train.steps=2",
                       "staircase.k_max=2", "certificate.time_limit=5", "certificate.workers=1"])
    t.refuse("agtr", "certificate.frequency", ["abc", "0", "2.7", "-1"], base=milp)
    t.refuse("agtr", "certificate.time_limit", ["abc", "0", "-1", "nan"], base=milp)
    t.refuse("agtr", "certificate.solver", ["foo"], base=milp)
    t.refuse("agtr", "certificate.workers", ["abc", "0", "2.7"], base=milp)
    t.refuse("agtr", "certificate.mip_gap", ["abc", "-1", "nan"], base=milp)
    t.run("agtr", ["certificate.frequency=3", "privacy.smoothness=unproven"], base=milp, timeout=300)
    t.run("agtr", ["certificate=ibp", "certificate.name=ibp", "certificate.aggregation=tau"])
    t.add("agtr", ["default_certificate=foo"], "refuse", ("default_certificate", "certificate.name"),
          base=merge(LIN, ["certificate=auto"]))
    t.refuse("agtr", "progress", ["maybe"])
    # device: an unknown name is refused; a CUDA request refuses where torch sees no CUDA device
    # and runs where it does (either); a CPU-only engine on a GPU is refused (either: no GPU here)
    t.refuse("agtr", "device", ["tpu", "cuda:x", "[cpu]"])
    t.either("agtr", ["device=cuda"], "device")
    t.either("agtr", ["device=cuda:7"], "device")
    t.either("agtr", ["device=cuda", "certificate=milp"], "device")
    t.add("agtr", ["out_root={fx}/afile/sub"], "refuse", "out_root", out_root=False, category="unwritable-out-root")
    t.add("agtr", ["out_root={fx}/afile"], "refuse", "out_root", out_root=False, category="unwritable-out-root")
    # ---------------------------------------------------------------- unknown keys, Hydra syntax
    for cmd, key in (("agtr", "privacy.epsilon=1"), ("agtr", "train.step=3"), ("agtr", "staircase.kmax=4"),
                     ("agtr", "foo=1"), ("agtr", "dataset.n_trian=100"), ("certify", "certificate.freq=2"),
                     ("audit", "audit.repeat=5"), ("pate", "pate.shard=[1]"), ("feasibility", "feasibility.cee=[1]"),
                     ("ags", "ags.release_n=2"), ("dpsgd", "dpsgd.arm=[pate]"), ("hybrid", "head.k_mx=4")):
        t.add(cmd, ["+" + key], "refuse", _key(key), category="unknown-key-plus")
    for cmd, key in (("agtr", "privacy.epsilon=1"), ("ags", "ags.release_n=2"), ("feasibility", "feasibility.cee=[1]")):
        t.add(cmd, [key], "refuse", _key(key), category="unknown-key")
    t.add("agtr", ["privacy.epsilons=[1,2"], "refuse", "privacy.epsilons", category="override-syntax")
    t.add("agtr", ["train.lr"], "refuse", "train.lr", category="override-syntax")
    t.add("agtr", ["train.lr="], "refuse", "train.lr", category="override-syntax")
    t.add("agtr", ["~train.lr"], "refuse", "train.lr", category="removed-key")
    t.either("agtr", ["~privacy.delta"], "privacy.delta", category="removed-key")
    # ---------------------------------------------------------------- sweeps
    t.add("agtr", ["-m", "train.clip=0.5,abc"], "refuse", "train.clip", category="sweep-bad-point")
    t.add("agtr", ["-m", "privacy.delta=1e-5,2"], "refuse", "privacy.delta", category="sweep-bad-point")
    t.run("agtr", ["-m", "train.clip=0.5,1.0", "privacy.releases=[cauchy]"], runs=2, category="sweep")
    t.add("agtr", ["-m", "dataset=linear,nope"], "refuse", "dataset", category="sweep-bad-point")
    # ---------------------------------------------------------------- certify
    t.run("certify", [])
    t.refuse("certify", "staircase.k_max", ["many", "0"])
    t.refuse("certify", "train.steps", ["abc", "2.7"])
    t.refuse("certify", "privacy.beta", ["nan", "abc"])
    t.refuse("certify", "train.lr", ["inf"])
    t.refuse("certify", "dataset.n_train", ["0"])
    t.refuse("certify", "seed", ["abc"])
    t.run("certify", ["privacy.beta=0.001", "staircase.include_n=false"])
    # ---------------------------------------------------------------- csv dataset (agtr)
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
    # ---------------------------------------------------------------- data files and cache
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
    # ---------------------------------------------------------------- audit
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
    # ---------------------------------------------------------------- pate
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
    # ---------------------------------------------------------------- feasibility
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
    # ---------------------------------------------------------------- ags
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
    # ---------------------------------------------------------------- dpsgd
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
    # ---------------------------------------------------------------- hybrid (tiny encoder; refusals first)
    t.run("hybrid", [], timeout=240, extra={"needs": "encoder"})
    t.refuse("hybrid", "dataset.encoder", ["foo"])
    t.refuse("hybrid", "dataset.max_seq_length", ["abc", "4", "2.7"])
    t.refuse("hybrid", "dataset.n_test", ["abc", "0", "2.7"])
    t.refuse("hybrid", "dataset.n_private", ["1", "abc", "2.7"])
    t.refuse("hybrid", "dataset.n_test_eval", ["0", "abc"])
    t.refuse("hybrid", "dataset.n_public", ["1", "abc"])
    t.refuse("hybrid", "privacy.epsilons", ["[]", "[abc]", "[0]", "[nan]"])
    t.refuse("hybrid", "privacy.delta", ["0", "2", "abc", "nan"])
    t.refuse("hybrid", "split.fractions", ["[]", "[1.5]", "[abc]", "[0]"])
    t.refuse("hybrid", "split.reuse_end_to_end", ["maybe"])
    t.refuse("hybrid", "lora.rank", ["0", "abc", "2.7"])
    t.refuse("hybrid", "lora.alpha", ["0", "abc", "inf"])
    t.refuse("hybrid", "lora.dropout", ["1", "-0.1", "nan"])
    t.refuse("hybrid", "dpsgd.batch_size", ["0", "abc", "2.7"])
    t.refuse("hybrid", "dpsgd.epochs", ["0", "abc", "inf"])
    t.refuse("hybrid", "dpsgd.clip", ["-1", "nan"])
    t.refuse("hybrid", "dpsgd.lr", ["abc", "inf", "nan"])
    t.refuse("hybrid", "dpsgd.accountant", ["foo"])
    t.refuse("hybrid", "dpsgd.delta", ["0", "1"])
    t.refuse("hybrid", "dpsgd.physical_tokens", ["4", "abc"])
    t.refuse("hybrid", "dpsgd.checkpoint_every", ["0", "abc"])
    t.refuse("hybrid", "head.pca_dim", ["0", "abc", "2.7"])
    t.refuse("hybrid", "head.steps", ["0", "2.7", "abc"])
    t.refuse("hybrid", "head.lr", ["inf", "nan", "abc"])
    t.refuse("hybrid", "head.clip", ["nan", "0"])
    t.refuse("hybrid", "head.contraction", ["1.5", "0", "nan"])
    t.refuse("hybrid", "head.certificate", ["foo"])
    t.refuse("hybrid", "head.k_max", ["0", "abc", "2.7"])
    t.refuse("hybrid", "head.releases", ["[foo]", "[]"])
    t.refuse("hybrid", "head.allocations", ["[foo]", "[]"])
    t.refuse("hybrid", "head.n_draws", ["0", "abc"])
    t.refuse("hybrid", "head.delta", ["0", "abc"])
    t.refuse("hybrid", "head.beta", ["nan", "-1", "abc", "100"])
    t.refuse("hybrid", "head.include_n", ["maybe"])
    t.refuse("hybrid", "dpsgd_head.batch_size", ["0", "abc"])
    t.refuse("hybrid", "dpsgd_head.epochs", ["0", "nan"])
    t.refuse("hybrid", "dpsgd_head.clip", ["0", "inf"])
    t.refuse("hybrid", "dpsgd_head.lrs", ["[]", "[-1]", "[abc]"])
    t.refuse("hybrid", "dpsgd_head.n_runs", ["0", "2.7"])
    t.refuse("hybrid", "hybrid.arms", ["[foo]", "[]"])
    t.refuse("hybrid", "hybrid.threshold", ["foo"])
    t.refuse("hybrid", "hybrid.size_sweep.epsilon", ["0", "abc", "nan"])
    t.refuse("hybrid", "hybrid.size_sweep.n_private", ["[1]", "[abc]", "[2.5]"])
    t.refuse("hybrid", "hybrid.work_dir", ["{fx}/afile/work"])
    t.refuse("hybrid", "profile", ["foo"])
    t.refuse("hybrid", "seed", ["abc"])
    t.add("hybrid", ["dataset=linear"], "refuse", "dataset")
    # ---------------------------------------------------------------- figures, list, top level
    fo = "out_root={out}/o"
    t.add("figures", ["cond_table", "profile=quick", fo], "run", out_root=False, files=("figures/cond_table.csv",),
          timeout=300, pid="figures:cond_table profile=quick")
    t.add("figures", ["cond_table", "profile=foo", fo], "refuse", "profile", out_root=False)
    t.add("figures", ["cond_table", "jobs=abc", fo], "refuse", "jobs", out_root=False)
    t.add("figures", ["cond_table", "jobs=0", fo], "refuse", "jobs", out_root=False)
    t.add("figures", ["cond_table", "jobs=-1", fo], "refuse", "jobs", out_root=False)
    t.add("figures", ["cond_table", "jobs=2.5", fo], "refuse", "jobs", out_root=False)
    t.add("figures", ["cond_table", "launcher=foo", fo], "refuse", "launcher", out_root=False)
    t.add("figures", ["cond_table", "bogus=1", fo], "refuse", ("bogus", "figures"), out_root=False,
          category="unknown-key")
    t.add("figures", ["nosuchfig", fo], "refuse", ("figures", "nosuchfig"), out_root=False, category="unknown-name")
    t.add("figures", ["cond_table", "--bogus", fo], "refuse", ("figures", "--bogus"), out_root=False,
          category="unknown-option")
    t.add("figures", ["cond_table", "profile=quick", "out_root={fx}/afile/sub"], "refuse", "out_root", out_root=False,
          category="unwritable-out-root")
    t.add("figures", ["--list"], "info", out_root=False)
    t.add("figures", ["--list", "profile=quick"], "info", out_root=False)
    t.add("figures", ["--list", "profile=foo"], "refuse", "profile", out_root=False)
    t.add("figures", ["--list", "jobs=abc"], "refuse", "jobs", out_root=False)
    t.add("list", [], "info", out_root=False)
    t.add("list", ["extra"], "usage", out_root=False, extra={"token": "extra"})
    t.add("list", ["--bogus"], "usage", out_root=False, extra={"token": "--bogus"})
    t.add("", [], "info", out_root=False, pid="top:(no arguments)", extra={"help_ok": True})
    t.add("", ["--help"], "info", out_root=False)
    t.add("", ["nosuchcmd"], "usage", out_root=False, extra={"token": "nosuchcmd"})
    t.add("", ["--bogus"], "usage", out_root=False, extra={"token": "--bogus"})
    t.add("agtr", ["--bogus"], "usage", extra={"token": "--bogus"})
    t.add("agtr", ["--cfg", "bogus"], "usage", out_root=False, extra={"token": "bogus"})
    t.add("agtr", ["--cfg", "job"], "info", out_root=False)
    t.add("agtr", ["--help"], "info", base=[], out_root=False)
    t.add("certify", ["--cfg", "job"], "info", out_root=False)
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
    import probe_surfaces
    probe_surfaces.build(t)
    return t.probes


# --------------------------------------------------------------------------------------------
# fixtures
def make_fixtures(fx: Path, python: str, root: Path, needs: set | None = None) -> dict:
    """The fixtures of every probe; the slow ones (a tiny encoder, finished runs) only when a
    selected probe ``needs`` them (None: all)."""
    import numpy as np
    import probe_surfaces
    have = {}
    c = fx / "csv"
    c.mkdir(parents=True, exist_ok=True)
    (c / "dir").mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    n = 300
    x1, x2 = rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)
    y = 2 * x1 - x2 + 0.1 * rng.standard_normal(n)

    def table(path, cols, header=None):
        names = header or list(cols)
        lines = [",".join(names)]
        for row in zip(*cols.values()):
            lines.append(",".join(r if isinstance(r, str) else repr(float(r)) for r in row))
        path.write_text("\n".join(lines) + "\n")

    table(c / "good.csv", {"x1": x1, "x2": x2, "y": y})
    (c / "empty.csv").write_bytes(b"")
    (c / "header.csv").write_text("x1,x2,y\n")
    (c / "binary.csv").write_bytes(bytes(rng.integers(0, 256, 4096, dtype=np.uint8)))
    xi = x1.copy()
    xi[7] = np.inf
    table(c / "inf.csv", {"x1": xi, "x2": x2, "y": y})
    yn = [("" if i % 50 == 3 else repr(float(v))) for i, v in enumerate(y)]
    table(c / "nan.csv", {"x1": x1, "x2": x2, "y": yn})
    table(c / "const.csv", {"x1": x1, "x2": x2, "y": np.full(n, 3.0)})
    table(c / "big.csv", {"x1": 1e300 * (1 + x1), "x2": x2, "y": y})
    table(c / "dup.csv", {"x1": x1, "y": y, "y2": -y}, header=["x1", "y", "y"])
    table(c / "text.csv", {"x1": [f"v{i}" for i in range(n)], "x2": x2, "y": y})
    table(c / "texttarget.csv", {"x1": x1, "x2": x2, "y": ["high" if v > 0 else "low" for v in y]})
    table(c / "onerow.csv", {"x1": x1[:1], "x2": x2[:1], "y": y[:1]})
    lines = (c / "good.csv").read_text().splitlines()
    (c / "ragged.csv").write_text("\n".join(lines[:50] + ["1.0,2.0,3.0,4.0,5.0"] + lines[50:]) + "\n")
    (c / "fake.parquet").write_text((c / "good.csv").read_text())
    (c / "semicolon.csv").write_text((c / "good.csv").read_text().replace(",", ";"))
    try:
        from sklearn.datasets import load_diabetes
        df = load_diabetes(as_frame=True).frame
        df.to_csv(c / "diabetes.csv", index=False)
        have["diabetes"] = True
    except Exception as e:           # the probe is skipped, and says why
        have["diabetes"] = f"sklearn diabetes unavailable: {e}"
    bad = fx / "badcache" / "california"
    bad.mkdir(parents=True, exist_ok=True)
    (bad / "california_housing.parquet.brotli").write_bytes(b"not the california table\n" * 40)
    (fx / "afile").write_text("a regular file, used where a folder is expected\n")
    enc = fx / "enc"
    if needs is None or "encoder" in needs:
        r = subprocess.run([python, str(Path(root) / "tests" / "tiny_encoder.py"), str(enc)], capture_output=True,
                           text=True, env={**os.environ, "PYTHONPATH": str(root)}, timeout=300)
        have["encoder"] = True if r.returncode == 0 else f"tiny encoder not built: {r.stderr.strip()[-200:]}"
    if needs is None or "rerun" in needs:
        r = subprocess.run([python, "-m", "certdp.cli", "rerun", "--help"], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(root)}, timeout=120, cwd=str(fx))
        have["rerun"] = True if r.returncode == 0 else "no `certdp rerun` in this tree"
    probe_surfaces.make_fixtures(fx, python, root, have, probe_surfaces.NEEDS if needs is None else needs)
    return have


# --------------------------------------------------------------------------------------------
# running
@dataclass
class Ctx:
    root: Path
    python: str
    fx: Path
    mem_bytes: int
    have: dict
    fork: bool = True


def fill(s: str, ctx: Ctx, out: Path) -> str:
    return s.replace("{fx}", str(ctx.fx)).replace("{out}", str(out)).replace("{repo}", str(ctx.root))


def base_env(ctx: Ctx, out: Path, extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CERTDP_", "HYDRA_"))}
    env.update({"PYTHONPATH": str(ctx.root), "CERTDP_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1", "CERTDP_CACHE": str(out / "cache"), "MPLBACKEND": "Agg",
                "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                "PYTHONWARNINGS": "ignore", "TQDM_DISABLE": "1"})
    for k, v in (extra or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = fill(v, ctx, out)
    return env


def launch(ctx: Ctx, argv: list, out: Path, env: dict) -> subprocess.Popen:
    mem = ctx.mem_bytes

    def pre():
        os.umask(0o022)
        os.setsid()
        if mem:
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    return subprocess.Popen([ctx.python, "-m", "certdp.cli", *argv], cwd=str(out), env=env, preexec_fn=pre,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")


def finish(p: subprocess.Popen, timeout: float, save: Path | None = None) -> tuple[int | None, str, str, bool]:
    """Wait for ``p`` (killing its process group after ``timeout`` s); stdout and stderr are kept
    in ``save``/stdout.txt and stderr.txt when given."""
    try:
        so, se = p.communicate(timeout=timeout)
        to = False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        so, se = p.communicate()
        to = True
    if save is not None:
        n = 0
        while (save / f"stderr{'' if n == 0 else n}.txt").exists():
            n += 1
        (save / f"stdout{'' if n == 0 else n}.txt").write_text(so)
        (save / f"stderr{'' if n == 0 else n}.txt").write_text(se)
    return p.returncode, so, se, to


def argv_of(p: Probe, ctx: Ctx, out: Path) -> list:
    argv = [fill(a, ctx, out) for a in p.argv]
    if p.out_root:
        argv.append(f"out_root={out / 'o'}")
    return argv


def nonempty_lines(s: str) -> list[str]:
    return [line for line in s.splitlines() if line.strip()]


def _final(p: Path) -> bool:
    """Not inside Hydra's .hydra, a staging folder (``.incomplete-``) or a replaced run (``.replaced-``)."""
    return not any(part == ".hydra" or ".incomplete-" in part or ".replaced-" in part for part in p.parts)


def run_dirs(root: Path) -> list[Path]:
    """Run directories under ``root``: folders holding config.yaml, staging folders excluded."""
    return sorted({p.parent for p in root.rglob("config.yaml") if _final(p)})


def csv_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.csv") if _final(p))


def check_csv(path: Path, command: str) -> list[str]:
    """Problems of one CSV written by a finished run (empty list: fine)."""
    import pandas as pd
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False)
        df = pd.read_csv(path)
    except Exception as e:
        return [f"{path.name} unreadable ({type(e).__name__})"]
    if len(df) == 0 or len(df.columns) == 0:
        return [f"{path.name} has no rows"]
    bad = []
    for c in raw.columns:
        vals = raw[c].str.strip().str.lower()
        n = int(vals.isin(NONFINITE_TEXT).sum())
        if n:
            bad.append(f"{path.name}:{c} {n} non-finite")
    for cols, filt in REQUIRED.get((command, path.stem), []):
        rows = df if filt is None or filt[0] not in df.columns else df[df[filt[0]].isin(filt[1])]
        for c in cols:
            if c not in df.columns:
                if filt is None:
                    bad.append(f"{path.name}: no column {c}")
                continue
            if len(rows) and rows[c].isna().any():
                bad.append(f"{path.name}:{c} {int(rows[c].isna().sum())} empty")
    for c in df.columns:
        col = pd.to_numeric(df[c], errors="coerce")
        if NONNEG.match(c) and (col < 0).any():
            bad.append(f"{path.name}:{c} negative ({col.min():.3g})")
        if UNIT.match(c) and ((col < 0) | (col > 1)).any():
            bad.append(f"{path.name}:{c} outside [0, 1]")
    for c in ("param_violations", "output_violations", "staircase_violations", "smoothness_violations"):
        if c in df.columns and (pd.to_numeric(df[c], errors="coerce").fillna(0) > 0).any():
            bad.append(f"AUDIT-VIOLATION {path.name}:{c}")
    return bad


NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def parse_value(v: str):
    """A command-line value as Hydra reads it (numbers, inf/nan, null, booleans, flat lists)."""
    s = v.strip()
    low = s.lower()
    if s.startswith("[") and s.endswith("]"):
        inner = s[1:-1].strip()
        return [parse_value(x) for x in inner.split(",")] if inner else []
    if low in ("inf", "+inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    if low == "nan":
        return math.nan
    if low == "null":
        return None
    if low in ("true", "false"):
        return low == "true"
    if NUMBER.match(s):
        return int(s) if re.match(r"^[+-]?\d+$", s) else float(s)
    return s.strip("'\"")


def same_value(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return (math.isnan(a) and math.isnan(b)) if (math.isnan(a) or math.isnan(b)) else math.isclose(a, b, rel_tol=1e-12)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    return a == b


def config_mismatches(argv: list, run_dir: Path) -> list[str]:
    """Overrides ``a.b=v`` whose value config.yaml does not record as given."""
    import yaml
    try:
        cfg = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    except Exception as e:
        return [f"config.yaml unreadable ({type(e).__name__})"]
    out = []
    for a in argv:
        if "=" not in a or a.startswith("-") or a.startswith("~"):
            continue
        k, v = a.split("=", 1)
        k = k.lstrip("+")
        if "/" in k or k in ("out_root", "run", "hydra") or k.startswith("hydra.") or "," in v and not v.startswith("["):
            continue
        node, ok = cfg, True
        for part in k.split("."):
            if isinstance(node, dict) and part in node:
                node = node[part]
            else:
                ok = False
                break
        if not ok:
            if "." in k or k not in ("dataset", "model", "certificate", "staircase", "privacy", "train", "profile"):
                out.append(f"config.yaml lacks {k}")
            continue
        if isinstance(node, dict):        # a group selection (dataset=linear)
            continue
        want = parse_value(v)
        if not same_value(want, node):
            out.append(f"config.yaml {k}={node!r} (given {v})")
    return out


def result_mismatches(argv: list, run_dir: Path, command: str) -> list[str]:
    """What the results say was run, against the explicit overrides (silent replacement)."""
    import pandas as pd
    p = run_dir / "results.csv"
    if not p.exists():
        return []
    try:
        df = pd.read_csv(p)
    except Exception:
        return []
    given = {a.split("=", 1)[0].lstrip("+"): parse_value(a.split("=", 1)[1]) for a in argv if "=" in a and not a.startswith("-")}
    out = []
    eps = given.get("privacy.epsilons")
    if eps is not None and "epsilon" in df.columns and command in ("agtr", "ags", "dpsgd"):
        want = set(float(e) for e in (eps if isinstance(eps, list) else [eps])) if not isinstance(eps, str) else None
        got = set(df["epsilon"].dropna().astype(float))
        if want is not None and got != want:
            out.append(f"results epsilons {sorted(got)} (given {sorted(want)})")
    nd = given.get("privacy.n_draws")
    if command == "agtr" and isinstance(nd, int) and "n_draws" in df.columns and (df["n_draws"] != nd).any():
        out.append(f"results n_draws {sorted(set(df['n_draws']))} (given {nd})")
    nt = given.get("dataset.n_train")
    if command in ("agtr", "ags") and isinstance(nt, int) and "n_train" in df.columns and (df["n_train"] != nt).any():
        out.append(f"results n_train {sorted(set(df['n_train']))} (given {nt})")
    rel = given.get("privacy.releases")
    if command == "agtr" and rel is not None and "mechanism" in df.columns:
        want = set(rel if isinstance(rel, list) else [rel])
        got = set(df["mechanism"])
        if not got <= want or not {r for r in want if r in ("cauchy", "cauchy6", "laplace")} <= got:
            out.append(f"results mechanisms {sorted(got)} (given {sorted(want)})")
    return out


def judge_outputs(p: Probe, argv: list, out: Path, command: str, *, count: bool = True) -> tuple[str, str]:
    """Behaviour of an exit-0 run: ran-ok, exit0-bad-output, silent-replacement or audit-violation."""
    root = out / "o"
    notes = []
    if p.files and command == "figures":
        missing = [f for f in p.files if not (root / f).exists()]
        if missing:
            return "exit0-bad-output", f"missing {missing}"
        probs = [x for f in csv_files(root) for x in check_csv(f, "figures")]
        return ("exit0-bad-output", "; ".join(probs[:4])) if probs else ("ran-ok", "")
    dirs = [d for d in run_dirs(root)]
    if count and len(dirs) != p.runs:
        return "exit0-bad-output", f"{len(dirs)} run directories (expected {p.runs})"
    files = p.files or FILES.get(command, ("results",))
    probs, mism, perms = [], [], []
    for d in dirs:
        for f in files:
            if not (d / f"{f}.csv").exists():
                probs.append(f"missing {f}.csv")
        for f in sorted(d.glob("*.csv")):
            probs += check_csv(f, command)
            mode = f.stat().st_mode & 0o777
            if mode != 0o644:
                perms.append(f"{f.name} mode {oct(mode)}")
        mism += config_mismatches(argv, d) + result_mismatches(argv, d, command)
    if perms and count:
        notes.append("perm: " + ", ".join(sorted(set(perms))[:2]))
    viol = [x for x in probs if x.startswith("AUDIT-VIOLATION")]
    probs = [x for x in probs if not x.startswith("AUDIT-VIOLATION")]
    if probs:
        return "exit0-bad-output", "; ".join(probs[:4] + notes)
    if viol:
        return "audit-violation", "; ".join(viol[:3])
    if mism:
        return "silent-replacement", "; ".join(mism[:3] + notes)
    return "ran-ok", "; ".join(notes)


def key_matches(named: str | None, keys: tuple) -> bool:
    if named is None:
        return False
    for k in keys:
        if k == "*" or named == k or named.startswith(k + "=") or (k.endswith(".*") and named.startswith(k[:-1])):
            return True
    return False


def judge(p: Probe, rc, so, se, timed_out, out: Path, argv: list, seconds: float) -> dict:
    command = p.argv[0] if p.argv else ""
    lines = nonempty_lines(se)
    first = lines[0] if lines else ""
    last = exception_line(se) if lines else ""
    tb = bool(TRACEBACK.search(se)) or (rc is not None and rc < 0)
    m = ERRLINE.match(first)
    named = m.group(1) if m else None
    csvs = csv_files(out / "o") if (out / "o").exists() else []
    note = ""
    if p.extra.get("judge") == "predict" and not timed_out and not tb:
        import probe_surfaces
        got, note = probe_surfaces.judge_predict(p, rc, so, se, out)
        return {"behaviour": got, "note": note, "named": named or "", "first": first[:300], "last": last[:300]}
    if timed_out:
        got = "timeout"
    elif command == "audit" and rc == 1 and not tb and csvs:
        got, note = judge_outputs(p, argv, out, command)
        if got != "audit-violation":
            got, note = "unclean-refusal", f"exit 1 without an audit violation; {note}".strip("; ")
    elif p.expect in ("refuse", "either") or (p.expect == "run" and rc != 0):
        if rc == 0:
            if p.expect == "refuse":
                got, note = judge_outputs(p, argv, out, command, count=False)
                got = "exit0-bad-output" if got == "exit0-bad-output" else "silent-replacement"
                if got == "silent-replacement":
                    note = ("exit 0 on invalid input; " + note).strip("; ")
            else:
                got, note = judge_outputs(p, argv, out, command)
        elif tb:
            got = "traceback"
            if rc is not None and rc < 0:
                note = f"killed by signal {-rc}"
        elif rc == 2 and len(lines) == 1 and first.startswith("certdp: error:"):
            if p.expect == "run":
                got = "wrong-refusal"
            elif not key_matches(named, p.keys):
                got, note = "wrong-key", f"named {named or 'no key'}, expected {'|'.join(p.keys)}"
            elif not re.search(r"; allowed\b[^:;]*: \S", first):
                got, note = "no-allowed-part", "the refusal does not say what is allowed"
            elif csvs:
                got, note = "unclean-refusal", f"left {len(csvs)} CSV(s): {csvs[0].name}"
            elif (out / "outputs").exists():
                got, note = "unclean-refusal", "left outputs/ in the working folder"
            elif p.early and late(out):
                got, note = "late-refusal", "refused after training/certifying"
            elif p.must_say and not re.search(p.must_say, first):
                got, note = "misleading", f"message lacks /{p.must_say}/"
            elif p.extra.get("kept_aside") and not kept_aside(out, p, argv):
                got, note = "misleading", "the bad cache file was deleted, not kept aside"
            else:
                got = "refused-ok"
        elif rc not in (1, 2) or not lines:
            got, note = "traceback", f"crashed (exit {rc}) without a message"
        else:
            got = "wrong-refusal" if p.expect == "run" else "unclean-refusal"
            if got == "unclean-refusal":
                note = f"exit {rc}, {len(lines)} stderr line(s)" + (f", left {len(csvs)} CSV(s)" if csvs else "")
    elif p.expect == "run":
        got, note = judge_outputs(p, argv, out, command)
    elif p.expect == "usage":
        tok = p.extra.get("token", "")
        if tb:
            got = "traceback"
        elif rc == 2 and tok in (se + so) and len(lines) > 1:
            got, note = "unclean-refusal", f"a usage error of {len(lines)} lines"
        elif rc == 2 and tok in (se + so):
            got = "refused-ok"
        elif rc == 0:
            got = "silent-replacement"
        else:
            got, note = "unclean-refusal", f"exit {rc}"
    elif p.expect == "info":
        if tb:
            got = "traceback"
        elif (rc == 0 or (p.extra.get("help_ok") and rc == 2)) and (so.strip() or se.strip()):
            got = "ran-ok"
        else:
            got, note = "wrong-refusal", f"exit {rc}"
    else:
        got = "inconclusive"
    return {"behaviour": got, "note": note, "named": named or "", "first": first[:300], "last": last[:300]}


def late(out: Path) -> bool:
    for log in out.rglob("log.txt"):
        text = log.read_text(errors="replace")
        if re.search(r"non-private|certified \d+ radii|AGT .* s over|nonprivate", text):
            return True
    return False


def kept_aside(out: Path, p: Probe, argv: list) -> bool:
    """The checksum probe's cache copy: the bad bytes must still exist somewhere in the cache."""
    env_cache = Path(fill(p.env.get("CERTDP_CACHE", ""), CTX, out))
    want = b"not the california table\n" * 40
    return any(f.is_file() and f.stat().st_size == len(want) and f.read_bytes() == want
               for f in env_cache.rglob("*")) if env_cache.exists() else False


CTX: Ctx | None = None

# A fork server: one process per worker imports certdp (torch, pandas, Hydra) once, then forks
# a child per probe that runs ``certdp.cli.main()`` exactly as ``python -m certdp.cli`` would
# (same argv, environment, working folder, umask, memory limit; exit status from SystemExit,
# tracebacks printed by the interpreter's rules).  Special probes (pairs, signals) always use
# real ``python -m certdp.cli`` processes.
SERVER = r"""
import json, os, resource, sys, traceback
import certdp.cli
for m in ("certdp.methods.agtr", "certdp.methods.audit", "certdp.methods.pate", "certdp.methods.feasibility",
          "certdp.methods.ags", "certdp.methods.dpsgd", "certdp.methods.hybrid", "certdp.figures", "pandas",
          "hydra", "sklearn.datasets", "transformers", "peft", "opacus", "sentence_transformers"):
    try:
        __import__(m)
    except Exception:
        pass
def vmsize():
    for line in open("/proc/self/status"):
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0
sys.stdout.write(json.dumps({"ready": True, "vm": vmsize()}) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    req = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setsid()
            os.chdir(req["cwd"])
            os.umask(0o022)
            if req["mem"]:
                resource.setrlimit(resource.RLIMIT_AS, (req["mem"], req["mem"]))
            os.environ.clear(); os.environ.update(req["env"])
            fi = os.open(os.devnull, os.O_RDONLY)
            fo = os.open(req["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            fe = os.open(req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fi, 0); os.dup2(fo, 1); os.dup2(fe, 2)
            sys.argv = [certdp.cli.__file__] + req["argv"]
            try:
                certdp.cli.main()
                code = 0
            except SystemExit as e:
                if e.code is None:
                    code = 0
                elif isinstance(e.code, int):
                    code = e.code
                else:
                    print(e.code, file=sys.stderr); code = 1
            except KeyboardInterrupt:
                traceback.print_exc(); code = 130
            except BaseException:
                traceback.print_exc(); code = 1
        finally:
            try:
                sys.stdout.flush(); sys.stderr.flush()
            finally:
                os._exit(code & 0xFF)
    sys.stdout.write(json.dumps({"pid": pid}) + "\n"); sys.stdout.flush()
    _, status = os.waitpid(pid, 0)
    sys.stdout.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n"); sys.stdout.flush()
"""


class ForkServer:
    def __init__(self, ctx: Ctx, env: dict):
        self.ctx, self.env, self.proc, self.vm = ctx, env, None, 0

    def start(self):
        script = self.ctx.fx / "fork_server.py"
        if not script.exists():
            script.write_text(SERVER)
        self.proc = subprocess.Popen([self.ctx.python, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, env=self.env, cwd=str(self.ctx.fx))
        hello = json.loads(self.proc.stdout.readline() or "{}")
        if not hello.get("ready"):
            raise RuntimeError("the fork server did not start (is --root a certdp tree?)")
        self.vm = int(hello.get("vm", 0))

    def run(self, argv, cwd: Path, env: dict, timeout: float) -> tuple[int | None, str, str, bool]:
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        so, se = cwd / "stdout.txt", cwd / "stderr.txt"
        mem = self.vm + self.ctx.mem_bytes if self.ctx.mem_bytes else 0
        req = {"argv": argv, "cwd": str(cwd), "env": env, "stdout": str(so), "stderr": str(se), "mem": mem}
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        pid = json.loads(self.proc.stdout.readline())["pid"]
        import select
        timed_out = False
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not r:
            timed_out = True
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        rc = json.loads(self.proc.stdout.readline())["rc"]
        return rc, so.read_text(errors="replace"), se.read_text(errors="replace"), timed_out

    def close(self):
        if self.proc and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:     # a slow interpreter exit must not lose the pass
                self.proc.kill()
                self.proc.wait()


_LOCAL = __import__("threading").local()
_SERVERS: list = []


def server_for(ctx: Ctx) -> ForkServer:
    srv = getattr(_LOCAL, "server", None)
    if srv is None:
        srv = ForkServer(ctx, base_env(ctx, ctx.fx))
        _LOCAL.server = srv
        _SERVERS.append(srv)
    return srv


def run_probe(p: Probe, ctx: Ctx, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    need = p.extra.get("needs")
    if need and ctx.have.get(need) is not True:
        return row(p, [], {"behaviour": "skipped", "note": str(ctx.have.get(need)), "named": "", "first": "",
                           "last": ""}, None, 0.0)
    if p.special:
        t0 = time.time()
        res = SPECIALS[p.special](p, ctx, out)
        return row(p, res.pop("argv", []), res, res.pop("rc", None), time.time() - t0)
    if "badcache" in json.dumps(p.env):
        import shutil
        shutil.copytree(ctx.fx / "badcache", out / "badcache")
        p = Probe(**{**p.__dict__, "env": {**p.env, "CERTDP_CACHE": str(out / "badcache")}})
    argv = argv_of(p, ctx, out)
    t0 = time.time()
    if ctx.fork:
        rc, so, se, to = server_for(ctx).run(argv, out, base_env(ctx, out, p.env), p.timeout)
    else:
        proc = launch(ctx, argv, out, base_env(ctx, out, p.env))
        rc, so, se, to = finish(proc, p.timeout, out)
    secs = time.time() - t0
    return row(p, argv, judge(p, rc, so, se, to, out, argv, secs), rc, secs)


def row(p: Probe, argv, res: dict, rc, secs) -> dict:
    return {"id": p.id, "command": (p.argv[0] if p.argv else p.special or ""), "section": p.section,
            "category": p.category, "expected": p.expect + (f" {'|'.join(p.keys)}" if p.keys else ""),
            "got": res["behaviour"], "exit": "" if rc is None else rc, "seconds": round(secs, 1),
            "named_key": res.get("named", ""), "stderr_first": res.get("first", ""),
            "stderr_last": res.get("last", ""), "note": res.get("note", ""),
            "args": " ".join(shlex.quote(a) for a in argv)}


# --------------------------------------------------------------------------------------------
# special probes
def _complete(d: Path, command: str) -> bool:
    return (d / "config.yaml").exists() and all((d / f"{f}.csv").exists() for f in FILES[command])


def _digest(d: Path) -> dict:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(d.glob("*")) if f.is_file()}


def _seed_mixed(d: Path) -> bool:
    import pandas as pd
    import yaml
    try:
        seed = (yaml.safe_load((d / "config.yaml").read_text()) or {}).get("seed")
        df = pd.read_csv(d / "results.csv")
    except Exception:
        return False
    return "seed" in df.columns and seed is not None and bool((df["seed"] != seed).any())


def sp_concurrent(p: Probe, ctx: Ctx, out: Path) -> dict:
    argvs = [[fill(a, ctx, out) for a in av] + [f"out_root={out / 'o'}"] for av in p.extra["argvs"]]
    cmd = argvs[0][0]
    procs = []
    for i, av in enumerate(argvs):
        o = out / f"p{i}"
        o.mkdir(parents=True, exist_ok=True)
        procs.append(launch(ctx, av, o, base_env(ctx, o)))
    res = [finish(pr, p.timeout, out / f'p{i}') for i, pr in enumerate(procs)]
    se = "\n".join(r[2] for r in res)
    rcs = [r[0] for r in res]
    expect_dirs = len(argvs) * p.extra.get("runs_each", 1)
    dirs = [d for d in run_dirs(out / "o")]
    complete = [d for d in dirs if _complete(d, cmd)]
    mixed = [d for d in complete if _seed_mixed(d)]
    bad = [x for d in complete for f in d.glob("*.csv") for x in check_csv(f, cmd)]
    info = {"argv": argvs[0], "rc": max(r if r is not None else 999 for r in rcs), "named": "",
            "first": (nonempty_lines(se) or [""])[0][:300], "last": (nonempty_lines(se) or [""])[-1][:300]}
    if any(r[3] for r in res):
        return {**info, "behaviour": "timeout", "note": ""}
    if TRACEBACK.search(se):
        return {**info, "behaviour": "traceback", "note": f"exits {rcs}"}
    if mixed or len(complete) < expect_dirs:
        return {**info, "behaviour": "data-loss",
                "note": f"exits {rcs}; {len(complete)} complete run dirs of {expect_dirs} expected"
                        + (f"; {len(mixed)} mix config.yaml of one run with CSVs of another" if mixed else "")}
    if any(r != 0 for r in rcs):
        return {**info, "behaviour": "wrong-refusal", "note": f"exits {rcs}"}
    if bad:
        return {**info, "behaviour": "exit0-bad-output", "note": "; ".join(bad[:3])}
    return {**info, "behaviour": "ran-ok", "note": f"{len(complete)} distinct complete run dirs"}


def sp_overwrite(p: Probe, ctx: Ctx, out: Path) -> dict:
    first = [fill(a, ctx, out) for a in p.extra["first"]] + [f"out_root={out / 'o'}"]
    second = [fill(a, ctx, out) for a in p.extra["second"]] + [f"out_root={out / 'o'}"]
    (out / "a").mkdir(parents=True, exist_ok=True)
    (out / "b").mkdir(parents=True, exist_ok=True)
    rc1, _, se1, _ = finish(launch(ctx, first, out / "a", base_env(ctx, out / "a")), p.timeout, out / "a")
    dirs1 = [d for d in run_dirs(out / "o") if _complete(d, "agtr")]
    info = {"argv": second, "named": "", "first": "", "last": ""}
    if rc1 != 0 or len(dirs1) != 1:
        return {**info, "rc": rc1, "behaviour": "inconclusive", "note": f"first run exit {rc1}: {se1.strip()[-150:]}"}
    d1 = dirs1[0]
    before = _digest(d1)
    rc2, so2, se2, to = finish(launch(ctx, second, out / "b", base_env(ctx, out / "b")), p.timeout, out / "b")
    lines = nonempty_lines(se2)
    info.update(rc=rc2, first=(lines or [""])[0][:300], last=(lines or [""])[-1][:300])
    after = _digest(d1) if d1.exists() else {}
    if to:
        return {**info, "behaviour": "timeout", "note": ""}
    if p.extra.get("allow"):
        if rc2 == 0 and _complete(d1, "agtr") and not _seed_mixed(d1) and after != before:
            return {**info, "behaviour": "ran-ok", "note": "replaced as asked"}
        if TRACEBACK.search(se2):
            return {**info, "behaviour": "traceback", "note": ""}
        return {**info, "behaviour": "wrong-refusal" if rc2 else "silent-replacement", "note": f"exit {rc2}"}
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k) and not k.endswith(".txt"))
    if changed:
        return {**info, "behaviour": "data-loss", "note": f"exit {rc2}; finished run changed: {', '.join(changed[:4])}"
                + ("; config.yaml and CSVs now from different runs" if _seed_mixed(d1) else "")}
    if TRACEBACK.search(se2):
        return {**info, "behaviour": "traceback", "note": ""}
    if rc2 == 0:
        others = [d for d in run_dirs(out / "o") if d != d1 and _complete(d, "agtr")]
        return ({**info, "behaviour": "ran-ok", "note": f"landed in {others[0].name}"} if others else
                {**info, "behaviour": "data-loss", "note": "exit 0 but no complete second run directory"})
    m = ERRLINE.match(info["first"])
    if rc2 == 2 and len(lines) == 1 and m:
        return {**info, "named": m.group(1), "behaviour": "refused-ok", "note": ""}
    return {**info, "behaviour": "unclean-refusal", "note": f"exit {rc2}"}


def _wait_for(pattern_root: Path, name: str, proc, limit: float, text: str | None = None) -> bool:
    """Wait until a file ``name`` (holding ``text``, when given) exists below ``pattern_root``."""
    t0 = time.time()
    while time.time() - t0 < limit:
        files = list(pattern_root.rglob(name)) if pattern_root.exists() else []
        if any(text is None or text in f.read_text(errors="replace") for f in files):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.1)
    return False


def sp_signal(p: Probe, ctx: Ctx, out: Path) -> dict:
    argv = [fill(a, ctx, out) for a in p.extra["argv"]] + [f"out_root={out / 'o'}"]
    sig = signal.SIGTERM if p.extra["sig"] == "TERM" else signal.SIGINT
    want = 143 if sig == signal.SIGTERM else 130
    proc = launch(ctx, argv, out, base_env(ctx, out))
    started = _wait_for(out / "o", "log.txt", proc, 120, text="AGT-R on")     # computing, not importing
    time.sleep(1.5)
    info = {"argv": argv, "named": ""}
    if not started or proc.poll() is not None:
        rc, so, se, _ = finish(proc, 30)
        return {**info, "rc": rc, "behaviour": "inconclusive", "first": "", "last": "",
                "note": "the run ended before the signal could be sent"}
    proc.send_signal(sig)
    rc, so, se, to = finish(proc, 60, out)
    lines = nonempty_lines(se)
    info.update(rc=rc, first=(lines or [""])[0][:300], last=(lines or [""])[-1][:300])
    left = [f for f in csv_files(out / "o")
            if not any("incomplete" in part.lower() for part in f.relative_to(out / "o").parts)
            and not any((d / "INCOMPLETE").exists() for d in f.parents)]
    if to:
        return {**info, "behaviour": "timeout", "note": "did not stop within 60 s of the signal"}
    if TRACEBACK.search(se) and rc != -sig:
        return {**info, "behaviour": "traceback", "note": f"exit {rc}"}
    if left:
        return {**info, "behaviour": "data-loss", "note": f"exit {rc}; left {', '.join(f.name for f in left[:3])}"}
    if rc != want or not lines:
        return {**info, "behaviour": "signal-mishandled", "note": f"exit {rc} (want {want} and a message)"}
    return {**info, "behaviour": "ran-ok", "note": f"exit {rc}, nothing half-written"}


def _procs_mentioning(text: str, exclude: set) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) in exclude:
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd:
            pids.append(int(d.name))
    return pids


def sp_figures_signal(p: Probe, ctx: Ctx, out: Path) -> dict:
    root = out / "o"
    argv = [fill(a, ctx, out) for a in p.extra["argv"]] + [f"out_root={root}"]
    proc = launch(ctx, argv, out, base_env(ctx, out))
    t0, children = time.time(), []
    while not children and proc.poll() is None and time.time() - t0 < 120:   # a child run has started
        time.sleep(0.2)
        children = _procs_mentioning(f"out_root={root}", {os.getpid(), proc.pid})
    time.sleep(0.5)
    info = {"argv": argv, "named": ""}
    children = [c for c in children if Path(f"/proc/{c}").exists()]
    if proc.poll() is not None or not children:
        rc, _, se, _ = finish(proc, 30, out)
        return {**info, "rc": rc, "behaviour": "inconclusive", "first": "", "last": "",
                "note": "no child run was running when the signal was due"}
    proc.send_signal(signal.SIGTERM)
    rc, so, se, to = finish(proc, 60, out)
    time.sleep(3.0)
    orphans = [pid for pid in _procs_mentioning(f"out_root={root}", {os.getpid()}) if pid in children]
    for pid in orphans:                      # the prober started them (through certdp figures)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    lines = nonempty_lines(se)
    info.update(rc=rc, first=(lines or [""])[0][:300], last=(lines or [""])[-1][:300])
    if orphans:
        return {**info, "behaviour": "signal-mishandled", "note": f"exit {rc}; {len(orphans)} child run(s) still running"}
    if any(root.rglob("done.json")):
        return {**info, "behaviour": "data-loss", "note": "done.json written for an interrupted run"}
    if rc != 143:
        return {**info, "behaviour": "signal-mishandled", "note": f"exit {rc} (want 143)"}
    return {**info, "behaviour": "ran-ok", "note": "no orphan"}


def sp_rerun(p: Probe, ctx: Ctx, out: Path) -> dict:
    if ctx.have.get("rerun") is not True:
        return {"behaviour": "skipped", "note": str(ctx.have.get("rerun")), "named": "", "first": "", "last": ""}
    first = [fill(a, ctx, out) for a in p.extra["first"]] + [f"out_root={out / 'o'}"]
    (out / "a").mkdir(parents=True, exist_ok=True)
    rc1, _, se1, _ = finish(launch(ctx, first, out / "a", base_env(ctx, out / "a")), p.timeout, out / "a")
    dirs = run_dirs(out / "o")
    info = {"named": "", "first": "", "last": ""}
    if rc1 != 0 or len(dirs) != 1:
        return {**info, "rc": rc1, "behaviour": "inconclusive", "note": f"first run exit {rc1}"}
    d1 = dirs[0]
    before = _digest(d1)
    argv = ["rerun", str(d1)]
    rc, so, se, to = finish(launch(ctx, argv, out, base_env(ctx, out)), p.timeout, out)
    lines = nonempty_lines(se)
    info.update(argv=argv, rc=rc, first=(lines or [""])[0][:300], last=(lines or [""])[-1][:300])
    if to:
        return {**info, "behaviour": "timeout", "note": ""}
    if TRACEBACK.search(se):
        return {**info, "behaviour": "traceback", "note": ""}
    if rc != 0:
        return {**info, "behaviour": "wrong-refusal", "note": f"exit {rc}"}
    if _digest(d1) != before:
        return {**info, "behaviour": "data-loss", "note": "the original run changed"}
    new = [d for d in run_dirs(out) if d != d1 and (d / "results.csv").exists()]
    if not new:
        return {**info, "behaviour": "exit0-bad-output", "note": "no new run directory with results.csv"}
    same = all((new[0] / f"{f}.csv").read_bytes() == (d1 / f"{f}.csv").read_bytes() for f in FILES["agtr"])
    return {**info, "behaviour": "ran-ok" if same else "silent-replacement",
            "note": f"new dir {new[0].name}" + ("" if same else "; CSVs differ from the original")}


SPECIALS = {"concurrent": sp_concurrent, "overwrite": sp_overwrite, "signal": sp_signal,
            "figures-signal": sp_figures_signal, "rerun": sp_rerun}


def _surface_specials() -> None:
    import probe_surfaces
    SPECIALS.update(probe_surfaces.SPECIALS)


# --------------------------------------------------------------------------------------------
def worklist(rows: list[dict], root: str, seconds: float, path: Path) -> None:
    from collections import Counter, defaultdict
    counts = Counter(r["got"] for r in rows)
    fails = [r for r in rows if r["got"] not in OK and r["got"] != "skipped"]
    by_sect = defaultdict(list)
    for r in fails:
        by_sect[r["section"].split(".")[0] if r["section"] else r["command"]].append(r)
    out = [f"# certdp bad-input worklist ({root})", "",
           f"Generated by `tools/probe.py` against {root}: {len(rows)} probes in {seconds / 60:.1f} min, "
           f"{len(fails)} failing.", "", "## Counts by behaviour", "", "| behaviour | probes |", "|---|---|"]
    for b in BEHAVIOURS + ("skipped",):
        if counts.get(b):
            out.append(f"| {b} | {counts[b]} |")
    fc = Counter(r["got"] for r in fails)
    out += ["", "## Failing probes by section and key", "",
            "Each line: probe id, expected behaviour -> observed behaviour (exit code): what stderr said.", ""]
    for sect in sorted(by_sect, key=lambda s: (-len(by_sect[s]), s)):
        rs = by_sect[sect]
        out.append(f"### {sect} ({len(rs)} failing)")
        out.append("")
        by_key = defaultdict(list)
        for r in rs:
            by_key[r["section"]].append(r)
        for key in sorted(by_key):
            out.append(f"- **{key}**")
            for r in by_key[key]:
                what = r["stderr_last"] if r["got"] == "traceback" else (r["stderr_first"] or r["note"])
                extra = f"; {r['note']}" if r["note"] and r["note"] not in what else ""
                out.append(f"  - `{r['id']}`: {r['expected']} -> **{r['got']}** (exit {r['exit']}): "
                           f"{what[:160]}{extra[:200]}".replace("|", "\\|"))
        out.append("")
    out += ["## Failing behaviours", ""] + [f"- {b}: {n}" for b, n in fc.most_common()]
    path.write_text("\n".join(out) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=str(Path(__file__).resolve().parent.parent),
                    help="the certdp source tree to probe (put first on PYTHONPATH)")
    ap.add_argument("--out", default="/tmp/certdp-probe", help="scratch folder for run outputs")
    ap.add_argument("--jobs", type=int, default=2, help="probes at once (special probes run alone)")
    ap.add_argument("--only", default=None, help="regular expression on the probe id or its arguments")
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs certdp")
    ap.add_argument("--mem-gb", type=float, default=4.0,
                    help="address space a probe may add to the imported modules (GiB; 0 = no limit)")
    ap.add_argument("--worklist", default=None, help="write a Markdown worklist of the failing probes here")
    ap.add_argument("--csv", default=None, help="the per-probe CSV (default <pass folder>/probes.csv)")
    ap.add_argument("--list", action="store_true", help="print the probes and exit")
    ap.add_argument("--surfaces", action="store_true",
                    help="only the probes of the surfaces around the runs (predict, rerun, run folders, sweeps, "
                         "signals, streams: tools/probe_surfaces.py)")
    ap.add_argument("--quick", action="store_true",
                    help="only the device probes and the first few regular ones (seconds): checks the prober runs")
    ap.add_argument("--from-csv", default=None,
                    help="do not run: print the counts of an earlier probes.csv (and write --worklist from it)")
    ap.add_argument("--snapshot", action="store_true",
                    help="probe a copy of --root's committed HEAD (git archive) so that commits landing during "
                         "the pass do not mix two versions")
    ap.add_argument("--exec", action="store_true",
                    help="start a fresh `python -m certdp.cli` for every probe (slower: ~3 s of imports each) "
                         "instead of forking a pre-imported server")
    a = ap.parse_args()

    if a.from_csv:
        import pandas as pd
        from collections import Counter
        rows = pd.read_csv(a.from_csv, keep_default_na=False).to_dict("records")
        counts = Counter(r["got"] for r in rows)
        for b in BEHAVIOURS + ("skipped",):
            if counts.get(b):
                print(f"  {b:<20} {counts[b]}")
        meta_path = Path(a.from_csv).with_name("pass.json")
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {"label": a.from_csv, "seconds": float("nan")}
        if a.worklist:
            worklist(rows, meta["label"], meta["seconds"], Path(a.worklist))
        return
    probes = build()
    if a.surfaces:
        probes = [p for p in probes if p.extra.get("surface")]
    if a.quick and not a.only:
        probes = [p for p in probes if p.section == "device" and not p.special][:4]
    if a.only:
        rx = re.compile(a.only)
        probes = [p for p in probes if rx.search(p.id) or rx.search(" ".join(p.argv))]
    if a.list:
        for p in probes:
            print(f"{p.id:<70} {p.expect} {'|'.join(p.keys)}")
        print(f"{len(probes)} probes")
        return
    root = Path(a.root).resolve()
    out = Path(a.out).resolve() / time.strftime("pass-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=False)
    rev = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    commit = rev.stdout.strip() if rev.returncode == 0 else "unknown"
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    label = f"{root} @ {commit}" + (" (with uncommitted changes)" if dirty and not a.snapshot else "")
    if a.snapshot:
        tree = out / "_tree"
        tree.mkdir()
        arch = subprocess.run(["git", "-C", str(root), "archive", "HEAD"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(tree)], input=arch.stdout, check=True)
        root = tree
    t0 = time.time()
    fx = out / "_fixtures"
    _surface_specials()
    needs = {p.extra.get("needs") for p in probes} - {None}
    have = make_fixtures(fx, a.python, root, needs)
    global CTX
    CTX = ctx = Ctx(root, a.python, fx, int(a.mem_gb * (1 << 30)), have, fork=not a.exec)
    print(f"probing {label} with {len(probes)} probes -> {out} (fixtures {time.time() - t0:.0f} s; "
          + ", ".join(f"{k}: {'yes' if v is True else 'no'}" for k, v in have.items()) + ")", flush=True)
    normal = [(i, p) for i, p in enumerate(probes) if not p.special]
    specials = [(i, p) for i, p in enumerate(probes) if p.special]
    results: dict[int, dict] = {}

    def one(ip):
        i, p = ip
        folder = out / f"{i:03d}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', p.id)[:60]}"
        r = run_probe(p, ctx, folder)
        flag = "  " if r["got"] in OK or r["got"] == "skipped" else "!!"
        print(f"{flag} {r['got']:<18} {r['seconds']:>5.1f}s  {p.id}", flush=True)
        return i, r

    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        for i, r in pool.map(one, normal):
            results[i] = r
    for srv in _SERVERS:
        srv.close()
    for ip in specials:
        i, r = one(ip)
        results[i] = r
    rows = [results[i] for i in sorted(results)]
    seconds = time.time() - t0
    import pandas as pd
    csv_path = Path(a.csv) if a.csv else out / "probes.csv"
    pd.DataFrame(rows).to_csv(csv_path, index=False)
    (csv_path.parent / "pass.json").write_text(json.dumps({"label": label, "seconds": seconds}))
    from collections import Counter
    counts = Counter(r["got"] for r in rows)
    print(f"\n{len(rows)} probes in {seconds / 60:.1f} min ({label})")
    for b in BEHAVIOURS + ("skipped",):
        if counts.get(b):
            print(f"  {b:<20} {counts[b]}")
    print("by the issue's categories (cases; failures):")
    for cat in sorted({r["category"] for r in rows}):
        rs = [r for r in rows if r["category"] == cat]
        bad = Counter(FAILURE_KIND.get(r["got"], r["got"]) for r in rs if r["got"] not in OK and r["got"] != "skipped")
        print(f"  {cat:<26} {len(rs):>4}" + (f"; {dict(bad)}" if bad else ""))
    kinds = Counter(FAILURE_KIND.get(r["got"], r["got"]) for r in rows if r["got"] not in OK and r["got"] != "skipped")
    for kind in ("tracebacks", "data loss", "wrong results", "refusals without key/allowed part"):
        print(f"  {kind}: {kinds.get(kind, 0)}")
    perm = sum(1 for r in rows if "perm:" in r["note"])
    if perm:
        print(f"  (runs whose CSVs are not mode 0644: {perm})")
    print(f"per-probe CSV: {csv_path}")
    if a.worklist:
        worklist(rows, label, seconds, Path(a.worklist))
        print(f"worklist: {a.worklist}")


if __name__ == "__main__":
    main()
