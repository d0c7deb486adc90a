"""The process group of a distributed run (torchrun sets RANK / WORLD_SIZE): collectives on the
training device, and each rank's random state.

A single process is a group of one, so the training loop calls the same methods either way.
Collectives run on tensors of the training device: nccl (CUDA) reduces only CUDA tensors,
gloo (CPU) only CPU ones.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class ProcessGroup:
    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def any(self, flag: bool) -> bool:
        """True on every rank if it is True on any (so all ranks stop at the same step)."""
        if self.world == 1:
            return flag
        t = torch.tensor([int(flag)], device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def sum(self, value: float) -> float:
        if self.world == 1:
            return value
        # float64 where the device has it: counts of tokens must add up exactly
        dtype = torch.float64 if self.device.type == "cpu" else torch.float32
        t = torch.tensor([value], dtype=dtype, device=self.device)
        dist.all_reduce(t)
        return float(t.item())

    def gather(self, obj: object) -> list:
        """Every rank's `obj`, in rank order (used to save each rank's random state)."""
        if self.world == 1:
            return [obj]
        out: list = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def stop(self) -> None:
        if self.world > 1 and dist.is_initialized():
            dist.destroy_process_group()


def start_process_group(device: torch.device) -> ProcessGroup:
    """Join the group torchrun describes in the environment; a group of one without torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return ProcessGroup(device=device)
    if device.type == "cuda":
        # each process drives the GPU of its local rank; set before nccl starts
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return ProcessGroup(dist.get_rank(), dist.get_world_size(), device)


# ---------------------------------------------------------------- random state
def rng_state(device: torch.device) -> dict:
    """This process's generators: torch CPU, CUDA (when training there) and Python's."""
    state = {"torch": torch.get_rng_state(), "python": list(random.getstate()[1])}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate((3, tuple(state["python"]), None))
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)
