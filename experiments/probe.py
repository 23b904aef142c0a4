"""Kernel probe: per-anti-diagonal time of sdtw's CUDA kernels and the issue's target configs.

``python -m experiments.probe`` (GPU only) prints, for unfused float32 costs with gamma 1,
the forward time per anti-diagonal of one band (N = 32), of a few bands (N = 64, 256) and of
many (N = M = 2048), which separates the per-step cost of the wavefront from the cost of
handing rows between bands; then forward + backward of ``loss.sum()`` at the issue's three
target configs (B = 32, D = 64, N = M in 512, 1024, 2048), unfused and fused.  A diagnostic
printout (CUDA-event medians of 10 after a warm-up), not a benchmark: the benchmark numbers
come from ``python -m experiments.run``.  ``--host``: the host time of each piece of a small
training step; ``--memory``: a step's peak memory split into forward and backward;
``--profile [N]``: cProfile and torch.profiler of one (N = 128 unless given); ``--steady``:
host time of a synchronised step's forward and backward calls against its wall time (N = 512,
1024); ``--bscan``: time against batch size at N = 1024; ``--ncu [N] [--dim D]``: a few steps
at B = 32, N = 1024 (D = 64) unless given, to run under Nsight Compute (``--ncu-band``: one
band's forward, B = 1, N = 32, M = 8192);
``--hostsplit [N]``: host time of each launcher function in a step (B = 32, N = 512 or N),
and from the step's start to its first launch; ``--graphsplit [N] [--dim D]``: the same step
once the library replays its graph, host and GPU time between the step's start, the copies, the
replay, the forward's return, the sum and the backward's end; ``--timeline``: each
kernel's start and end in a traced training step, and the GPU's gaps;
``--busy``: the DP kernels' quiet and busy variants against the number of blocks;
``--kernels [N] [--float64]``: each kernel's GPU time in a training step at B = 32, N = 1024
(or N) (torch.profiler; float32 inputs, or float64); ``--trace OUTDIR``: Chrome traces (host
and GPU timelines) of a few training steps at B = 32, D = 64, N in 128, 512, 1024, one JSON
file per case in OUTDIR;
``--graphs [N]``: eager steps against CUDA-graph replays of the same steps (B = 32,
N = 512, 1024, 2048 or N);
``--nograd [N] [--float64]``: the forward without gradients, fused and unfused (B = 32,
D = 64, N = 512, 1024, 2048 or N), with the sum of its values;
``--sweepab [N] [--dims 1,16,64]``: the float32 gradients from the backward's sweep against
those from E, alternated in one process (graph replays, eager steps, kernel times, errors,
peak memory; D = 64 and 1 or the dims given);
``--mover [N]``: whole-step CUDA-graph replays of a fused float32 training step with the mover
variants off, on in the forward, and on in the forward and the backward, in turn in one
process (B = 32, D = 64, N = 512 or N);
``--gradtune [N]``: the float32 gradients wrt x and y from a random E by the tensor-core
kernel (Triton) under several launch settings and precisions, and by cuBLAS's float32 and
TF32 products (GPU time and errors; B = 32, D = 64, N = 512 or N);
``--gradsizes [--dims 24,32]``: the kernel's two settings against cuBLAS's float32 form over
the paper grid's sizes (or at B = 32, N = M in 512, 1024, 2048 for each D given; where D is
a multiple of 4 but not of 16, also without telling the kernel so);
``--tcrule [N] [--dims 24,32,48]``: a training step's gradients from E by the tensor-core
kernel against cuBLAS's float32 form (whole-step graph replays, fused and unfused, B = 32,
N = M in 512, 2048 or N), then both forms' errors against float64;
``--firstcall``: in this process, the wall time of the first fused training step, the first
unfused one and the first fused forward without gradients (B = 32, N = M = 512, D = 64), each
compiling or loading its kernels, then a second fused step, with the kernel cache's hits and
misses (run it twice in fresh processes, and with ``SDTW_KERNEL_CACHE=0``, to see what the
on-disk cache saves);
``--mmabench``: one SM's throughput of TF32 and BF16 ``mma.sync`` and float32 FMA against the
number of warps issuing them (what the in-sweep gradients' products can get);
``SDTW_TIMING=1 ... --lag [--dim D]``: from per-block timer stamps (``sdtw.cuda._kernels.TIMING``),
how far each band runs behind the one it reads from, and the time per step.
"""

from __future__ import annotations

import functools
import statistics

import torch

import sdtw
from experiments.run import _time_ms


def median_ms(fn, n: int = 10) -> float:
    """Median of ``n`` CUDA-event timings of ``fn`` after one warm-up call (the harness's timer)."""
    fn()
    return statistics.median(_time_ms(fn, "cuda") for _ in range(n))


def bands(B: int, N: int, M: int) -> str:
    cost = torch.rand(B, N, M, device="cuda")
    leaf = cost.clone().requires_grad_()

    def forward():
        sdtw.softdtw_from_cost(cost, gamma=1.0, backend="cuda")

    def forward_backward():
        sdtw.softdtw_from_cost(leaf, gamma=1.0, backend="cuda").sum().backward()
        leaf.grad = None

    fwd = median_ms(forward)
    both = median_ms(forward_backward)
    per_diag = fwd * 1e3 / (N + M - 1)
    return (
        f"B={B} N={N} M={M}: forward {fwd:.3f} ms ({per_diag:.3f} us per anti-diagonal), "
        f"forward+backward {both:.3f} ms"
    )


def target(N: int, fused: bool, B: int = 32, D: int = 64) -> str:
    x = torch.randn(B, N, D, device="cuda", requires_grad=True)
    y = torch.randn(B, N, D, device="cuda")

    def step():
        sdtw.softdtw(x, y, gamma=1.0, backend="cuda", fused=fused).sum().backward()
        x.grad = None

    def forward():
        with torch.no_grad():
            sdtw.softdtw(x, y, gamma=1.0, backend="cuda", fused=fused)

    return (
        f"B={B} N={N} D={D} fused={fused}: forward+backward {median_ms(step):.3f} ms, "
        f"forward (no grad) {median_ms(forward):.3f} ms"
    )


def memory(N: int = 2048, B: int = 32, D: int = 64) -> None:
    """Peak memory of a fused and an unfused step, split into forward and backward (bytes
    allocated above what was allocated before the step, as the harness counts them)."""
    x = torch.randn(B, N, D, device="cuda", requires_grad=True)
    y = torch.randn(B, N, D, device="cuda", requires_grad=True)
    mib = 2.0**20
    for fused in (True, False):
        for _ in range(2):  # the second step is the one reported (allocator and cuBLAS warm)
            x.grad = y.grad = None
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            loss = sdtw.softdtw(x, y, gamma=1.0, backend="cuda", fused=fused).sum()
            torch.cuda.synchronize()
            fwd_peak = torch.cuda.max_memory_allocated() - before
            after_fwd = torch.cuda.memory_allocated() - before
            torch.cuda.reset_peak_memory_stats()
            loss.backward()
            torch.cuda.synchronize()
            bwd_peak = torch.cuda.max_memory_allocated() - before
            kept = torch.cuda.memory_allocated() - before
            del loss
        print(
            f"B={B} N={N} D={D} fused={fused}: forward peak {fwd_peak / mib:.1f} MiB, "
            f"held after forward {after_fwd / mib:.1f} MiB, backward peak {bwd_peak / mib:.1f} "
            f"MiB, held after the step (gradients) {kept / mib:.1f} MiB",
            flush=True,
        )


