"""Small, valid settings for every command (each probe changes one thing), the CSVs a finished
run of each command writes and the cells that must be filled in.  The tests share them
(``tests/test_settings.py``): one catalogue of small settings, not a copy per file."""

from __future__ import annotations

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
