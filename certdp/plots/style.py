"""One look for every figure: a colour per arm (the same arm has the same colour in every
figure), log axes where the paper uses them, legends outside the data, the Agg backend."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

# arm -> (colour, label).  Our methods are blue, PATE orange, DP-SGD red, GS black.
ARMS: dict[str, tuple[str, str]] = {
    "agtr": ("#1f77b4", "AGT-R (full data)"),
    "agtr_wor": ("#9467bd", "AGT-R (one shard, amplified)"),
    "pate_r": ("#ff7f0e", "PATE-R"),
    "pate_agtr": ("#2ca02c", "PATE-AGT-R"),
    "pate_mean": ("#7f7f7f", "PATE mean (noise-free)"),
    "gs": ("#000000", "global sensitivity"),
    "AGS": ("#1f77b4", "AGS"),
    "AGS (hidden)": ("#17becf", "AGS (hidden layer)"),
    "DP-SGD matched": ("#d62728", "DP-SGD (matched, accounted)"),
    "DP-SGD matched (basic)": ("#9467bd", "DP-SGD (matched, basic composition)"),
    "DP-SGD matched (hidden)": ("#e377c2", "DP-SGD matched (hidden layer)"),
    "DP-SGD optimised": ("#8c564b", "DP-SGD (optimized)"),
    "PATE": ("#ff7f0e", "PATE"),
    "hybrid": ("#1f77b4", "DP-LoRA + AGS head (hybrid)"),
    "dplora": ("#d62728", "DP-LoRA (end to end)"),
    "frozen_ags": ("#2ca02c", "frozen encoder + AGS head"),
    "frozen_dpsgd": ("#8c564b", "frozen encoder + DP-SGD head"),
    "nonprivate": ("#7f7f7f", "non-private"),
    "majority": ("#7f7f7f", "majority class"),
}
NONPRIVATE = "#7f7f7f"


def color(arm: str) -> str:
    return ARMS.get(arm, ("#333333", arm))[0]


def label(arm: str) -> str:
    return ARMS.get(arm, ("#333333", arm))[1]


def ramp(n: int, cmap: str = "viridis") -> list:
    """Colours of an ordered sweep (F, batch size, epsilon): dark = small, light = large."""
    cm = plt.get_cmap(cmap)
    return [cm(x) for x in (np.linspace(0.05, 0.85, n) if n > 1 else [0.4])]


def apply() -> None:
    plt.rcParams.update({
        "figure.dpi": 110, "savefig.dpi": 150, "font.size": 9, "axes.titlesize": 9.5,
        "axes.labelsize": 9, "legend.fontsize": 8, "xtick.labelsize": 8, "ytick.labelsize": 8,
        "axes.grid": True, "grid.alpha": 0.25, "grid.linewidth": 0.6, "lines.linewidth": 1.5,
        "lines.markersize": 4, "axes.spines.top": False, "axes.spines.right": False,
        "legend.frameon": False,
    })


def panels(n: int, *, width: float = 3.3, height: float = 2.7, sharey: bool = False):
    fig, axes = plt.subplots(1, n, figsize=(width * n, height), sharey=sharey, squeeze=False)
    return fig, list(axes[0])


def legend_below(fig, axes, *, ncol: int | None = None, extra=None) -> None:
    """One legend for the whole figure, below the panels (outside every data area)."""
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels and not lab.startswith("_"):
                handles.append(h)
                labels.append(lab)
    for h, lab in (extra or []):
        if lab not in labels:
            handles.append(h)
            labels.append(lab)
    if handles:
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0),
                   ncol=ncol or min(len(labels), 4))


def legend_right(ax, **kw) -> None:
    """A legend to the right of one axis (outside its data)."""
    h, lab = ax.get_legend_handles_labels()
    if h:
        ax.legend(h, lab, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, **kw)


def empty(ax, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, fontsize=8,
            color="#b00000", wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def save(fig, png: Path, pdf: Path) -> None:
    fig.savefig(png, bbox_inches="tight")
    fig.savefig(pdf, bbox_inches="tight")
    plt.close(fig)
