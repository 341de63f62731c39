"""The only module that writes files: run directories, tidy CSVs (atomic), resolved configs."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

import pandas as pd

log = logging.getLogger("certdp")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write via a temporary file in the same folder and rename: an interrupted run leaves
    either the old file or none, never half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """:func:`atomic_write_bytes` of ``text`` encoded as UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"))


def write_csv(path: Path, df: pd.DataFrame) -> Path:
    atomic_write_text(path, df.to_csv(index=False, float_format="%.10g"))
    log.info("wrote %s (%d rows)", path, len(df))
    return Path(path)


def write_config(path: Path, cfg) -> None:
    from omegaconf import OmegaConf
    text = OmegaConf.to_yaml(cfg, resolve=True) if not isinstance(cfg, dict) else OmegaConf.to_yaml(OmegaConf.create(cfg))
    atomic_write_text(path, text)


def write_json(path: Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str))


def write_outputs(out_dir: Path, frames: dict[str, pd.DataFrame]) -> list[Path]:
    return [write_csv(Path(out_dir) / f"{name}.csv", df) for name, df in frames.items()]


def read_results(run_dir: Path, name: str = "results") -> pd.DataFrame:
    return pd.read_csv(Path(run_dir) / f"{name}.csv")
