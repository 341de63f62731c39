"""The fixtures of the hardening probes (issue 28): built only when a selected probe needs them."""

from __future__ import annotations

from pathlib import Path

NEEDS: set = set()


def make_fixtures(fx: Path, python: str, root: Path, have: dict, needs: set) -> None:
    """Nothing yet."""
