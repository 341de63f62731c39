"""How long a run will take, from its settings alone, on this machine: ``certdp figures --list``
for the figures no run of which was measured here, and the line a run logs before it starts.

**The model.**  The long phases of every data command are loops of steps whose cost is linear
in what one step touches: nominal training and every trained baseline (DP-SGD, PATE teachers and
students, shard models) cost ``o_g + u_g * B * P`` seconds per step (B records in the step, P
parameters); AGT costs ``o_e + u_e * K * B * P`` per step for engine ``e`` (K radii, one box
each).  The work of a run (how many steps of which size in each phase) follows from its
resolved settings and the dataset's size, which every dataset declares from its settings alone
(:func:`certdp.data.dataset_size`: public metadata, no file is read).  Nothing here reads a
record; a time estimate is the researcher's, not a release.

**The rates** (``o``, ``u``) are this machine's and this device's: :func:`calibrate` times the
real code (:func:`certdp.training.train`, :func:`certdp.agt.run_agt`) on synthetic data at two
sizes and solves for the per-step overhead and the per-element cost; the result is cached in
``$CERTDP_CACHE/timing/`` (per device, torch and certdp version, engine and model family), so a
machine calibrates once (a few seconds per engine).

**Not modelled** (the estimate then says "at least" and names it): a solver's time (MILP and
exact windows), CROWN through time (its cost grows with the window, not per step), a sentence encoder's embeddings (cached after the first run), the hybrid's
DP-LoRA fine-tunes, the audits, and a dataset whose size is known only once read (a csv).
Measured against real runs: docs/resume-and-progress.md."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

log = logging.getLogger("certdp")

RUN_OVERHEAD_S = 5.0          # a run's start (imports, Hydra, the dataset's load) and its CSVs (measured 5-7 s)
MODELLED_ENGINES = ("ibp", "crown")    # per-step engines, linear in K*B*P; the others' time is not modelled


# ---------------------------------------------------------------------------- the work of a run
@dataclass
class Work:
    """A run's loops: ``train`` [(steps, elements per step)] of training-like steps (B*P) and
    ``agt`` {engine key: [(steps, elements per step)]} of AGT steps (K*B*P); ``unmodelled``
    names what the estimate leaves out."""
    train: list[tuple[float, float]] = field(default_factory=list)
    agt: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    unmodelled: list[str] = field(default_factory=list)

    def add_agt(self, key: str, steps: float, elements: float) -> None:
        self.agt.setdefault(key, []).append((float(steps), float(elements)))

    def elements(self) -> float:
        """Every loop's steps x elements, summed."""
        return sum(s * e for s, e in self.train) + sum(s * e for loops in self.agt.values() for s, e in loops)


def _family(arch: str) -> str:
    """The calibrated model family of an architecture: ``mlp`` or ``linear`` (linear and softmax heads)."""
    return "mlp" if arch == "mlp" else "linear"


def _arch(settings) -> str:
    """The run's architecture (``model.arch=auto``: the dataset's default)."""
    arch = getattr(getattr(settings, "model", None), "arch", "linear")
    return (dict(settings.dataset).get("model") or {}).get("arch", "linear") if arch == "auto" else arch


def engine_key(certificate, arch: str, elements: float = math.inf) -> str:
    """The calibration key of an engine on a model family for steps of ``elements`` (K*B*P):
    ``ibp-tau/mlp``, ``crown/linear`` ...; IBP's tau sums are compiled only for steps of at least
    :data:`certdp.bounds.ibp.COMPILE_MIN_ELEMENTS` (``ibp-taueager`` below: another rate)."""
    from certdp.bounds.ibp import COMPILE_MIN_ELEMENTS
    name = certificate.name
    if name == "ibp":
        agg = str(certificate.option("aggregation", "topk"))
        name += "-" + ("taueager" if agg == "tau" and elements < COMPILE_MIN_ELEMENTS else agg)
    return f"{name}/{_family(arch)}"


