"""CUDA graphs: a caller's own capture of a training step, and the library's own graphs
(``sdtw.cuda._graphs``): replays against eager calls, their copy-in and copy nodes, their
limits, and the gradients they lend.

Most need a GPU (``cuda``) and skip without one; the CPU tests cover what runs off the GPU.
"""

from __future__ import annotations

import os

import pytest
import torch

import sdtw
from sdtw.distances import pairwise as pairwise_cost
from tests.conftest import randn, rel_err, requires_gpu, requires_sim

# --------------------------------------------------------------------------------------------
# A caller's own CUDA graphs
# --------------------------------------------------------------------------------------------


@requires_gpu
@pytest.mark.cuda
def test_gpu_constant_made_in_capture_not_kept():
    """A constant first asked for during a CUDA-graph capture belongs to that graph (its fill
    runs at replay): it is not cached for eager calls, and the replay writes it."""
    from sdtw.cuda import _launch

    dev = torch.device("cuda")
    key = ((3,), 2.5, torch.float32, dev)
    _launch._constants.pop(key, None)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        t = _launch._constant(*key)
    assert key not in _launch._constants
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(t.cpu(), torch.full((3,), 2.5))
    assert torch.equal(_launch._constant(*key).cpu(), torch.full((3,), 2.5))
    assert key in _launch._constants


@requires_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("path", ["fused", "unfused", "cost", "fused-band-normalize"])
def test_gpu_cuda_graph_step(rng, path):
    """A training step (loss, an upstream gradient per pair, backward) captured once in a CUDA
    graph, after a warm-up on a side stream, then replayed on fresh inputs copied into the
    static ones, gives the eager step's values and gradients: nothing in a step reads the
    host or synchronises, and nothing outlives a replay in a cache."""
    B, N, M, D = 5, 70, 45, 6
    dt = torch.float32

    def inputs():
        x = randn(rng, B, N, D, dtype=dt, device="cuda")
        y = randn(rng, B, M, D, dtype=dt, device="cuda")
        return x, y

    def loss(x, y):
        if path == "cost":
            cost = pairwise_cost(x, y, "sqeuclidean")
            return sdtw.softdtw_from_cost(cost, gamma=0.1, backend="cuda")
        if path == "fused-band-normalize":
            return sdtw.softdtw(x, y, gamma=0.1, bandwidth=9, normalize=True, backend="cuda")
        return sdtw.softdtw(x, y, gamma=0.1, backend="cuda", fused=path == "fused")

    w = randn(rng, B, dtype=dt, device="cuda")
    sx, sy = (t.requires_grad_() for t in inputs())
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            (loss(sx, sy) * w).sum().backward()
    torch.cuda.current_stream().wait_stream(side)
    sx.grad = sy.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        value = loss(sx, sy)
        (value * w).sum().backward()
    for _ in range(2):
        x, y = inputs()
        with torch.no_grad():
            sx.copy_(x)
            sy.copy_(y)
        graph.replay()
        lx, ly = x.clone().requires_grad_(), y.clone().requires_grad_()
        v = loss(lx, ly)
        gx, gy = torch.autograd.grad(v, (lx, ly), w)
        torch.cuda.synchronize()
        assert rel_err(value, v) <= 1e-6
        assert rel_err(sx.grad, gx) <= 1e-6 and rel_err(sy.grad, gy) <= 1e-6


@requires_gpu
@pytest.mark.cuda
def test_gpu_cuda_graph_no_grad_default_rule(rng):
    """A forward without gradients under ``fused=None`` (whose rule asks the driver for free
    memory) can be captured too, and its replays on fresh inputs match eager calls."""
    B, N, M, D = 3, 90, 61, 5

    def inputs():
        return (randn(rng, B, n, D, dtype=torch.float32, device="cuda") for n in (N, M))

    sx, sy = inputs()
    module = sdtw.SoftDTW(gamma=0.1)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(2):
            module(sx, sy)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        value = module(sx, sy)
    for _ in range(2):
        x, y = inputs()
        sx.copy_(x)
        sy.copy_(y)
        graph.replay()
        with torch.no_grad():
            expected = module(x, y)
        torch.cuda.synchronize()
        assert rel_err(value, expected) <= 1e-6


