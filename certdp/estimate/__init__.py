"""How long a run will take, from its settings alone, on this machine: ``certdp figures --list``
for the figures no run of which was measured here, and the line a run logs before it starts.

**The model.**  The long phases of every data command are loops of steps whose time is affine
in what one step touches: nominal training and every trained baseline (DP-SGD, PATE teachers
and students, shard models) take ``o + u * B * P`` seconds a step (B records in the step, P
parameters); AGT takes ``o + u * K * B * P`` a step for its engine (K radii it computes: those
below the batch, or below an epoch's slots for the per-epoch ledger).  The work of a run (how
many steps of which size in each phase) follows from its resolved settings and the dataset's
size, which every dataset declares from its settings alone (:func:`certdp.data.dataset_size`:
public metadata, no file is read); each command counts its own loops (its cost model,
:attr:`certdp.commands.Command.cost`, in the terms of :mod:`certdp.estimate.work`).  Nothing here reads a record; a time estimate is the
researcher's, not a release.

**The rates** (``o``, ``u``) are this machine's for the run's own model shape, loss and engine
(:mod:`certdp.estimate.rates`: timed robustly, refused when implausible, cached per machine, torch,
certdp and code, re-timed when stale, scaled by the load now).  An estimate carries a band
(:class:`Estimate`: "about 3 min (1.5-6 min)") from the model's measured error, the timing's
spread and how far the load moved since the timing.

**A resumed run** (a checkpoint's saved loops, :mod:`certdp.checkpoint`) is estimated for what
is left: a loop the checkpoint finished counts nothing, one it saved at step s counts from s.

**A text dataset's embeddings** (imdb, sst2) are counted from the encoder's measured CPU cost per
token (:func:`certdp.data.encoders.cpu_seconds`, two idle cores) times the texts left to embed,
scaled by the load now (:class:`Embedding`).  From the settings alone every text counts (nothing
cached); a run counts what its embedding cache lacks, and announces its estimate just before it
embeds (:class:`Announcer`), so the line comes before the heavy work from an empty cache as from
a warm one.  On a GPU the embeddings are not modelled.

**Not modelled** (the estimate then says "at least" and names it; with nothing else to count it
says "no estimate"): a solver's time (MILP and exact windows), CROWN through time, a sentence
encoder's embeddings on a GPU, the hybrid's DP-LoRA fine-tunes, the audits,
and a dataset whose size is known only once read (a csv).  Measured against real runs:
docs/resume-and-progress.md and benchmarks/estimate_accuracy.py."""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass

import torch

from certdp.estimate import rates as R
from certdp.estimate.work import MODELLED_ENGINES, Embedding, Work, settings_embedding  # noqa: F401  (the cost models' terms)

log = logging.getLogger("certdp")

RUN_OVERHEAD_S = 5.0          # a run's start (imports, Hydra, the dataset's load) and its CSVs (measured 5-7 s idle)
# the estimate / measured ratios of benchmarks/estimate_accuracy.py lie within this factor either
# way on an idle machine (docs/resume-and-progress.md); the band is at least this wide
BAND = 2.0
MAX_BAND = 20.0


# ---------------------------------------------------------------------------- the work of a run
def embedding_seconds(emb: Embedding | None) -> float:
    """The embeddings' seconds now: the two-idle-core estimate times (load + the encoder's torch
    threads) / cores, at least 1: its threads share the cores with every other runnable thread.
    Measured (docs/datasets.md): 17,000 IMDB reviews at load 8-13 on 2 cores embedded at 5.9-7.0
    texts/s against 46 idle, a slowdown of 6.6-7.9 where this factor gives 5-7.5."""
    if emb is None or not emb.texts or emb.seconds is None:
        return 0.0
    cores = max(1, os.cpu_count() or 1)
    return emb.seconds * max(1.0, (_load() + min(torch.get_num_threads(), cores)) / cores)


def work_of(settings) -> Work | None:
    """The loops of a run of ``settings``, counted by its command's cost model
    (:attr:`certdp.commands.Command.cost`), or None when the run's size is unknown before its data
    is read."""
    from certdp import commands
    command = getattr(settings, "command", None) or getattr(getattr(settings, "run", None), "command", "")
    entry = commands.get(command)
    return entry.work(settings) if entry is not None else Work(unmodelled=[f"certdp {command}"])


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
    embedding: Embedding | None = None
    embedding_s: float | None = None

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
        if self.embedding is not None:
            parts.append(self.embedding.text(self.embedding_s))
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
    emb = work.embedding
    if emb is not None and emb.texts and emb.seconds is None:
        work = work.left(None)
        work.unmodelled.append(f"the sentence encoder's embeddings on {emb.device}")
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
        sec = overhead_s() + embedding_seconds(w.embedding) + sum(g.seconds(s, e, now(g)) for s, e in w.train)
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
    return Estimate(sec, tuple(work.unmodelled), sec / f, sec * f, whole=whole if entries else None,
                    embedding=emb, embedding_s=embedding_seconds(emb) if emb is not None else None)


