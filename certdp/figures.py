"""``certdp figures``: every paper figure from the experiment files in ``experiments/``.

An experiment file (``experiments/<name>.yaml``) names the runs one figure needs and the plot
function that draws it::

    name: agtr_pate                     # outputs/figures/agtr_pate.{png,pdf,csv}
    label: fig:agtr_pate                # the paper's label
    title: ...
    caption: ...                        # the paper's caption
    plot: agtr_pate                     # a function of certdp.plots (reads CSVs only)
    runs:
      - id: linear                      # how the plot refers to this run
        command: pate                   # a certdp command
        overrides: [dataset=linear]     # Hydra overrides, as on the command line
        sweep: {pate.shards: [...]}     # optional: one run per point of the product
        expect: [results, summary]      # CSVs a finished run has (default: results)
        profiles:                       # per profile: overrides added, sweep replaced
          quick: {overrides: [privacy.n_draws=20], sweep: {...}}
          paper: {}
    paper: [...]                        # the paper's values: markers "paper", figures/reproduction.{csv,md}

Resume.  A run's directory is ``<out_root>/<command>/<dataset>/fig-<hash>``, ``hash`` a digest of
the config *resolved* by Hydra's compose API (without ``run``, ``out_root``, ``overwrite`` and
``progress``): the same resolved config always lands in the same directory.  A run is skipped
when its ``done.json`` marker and every expected CSV exist; a run appears only when complete
(:mod:`certdp.results`) and ``done.json`` only after the subprocess exits 0.  A run without the
marker (interrupted, failed, or left by an older certdp) is run again with ``overwrite=true``,
which replaces it in one step; its output goes to ``fig-<hash>.stdout.txt`` (then ``stdout.txt``).

Runs execute as subprocesses of the CLI (``python -m certdp.cli <command> ... run=fig-<hash>``),
``jobs`` at a time, or each as a one-job Hydra multirun through ``launcher=joblib|submitit_local|
submitit_slurm`` (its output directory pinned to the run directory: ``jobs=64 launcher=submitit_slurm``
runs the grid on a cluster).  Then each figure is drawn (``<name>.png``, ``.pdf``, its data as
``<name>.csv``) and ``index.html`` lists them with caption, commands, run time and the paper's values.

Signals.  SIGINT and SIGTERM stop ``certdp figures``: no new run starts, every running child (each
in its own session) gets the signal once, and it exits after they have (a second signal kills them).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from certdp.errors import ConfigError
from certdp.resuming import RESUME_FREE_KEYS

log = logging.getLogger("certdp")

PROFILES = ("quick", "paper")
LAUNCHERS = ("basic", "joblib", "submitit_local", "submitit_slurm")
EXCLUDED_KEYS = ("config_format",) + RESUME_FREE_KEYS      # how and where a run is carried out, not what
REPO_ROOT = Path(__file__).resolve().parent.parent


def experiments_dir() -> Path:
    """The experiment files: ``$CERTDP_EXPERIMENTS_DIR``, the installed copy or the checkout's."""
    from certdp.settings.base import shipped_dir
    return shipped_dir("experiments", "CERTDP_EXPERIMENTS_DIR")


# ---------------------------------------------------------------------------- declarations
@dataclass(frozen=True)
class RunSpec:
    """One certdp invocation a figure needs (already specialised to a profile)."""
    figure: str
    id: str                                # the plot's name for the run (shared by a sweep)
    command: str
    overrides: tuple[str, ...]
    params: tuple[tuple[str, Any], ...] = ()   # the sweep point (key, value) of this run
    expect: tuple[str, ...] = ("results",)

    @property
    def argv(self) -> list[str]:
        return [self.command, *self.overrides, *(f"{k}={_fmt(v)}" for k, v in self.params)]

    def label(self) -> str:
        return self.id + ("[" + ",".join(f"{k}={_fmt(v)}" for k, v in self.params) + "]" if self.params else "")


