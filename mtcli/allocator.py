"""How the C allocator treats memory a decoding process frees. Imports nothing heavy.

Why: decoding allocates tensors of a new size at nearly every step (the logits alone are rows x
vocabulary, and the rows shrink as sentences finish). glibc hands large blocks back to the
kernel when they are freed (mmap'd blocks at once, the top of the heap past a threshold that
moves with the sizes it sees), so the next step's tensor is faulted in page by page again. A
beam-5 pass over the 2,000 Tatoeba test lines took ~250k minor page faults; keeping freed
memory for reuse cut them to ~120k and the pass 4% (greedy 6%, int8 12%) on this project's
2-core machine, peak RSS within the run-to-run noise. Torch's own CUDA allocator keeps freed
blocks for the same reason.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

M_TRIM_THRESHOLD = -1  # glibc's malloc.h: free memory at the top of the heap kept up to this
M_MMAP_THRESHOLD = -3  # blocks at least this large get their own mapping, returned on free
MMAP_THRESHOLD = 32 << 20  # the most glibc accepts on 64-bit; larger blocks still map
TRIM_THRESHOLD = 1 << 30


@functools.cache
def keep_freed_memory() -> bool:
    """Ask glibc to keep freed memory for reuse instead of returning it to the kernel.

    Process-wide and for its lifetime, so the decoding commands call it, not the library.
    Setting both values also stops glibc's dynamic adjustment of them. Returns whether it
    took effect (False off Linux or on a C library without mallopt, such as musl's stub).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
