"""Data-parallel training (DDP over gloo, two CPU processes) with an sdtw loss ends with the
parameters of one process training on the whole batch.

torch's gloo teardown aborts a worker now and then on these machines whatever the loss, so the
test judges what the workers saved before tearing down, not their exit status."""

from __future__ import annotations

import torch

from tests.distributed import run_two_ranks

_SCRIPT = r"""
import os, sys
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import sdtw

STEPS, B, N, M, D = 3, 8, 12, 10, 3


def data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(B, N, D, generator=g, dtype=torch.float64)
    y = torch.randn(B, M, D, generator=g, dtype=torch.float64)
    return x, y


def model():
    torch.manual_seed(1)
    return torch.nn.Linear(D, D).double()


def train(net, x, y, wrap=None):
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    loss_fn = sdtw.SoftDTW(gamma=0.5, bandwidth=4, normalize=True, backend="cpu")
    run = wrap(net) if wrap else net
    for _ in range(STEPS):
        opt.zero_grad()
        loss_fn(run(x), y).mean().backward()
        opt.step()
    return net


def worker(rank, out):
    dist.init_process_group("gloo", init_method=f"file://{out}/init", rank=rank, world_size=2)
    x, y = data()
    half = slice(rank * B // 2, (rank + 1) * B // 2)
    net = train(model(), x[half], y[half], torch.nn.parallel.DistributedDataParallel)
    torch.save(net.state_dict(), f"{out}/rank{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    out = sys.argv[1]
    x, y = data()
    torch.save(train(model(), x, y).state_dict(), f"{out}/single.pt")
    mp.spawn(worker, args=(out,), nprocs=2, join=True)
"""


def test_ddp_two_processes_equal_one(tmp_path):
    single, _, _ = run_two_ranks(tmp_path, "ddp_train.py", _SCRIPT)
    torch.manual_seed(1)  # (the script's model(): the parameters training started from)
    start = torch.nn.Linear(3, 3).double().state_dict()
    assert not torch.allclose(start["weight"], single["weight"])  # training moved them