@dataclass
class FigureSpec:
    name: str
    title: str
    caption: str
    plot: str
    label: str = ""
    runs: list[dict] = field(default_factory=list)
    notes: str = ""
    path: Path | None = None
    paper: list[dict] = field(default_factory=list)     # the paper's values (certdp.reproduction)

    def specs(self, profile: str) -> list[RunSpec]:
        out = []
        for r in self.runs:
            prof = dict((r.get("profiles") or {}).get(profile) or {})
            over = tuple(str(o) for o in (r.get("overrides") or [])) + tuple(str(o) for o in (prof.get("overrides") or []))
            sweep = prof["sweep"] if "sweep" in prof else (r.get("sweep") or {})
            expect = tuple(r.get("expect") or ("results",))
            keys = list(sweep)
            for combo in itertools.product(*(list(sweep[k]) for k in keys)) if keys else [()]:
                out.append(RunSpec(self.name, str(r["id"]), str(r["command"]), over,
                                   tuple(zip(keys, combo)), expect))
        return out


def _fmt(v) -> str:
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_fmt(x) for x in v) + "]"
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def load_experiment(path: Path) -> FigureSpec:
    from certdp.settings.figure_files import read_experiment
    path = Path(path)
    d = read_experiment(path, profiles=PROFILES)
    return FigureSpec(name=str(d["name"]), title=str(d.get("title", d["name"])), caption=" ".join(str(d["caption"]).split()),
                      plot=str(d["plot"]), label=str(d.get("label", "")), runs=list(d["runs"]),
                      notes=" ".join(str(d.get("notes", "")).split()), path=Path(path), paper=list(d.get("paper") or []))


def load_experiments(directory: Path | None = None) -> dict[str, FigureSpec]:
    directory = Path(directory or experiments_dir())
    exps = {}
    for p in sorted(directory.glob("*.yaml")):
        e = load_experiment(p)
        exps[e.name] = e
    return exps


# ---------------------------------------------------------------------------- resolution
@dataclass
class Resolved:
    spec: RunSpec
    key: str
    run_dir: Path
    config: dict

    @property
    def done_path(self) -> Path:
        return self.run_dir / "done.json"

    def is_done(self) -> bool:
        return self.done_path.exists() and all((self.run_dir / f"{n}.csv").exists() for n in self.spec.expect)

    def done(self) -> dict:
        try:
            return json.loads(self.done_path.read_text())
        except (OSError, ValueError):
            return {}


def resolve(spec: RunSpec, out_root: Path) -> Resolved:
    """Compose the run's config with Hydra (no run) and derive its directory from the digest."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from certdp import results
    from certdp.settings import config_dir
    results.register_resolvers()             # configs/base.yaml names runs with them
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from certdp.settings.compose import _hydra_error, _parse_overrides
    try:
        _parse_overrides(spec.argv[1:], multirun=False)
    except ConfigError as e:
        raise ConfigError(f"runs[{spec.id}].overrides", str(e)) from None
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
            cfg = compose(config_name=spec.command, overrides=spec.argv[1:])
        OmegaConf.set_struct(cfg, False)
        for k in EXCLUDED_KEYS:
            cfg.pop(k, None)
        d = OmegaConf.to_container(cfg, resolve=True)
    except (HydraException, OmegaConfBaseException) as e:
        key, what = _hydra_error(e)
        raise ConfigError(f"runs[{spec.id}].overrides", f"{key}: {what}") from None
    finally:
        GlobalHydra.instance().clear()
    key = hashlib.sha256(json.dumps({"command": spec.command, "config": d}, sort_keys=True, default=str).encode()).hexdigest()[:12]
    dataset = str((d.get("dataset") or {}).get("name", "none"))
    return Resolved(spec, key, Path(out_root) / spec.command / dataset / f"fig-{key}", d)


def command_line(r: Resolved, out_root: Path, launcher: str = "basic", launcher_args: tuple[str, ...] = ()) -> list[str]:
    """The child's command line.  Only unfinished runs are run (an interrupted one resumes), so
    ``overwrite=true`` lets a directory left by a failed or unmarked run be replaced atomically."""
    argv = [sys.executable, "-m", "certdp.cli", r.spec.command]
    if launcher != "basic":
        # one-job sweep whose job folder is the run directory (the CLI stages it beside)
        argv += ["-m", f"hydra/launcher={launcher}", *launcher_args,
                 f"hydra.sweep.dir={r.run_dir.parent}", f"hydra.sweep.subdir={r.run_dir.name}"]
    return argv + r.spec.argv[1:] + [f"out_root={out_root}", f"run=fig-{r.key}", "overwrite=true", "progress=false",
                                     "resume=true"]


def display_command(r: Resolved, out_root: Path) -> str:
    return "certdp " + " ".join(shlex.quote(a) for a in r.spec.argv) + f" out_root={out_root} run=fig-{r.key}"


# ---------------------------------------------------------------------------- execution
class Stopped(KeyboardInterrupt):
    """``certdp figures`` stopped by SIGINT/SIGTERM after its children exited (``signum``)."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