def work_of(settings) -> Work | None:
    """The loops of a run of ``settings`` (:class:`certdp.settings.experiment.ExperimentSettings`
    or a command without data), or None when the run's size is unknown before its data is read."""
    from certdp.data import dataset_size
    from certdp.models import n_params_of

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
    arch = _arch(settings)
    hidden = settings.model.hidden or tuple((ds.get("model") or {}).get("hidden") or ())
    widths = (d, *[int(h) for h in hidden], n_out) if arch == "mlp" else (d, n_out)
    P = n_params_of(widths)
    tr = settings.train
    shards = getattr(settings, "shards", None)
    if shards is not None and shards.max_train:
        n = min(n, shards.max_train)
    T = tr.steps
    B = n if tr.batch_size is None else min(tr.batch_size, n)
    cert = settings.certificate
    window = cert.name not in MODELLED_ENGINES
    share = getattr(getattr(settings, "ags", None), "share_ratio", None)

    def agt(steps: float, k: int, b: int) -> None:
        if window:
            w.train.append((steps, b * P))                 # the nominal track; the solves are not modelled
            return
        if share:                                          # shared boxes: one per point of the ratio grid
            k = min(k, int(math.log(max(k, 1)) / math.log(share)) + 3)
        w.add_agt(engine_key(cert, arch, k * b * P), steps, k * b * P)

    if window:
        w.unmodelled.append(f"the {cert.name} engine's time" if cert.name == "crowntt" else f"the {cert.name} solver's time")
    K = len(settings.staircase.radii(n))
    w.train.append((T, B * P))                             # nominal training
    if command in ("agtr", "certify"):
        agt(T, K, B)
    elif command == "ags":
        st, pv = settings.ags, settings.privacy
        agt(T, K, B)
        if st.releases_n > 1:                              # every draw re-certifies the later windows
            redo = T * (st.releases_n - 1) / st.releases_n
            agt(redo * pv.n_draws * len(pv.releases) * len(pv.epsilons), K, B)
        for nr in st.ablation_n:
            agt(T, K, B)
            cells = len(pv.epsilons) * len(st.ablation_compositions) * st.ablation_draws
            agt(T * (nr - 1) / nr * cells, K, B)
        _baselines(w, settings, st.baselines, st.baseline_draws or pv.n_draws, n, B, P)
    elif command == "dpsgd":
        arms = settings.baselines.arms or ("dpsgd_matched", "dpsgd_optimised")
        _baselines(w, settings, arms, settings.privacy.n_draws, n, B, P)
    elif command == "pate":
        smooth = any(m.kind == "smooth" for m in settings.privacy.mechanisms())
        if smooth and "agtr" in shards.arms:
            radii = settings.staircase if shards.full_staircase == "agtr" else shards.staircase
            agt(T, len(radii.radii(n)), n)
        for m in shards.shards:
            w.train.append((T, n * P))                     # the m shard models, vectorised
            if smooth and any(a in shards.arms for a in ("pate_agtr", "agtr_wor")) and m > 1:
                size = max(1, n // m)                      # one AGT pass per shard, in turn
                agt(T * m, len(shards.staircase.radii(size)), size)
    else:
        w.unmodelled.append(f"certdp {command}")
    return w


def _baselines(w: Work, settings, arms, draws: int, n: int, B: int, P: int) -> None:
    """The trained baselines of AGS / dpsgd: matched DP-SGD (draws trajectories per budget and
    regime), the optimised grid (every candidate once per budget, the chosen one again per
    further accountant), PATE (teachers once, a student per budget, regime and query count)."""
    tr, pv, bl = settings.train, settings.privacy, settings.baselines
    n_eps = len(pv.epsilons)
    for arm in ("dpsgd_matched", "dpsgd_matched_basic"):
        if arm in arms:
            w.train.append((tr.steps * 2 * n_eps, draws * B * P))
    if "dpsgd_optimised" in arms:
        g = bl.grid
        per = sum(ep * n for ep in g.epochs) * len(g.batch_size) * len(g.lr) * len(g.clip)
        again = max(g.epochs) * n * max(0, len(bl.accountants) - 1)
        w.train.append((n_eps, (per + again) * P))
    if "pate" in arms:
        w.train.append((tr.steps * len(bl.teachers), n * P))
        student = min(tr.steps, bl.student_steps)
        w.train.append((student * 2 * n_eps * len(bl.teachers), sum(bl.queries) * P))


# ---------------------------------------------------------------------------- the rates
@dataclass(frozen=True)
class Rate:
    """Seconds per step: ``overhead + unit * elements``."""
    overhead: float
    unit: float

    def seconds(self, steps: float, elements: float) -> float:
        return steps * (self.overhead + self.unit * elements)


def _cache_file(device: torch.device) -> Path:
    from certdp import __version__
    from certdp.data.sources import cache_dir
    where = device.type if device.type == "cpu" else torch.cuda.get_device_name(device).replace(" ", "_")
    tag = f"{platform.node() or 'host'}-{where}-{os.cpu_count()}cpu-torch{torch.__version__}-certdp{__version__}"
    return cache_dir() / "timing" / f"{tag}.json"


def _read_cache(device: torch.device) -> dict:
    try:
        return json.loads(_cache_file(device).read_text())
    except (OSError, ValueError):
        return {}


def _write_cache(device: torch.device, table: dict) -> None:
    from certdp.results import atomic_write_text
    path = _cache_file(device)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(table, indent=1, sort_keys=True))
    except OSError:
        pass                                       # an unwritable cache: calibrate again next time


