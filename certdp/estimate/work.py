"""The work of a run: its loops, counted from its settings alone (no record is read), in the
terms the rates price (:mod:`certdp.estimate.rates`).  Each command's cost model lives with the
command (:mod:`certdp.commands`); this module is the vocabulary they count in: :class:`Work`,
the run's model shape, a text dataset's embeddings (:class:`Embedding`), its AGT loops
(:meth:`DataRun.agt`) and the trained baselines (:func:`baselines`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from certdp.estimate.rates import Spec

MODELLED_ENGINES = ("ibp", "crown")    # per-step engines, affine in K*B*P; the others' time is not modelled


@dataclass(frozen=True)
class Embedding:
    """A text dataset's embeddings left to compute: ``texts`` of ``total`` (the rest cached),
    ``encoder`` (its cache tag), ``device``, and ``seconds`` on two idle CPU cores (None on a
    GPU: not modelled); ``exact``: counted against the embedding cache (else from the settings
    alone, as if nothing were cached)."""
    texts: int
    total: int
    encoder: str
    device: str
    seconds: float | None
    exact: bool = False

    def text(self, seconds: float | None) -> str:
        where = f"{self.encoder} on {self.device}"
        if self.texts == 0:
            return f"embeddings: all {self.total:,} cached ({where})"
        from certdp.checkpoint import duration
        left = (f"{self.texts:,} of {self.total:,} texts to embed" if self.exact
                else f"{self.texts:,} texts to embed if none is cached")
        return (f"embeddings: about {duration(seconds, minute_digits=0)} of it, " if seconds is not None
                else "embeddings: not counted, ") + f"{left} ({where})"


def settings_embedding(ds: dict) -> Embedding | None:
    """A text dataset's embeddings from its settings alone (every text, nothing cached)."""
    if ds.get("name") not in ("imdb", "sst2"):
        return None
    from certdp.data import settings as dataset_settings
    from certdp.data.text_profiles import embedding_cost
    c = embedding_cost(ds["name"], dataset_settings(ds, ds["name"]))
    return Embedding(c["texts"], c["texts"], c["encoder"], c["device"], c.get("seconds"))


@dataclass
class Work:
    """A run's loops: ``train`` [(steps, elements per step)] of training-like steps (B*P),
    ``agt`` {rate key: [(steps, elements per step)]} of AGT steps (K*B*P) and ``other`` {rate
    key: [(steps or calls, elements)]} of the matched DP-SGD steps (draws*B*P) and the DP-SGD
    accountants' noise calibrations (calls); ``specs``: what each key times (``train_spec`` the
    training steps'); ``tags``: the checkpoint loop key of a loop ("agt#0" -> ("agt", key,
    index)); ``unmodelled`` names what the estimate leaves out."""
    train: list[tuple[float, float]] = field(default_factory=list)
    agt: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    unmodelled: list[str] = field(default_factory=list)
    specs: dict[str, Spec] = field(default_factory=dict)
    train_spec: Spec | None = None
    tags: dict[str, tuple] = field(default_factory=dict)
    other: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    embedding: Embedding | None = None

    def add_agt(self, spec: Spec, steps: float, elements: float) -> None:
        self.specs[spec.key] = spec
        self.agt.setdefault(spec.key, []).append((float(steps), float(elements)))

    def add_other(self, spec: Spec, steps: float, elements: float) -> None:
        self.specs[spec.key] = spec
        self.other.setdefault(spec.key, []).append((float(steps), float(elements)))

    def elements(self) -> float:
        """Every loop's steps x elements, summed."""
        return sum(s * e for s, e in self.train) + sum(s * e for loops in (*self.agt.values(), *self.other.values())
                                                       for s, e in loops)

    def left(self, entries: dict | None) -> "Work":
        """The work a run resumed from a checkpoint's ``entries`` (:func:`certdp.checkpoint.load`)
        has left: a tagged loop the checkpoint finished counts nothing, one saved at step s
        counts its steps after s; an untagged loop counts whole."""
        out = Work(list(self.train), {k: list(v) for k, v in self.agt.items()}, list(self.unmodelled),
                   dict(self.specs), self.train_spec, dict(self.tags), {k: list(v) for k, v in self.other.items()},
                   self.embedding)
        for ck, (kind, key, i) in self.tags.items():
            entry = (entries or {}).get(ck)
            if not isinstance(entry, dict):
                continue
            loops = out.train if kind == "train" else out.agt[key]
            steps, el = loops[i]
            done = steps if entry.get("done") else min(float(entry.get("step", 0)), steps)
            loops[i] = (steps - done, el)
        return out


