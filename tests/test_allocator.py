"""Freed memory is kept for reuse in decoding processes: fewer pages faulted in again."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

# a fresh process, so this test's own allocator settings (and pytest's) do not count; mallocs
# of a few changing sizes, all freed, ten times: what a decoding step does with its tensors
PROBE = """
import ctypes, ctypes.util, resource, sys
from mtcli.device import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else False
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
print(kept, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> tuple[bool, int]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout.split()
    return out[0] == "True", int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_kept_memory_is_not_faulted_in_again():
    """10 rounds of four 4-31 MB blocks touch ~120k pages; with freed memory kept, glibc
    reuses the blocks and only the largest round's pages are new (measured: 119,872 -> 17,907)."""
    kept, with_keep = _faults("keep")
    default_kept, default = _faults("default")
    assert kept and not default_kept
    assert default > 60_000, "the probe no longer makes glibc return its memory"
    assert with_keep < default / 3, (with_keep, default)


def test_decoding_commands_keep_freed_memory_on_cpu(monkeypatch):
    """translate, eval, serve and attention set up decoding through engines.build.prepare_decoding."""
    import mtcli.device
    from mtcli.engines.build import prepare_decoding

    calls = []
    monkeypatch.setattr(mtcli.device, "keep_freed_memory", lambda: calls.append(1))
    assert prepare_decoding("cpu", 1).type == "cpu"
    assert calls == [1]
