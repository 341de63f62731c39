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
_TAG = secrets.token_hex(2)


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
        return cls(staging=p, final=p.with_name(name))


def is_run_dir_name(name: str) -> bool:
    """False for staging and replaced-run folders, which are never runs."""
    return INCOMPLETE not in name and REPLACED not in name


def check_free(final: Path, *, overwrite: bool) -> None:
    """Refuse a final path that holds a file, or a directory with anything in it (a finished
    run, or files of unknown origin) unless ``overwrite``; an empty directory is free."""
    final = Path(final)
    if not (final.exists() or final.is_symlink()):
        return
    if not final.is_dir() or final.is_symlink():
        raise RunExists(final, "exists and is not a run directory")
    if overwrite:
        return
    if any(final.iterdir()):
        raise RunExists(final, "already holds a finished run")


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
    atomic_write_text(path, df.to_csv(index=False, float_format="%.10g"))
    log.debug("wrote %s (%d rows)", path, len(df))
    return Path(path)


def write_config(path: Path, cfg) -> None:
    from omegaconf import OmegaConf
    text = OmegaConf.to_yaml(cfg, resolve=True) if not isinstance(cfg, dict) else OmegaConf.to_yaml(OmegaConf.create(cfg))
    atomic_write_text(path, text)


def write_json(path: Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str))


def write_outputs(out_dir: Path, frames: dict[str, pd.DataFrame]) -> list[tuple[str, int]]:
    """Write ``<name>.csv`` for every frame into ``out_dir`` (``<name>.json`` for a dict, e.g. the
    released models of ``certdp ags``; its "rows" are its ``releases``); returns ``(file name, rows)``."""
    out = []
    for name, df in frames.items():
        if isinstance(df, dict):
            write_json(Path(out_dir) / f"{name}.json", df)
            out.append((f"{name}.json", len(df.get("releases", ()))))
            continue
        write_csv(Path(out_dir) / f"{name}.csv", df)
        out.append((f"{name}.csv", len(df)))
    return out