def _arch(settings) -> str:
    """The run's architecture (``model.arch=auto``: the dataset's default)."""
    arch = getattr(getattr(settings, "model", None), "arch", "linear")
    return (dict(settings.dataset).get("model") or {}).get("arch", "linear") if arch == "auto" else arch


def _shape(settings, d: int, n_out: int) -> tuple[tuple[int, ...], str]:
    """(layer widths, loss) of the run's model, as :func:`certdp.certify.experiment._model`
    builds it: regression trains ``model.loss`` (mse), binary labels the hinge (softmax CE for
    the logistic model), several classes the softmax CE."""
    from certdp.data import entries
    ds = dict(settings.dataset)
    arch = _arch(settings)
    hidden = settings.model.hidden or tuple((ds.get("model") or {}).get("hidden") or ())
    task = entries()[ds["name"]].task
    if task == "regression":
        loss = getattr(settings.model, "loss", None) or "mse"
    else:
        loss = "hinge" if task == "binary" and arch != "logistic" else "ce"
    return ((d, *[int(h) for h in hidden], n_out) if arch == "mlp" else (d, n_out)), loss


def _engine(cert) -> tuple[tuple, str | None, str]:
    """((name, options) of the engine, its aggregation (IBP), its substitution budget)."""
    try:
        subs = cert.build().substitutions
    except Exception:
        subs = cert.option("substitutions", "per_batch")
    agg = str(cert.option("aggregation", "topk")) if cert.name == "ibp" else None
    return (cert.name, tuple(cert.options)), agg, subs


@dataclass
class DataRun:
    """What a command that trains on a dataset knows before it counts its own loops: the
    training rows ``n``, the batch ``B``, the parameters ``P``, the steps ``T``, the model's
    ``widths`` and ``loss``, the engine; ``work`` already holds nominal training (T steps of
    B*P) and what is not modelled."""
    work: Work
    n: int
    B: int
    P: int
    T: int
    widths: tuple[int, ...]
    loss: str
    window: bool
    engine: tuple
    agg: str | None
    subs: str
    share: float | None

    def agt(self, steps: float, radii: list[int], b: int, n_pass: int, tag: str | None = None) -> None:
        """An AGT pass of ``steps`` steps of batch ``b`` over ``n_pass`` rows, for ``radii``
        (tagged with the checkpoint loop key ``tag``): K*b*P elements a step, K the radii it
        computes; a window engine counts only its nominal track (its solves are not modelled)."""
        w, P = self.work, self.P
        if self.window:
            w.train.append((steps, b * P))                 # the nominal track; the solves are not modelled
            return
        E = n_pass // b if self.subs == "per_epoch" and b < n_pass else 0
        limit = b * E if E >= 2 else b                     # the radii AGT computes (agt.run_agt)
        k = sum(1 for r in radii if r < limit)
        if self.share:                                     # shared boxes: one per point of the ratio grid
            k = min(k, int(math.log(max(k, 1)) / math.log(self.share)) + 3)
        el = k * b * P
        compiled = None
        if self.agg == "tau":
            from certdp.bounds.ibp import COMPILE_MIN_ELEMENTS
            compiled = el >= COMPILE_MIN_ELEMENTS
        spec = Spec(self.widths, self.loss, self.engine, batch=b, kind="agt", minibatch=E >= 2, compiled=compiled,
                    hint=el)
        if tag:
            w.tags[tag] = ("agt", spec.key, len(w.agt.get(spec.key, [])))
        w.add_agt(spec, steps, el)


def data_run(settings, *, max_train: int | None = None, nominal_tag: bool = False) -> DataRun | None:
    """The :class:`DataRun` of ``settings`` (``max_train``: a cap on the training rows), or None
    when the dataset's size is known only once it is read.  ``nominal_tag``: nominal training is
    the checkpoint loop ``nominal#0``."""
    from certdp.data import dataset_size
    w = Work()
    ds = dict(settings.dataset)
    size = dataset_size(ds)
    if size is None:
        return None
    n, d, n_out = size
    w.embedding = settings_embedding(ds)
    widths, loss = _shape(settings, d, n_out)
    P = Spec(widths, loss).n_params
    tr = settings.train
    if max_train:
        n = min(n, max_train)
    T = tr.steps
    B = n if tr.batch_size is None else min(tr.batch_size, n)
    w.train_spec = Spec(widths, loss, hint=B * P)
    cert = settings.certificate
    window = cert.name not in MODELLED_ENGINES
    engine, agg, subs = _engine(cert)
    share = getattr(getattr(settings, "ags", None), "share_ratio", None)
    if window:
        w.unmodelled.append(f"the {cert.name} engine's time" if cert.name == "crowntt" else f"the {cert.name} solver's time")
    w.train.append((T, B * P))                             # nominal training
    if nominal_tag:
        w.tags["nominal#0"] = ("train", None, 0)
    return DataRun(w, n, B, P, T, widths, loss, window, engine, agg, subs, share)


