"""How long a run will take, from its settings alone, on this machine: ``certdp figures --list``
for the figures no run of which was measured here, and the line a run logs before it starts.

**The model.**  The long phases of every data command are loops of steps whose time is affine
in what one step touches: nominal training and every trained baseline (DP-SGD, PATE teachers
and students, shard models) take ``o + u * B * P`` seconds a step (B records in the step, P
parameters); AGT takes ``o + u * K * B * P`` a step for its engine (K radii it computes: those
below the batch, or below an epoch's slots for the per-epoch ledger).  The work of a run (how
many steps of which size in each phase) follows from its resolved settings and the dataset's
size, which every dataset declares from its settings alone (:func:`certdp.data.dataset_size`:
public metadata, no file is read).  Nothing here reads a record; a time estimate is the
researcher's, not a release.

**The rates** (``o``, ``u``) are this machine's for the run's own model shape, loss and engine
(:mod:`certdp.estimate.rates`: timed robustly, refused when implausible, cached per machine, torch,
certdp and code, re-timed when stale, scaled by the load now).  An estimate carries a band
(:class:`Estimate`: "about 3 min (1.5-6 min)") from the model's measured error, the timing's
spread and how far the load moved since the timing.

**A resumed run** (a checkpoint's saved loops, :mod:`certdp.checkpoint`) is estimated for what
is left: a loop the checkpoint finished counts nothing, one it saved at step s counts from s.

**Not modelled** (the estimate then says "at least" and names it; with nothing else to count it
says "no estimate"): a solver's time (MILP and exact windows), CROWN through time, a sentence
encoder's embeddings (cached after the first run), the hybrid's DP-LoRA fine-tunes, the audits,
and a dataset whose size is known only once read (a csv).  Measured against real runs:
docs/resume-and-progress.md and benchmarks/estimate_accuracy.py."""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field

import torch

from certdp.estimate import rates as R
from certdp.estimate.rates import Spec

log = logging.getLogger("certdp")

RUN_OVERHEAD_S = 5.0          # a run's start (imports, Hydra, the dataset's load) and its CSVs (measured 5-7 s idle)
MODELLED_ENGINES = ("ibp", "crown")    # per-step engines, affine in K*B*P; the others' time is not modelled
# the estimate / measured ratios of benchmarks/estimate_accuracy.py lie within this factor either
# way on an idle machine (docs/resume-and-progress.md); the band is at least this wide
BAND = 2.0
MAX_BAND = 20.0


# ---------------------------------------------------------------------------- the work of a run
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
                   dict(self.specs), self.train_spec, dict(self.tags), {k: list(v) for k, v in self.other.items()})
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


