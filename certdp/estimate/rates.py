"""This machine's rates for the settings estimates (:mod:`certdp.estimate`): what a step of
nominal training or of an AGT engine costs here, ``overhead + unit x elements`` seconds, timed
on the run's own model shape and engine, robust to a shared, loaded machine.

**Timing a rate** (:func:`calibrate`) runs the real code (:func:`certdp.training.train`,
:func:`certdp.agt.run_agt` with the run's engine and options, torch's threads as a run has
them) on synthetic data of the run's model (widths and loss) and, for AGT, batches of the
run's size: first a small step (one radius: a step's fixed cost), then the largest step that
the time budget (:data:`BUDGET_S`) affords, up to a quarter of the run's own step (extrapolating
from small steps misleads on a loaded machine).  At each size: a warm-up pass (compiles,
allocates), then up to three passes of 2 steps; a step's time is their median (halved).  The
fit is ``overhead + unit x elements`` by least squares on the relative error over the sizes.

**Refused rates.**  A unit below :func:`unit_floor` (10x below what the fastest device could do
per element) or above :data:`UNIT_CEILING`, or a rate that is not finite, is timed again; a
second refusal keeps a conservative rate (the largest step's time over its elements: never
below the time per element of larger steps) for this process only, never cached.

**The load.**  On a loaded CPU a step is slower than its fair share of the cores: torch's OpenMP
threads spin at every barrier while a thread the scheduler took away catches up.  Measured on
this 2-core machine, 2026-11-28, with ``yes`` processes as the other load (a CROWN AGT pass, 10
steps x 64 radii of a 10-feature regression, 0.39 s on idle cores): 2 others 2.3-2.7x slower, 6
others 13-15x, 12 others 27-28x, which ((others + threads) / cores) ** 1.7 follows (2.0 with the
load average's own 1 taken off, 8.4, 24).  :func:`probe` is that factor from the load average
now; a rate keeps it at its timing and an estimate scales by the factor now over the factor
then.  (Until then :func:`probe` timed elementwise torch work, 8 ms idle: under the same loads it
read 2-20x, 34-41x and 66-73x, jumping between 16 and 160 ms at the lightest, and the estimates
of the README, California and blobs commands at load 3.5 came out 1.0, 5.4 and 4.0x the
measured time.)  The estimate's band (:mod:`certdp.estimate`) widens with the repeats' spread
and that ratio.

**The cache**: ``$CERTDP_CACHE/timing/`` (default ``~/.cache/certdp/timing``), one file per
host, device, CPU count, torch threads and ``OMP_WAIT_POLICY``, torch, certdp and fingerprint of
the timed code (:func:`fingerprint`: AGT, the engines, training, the models and losses, this
module): a change to any of them times afresh.  Each entry keeps when it was timed, the load
average and the probe then; an entry older than :data:`MAX_AGE_S` or refused on reading is timed
again.  A time estimate is the researcher's, not a release: nothing here reads a record."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

log = logging.getLogger("certdp")

FORMAT = 3                   # of a cache entry; another format is timed again (3: probe is a load factor)
MAX_AGE_S = 7 * 86400.0      # an entry older than this is timed again (a machine's software moves)
MAX_SIZES = 9
MAX_ELEMENTS = 1 << 28       # no timed step beyond this (memory)
MIN_TOP = 1 << 20            # a training-like rate is timed up to at least this many elements a step
UNIT_CEILING = 1e-3          # seconds per element: no engine is this slow per element
_FINGERPRINT: dict = {}


def unit_floor(device: torch.device) -> float:
    """The least plausible seconds per element on ``device``: an element of a step (one record,
    radius and parameter) needs at least a few floating-point operations; a CPU core does at most
    ~1e11 a second, an H100 ~7e13 (float64): the floors are 10x below."""
    if torch.device(device).type == "cpu":
        return 4e-12 / max(1, os.cpu_count() or 1)
    return 1e-14


# ---------------------------------------------------------------------------- what is timed
@dataclass(frozen=True)
class Spec:
    """What a rate times (``kind``): ``train``, nominal training (steps of ``b`` records, timed
    at several ``b``); ``agt``, an AGT engine ``(name, options)`` on batches of the run's
    ``batch`` records (its boxes the run's own size; timed at several numbers of radii);
    ``dpsgd``, the matched DP-SGD baseline (``batch`` records a step, timed at several numbers of
    draws); ``accountant``, one noise calibration of the DP-SGD accountant ``engine[0]`` at about
    1.25 times its option ``epsilon`` (seconds a call: no elements).  The model's ``widths`` and ``loss``; ``minibatch`` (batches smaller than
    the data: AGT's per-epoch ledger); ``compiled`` (IBP's fused tau sums, for steps of at least
    ``certdp.bounds.ibp.COMPILE_MIN_ELEMENTS``; None where it does not apply)."""
    widths: tuple[int, ...]
    loss: str
    engine: tuple | None = None
    batch: int = 0
    kind: str = "train"
    minibatch: bool = False
    compiled: bool | None = None
    hint: int = field(default=0, compare=False)     # elements of the run's own step (not in the key)

    @property
    def key(self) -> str:
        shape = "-".join(str(w) for w in self.widths) + f"-{self.loss}"
        if self.kind == "train":
            return f"train/{shape}"
        if self.kind == "dpsgd":
            return f"dpsgd/{shape}/b{self.batch}"
        if self.kind == "accountant":
            eps = dict(self.engine[1]).get("epsilon")
            return f"accountant/{self.engine[0]}" + ("" if eps is None else f"/eps{eps:g}")
        name, opts = self.engine
        regime = ("mb" if self.minibatch else "full") + {None: "", True: "+compiled", False: "+eager"}[self.compiled]
        return f"{name}[{','.join(f'{k}={v}' for k, v in opts)}]/{shape}/b{self.batch}/{regime}"

    @property
    def n_params(self) -> int:
        from certdp.models import n_params_of
        return n_params_of(self.widths)

    def size(self, elements: float) -> tuple[int, int]:
        """(records a step, radii) of a timed step of about ``elements`` (and at least one record
        or radius; every radius below the limit AGT computes)."""
        P = self.n_params
        if self.kind == "train":
            return max(2, math.ceil(elements / P)), 0
        b = max(2, self.batch)
        k = max(1, math.ceil(elements / (b * P)))
        return b, int(k if self.kind == "dpsgd" else min((4 * b if self.minibatch else b) - 1, k))

    def elements(self, b: int, k: int) -> int:
        return b * self.n_params * (1 if self.kind == "train" else k)

    def ladder(self) -> tuple[int, int]:
        """(smallest, largest) elements of a timed step: IBP's compiled regime starts at the
        compile threshold, its eager regime stays below it."""
        lo, hi = self.elements(*self.size(0)), MAX_ELEMENTS
        if self.compiled is not None:
            from certdp.bounds.ibp import COMPILE_MIN_ELEMENTS
            lo, hi = (max(lo, COMPILE_MIN_ELEMENTS), hi) if self.compiled else (lo, COMPILE_MIN_ELEMENTS - 1)
        return lo, hi

    def top(self) -> int:
        """The elements of the largest useful timed step: a quarter of the run's own, at least
        16x the smallest and, for training-like steps, :data:`MIN_TOP` (below it a step is all
        overhead and its cost per element cannot show)."""
        lo, hi = self.ladder()
        return int(min(hi, max(16 * lo, self.hint // 4, MIN_TOP if self.kind in ("train", "dpsgd") else 0)))


@dataclass(frozen=True)
class Rate:
    """A step of ``elements`` takes ``overhead + unit * elements`` seconds; ``setup``: seconds
    once per run (a compile); ``probe``: :func:`probe` at the timing (1 on a GPU); ``spread``: the
    relative disagreement of the repeats and of the fit; ``at``, ``load``: when, and the load
    average then; ``provisional``: a conservative rate after two refusals (never cached)."""
    overhead: float
    unit: float
    setup: float = 0.0
    probe: float = 1.0
    spread: float = 0.0
    at: float = 0.0
    load: float = 0.0
    provisional: bool = False

    def seconds(self, steps: float, elements: float, probe_now: float | None = None) -> float:
        """Seconds of ``steps`` steps of ``elements``, under the load of ``probe_now`` (default:
        the load at the timing)."""
        scale = 1.0 if probe_now is None else probe_now / self.probe
        return steps * (self.overhead + self.unit * elements) * scale

    def refused(self, device: torch.device, *, per_element: bool = True) -> str | None:
        """Why this rate cannot be this device's (None: plausible); ``per_element`` False: a rate
        of calls (an accountant), whose unit is 0."""
        nums = (self.overhead, self.unit, self.setup, self.probe, self.spread)
        if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in nums):
            return "a rate that is not finite"
        if not per_element:
            return None if 0 < self.overhead <= 600 and self.unit == 0 else "a call's time outside (0, 600] s"
        if not unit_floor(device) <= self.unit <= UNIT_CEILING:
            return f"{self.unit:.3g} s per element, outside [{unit_floor(device):.0e}, {UNIT_CEILING:.0e}]"
        if self.overhead < 0 or self.setup < 0 or self.probe <= 0 or self.spread < 0:
            return "a negative or zero part"
        return None


# ---------------------------------------------------------------------------- the load now
# the exponent of the load model (module docstring, The load)
SPIN_EXPONENT = 1.7


def probe(*, load: float | None = None) -> float:
    """How many times slower than on idle cores torch's work runs at ``load`` (the 1-minute load
    average; default: now): ``((others + threads) / cores) ** SPIN_EXPONENT``, at least 1, with
    ``others`` the load average less 1 (this process and noise) and ``threads`` torch's threads
    (at most the cores).  1 where the load average cannot be read."""
    load = load_average() if load is None else load
    if not math.isfinite(load):
        return 1.0
    cores = max(1, os.cpu_count() or 1)
    threads = min(torch.get_num_threads(), cores)
    return max(1.0, (max(0.0, load - 1.0) + threads) / cores) ** SPIN_EXPONENT


def load_average() -> float:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return float("nan")


# ---------------------------------------------------------------------------- timing
def real_timer(spec: Spec, device: torch.device):
    """The real code's timer of ``spec`` (:func:`certdp.estimate.timers.timer_of`)."""
    from certdp.estimate.timers import timer_of
    return timer_of(spec, device)


