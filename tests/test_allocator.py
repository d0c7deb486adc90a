"""Freed memory is kept for reuse in decoding processes (fewer pages faulted in again), and handed
back when a pass whose blocks only grow asks."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

# a fresh process, so this test's own allocator settings (and pytest's) do not count; mallocs
# of a few changing sizes, all freed, ten times: what a decoding step does with its tensors
PROBE = """
import ctypes, ctypes.util, resource, sys
if sys.argv[1] == "decoding":  # as translate, eval, serve and attention set up on CPU
    from mtcli.engines.build import prepare_decoding
    prepare_decoding("cpu", 1)
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for step in range(10):
    blocks = [(libc.malloc(n), n) for n in ((4 + step + 3 * j) << 20 for j in range(4))]
    for p, n in blocks:
        ctypes.memset(p, 1, n)
    for p, _ in blocks:
        libc.free(p)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout
    return int(out)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_decoding_process_does_not_fault_freed_memory_in_again():
    """10 rounds of four 4-31 MB blocks touch ~120k pages; in a process set up to decode
    (engines.build.prepare_decoding: translate, eval, serve and attention on CPU), glibc keeps
    the freed blocks for reuse and only the largest round's pages are new (119,872 -> 17,907)."""
    decoding = _faults("decoding")
    default = _faults("default")
    assert default > 60_000, "the probe no longer makes glibc return its memory"
    assert decoding < default / 3, (decoding, default)


# blocks kept for reuse, then handed back: resident memory before and after (from /proc)
TRIM_PROBE = """
import ctypes, ctypes.util, os
from mtcli.device import keep_freed_memory, release_freed_memory
keep_freed_memory()
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
def resident():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20
blocks = [libc.malloc(8 << 20) for _ in range(25)]
for p in blocks:
    ctypes.memset(p, 1, 8 << 20)
pin = libc.malloc(64)  # above the blocks: the heap's top cannot simply shrink
for p in blocks:
    libc.free(p)
kept = resident()
release_freed_memory()
print(kept, resident())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_memory_kept_for_reuse_is_handed_back_when_asked():
    """200 MB freed inside the heap stays resident (kept for reuse) until
    release_freed_memory hands it back: what a forced pass over a long line does."""
    out = subprocess.run(
        [sys.executable, "-c", TRIM_PROBE], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout
    kept, released = map(int, out.split())
    assert kept - released > 150, (kept, released)