class Children:
    """The running child processes of ``certdp figures``.

    :meth:`start` refuses once a stop signal came; :meth:`on_signal` (the SIGINT/SIGTERM
    handler) passes the first signal on to every running child exactly once, a second signal
    kills them.  The handler takes no lock (it runs in the main thread, which may hold one);
    ``dict.setdefault`` decides atomically who sends a child its signal."""

    def __init__(self):
        self.procs: dict[int, subprocess.Popen] = {}
        self.sent: dict[int, object] = {}
        self.signum: int | None = None

    def start(self, argv: list[str], **kwargs) -> subprocess.Popen | None:
        if self.signum is not None:
            return None
        # own session: a terminal's Ctrl-C reaches the child only through on_signal, once
        p = subprocess.Popen(argv, start_new_session=True, **kwargs)
        self.procs[p.pid] = p
        if self.signum is not None:         # the signal came while the child was starting
            self._send(p, self.signum)
        return p

    def finished(self, p: subprocess.Popen) -> None:
        self.procs.pop(p.pid, None)

    def _send(self, p: subprocess.Popen, signum: int) -> None:
        token = object()
        if self.sent.setdefault(p.pid, token) is token and p.poll() is None:
            try:
                p.send_signal(signum)
            except ProcessLookupError:
                pass

    def on_signal(self, signum, frame) -> None:
        if self.signum is not None:          # second signal: do not wait any longer
            for p in list(self.procs.values()):
                if p.poll() is None:
                    p.kill()
            return
        self.signum = signum
        for p in list(self.procs.values()):
            self._send(p, signum)


def execute(r: Resolved, out_root: Path, *, launcher: str = "basic", launcher_args: tuple[str, ...] = (),
            echo=print, children: Children | None = None) -> dict:
    """Run one resolved spec as a subprocess; write ``done.json`` on success."""
    from certdp import results
    children = children or Children()
    argv = command_line(r, out_root, launcher, launcher_args)
    r.run_dir.parent.mkdir(parents=True, exist_ok=True)
    stdout_path = r.run_dir.with_name(r.run_dir.name + ".stdout.txt")
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    info = {"command": display_command(r, out_root), "argv": argv, "key": r.key,
            "figure": r.spec.figure, "id": r.spec.id, "params": dict(r.spec.params)}
    if children.signum is not None:
        return {**info, "returncode": None, "seconds": 0.0, "error": "not run (interrupted)"}
    try:
        aside = results.set_aside_leftover(r.run_dir)
    except ValueError as e:
        echo(f"[figures] FAIL {r.spec.figure}:{r.spec.label()}: {e}")
        return {**info, "returncode": None, "seconds": 0.0, "error": str(e)}
    try:
        return _execute(r, argv, stdout_path, env, info, echo, children)
    finally:
        if aside is not None:
            if results.run_kind(r.run_dir) is not None:
                shutil.rmtree(aside, ignore_errors=True)
            elif not r.run_dir.exists():
                os.rename(aside, r.run_dir)          # the rerun failed: the leftover as it was


def _execute(r: Resolved, argv, stdout_path: Path, env: dict, info: dict, echo, children: Children) -> dict:
    from certdp import results
    t0 = time.perf_counter()
    with open(stdout_path, "w") as out:
        proc = children.start(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=str(REPO_ROOT))
        if proc is None:
            return {**info, "returncode": None, "seconds": 0.0, "error": "not run (interrupted)"}
        echo(f"[figures] run  {r.spec.figure}:{r.spec.label()}  -> {r.run_dir}")
        try:
            proc.wait()
        finally:
            children.finished(proc)
    seconds = time.perf_counter() - t0
    info.update({"returncode": proc.returncode, "seconds": round(seconds, 2),
                 "finished": time.strftime("%Y-%m-%d %H:%M:%S")})
    missing = [n for n in r.spec.expect if not (r.run_dir / f"{n}.csv").exists()]
    if proc.returncode == 0 and not missing:
        os.replace(stdout_path, r.run_dir / "stdout.txt")
        results.write_json(r.done_path, info)
        echo(f"[figures] done {r.spec.figure}:{r.spec.label()}  {seconds:.0f} s")
    else:
        tail = stdout_path.read_text().strip().splitlines()[-5:]
        info["error"] = "\n".join(tail) or (f"missing {missing}" if missing else f"exit {proc.returncode}")
        echo(f"[figures] FAIL {r.spec.figure}:{r.spec.label()} (exit {proc.returncode}"
             + (f", missing {', '.join(missing)}.csv" if missing else "") + f") after {seconds:.0f} s:\n    "
             + "\n    ".join(tail))
    return info