def fit_rate(points: list[tuple[float, float]]) -> tuple[float, float, float]:
    """(overhead, unit, largest relative residual) of ``cost = overhead + unit * elements`` over
    ``points`` [(elements, cost)], least squares on the relative error, both parts >= 0."""
    import numpy as np
    e = np.array([p[0] for p in points], float)
    c = np.maximum(np.array([p[1] for p in points], float), 1e-12)
    if len(points) == 1:                         # one size (a loaded machine's budget): through the origin
        return 0.0, float(c[0] / e[0]), 0.0
    A = np.stack([1 / c, e / c], 1)
    (o, u), *_ = np.linalg.lstsq(A, np.ones_like(c), rcond=None)
    if u <= 0:                                   # no growth with size: all overhead
        o, u = float(np.median(c)), 0.0
    elif o < 0:                                  # through the origin
        o, u = 0.0, float((e / c).sum() / ((e / c) ** 2).sum())
    resid = float(np.max(np.abs((o + u * e) / c - 1))) if len(c) else 0.0
    return float(o), float(u), resid


REPEATS = 3                  # timed passes a size, at most
GROWTH = 4                   # the second size is at least this many times the first
BUDGET_S = 30.0              # seconds of timed passes a rate (warm-ups and compiles aside), about


def _measure(spec: Spec, timer) -> tuple[list, float, float]:
    """Time the ladder: ([(elements, seconds a step)], setup seconds, spread at the largest size).
    The smallest step first (a step's fixed cost), then the largest the budget affords up to
    :meth:`Spec.top` (a quarter of the run's own step: on a loaded machine a small step's time
    per element says little about a large one's; at load 12 on 2 cores a one-radius step of the
    README run took 0.15-2.3 s and its 401-radius steps 33-51 s)."""
    lo, hi = spec.ladder()
    top = spec.top()
    points, setup, spread, spent = [], 0.0, 0.0, 0.0
    target = lo
    while len(points) < MAX_SIZES:
        b, k = spec.size(target)
        e = spec.elements(b, k)
        if points and (e > hi or e <= points[-1][0]):
            break
        warm = timer(b, k, 1)                      # compiles, allocates (not in the budget: the run pays it too)
        steps, size_spent = [], 0.0
        while len(steps) < REPEATS and (not steps or size_spent < BUDGET_S / 3):
            t = timer(b, k, 2)                     # the pass's own setup stays in: at most over-counted
            steps.append(t / 2)
            size_spent += t
        spent += size_spent
        step = statistics.median(steps)
        points.append((float(e), step))
        spread = (max(steps) - min(steps)) / max(step, 1e-9)
        if len(points) == 1:
            setup = max(0.0, warm - step)
        if e >= top:
            break
        # the next size: the largest useful one that the budget left affords (its step at most
        # proportionally dearer; two passes of 2 steps), and always a second one (4x at least:
        # one size cannot tell a step's overhead from its cost per element, and on a loaded
        # machine the overhead is most of a small step)
        target = min(top, e * max(BUDGET_S - spent, 0.0) / (4 * max(step, 1e-9)))
        if len(points) == 1:
            target = max(target, min(top, GROWTH * e))
        elif target < 1.5 * e:
            break
    return points, setup, spread


