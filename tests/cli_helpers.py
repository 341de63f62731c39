"""Helpers for running the ``certdp`` command line inside the test process."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator


@contextlib.contextmanager
def restored_root_logging() -> Iterator[None]:
    """Put the root logger back as it was once the block ends: Hydra adds its log.txt and console
    handlers to the root logger on every run (closed and removed here, so that files are not left
    open and later runs do not log twice) and may remove the handlers that were there (re-added),
    and it sets the root level (restored)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        for h in root.handlers[:]:
            if h not in handlers:
                root.removeHandler(h)
                h.close()
        for h in handlers:
            if h not in root.handlers:
                root.addHandler(h)
        root.setLevel(level)