def profile(N: int = 128, B: int = 32, D: int = 64, steps: int = 50) -> None:
    """Host time per training step (no synchronisation: the GPU idles if the host is slower),
    the Python functions that take it (cProfile), and the GPU kernels' own time (torch.profiler)."""
    import cProfile
    import pstats
    import time

    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    x = torch.randn(B, N, D, device="cuda", requires_grad=True)
    y = torch.randn(B, N, D, device="cuda")
    for fused in (True, False):

        def step(fused=fused):
            sdtw.softdtw(x, y, gamma=1.0, backend="cuda", fused=fused).sum().backward()
            x.grad = None

        step()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        host = (time.perf_counter() - t0) / steps
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / steps
        print(
            f"B={B} N={N} D={D} fused={fused}: host {host * 1e3:.3f} ms per step, "
            f"wall {wall * 1e3:.3f} ms per step",
            flush=True,
        )
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(steps):
            step()
        prof.disable()
        torch.cuda.synchronize()
        pstats.Stats(prof).sort_stats("tottime").print_stats(18)
        with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as tp:
            for _ in range(5):
                step()
            torch.cuda.synchronize()
        print(tp.key_averages().table(sort_by="self_cuda_time_total", row_limit=14), flush=True)


def _host_timed_step(x, y, fused: bool) -> tuple[int, int, int]:
    """One training step, ``softdtw(x, y).sum()`` then ``.backward()``: ``perf_counter_ns``
    at its start, after the forward call and after the backward call."""
    import time

    t0 = time.perf_counter_ns()
    loss = sdtw.softdtw(x, y, gamma=1.0, backend="cuda", fused=fused).sum()
    t1 = time.perf_counter_ns()
    loss.backward()
    return t0, t1, time.perf_counter_ns()


def steady(B: int = 32, D: int = 64, n: int = 30) -> None:
    """Host time of a synchronised training step's forward (``softdtw(...).sum()``) and
    backward (``.backward()``) calls, against the step's CUDA-event wall time (medians of
    ``n``): where the host, not the GPU, sets the pace."""

    for N in (512, 1024):
        for fused in (True, False):
            x = torch.randn(B, N, D, device="cuda", requires_grad=True)
            y = torch.randn(B, N, D, device="cuda", requires_grad=True)
            fw, bw, wall = [], [], []
            for i in range(n + 2):
                x.grad = y.grad = None
                torch.cuda.synchronize()
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                t0, t1, t2 = _host_timed_step(x, y, fused)
                end.record()
                end.synchronize()
                if i >= 2:
                    fw.append((t1 - t0) / 1e3)
                    bw.append((t2 - t1) / 1e3)
                    wall.append(start.elapsed_time(end) * 1e3)
            med = statistics.median
            print(
                f"B={B} N={N} D={D} fused={fused}: host forward {med(fw):7.1f} us, host "
                f"backward {med(bw):7.1f} us, wall {med(wall):7.1f} us",
                flush=True,
            )


