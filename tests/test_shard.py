"""Sharding over a torch.distributed process group (gloo, two CPU processes): cdist (both
shapes, the divergence, lengths, exact DTW), knn and k-means (its assignment and its
clusters' barycenters) give every rank the result of one process.

torch's gloo teardown aborts a worker now and then on these machines, so the test judges what
the workers saved before tearing down, not their exit status (as tests/test_ddp.py)."""

from __future__ import annotations

import torch

from tests.distributed import run_two_ranks

_SCRIPT = r"""
import sys
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import sdtw
from sdtw.estimators import SoftDTWKMeans


def results(group):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(7, 9, 2, generator=g, dtype=torch.float64)
    Y = torch.randn(5, 8, 2, generator=g, dtype=torch.float64)
    xl, yl = [9, 4, 9, 1, 7, 9, 3], [8, 8, 2, 5, 6]
    out = {
        "plain": sdtw.cdist(X, Y, gamma=0.3, chunk=4, group=group),
        "divergence": sdtw.cdist(X, Y, gamma=0.3, normalize=True, x_lengths=xl, y_lengths=yl,
                                 chunk=3, group=group),
        "symmetric": sdtw.cdist(X, gamma=0.0, bandwidth=2, chunk=5, group=group),
    }
    out["knn_values"], out["knn_indices"] = sdtw.knn(X, Y, 2, rows=2, x_lengths=xl,
                                                     group=group)
    km = SoftDTWKMeans(n_clusters=3, gamma=0.5, max_iter=2, barycenter_iter=3, random_state=0,
                       group=group).fit(X)
    out["labels"] = torch.as_tensor(km.labels_)
    out["centers"] = km.cluster_centers_
    out["inertia"] = torch.tensor(km.inertia_)
    return out


def worker(rank, path):
    dist.init_process_group("gloo", init_method=f"file://{path}/init", rank=rank, world_size=2)
    torch.save(results(True), f"{path}/rank{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    path = sys.argv[1]
    torch.save(results(None), f"{path}/single.pt")
    mp.spawn(worker, args=(path,), nprocs=2, join=True)
"""


def test_two_ranks_equal_one_process(tmp_path):
    run_two_ranks(tmp_path, "shard.py", _SCRIPT)


def test_group_needs_an_initialised_group_and_no_gradient():
    import pytest

    import sdtw

    X = torch.randn(3, 4, 1, dtype=torch.float64)
    with pytest.raises(ValueError, match="init_process_group"):
        sdtw.cdist(X, group=True)
    with pytest.raises(ValueError, match="forward pass only"):
        sdtw.cdist(X.requires_grad_(), group=True)
