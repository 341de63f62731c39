"""The only module that writes results: run directories, tidy CSVs, resolved configs.

Run directories.  A run is written into a *staging* directory beside its final place,
``<run>.incomplete-<pid>-<tag>``, and renamed into place with one ``rename(2)`` once every file
is written.  Hydra's output directory *is* the staging directory (``configs/base.yaml`` ends
``hydra.run.dir`` and ``hydra.sweep.subdir`` with ``${certdp.incomplete:}``), so ``log.txt`` and
``.hydra/`` are staged too.  Consequences:

* a directory at a run's final path always holds one whole run: a crash, a full disk or a kill
  leaves nothing there, at most the staging directory, whose name says it is incomplete;
* a run never writes into a directory that holds another run: :func:`check_free` refuses up
  front, and :func:`commit` cannot rename onto a non-empty directory (POSIX ``rename`` fails with
  ``ENOTEMPTY``), so even two runs racing for one name cannot mix their files.

Run names.  ``run: ${now:%Y-%m-%d_%H-%M-%S}_${certdp.uid:}`` gives a timestamp plus four random
hex digits, fixed once per composed config (the resolver is cached, and Hydra copies the cache of
a sweep's master config into every job's config, so all jobs of one sweep share their
``multirun_<timestamp>_<uid>`` folder).  Runs started in the same second differ in the suffix;
the rare equal suffix is still safe because of the rename rule above (:func:`commit` then picks
another free name).

Files are written through a temporary file in the same folder, flushed to disk and renamed, with
ordinary permissions (``0666`` minus the umask, i.e. ``0644`` under umask 022).

What a run folder is.  A finished run's folder holds ``config.yaml`` (the resolved config, with
its ``config_format``) and ``run.json`` (:data:`RUN_FORMAT`: the command, the SHA-256 of
``config.yaml`` and of every input file the run read); ``run.json`` is written last, so it also
marks the folder as a whole run (:func:`run_kind`).  ``overwrite=true`` replaces exactly such a
folder (or one made before ``run.json`` existed: ``config.yaml`` beside ``.hydra/``) that holds no
other run, never a folder of runs or of anything else (:func:`check_free`), and no run is placed
inside another run or in a staging or replaced folder (:func:`check_placement`).  ``run.json``
and ``config.yaml`` are the researcher's files, not publishable: a checksum of the private table
is a statistic of the private records.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

log = logging.getLogger("certdp")

INCOMPLETE = ".incomplete-"      # marks a staging directory: never a run
REPLACED = ".replaced-"          # a finished run being replaced under overwrite=true
RESUMABLE = ".resumable"         # the checkpoint folder of an interrupted run (certdp/checkpoint.py): never a run
_TAG = secrets.token_hex(2)

CONFIG_FILE = "config.yaml"      # the resolved config of a run
RUN_MARKER = "run.json"          # written last: the folder holds one whole run (see the module docstring)
RUN_FORMAT = "certdp.run/1"
CONFIG_FORMAT = 2                # the layout of config.yaml (configs/base.yaml: config_format)
HYDRA_DIR = ".hydra"             # Hydra's record of the job, inside the run folder
MAX_RUN_ENTRIES = 10_000         # a folder with more entries is not one run (overwrite refuses it)
CSV_FLOAT_FORMAT = "%.10g"       # every CSV certdp writes, to a file or to standard output (certdp predict)


# ---------------------------------------------------------------------------------- names
def unique_suffix() -> str:
    """Four random hex digits: the ``${certdp.uid:}`` part of a run or sweep name."""
    return secrets.token_hex(2)


def incomplete_suffix() -> str:
    """``.incomplete-<pid>-<tag>``: the ``${certdp.incomplete:}`` ending of a staging directory
    (the pid says which process owns it; the tag separates equal pids on different hosts)."""
    return f"{INCOMPLETE}{os.getpid()}-{_TAG}"


def on_device(device, gpu_value, cpu_value):
    """``${certdp.on_device:${device},A,B}``: ``A`` where the ``device`` request resolves to a CUDA
    device (``auto`` on a machine where torch sees one, ``cuda``, ``cuda:N``), else ``B``: a preset's
    value that depends on the machine (the proven mnist5 profile's radii).  A CUDA request on a
    machine without one gets ``A`` and is then refused by the ``device`` setting itself."""
    d = str(device).strip().lower()
    if d == "auto":
        import torch
        gpu = torch.cuda.is_available()
    else:
        gpu = d.startswith("cuda")
    return gpu_value if gpu else cpu_value


def register_resolvers() -> None:
    """Register the OmegaConf resolvers ``certdp.uid`` (cached per config),
    ``certdp.incomplete`` and ``certdp.on_device`` that the configs use; idempotent."""
    from omegaconf import OmegaConf
    if not OmegaConf.has_resolver("certdp.uid"):
        OmegaConf.register_new_resolver("certdp.uid", unique_suffix, use_cache=True)
    if not OmegaConf.has_resolver("certdp.incomplete"):
        OmegaConf.register_new_resolver("certdp.incomplete", incomplete_suffix)
    if not OmegaConf.has_resolver("certdp.on_device"):
        OmegaConf.register_new_resolver("certdp.on_device", on_device)


# ---------------------------------------------------------------------------------- run dirs
class RunExists(Exception):
    """The final path of a run is taken (``reason`` says by what)."""

    def __init__(self, path: Path, reason: str):
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{path} {reason}")


@dataclass(frozen=True)
class RunPaths:
    """Where a run is staged and where it lands when complete."""
    staging: Path
    final: Path

    @classmethod
    def from_output_dir(cls, output_dir: str | os.PathLike) -> "RunPaths":
        """Split Hydra's output directory ``<final>.incomplete-...`` into staging and final.

        Raises ``ValueError`` when the directory carries no staging marker or the final name is
        not a folder name (``hydra.sweep.subdir=.`` would stage a run inside its own folder)."""
        p = Path(os.path.abspath(output_dir))
        i = p.name.rfind(INCOMPLETE)
        if i < 0:
            raise ValueError(f"{p} is not a staging directory (its name must end with ${{certdp.incomplete:}})")
        name = p.name[:i]
        if name in ("", ".", ".."):
            raise ValueError(f"the run directory must have a name of its own (got {name!r})")
        if not is_run_dir_name(name):
            raise ValueError(f"the run directory's name {name!r} holds {INCOMPLETE!r}, {REPLACED!r} or "
                             f"{RESUMABLE!r}, which mark unfinished folders")
        return cls(staging=p, final=p.with_name(name))


def is_run_dir_name(name: str) -> bool:
    """False for staging, replaced-run and checkpoint folders, which are never runs."""
    return INCOMPLETE not in name and REPLACED not in name and RESUMABLE not in name


def run_kind(path: str | os.PathLike) -> str | None:
    """``"run"`` for a finished certdp run folder (``config.yaml`` and ``run.json``), ``"legacy"``
    for one made before ``run.json`` existed (``config.yaml`` beside Hydra's ``.hydra/``), None for
    anything else (a missing path, a file, a symlink, a staging or replaced folder, a folder of
    runs, a user's folder)."""
    p = Path(path)
    try:
        if p.is_symlink() or not p.is_dir() or not is_run_dir_name(p.name):
            return None
        if not (p / CONFIG_FILE).is_file() or (p / CONFIG_FILE).is_symlink():
            return None
        if (p / RUN_MARKER).is_file():
            return "run"
        if (p / HYDRA_DIR / CONFIG_FILE).is_file():
            return "legacy"
    except OSError:
        return None
    return None


def nested_run(path: str | os.PathLike) -> Path | None:
    """The first folder below ``path`` that is (or is becoming) another run: one holding
    ``config.yaml`` or ``run.json`` outside ``.hydra/``, or a staging or replaced folder.  A
    folder with more than :data:`MAX_RUN_ENTRIES` entries is reported as itself (not one run)."""
    seen = 0
    for root, dirs, files in os.walk(path):
        seen += len(dirs) + len(files)
        if seen > MAX_RUN_ENTRIES:
            return Path(path)
        dirs[:] = [d for d in dirs if d != HYDRA_DIR]
        here = Path(root)
        if here != Path(path):
            if not is_run_dir_name(here.name) or CONFIG_FILE in files or RUN_MARKER in files:
                return here
        for d in dirs:
            if not is_run_dir_name(d):
                return here / d
    return None


class RunPlacement(Exception):
    """A run folder that must not be used (``reason`` says why): inside another run, a staging
    or replaced name."""

    def __init__(self, path: Path, reason: str):
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{path} {reason}")


def check_placement(final: str | os.PathLike) -> None:
    """Refuse a run folder whose name, or the name of a folder above it, marks a staging or
    replaced folder, or that lies inside a finished run (``run=grp/a/nested`` below the run
    ``grp/a``; ``hydra.run.dir=<run>/sub``): a run never writes into another run."""
    final = Path(os.path.abspath(final))
    for part in final.parts:
        if not is_run_dir_name(part):
            raise RunPlacement(final, f"has a staging or replaced name ('{part}' holds {INCOMPLETE!r}, "
                                      f"{REPLACED!r} or {RESUMABLE!r}, which mark unfinished folders)")
    for up in final.parents:
        if run_kind(up) is not None:
            raise RunPlacement(final, f"lies inside the finished run {up}")


def check_free(final: Path, *, overwrite: bool) -> None:
    """Refuse a final path that holds a file, or a directory with anything in it (a finished
    run, or files of unknown origin) unless ``overwrite``; an empty directory is free.

    ``overwrite`` replaces exactly one run folder (:func:`run_kind`) that holds no other run
    (:func:`nested_run`): a folder of runs (``run=grp`` above ``grp/a`` and ``grp/b``) or a folder
    that is not a certdp run is refused even then."""
    final = Path(final)
    if not (final.exists() or final.is_symlink()):
        return
    if not final.is_dir() or final.is_symlink():
        raise RunExists(final, "exists and is not a run directory")
    if not any(final.iterdir()):
        return
    kind = run_kind(final)
    if not overwrite:
        raise RunExists(final, "already holds a finished run" if kind else
                        "already exists and holds files that are not a certdp run")
    _check_replaceable(final, kind)


def _check_replaceable(final: Path, kind: str | None) -> None:
    if kind is None:
        inner = nested_run(final)
        what = f"holds other runs ({inner})" if inner is not None and inner != final else \
            f"is not a certdp run folder (no {CONFIG_FILE} and {RUN_MARKER})"
        raise RunExists(final, f"{what}; overwrite=true replaces exactly one run folder, never this")
    inner = nested_run(final)
    if inner is not None:
        raise RunExists(final, f"holds another run ({inner}); overwrite=true replaces exactly one run folder, "
                               "never a folder of runs")


def commit(paths: RunPaths, *, overwrite: bool) -> Path:
    """Move the staging directory to its final path in one rename and return that path.

    ``overwrite``: a run already there is first renamed aside (``<final>.replaced-...``), then
    replaced, then deleted, so the final path holds the old run or the new one, never a mix.
    Without it, a path taken meanwhile (two runs racing for one name) raises :class:`RunExists`
    and the staging directory is left untouched."""
    staging, final = paths.staging, paths.final
    try:
        os.rename(staging, final)          # POSIX: only onto a missing or empty directory
        return final
    except OSError as e:
        if e.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
            raise
    if not overwrite or not final.is_dir() or final.is_symlink():
        raise RunExists(final, "was written by another run meanwhile")
    _check_replaceable(final, run_kind(final))     # what is there now, not what was there at the start
    aside = final.with_name(f"{final.name}{REPLACED}{os.getpid()}-{_TAG}")
    os.rename(final, aside)
    os.rename(staging, final)
    shutil.rmtree(aside, ignore_errors=True)
    return final


def commit_elsewhere(paths: RunPaths) -> Path:
    """Land a finished run whose final path was taken meanwhile under ``<final>_<uid>``."""
    for _ in range(100):
        alt = paths.final.with_name(f"{paths.final.name}_{unique_suffix()}")
        try:
            os.rename(paths.staging, alt)
            return alt
        except OSError as e:
            if e.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
                raise
    raise RunExists(paths.final, "and 100 alternative names are taken")


def set_aside_leftover(run_dir: Path) -> Path | None:
    """A folder of ``certdp figures`` (``fig-<hash>``, a name derived from the config) that is not
    a finished run (left by a certdp before run folders were staged) is renamed aside, to be
    deleted once the new run lands, so that the run (with ``overwrite=true``, which replaces only
    a run folder) can take its place; returns the aside path (None: nothing to set aside).  A leftover holding
    folders (other than Hydra's ``.hydra``) is not certdp's: ValueError, nothing moved."""
    if not run_dir.is_dir() or run_kind(run_dir) is not None or not any(run_dir.iterdir()):
        return None
    if any(p.is_dir() and p.name != HYDRA_DIR for p in run_dir.iterdir()):
        raise ValueError(f"{run_dir} holds folders and is not a certdp run; allowed: remove or rename it")
    aside = run_dir.with_name(f"{run_dir.name}{REPLACED}{os.getpid()}-{unique_suffix()}")
    os.rename(run_dir, aside)
    return aside


def resumable_dir(final: str | os.PathLike) -> Path:
    """The checkpoint folder of the run that lands at ``final`` (``<final>.resumable``)."""
    final = Path(final)
    return final.with_name(final.name + RESUMABLE)


def discard(paths: RunPaths) -> None:
    """Delete a staging directory (a refused, failed or interrupted run leaves no results)."""
    shutil.rmtree(paths.staging, ignore_errors=True)


# ---------------------------------------------------------------------------------- files
def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write via a temporary file in the same folder, flushed to disk, then renamed: an
    interrupted or failed write leaves the old file or none, never half a file.  Created with
    mode ``0666`` minus the umask (``mkstemp`` would give ``0600``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.part")
        try:
            fd = os.open(tmp, flags, 0o666)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(errno.EEXIST, "no free temporary name", str(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """:func:`atomic_write_bytes` of ``text`` encoded as UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"))


def write_csv(path: Path, df: pd.DataFrame) -> Path:
    atomic_write_text(path, df.to_csv(index=False, float_format=CSV_FLOAT_FORMAT))
    log.debug("wrote %s (%d rows)", path, len(df))
    return Path(path)


def write_config(path: Path, cfg) -> None:
    from omegaconf import OmegaConf
    text = OmegaConf.to_yaml(cfg, resolve=True) if not isinstance(cfg, dict) else OmegaConf.to_yaml(OmegaConf.create(cfg))
    atomic_write_text(path, text)


def write_json(path: Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str))


class OutputRefused(ValueError):
    """An output path certdp must not write (``str``: the reason and what is allowed)."""


def check_output_path(path: str | os.PathLike, *, protect: tuple = (), overwrite: bool = False,
                      header: str = "") -> Path:
    """The path a command may write one output file to (``certdp predict --output``); refused
    with :class:`OutputRefused`: a folder, a FIFO, a device or a symbolic link (the file written
    would replace it with a regular file), any path in ``protect`` (the command's inputs), a path
    inside a run folder (a finished run never changes), a path below a file or in a folder that
    does not exist or is not writable, and an existing file unless ``overwrite`` -- and even then
    only a file that ``header`` shows is an earlier output of the same kind (its first line)."""
    p = Path(os.path.abspath(Path(path).expanduser()))
    try:
        st = os.lstat(p)
    except (FileNotFoundError, NotADirectoryError):        # nothing there (a file above it is refused below)
        st = None
    except OSError as e:
        raise OutputRefused(f"{p} cannot be checked ({e.strerror or e}); allowed: a file path in a writable "
                            "folder") from None
    import stat as S
    for other in protect:
        q = Path(os.path.abspath(Path(other).expanduser()))
        same = q == p
        if not same and st is not None:
            try:
                same = os.path.samefile(p, q)
            except OSError:
                same = False
        if same:
            raise OutputRefused(f"{p} is an input of this command ({q}); allowed: another file")
    if st is not None:
        if S.S_ISLNK(st.st_mode):
            raise OutputRefused(f"{p} is a symbolic link; allowed: a plain file path (the link would be replaced)")
        if S.S_ISDIR(st.st_mode):
            raise OutputRefused(f"{p} is a folder; allowed: a file path such as {p / 'predictions.csv'}")
        if not S.S_ISREG(st.st_mode):
            kind = "a FIFO" if S.S_ISFIFO(st.st_mode) else "a device" if S.S_ISCHR(st.st_mode) or S.S_ISBLK(st.st_mode) \
                else "not a regular file"
            raise OutputRefused(f"{p} is {kind}; allowed: a regular file path (the file written would replace it); "
                                "to stream the output, leave --output out (standard output)")
        if not overwrite:
            raise OutputRefused(f"{p} already exists; allowed: a new file name, or --overwrite to replace an "
                                "earlier output of this command")
        try:
            with open(p, "rb") as f:
                first = f.readline(len(header) + 3).decode("utf-8", "replace").rstrip("\r\n")
        except OSError as e:
            raise OutputRefused(f"{p} cannot be read ({e.strerror or e}); allowed: a new file name") from None
        if header and first != header:
            raise OutputRefused(f"{p} is not an earlier output of this command (its first line is not "
                                f"'{header}'), so --overwrite does not replace it; allowed: a new file name")
    for up in p.parents:
        if run_kind(up) is not None:
            raise OutputRefused(f"{p} lies inside the finished run {up}; allowed: a path outside run folders")
        if up.exists() and not up.is_dir():
            raise OutputRefused(f"{p} lies below {up}, which is a file; allowed: a path in a folder")
    if not (p.parent.is_dir() and os.access(p.parent, os.W_OK | os.X_OK)):
        raise OutputRefused(f"the folder {p.parent} does not exist or is not writable; allowed: a writable folder")
    return p


def sha256_file(path: str | os.PathLike, *, chunk: int = 1 << 20) -> str:
    """The SHA-256 (hex) of a file's bytes, read in chunks."""
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


# config keys that name a file a run reads (their checksums go to run.json)
INPUT_KEYS = ("dataset.path", "queries", "dataset.encoder_path")
MAX_INPUT_FILES = 1000           # files of an input folder that are checksummed


def input_records(cfg: dict) -> list[dict]:
    """``[{key, path, kind, sha256, bytes}]`` of the input files named by :data:`INPUT_KEYS` in a
    resolved config: a file's SHA-256, or for a folder the SHA-256 of its files' relative paths
    and checksums (at most :data:`MAX_INPUT_FILES`; beyond that ``sha256`` is null).  Values that
    are not existing paths (a dataset fetched by name) are left out."""
    out = []
    for key in INPUT_KEYS:
        node = cfg
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, str) or not node:
            continue
        p = Path(node).expanduser()
        try:
            if p.is_file():
                out.append({"key": key, "path": str(p.resolve()), "kind": "file", "sha256": sha256_file(p),
                            "bytes": p.stat().st_size})
            elif p.is_dir():
                import hashlib
                files = sorted(f for f in p.rglob("*") if f.is_file())
                h, total = hashlib.sha256(), 0
                for f in files[:MAX_INPUT_FILES]:
                    h.update(f"{f.relative_to(p).as_posix()}\0{sha256_file(f)}\n".encode())
                    total += f.stat().st_size
                out.append({"key": key, "path": str(p.resolve()), "kind": "folder",
                            "sha256": h.hexdigest() if len(files) <= MAX_INPUT_FILES else None, "bytes": total})
        except OSError:
            continue                 # unreadable here: the run itself reports it
    return out


def write_run_record(run_dir: Path, *, command: str, version: str, inputs: list[dict]) -> None:
    """``run.json`` (:data:`RUN_FORMAT`), written after every other file of the run: the command,
    the certdp version, the SHA-256 of ``config.yaml`` as written, and the input checksums
    (:func:`input_records`), ``version`` the certdp version.  ``certdp rerun`` refuses a run whose ``config.yaml`` no longer has
    that checksum, and warns when an input's checksum differs."""
    run_dir = Path(run_dir)
    write_json(run_dir / RUN_MARKER, {
        "format": RUN_FORMAT, "command": command, "certdp_version": version,
        "config": {"file": CONFIG_FILE, "format": CONFIG_FORMAT, "sha256": sha256_file(run_dir / CONFIG_FILE)},
        "inputs": inputs})


def write_outputs(out_dir: Path, frames: dict[str, pd.DataFrame]) -> list[tuple[str, int]]:
    """Write ``<name>.csv`` for every frame into ``out_dir`` (``<name>.json`` for a dict, e.g. the
    released models of ``certdp ags``, whose "rows" are its ``releases``; ``<name>.txt`` for a
    string, whose rows are its lines); returns ``(file name, rows)``.  A name may hold one folder
    component (``publish/released``: the publishable files, :mod:`certdp.certify.publish`)."""
    out = []
    for name, df in frames.items():
        parts = name.split("/")
        if len(parts) > 2 or not all(parts) or any(p in (".", "..") for p in parts):
            raise ValueError(f"frame name {name!r}: allowed: NAME or FOLDER/NAME")
        if isinstance(df, str):
            atomic_write_text(Path(out_dir) / f"{name}.txt", df)
            out.append((f"{name}.txt", df.count("\n")))
        elif isinstance(df, dict):
            write_json(Path(out_dir) / f"{name}.json", df)
            out.append((f"{name}.json", len(df.get("releases", ()))))
        else:
            write_csv(Path(out_dir) / f"{name}.csv", df)
            out.append((f"{name}.csv", len(df)))
    published = [n for n, _ in out if n.startswith("publish/")]
    report = [n for n, _ in out if not n.startswith("publish/")]
    log.info("private report, not publishable: %s (and log.txt, config.yaml, run.json)", ", ".join(report))
    if published:
        log.info("publishable (DP releases and data-independent metadata only): %s", ", ".join(published))
    return out