def calibrate(spec: Spec, device, *, timer=None) -> Rate:
    """Time ``spec`` on ``device`` (module docstring); ``timer``: :func:`real_timer`'s stand-in."""
    device = torch.device(device)
    quiet = [logging.getLogger(n) for n in ("torch._dynamo", "torch._inductor")]
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(logging.ERROR)          # torch.compile's own warnings: a run's stderr stays the run's
    try:
        timer = timer or real_timer(spec, device)
        cpu = device.type == "cpu"
        if spec.kind == "accountant":                  # seconds a call: the median of distinct calls
            p0, load = probe() if cpu else 1.0, load_average()
            calls = [timer(0, i, 1) for i in range(REPEATS)]
            return Rate(statistics.median(calls), 0.0, 0.0, p0, (max(calls) - min(calls)) / max(min(calls), 1e-9),
                        time.time(), load)
        for attempt in range(2):
            p0, load = probe() if cpu else 1.0, load_average()
            points, setup, spread = _measure(spec, timer)
            p1 = probe() if cpu else 1.0
            o, u, resid = fit_rate(points)
            rate = Rate(o, u, setup, (p0 + p1) / 2, spread + resid, time.time(), load)
            why = rate.refused(device)
            if why is None:
                return rate
            log.info("estimate: refused the rate of %s (%s); %s", spec.key, why,
                     "timing it again" if attempt == 0 else "keeping a conservative one, not cached")
        e, c = max(points)
        return Rate(0.0, min(max(c / e, unit_floor(device)), UNIT_CEILING), rate.setup, rate.probe,
                    max(rate.spread, 1.0), rate.at, rate.load, provisional=True)
    finally:
        for q, lv in zip(quiet, levels):
            q.setLevel(lv)


