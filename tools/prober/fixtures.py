"""The fixtures of a pass, built once in ``<pass>/_fixtures``: the csv tables
(:mod:`tools.prober.tables`), a real sklearn table, a corrupted cache, and the slow ones (a tiny
encoder, finished runs, copies of the cached adult files) only when a selected probe ``needs``
them.  :func:`make_fixtures` returns what is available (``True``) or why not (a string: the
probes that need it are skipped and say why)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tools.prober import fixtures_hardening, fixtures_surfaces
from tools.prober.tables import write_tables

# what the probes may name in extra["needs"], built only when a selected probe does
NEEDS = {"encoder", "rerun", "diabetes"} | fixtures_surfaces.NEEDS | fixtures_hardening.NEEDS


def make_fixtures(fx: Path, python: str, root: Path, needs: set | None = None) -> dict:
    """The fixtures of every probe below ``fx``; the slow ones only when a selected probe
    ``needs`` them (None: all)."""
    have: dict = {}
    write_tables(fx)
    c = fx / "csv"
    try:
        from sklearn.datasets import load_diabetes
        df = load_diabetes(as_frame=True).frame
        df.to_csv(c / "diabetes.csv", index=False)
        have["diabetes"] = True
    except Exception as e:           # the probe is skipped, and says why
        have["diabetes"] = f"sklearn diabetes unavailable: {e}"
    bad = fx / "badcache" / "california"
    bad.mkdir(parents=True, exist_ok=True)
    (bad / "california_housing.parquet.brotli").write_bytes(b"not the california table\n" * 40)
    enc = fx / "enc"
    if needs is None or "encoder" in needs:
        r = subprocess.run([python, str(Path(root) / "tests" / "tiny_encoder.py"), str(enc)], capture_output=True,
                           text=True, env={**os.environ, "PYTHONPATH": str(root)}, timeout=300)
        have["encoder"] = True if r.returncode == 0 else f"tiny encoder not built: {r.stderr.strip()[-200:]}"
    if needs is None or "rerun" in needs:
        r = subprocess.run([python, "-m", "certdp.cli", "rerun", "--help"], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(root)}, timeout=120, cwd=str(fx))
        have["rerun"] = True if r.returncode == 0 else "no `certdp rerun` in this tree"
    fixtures_surfaces.make_fixtures(fx, python, root, have, fixtures_surfaces.NEEDS if needs is None else needs)
    fixtures_hardening.make_fixtures(fx, python, root, have, fixtures_hardening.NEEDS if needs is None else needs)
    return have