def host_split(B: int = 32, N: int = 512, D: int = 64, n: int = 40) -> None:
    """Mean inclusive host time per step of each launcher-level function in a synchronised
    training step (wrapped with timers; no profiler), fused and unfused, and the host time
    from the step's start to its first kernel launch (the GPU idles that long)."""
    import time
    from collections import defaultdict

    import sdtw.cuda as sc
    from sdtw.cuda import _launch

    acc: dict = defaultdict(float)

    def timed(name, fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            t0 = time.perf_counter_ns()
            try:
                return fn(*a, **k)
            finally:
                acc[name] += time.perf_counter_ns() - t0

        return wrapper

    for name in ("_boundary", "forward", "_park", "backward", "forward_backward", "sqeuclidean"):
        setattr(_launch, name, timed(name, getattr(_launch, name)))
    call = timed("launcher call", _launch._Launcher.__call__)
    first: list = []  # host time of the step's first kernel launch

    def first_stamp(*a, **k):
        if not first:
            first.append(time.perf_counter_ns())
        return call(*a, **k)

    _launch._Launcher.__call__ = first_stamp
    sc.sqeuclidean_grads = timed("sqeuclidean_grads", sc.sqeuclidean_grads)
    sc._eager_grads = timed("_eager_grads", sc._eager_grads)
    for fused in (True, False):
        x = torch.randn(B, N, D, device="cuda", requires_grad=True)
        y = torch.randn(B, N, D, device="cuda", requires_grad=True)
        for i in range(n + 3):
            if i == 3:
                acc.clear()
            torch.cuda.synchronize()
            first.clear()
            t0, t1, t2 = _host_timed_step(x, y, fused)
            acc["(step: forward call)"] += t1 - t0
            acc["(step: backward call)"] += t2 - t1
            acc["(step: call to first launch)"] += first[0] - t0
            x.grad = y.grad = None
        for name, ns in acc.items():
            print(f"B={B} N={N} fused={fused}: {ns / n / 1e3:8.1f} us  {name}", flush=True)


def _traced(x, y, fused: bool, steps: int, label: str = "sdtw-step"):
    """torch.profiler (host and GPU) of ``steps`` synchronised training steps on x, y after three
    untraced ones, each step inside ``record_function(label)``."""
    from torch.profiler import ProfilerActivity, record_function
    from torch.profiler import profile as torch_profile

    def step():
        sdtw.softdtw(x, y, gamma=1.0, backend="cuda", fused=fused).sum().backward()
        x.grad = y.grad = None

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as tp:
        for _ in range(steps):
            torch.cuda.synchronize()
            with record_function(label):
                step()
            torch.cuda.synchronize()
    return tp


def timeline(B: int = 32, D: int = 64, steps: int = 4) -> None:
    """Where a training step's wall time goes (torch.profiler, synchronised steps): for the
    last of ``steps`` traced steps, each GPU kernel's start and end and the launching host
    op's time, all relative to the step's start, and the GPU's idle gaps over 5 us."""
    from torch.autograd import DeviceType

    for N in (512, 1024):
        for fused in (True, False):
            x = torch.randn(B, N, D, device="cuda", requires_grad=True)
            y = torch.randn(B, N, D, device="cuda", requires_grad=True)
            tp = _traced(x, y, fused, steps)
            events = tp.events()
            marks = sorted(e.time_range.start for e in events if e.name == "sdtw-step")
            t0 = marks[-1]
            gpu = [e for e in events if e.device_type == DeviceType.CUDA]
            kern = sorted(
                (e for e in gpu if e.time_range.start >= t0), key=lambda e: e.time_range.start
            )
            host_end = max(
                e.time_range.end
                for e in events
                if e.device_type == DeviceType.CPU and e.time_range.start >= t0
            )
            print(f"-- B={B} N={N} D={D} fused={fused}: host ops end at {host_end - t0:.0f} us")
            last = None
            for e in kern:
                gap = "" if last is None else f"  (gap {e.time_range.start - last:.0f})"
                print(
                    f"   {e.time_range.start - t0:7.0f} .. {e.time_range.end - t0:7.0f} us "
                    f"{e.name[:60]}{gap}"
                )
                last = e.time_range.end
            busy_us = sum(e.time_range.elapsed_us() for e in kern)
            print(f"   GPU busy {busy_us:.0f} us of {last - t0:.0f} us", flush=True)


def _gpu_profiled(step, steps: int):
    """torch.profiler (GPU only) of ``steps`` calls of ``step`` after one untraced call."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    step()
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CUDA]) as tp:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    return tp


def busy_scan(steps: int = 3) -> None:
    """DP forward and backward kernel time (torch.profiler, cost path with gradients) of the
    quiet and the busy variant (``_launch.FORCE_BUSY``) against the number of blocks (B times
    the bands per pair): the data behind the ``_launch.busy`` rule."""

    from sdtw.cuda import _launch

    cases = [(1, 512), (2, 512), (4, 512), (8, 512), (16, 512), (32, 512), (1, 2048), (2, 2048)]
    cases += [(4, 2048), (1, 4096), (2, 4096), (1, 8192), (1, 16384), (8, 1024), (16, 1024)]
    for B, N in cases:
        cost = torch.rand(B, N, N, device="cuda", requires_grad=True)
        res = []
        for force in (False, True):
            _launch.FORCE_BUSY = force

            def step(cost=cost):
                sdtw.softdtw_from_cost(cost, backend="cuda").sum().backward()
                cost.grad = None

            tp = _gpu_profiled(step, steps)
            times = {"_build_forward": 0.0, "_build_backward": 0.0}
            for e in tp.key_averages():
                for k in times:
                    if k in e.key:
                        times[k] += e.self_device_time_total / steps
            res.append(times)
        _launch.FORCE_BUSY = None
        q, b = res
        print(
            f"B={B} N={N} blocks={B * -(-N // 32)}: quiet forward {q['_build_forward']:8.1f} "
            f"backward {q['_build_backward']:8.1f} us; busy forward {b['_build_forward']:8.1f} "
            f"backward {b['_build_backward']:8.1f} us",
            flush=True,
        )
    # the fused forward without gradients (distances computed inside the DP kernel)
    for B, N in [(1, 4096), (1, 16384), (4, 2048), (32, 512), (32, 1024)]:
        x = torch.randn(B, N, 64, device="cuda")
        y = torch.randn(B, N, 64, device="cuda")
        ms = []
        for force in (False, True):
            _launch.FORCE_BUSY = force
            ms.append(median_ms(lambda x=x, y=y: _no_grad(x, y, True), 5))
        _launch.FORCE_BUSY = None
        print(
            f"B={B} N={N} D=64 fused no-grad forward: quiet {ms[0]:.3f} ms, busy {ms[1]:.3f} ms",
            flush=True,
        )


def host(B: int = 32, N: int = 128, D: int = 64, n: int = 200) -> None:
    """Host time (no synchronisation) of each piece of a training step, medians of ``n`` calls
    at a size where the GPU keeps up: what a small step's time is made of."""
    import time

    from sdtw.cuda import _launch

    def host_us(fn) -> float:
        fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            fn()
            ts.append(time.perf_counter_ns() - t0)
        torch.cuda.synchronize()
        return statistics.median(ts) / 1e3

    x = torch.randn(B, N, D, device="cuda", requires_grad=True)
    y = torch.randn(B, N, D, device="cuda")
    cost = torch.rand(B, N, N, device="cuda")
    xd = x.detach()
    rows = {
        "torch.empty(B)": lambda: torch.empty(B, device="cuda"),
        "torch.full(boundary)": lambda: _launch._boundary(B, N // 32, N, xd.device),
        "_launch.forward fused, no store": lambda: _launch.forward(xd, y, 1.0, N, N, False),
        "_launch.forward unfused, no store": lambda: _launch.forward(cost, None, 1.0, N, N, False),
        "sdtw.softdtw fused, no_grad": lambda: _no_grad(x, y, True),
        "sdtw.softdtw unfused, no_grad": lambda: _no_grad(x, y, False),
        "pairwise_cost": lambda: sdtw.functional.pairwise_cost(xd, y, "sqeuclidean"),
    }
    _, P, _ = _launch.forward(xd, y, 1.0, N, N, True)
    g1 = torch.ones(B, device="cuda")
    g0 = torch.ones(1, device="cuda").expand(B)
    rows["_launch.backward, contiguous grad"] = lambda: _launch.backward(P, g1)
    rows["_launch.backward, expanded grad"] = lambda: _launch.backward(P, g0)
    rows["_launch.backward + sums"] = lambda: _launch.backward(P, g1, True)
    leaf = torch.randn(B, device="cuda", requires_grad=True)
    rows["autograd: (leaf * 2).sum().backward()"] = lambda: (leaf * 2).sum().backward()
    for fused in (True, False):
        rows[f"forward with grad, fused={fused}"] = lambda f=fused: sdtw.softdtw(
            x, y, backend="cuda", fused=f
        )

        def both(f=fused):
            sdtw.softdtw(x, y, backend="cuda", fused=f).sum().backward()
            x.grad = None

        rows[f"forward+backward, fused={fused}"] = both
    for name, fn in rows.items():
        print(f"B={B} N={N} D={D} host {host_us(fn):8.1f} us  {name}", flush=True)


def bscan(N: int = 1024, D: int = 64) -> None:
    """Forward (no gradient, unfused) and fused forward + backward time against the batch size
    at one length: where the per-SM contention between bands starts (B = 1 has one warp per
    band and SM to spare; at B = 32, N = 1024 every SM holds about 8)."""
    for B in (1, 2, 4, 8, 16, 24, 32):
        cost = torch.rand(B, N, N, device="cuda")
        x = torch.randn(B, N, D, device="cuda", requires_grad=True)
        y = torch.randn(B, N, D, device="cuda")

        def fwd(cost=cost):
            sdtw.softdtw_from_cost(cost, gamma=1.0, backend="cuda")

        def step(x=x, y=y):
            sdtw.softdtw(x, y, gamma=1.0, backend="cuda", fused=True).sum().backward()
            x.grad = None

        f, s = median_ms(fwd), median_ms(step)
        print(
            f"B={B} N={N}: forward (unfused, no grad) {f:.3f} ms "
            f"({f * 1e3 / (2 * N - 1):.3f} us per anti-diagonal), "
            f"fused forward+backward {s:.3f} ms",
            flush=True,
        )


def ncu_case(N: int = 1024, B: int = 32, D: int = 64) -> None:
    """Three fused training steps and three unfused no-gradient forwards at one config, for
    ``ncu`` (profile the last of each kernel: ``--launch-skip``); ``--ncu [N] [--dim D]``
    (with ``SDTW_SWEEP_GRADS=1``, the steps take the in-sweep gradients)."""
    x = torch.randn(B, N, D, device="cuda", requires_grad=True)
    y = torch.randn(B, N, D, device="cuda")
    cost = torch.rand(B, N, N, device="cuda")
    for _ in range(3):
        sdtw.softdtw(x, y, gamma=1.0, backend="cuda", fused=True).sum().backward()
        x.grad = None
    for _ in range(3):
        sdtw.softdtw_from_cost(cost, gamma=1.0, backend="cuda")
    torch.cuda.synchronize()


def ncu_band_case(N: int = 32, M: int = 8192) -> None:
    """Three unfused no-gradient forwards of one band (B = 1, N = 32), for ``ncu``'s
    source-level stall sampling of the step itself (no handoff, one warp on the GPU)."""
    cost = torch.rand(1, N, M, device="cuda")
    for _ in range(3):
        sdtw.softdtw_from_cost(cost, gamma=1.0, backend="cuda")
    torch.cuda.synchronize()


def kernels(
    N: int = 1024, B: int = 32, D: int = 64, steps: int = 5, dtype: torch.dtype = torch.float32
) -> None:
    """Each kernel's GPU time in a fused and an unfused training step (torch.profiler, average
    per call over ``steps`` steps after a warm-up), the library's CUDA graphs off: replays of
    them under the profiler measured every kernel 5-20% slower than the same kernels launched
    eagerly (run 59, N = 512 and 1024), and they add their copies to the list.  Inputs in
    ``dtype`` (``--kernels N --float64``: float64)."""
    import sdtw.cuda

    sdtw.cuda.set_graphs(False)
    x = torch.randn(B, N, D, device="cuda", dtype=dtype, requires_grad=True)
    y = torch.randn(B, N, D, device="cuda", dtype=dtype, requires_grad=True)
    tag = "" if dtype == torch.float32 else f" {str(dtype).removeprefix('torch.')}"
    for fused in (True, False):

        def step(fused=fused):
            sdtw.softdtw(x, y, gamma=1.0, backend="cuda", fused=fused).sum().backward()
            x.grad = y.grad = None

        tp = _gpu_profiled(step, steps)
        rows = [e for e in tp.key_averages() if str(e.device_type).endswith("CUDA")]
        total = 0.0
        for e in sorted(rows, key=lambda e: -e.self_device_time_total):
            us = e.self_device_time_total / steps
            if us <= 0:
                continue
            total += us
            print(
                f"B={B} N={N} D={D}{tag} fused={fused}: {us:8.1f} us per step  {e.key[:70]}",
                flush=True,
            )
        print(
            f"B={B} N={N} D={D}{tag} fused={fused}: {total:8.1f} us per step  (all kernels)",
            flush=True,
        )


def _grad_case(B: int, N: int, M: int, D: int):
    """x, y, E (plane 1 of a random (B, 2, N, M) buffer) and E's row and column sums."""
    x = torch.randn(B, N, D, device="cuda")
    y = torch.randn(B, M, D, device="cuda")
    P = torch.rand(B, 2, N, M, device="cuda")
    E = P[:, 1]
    rows, cols = torch.cat([E.sum(2), E.sum(1)], 1).unsqueeze(2).split((N, M), 1)
    return x, y, E, rows, cols


def _replayed_us(fn, n: int = 20) -> float:
    """Median GPU time of ``fn`` (replays of a CUDA graph of one call)."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return 1e3 * median_ms(g.replay, n)


def grad_tune(N: int = 512, B: int = 32, D: int = 64, n: int = 20) -> None:
    """GPU time (replays of a CUDA graph of one call, CUDA events) of the tensor-core
    gradient kernel under several launch settings (:data:`sdtw.cuda._tc_grads.CONFIG`) and
    precisions, against cuBLAS: its float32 form, and its TF32 bmm of E (B, N, M) by a
    (B, M, 2 D) operand twice (what a split E_hi / E_lo with [hi | lo] features would take
    per gradient)."""
    from sdtw._sqeuclidean import sqeuclidean_grads
    from sdtw.cuda import _tc_grads

    x, y, E, rows, cols = _grad_case(B, N, N, D)
    E_lo = torch.rand_like(E)  # (the split's second plane)
    ref = sqeuclidean_grads(x.double(), y.double(), E.double(), rows.double(), cols.double())

    def err(got) -> str:
        e = [float((a.double() - b).norm() / b.norm()) for a, b in zip(got, ref, strict=True)]
        return f"x {e[0]:.1e} y {e[1]:.1e}"

    base = _tc_grads.CONFIG
    settings = []
    for prec in ("tf32x3", "tf32", "ieee"):
        for br, bk, warps, stages in (
            (64, 32, 4, 3),
            (64, 64, 4, 3),
            (128, 32, 4, 3),
            (128, 64, 8, 3),
            (64, 128, 4, 2),
            (128, 32, 8, 4),
        ):
            cfg = dict(_tc_grads.SMALL, BR=br, BK=bk, PREC=prec)
            settings.append(dict(cfg, num_warps=warps, num_stages=stages))
    for cfg in settings:
        _tc_grads.CONFIG = cfg
        try:
            us = _replayed_us(lambda: _tc_grads.sqeuclidean_grads_tc(x, y, E, rows, cols), n)
            e = err(_tc_grads.sqeuclidean_grads_tc(x, y, E, rows, cols))
        except Exception as exc:  # (a setting this Triton cannot build: say so, go on)
            print(f"B={B} N={N} D={D} tc {cfg}: failed {exc!r:.200}", flush=True)
            continue
        print(f"B={B} N={N} D={D} tc {cfg}: {us:8.1f} us  {e}", flush=True)
    _tc_grads.CONFIG = base
    us = _replayed_us(lambda: sqeuclidean_grads(x, y, E, rows, cols), n)
    print(f"B={B} N={N} D={D} cublas float32: {us:8.1f} us  "
          f"{err(sqeuclidean_grads(x, y, E, rows, cols))}", flush=True)  # fmt: skip
    y2 = torch.randn(B, N, 2 * D, device="cuda")
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        us = _replayed_us(lambda: torch.bmm(E, y2).baddbmm_(E_lo, y2), n)
        ust = _replayed_us(lambda: torch.bmm(E.mT, y2).baddbmm_(E_lo.mT, y2), n)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    print(f"B={B} N={N} D={D} cublas tf32, two bmm of 2 D features: {us:8.1f} us (E), "
          f"{ust:8.1f} us (E^T)", flush=True)  # fmt: skip


def grad_sizes(dims: tuple[int, ...] | None = None) -> None:
    """Both gradients from E by the tensor-core kernel's two settings
    (:data:`sdtw.cuda._tc_grads.SMALL`, ``LARGE``) as the library launches them (one launch
    for both up to ``_tc_grads.ONE_LAUNCH_CELLS``), at the rule's settings in two launches,
    and by cuBLAS's float32 form, over the
    paper grid's sizes and D (GPU time, CUDA-graph replays); with ``dims`` (``--dims
    24,32``), at B = 32, N = M in 512, 1024, 2048 for each D given instead."""
    from sdtw._sqeuclidean import sqeuclidean_grads
    from sdtw.cuda import _tc_grads

    cases = [(32, 128, 1), (32, 128, 64), (16, 512, 1), (32, 512, 1), (32, 512, 64),
             (16, 1024, 64), (32, 1024, 1), (32, 1024, 64), (32, 2048, 1),
             (32, 2048, 64), (32, 256, 1024), (4, 8192, 64)]  # fmt: skip
    if dims is not None:
        cases = [(32, N, D) for D in dims for N in (512, 1024, 2048)]
    for B, N, D in cases:
        case = _grad_case(B, N, N, D)
        times = []
        for cfg in (_tc_grads.SMALL, _tc_grads.LARGE):
            _tc_grads.CONFIG = cfg
            times.append(_replayed_us(lambda c=case: _tc_grads.sqeuclidean_grads_tc(*c)))
        hint = ""
        if _tc_grads._quantum(D) != 1:  # the same without telling the kernel D % 4 == 0
            _tc_grads.CONFIG, _tc_grads.ALIGN = _tc_grads.SMALL, False
            try:
                us = _replayed_us(lambda c=case: _tc_grads.sqeuclidean_grads_tc(*c))
            finally:
                _tc_grads.ALIGN = True
            hint = f"  tc small, no D % 4 hint {us:8.1f}"
        _tc_grads.CONFIG = None
        cells = _tc_grads.ONE_LAUNCH_CELLS
        _tc_grads.ONE_LAUNCH_CELLS = 0  # the two gradients one launch each
        try:
            two = _replayed_us(lambda c=case: _tc_grads.sqeuclidean_grads_tc(*c))
        finally:
            _tc_grads.ONE_LAUNCH_CELLS = cells
        ref = _replayed_us(lambda c=case: sqeuclidean_grads(*c))
        print(f"B={B} N={N} D={D} grads us: tc small {times[0]:8.1f}  tc large {times[1]:8.1f}"
              f"  cublas float32 {ref:8.1f}  tc rule's settings, two launches {two:8.1f}"
              f"{hint}", flush=True)  # fmt: skip
        del case
        torch.cuda.empty_cache()


def _step_grid(B: int, dims, sizes):
    """(D, N, x, y, fused, impl) for each D in ``dims``, N = M in ``sizes`` and fused then
    unfused: fresh randn x, y (B, N, D) on the GPU per (D, N), impl the whole-step graph
    implementation of that mode."""
    from experiments.impls import IMPLS

    for D in dims:
        for n in sizes:
            x = torch.randn(B, n, D, device="cuda")
            y = torch.randn(B, n, D, device="cuda")
            for fused in (True, False):
                impl = IMPLS["sdtw-fused-graph" if fused else "sdtw-unfused-graph"]
                yield D, n, x, y, fused, impl


def tc_rule(
    N: int | None = None, B: int = 32, reps: int = 40, dims: tuple[int, ...] = (24, 32, 48)
) -> None:
    """The float32 gradients from E by the tensor-core kernel (``sdtw.cuda._tc_grads``)
    against cuBLAS's float32 form in a training step (``_tc_grads.MIN_D`` 1 / past any D; the
    gradients from E, ``FORCE_SWEEP_GRADS`` False): whole-step CUDA-graph replays, fused and
    unfused, B = 32, D in ``dims`` (``--dims``), N = M in 512, 2048 (or N), alternated
    ``reps`` times in one process (the first 5 of each dropped); then both gradients' errors
    against float64 at B = 4, N = 512 (gamma 1 and 1e-3)."""
    import sdtw.cuda
    from experiments.impls import FORWARD_BACKWARD
    from experiments.run import _graph_step
    from sdtw.cuda import _launch, _tc_grads

    sdtw.cuda.set_graphs(False)
    _launch.FORCE_SWEEP_GRADS = False
    rule = _tc_grads.MIN_D
    sizes = (N,) if N is not None else (512, 2048)
    try:
        for D, n, x, y, fused, impl in _step_grid(B, dims, sizes):
            graphs = {}
            for tc in (True, False):
                _tc_grads.MIN_D = 1 if tc else 1 << 30
                graphs[tc] = _graph_step(impl, x, y, 1.0, FORWARD_BACKWARD)
                graphs[tc]()  # warm-up
                graphs[tc]()  # capture (and a replay)
            times: dict[bool, list[float]] = {True: [], False: []}
            for rep in range(reps):
                for tc in (True, False):
                    ms = _time_ms(graphs[tc], "cuda")
                    if rep >= 5:
                        times[tc].append(ms * 1e3)
            print(
                f"B={B} N={n} D={D} fused={fused}: whole-step graph, gradients by "
                f"the tensor-core kernel {statistics.median(times[True]):.1f} / "
                f"cuBLAS {statistics.median(times[False]):.1f} us",
                flush=True,
            )
            del graphs
            torch.cuda.empty_cache()
        for D in dims:
            x = torch.randn(4, 512, D, device="cuda")
            y = torch.randn(4, 512, D, device="cuda")
            for gamma in (1.0, 0.001):
                xr, yr = (t.cpu().double().requires_grad_() for t in (x, y))
                loss = sdtw.softdtw(xr, yr, gamma=gamma, backend="cpu").sum()
                ref = torch.autograd.grad(loss, (xr, yr))
                errs = []
                for tc in (True, False):
                    _tc_grads.MIN_D = 1 if tc else 1 << 30
                    xs, ys = x.clone().requires_grad_(), y.clone().requires_grad_()
                    v = sdtw.softdtw(xs, ys, gamma=gamma, backend="cuda", fused=True)
                    got = torch.autograd.grad(v.sum(), (xs, ys))
                    errs.append(" ".join(
                        f"{float((a.double().cpu() - b).norm() / b.norm()):.2e}"
                        for a, b in zip(got, ref, strict=True)
                    ))  # fmt: skip
                print(f"D={D} gamma={gamma}: errors gx gy, tensor-core kernel {errs[0]}, "
                      f"cuBLAS {errs[1]}", flush=True)  # fmt: skip
    finally:
        _tc_grads.MIN_D = rule
        _launch.FORCE_SWEEP_GRADS = None


def mover_ab(N: int = 512, B: int = 32, D: int = 64, reps: int = 60) -> None:
    """Whole-step graphs of a fused float32 training step (the harness's
    :func:`experiments.run._graph_step`) warmed up and captured with the mover variants
    (``sdtw.cuda._launch.FORCE_MOVER``, ``FORCE_BACKWARD_MOVER``) off, on in the forward, and on in
    both kernels, then run in turn ``reps`` times (the first 10 of each dropped), each step
    timed by the harness's CUDA events: the same process and GPU state for all, where
    separate processes' step times differ by up to ~30 us at N = 512 (runs 62, 67)."""
    import sdtw.cuda
    from experiments.impls import FORWARD_BACKWARD, IMPLS
    from experiments.run import _graph_step
    from sdtw.cuda import _launch

    sdtw.cuda.set_graphs(False)
    x = torch.randn(B, N, D, device="cuda")
    y = torch.randn(B, N, D, device="cuda")
    cases = {"off": (False, False), "forward": (True, False), "forward+backward": (True, True)}
    steps = {}
    for name, (fwd, bwd) in cases.items():
        _launch.FORCE_MOVER, _launch.FORCE_BACKWARD_MOVER = fwd, bwd
        steps[name] = _graph_step(IMPLS["sdtw-fused-graph"], x, y, 1.0, FORWARD_BACKWARD)
        steps[name]()  # warm-up
        steps[name]()  # capture (and a replay)
    _launch.FORCE_MOVER = _launch.FORCE_BACKWARD_MOVER = None
    times: dict[str, list[float]] = {name: [] for name in cases}
    for rep in range(reps):
        for name in cases:
            ms = _time_ms(steps[name], "cuda")
            if rep >= 10:
                times[name].append(ms * 1e3)
    for name in cases:
        t = sorted(times[name])
        print(
            f"B={B} N={N} D={D} fused step graph, mover {name}: "
            f"median {statistics.median(t):.1f} us, p20 {t[len(t) // 5]:.1f}",
            flush=True,
        )