# ---------------------------------------------------------------------------- the cache
TIMED_CODE = ("agt", "training.py", "models.py", "losses.py", "kernels.py", "privacy/noise.py", "privacy/dpsgd_core.py",
              "privacy/accounting.py", "estimate/rates.py", "estimate/timers.py", "bounds")


def timed_files() -> list[Path]:
    """The source files of :data:`TIMED_CODE` (a package's subpackages included)."""
    root = Path(__file__).parent.parent
    return [f for name in TIMED_CODE for f in (sorted((root / name).rglob("*.py")) if (root / name).is_dir()
                                                else [root / name])]


def fingerprint() -> str:
    """SHA-256 (12 hex digits) of the source of the timed code (:func:`timed_files`)."""
    if "value" not in _FINGERPRINT:
        root, h = Path(__file__).parent.parent, hashlib.sha256()
        for f in timed_files():
            with contextlib.suppress(OSError):
                h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes())
        _FINGERPRINT["value"] = h.hexdigest()[:12]
    return _FINGERPRINT["value"]


def cache_file(device) -> Path:
    from certdp import __version__
    from certdp.data.sources import cache_dir
    device = torch.device(device)
    where = device.type if device.type == "cpu" else torch.cuda.get_device_name(device).replace(" ", "_")
    omp = os.environ.get("OMP_WAIT_POLICY", "").lower()
    tag = (f"{platform.node() or 'host'}-{where}-{os.cpu_count()}cpu-{torch.get_num_threads()}threads"
           f"{'-omp' + omp if omp else ''}-torch{torch.__version__}-certdp{__version__}-code{fingerprint()}")
    return cache_dir() / "timing" / f"{tag}.json"


