"""Resuming an interrupted run: the checkpoint folder beside a run (``<run>.resumable``), which
checkpoint a run continues, and the refusal of a resume with other settings.

The state itself is saved and restored by :mod:`certdp.checkpoint`; this module decides where
it lives and whether a run may continue it (docs/resume-and-progress.md).  A checkpoint records
the resolved config and its SHA-256 over every key except :data:`RESUME_FREE_KEYS` (where and how
the run is carried out, not what it computes); a resume whose config differs elsewhere is refused
in one line naming the keys.  It also records the input files' checksums (the ones ``run.json``
records, :func:`certdp.results.input_records`): a resume whose inputs changed is refused in one
line, as the first steps used the old data.  A refusal never deletes the checkpoint."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import typer

from certdp import __version__, checkpoint, results
from certdp.errors import ConfigError

log = logging.getLogger("certdp")
RESUME_SETTINGS = ("progress", "checkpoint_minutes", "progress_seconds", "overwrite")   # what `certdp resume` may set


# Keys that say how a run is carried out or where it lands, not what it computes: a resume may
# change them (every other key of the resolved config must be the checkpoint's).
RESUME_FREE_KEYS = ("run", "out_root", "overwrite", "progress", "resume", "checkpoint_minutes", "progress_seconds")


def computed_config(d: dict) -> dict:
    """The resolved config without :data:`RESUME_FREE_KEYS`: what a checkpoint's state depends on."""
    return {k: v for k, v in d.items() if k not in RESUME_FREE_KEYS}


def config_sha256(d: dict) -> str:
    import hashlib
    import json
    return hashlib.sha256(json.dumps(computed_config(d), sort_keys=True, default=str).encode()).hexdigest()


def _flat(d, prefix=""):
    out = {}
    for k, v in (d.items() if isinstance(d, dict) else ()):
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def config_differences(a: dict, b: dict, *, limit: int = 3) -> str:
    """``key: X there, Y here`` for the first keys where two resolved configs differ."""
    fa, fb = _flat(computed_config(a)), _flat(computed_config(b))
    keys = [k for k in sorted(set(fa) | set(fb)) if fa.get(k, "<unset>") != fb.get(k, "<unset>")]
    shown = "; ".join(f"{k}: {fa.get(k, '<unset>')!r} there, {fb.get(k, '<unset>')!r} here" for k in keys[:limit])
    return shown + (f"; and {len(keys) - limit} more" if len(keys) > limit else "")


def _checkpoint_record(command: str, d: dict, inputs: list[dict], folder: Path) -> dict:
    """``checkpoint.json`` of a new checkpoint: what it computes (command, config and its
    SHA-256), what it read (the inputs' checksums), where it was written, and its id (also in
    ``state.pt``: :func:`certdp.checkpoint.load` ties the two files together)."""
    import secrets
    return {"format": checkpoint.STATE_FORMAT, checkpoint.ID_KEY: secrets.token_hex(16), "command": command,
            "certdp_version": __version__, "config_sha256": config_sha256(d), "config": d, "inputs": inputs,
            "folder": str(Path(os.path.abspath(folder))),
            "note": "the checkpoint of an unfinished run (not a run, not publishable): certdp resume <this folder>"}


def _check_inputs(chosen: Path, rec: dict, d: dict) -> None:
    """Refuse (one line, keyed by the input) a checkpoint whose input files are not what this
    run reads: its first steps used the files as they were."""
    from certdp.settings.record import input_changes
    recorded = rec.get("inputs")
    if not isinstance(recorded, list):
        raise ConfigError("resume", f"{chosen / checkpoint.RECORD_FILE} records no input checksums; allowed: a "
                                    "checkpoint that certdp wrote, or resume=false with another run=NAME to start afresh")
    for key, how, was, now in input_changes(recorded, d):
        what = {"gone": f"{was} is gone or unreadable since the interrupted run read it",
                "moved": f"this run reads {now}, the interrupted run read {was}",
                "changed": f"{was} changed since the interrupted run read it (its SHA-256 differs from the "
                           "checkpoint's)"}[how]
        raise ConfigError(key, f"{what}, and the steps saved in {chosen} were computed on the file as it was; "
                               "allowed: that file as it was (put it back to resume), or resume=false with another "
                               "run=NAME to start afresh on the file as it is now")