# an accountant's noise calibration is timed at these budgets (each at eps = E, 1.25 E and 1.5 E,
# the median: 1.25 E).  Its time grows with eps: measured on this machine (q 0.25-0.32, 16-64
# steps, delta 1e-5), PLD 0.6 s at eps 1, 1.2 s at 10, 3.8 s at 50, 6.5 s at 100; RDP 0.17,
# 1.4, 2.9, 3.7 s; a single rate timed at eps 1-2 made the blobs estimate 3x short
# (benchmarks/results/estimate_accuracy.md)
ACCOUNTANT_EPS = (1.0, 8.0, 40.0)


def accountant_anchor(name: str, E: float) -> Spec:
    """The rate of one calibration of accountant ``name`` timed at about 1.25 ``E``."""
    return Spec((), "", (name, (("epsilon", float(E)),)), kind="accountant")


def accountant_calls(w: "Work", name: str, eps: float, calls: float) -> None:
    """``calls`` calibrations of ``name`` at budget ``eps``: linear in eps between the timed
    budgets (split between the two anchors' rates around it), the lowest one's below, and beyond
    the highest growing as sqrt(eps) (PLD 50 -> 100: 1.7x, RDP 1.3x)."""
    at = [1.25 * E for E in ACCOUNTANT_EPS]
    if eps <= at[0]:
        parts = [(0, 1.0)]
    elif eps >= at[-1]:
        parts = [(len(at) - 1, math.sqrt(eps / at[-1]))]
    else:
        i = max(j for j in range(len(at)) if at[j] <= eps)
        f = (eps - at[i]) / (at[i + 1] - at[i])
        parts = [(i, 1.0 - f), (i + 1, f)]
    for i, share in parts:
        if share > 0:
            w.add_other(accountant_anchor(name, ACCOUNTANT_EPS[i]), calls * share, 0.0)


def baselines(run: DataRun, settings, arms, draws: int) -> None:
    """The trained baselines of AGS / dpsgd: matched DP-SGD (draws trajectories per budget and
    regime, its own rate), the optimised grid (every candidate's steps once per approximate
    budget, the chosen one again per further accountant, and a noise calibration per batch size
    and epoch count, or per further accountant: the accountants' rates), PATE (teachers once, a
    student per budget, regime and query count)."""
    from certdp.privacy.dpsgd_core import poisson_schedule
    w, n, B, P = run.work, run.n, run.B, run.P
    tr, pv, bl = settings.train, settings.privacy, settings.baselines
    n_eps = len(pv.epsilons)
    spec = w.train_spec
    for arm in ("dpsgd_matched", "dpsgd_matched_basic"):
        if arm in arms:
            w.add_other(Spec(spec.widths, spec.loss, batch=B, kind="dpsgd"), tr.steps * 2 * n_eps, draws * B * P)
    if "dpsgd_optimised" in arms:
        g = bl.grid
        for bs in g.batch_size:
            for ep in g.epochs:
                b, _, steps = poisson_schedule(batch_size=bs, epochs=ep, n=n)
                w.train.append((n_eps * steps * len(g.lr) * len(g.clip), b * P))
        b, _, steps = poisson_schedule(batch_size=max(g.batch_size), epochs=max(g.epochs), n=n)
        w.train.append((n_eps * steps * max(0, len(bl.accountants) - 1), b * P))
        for i, name in enumerate(bl.accountants):
            for eps in pv.epsilons:
                accountant_calls(w, name, float(eps), len(g.batch_size) * len(g.epochs) if i == 0 else 1)
    if "pate" in arms:
        w.train.append((tr.steps * len(bl.teachers), n * P))
        student = min(tr.steps, bl.student_steps)
        w.train.append((student * 2 * n_eps * len(bl.teachers), sum(bl.queries) * P))