# --------------------------------------------------------------------------------------------
# The library's own CUDA graphs (sdtw.cuda._graphs)
# --------------------------------------------------------------------------------------------


@pytest.fixture
def lib_graphs():
    """The library's graphs on, none kept before or after the test; ``eager()`` is a context
    in which calls run eagerly, the kept graphs staying (the reference)."""
    import contextlib

    from sdtw.cuda import _graphs

    _graphs.set_graphs(True)
    _graphs.clear_graphs()

    @contextlib.contextmanager
    def eager():
        _graphs.set_graphs(False)
        try:
            yield
        finally:
            _graphs.set_graphs(True)

    _graphs.eager = eager
    yield _graphs
    del _graphs.eager
    _graphs.set_graphs(True, max_cells=_graphs.MAX_CELLS)
    _graphs.clear_graphs()


_GRAPH_CASES = {
    "fused": dict(fused=True),
    "unfused": dict(fused=False),
    "x-only": dict(fused=True, grad_y=False),
    "no-grad": dict(fused=None, grad_x=False, grad_y=False),
    "band-normalize-f64": dict(bandwidth=9, normalize=True, dtype=torch.float64),
    "half-noncontiguous": dict(dtype=torch.float16, transpose=True),
    "unbatched": dict(unbatched=True),
}


