"""``certdp feasibility``: the critical ratios of Theorems 3.2 and 3.3 over a confidence grid.

Writes ``results.csv`` (one row per regime x c x delta x confidence: the largest admissible
rho = SS^beta / Delta f) and ``peaks.csv`` (per curve: the peak on the grid and the refined
continuous peak, over the whole grid and, for the approximate-DP curves, over the paper's window
1 - alpha > 0.8).  See :mod:`certdp.privacy.conditions` for the formulas.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from certdp.privacy.conditions import approx_critical_ratio, peak, pure_critical_ratio
from certdp.settings import FeasibilitySettings

log = logging.getLogger("certdp")


def run(settings: FeasibilitySettings, *, progress: bool = True) -> dict[str, pd.DataFrame]:
    conf = np.array(settings.points)
    cs, deltas, factor = list(settings.c), list(settings.delta), settings.cauchy_factor
    wlo, whi = settings.approx_window

    rows, peaks = [], []
    lo_c, hi_c = float(conf.min()), float(conf.max())

    def add_curve(regime, c, delta, fn, windows):
        rho = fn(conf)
        for t, r in zip(conf, rho):
            rows.append({"regime": regime, "c": c, "delta": delta, "confidence": float(t),
                         "alpha": float(1 - t), "rho": float(r)})
        for wname, (a, b) in windows.items():
            m = (conf >= a) & (conf <= b) if wname == "grid" else (conf > a) & (conf <= b)
            if not m.any():
                continue
            j = int(np.argmax(np.where(m, rho, -np.inf)))
            xa, xb = max(a, lo_c), min(b, hi_c)
            px, pv = peak(lambda t: fn(np.array([t]))[0], xa, xb)
            peaks.append({"regime": regime, "c": c, "delta": delta, "window": wname,
                          "window_lo": a, "window_hi": b,
                          "peak_confidence_grid": float(conf[j]), "peak_rho_grid": float(rho[j]),
                          "peak_confidence": px, "peak_rho": pv})

    for c in cs:
        add_curve("pure", c, 0.0, lambda t, c=c: pure_critical_ratio(confidence=t, c=c, cauchy_factor=factor),
                  {"grid": (lo_c, hi_c)})
        for d in deltas:
            add_curve("approx", c, d, lambda t, c=c, d=d: approx_critical_ratio(confidence=t, c=c, delta=d),
                      {"grid": (lo_c, hi_c), "paper": (wlo, whi)})
    res, pk = pd.DataFrame(rows), pd.DataFrame(peaks)
    for p in peaks:
        line = (f"{p['regime']:<6} c={p['c']:g}" + (f" delta={p['delta']:g}" if p["regime"] == "approx" else "")
                + f" [{p['window']}: 1-alpha in ({p['window_lo']:g}, {p['window_hi']:g}]]: peak rho = {p['peak_rho']:.4f}"
                f" at 1-alpha = {p['peak_confidence']:.4f} (grid: {p['peak_rho_grid']:.4f} at {p['peak_confidence_grid']:.3f})")
        log.info(line)
    from certdp.certify.experiment import NO_DATA, with_provenance
    return with_provenance({"results": res, "peaks": pk}, NO_DATA, device="cpu")