@dataclass
class RunResult:
    """What a plot function gets for one run: its directory (CSVs) and its sweep point."""
    id: str
    run_dir: Path
    params: dict
    ok: bool
    seconds: float = 0.0
    cached: bool = False
    command: str = ""
    error: str = ""

    def csv(self, name: str = "results"):
        import pandas as pd
        p = self.run_dir / f"{name}.csv"
        return pd.read_csv(p) if p.exists() else None


class Runs(dict):
    """``id -> [RunResult, ...]`` (a sweep gives several); ``runs.ok(id)`` keeps the finished ones."""

    def ok(self, run_id: str) -> list[RunResult]:
        return [r for r in self.get(run_id, []) if r.ok]

    def one(self, run_id: str) -> RunResult | None:
        ok = self.ok(run_id)
        return ok[0] if ok else None

    def missing(self) -> list[str]:
        return [f"{r.id}" + (f"[{','.join(f'{k}={_fmt(v)}' for k, v in r.params.items())}]" if r.params else "")
                for rs in self.values() for r in rs if not r.ok]


# ---------------------------------------------------------------------------- drawing
def draw(exp: FigureSpec, runs: Runs, fig_dir: Path, *, profile: str) -> dict:
    from certdp import results
    from certdp.plots import PLOTS, paper, style
    if exp.plot not in PLOTS:
        raise ConfigError(f"{exp.path.name if exp.path else exp.name}: plot", f"unknown '{exp.plot}'; allowed: {', '.join(sorted(PLOTS))}")
    style.apply()
    t0 = time.perf_counter()
    fig, data = PLOTS[exp.plot](runs, profile=profile)
    paper.mark(fig, exp.paper)                       # the paper's points, labelled "paper"
    missing = runs.missing()
    if missing:
        fig.text(0.5, 0.005, "incomplete: no results for " + ", ".join(missing), ha="center", va="bottom",
                 fontsize=7, color="#b00000")
    fig_dir.mkdir(parents=True, exist_ok=True)
    png, pdf = fig_dir / f"{exp.name}.png", fig_dir / f"{exp.name}.pdf"
    style.save(fig, png, pdf)
    results.write_csv(fig_dir / f"{exp.name}.csv", data)
    return {"png": png, "pdf": pdf, "csv": fig_dir / f"{exp.name}.csv", "plot_seconds": time.perf_counter() - t0,
            "missing": missing}


# ---------------------------------------------------------------------------- orchestration
class _forward_signals:
    """SIGINT/SIGTERM go to :meth:`Children.on_signal` while runs execute (main thread only)."""

    def __init__(self, children: Children):
        self.children, self.old = children, {}

    def __enter__(self):
        try:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.old[sig] = signal.signal(sig, self.children.on_signal)
        except ValueError:                   # not the main thread: the caller handles signals
            pass
        return self

    def __exit__(self, *exc):
        for sig, h in self.old.items():
            signal.signal(sig, h)
        return False


