"""Synchronous data-parallel training across GPUs and nodes (the paper's multi-GPU design).

Every rank runs its own simulators and collector and computes gradients on its own batch; the
gradients are averaged across ranks (one all-reduce per step over flattened buckets) before the
optimizer steps, so N ranks train with an N-times larger batch on identical weights. Rank 0
alone writes logs, evaluations and checkpoints; every rank resumes from the same checkpoint.

The process group comes from the environment, whoever launched us:

- ``torchrun --nproc-per-node N recipes/ppo_atari.py ...`` sets ``RANK``/``WORLD_SIZE``/
  ``LOCAL_RANK``/``MASTER_ADDR``/``MASTER_PORT``;
- a submitit SLURM job (``python -m slurm.launch``) gets them from
  ``submitit.helpers.TorchDistributedEnvironment().export()``.

NCCL on CUDA (one rank per GPU: ``cuda:LOCAL_RANK``), gloo on CPU.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from accelrl.errors import RunFailure

log = logging.getLogger("accelrl")


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


class PeerLost(RunFailure):
    """A collective failed on this rank: another rank died, hung past the timeout, or the
    network between them broke. The run stops with one line (exit code 3)."""


@contextlib.contextmanager
def _collective(op: str):
    """Turn a backend failure inside ``op`` into ``PeerLost`` naming this rank and the op.

    A peer that dies closes its connections, so gloo raises at once; one that hangs makes
    the others wait for the process group's timeout (``init_from_environment``'s, 600 s).
    """
    try:
        yield
    except RuntimeError as err:  # DistBackendError and gloo/NCCL errors are RuntimeErrors
        text = str(err).strip()
        first = text.splitlines()[0][:200] if text else type(err).__name__
        rank = dist.get_rank() if dist.is_initialized() else "?"
        world = dist.get_world_size() if dist.is_initialized() else "?"
        raise PeerLost(
            f"rank {rank} of {world}: {op} failed; another rank has probably died or stopped "
            f"answering ({first})"
        ) from err


def _env_world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def init_from_environment(timeout_s: float = 600.0) -> DistInfo:
    """Join the process group described by the environment (torchrun or SLURM via submitit);
    a no-op returning rank 0 of 1 when there is nothing to join or it is joined already."""
    if dist.is_available() and dist.is_initialized():
        return info()
    if "WORLD_SIZE" not in os.environ and int(os.environ.get("SLURM_NTASKS", "1")) > 1:
        import submitit

        submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    if _env_world_size() <= 1:
        return DistInfo()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available()
    if use_cuda:
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    dist.init_process_group(
        backend="nccl" if use_cuda else "gloo", timeout=timedelta(seconds=timeout_s)
    )
    # A process group still alive when the interpreter exits aborts it ("terminate called
    # without an active exception", SIGABRT after a finished run: seen in CI with gloo), so
    # every process that joined one destroys it on the way out, however train() returns.
    atexit.register(shutdown)
    me = info()
    log.info(
        "rank %d of %d (local %d of %d), backend %s",
        me.rank,
        me.world_size,
        me.local_rank,
        me.local_world_size,
        dist.get_backend(),
    )
    return me


def info() -> DistInfo:
    """This process's place in the process group (rank 0 of 1 without one)."""
    if not (dist.is_available() and dist.is_initialized()):
        return DistInfo()
    world = dist.get_world_size()
    # torchrun: LOCAL_WORLD_SIZE; SLURM: tasks on this node.
    local_world = os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("SLURM_NTASKS_PER_NODE")
    return DistInfo(
        rank=dist.get_rank(),
        world_size=world,
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        local_world_size=int(local_world) if local_world else world,
    )


def active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank_device(device: str) -> str:
    """``cuda`` on a multi-rank run means this rank's GPU, ``cuda:LOCAL_RANK``."""
    if active() and device == "cuda":
        return f"cuda:{torch.cuda.current_device()}"
    return device


def average_gradients(params: list[torch.nn.Parameter], local_nonfinite: bool = False) -> bool:
    """Average ``params``' gradients over all ranks in place; returns True when any rank
    reported ``local_nonfinite`` (a no-op returning ``local_nonfinite`` on one rank).

    Gradients are flattened into one buffer per dtype and device, so a step costs one
    all-reduce whatever the number of tensors; the first buffer carries one more element, the
    number of ranks whose loss was not finite, so that every rank skips (or stops at) the same
    step without another collective. Parameters without a gradient on this rank (a rank that
    did not backpropagate a NaN loss) contribute zeros, so every rank calls the collective with
    the same sizes and no rank is left waiting in it.
    """
    if not active():
        return local_nonfinite
    world = dist.get_world_size()
    groups: dict[tuple[torch.dtype, torch.device], list[torch.nn.Parameter]] = {}
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        groups.setdefault((p.grad.dtype, p.grad.device), []).append(p)
    any_nonfinite = local_nonfinite
    for i, group in enumerate(groups.values()):
        parts = [p.grad.reshape(-1) for p in group]
        if i == 0:
            parts.append(torch.full((1,), float(local_nonfinite), dtype=parts[0].dtype,
                                    device=parts[0].device))  # fmt: skip
        flat = torch.cat(parts)
        with _collective("the gradient all-reduce"):
            dist.all_reduce(flat)
        if i == 0:
            any_nonfinite = bool(flat[-1].item() > 0)
        flat /= world
        offset = 0
        for p in group:
            n = p.grad.numel()
            p.grad.copy_(flat[offset : offset + n].view_as(p.grad))
            offset += n
    return any_nonfinite


def broadcast_module(module: torch.nn.Module, src: int = 0) -> None:
    """Give every rank rank ``src``'s parameters and buffers."""
    if not active():
        return
    with _collective("the weight broadcast"):
        for tensor in [*module.parameters(), *module.buffers()]:
            dist.broadcast(tensor.data, src=src)


def any_rank(flag: bool) -> bool:
    """True on every rank when ``flag`` is True on at least one (a collective: call it on all)."""
    if not active():
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=_collective_device())
    with _collective("the stop-flag all-reduce"):
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)


def gather_objects(obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order (a collective; one element on a single rank)."""
    if not active():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    with _collective("the episode gather"):
        dist.all_gather_object(out, obj)
    return out


def parameters_checksum(params: list[torch.nn.Parameter]) -> float:
    """A float64 sum of all parameters: equal on every rank while they stay in sync."""
    with torch.no_grad():
        return float(sum(p.detach().double().sum().item() for p in params))


def check_in_sync(params: list[torch.nn.Parameter]) -> None:
    """Raise on every rank if any rank's weights differ from rank 0's (a collective)."""
    if not active():
        return
    local = torch.cat([p.detach().reshape(-1).double() for p in params])
    ref = local.clone()
    with _collective("the weight-sync check"):
        dist.broadcast(ref, src=0)
        same = torch.tensor([1.0 if torch.equal(local, ref) else 0.0], device=local.device)
        dist.all_reduce(same, op=dist.ReduceOp.MIN)
    if same.item() < 1:
        raise RuntimeError(f"rank {dist.get_rank()}: weights differ across ranks after a step")


def finish_together() -> None:
    """Wait until every rank has finished its run (a barrier), so that no rank tears its
    process group down while another still talks to it. Called at the end of a successful run
    only: on an error path a barrier would pair with another rank's pending collective."""
    if not active():
        return
    with _collective("the end-of-run barrier"):
        dist.barrier()


def _collective_device() -> torch.device:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def shutdown() -> None:
    """Destroy the process group (idempotent; registered with ``atexit`` when joining)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