def work_of(settings) -> Work | None:
    """The loops of a run of ``settings`` (:class:`certdp.settings.experiment.ExperimentSettings`
    or a command without data), or None when the run's size is unknown before its data is read."""
    from certdp.data import dataset_size

    command = getattr(settings, "command", None) or getattr(getattr(settings, "run", None), "command", "")
    w = Work()
    if command == "feasibility":
        return w
    if command == "hybrid":
        w.unmodelled.append("the hybrid's encoder and DP-LoRA fine-tunes")
        return w
    if command in ("audit", "dpaudit"):
        w.unmodelled.append(f"the {command} retrainings")
        return w
    ds = dict(settings.dataset)
    size = dataset_size(ds)
    if size is None:
        return None
    n, d, n_out = size
    if ds.get("name") in ("imdb", "sst2"):
        w.unmodelled.append("the sentence encoder's embeddings (cached after the first run)")
    widths, loss = _shape(settings, d, n_out)
    P = Spec(widths, loss).n_params
    tr = settings.train
    shards = getattr(settings, "shards", None)
    if shards is not None and shards.max_train:
        n = min(n, shards.max_train)
    T = tr.steps
    B = n if tr.batch_size is None else min(tr.batch_size, n)
    w.train_spec = Spec(widths, loss, hint=B * P)
    cert = settings.certificate
    window = cert.name not in MODELLED_ENGINES
    engine, agg, subs = _engine(cert)
    share = getattr(getattr(settings, "ags", None), "share_ratio", None)

    def agt(steps: float, radii: list[int], b: int, n_pass: int, tag: str | None = None) -> None:
        if window:
            w.train.append((steps, b * P))                 # the nominal track; the solves are not modelled
            return
        E = n_pass // b if subs == "per_epoch" and b < n_pass else 0
        limit = b * E if E >= 2 else b                     # the radii AGT computes (agt.run_agt)
        k = sum(1 for r in radii if r < limit)
        if share:                                          # shared boxes: one per point of the ratio grid
            k = min(k, int(math.log(max(k, 1)) / math.log(share)) + 3)
        el = k * b * P
        compiled = None
        if agg == "tau":
            from certdp.bounds.ibp import COMPILE_MIN_ELEMENTS
            compiled = el >= COMPILE_MIN_ELEMENTS
        spec = Spec(widths, loss, engine, batch=b, kind="agt", minibatch=E >= 2, compiled=compiled, hint=el)
        if tag:
            w.tags[tag] = ("agt", spec.key, len(w.agt.get(spec.key, [])))
        w.add_agt(spec, steps, el)

    if window:
        w.unmodelled.append(f"the {cert.name} engine's time" if cert.name == "crowntt" else f"the {cert.name} solver's time")
    radii = settings.staircase.radii(n)
    w.train.append((T, B * P))                             # nominal training
    if command in ("agtr", "certify", "ags"):
        w.tags["nominal#0"] = ("train", None, 0)
    if command in ("agtr", "certify"):
        agt(T, radii, B, n, "agt#0")
    elif command == "ags":
        st, pv = settings.ags, settings.privacy
        agt(T, radii, B, n, "agt#0")
        if st.releases_n > 1:                              # every draw re-certifies the later windows
            redo = T * (st.releases_n - 1) / st.releases_n
            agt(redo * pv.n_draws * len(pv.releases) * len(pv.epsilons), radii, B, n)
        for nr in st.ablation_n:
            agt(T, radii, B, n)
            cells = len(pv.epsilons) * len(st.ablation_compositions) * st.ablation_draws
            agt(T * (nr - 1) / nr * cells, radii, B, n)
        _baselines(w, settings, st.baselines, st.baseline_draws or pv.n_draws, n, B, P)
    elif command == "dpsgd":
        arms = settings.baselines.arms or ("dpsgd_matched", "dpsgd_optimised")
        _baselines(w, settings, arms, settings.privacy.n_draws, n, B, P)
    elif command == "pate":
        smooth = any(m.kind == "smooth" for m in settings.privacy.mechanisms())
        if smooth and "agtr" in shards.arms:
            st = settings.staircase if shards.full_staircase == "agtr" else shards.staircase
            agt(T, st.radii(n), n, n)
        for m in shards.shards:
            w.train.append((T, n * P))                     # the m shard models, vectorised
            if smooth and any(a in shards.arms for a in ("pate_agtr", "agtr_wor")) and m > 1:
                size = max(1, n // m)                      # one AGT pass per shard, in turn
                agt(T * m, shards.staircase.radii(size), size, size)
    else:
        w.unmodelled.append(f"certdp {command}")
    return w


def _baselines(w: Work, settings, arms, draws: int, n: int, B: int, P: int) -> None:
    """The trained baselines of AGS / dpsgd: matched DP-SGD (draws trajectories per budget and
    regime, its own rate), the optimised grid (every candidate's steps once per approximate
    budget, the chosen one again per further accountant, and a noise calibration per batch size
    and epoch count, or per further accountant: the accountants' rates), PATE (teachers once, a
    student per budget, regime and query count)."""
    from certdp.privacy.dpsgd_core import poisson_schedule
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
            calls = n_eps * (len(g.batch_size) * len(g.epochs) if i == 0 else 1)
            w.add_other(Spec((), "", (name, ()), kind="accountant"), calls, 0.0)
    if "pate" in arms:
        w.train.append((tr.steps * len(bl.teachers), n * P))
        student = min(tr.steps, bl.student_steps)
        w.train.append((student * 2 * n_eps * len(bl.teachers), sum(bl.queries) * P))


# ---------------------------------------------------------------------------- the estimate
@dataclass
class Estimate:
    """``seconds`` (the central estimate) within [``low``, ``high``]; ``unmodelled``: what it
    leaves out (then a lower bound); ``known``: False when the run is nothing but what the model
    leaves out; ``whole``: the whole run's seconds when this is what a resumed run has left."""
    seconds: float
    unmodelled: tuple[str, ...] = ()
    low: float | None = None
    high: float | None = None
    known: bool = True
    whole: float | None = None

    def text(self) -> str:
        """'about 3 min (1-6 min)'; '>= 40 s (20 s-2 min; not counted: ...)'; a resumed run's
        'about 2 min left (1-4 min; the whole run about 5 min)'; 'no estimate (not modelled: ...)'."""
        from certdp.checkpoint import duration
        if not self.known:
            return f"no estimate (not modelled: {'; '.join(self.unmodelled)})"
        core = (">= " if self.unmodelled else "about ") + duration(self.seconds, minute_digits=0)
        parts = [] if self.low is None or self.high is None else [duration_span(self.low, self.high)]
        if self.whole is not None:
            core += " left"
            parts.append(f"the whole run about {duration(self.whole, minute_digits=0)}")
        if self.unmodelled:
            parts.append(f"not counted: {'; '.join(self.unmodelled)}")
        return core + (f" ({'; '.join(parts)})" if parts else "")


def duration_span(lo: float, hi: float) -> str:
    """'1.5-6 min', '40 s-2 min': both ends in the upper end's unit where they share it."""
    from certdp.checkpoint import duration
    a, b = duration(lo, minute_digits=0), duration(hi, minute_digits=0)
    if a.split()[-1] == b.split()[-1]:
        return f"{a.rsplit(' ', 1)[0]}-{b}"
    return f"{a}-{b}"


def keys_of(settings, work: Work) -> list[str]:
    """The rates a run's work needs: its training rate first, then its AGT engines', then the
    baselines' (matched DP-SGD, the accountants)."""
    return ([work.train_spec.key] if work.train_spec is not None else []) + list(work.agt) + list(work.other)


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return 0.0


def busy() -> float:
    """How much the load now slows a run down: the load average over the cores, at least 1."""
    return max(1.0, _load() / max(1, os.cpu_count() or 1))


def overhead_s() -> float:
    """A run's start and end: :data:`RUN_OVERHEAD_S` on an idle machine, longer when the load
    average exceeds the cores (the imports are one thread: 20 s measured at load 10 on 2 cores)."""
    return RUN_OVERHEAD_S * busy()


def estimate(settings, *, device=None, calibrate: bool = True, work: Work | None = None, entries: dict | None = None,
             say=None, retime_moved: float | None = None, scaled: bool = True) -> Estimate | None:
    """The estimated seconds of a run of ``settings`` on ``device`` (default: the run's own),
    or None when its size is unknown or a rate is missing (``calibrate=False``, nothing cached).
    ``work``: the run's :func:`work_of`, when the caller has it; ``entries``: the checkpoint a
    resumed run continues (what is left is estimated); ``say``: progress lines while timing;
    ``retime_moved``: time a cached rate again when the load moved by more than this factor;
    ``scaled``: scale the rates by the load now (:func:`rates.probe`), else take them as timed."""
    work = work_of(settings) if work is None else work
    if work is None:
        return None
    run = getattr(settings, "run", None)
    dev = torch.device(device if device is not None else getattr(run, "device", "cpu") or "cpu")
    if not work.train and not work.agt and not work.other:
        if work.unmodelled:
            return Estimate(0.0, tuple(work.unmodelled), known=False)
        return Estimate(overhead_s(), low=overhead_s() / BAND, high=overhead_s() * BAND)
    specs = ([work.train_spec] if work.train_spec is not None else []) + list(work.specs.values())
    table = R.rates(specs, dev, calibrate_missing=calibrate, say=say, retime_moved=retime_moved)
    if any(s.key not in table for s in specs):
        return None
    probed = R.probe() if scaled and dev.type == "cpu" else None

    def now(r: R.Rate) -> float:
        return r.probe if probed is None else probed

    def seconds(w: Work) -> float:
        g = table[w.train_spec.key]
        sec = overhead_s() + sum(g.seconds(s, e, now(g)) for s, e in w.train)
        for k, loops in (*w.agt.items(), *w.other.items()):
            r = table[k]
            if any(s > 0 for s, _ in loops):
                sec += r.setup * now(r) / r.probe + sum(r.seconds(s, e, now(r)) for s, e in loops)
        return sec

    whole = seconds(work)
    sec = seconds(work.left(entries)) if entries else whole
    used = [table[s.key] for s in specs]
    moved = max(max(now(r) / r.probe, r.probe / now(r)) for r in used)
    # the band: the model's measured error, the repeats' spread, the load's move since the timing
    # (a rate scaled by the probe) and the load now (it may fall or rise during the run)
    spread = min(max(r.spread for r in used), 1.0)
    f = BAND * math.sqrt((1 + spread) * moved) * max(1.0, _load() / (os.cpu_count() or 1)) ** 0.25
    f = min(f * (2.0 if any(r.provisional for r in used) else 1.0), MAX_BAND)
    return Estimate(sec, tuple(work.unmodelled), sec / f, sec * f, whole=whole if entries else None)


# ---------------------------------------------------------------------------- before a run starts
LONG_RUN_S = 600.0          # a run estimated longer than this says so before it starts
# the fastest rate (seconds per element) a device is credited with when deciding whether a run
# is big enough to be worth timing this machine for (10x below the measured IBP rates)
OPTIMISTIC_UNIT = {"cpu": 5e-10, "cuda": 2e-12}
CALIBRATE_ABOVE_S = 30.0    # ... : when its work at that rate exceeds this (the timing takes ~5-30 s once)
RETIME_MOVED = 3.0          # such a run times a cached rate again when the load moved more than this
SLOWEST = 30.0              # a small run's cached estimate, this much slower, is still short: no probe


def announce(settings) -> Estimate | None:
    """Before a run starts: when its settings estimate exceeds :data:`LONG_RUN_S`, log it with its
    band and what would make it faster (a resumed run: what is left).  Rates come from the cache;
    a run whose work at the optimistic rate exceeds :data:`CALIBRATE_ABOVE_S` times this machine
    first (once, and again when the load moved more than :data:`RETIME_MOVED`) and scales by the
    load now (the optimistic time counts the load now: a busy machine makes a small run long); a smaller run probes the load only when its cached estimate, :data:`SLOWEST` times
    slower, would be long.  Advisory: any failure is silent (a run never fails for its estimate)."""
    from certdp import checkpoint
    try:
        work = work_of(settings)
        if work is None:
            return None
        entries = checkpoint.current().entries or None
        dev = torch.device(getattr(settings.run, "device", "cpu") or "cpu")
        # the optimistic time on this machine as loaded now: a run that is short on idle cores can
        # be long on busy ones (mnist5's CPU default: 28 s at the optimistic rate, 45 min of
        # AGT at load 10-20 on 2 cores, and it printed no estimate before the load counted here)
        unit = OPTIMISTIC_UNIT.get(dev.type, OPTIMISTIC_UNIT["cuda"]) * (busy() if dev.type == "cpu" else 1.0)
        big = work.left(entries).elements() * unit >= CALIBRATE_ABOVE_S
        est = estimate(settings, device=dev, calibrate=big, work=work, entries=entries,
                       retime_moved=RETIME_MOVED if big else None, scaled=big)
        if not big and est is not None and est.seconds * SLOWEST >= LONG_RUN_S:
            est = estimate(settings, device=dev, calibrate=False, work=work, entries=entries)
    except Exception:
        return None
    if est is None or not est.known or est.seconds < LONG_RUN_S:
        return est
    faster = ([] if dev.type == "cuda" else ["a GPU (device=cuda)"]) + ["fewer radii (staircase.k_max)",
                                                                       "fewer train.steps or a quick profile"]
    log.info("estimate from the settings: %s on %s for %s; faster: %s; it saves a checkpoint every "
             "checkpoint_minutes and on SIGINT/SIGTERM (certdp resume RUN_DIR continues it)",
             est.text(), dev, "what is left of the run" if est.whole is not None else "the whole run", ", ".join(faster))
    return est
