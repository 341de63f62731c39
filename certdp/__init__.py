"""certdp: formal verification (Abstract Gradient Training) turned into differential privacy.

Importing the package has no side effects: no signal handler, no allocator setting, no torch
import.  The command line (:func:`certdp.cli.main`, ``python -m certdp.cli``) handles signals
from its first line and tunes the allocator (:func:`tune_malloc`); a program that trains with
certdp as a library and wants the same allocator behaviour calls :func:`tune_malloc` itself.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    # All certified arithmetic is float64: bounds are compared against retrained parameters
    # whose differences can be far below float32 resolution.  Resolved on first use so that
    # `import certdp` does not import torch (seconds) -- the command line's start-up signal
    # handler must be in place before that happens.
    if name == "DTYPE":
        import torch
        return torch.float64
    raise AttributeError(f"module 'certdp' has no attribute {name!r}")


def tune_malloc() -> bool:
    """Keep large freed blocks on the heap (glibc): AGT allocates many ~100 MB tensors per step,
    and returning each to the OS costs a page fault per 4 KiB on the next allocation (measured:
    4x slower training).  Process-wide, so only the command line calls it (at start-up and in
    each job a launcher runs); True where glibc's ``mallopt`` took both settings, False (a
    no-op) elsewhere."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        ok = libc.mallopt(-4, 0)                # M_MMAP_MAX: never serve allocations by mmap
        ok &= libc.mallopt(-1, 2 ** 30)         # M_TRIM_THRESHOLD: keep up to 1 GiB of free heap
        return bool(ok)
    except (OSError, AttributeError):
        return False
