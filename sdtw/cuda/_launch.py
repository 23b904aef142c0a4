"""Launchers: allocate buffers, pick the grid, launch on torch's current stream.

Internal asserts only; the public entry has validated everything.
"""

from __future__ import annotations

import os
from collections import Counter

import torch
from numba import cuda

from sdtw.cuda import _kernels as K

#: Numba kernel launches made by this module, by kind ("forward", "backward"); the benchmark
#: reads the difference around a step.  torch's own small ops (zeros, sums, bmm) are not
#: counted here.
launch_counts: Counter = Counter()

_streams: dict[int, object] = {}


def simulator_enabled() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"


def _arr(t: torch.Tensor):
    """A numba view of a tensor: a NumPy array under the simulator, a device array on a GPU."""
    if simulator_enabled():
        return t.detach().numpy()
    return cuda.as_cuda_array(t.detach(), sync=False)


def _stream(device: torch.device):
    if simulator_enabled():
        return 0
    ptr = torch.cuda.current_stream(device).cuda_stream
    s = _streams.get(ptr)
    if s is None:
        s = _streams[ptr] = cuda.external_stream(ptr)
    return s


def storage_dtype(dtype: torch.dtype) -> torch.dtype:
    """Stored weights and E: float64 for float64 inputs, float32 otherwise."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _flags(B: int, nb: int, device: torch.device) -> torch.Tensor:
    return torch.zeros(1 + B * nb, dtype=torch.int32, device=device)


def forward(
    a: torch.Tensor,
    y: torch.Tensor | None,
    gamma: float,
    lo: int,
    hi: int,
    store: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run the forward kernel.

    Parameters
    ----------
    a : (B, N, M) cost (unfused, ``y is None``) or (B, N, D) x (fused).
    y : (B, M, D) or None.
    store : keep the weights ``P`` (B, 2, N, M) for a backward pass.

    Returns
    -------
    values (B,) float64, and ``P`` or None.
    """
    fused = y is not None
    B, N = a.shape[0], a.shape[1]
    M = y.shape[1] if fused else a.shape[2]
    D = a.shape[2] if fused else 0
    dev = a.device
    nb = -(-N // K.TB)
    Mp = -(-M // K.TW) * K.TW
    sdt = storage_dtype(a.dtype)
    flags = _flags(B, nb, dev)
    Rb = torch.empty((B, nb, Mp), dtype=torch.float64, device=dev)
    out = torch.empty(B, dtype=torch.float64, device=dev)
    if store:
        P = torch.empty((B, 2, N, M), dtype=sdt, device=dev)
    else:
        P = torch.empty((1, 2, 1, 1), dtype=sdt, device=dev)
    if fused:
        xx = a.double().square().sum(-1)
        yy = y.double().square().sum(-1)
        args = (a, y, xx, yy)
        kernel = K.forward_fused
    else:
        args = (a, a, out.view(1, B), out.view(1, B))  # unused slots, any arrays of the right rank
        kernel = K.forward_cost
    kernel[B * nb, K.TB, _stream(dev)](
        *(_arr(t) for t in args),
        N,
        M,
        D,
        float(gamma),
        lo,
        hi,
        _arr(P),
        _arr(Rb),
        _arr(flags),
        _arr(out),
        bool(store),
    )
    launch_counts["forward"] += 1
    return out, (P if store else None)


def backward(P: torch.Tensor, grad_out: torch.Tensor) -> torch.Tensor:
    """Overwrite ``P[:, 1]`` with ``E * grad_out`` and return that view, (B, N, M)."""
    B, _, N, M = P.shape
    dev = P.device
    nb = -(-N // K.TB)
    Mp = -(-M // K.TW) * K.TW
    flags = _flags(B, nb, dev)
    Gb = torch.empty((B, nb, Mp), dtype=torch.float64, device=dev)
    g = grad_out.detach().to(torch.float64).contiguous()
    K.backward[B * nb, K.TB, _stream(dev)](_arr(P), N, M, _arr(g), _arr(Gb), _arr(flags))
    launch_counts["backward"] += 1
    return P[:, 1]