def sweep_ab(
    N: int | None = None, B: int = 32, reps: int = 40, dims: tuple[int, ...] = (64, 1)
) -> None:
    """The float32 gradients wrt x and y from the backward's sweep (its gradient warp, E never
    written) against those from E (the Triton or cuBLAS kernels after the backward), in one
    process (``sdtw.cuda._launch.FORCE_SWEEP_GRADS`` True / False): for B = 32, D in ``dims``
    (``--dims 1,16,64``; default 64 and 1), N = M in 512, 1024, 2048 (or N), fused and
    unfused, whole-step CUDA-graph replays and eager synchronised steps (the library's graphs
    off: the kernels' launches included), alternated ``reps`` times (the first 5 of each
    dropped); then each kernel's GPU time in a step (torch.profiler, at each D) and the
    gradients' errors against float64 (B = 4, N = 512, D = 64, gamma 1 .. 1e-3)."""
    import sdtw.cuda
    from experiments.impls import FORWARD_BACKWARD
    from experiments.run import _graph_step
    from sdtw.cuda import _launch

    sdtw.cuda.set_graphs(False)
    sizes = (N,) if N is not None else (512, 1024, 2048)
    for D, n, x, y, fused, impl in _step_grid(B, dims, sizes):
        graphs, eager = {}, {}
        for sweep in (True, False):
            _launch.FORCE_SWEEP_GRADS = sweep
            graphs[sweep] = _graph_step(impl, x, y, 1.0, FORWARD_BACKWARD)
            graphs[sweep]()  # warm-up
            graphs[sweep]()  # capture (and a replay)
            xs, ys = x.clone().requires_grad_(), y.clone().requires_grad_()

            def step(xs=xs, ys=ys, fused=fused, sweep=sweep):
                _launch.FORCE_SWEEP_GRADS = sweep
                sdtw.softdtw(xs, ys, gamma=1.0, backend="cuda", fused=fused).sum().backward()
                xs.grad = ys.grad = None

            step()
            eager[sweep] = step
        times = {(k, s): [] for k in ("graph", "eager") for s in (True, False)}
        for rep in range(reps):
            for sweep in (True, False):
                g = _time_ms(graphs[sweep], "cuda")
                e = _time_ms(eager[sweep], "cuda")
                if rep >= 5:
                    times["graph", sweep].append(g * 1e3)
                    times["eager", sweep].append(e * 1e3)
        _launch.FORCE_SWEEP_GRADS = None
        med = {k: statistics.median(v) for k, v in times.items()}
        print(
            f"B={B} N={n} D={D} fused={fused}: whole-step graph sweep "
            f"{med['graph', True]:.1f} / from E {med['graph', False]:.1f} us; eager "
            f"sweep {med['eager', True]:.1f} / from E {med['eager', False]:.1f} us",
            flush=True,
        )
    for D in dims:
        for n in sizes:
            for sweep in (True, False):
                _launch.FORCE_SWEEP_GRADS = sweep
                where = "in the sweep" if sweep else "from E"
                print(f"-- kernels, gradients {where}", flush=True)
                kernels(N=n, B=B, D=D)
    _launch.FORCE_SWEEP_GRADS = None
    x = torch.randn(4, 512, 64, device="cuda")
    y = torch.randn(4, 512, 64, device="cuda")
    for gamma in (1.0, 0.1, 0.01, 0.001):
        xr, yr = (t.cpu().double().requires_grad_() for t in (x, y))
        ref = torch.autograd.grad(sdtw.softdtw(xr, yr, gamma=gamma, backend="cpu").sum(), (xr, yr))
        errs = []
        for sweep in (True, False):
            _launch.FORCE_SWEEP_GRADS = sweep
            xs, ys = x.clone().requires_grad_(), y.clone().requires_grad_()
            v = sdtw.softdtw(xs, ys, gamma=gamma, backend="cuda", fused=True)
            got = torch.autograd.grad(v.sum(), (xs, ys))
            errs.append(
                " ".join(
                    f"{float((a.double().cpu() - b).norm() / b.norm()):.2e}"
                    for a, b in zip(got, ref, strict=True)
                )
            )
        _launch.FORCE_SWEEP_GRADS = None
        print(f"gamma={gamma}: errors gx gy, sweep {errs[0]}, from E {errs[1]}", flush=True)
    B2, n2, D2 = 32, 2048, 64
    x = torch.randn(B2, n2, D2, device="cuda", requires_grad=True)
    y = torch.randn(B2, n2, D2, device="cuda", requires_grad=True)
    for sweep in (True, False):
        _launch.FORCE_SWEEP_GRADS = sweep
        sdtw.softdtw(x, y, gamma=1.0, backend="cuda", fused=True).sum().backward()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        sdtw.softdtw(x, y, gamma=1.0, backend="cuda", fused=True).sum().backward()
        torch.cuda.synchronize()
        peak = (torch.cuda.max_memory_allocated() - before) / 2**20
        print(f"B={B2} N={n2} D={D2} fused step peak, sweep={sweep}: {peak:.1f} MiB", flush=True)
    _launch.FORCE_SWEEP_GRADS = None


