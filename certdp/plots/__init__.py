"""One function per paper figure.  Each takes the figure's runs (``certdp.figures.Runs``: run id
-> finished run directories) and reads their CSVs only; it returns ``(matplotlib figure, tidy
DataFrame of the plotted data)``.  ``certdp.figures`` saves both."""

from certdp.plots.ags import adult_sampling, blobs_ags, hybrid_sst2, mnist_imdb
from certdp.plots.agtr import agtr_ablation, agtr_certificates, agtr_gs, agtr_pate, pate_shard_ablation
from certdp.plots.feasibility import cond_table
from certdp.registry import Registry

PLOTS = Registry("plot", ((f.__name__, f) for f in (cond_table, agtr_pate, agtr_ablation, agtr_certificates,
                                                    pate_shard_ablation, agtr_gs, blobs_ags, mnist_imdb, hybrid_sst2,
                                                    adult_sampling)))

__all__ = ["PLOTS"]