def _timed(fn, reps: int = 2) -> float:
    best = math.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


# (records, radii) of the two calibration problems: a small one (a step's fixed cost) and one
# large enough that the per-element cost dominates (4,096 x 8 boxes of an 8-32-1 MLP: 10.5M
# elements a step, above IBP's compile threshold); CROWN's passes are heavier, its problems smaller;
# the softmax head (27 parameters, 12x fewer than the MLP) gets more records
CALIBRATION_SIZES = {("default", "mlp"): ((256, 2), (4096, 8)), ("crown", "mlp"): ((128, 2), (2048, 8)),
                     ("default", "linear"): ((512, 2), (16384, 8)), ("crown", "linear"): ((128, 2), (4096, 8))}


def _problem(arch: str, n: int, device):
    """A synthetic problem of the family: an 8-32-1 ReLU regression (``mlp``) or a softmax head
    of 8 inputs and 3 classes (``linear``: the families' typical losses, MSE and softmax CE)."""
    from certdp.models import build_model
    g = torch.Generator().manual_seed(0)
    x = torch.rand(n, 8, generator=g, dtype=torch.float64) * 2 - 1
    if arch == "mlp":
        return build_model("mlp", 8, hidden=(32,), n_out=1, loss="mse"), x.to(device), (x.sum(1) * 0.3).to(device)
    y = torch.randint(0, 3, (n,), generator=g)
    return build_model("logistic", 8, n_out=3), x.to(device), y.to(device)


def calibrate_key(key: str, device: torch.device) -> Rate:
    """Time one engine key (or ``train/<family>``) at two sizes on ``device`` (torch.compile's
    own warnings silenced meanwhile: a run's stderr stays the run's)."""
    quiet = [logging.getLogger(n) for n in ("torch._dynamo", "torch._inductor")]
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(logging.ERROR)
    try:
        return _calibrate_key(key, device)
    finally:
        for q, lv in zip(quiet, levels):
            q.setLevel(lv)


@contextlib.contextmanager
def _no_compile(on: bool):
    """``CERTDP_NO_COMPILE=1`` for the duration (when ``on``), as it was afterwards."""
    old = os.environ.get("CERTDP_NO_COMPILE")
    if on:
        os.environ["CERTDP_NO_COMPILE"] = "1"
    try:
        yield
    finally:
        if on and old is None:
            os.environ.pop("CERTDP_NO_COMPILE", None)
        elif on:
            os.environ["CERTDP_NO_COMPILE"] = old


def _calibrate_key(key: str, device: torch.device) -> Rate:
    from certdp.agt import run_agt
    from certdp.bounds import get_certificate
    from certdp.training import TrainSettings, train

    what, arch = key.split("/")

    def timer(n: int, k: int, steps: int) -> tuple[float, int]:
        """(best seconds of a pass of ``steps`` steps after a warm-up, elements per step)."""
        st = TrainSettings(steps=steps, lr=0.01, clip=0.1, batch_size=None, contraction=1.0, seed=0)
        model, x, y = _problem(arch, n, device)
        theta = model.init(0).to(device)
        if what == "train":
            def go():
                train(model, theta, x, y, st, device=device)
            elements = n * model.n_params
        else:
            name, _, agg = what.partition("-")
            eager = agg == "taueager"
            engine = get_certificate(name, **({"aggregation": "tau" if eager else agg} if agg else {}))

            def go():
                with _no_compile(eager):                          # the eager tau sums of small steps
                    run_agt(model, theta, x, y, st, range(1, k + 1), certificate=engine, progress=False, device=device)
            elements = k * n * model.n_params
        go()                                                  # compile, allocate
        return _timed(go), elements

    sizes = CALIBRATION_SIZES["crown" if what.startswith("crown") else "default", arch]
    return solve_rate(timer, sizes, large_steps=16 if what == "train" else 4)


def solve_rate(timer, sizes, *, large_steps: int = 4) -> Rate:
    """The rate from three timed passes: the small problem over 4 and 32 steps (their difference
    is 28 steps' fixed cost, without the pass's setup), then the large one (its per-element
    cost, setup and fixed cost removed).  ``timer(n, k, steps)`` -> (seconds, elements a step)."""
    (n0, k0), (n1, k1) = sizes
    ta, e0 = timer(n0, k0, 4)
    tb, _ = timer(n0, k0, 32)
    small = max((tb - ta) / 28, 0.0)                         # a small step: overhead + unit * e0
    setup = max(ta - 4 * small, 0.0)
    t, e1 = timer(n1, k1, large_steps)
    large = max(t - setup, 0.0) / large_steps                # a large step: overhead + unit * e1
    unit = max((large - small) / (e1 - e0), 1e-15)
    return Rate(max(small - unit * e0, 0.0), unit)