# ---------------------------------------------------------------------------- before a run starts
SAY_ABOVE_S = 120.0         # a run estimated longer than this says its estimate before it starts
LONG_RUN_S = 600.0          # ... and longer than this, also what would make it faster
# the fastest rate (seconds per element) a device is credited with when deciding whether a run
# is big enough to be worth timing this machine for (10x below the measured IBP rates)
OPTIMISTIC_UNIT = {"cpu": 5e-10, "cuda": 2e-12}
CALIBRATE_ABOVE_S = 10.0    # ... : when its work at that rate exceeds this (the timing takes ~5-30 s once)
RETIME_MOVED = 3.0          # such a run times a cached rate again when the load moved more than this
SLOWEST = 30.0              # a small run's cached estimate, this much slower, is still short: no probe


def announce(settings, *, embedding: Embedding | None = None) -> Estimate | None:
    """Before a run starts: when its settings estimate exceeds :data:`SAY_ABOVE_S`, or it embeds
    texts, log it with its band (a resumed run: what is left); beyond :data:`LONG_RUN_S`, also
    what would make it faster.
    ``embedding``: the run's embeddings as counted against its cache (default: from the settings).
    Rates come from the cache; a run whose work at the optimistic rate exceeds
    :data:`CALIBRATE_ABOVE_S` (or that embeds texts) times this machine first (once, and again when
    the load moved more than :data:`RETIME_MOVED`) and scales by the load now (the optimistic time
    counts the load now: a busy machine makes a small run long); a smaller run probes the load
    only when its cached estimate, :data:`SLOWEST` times slower, would be long.
    Advisory: any failure is silent (a run never fails for its estimate)."""
    from certdp import checkpoint
    try:
        work = work_of(settings)
        if work is None:
            return None
        if embedding is not None:
            work.embedding = embedding
        entries = checkpoint.current().entries or None
        dev = torch.device(getattr(settings.run, "device", "cpu") or "cpu")
        text = work.embedding is not None
        # the optimistic time on this machine as loaded now: a run that is short on idle cores can
        # be long on busy ones (mnist5's CPU default: 28 s at the optimistic rate, 45 min of
        # AGT at load 10-20 on 2 cores, and it printed no estimate before the load counted here)
        unit = OPTIMISTIC_UNIT.get(dev.type, OPTIMISTIC_UNIT["cuda"]) * (busy() if dev.type == "cpu" else 1.0)
        big = text or work.left(entries).elements() * unit >= CALIBRATE_ABOVE_S
        est = estimate(settings, device=dev, calibrate=big, work=work, entries=entries,
                       retime_moved=RETIME_MOVED if big else None, scaled=big)
        if not big and est is not None and est.seconds * SLOWEST >= SAY_ABOVE_S:
            est = estimate(settings, device=dev, calibrate=False, work=work, entries=entries)
    except Exception:
        return None
    if est is None or not est.known or (est.seconds < SAY_ABOVE_S and not text):
        return est
    if est.seconds < LONG_RUN_S and not text:
        log.info("estimate from the settings: %s on %s for %s", est.text(), dev,
                 "what is left of the run" if est.whole is not None else "the whole run")
        return est
    faster = ([] if dev.type == "cuda" else ["a GPU (device=cuda)"]) + ["fewer radii (staircase.k_max)",
                                                                       "fewer train.steps or a quick profile"]
    if (est.embedding_s or 0) > 0:
        faster.append("a smaller encoder or subset (dataset.encoder, dataset.max_seq_length, dataset.n_private; "
                      "imdb: dataset.profile=cpu)")
    log.info("estimate from the settings: %s on %s for %s; faster: %s; it saves a checkpoint every "
             "checkpoint_minutes and on SIGINT/SIGTERM (certdp resume RUN_DIR continues it)",
             est.text(), dev, "what is left of the run" if est.whole is not None else "the whole run", ", ".join(faster))
    return est


class Announcer:
    """A run's estimate, said once before its heavy work: a text dataset's loader calls
    :meth:`embedding` (through :func:`certdp.data.encoders.before_embedding`) with what its
    embedding cache lacks; texts to embed are the heavy work, so the estimate is said then; with
    every embedding cached (or no text dataset) it is said by :meth:`after_data`, once the data
    has passed every check (a refusing run times nothing)."""

    def __init__(self, settings):
        self.settings, self.pending, self.said = settings, None, False

    def embedding(self, info: dict) -> None:
        """``info``: :func:`certdp.data.encoders.announce_pending`'s texts, total, encoder, device, seconds."""
        emb = self.pending = Embedding(**info, exact=True)
        if emb.texts and not self.said:
            self.said = True
            announce(self.settings, embedding=emb)

    def after_data(self) -> None:
        if not self.said:
            self.said = True
            announce(self.settings, embedding=self.pending)
