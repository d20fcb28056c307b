"""Processes: torchrun or SLURM environments, gloo on CPU, NCCL on GPU (the losses' gathers: `compclip.gather`)."""
from __future__ import annotations

import datetime
import os
import re
import subprocess
from dataclasses import dataclass, field

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistEnv:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    # feature gathers get their own communicator, so their backward all-reduce never
    # interleaves with DDP's gradient buckets on the default group
    group: object | None = None
    joined: bool = False  # init_distributed made the default group: `leave` ends it


    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def _first_slurm_host(nodelist: str) -> str:
    """The first host of a SLURM node list ("gpu[01-04,07],cpu1" -> "gpu01")."""
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True)
        return out.stdout.split()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        m = re.match(r"([^,\[]+)(?:\[([^\],-]+))?", nodelist)
        return (m.group(1) + (m.group(2) or "")) if m else "127.0.0.1"


def world_from_env() -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun's variables, else SLURM's (srun without torchrun)."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0))
    if "SLURM_PROCID" in os.environ and int(os.environ.get("SLURM_NTASKS", 1)) > 1:
        rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
        os.environ.setdefault(
            "MASTER_ADDR", _first_slurm_host(os.environ.get("SLURM_JOB_NODELIST", os.environ.get("SLURM_NODELIST", "127.0.0.1")))
        )
        os.environ.setdefault("MASTER_PORT", str(29500 + int(os.environ.get("SLURM_JOB_ID", 0)) % 1000))
        os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), str(world)
        return rank, world, int(os.environ.get("SLURM_LOCALID", 0))
    return 0, 1, 0


def init_distributed(device: str | None = None, timeout: float | None = None) -> DistEnv:
    """Join the process group when launched with several processes; pick this process's device. `timeout`: seconds a
    collective waits for the other ranks (torch's default where None)."""
    rank, world, local = world_from_env()
    cuda = torch.cuda.is_available() and device != "cpu"
    dev = torch.device(f"cuda:{local}") if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    group, joined = None, False
    wait = {"timeout": datetime.timedelta(seconds=timeout)} if timeout is not None else {}
    if world > 1:
        if not dist.is_initialized():
            dist.init_process_group(backend="nccl" if cuda else "gloo", rank=rank, world_size=world, **wait)
            joined = True
        group = dist.new_group(**wait)  # a new group does not take the default group's timeout
    return DistEnv(rank, world, local, dev, group, joined)


def leave(env: DistEnv) -> None:
    """End the process groups `init_distributed` made. A rank that exits with them alive can abort in gloo's threads
    at interpreter exit ("terminate called without an active exception", pytorch/pytorch#190489): torchrun then
    reports a finished or preempted run as failed."""
    if env.joined and dist.is_initialized():
        dist.destroy_process_group()