def _candidates(root: Path, limit: int = 10_000) -> list[Path]:
    """Checkpoint folders below ``root`` (``<out_root>/<command>/<dataset>``), newest first."""
    found, seen = [], 0
    for here, dirs, _files in os.walk(root):
        seen += len(dirs)
        if seen > limit:
            break
        for d in list(dirs):
            if d.endswith(results.RESUMABLE):
                found.append(Path(here) / d)
                dirs.remove(d)
        dirs[:] = [x for x in dirs if results.is_run_dir_name(x) and x != results.HYDRA_DIR]

    def stamp(p: Path) -> float:
        try:
            return (p / checkpoint.STATE_FILE).stat().st_mtime
        except OSError:
            return 0.0
    return sorted(found, key=stamp, reverse=True)


def _explicit_run() -> bool:
    """Whether ``run=`` was given on this job's command line (else it is a fresh timestamp)."""
    try:
        from hydra.core.hydra_config import HydraConfig
        return any(o.split("=", 1)[0].lstrip("+~") == "run" for o in HydraConfig.get().overrides.task)
    except Exception:                    # not inside Hydra (a direct call): treat the name as given
        return True


LOG_FILE = "log.txt"      # the interrupted processes' log, kept in the checkpoint folder


def _multirun() -> bool:
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode
        return HydraConfig.get().mode == RunMode.MULTIRUN
    except Exception:
        return False


