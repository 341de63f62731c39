"""The hybrid's resumable work folder (``hybrid.work_dir``): keys and atomic files.

Every unit of work (a DP-LoRA adapter and its checkpoints, an AGS certificate, one (N, eps) cell
of result rows) lives in a file named by :func:`digest` of exactly the settings and data it
depends on, so a rerun finds finished units and a changed setting never reuses a stale one.
Files are written through :func:`certdp.results.atomic_write_bytes` (temporary file + rename).
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import asdict
from pathlib import Path

import torch

from certdp.results import atomic_write_bytes


def digest(*parts) -> str:
    """A short, stable key (16 hex digits of SHA-256) of ``parts``: dataclasses, dicts, lists,
    numbers (floats rounded to 12 digits), paths and strings."""
    def norm(o):
        if hasattr(o, "__dataclass_fields__"):
            return norm(asdict(o))
        if isinstance(o, dict):
            return {str(k): norm(v) for k, v in sorted(o.items())}
        if isinstance(o, (list, tuple)):
            return [norm(v) for v in o]
        if isinstance(o, float):
            return round(o, 12)
        if isinstance(o, Path):
            return str(o)
        return o
    return hashlib.sha256(json.dumps(norm(list(parts)), sort_keys=True, default=str).encode()).hexdigest()[:16]


def save_torch(obj, path: Path) -> None:
    """``torch.save`` of ``obj`` to ``path``, atomically."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write_bytes(path, buf.getvalue())


def load_torch(path: Path, *, weights_only: bool = False):
    return torch.load(path, map_location="cpu", weights_only=weights_only)


def save_json(obj, path: Path) -> None:
    """JSON of ``obj`` (keys in their order; numpy scalars as floats) to ``path``, atomically."""
    atomic_write_bytes(path, json.dumps(obj, default=float).encode("utf-8"))


def load_json(path: Path):
    return json.loads(Path(path).read_text(encoding="utf-8"))
