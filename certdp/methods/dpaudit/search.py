"""The neighbour search of ``certdp dpaudit`` (package docstring): candidate datasets, D with one
private record at one placement replaced by an extreme record, a label flip or the configured
outlier; placements read from the batch plan alone, records in standardised units."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from certdp.certify import Experiment
from certdp.settings import ExperimentSettings


@dataclass(frozen=True)
class Candidate:
    """One dataset of the search: D with private record ``index`` replaced by (``x``, ``y``)
    (standardised features, None = the record's own; regression target in model units or a label
    code); ``index`` None is D itself.  ``search`` names the search that produced it
    (original | configured | extreme | label), ``record`` and ``placement`` say what and where."""

    index: int | None
    record: str
    search: str
    placement: str
    x: np.ndarray | None = None
    y: float | None = None


ORIGINAL = Candidate(None, "original", "original", "")


def placements(exp: Experiment, *, record: int, n: int) -> list[tuple[int, str]]:
    """The configured ``record`` and up to ``n`` indices chosen from the batch plan alone (never
    from the data): the most used index (ties: the latest used), the most used one of the final
    batch and of the last batch of the first epoch (each not chosen already), then the rest by
    (uses, last use)."""
    plan = exp.plan
    T, b = plan.shape
    N = exp.n_train
    flat = plan.reshape(-1)
    uses = torch.bincount(flat, minlength=N)
    steps = torch.arange(T).repeat_interleave(b)
    last = torch.full((N,), -1, dtype=torch.long).scatter_reduce(0, flat, steps, reduce="amax")
    key = uses * (T + 1) + last                      # more uses first, then the later last use
    order = [int(i) for i in torch.argsort(-key, stable=True)]

    def why(i, where):
        return f"{where} ({int(uses[i])} of {T} steps, last at step {int(last[i]) + 1})"

    out = [(record, why(record, "configured record"))]
    chosen = {record}
    groups = [(plan, "most used")]
    if b < N:
        groups.append((plan[-1], "final batch"))
        per_epoch = N // b
        if T > per_epoch:
            groups.append((plan[per_epoch - 1], "last batch of epoch 1"))
    groups.append((plan, "ranked by use"))
    for rows, where in groups:
        members = set(rows.reshape(-1).tolist())
        ids = [i for i in order if i not in chosen and i in members]
        take = ids if where == "ranked by use" else ids[:1]
        for i in take:
            if len(out) > n:
                break
            chosen.add(i)
            out.append((i, why(i, where)))
    return out


def _labels(exp: Experiment) -> tuple[int, ...]:
    """The label codes of a classification task (the hinge's -1/+1, else 0..C-1)."""
    if exp.model.loss.name == "hinge":
        return (-1, 1)
    return tuple(range(exp.dataset.n_classes or 2))


def records_at(exp: Experiment, index: int, placement: str, *, z: np.ndarray, y0, magnitudes, patterns,
               configured_shift: float | None) -> list[Candidate]:
    """The candidate records at ``index`` (module docstring); ``z``, ``y0``: the record's own
    standardised features and target or label code; ``configured_shift``: add the configured
    outlier (at the configured record only)."""
    regression = exp.dataset.task == "regression"
    out = []
    if configured_shift is not None:
        s = configured_shift
        xc = -s * z if np.abs(z).sum() > 0 else np.full_like(z, s)
        if regression:
            yc = float(y0) + s
        elif exp.model.loss.name == "hinge":
            yc = -int(y0)
        else:
            yc = (int(y0) + 1) % (exp.dataset.n_classes or 2)
        out.append(Candidate(index, f"configured shift {s:g}", "configured", placement, xc, yc))
    d = len(z)
    zero = np.zeros(d)
    if regression:
        for m in magnitudes:
            for pname, p in patterns:
                for sx in (-1, 0, 1):
                    if sx == 0 and pname != patterns[0][0]:
                        continue                                  # x = 0 once, not per pattern
                    for sy in (-1, 0, 1):
                        if sx == sy == 0:
                            continue
                        xs = "0" if sx == 0 else f"{sx * m:+g}*{pname}"
                        out.append(Candidate(index, f"x={xs} y={sy * m:+g}" if sy else f"x={xs} y=0", "extreme",
                                             placement, zero if sx == 0 else sx * m * p, float(sy * m)))
    else:
        labels = _labels(exp)
        for c in labels:
            out.append(Candidate(index, f"x=0 label {c}", "extreme", placement, zero, c))
            if c != int(y0):
                out.append(Candidate(index, f"own x, label {int(y0)} -> {c}", "label", placement, None, c))
        for m in magnitudes:
            for pname, p in patterns:
                for sx in (-1, 1):
                    for c in labels:
                        out.append(Candidate(index, f"x={sx * m:+g}*{pname} label {c}", "extreme", placement,
                                             sx * m * p, c))
    return out


class Datasets:
    """Builds D with one private record replaced: in the raw csv table followed by the dataset's
    whole preparation, or after preparation for every other dataset (module docstring)."""

    def __init__(self, settings: ExperimentSettings, exp: Experiment):
        self.exp = exp
        self.settings = settings
        self.raw = None
        if exp.dataset.name != "csv" or exp.dataset.preprocessing is None:
            return
        from certdp.data import settings as dataset_fields
        from certdp.data.tabular import load_table, split_rows, split_sizes
        s = dataset_fields(dict(settings.dataset), "csv")
        x, y, feats, info = load_table(s["path"], target=s["target"], features=s["features"], dropna=s["dropna"],
                                       labels=s["task"] != "regression")
        if info.get("rows_dropped"):
            return
        n = len(y)
        n_test, n_public = split_sizes(n, n_test=s.get("n_test"), n_public=s.get("n_public"))
        seed = settings.seed if s.get("split_seed") is None else s["split_seed"]
        priv, _, _ = split_rows(n, n_test=n_test, n_public=n_public, seed=seed)
        self.raw = {"s": s, "x": x, "y": y, "feats": feats, "info": info, "priv": priv}

    @property
    def built(self) -> str:
        return "raw table" if self.raw is not None else "prepared data"

    def own(self, index: int) -> tuple[np.ndarray, object]:
        """The record's standardised features and its target (model units) or label code."""
        e = self.exp
        if self.raw is None:
            y = e.y[index]
            return e.x[index].numpy().copy(), float(y) if e.dataset.task == "regression" else int(y)
        prep = e.dataset.preprocessing
        r = int(self.raw["priv"][index])
        z = (np.asarray(self.raw["x"][r], dtype=np.float64) - prep.shift) / prep.scale
        if e.dataset.task == "regression":
            return z, (float(self.raw["y"][r]) - prep.target_shift) / prep.target_scale
        return z, int(prep.encode_labels([self.raw["y"][r]])[0])

    def build(self, c: Candidate) -> Experiment:
        e = self.exp
        if c.index is None:
            return e
        if self.raw is None:
            x, y = e.x.clone(), e.y.clone()
            if c.x is not None:
                x[c.index] = torch.as_tensor(c.x, dtype=x.dtype)
            y[c.index] = c.y
            return e.on_data(x, y)
        from certdp.certify.experiment import _tensors
        from certdp.data.tabular import prepare_table
        prep = e.dataset.preprocessing
        raw = self.raw
        s, task = raw["s"], raw["s"]["task"]
        r = int(raw["priv"][c.index])
        x, y = raw["x"].copy(), raw["y"].copy()
        if c.x is not None:
            x[r] = prep.shift + prep.scale * c.x
        y[r] = prep.target_shift + prep.target_scale * c.y if task == "regression" else prep.decode_labels([c.y])[0]
        ds = prepare_table("csv", x, y, s, self.settings.seed, raw["info"], columns=raw["feats"], target=s["target"],
                           task=task)
        x_tr, y_tr, x_te, y_te = _tensors(ds)
        return dataclasses.replace(e, dataset=ds, x=x_tr, y=y_tr, xt=x_te, yt=y_te)


def candidates(settings: ExperimentSettings, exp: Experiment, data: Datasets) -> list[Candidate]:
    """Every candidate dataset of the search (D itself first); only the configured pair when
    ``dpaudit.search`` is false."""
    a = settings.dpaudit
    out = [ORIGINAL]
    if not a.search:
        z, y0 = data.own(a.record)
        return out + records_at(exp, a.record, "configured record", z=z, y0=y0, magnitudes=(), patterns=(),
                                configured_shift=a.shift)[:1]
    d = exp.x.shape[1]
    patterns = [("1", np.ones(d))]
    if d > 1 and settings.privacy.query == "prediction":
        sgn = np.sign(exp.xt[a.test_point].numpy())
        sgn[sgn == 0] = 1
        if not (np.all(sgn == 1) or np.all(sgn == -1)):
            patterns.append(("sign(x_t)", sgn))
    for index, why in placements(exp, record=a.record, n=a.placements):
        z, y0 = data.own(index)
        out += records_at(exp, index, why, z=z, y0=y0, magnitudes=sorted(set(a.magnitudes)), patterns=patterns,
                          configured_shift=a.shift if index == a.record else None)
    return out