def resume_session(command: str, d: dict, opts, paths: "results.RunPaths", *, inputs: list[dict], interrupt,
                   log_file: Path | None = None):
    """The run's checkpoint session and its paths, retargeted to the final path of the checkpoint
    it continues (the caller checks that path is free); ``inputs``: the run's input records
    (:func:`certdp.results.input_records`, as ``run.json`` will hold them); ``interrupt(signum)``
    raises a held signal once its state is saved.  Refusals are :class:`ConfigError` and leave
    every checkpoint as it was.  A resumed run's ``log_file`` (its log.txt, just opened) starts
    with the log of the interrupted processes.

    The checkpoint folder is ``<final>.resumable``.  With ``resume=false`` a checkpoint already
    there is refused (a fresh run would replace it).  With ``resume=true`` the checkpoint beside
    the run is continued; without ``run=`` on the command line, the newest checkpoint of these
    settings under ``<out_root>/<command>/<dataset>/`` is continued and the run lands at its name.
    A checkpoint of other settings is refused naming the keys that differ, one whose input files
    changed naming the file, one whose ``state.pt`` is not its own (:func:`certdp.checkpoint.load`)
    as damaged; no checkpoint at all starts from the first step (said in the log).  A checkpoint
    moved since it was written continues where it lies now (its state depends on its settings and
    inputs, both checked, not on its place; said in the log)."""
    ck_dir = results.resumable_dir(paths.final)
    restored = record = None
    if ck_dir.exists() and not opts.resume:
        raise ConfigError("run", f"{paths.final} has the checkpoint of an interrupted run ({ck_dir}); allowed: "
                                 f"resume=true (or `certdp resume {ck_dir}`) to continue it, another run=NAME, or "
                                 "delete that folder to start afresh")
    if opts.resume:
        chosen = ck_dir if ck_dir.exists() else None
        if chosen is None and not _explicit_run():
            dataset = str((d.get("dataset") or {}).get("name"))
            base = Path(os.path.abspath(str(d.get("out_root", "outputs")))) / command / dataset
            others = _candidates(base) if base.is_dir() else []
            sha = config_sha256(d)
            mismatched = []
            for c in others:
                rec = checkpoint.read_record(c, quiet=True)
                if rec is None:
                    continue
                if rec.get("command") == command and rec.get("config_sha256") == sha:
                    chosen = c
                    break
                mismatched.append((c, rec))
            if chosen is None and mismatched and not _multirun():     # a sweep's other jobs hold other settings
                c, rec = mismatched[0]
                diff = config_differences(rec.get("config") or {}, d)
                raise ConfigError("resume", f"the checkpoint {c} holds other settings ({diff}); allowed: the "
                                            f"checkpoint's settings (`certdp resume {c}`), or resume=false to start afresh")
        if chosen is not None:
            try:
                rec, entries = checkpoint.load(chosen)
            except ValueError as e:
                raise ConfigError("resume", f"{e}; allowed: a checkpoint folder that certdp wrote "
                                            f"(<run>{results.RESUMABLE}), or resume=false to start afresh")
            if rec.get("command") != command or rec.get("config_sha256") != config_sha256(d):
                diff = (f"the command {rec.get('command')!r} there, {command!r} here" if rec.get("command") != command
                        else config_differences(rec.get("config") or {}, d))
                raise ConfigError("resume", f"the checkpoint {chosen} holds other settings ({diff}); allowed: the "
                                            f"checkpoint's settings (`certdp resume {chosen}` sets them), or "
                                            "resume=false with another run=NAME to start afresh")
            _check_inputs(chosen, rec, d)
            if rec.get("folder") and Path(rec["folder"]) != Path(os.path.abspath(chosen)):
                log.info("resume: the checkpoint was written at %s and lies at %s now; the run lands beside it",
                         rec["folder"], os.path.abspath(chosen))
            if rec.get("certdp_version") != __version__:
                typer.echo(f"certdp: warning: the checkpoint was made by certdp {rec.get('certdp_version')}, this is "
                           f"{__version__}", err=True)
            final = chosen.with_name(chosen.name[: -len(results.RESUMABLE)])
            if final != paths.final:
                paths = results.RunPaths(staging=paths.staging, final=final)
            ck_dir, restored, record = chosen, entries, rec
            _carry_log(chosen / LOG_FILE, log_file, f"--- resumed from {chosen} ---\n")
            log.info("resume: continuing from the checkpoint %s (%d loop(s) saved)", chosen, len(entries))
        else:
            log.info("resume: no checkpoint of these settings; starting from the first step")
    minutes = opts.checkpoint_minutes
    session = checkpoint.Session(folder=ck_dir, interval_s=None if minutes is None else 60.0 * minutes,
                                 progress_s=opts.progress_seconds, restored=restored,
                                 record=record if restored is not None else _checkpoint_record(command, d, inputs, ck_dir),
                                 interrupt=interrupt, stderr=bool(opts.progress) and not _isatty(sys.stderr))
    return session, paths


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _carry_log(src: Path | None, dest: Path | None, marker: str = "") -> None:
    """Append the log ``src`` (and ``marker``) to ``dest``; a log that cannot be carried is not
    a reason to fail a run."""
    if src is None or dest is None or not src.is_file():
        return
    try:
        with open(dest, "a", encoding="utf-8") as f:
            f.write(src.read_text(encoding="utf-8", errors="replace") + marker)
    except OSError:
        pass


