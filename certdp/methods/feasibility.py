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

from certdp.errors import ConfigError
from certdp.privacy.conditions import approx_critical_ratio, peak, pure_critical_ratio

log = logging.getLogger("certdp")


def _grid(g: dict) -> np.ndarray:
    vals = g.get("values")
    if vals:
        try:
            out = np.array([float(v) for v in vals])
        except (TypeError, ValueError):
            raise ConfigError("feasibility.confidence.values", f"must be numbers in (0, 1) (got {vals!r})")
    else:
        try:
            start, stop, step = float(g.get("start", 0.001)), float(g.get("stop", 0.999)), float(g.get("step", 0.001))
        except (TypeError, ValueError):
            raise ConfigError("feasibility.confidence", "start, stop and step must be numbers")
        if not step > 0 or stop < start:
            raise ConfigError("feasibility.confidence", f"needs step > 0 and stop >= start (got {start}, {stop}, {step})")
        out = np.round(np.arange(start, stop + step / 2, step), 12)
    if len(out) == 0 or np.any(out <= 0) or np.any(out >= 1):
        raise ConfigError("feasibility.confidence", "every confidence 1 - alpha must lie strictly between 0 and 1")
    return np.unique(out)


def _list(v, key: str, lo: float, hi: float, allowed: str) -> list[float]:
    vs = v if isinstance(v, (list, tuple)) else [v]
    out = []
    for x in vs:
        try:
            x = float(x)
        except (TypeError, ValueError):
            raise ConfigError(key, f"must be {allowed} (got {x!r})")
        if not lo < x < hi:
            raise ConfigError(key, f"must be {allowed} (got {x})")
        out.append(x)
    if not out:
        raise ConfigError(key, f"needs at least one value ({allowed})")
    return out


def run(cfg: dict, *, progress: bool = True) -> dict[str, pd.DataFrame]:
    f = dict(cfg.get("feasibility") or {})
    conf = _grid(dict(f.get("confidence") or {}))
    cs = _list(f.get("c", [1, 2, 3]), "feasibility.c", 0, float("inf"), "numbers > 0")
    deltas = _list(f.get("delta", 1e-5), "feasibility.delta", 0, 1, "numbers in (0, 1)")
    factor = _list(f.get("cauchy_factor", 6), "feasibility.cauchy_factor", 0, float("inf"), "a number > 0")[0]
    win = f.get("approx_window", [0.8, 1.0]) or [0.0, 1.0]
    if not (isinstance(win, (list, tuple)) and len(win) == 2 and 0 <= float(win[0]) < float(win[1]) <= 1):
        raise ConfigError("feasibility.approx_window", f"must be [lo, hi] with 0 <= lo < hi <= 1 (got {win!r})")
    wlo, whi = float(win[0]), float(win[1])

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
    return {"results": res, "peaks": pk}