@requires_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("case", list(_GRAPH_CASES))
def test_gpu_library_graph_replays_match_eager(rng, lib_graphs, case):
    """Repeated calls of one shape: the first two run eagerly, the third captures a graph,
    later ones replay it; on fresh inputs each time, values and gradients (upstream gradient
    per pair) are the eager ones.  One graph is kept, and a replay counts its launches."""
    opts = dict(_GRAPH_CASES[case])
    dt = opts.pop("dtype", torch.float32)
    gx_on, gy_on = opts.pop("grad_x", True), opts.pop("grad_y", True)
    transpose, unbatched = opts.pop("transpose", False), opts.pop("unbatched", False)
    B, N, M, D = 5, 70, 45, 6

    def inputs():
        def one(n):
            t = randn(rng, B, n, D, dtype=torch.float32, device="cuda").to(dt)
            if transpose:  # same values, strides (B, 1, n): the copy in makes it contiguous
                t = t.transpose(1, 2).contiguous().transpose(1, 2)
            return t[0] if unbatched else t

        return one(N), one(M)

    w = randn(rng, 1 if unbatched else B, dtype=dt, device="cuda")
    if unbatched:
        w = w[0]

    def run(x, y):
        x, y = x.clone().requires_grad_(gx_on), y.clone().requires_grad_(gy_on)
        v = sdtw.softdtw(x, y, gamma=0.1, backend="cuda", **opts)
        leaves = [t for t in (x, y) if t.requires_grad]
        grads = torch.autograd.grad(v, leaves, w) if leaves else ()
        return (v.detach(), *grads)

    keys = 3 if opts.get("normalize") else 1  # N != M: the xy, xx and yy terms
    for k in range(5):
        x, y = inputs()
        n0 = sum(sdtw.cuda.launch_counts().values())
        got = run(x, y)
        launched = sum(sdtw.cuda.launch_counts().values()) - n0
        with lib_graphs.eager():
            expected = run(x, y)
        torch.cuda.synchronize()
        assert lib_graphs.graph_count() == (keys if k >= 2 else 0)
        if k >= 3:  # replays: the kernels they ran (no-grad fused=None: unfused, 2)
            assert launched == (3 if (gx_on or gy_on) else 2) * keys
        for a, b in zip(got, expected, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert torch.equal(a, b) or rel_err(a, b) <= 1e-6, (case, k, rel_err(a, b))


_MSM_CASES = {
    "kept-f32": dict(),
    "x-only": dict(grad_y=False),
    "no-grad": dict(grad_x=False, grad_y=False),
    "band-normalize-f64": dict(bandwidth=9, normalize=True, dtype=torch.float64),
}


@requires_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("case", list(_MSM_CASES))
def test_gpu_library_graph_soft_msm(rng, lib_graphs, case):
    """Soft-MSM takes the library's graphs as soft-DTW does: the third call of a shape is
    captured, later ones replay it; on fresh inputs, values and gradients (an upstream
    gradient per pair) are the eager ones, and two replayed calls before one backward keep
    their own gradients (they are copied out of the graph)."""
    opts = dict(_MSM_CASES[case])
    dt = opts.pop("dtype", torch.float32)
    gx_on, gy_on = opts.pop("grad_x", True), opts.pop("grad_y", True)
    B, N, M = 4, 70, 45

    def inputs():
        return (randn(rng, B, n, 1, dtype=torch.float32, device="cuda").to(dt) for n in (N, M))

    w = randn(rng, B, dtype=dt, device="cuda")

    def run(x, y):
        x, y = x.clone().requires_grad_(gx_on), y.clone().requires_grad_(gy_on)
        v = sdtw.soft_msm(x, y, gamma=0.1, backend="cuda", **opts)
        leaves = [t for t in (x, y) if t.requires_grad]
        grads = torch.autograd.grad(v, leaves, w) if leaves else ()
        return (v.detach(), *grads)

    keys = 3 if opts.get("normalize") else 1
    for k in range(5):
        x, y = inputs()
        got = run(x, y)
        with lib_graphs.eager():
            expected = run(x, y)
        torch.cuda.synchronize()
        assert lib_graphs.graph_count() == (keys if k >= 2 else 0)
        for a, b in zip(got, expected, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert torch.equal(a, b) or rel_err(a, b) <= 1e-6, (case, k, rel_err(a, b))
    if not (gx_on and gy_on):
        return
    xs = [t.requires_grad_() for _ in range(2) for t in inputs()]
    v1 = sdtw.soft_msm(xs[0], xs[1], gamma=0.1, backend="cuda", **opts)
    v2 = sdtw.soft_msm(xs[2], xs[3], gamma=0.1, backend="cuda", **opts)
    (v1.sum() + 2 * v2.sum()).backward()
    with lib_graphs.eager():
        ys = [t.detach().clone().requires_grad_() for t in xs]
        e1 = sdtw.soft_msm(ys[0], ys[1], gamma=0.1, backend="cuda", **opts)
        e2 = sdtw.soft_msm(ys[2], ys[3], gamma=0.1, backend="cuda", **opts)
        (e1.sum() + 2 * e2.sum()).backward()
    assert rel_err(v1, e1) <= 1e-6 and rel_err(v2, e2) <= 1e-6
    for a, b in zip(xs, ys, strict=True):
        assert rel_err(a.grad, b.grad) <= 1e-6


@requires_gpu
@pytest.mark.cuda
def test_gpu_library_graph_outputs_are_copies(rng, lib_graphs):
    """Two replayed calls of one shape before a single backward keep their own values and
    gradients (the graph's static outputs are cloned)."""
    B, N, D = 3, 40, 4
    for _ in range(3):  # capture
        sdtw.softdtw(*(randn(rng, B, N, D, device="cuda").float() for _ in range(2)))
    assert lib_graphs.graph_count() == 1
    xs = [randn(rng, B, N, D, device="cuda").float().requires_grad_() for _ in range(4)]
    v1, v2 = sdtw.softdtw(xs[0], xs[1]), sdtw.softdtw(xs[2], xs[3])
    (v1.sum() + 2 * v2.sum()).backward()
    with lib_graphs.eager():
        ys = [t.detach().clone().requires_grad_() for t in xs]
        e1, e2 = sdtw.softdtw(ys[0], ys[1]), sdtw.softdtw(ys[2], ys[3])
        (e1.sum() + 2 * e2.sum()).backward()
    assert rel_err(v1, e1) <= 1e-6 and rel_err(v2, e2) <= 1e-6
    for a, b in zip(xs, ys, strict=True):
        assert rel_err(a.grad, b.grad) <= 1e-6


@requires_gpu
@pytest.mark.cuda
def test_gpu_library_graph_limits(rng, lib_graphs, monkeypatch):
    """What is not captured: calls above ``max_cells``, calls while the caller captures a
    graph itself, calls with graphs turned off; streams get their own graphs; beyond
    ``MAX_GRAPHS`` the least recently used graph is dropped; ``clear_graphs`` drops all."""

    def calls(n, B=2, N=20, M=20, k=3):
        for _ in range(k):
            x = randn(rng, B, N, 3, device="cuda").float().requires_grad_()
            sdtw.softdtw(x, randn(rng, B, M, 3, device="cuda").float()).sum().backward()

    lib_graphs.set_graphs(True, max_cells=2 * 20 * 20 - 1)
    calls(3)
    assert lib_graphs.graph_count() == 0
    lib_graphs.set_graphs(True, max_cells=lib_graphs.MAX_CELLS)
    calls(3)
    assert lib_graphs.graph_count() == 1
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        calls(3)
    torch.cuda.current_stream().wait_stream(side)
    assert lib_graphs.graph_count() == 2  # one per stream
    # a caller's own capture of a fresh shape: recorded eagerly, nothing kept or counted
    x = randn(rng, 2, 30, 3, device="cuda").float().requires_grad_()
    y = randn(rng, 2, 30, 3, device="cuda").float()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    seen = dict(lib_graphs._seen)
    with torch.cuda.graph(graph):
        for _ in range(3):
            sdtw.softdtw(x, y).sum().backward()
    assert lib_graphs.graph_count() == 2 and lib_graphs._seen == seen
    monkeypatch.setattr(lib_graphs, "MAX_GRAPHS", 2)
    calls(3, N=21)
    assert lib_graphs.graph_count() == 2
    # (a key: ((x's shape, dtype), (y's ...)), device, stream, params, modes)
    assert [k[2] for k in lib_graphs._graphs if k[0][0][0][1] == 20] == [side.cuda_stream]
    lib_graphs.set_graphs(False)
    calls(3, N=22)
    assert lib_graphs.graph_count() == 2 and not lib_graphs.graphs_enabled()
    lib_graphs.clear_graphs()
    assert lib_graphs.graph_count() == 0


@requires_gpu
@pytest.mark.cuda
def test_gpu_copy_into(rng, monkeypatch):
    """The replays' copy-in: one driver copy on the given stream for a contiguous source of
    the static input's dtype (after the source's producer on that stream), torch's ``copy_``
    for any other source (a converted dtype, a transposed layout)."""
    from sdtw.cuda import _private

    calls = []
    raw = _private._driver_memcpy()
    assert raw, "cuMemcpyDtoDAsync_v2 not found in libcuda"

    def counted(*args):
        calls.append(args)
        return raw(*args)

    monkeypatch.setattr(_private, "_driver_memcpy", lambda: counted)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    dst = torch.empty(7, 33, 5, device="cuda")
    with torch.cuda.stream(side):
        big = torch.randn(7 * 33 * 5, 4096, device="cuda")
        src = big.sum(1).view(7, 33, 5)  # its producer, queued on the side stream too
        _private.copy_into(dst, src, side.cuda_stream)
        assert len(calls) == 1 and calls[0][3] == side.cuda_stream
        half = randn(rng, 7, 5, 33, device="cuda").half().transpose(1, 2)
        dst2 = torch.empty(7, 33, 5, device="cuda")
        _private.copy_into(dst2, half, side.cuda_stream)
        assert len(calls) == 1  # torch's copy_
    side.synchronize()
    assert torch.equal(dst, src) and torch.equal(dst2, half.float())


@requires_sim
@pytest.mark.cudasim
def test_graph_copy_node_parameters_layout():
    """The memcpy node parameters passed to the driver (``CUDA_MEMCPY3D``): 200 bytes, the
    addresses at C's offsets (four size_t, an enum padded to 8, a host pointer: srcDevice at
    48; dstDevice at 136; WidthInBytes at 176)."""
    import ctypes

    from sdtw.cuda import _private

    M = _private._Memcpy3D
    assert ctypes.sizeof(M) == 200
    assert (M.srcDevice.offset, M.dstDevice.offset, M.WidthInBytes.offset) == (48, 136, 176)


def test_graph_lease_settles_only_for_a_node_that_can_still_use_it(rng):
    """The lent gradients of a replayed call (``_graphs.Lease``), on CPU tensors through the
    pair function itself: copied out before the next replay while the node's backward has not
    run (or ran with ``retain_graph=True``), left in place once autograd freed the node's saved
    token; the backward scales what the lease holds then, and a second backward through a
    freed graph raises torch's error."""
    from sdtw.cuda import _graphs, _PairFunction

    B, N, M, D = 3, 5, 4, 2
    static = (randn(rng, B, N, D).float(), randn(rng, B, M, D).float())

    def call():
        x = randn(rng, B, N, D).float().requires_grad_()
        y = randn(rng, B, M, D).float().requires_grad_()
        lease = _graphs.Lease(static)
        v = _PairFunction.apply(x, y, (randn(rng, B).float(), lease))
        return x, y, v, lease

    unbound = _graphs.Lease(static)
    unbound.settle()  # not attached to a node yet (another thread's call): copied out
    assert unbound.grads[0] is not static[0] and torch.equal(unbound.grads[0], static[0])

    w = randn(rng, B).float()
    x, y, v, lease = call()
    lease.settle()  # backward not run yet: copied out, and the backward reads the copies
    assert lease.grads[0] is not static[0]
    v.backward(w)
    assert torch.allclose(x.grad, static[0] * w.view(-1, 1, 1))
    assert torch.allclose(y.grad, static[1] * w.view(-1, 1, 1))

    x, y, v, lease = call()
    v.backward(w)  # graph freed: the token is gone, nothing to copy
    lease.settle()
    assert lease.grads[0] is static[0] and lease.token is None
    with pytest.raises(RuntimeError, match="second time"):
        v.backward(w)

    x, y, v, lease = call()
    v.backward(w, retain_graph=True)  # may run again: copied out
    lease.settle()
    assert lease.grads[0] is not static[0]
    v.backward(w)
    assert torch.allclose(x.grad, 2 * static[0] * w.view(-1, 1, 1))


def test_graph_lease_under_saved_tensor_hooks(rng):
    """Under saved-tensor hooks (``save_on_cpu`` here; non-reentrant checkpointing too) the
    token could be dropped at once, so a lease stays unbound: the next replay (simulated: the
    static buffers overwritten in place after ``settle``) must not change the first call's
    gradients."""
    from sdtw.cuda import _graphs, _PairFunction

    B, N, D = 2, 6, 3
    static = (randn(rng, B, N, D).float(), randn(rng, B, N, D).float())
    expected = tuple(t.clone() for t in static)
    with torch.autograd.graph.save_on_cpu():
        x = randn(rng, B, N, D).float().requires_grad_()
        y = randn(rng, B, N, D).float().requires_grad_()
        lease = _graphs.Lease(static)
        v = _PairFunction.apply(x, y, (randn(rng, B).float(), lease))
        assert lease.token is None
        lease.settle()  # the next replay of the same graph...
        for t in static:
            t.add_(1.0)  # ...overwrites its buffers
    v.sum().backward()
    assert torch.equal(x.grad, expected[0]) and torch.equal(y.grad, expected[1])


def test_library_graphs_off_the_gpu():
    """On CPU tensors (and so under the simulator) nothing is captured: the call says "run
    eagerly" without touching ``compute``; bad settings name the argument."""
    from sdtw.cuda import _graphs

    def compute(x, y):
        raise AssertionError("compute must not run here")

    x, y = torch.zeros(2, 5, 3), torch.zeros(2, 4, 3)
    for _ in range(4):
        params = (1.0, 0, 0, True, True, True, False)
        assert _graphs.call((x, y), params, (torch.float32,) * 2, compute) is None
    assert _graphs.graph_count() == 0 and not _graphs._seen
    with pytest.raises(TypeError, match="enabled must be a bool"):
        sdtw.cuda.set_graphs(1)
    with pytest.raises(ValueError, match="max_cells must be a positive int"):
        sdtw.cuda.set_graphs(True, max_cells=0)
    assert sdtw.cuda.graphs_enabled() == (os.environ.get("SDTW_CUDA_GRAPHS", "1") != "0")


@requires_gpu
@pytest.mark.cuda
def test_gpu_library_graph_inference_mode_is_its_own_key(rng, lib_graphs):
    """Calls under ``torch.inference_mode()`` and plain no-grad calls of the same shapes get
    separate graphs (a graph captured in inference mode has inference tensors, which a call
    outside it could not copy into), and both match eager calls."""
    x, y = (randn(rng, 3, n, 4, device="cuda").float() for n in (30, 41))
    with lib_graphs.eager(), torch.no_grad():
        expected = sdtw.softdtw(x, y, gamma=0.1)
    for _ in range(3):
        with torch.inference_mode():
            a = sdtw.softdtw(x, y, gamma=0.1)
        with torch.no_grad():
            b = sdtw.softdtw(x, y, gamma=0.1)
    assert lib_graphs.graph_count() == 2
    assert rel_err(a, expected) <= 1e-6 and rel_err(b, expected) <= 1e-6


def _only_graph(lib_graphs):
    (g,) = [g for g in lib_graphs._graphs.values() if g is not None]
    return g


@requires_gpu
@pytest.mark.cuda
def test_gpu_library_graph_copy_nodes_follow_the_inputs(rng, lib_graphs, monkeypatch):
    """The graph's own copy-in: re-pointed (one driver call per input) only when a call's x or
    y sits at another address than the last call's; the same tensors changed in place, fresh
    tensors, a float16 input (converted) and a transposed one all give the eager results."""
    from sdtw.cuda import _private

    if not hasattr(torch.cuda.CUDAGraph, "raw_cuda_graph_exec"):
        pytest.skip("this torch's CUDAGraph cannot keep its CUgraph (keep_graph)")
    calls = []
    raw = _private._driver_set_copy()

    def counted(*args):
        calls.append(args)
        return raw(*args)

    monkeypatch.setattr(_private, "_driver_set_copy", lambda: counted)
    B, N, M, D = 3, 37, 52, 5
    x = randn(rng, B, N, D, device="cuda").float()
    y = randn(rng, B, M, D, device="cuda").float()

    def check(a, b):
        got = sdtw.softdtw(a, b, gamma=0.1)
        with lib_graphs.eager():
            expected = sdtw.softdtw(a, b, gamma=0.1)
        assert rel_err(got, expected) <= 1e-6

    for _ in range(3):
        check(x, y)
    g = _only_graph(lib_graphs)
    assert g.nodes is not None and calls == []
    assert [n.src for n in g.nodes] == [x.data_ptr(), y.data_ptr()]
    x.copy_(randn(rng, B, N, D, device="cuda"))  # same addresses: no driver call
    check(x, y)
    assert calls == []
    x2 = randn(rng, B, N, D, device="cuda").float()
    check(x2, y)
    assert len(calls) == 1 and g.nodes[0].src == x2.data_ptr()
    check(x2.half(), y.transpose(1, 2).contiguous().transpose(1, 2))
    check(x, y)
    assert g.nodes[0].src == x.data_ptr() and g.nodes[1].src == y.data_ptr()


@requires_gpu
@pytest.mark.cuda
def test_gpu_library_graph_without_copy_nodes(rng, lib_graphs, monkeypatch):
    """Where the graph's copy nodes cannot be found or re-pointed, the capture is made again
    without them (a warning says so once) and each call copies its inputs in before the
    replay: the eager results all the same, on fresh inputs each call."""
    from sdtw.cuda import _private

    monkeypatch.setattr(_private, "copy_nodes", lambda *args: None)
    monkeypatch.setattr(lib_graphs, "_warned_copy", False)
    B, N, M, D = 2, 33, 29, 4

    def check():
        x = randn(rng, B, N, D, device="cuda").float().requires_grad_()
        y = randn(rng, B, M, D, device="cuda").float()
        got = sdtw.softdtw(x, y, gamma=0.1)
        (gx,) = torch.autograd.grad(got.sum(), x)
        with lib_graphs.eager():
            x2 = x.detach().clone().requires_grad_()
            expected = sdtw.softdtw(x2, y, gamma=0.1)
            (ex,) = torch.autograd.grad(expected.sum(), x2)
        assert rel_err(got, expected) <= 1e-6 and rel_err(gx, ex) <= 1e-6

    check()
    check()
    with pytest.warns(RuntimeWarning, match="cannot re-point"):
        check()  # the capture
    g = _only_graph(lib_graphs)
    assert g.nodes is None
    check()
    check()


@requires_gpu
@pytest.mark.cuda
def test_gpu_library_graph_when_repointing_fails(rng, lib_graphs, monkeypatch):
    """A driver error when re-pointing a copy node at a call (simulated: the call returns
    CUDA_ERROR_INVALID_VALUE): both nodes are disabled, that call and the later ones copy
    their inputs in before the replay (a warning says so once), and the results stay the
    eager ones."""
    from sdtw.cuda import _private

    if not hasattr(torch.cuda.CUDAGraph, "raw_cuda_graph_exec"):
        pytest.skip("this torch's CUDAGraph cannot keep its CUgraph (keep_graph)")
    monkeypatch.setattr(_private, "_driver_set_copy", lambda: lambda *args: 1)
    monkeypatch.setattr(lib_graphs, "_warned_point", False)
    B, N, M, D = 3, 21, 40, 5
    y = randn(rng, B, M, D, device="cuda").float()

    def check(x):
        got = sdtw.softdtw(x, y, gamma=0.1)
        with lib_graphs.eager():
            expected = sdtw.softdtw(x, y, gamma=0.1)
        assert rel_err(got, expected) <= 1e-6

    x = randn(rng, B, N, D, device="cuda").float()
    for _ in range(3):
        check(x)
    g = _only_graph(lib_graphs)
    assert g.nodes is not None
    with pytest.warns(RuntimeWarning, match="re-pointing"):
        check(randn(rng, B, N, D, device="cuda").float())  # another address
    assert g.nodes is None
    check(randn(rng, B, N, D, device="cuda").float())
    check(x)


@requires_gpu
@pytest.mark.cuda
def test_gpu_library_graph_lends_its_gradients(rng, lib_graphs):
    """A replayed call's gradients stay in the graph's buffers (no clone) when its backward ran
    before the next replay; with ``retain_graph=True`` or no backward yet, the next replay
    copies them out first, so a later backward still gets them; a second backward through a
    freed graph raises torch's own error."""
    B, N, D = 4, 45, 3

    def leaves():
        return [randn(rng, B, N, D, device="cuda").float().requires_grad_() for _ in range(2)]

    def eager_grads(a, b, w):
        a, b = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
        with lib_graphs.eager():
            return torch.autograd.grad(sdtw.softdtw(a, b), (a, b), w)

    w = randn(rng, B, device="cuda").float()
    for _ in range(3):
        x, y = leaves()
        sdtw.softdtw(x, y).sum().backward()
    g = _only_graph(lib_graphs)
    # a plain step: the next replay leaves the first call's lent buffers alone
    x, y = leaves()
    v = sdtw.softdtw(x, y)
    lease = g.pending()
    v.backward(w)
    sdtw.softdtw(*leaves())
    assert lease.grads[0] is g.outs[1] and lease.token is None
    for got, ref in zip((x.grad, y.grad), eager_grads(x, y, w), strict=True):
        assert rel_err(got, ref) <= 1e-6
    with pytest.raises(RuntimeError, match="second time"):
        v.backward(w)
    # retain_graph=True: copied out before the next replay, and a second backward is right
    x, y = leaves()
    v = sdtw.softdtw(x, y)
    lease = g.pending()
    v.backward(w, retain_graph=True)
    sdtw.softdtw(*leaves()).sum().backward()
    assert lease.grads[0] is not g.outs[1]
    v.backward(w)
    for got, ref in zip((x.grad, y.grad), eager_grads(x, y, w), strict=True):
        assert rel_err(got, 2 * ref) <= 1e-6  # two backward calls accumulated
