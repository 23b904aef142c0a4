"""Sharding over an initialised :mod:`torch.distributed` process group: each rank computes a
block of the pairs, and an all-gather gives every rank all the values, equal to one process's
(each pair is computed by the same code on one rank; nothing is summed in another order).

Forward only: the all-gather carries no gradient.  On NCCL the values travel on the inputs'
GPU; on gloo on the CPU.
"""

from __future__ import annotations

import torch

__all__ = ["blocks", "gather_blocks", "process_group", "sharded_runner"]


def process_group(group: object):
    """The process group of a ``group=`` argument: True is the default group; the package
    must be initialised."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError(
            "group= needs an initialised torch.distributed process group "
            "(torch.distributed.init_process_group)"
        )
    return dist.group.WORLD if group is True else group


def blocks(P: int, world: int) -> list[tuple[int, int]]:
    """Rank r's contiguous block ``[start, stop)`` of P items, sizes differing by one at most."""
    base, extra = divmod(P, world)
    out, start = [], 0
    for r in range(world):
        stop = start + base + (r < extra)
        out.append((start, stop))
        start = stop
    return out


def gather_blocks(mine: torch.Tensor, spans: list[tuple[int, int]], group) -> torch.Tensor:
    """The concatenation over ranks of each rank's ``mine`` (its block of ``spans``' sizes,
    any trailing shape), on every rank."""
    import torch.distributed as dist

    size = max(b - a for a, b in spans)
    dev = mine.device
    if dist.get_backend(group) == "nccl" and dev.type != "cuda":
        dev = torch.device("cuda", torch.cuda.current_device())
    buf = torch.zeros((size, *mine.shape[1:]), dtype=mine.dtype, device=dev)
    buf[: mine.shape[0]] = mine.detach().to(dev)
    parts = [torch.empty_like(buf) for _ in spans]
    dist.all_gather(parts, buf, group=group)
    whole = torch.cat([p[: b - a] for p, (a, b) in zip(parts, spans, strict=True)])
    return whole.to(mine.device)


def sharded_runner(run_pairs, group: object, grad: bool):
    """``run_pairs`` (see :mod:`sdtw.cdist`) over the ranks of ``group``: this rank runs its
    block of the pairs, then the blocks are all-gathered."""
    if grad:
        raise ValueError("group= shards a forward pass only: call it under torch.no_grad() "
                         "or with inputs that do not require gradients")  # fmt: skip
    pg = process_group(group)

    def run(opts, X, Y, i, j, xl, yl, step, grad, bar):
        import torch.distributed as dist

        spans = blocks(i.numel(), dist.get_world_size(pg))
        a, b = spans[dist.get_rank(pg)]
        mine = run_pairs(opts, X, Y, i[a:b], j[a:b], xl, yl, step, grad, bar)
        return gather_blocks(mine, spans, pg)

    return run
