"""Where computation runs and how the process is tuned for it: the device, the CPU threads
torch may use, how the C allocator treats freed memory, and the size of oneDNN's kernel caches.

Imports torch only inside the functions that need it: the config checks ask how many CPUs
there are before torch is loaded. Importing this module changes nothing: each setting is a
call that the commands which want it make (the library leaves the process as it found it).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import os
import sys
import time
from typing import TYPE_CHECKING

from mtcli.errors import UserError

if TYPE_CHECKING:
    import torch


def available_cpus() -> int:
    """The CPUs this process may run on: its affinity mask, which inside a container or under
    taskset is fewer than the machine's cores (what torch's default counts)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def pick_device(name: str) -> torch.device:
    """auto -> cuda when available, else cpu; an explicit cuda without a GPU is a user error."""
    import torch

    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: no CUDA device is available")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def import_torch() -> None:
    """Import torch, then freeze what exists: the collector no longer walks torch's objects.

    They live as long as the process, yet every full collection walked them again while the
    rest of mtcli was imported and the model loaded: 0.3 s of a one-sentence translate's
    start-up here (bench/ct2.py measures it). Commands call this before anything that needs
    torch; the collector stays on for the objects made after.
    """
    os.environ.setdefault("GOMP_SPINCOUNT", str(SPIN_COUNT))  # read once, as OpenMP loads
    import torch  # noqa: F401

    gc.freeze()


# Why: torch's OpenMP threads (libgomp) spin up to 300,000 iterations at every barrier before
# they sleep. With a CPU-bound process beside mtcli on a 2-core machine, the spinning thread and
# the other process take turns on one core, and each barrier waits for a thread that is not
# running: 300 test lines took 6.1-6.4 s with 2 threads against 3.4 s with one. 10,000 spins
# cost nothing measurable on an idle machine (2.7-2.8 s both) and cut that to 4.4-4.5 s; the
# thread count from idle_cpus does the rest (bench/threads.py measures both).
SPIN_COUNT = 10_000


def use_cores(threads: int = 0) -> int:
    """Set torch's intra-op threads: `threads`, or the CPUs this process may run on that no
    other process is busy on now (0: idle_cpus)."""
    import torch

    threads = threads if threads > 0 else idle_cpus()
    torch.set_num_threads(threads)
    return threads


def idle_cpus() -> int:
    """The CPUs this process may run on, less those other processes keep busy right now (at
    least 1): a thread that waits for a core another process holds stalls every other thread
    at each barrier, so on a busy machine fewer threads are faster (see SPIN_COUNT)."""
    available = available_cpus()
    idle = (os.cpu_count() or available) - _others_running()
    return max(1, min(available, idle))


def _others_running(samples: int = 2) -> int:
    """Runnable threads of other processes (the kernel's procs_running, less this process's own
    running threads): the lesser of two samples 2 ms apart, so a process that only passes by is
    not counted."""
    counts = []
    for i in range(samples):
        own_before = _own_running()  # before and after: a spinning thread may fall asleep between
        try:
            with open("/proc/stat", encoding="ascii") as f:
                line = next((ln for ln in f if ln.startswith("procs_running")), "")
        except OSError:
            return 0  # not Linux: nothing known, all CPUs used
        if not line:
            return 0
        counts.append(int(line.split()[1]) - max(own_before, _own_running()))
        if i + 1 < samples:
            time.sleep(0.002)
    return max(0, min(counts))


def _own_running() -> int:
    """This process's threads that are running or runnable (at least the one reading).

    Why: torch's OpenMP threads spin for a while after each parallel region; counted as another
    process's, they made the thread count of the next run differ, and with it the float sums of
    the training step (a resumed run then drifted from an uninterrupted one in the 7th digit)."""
    running = 0
    try:
        tasks = list(os.scandir("/proc/self/task"))
    except OSError:
        return 1  # not Linux: /proc/stat is not there either, and nothing is counted
    for task in tasks:
        try:
            with open(os.path.join(task.path, "stat"), encoding="ascii", errors="replace") as f:
                state = f.read().rpartition(")")[2].split()[:1]
        except OSError:
            continue  # the thread ended while we looked
        running += state == ["R"]
    return max(1, running)


# ---------------------------------------------------------------- freed memory
# Why: decoding allocates tensors of a new size at nearly every step (the logits alone are rows x
# vocabulary, and the rows shrink as sentences finish). glibc hands large blocks back to the
# kernel when they are freed (mmap'd blocks at once, the top of the heap past a threshold that
# moves with the sizes it sees), so the next step's tensor is faulted in page by page again. A
# beam-5 pass over the 2,000 Tatoeba test lines took ~250k minor page faults; keeping freed
# memory for reuse cut them to ~120k and the pass 4% (greedy 6%, int8 12%) on this project's
# 2-core machine, peak RSS within the run-to-run noise. Torch's own CUDA allocator keeps freed
# blocks for the same reason.
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
    mallopt = _glibc("mallopt", (ctypes.c_int, ctypes.c_int))
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


def release_freed_memory() -> None:
    """Hand the memory freed inside the heap back to the kernel (glibc's malloc_trim), for a
    pass whose tensors grow batch by batch: blocks kept for reuse (keep_freed_memory) that the
    next, larger batch cannot use only add to the peak. A no-op off glibc."""
    trim = _glibc("malloc_trim", (ctypes.c_size_t,))
    if trim is not None:
        trim(0)


@functools.cache
def _glibc(name: str, argtypes: tuple):
    """The C library's function `name` (returning an int), or None off Linux or where the
    library has no such function (musl's mallopt is a stub; it may have no malloc_trim)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None
    function.argtypes, function.restype = list(argtypes), ctypes.c_int
    return function


# ---------------------------------------------------------------- oneDNN's kernel caches
# oneDNN compiles a kernel for each matmul shape it meets and keeps the last 1,024 (in its
# own cache and in torch's ideep layer), each holding memory that grows with the rows. Decoding
# and training meet new shapes at nearly every step, so both caches only grew: a bf16 training
# run (bf16 matmuls are oneDNN's too) peaked at 3.2 GB RSS after 2 minutes, 1.0 GB keeping 16.
KERNEL_CACHES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
KEPT_KERNELS = 16


def limit_kernel_caches() -> None:
    """Keep oneDNN's kernel caches small (a user's own setting wins). oneDNN reads these when
    it first runs, so the commands call this before any computation."""
    for name in KERNEL_CACHES:
        os.environ.setdefault(name, str(KEPT_KERNELS))
