"""certdp: formal verification (Abstract Gradient Training) turned into differential privacy."""

import os as _os
import signal as _signal
import sys as _sys


def _startup_signal(signum, frame) -> None:
    """SIGINT/SIGTERM while the command line starts (imports take seconds; nothing is written
    yet): one line and exit 128 + signum, instead of a KeyboardInterrupt traceback or a silent
    end.  :func:`certdp.cli.main` replaces this handler once it runs."""
    name = _signal.Signals(signum).name
    _os.write(2, f"certdp: interrupted by {name} during start-up; nothing was written\n".encode())
    _os._exit(128 + signum)


# Only for the command line (``python -m certdp.cli``: argv[0] is "-m" while the package is
# imported; the ``certdp`` script), never for a program that imports certdp as a library.
if _sys.argv[:1] == ["-m"] or _os.path.basename(_sys.argv[0] if _sys.argv else "") == "certdp":
    for _sig in (_signal.SIGINT, _signal.SIGTERM):
        try:
            _signal.signal(_sig, _startup_signal)
        except ValueError:        # not the main thread
            pass

import torch  # noqa: E402  (after the start-up handler: importing torch takes most of the start-up)

__version__ = "0.1.0"

# All certified arithmetic is float64: bounds are compared against retrained parameters
# whose differences can be far below float32 resolution.
DTYPE = torch.float64


def _tune_malloc() -> None:
    """Keep large freed blocks on the heap (glibc): AGT allocates many ~100 MB tensors per step,
    and returning each to the OS costs a page fault per 4 KiB on the next allocation (measured:
    4x slower training).  A no-op where glibc's mallopt is unavailable."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-4, 0)           # M_MMAP_MAX: never serve allocations by mmap
        libc.mallopt(-1, 2 ** 30)     # M_TRIM_THRESHOLD: keep up to 1 GiB of free heap
    except (OSError, AttributeError):
        pass


_tune_malloc()