def keep_checkpoint(session, *, log_file: Path | None = None) -> "checkpoint.Session | None":
    """After an interruption: save what the session holds (finished loops, each open loop's last
    saved step), keep the process's ``log_file`` beside it, and return the session when a
    checkpoint folder now exists."""
    if session is None or session.folder is None:
        return None
    try:
        if session.dirty or (session.entries and not (session.folder / checkpoint.STATE_FILE).is_file()):
            session.save()
    except OSError:
        pass
    if not (session.folder / checkpoint.STATE_FILE).is_file():
        return None
    if log_file is not None and log_file.is_file():     # the whole log: the resumed run's log.txt starts with it
        try:
            results.atomic_write_text(session.folder / LOG_FILE, log_file.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            pass
    return session


def interrupted_checkpoint(session, e: BaseException, *, log_file: Path | None = None) -> str:
    """After an interruption: keep the checkpoint (:func:`keep_checkpoint`) and say, for the
    one-line message, which step it holds (and the steps lost when the step in progress
    outlasted the signal's grace) and how to continue: the run alone, or the whole sweep."""
    kept = keep_checkpoint(session, log_file=log_file)
    if kept is None:
        if session is not None and session.displaced is not None:
            return f"; no checkpoint was kept ({session.displaced} holds another run's, of the same name)"
        return ""
    at = kept.kept_at(late=bool(getattr(e, "late", False)))
    sweep = _sweep_dir()
    if sweep is not None:
        return (f"; its checkpoint is kept ({at}): continue the whole sweep with the same command line and "
                f"resume=true hydra.sweep.dir={sweep} (its finished jobs are kept, this one continues from its "
                "checkpoint, the jobs after it run)")
    return (f"; its checkpoint is kept ({at}): continue with `certdp resume {kept.folder}` or the same command "
            "with resume=true")


def _sweep_dir() -> Path | None:
    """The sweep folder of the job in progress, None outside a sweep."""
    if not _multirun():
        return None
    try:
        from hydra.core.hydra_config import HydraConfig
        return Path(os.path.abspath(str(HydraConfig.get().sweep.dir)))
    except Exception:
        return None


def holds_this_run(final: Path, command: str, d: dict) -> bool:
    """Whether ``final`` holds the finished run of ``command`` with the computed settings of
    ``d`` and its inputs unchanged (:func:`certdp.settings.record.load_run_record` checks the
    folder): what ``resume=true`` keeps instead of refusing, so that a resumed sweep goes past
    the jobs it finished.  Anything else is False (the caller's usual checks then apply)."""
    from certdp.settings.record import load_run_record
    if results.run_kind(final) != "run":
        return False
    try:
        rec = load_run_record(final, commands=(command,))
    except ConfigError:
        return False
    return rec.command == command and not rec.warnings and config_sha256(rec.config) == config_sha256(d)


def replay_config(run_dir: str, args: list[str], *, commands, out_root_of) -> tuple[str, Path, dict, list]:
    """(command, checkpoint folder, Hydra primary config, the other arguments) that ``certdp resume RUN_DIR`` replays:
    the recorded config with ``resume=true`` and the run's own name and out_root (the folder
    holding ``<command>/<dataset>/`` above the run: ``out_root_of(final, command, dataset)``), so
    that it lands where the interrupted run would have landed.  Refusals are :class:`ConfigError`."""
    from certdp.settings import config_dir
    for a in args:
        key = a.split("=", 1)[0]
        if "=" not in a or key not in RESUME_SETTINGS + ("out_root",):
            raise ConfigError("resume", f"'{a}' cannot be set; a resumed run keeps the checkpoint's settings; "
                                        "allowed: " + ", ".join(f"{k}=..." for k in RESUME_SETTINGS)
                              + ", out_root=<the checkpoint's own>")
    p = Path(run_dir)
    ck = p if p.name.endswith(results.RESUMABLE) else results.resumable_dir(p)
    if not ck.is_dir():
        raise ConfigError("resume", f"{run_dir} has no checkpoint ({ck} does not exist); allowed: the path of an "
                                    f"interrupted run (its final path or its <run>{results.RESUMABLE} folder); a "
                                    "finished run is repeated with certdp rerun")
    try:
        rec, _ = checkpoint.load(ck)
    except ValueError as e:
        raise ConfigError("resume", f"{e}; allowed: a checkpoint folder that certdp wrote (<run>{results.RESUMABLE})")
    command, d = rec.get("command"), rec.get("config")
    if command not in commands or not isinstance(d, dict) or not isinstance(d.get("dataset"), dict):
        raise ConfigError("resume", f"{ck / checkpoint.RECORD_FILE} names no command and config of this certdp; "
                                    "allowed: a checkpoint folder that certdp wrote")
    final = ck.absolute().with_name(ck.name[: -len(results.RESUMABLE)])
    dataset = str(d["dataset"].get("name"))
    base = out_root_of(final, command, dataset)
    if base is None:
        # a run lands at <out_root>/<command>/<dataset>/<run>: outside that layout there is no
        # out_root to land in (resuming at the recorded place would look for the checkpoint there)
        was = rec.get("folder") or "its recorded place"
        raise ConfigError("resume", f"{ck.absolute()} lies outside a folder <out_root>/{command}/{dataset}/ (it was "
                                    f"written at {was}), so a resumed run has no place to land; allowed: move it back, "
                                    f"or below any folder's {command}/{dataset}/ (it continues and lands beside it)")
    out_root = base
    run = final.relative_to(out_root.absolute() / command / dataset).as_posix()
    for a in args:
        if a.startswith("out_root=") and os.path.abspath(a.split("=", 1)[1]) != os.path.abspath(out_root):
            raise ConfigError("out_root", f"{a.split('=', 1)[1]} is not the checkpoint's out_root ({out_root}); "
                                          f"allowed: {out_root} (a resumed run lands where it would have landed)")
    d = {**d, "out_root": str(out_root), "run": run, "resume": True, "overwrite": False}
    primary = {"defaults": ["base", "_self_"], "hydra": {"searchpath": [f"file://{config_dir()}"]}, **d}
    return command, ck, primary, [a for a in args if not a.startswith("out_root=")]


# ---------------------------------------------------------------------------- certdp rerun
RERUN_SETTINGS = ("out_root", "run", "overwrite", "progress", "checkpoint_minutes", "progress_seconds")
# where and how the old run was written, not what it computed
RERUN_DROPPED = ("run", "out_root", "overwrite", "resume")


def out_root_of(run_dir: Path, command: str, dataset: str) -> Path | None:
    """The folder that holds ``<command>/<dataset>/`` above ``run_dir`` (its out_root)."""
    parts = run_dir.parts
    for i in range(len(parts) - 3, -1, -1):
        if parts[i] == command and parts[i + 1] == dataset:
            return Path(*parts[:i]) if i else Path(parts[0])
    return None


def rerun_config(run_dir: str, args: list[str], *, commands) -> tuple[str, Path, dict, list[str]]:
    """(command, the run's config.yaml, Hydra primary config, warnings) that ``certdp rerun RUN_DIR``
    replays.

    The run's record is checked first (:func:`certdp.settings.record.load_run_record`: a
    finished run, ``config.yaml`` unedited since the run, complete, of this layout); an input
    file that is gone, moved or changed since the run is refused (one line, keyed by the input).  The config is replayed as Hydra's primary
    config on top of ``configs/base.yaml`` (folders, logging), without the keys that only say
    where the old run was written (``run``, ``out_root``, ``overwrite``): the new run gets a
    fresh name under the same out_root (the folder holding ``<command>/<dataset>/`` above
    ``run_dir``) unless ``out_root=``/``run=`` say otherwise.  Refusals are :class:`ConfigError`."""
    from certdp.settings import config_dir
    from certdp.settings.record import load_run_record
    for a in args:
        key = a.split("=", 1)[0]
        if "=" not in a or key not in RERUN_SETTINGS:
            raise ConfigError("rerun", f"'{a}' cannot be set; a rerun repeats the recorded config; allowed: "
                              + ", ".join(f"{k}=..." for k in RERUN_SETTINGS))
    src = Path(run_dir).expanduser()
    ck = src if src.name.endswith(results.RESUMABLE) else results.resumable_dir(src)
    if src.name.endswith(results.RESUMABLE) or (not src.exists() and ck.is_dir()):
        raise ConfigError("RUN_DIR", f"{ck} is the checkpoint of an interrupted run, not a finished run; allowed: "
                                     f"`certdp resume {ck}` to continue it, or the folder of a finished run")
    rec = load_run_record(run_dir, commands=tuple(commands))
    for key, how, was, now in rec.changes:      # same config and seed give the same CSVs only on the same inputs
        what = {"gone": f"{was}, which the run read, is gone or unreadable",
                "moved": f"the rerun would read {now}, the run read {was}",
                "changed": f"{was} changed since the run (its SHA-256 differs from run.json's)"}[how]
        raise ConfigError(key, f"{what}, so a rerun would not repeat the run; nothing was run; allowed: the run's "
                               f"input file as it was, at that path (or a new `certdp {rec.command} ...` run on the "
                               "file as it is now)")
    warnings = []
    if rec.version != __version__:
        warnings.append(f"the run was made by certdp {rec.version}, this is {__version__}")
    d = dict(rec.config)
    out_root = out_root_of(rec.run_dir.absolute(), rec.command, str(d["dataset"].get("name"))) or Path(str(d["out_root"]))
    for k in RERUN_DROPPED:
        d.pop(k, None)
    primary = {"defaults": ["base", "_self_"], "hydra": {"searchpath": [f"file://{config_dir()}"]}, **d,
               "out_root": str(out_root)}
    return rec.command, rec.run_dir / results.CONFIG_FILE, primary, warnings