def trace(out: str, B: int = 32, D: int = 64, steps: int = 4) -> None:
    """Chrome traces (``chrome://tracing`` / Perfetto) of ``steps`` training steps per case,
    host (both threads: the autograd engine runs the backward on its own) and GPU: where the
    GPU waits for the host.  Files ``trace-N<N>-<fused|unfused>.json`` in ``out``."""
    import os

    os.makedirs(out, exist_ok=True)
    for N, fused in ((512, True), (512, False), (1024, True), (128, True)):
        x = torch.randn(B, N, D, device="cuda", requires_grad=True)
        y = torch.randn(B, N, D, device="cuda", requires_grad=True)
        tp = _traced(x, y, fused, steps)
        name = f"trace-N{N}-{'fused' if fused else 'unfused'}.json"
        tp.export_chrome_trace(os.path.join(out, name))
        print(f"wrote {name}", flush=True)


def _stamps_summary(hand: torch.Tensor, B: int, N: int, M: int) -> str:
    """Lag between consecutive bands (by ticket order) and time per step, from one launch's
    stamps (see :data:`sdtw.cuda._kernels.TIMING`)."""
    from sdtw.cuda import _kernels as K

    nb = -(-N // K.TB)
    st = hand[-1 - K.STAMPS * B * nb : -1].view(nb, B, K.STAMPS).double().cpu() / 1e3  # us
    steps = -(-(M + K.TB - 1) // K.TW) * K.TW
    t0 = st[:, :, 0].min()
    span = st[:, :, 2].max() - t0
    lag = (st[1:, :, 1] - st[:-1, :, 1]).median().item() if nb > 1 else float("nan")
    step = ((st[:, :, 2] - st[:, :, 1]) / steps).median().item()
    wait = (st[1:, :, 1] - st[1:, :, 0]).median().item() if nb > 1 else 0.0
    last = (st[-1, :, 2] - t0).median().item()
    return (
        f"span {span:8.1f} us  lag {lag:6.2f} us = {lag / step:5.1f} steps  step {step:.4f} us  "
        f"first-row wait {wait:7.1f} us  last band done {last:8.1f} us"
    )


def lag(D: int = 64) -> None:
    """Band-to-band lag and time per step of the forward and backward kernels (needs
    ``SDTW_TIMING=1``): the critical path of a DP pass is about ``(nb - 1) lag + steps``."""
    from sdtw.cuda import _kernels as K
    from sdtw.cuda import _launch

    if not K.TIMING:
        raise SystemExit("--lag needs SDTW_TIMING=1 in the environment")
    for B, N, fused in (
        (1, 1024, False),
        (32, 512, True),
        (16, 1024, True),
        (32, 1024, True),
        (32, 1024, False),
        (1, 4096, True),
    ):
        x = torch.randn(B, N, D, device="cuda", requires_grad=True)
        y = torch.randn(B, N, D, device="cuda")
        for _ in range(2):  # the second run is the one summarised
            _launch.timing_buffers.clear()
            sdtw.softdtw(x, y, gamma=1.0, backend="cuda", fused=fused).sum().backward()
            x.grad = None
            torch.cuda.synchronize()
        for kind, hand in zip(("forward", "backward"), _launch.timing_buffers, strict=True):
            print(
                f"B={B} N={N} fused={fused} {kind:8}: {_stamps_summary(hand, B, N, N)}", flush=True
            )


def graphs(N: int | None = None, B: int = 32, D: int = 64, n: int = 30) -> None:
    """Training steps (forward + backward of ``loss.sum()``) at B = 32, D = 64 and N = 512,
    1024, 2048 (or N), fused and unfused: eager, and as a CUDA-graph replay (the harness's
    :func:`experiments.run._graph_step`): CUDA-event medians of ``n`` after the warm-up, and
    the memory the graph holds.  The graph's values and gradients are checked against the
    eager step's."""
    from experiments.impls import FORWARD_BACKWARD, IMPLS
    from experiments.run import _graph_step, _step

    def check(ref, out) -> float:
        return max(((a - b).norm() / b.norm()).item() for a, b in zip(out, ref, strict=True))

    for n_ in (512, 1024, 2048) if N is None else (N,):
        x = torch.randn(B, n_, D, device="cuda")
        y = torch.randn(B, n_, D, device="cuda")
        for fused in (True, False):
            name = "sdtw-fused" if fused else "sdtw-unfused"
            lx, ly = x.clone().requires_grad_(), y.clone().requires_grad_()

            def eager(impl=IMPLS[name], lx=lx, ly=ly):
                return _step(impl, lx, ly, 1.0, FORWARD_BACKWARD)

            ref = [t.clone() for t in eager()]
            ms_eager = median_ms(eager, n)
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            step = _graph_step(IMPLS[name + "-graph"], x, y, 1.0, FORWARD_BACKWARD)
            step()
            err = check(ref, step())
            torch.cuda.synchronize()
            held = (torch.cuda.memory_allocated() - before) / 2**20
            print(
                f"B={B} N={n_} D={D} fused={fused}: eager {ms_eager:.3f} ms, graph "
                f"{median_ms(step, n):.3f} ms ({held:.0f} MiB held, rel. error {err:.1e})",
                flush=True,
            )
            del step


def graph_split(N: int = 512, B: int = 32, D: int = 64, n: int = 60) -> None:
    """Where a synchronised training step's time goes once the library replays its own graph
    (:mod:`sdtw.cuda._graphs`), fused and unfused: host times (``perf_counter_ns``) from the
    step's start to the graph's ``run``, to the replay call, after it, at the forward's return,
    after ``sum`` and after ``backward``; GPU times (CUDA events recorded at the same points)
    from the step's start to the run (the GPU idles that long), through the copies or re-pointing,
    through the graph, and the tail after it.  Medians of ``n``; the events cost host time
    themselves, so the step is a few us slower than unprobed (its median is printed too), and
    a second pass takes the host times with events at the step's ends only.  The unprobed step
    is also timed with two pairs of leaves alternated, so that each replay re-points the
    graph's copy-in (where the graph has one: ``run -> replay`` is then that, else the copies)."""
    import itertools
    import time

    from sdtw.cuda import _graphs

    ns = time.perf_counter_ns
    marks: dict = {}
    events: dict = {}

    gpu_marks = [True]  # False: host marks only between the step's start and end

    def ev(name: str) -> None:
        marks[name] = ns()
        if gpu_marks[0] or name in ("start", "end"):
            e = events[name] = torch.cuda.Event(enable_timing=True)
            e.record()

    class TimedGraph:
        def __init__(self, g) -> None:
            self.g = g

        def replay(self) -> None:
            ev("replay")
            self.g.replay()
            ev("replayed")

    run = _graphs._Graph.run

    def timed_run(self, *args):
        ev("run")
        if not isinstance(self.graph, TimedGraph):
            self.graph = TimedGraph(self.graph)
        return run(self, *args)

    def step(x, y, fused: bool, probe: bool) -> None:
        x.grad = y.grad = None
        v = sdtw.softdtw(x, y, gamma=1.0, backend="cuda", fused=fused)
        if probe:
            ev("returned")
        s = v.sum()
        if probe:
            ev("summed")
        s.backward()

    names = ["start", "run", "replay", "replayed", "returned", "summed", "end"]
    for fused in (True, False):
        x = torch.randn(B, N, D, device="cuda", requires_grad=True)
        y = torch.randn(B, N, D, device="cuda", requires_grad=True)
        plain = [
            _time_ms(functools.partial(step, x, y, fused, False), "cuda") for _ in range(n + 4)
        ]
        # two pairs of leaves, alternated: every replay re-points the graph's copy-in
        pairs = [(x, y), tuple(t.detach().clone().requires_grad_() for t in (x, y))]
        moved = [
            _time_ms(functools.partial(step, *pairs[i % 2], fused, False), "cuda")
            for i in range(n + 4)
        ]
        _graphs._Graph.run = timed_run
        rows: dict = {}
        host_only: dict = {}
        try:
            for i in range(2 * n + 2):
                gpu_marks[0] = i <= n
                torch.cuda.synchronize()
                ev("start")
                step(x, y, fused, True)
                ev("end")
                events["end"].synchronize()
                if i in (0, n + 1):
                    continue
                for a, b in itertools.pairwise(names):
                    host = (marks[b] - marks[a]) / 1e3
                    if gpu_marks[0]:
                        gpu = events[a].elapsed_time(events[b]) * 1e3
                        rows.setdefault(f"{a} -> {b}", []).append((host, gpu))
                    else:
                        host_only.setdefault(f"{a} -> {b}", []).append(host)
                if not gpu_marks[0]:
                    host_only.setdefault("step (GPU)", []).append(
                        events["start"].elapsed_time(events["end"]) * 1e3
                    )
        finally:
            _graphs._Graph.run = run
        inside = _inside_marks(step, x, y, fused, n, (run, timed_run), marks)
        med = statistics.median
        print(
            f"B={B} N={N} D={D} fused={fused}: unprobed step {med(plain[4:]) * 1e3:.1f} us "
            f"(CUDA events; {med(moved[4:]) * 1e3:.1f} with two pairs of inputs alternated); "
            "probed, host us / GPU us, then host us with events at the step's ends only:",
            flush=True,
        )
        for name, vals in rows.items():
            print(
                f"   {name:22s} {med(v[0] for v in vals):8.1f} {med(v[1] for v in vals):8.1f}"
                f" {med(host_only[name]):8.1f}",
                flush=True,
            )
        print(f"   {'step (GPU)':22s} {'':17s} {med(host_only['step (GPU)']):8.1f}", flush=True)
        print(
            "   host us from the step's start (events at its ends only) to: "
            + ", ".join(f"{k} {v:.1f}" for k, v in inside.items()),
            flush=True,
        )


def _inside_marks(step, x, y, fused: bool, n: int, runs: tuple, marks: dict) -> dict:
    """Median host us from a synchronised step's start to the entry of each function on the
    way to the library graph's ``run`` (wrapped for this pass only; ``runs``: the original
    ``_Graph.run`` and the one that stamps ``marks["run"]``)."""
    import time

    import sdtw.cuda as sc
    import sdtw.functional as F
    from sdtw.cuda import _graphs

    ns = time.perf_counter_ns
    stamps: dict = {}

    def stamped(name, fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            stamps.setdefault(name, ns())
            return fn(*a, **k)

        return wrapper

    saved = [
        (sdtw, "softdtw"),
        (F, "_pair_loss"),
        (sc, "softdtw_sqeuclidean"),
        (_graphs, "call"),
        (_graphs, "_key"),
    ]
    originals = [getattr(m, a) for m, a in saved]
    for (m, a), fn in zip(saved, originals, strict=True):
        setattr(m, a, stamped(a, fn))
    _graphs._Graph.run = runs[1]
    out: dict = {}
    try:
        for i in range(n + 2):
            torch.cuda.synchronize()
            stamps.clear()
            t0 = ns()
            step(x, y, fused, False)
            torch.cuda.synchronize()
            if i >= 2:
                for k, v in [*stamps.items(), ("run", marks["run"])]:
                    out.setdefault(k, []).append((v - t0) / 1e3)
    finally:
        for (m, a), fn in zip(saved, originals, strict=True):
            setattr(m, a, fn)
        _graphs._Graph.run = runs[0]
    return {k: statistics.median(v) for k, v in out.items()}


def no_grad_forward(
    N: int | None = None, B: int = 32, D: int = 64, dtype=torch.float32, n: int = 15
) -> None:
    """The forward without gradients, fused (distances inside the DP kernel) and unfused
    (the park kernel's cost tensor, then the DP): CUDA-event median of ``n`` calls at
    B = 32, D = 64, N = M in 512, 1024, 2048 (or N), and the sum of the values, to compare
    two versions bit for bit (``AB_PROBE=--nograd experiments/ab.sh``)."""
    for n_len in (N,) if N else (512, 1024, 2048):
        gen = torch.Generator(device="cuda").manual_seed(n_len)
        x = torch.randn(B, n_len, D, device="cuda", dtype=dtype, generator=gen)
        y = torch.randn(B, n_len, D, device="cuda", dtype=dtype, generator=gen)
        for fused in (True, False):
            ms = median_ms(functools.partial(_no_grad, x, y, fused), n)
            total = _no_grad(x, y, fused).double().sum().item()
            print(
                f"B={B} N={n_len} D={D} {str(dtype)[6:]} forward without gradients, "
                f"{'fused' if fused else 'unfused'}: {ms:.3f} ms (values sum {total!r})",
                flush=True,
            )


def first_call(B: int = 32, N: int = 512, D: int = 64) -> None:
    """Wall time (synchronised) of the first use of each kind of call in this process, which
    compiles its kernels or loads them from the on-disk cache, and the cache's hit and miss
    counts after each (``sdtw.cuda._kernels.DISK_CACHE`` says whether it is on)."""
    import time

    from sdtw.cuda import _kernels as K

    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(B, N, D, device="cuda", generator=gen).requires_grad_()
    y = torch.randn(B, N, D, device="cuda", generator=gen)
    torch.cuda.synchronize()

    def train(fused: bool) -> None:
        sdtw.softdtw(x, y, backend="cuda", fused=fused).sum().backward()

    steps = [
        ("first fused training step", functools.partial(train, True)),
        ("first unfused training step", functools.partial(train, False)),
        ("first fused forward without gradients", functools.partial(_no_grad, x, y, True)),
        ("second fused training step", functools.partial(train, True)),
    ]
    print(f"on-disk kernel cache: {K.DISK_CACHE} (problem: {K.DISK_CACHE_PROBLEM})", flush=True)
    for label, step in steps:
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        hits, misses = K.cache_counts()
        print(
            f"B={B} N={N} D={D} {label}: {time.perf_counter() - t0:.3f} s "
            f"(cache hits {hits}, misses {misses} so far)",
            flush=True,
        )


def _no_grad(x, y, fused):
    with torch.no_grad():
        return sdtw.softdtw(x, y, backend="cuda", fused=fused)


def _mma_bench_kernels():
    """Numba kernels for :func:`mma_bench`: each warp runs ``iters`` rounds of eight independent
    products (TF32 ``mma.sync.m16n8k8``, BF16 ``m16n8k16``) or eight independent float32 FMA
    chains four deep."""
    from llvmlite import ir
    from numba import cuda, float32, int32
    from numba.core import types
    from numba.core.extending import intrinsic

    from sdtw.cuda import _kernels as K

    tmma = K._tmma

    @intrinsic
    def bmma(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        sig = types.UniTuple(types.float32, 4)(*([types.int32] * 6 + [types.float32] * 4))

        def codegen(context, builder, signature, args):
            ft, i32 = ir.FloatType(), ir.IntType(32)
            res = builder.asm(
                ir.FunctionType(ir.LiteralStructType([ft] * 4), [i32] * 6 + [ft] * 4),
                "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {$0, $1, $2, $3}, "
                "{$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};",
                ",".join(["=f"] * 4 + ["r"] * 6 + ["f"] * 4),
                list(args),
                True,
            )
            out = [builder.extract_value(res, i) for i in range(4)]
            return context.make_tuple(builder, signature.return_type, out)

        return sig, codegen

    def make(kind):
        def body(out, iters):
            t = cuda.threadIdx.x
            f = float32(t) * float32(1e-3)
            i = int32(t) | int32(0x3F800000)
            c = cuda.local.array((8, 4), float32)
            for k in range(8):
                for q in range(4):
                    c[k, q] = float32(0.0)
            for _ in range(iters):
                for k in range(8):
                    if kind == 0:
                        c[k, 0], c[k, 1], c[k, 2], c[k, 3] = tmma(
                            f, f, f, f, f, f, c[k, 0], c[k, 1], c[k, 2], c[k, 3]
                        )
                    elif kind == 1:
                        c[k, 0], c[k, 1], c[k, 2], c[k, 3] = bmma(
                            i, i, i, i, i, i, c[k, 0], c[k, 1], c[k, 2], c[k, 3]
                        )
                    else:
                        for q in range(4):
                            c[k, q] = c[k, q] * f + f
            s = float32(0.0)
            for k in range(8):
                for q in range(4):
                    s += c[k, q]
            out[cuda.blockIdx.x * cuda.blockDim.x + t] = s

        return cuda.jit(body)

    return make(0), make(1), make(2)


def _sm_ghz(cycles: int = 20_000_000) -> float:
    """The SM clock in GHz: one block spins for ``cycles`` of ``%clock64``, timed by CUDA
    events."""
    from numba import cuda as ncuda

    from sdtw.cuda._kernels import _sreg64_intrinsic

    clock64 = _sreg64_intrinsic("clock64")

    @ncuda.jit
    def spin(out, n):
        t0 = clock64()
        while clock64() - t0 < n:
            pass
        out[0] = clock64() - t0

    out = ncuda.device_array(1, dtype="int64")
    spin[1, 1](out, 1000)
    ncuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    spin[1, 1](out, cycles)
    end.record()
    torch.cuda.synchronize()
    return int(out.copy_to_host()[0]) / (start.elapsed_time(end) * 1e6)


def mma_bench(iters: int = 2048) -> None:
    """Throughput of one SM's products by kind, against the warps on it: TF32 ``mma.sync``
    (m16n8k8, the in-sweep gradients' products), BF16 ``mma.sync`` (m16n8k16) and float32
    FMA, each warp eight independent accumulators; ``132 x blocks`` blocks of ``warps``
    warps.  Prints the time, the products' rate in TFLOPS (2 per multiply-add), and the SM
    clock cycles per instruction per SM sub-partition at the clock :func:`_sm_ghz` measures."""
    from numba import cuda as ncuda

    from sdtw.cuda import _launch  # noqa: F401 (numpy's shim for numba-cuda, on import)

    kernels = dict(zip(("tf32 mma", "bf16 mma", "fp32 fma"), _mma_bench_kernels(), strict=True))
    # multiply-adds per warp-instruction, and warp-instructions per accumulator and round
    fmas = {"tf32 mma": 16 * 8 * 8, "bf16 mma": 16 * 8 * 16, "fp32 fma": 32}
    per_acc = {"tf32 mma": 1, "bf16 mma": 1, "fp32 fma": 4}
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ghz = _sm_ghz()
    print(f"{sms} SMs, clock {ghz:.2f} GHz (%clock64 against CUDA events, one block spinning)")
    for name, kern in kernels.items():
        for blocks, warps in ((1, 1), (1, 4), (4, 1), (4, 4), (8, 4)):
            out = ncuda.device_array(sms * blocks * warps * 32, dtype="float32")
            kern[sms * blocks, warps * 32](out, 8)
            ncuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            kern[sms * blocks, warps * 32](out, iters)
            end.record()
            torch.cuda.synchronize()
            ms = start.elapsed_time(end)
            ins = sms * blocks * warps * iters * 8 * per_acc[name]  # warp-instructions
            tflops = ins * fmas[name] * 2 / ms / 1e9
            per_sp = ms * 1e-3 * ghz * 1e9 / (ins / (sms * 4))
            print(
                f"{name}: {blocks} blocks/SM x {warps} warps: {ms:8.3f} ms  {tflops:7.1f} TFLOPS"
                f"  {per_sp:6.2f} cycles per warp-instruction per sub-partition"
            )


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("experiments.probe needs a CUDA GPU")
    torch.manual_seed(0)
    import sys

    def number_after(flag: str) -> dict:
        """``{"N": n}`` when ``flag`` is followed by an integer ``n``, else ``{}``."""
        rest = sys.argv[sys.argv.index(flag) + 1 :]
        return {"N": int(rest[0])} if rest and rest[0].isdigit() else {}

    # flag -> (probe, whether an optional N may follow the flag); the first flag given wins
    modes = {
        "--profile": (profile, True),
        "--steady": (steady, False),
        "--hostsplit": (host_split, True),
        "--graphsplit": (graph_split, True),
        "--timeline": (timeline, False),
        "--busy": (busy_scan, False),
        "--host": (host, False),
        "--memory": (memory, False),
        "--bscan": (bscan, False),
        "--ncu-band": (ncu_band_case, False),
        "--ncu": (ncu_case, True),
        "--kernels": (kernels, True),
        "--graphs": (graphs, True),
        "--mover": (mover_ab, True),
        "--sweepab": (sweep_ab, True),
        "--gradtune": (grad_tune, True),
        "--gradsizes": (grad_sizes, False),
        "--tcrule": (tc_rule, True),
        "--nograd": (no_grad_forward, True),
        "--firstcall": (first_call, False),
        "--lag": (lag, False),
        "--mmabench": (mma_bench, False),
    }
    for flag, (probe, takes_n) in modes.items():
        if flag in sys.argv:
            kwargs = number_after(flag) if takes_n else {}
            if flag in ("--ncu", "--lag", "--graphsplit") and "--dim" in sys.argv:
                kwargs["D"] = int(sys.argv[sys.argv.index("--dim") + 1])
            if flag in ("--sweepab", "--gradsizes", "--tcrule") and "--dims" in sys.argv:
                dims = sys.argv[sys.argv.index("--dims") + 1]
                kwargs["dims"] = tuple(int(d) for d in dims.split(","))
            if flag in ("--kernels", "--nograd") and "--float64" in sys.argv:
                kwargs["dtype"] = torch.float64
            probe(**kwargs)
            return
    if "--trace" in sys.argv:
        trace(sys.argv[sys.argv.index("--trace") + 1])
        return
    for B, N, M in [(1, 32, 8192), (1, 64, 8192), (1, 256, 8192), (1, 2048, 2048)]:
        print(bands(B, N, M), flush=True)
    for N in (512, 1024, 2048):
        for fused in (False, True):
            print(target(N, fused), flush=True)


if __name__ == "__main__":
    main()
