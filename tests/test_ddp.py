"""Data-parallel training (DDP over gloo, two CPU processes) with an sdtw loss ends with the
parameters of one process training on the whole batch.

torch's gloo teardown aborts a worker now and then on these machines whatever the loss, so the
test judges what the workers saved before tearing down, not their exit status."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent

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
    script = tmp_path / "ddp_train.py"
    script.write_text(_SCRIPT)
    res = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    saved = [tmp_path / f for f in ("single.pt", "rank0.pt", "rank1.pt")]
    assert all(p.exists() for p in saved), res.stdout[-3000:] + res.stderr[-3000:]
    single, rank0, rank1 = (torch.load(p) for p in saved)
    for name, want in single.items():
        torch.testing.assert_close(rank0[name], want, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(rank1[name], rank0[name], rtol=0, atol=0)
    torch.manual_seed(1)  # (the script's model(): the parameters training started from)
    start = torch.nn.Linear(3, 3).double().state_dict()
    assert not torch.allclose(start["weight"], single["weight"])  # training moved them
