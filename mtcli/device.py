"""Where computation runs: the device, and how many CPU threads torch may use."""

from __future__ import annotations

import os

import torch

from mtcli.errors import UserError


def pick_device(name: str) -> torch.device:
    """auto -> cuda when available, else cpu; an explicit cuda without a GPU is a user error."""
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: no CUDA device is available")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def use_cores(threads: int = 0) -> int:
    """Set torch's intra-op threads: `threads`, or every core this process may run on.

    torch's default counts the machine's physical cores, which overshoots inside a
    container or under taskset; the affinity mask is what the process really has.
    """
    if threads <= 0:
        threads = (
            len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else (os.cpu_count() or 1)
        )
    torch.set_num_threads(threads)
    return threads