def _read(device) -> dict:
    try:
        table = json.loads(cache_file(device).read_text())
        return table if isinstance(table, dict) else {}
    except (OSError, ValueError):
        return {}


def cached(device, key: str, *, now: float | None = None) -> tuple[Rate | None, str | None]:
    """(the cached rate of ``key``, None) or (None, why it is not used: absent, old, refused)."""
    entry = _read(device).get(key)
    if not isinstance(entry, dict):
        return None, "not timed yet"
    try:
        if entry.get("format") != FORMAT:
            raise ValueError("an older format")
        rate = Rate(**{f: entry[f] for f in Rate.__dataclass_fields__ if f != "provisional"})
    except (KeyError, TypeError, ValueError) as e:
        return None, f"unreadable ({e})"
    age = (time.time() if now is None else now) - rate.at
    if not 0 <= age <= MAX_AGE_S:
        return None, f"timed {age / 86400:.1f} days ago"
    why = rate.refused(torch.device(device), per_element=not key.startswith("accountant/"))
    return (None, f"refused: {why}") if why else (rate, None)


def store(device, key: str, rate: Rate) -> None:
    """Add ``rate`` to the cache (re-read first: another process may have added its own)."""
    from certdp.results import atomic_write_text
    if rate.provisional:
        return
    path = cache_file(device)
    table = _read(device)
    table[key] = {**asdict(rate), "format": FORMAT}
    table[key].pop("provisional")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(table, indent=1, sort_keys=True))
    except OSError:
        pass                                       # an unwritable cache: timed again next time


def rates(specs, device, *, calibrate_missing: bool = True, say=None, timer_of=None,
          retime_moved: float | None = None) -> dict[str, Rate]:
    """The rates of ``specs`` on ``device``: cached, or timed now (``calibrate_missing``) and
    cached; a spec neither cached nor timed is left out.  ``retime_moved``: also time again a
    cached rate whose :func:`probe` differs from now's by more than this factor (the load moved:
    a rate is then scaled, which a CPU's threads follow only roughly).  ``say(line)``: a line
    before each timing (default: the log); ``timer_of(spec, device)``: :func:`real_timer`'s stand-in."""
    device = torch.device(device)
    say = say or log.info
    out, todo = {}, []
    for spec in {s.key: s for s in specs}.values():
        rate, why = cached(device, spec.key)
        if rate is not None and retime_moved and device.type == "cpu" and calibrate_missing:
            moved = probe() / rate.probe
            if max(moved, 1 / moved) > retime_moved:
                rate, why = None, f"the machine is {moved:.2g}x as slow as when it was timed"
        if rate is not None:
            out[spec.key] = rate
        elif calibrate_missing:
            todo.append((spec, why))
    for i, (spec, why) in enumerate(todo, 1):
        say(f"estimate: timing {spec.key} on {device} ({i} of {len(todo)}: {why}; at most about {BUDGET_S:.0f} s of timed steps and a compile, "
            f"then cached in {cache_file(device).parent})")
        try:
            rate = calibrate(spec, device, timer=timer_of(spec, device) if timer_of else None)
        except Exception as e:                     # an engine that cannot run here: no rate
            log.info("estimate: %s cannot be timed here (%s: %s)", spec.key, type(e).__name__, e)
            continue
        store(device, spec.key, rate)
        out[spec.key] = rate
    return out