def figures(names: list[str] | None = None, *, profile: str = "quick", out_root: str | Path = "outputs",
            jobs: int = 1, launcher: str = "basic", launcher_args: tuple[str, ...] = (), plot_only: bool = False,
            experiments: Path | None = None, echo=print) -> list[dict]:
    """Run what is missing for the named figures (all by default), draw them, write the gallery."""
    if profile not in PROFILES:
        raise ConfigError("profile", f"unknown '{profile}'; allowed: {', '.join(PROFILES)}")
    if launcher not in LAUNCHERS:
        raise ConfigError("launcher", f"unknown '{launcher}'; allowed: {', '.join(LAUNCHERS)}")
    if jobs < 1:
        raise ConfigError("jobs", f"got {jobs}; allowed: an integer >= 1")
    if "CERTDP_DATA_DIR" not in os.environ and (REPO_ROOT.parent / "shared" / "data").is_dir():
        os.environ["CERTDP_DATA_DIR"] = str(REPO_ROOT.parent / "shared" / "data")   # as the Makefile does
    exps = load_experiments(experiments)
    names = list(names or exps)
    unknown = [n for n in names if n not in exps]
    if unknown:
        raise ConfigError("figures", f"unknown {', '.join(unknown)}; allowed: {', '.join(exps)}")
    out_root = Path(out_root).resolve()
    fig_dir = out_root / "figures"

    resolved: dict[str, list[Resolved]] = {}
    unique: dict[str, Resolved] = {}
    for n in names:
        try:
            resolved[n] = [resolve(s, out_root) for s in exps[n].specs(profile)]
        except ConfigError as e:             # name the experiment file
            raise ConfigError(f"{exps[n].path.name if exps[n].path else n}:{e.key}", e.message) from None
        for r in resolved[n]:
            unique.setdefault(r.key, r)
    todo = [r for r in unique.values() if not r.is_done()]
    echo(f"[figures] profile={profile}: {len(names)} figure(s), {len(unique)} run(s), "
         f"{len(unique) - len(todo)} already done, {len(todo)} to run" + (" (plot only: skipped)" if plot_only else ""))
    infos: dict[str, dict] = {}
    if todo and not plot_only:
        children = Children()

        def job(r):
            return r.key, execute(r, out_root, launcher=launcher, launcher_args=launcher_args, echo=echo,
                                  children=children)
        with _forward_signals(children):
            if jobs == 1:
                for r in todo:
                    k, info = job(r)
                    infos[k] = info
            else:
                with ThreadPoolExecutor(max_workers=jobs) as pool:
                    for k, info in pool.map(job, todo):
                        infos[k] = info
        if children.signum is not None:
            raise Stopped(children.signum)

    entries = []
    for n in names:
        exp = exps[n]
        runs, run_rows = Runs(), []
        for r in resolved[n]:
            fresh = r.key in infos
            ok = r.is_done()
            d = r.done() if ok else infos.get(r.key, {})
            rr = RunResult(r.spec.id, r.run_dir, dict(r.spec.params), ok, float(d.get("seconds", 0.0)),
                           cached=ok and not fresh, command=display_command(r, out_root), error=d.get("error", ""))
            runs.setdefault(r.spec.id, []).append(rr)
            run_rows.append({"command": rr.command, "seconds": rr.seconds, "cached": rr.cached, "ok": ok,
                             "error": "" if ok else (rr.error or "not run")})
        try:
            drawn = draw(exp, runs, fig_dir, profile=profile)
        except Exception as e:                       # one broken plot must not lose the gallery
            log.exception("plot %s failed", n)
            echo(f"[figures] plot {n} failed: {e}")
            drawn = {"plot_seconds": 0.0, "missing": runs.missing() + [f"plot error: {e}"]}
        uniq_secs = {r.key: (r.done() if r.is_done() else infos.get(r.key, {})).get("seconds", 0.0) for r in resolved[n]}
        entry = {"name": n, "title": exp.title, "caption": exp.caption, "notes": exp.notes, "runs": run_rows,
                 "run_seconds": float(sum(uniq_secs.values())),
                 "fresh_seconds": float(sum(v for k, v in uniq_secs.items() if k in infos)),
                 "plot_seconds": drawn["plot_seconds"], "missing": drawn["missing"]}
        entries.append(entry)
        echo(f"[figures] drew {fig_dir / (n + '.png')}  (runs {entry['run_seconds']:.0f} s"
             + (f"; incomplete: {', '.join(entry['missing'])}" if entry["missing"] else "") + ")")
    if entries:
        from certdp.plots.gallery import write_gallery
        from certdp.reproduction import write_table     # every figure's paper values, from the runs' CSVs
        table = write_table(exps, out_root, profile=profile, resolved=resolved, resolve=resolve, echo=echo)
        gallery = write_gallery(fig_dir, entries, profile=profile, out_root=out_root, table=table)
        echo(f"[figures] gallery {gallery}")
    return entries


def list_figures(profile: str = "quick", experiments: Path | None = None, echo=print, out_root: str = "outputs") -> None:
    from certdp.figure_times import list_figures as listed         # with each figure's time on this machine
    listed(profile, experiments, echo=echo, out_root=out_root, load=load_experiments, resolve=resolve)
