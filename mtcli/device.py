"""Where computation runs: the device, and how many CPU threads torch may use.

Imports torch only inside the functions that need it: the config checks ask how many CPUs
there are before torch is loaded.
"""

from __future__ import annotations

import os
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


def use_cores(threads: int = 0) -> int:
    """Set torch's intra-op threads: `threads`, or every CPU this process may run on (0)."""
    import torch

    threads = threads if threads > 0 else available_cpus()
    torch.set_num_threads(threads)
    return threads
