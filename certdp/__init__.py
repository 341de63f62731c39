"""certdp: formal verification (Abstract Gradient Training) turned into differential privacy."""

import torch

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
