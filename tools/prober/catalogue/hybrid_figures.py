"""The probes of ``certdp hybrid`` (the tiny encoder; refusals first), ``certdp figures``,
``certdp list`` and the top level."""

from __future__ import annotations

from tools.prober.model import Table


def add(t: Table) -> None:
    _hybrid(t)
    _figures_list_top_level(t)


def _hybrid(t: Table) -> None:
    """Hybrid (tiny encoder; refusals first)."""
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


def _figures_list_top_level(t: Table) -> None:
    """Figures, list, top level."""
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