def rates(keys, device, *, calibrate: bool = True) -> dict[str, Rate]:
    """The rates of ``keys`` on ``device``: cached, or calibrated now (``calibrate``) and cached;
    a key neither cached nor calibrated is left out."""
    device = torch.device(device)
    table = _read_cache(device)
    out, new = {}, False
    for key in sorted(set(keys)):
        if key not in table and calibrate:
            log.info("estimate: timing %s on %s (once for this machine: cached in %s)", key, device,
                     _cache_file(device).parent)
            try:
                r = calibrate_key(key, device)
            except Exception:                              # an engine that cannot run here: no rate
                continue
            table[key] = {"overhead": r.overhead, "unit": r.unit}
            new = True
        if key in table:
            out[key] = Rate(float(table[key]["overhead"]), float(table[key]["unit"]))
    if new:
        _write_cache(device, table)
    return out


# ---------------------------------------------------------------------------- the estimate
@dataclass
class Estimate:
    seconds: float
    unmodelled: tuple[str, ...] = ()

    def text(self) -> str:
        from certdp.checkpoint import duration
        core = duration(self.seconds, minute_digits=0)
        return core if not self.unmodelled else f">= {core} (not counted: {'; '.join(self.unmodelled)})"


def keys_of(settings, work: Work) -> list[str]:
    """The rates a run's work needs: its family's training rate first, then its AGT engines'."""
    return [f"train/{_family(_arch(settings))}", *work.agt]


def estimate(settings, *, device=None, calibrate: bool = True, work: Work | None = None) -> Estimate | None:
    """The estimated seconds of a run of ``settings`` on ``device`` (default: the run's own),
    or None when its size is unknown or a rate is missing (``calibrate=False``, nothing cached).
    ``work``: the run's :func:`work_of`, when the caller has it."""
    work = work_of(settings) if work is None else work
    if work is None:
        return None
    run = getattr(settings, "run", None)
    dev = torch.device(device if device is not None else getattr(run, "device", "cpu") or "cpu")
    keys = keys_of(settings, work)
    if not work.train and not work.agt:
        return Estimate(RUN_OVERHEAD_S, tuple(work.unmodelled))
    table = rates(keys, dev, calibrate=calibrate)
    if any(k not in table for k in keys):
        return None
    g = table[keys[0]]
    sec = RUN_OVERHEAD_S + sum(g.seconds(s, e) for s, e in work.train)
    sec += sum(table[k].seconds(s, e) for k, loops in work.agt.items() for s, e in loops)
    return Estimate(sec, tuple(work.unmodelled))


# ---------------------------------------------------------------------------- before a run starts
LONG_RUN_S = 600.0          # a run estimated longer than this says so before it starts
# the fastest rate (seconds per element) a device is credited with when deciding whether a run
# is big enough to be worth timing this machine for (10x below the measured IBP rates)
OPTIMISTIC_UNIT = {"cpu": 5e-10, "cuda": 2e-12}
CALIBRATE_ABOVE_S = 30.0    # ... : when its work at that rate exceeds this (the timing takes ~20-60 s once)


def announce(settings) -> Estimate | None:
    """Before a run starts: when its settings estimate exceeds :data:`LONG_RUN_S`, log it with
    what would make it faster.  Rates come from the cache; a run whose work at the optimistic
    rate exceeds :data:`CALIBRATE_ABOVE_S` times this machine first (once).  Advisory: any
    failure is silent (a run never fails for its estimate)."""
    try:
        work = work_of(settings)
        if work is None:
            return None
        dev = torch.device(getattr(settings.run, "device", "cpu") or "cpu")
        big = work.elements() * OPTIMISTIC_UNIT.get(dev.type, OPTIMISTIC_UNIT["cuda"]) >= CALIBRATE_ABOVE_S
        est = estimate(settings, device=dev, calibrate=big, work=work)
    except Exception:
        return None
    if est is None or est.seconds < LONG_RUN_S:
        return est
    from certdp.checkpoint import duration
    faster = ([] if dev.type == "cuda" else ["a GPU (device=cuda)"]) + ["fewer radii (staircase.k_max)",
                                                                       "fewer train.steps or a quick profile"]
    log.info(
        "estimate from the settings: about %s on %s for the whole run%s; faster: %s; it saves a checkpoint every "
        "checkpoint_minutes and on SIGINT/SIGTERM (certdp resume RUN_DIR continues it)",
        duration(est.seconds), dev, f" (not counted: {'; '.join(est.unmodelled)})" if est.unmodelled else "",
        ", ".join(faster))
    return est
