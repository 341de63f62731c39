"""The probes of ``certdp agtr`` and ``certdp certify`` on the linear task: training, seed,
staircase, privacy, dataset, model, certificate and global settings, unknown keys and Hydra's
override syntax, sweeps."""

from __future__ import annotations

from tools.prober.bases import LIN
from tools.prober.model import FLOAT_POS, INT_POS, PROB, Table, _key, merge


def add(t: Table) -> None:
    _agtr_train_seed(t)
    _agtr_staircase(t)
    _agtr_privacy(t)
    _agtr_dataset(t)
    _agtr_model_certificate_globals(t)
    _unknown_keys_hydra_syntax(t)
    _sweeps(t)
    _certify(t)


def _agtr_train_seed(t: Table) -> None:
    """Agtr: train / seed."""
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


def _agtr_staircase(t: Table) -> None:
    """Agtr: staircase."""
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


def _agtr_privacy(t: Table) -> None:
    """Agtr: privacy."""
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


def _agtr_dataset(t: Table) -> None:
    """Agtr: dataset (linear)."""
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


def _agtr_model_certificate_globals(t: Table) -> None:
    """Agtr: model / certificate / globals."""
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


def _unknown_keys_hydra_syntax(t: Table) -> None:
    """Unknown keys, Hydra syntax."""
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


def _sweeps(t: Table) -> None:
    """Sweeps."""
    t.add("agtr", ["-m", "train.clip=0.5,abc"], "refuse", "train.clip", category="sweep-bad-point")
    t.add("agtr", ["-m", "privacy.delta=1e-5,2"], "refuse", "privacy.delta", category="sweep-bad-point")
    t.run("agtr", ["-m", "train.clip=0.5,1.0", "privacy.releases=[cauchy]"], runs=2, category="sweep")
    t.add("agtr", ["-m", "dataset=linear,nope"], "refuse", "dataset", category="sweep-bad-point")


def _certify(t: Table) -> None:
    """Certify."""
    t.run("certify", [])
    t.refuse("certify", "staircase.k_max", ["many", "0"])
    t.refuse("certify", "train.steps", ["abc", "2.7"])
    t.refuse("certify", "privacy.beta", ["nan", "abc"])
    t.refuse("certify", "train.lr", ["inf"])
    t.refuse("certify", "dataset.n_train", ["0"])
    t.refuse("certify", "seed", ["abc"])
    t.run("certify", ["privacy.beta=0.001", "staircase.include_n=false"])
