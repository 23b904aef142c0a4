"""Library-side CUDA graphs: a repeated small call replays a captured graph of its kernels.

At small sizes a soft-DTW call from x and y is bound by the host, not the GPU: on the H200
machine the Python, the three Numba launches and the torch ops of a fused call with gradients
take 0.5-0.6 ms of host time, while its kernels take 0.1 ms at
B = 32, N = 128 and 0.5 ms at N = 512.  So :func:`call` captures the whole GPU side of a call
(the kernels, the gradient matmuls, the buffers' fills) in a ``torch.cuda.CUDAGraph`` once the
same *key* has run eagerly :data:`CAPTURE_AFTER` times, and from then on a call with that key
replays the graph.

Inputs: the graph's first nodes copy x and y (and a variable-length batch's lengths: a graph
input, not part of the key) into its static inputs.  A call re-points them at its own inputs
(:class:`sdtw.cuda._private.CopyNode`, one driver call each, made only where the address
differs from the last call's: a training loop whose caching allocator hands out the same
addresses each step makes none), so the replay itself is the call's first GPU work.  Where
torch cannot keep the graph's ``CUgraph`` (``CUDAGraph(keep_graph=True)``) or the driver
cannot re-point its copies, the inputs are copied in before each replay instead
(:func:`sdtw.cuda._private.copy_into`, a driver copy each; a warning says so once); likewise,
with the nodes disabled, for a graph whose re-pointing the driver refuses at a call.

Outputs: the values are cloned.  The gradients stay in the graph's static buffers, lent to
the call's autograd node (:class:`Lease`; its backward's multiply by the upstream gradient
reads them, so no clone runs on the step's path); the next replay copies them out first only
if that node may still need them: its backward not run yet, or run with ``retain_graph=True``
(or always, where saved-tensor hooks such as ``save_on_cpu`` or non-reentrant checkpointing
were on at the call).  So two calls with the same key before a backward keep their own
gradients.  Results are
those of the same kernels run eagerly.

The key is everything the captured work depends on: the shapes and dtypes of x and y, their
device and torch's current stream there, gamma, the band, fused or not, which gradients are
needed, autocast and inference mode on or off, and the overrides of the tuning rules in force
(:func:`sdtw.cuda.config.overrides`).

What is kept: each graph holds its own memory pool, the call's peak (the weights buffer, 8 N M
bytes per pair for float32 inputs, the boundary rows and the gradients), between calls.  So only
calls with ``B N M <= max_cells`` (default :data:`MAX_CELLS`, B = 32 at N = M = 1024: ~290
MiB kept) are captured, at most :data:`MAX_GRAPHS` graphs are kept, and together they hold at
most :data:`BUDGET_CELLS` cells; the least recently used is dropped first.

Soft-MSM's calls without per-pair lengths take the same graphs
(:meth:`sdtw.engine.cuda.CUDABackend.sequence_step`): their gradients copied out at each
call under the graph's lock (``copies``), their memory counted as ``3 B D N M`` cells.

Not captured (run eagerly, as before): CPU tensors and the simulator, a call while torch's
current stream is itself being captured (a caller's own ``torch.cuda.graph`` of a whole step
records the eager kernels instead), and the cost-tensor path (``softdtw_from_cost``: its input
and its lazy gradient are (B, N, M), so copies in and out would cost a pass each).  A capture
that fails warns once and leaves that key eager.

``SDTW_CUDA_GRAPHS=0`` in the environment (:mod:`sdtw.cuda.config`), or
``sdtw.cuda.set_graphs(False)``, turns it off;
``sdtw.cuda.clear_graphs()`` frees the kept graphs.  A caller that captures whole steps itself may
want it off: the library's graph, captured during that caller's eager warm-up steps, would
keep its pool for nothing.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable

import torch

from sdtw.cuda import _private
from sdtw.cuda.config import CONFIG, current_overrides

__all__ = [
    "BUDGET_CELLS",
    "CAPTURE_AFTER",
    "MAX_CELLS",
    "MAX_GRAPHS",
    "call",
    "clear_graphs",
    "graph_count",
    "graphs_enabled",
    "set_graphs",
]

#: Largest ``B N M`` of a captured call (B = 32, N = M = 1024).
MAX_CELLS = 1 << 25
#: Cells of all kept graphs together (two of the largest).
BUDGET_CELLS = 1 << 26
#: Graphs kept at most (a training step, its validation step, normalize's three terms...).
MAX_GRAPHS = 8
#: Eager calls of a key before the next one is captured.
CAPTURE_AFTER = 2

_enabled = CONFIG.graphs
_max_cells = MAX_CELLS
_lock = threading.Lock()
_graphs: OrderedDict[tuple, _Graph | None] = OrderedDict()  # None: capture failed, eager
_seen: dict[tuple, int] = {}
_side: dict[int, torch.cuda.Stream] = {}
_warned = False
_warned_copy = False
_warned_point = False


def _cuda_autocast() -> bool:
    """Whether CUDA autocast is on (``torch.is_autocast_enabled`` took no device before torch
    2.4; without one it asks about CUDA)."""
    try:
        return torch.is_autocast_enabled("cuda")
    except TypeError:  # pragma: no cover - torch < 2.4
        return torch.is_autocast_enabled()


#: ``compute(x, y[, lengths]) -> (values, grad_x, grad_y)`` on the kernels' inputs (static
#: during a capture); the gradients are None where not asked for.
Compute = Callable[[torch.Tensor, torch.Tensor], tuple]


def set_graphs(enabled: bool = True, max_cells: int | None = None) -> None:
    """Turn the library's CUDA graphs on or off, and set the largest ``B N M`` captured
    (``None``: keep the current one; :data:`MAX_CELLS` by default).  Off, every call runs
    eagerly; the graphs already kept stay until :func:`clear_graphs` (and are used again
    when turned back on)."""
    global _enabled, _max_cells
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be a bool, got {enabled!r}")
    if max_cells is not None:
        if isinstance(max_cells, bool) or not isinstance(max_cells, int) or max_cells < 1:
            raise ValueError(f"max_cells must be a positive int or None, got {max_cells!r}")
        _max_cells = max_cells
    _enabled = enabled


def graphs_enabled() -> bool:
    """Whether repeated small calls are captured and replayed (:func:`set_graphs`)."""
    return _enabled


def clear_graphs() -> None:
    """Drop every kept graph (their memory pools go back to torch's allocator) and the counts
    of calls seen."""
    with _lock:
        _graphs.clear()
        _seen.clear()


def graph_count() -> int:
    """Graphs kept now."""
    return sum(g is not None for g in _graphs.values())


_launch_mod = None


def _launch():
    """:mod:`sdtw.cuda._launch` (it imports numba: loaded on the first CUDA call, then kept;
    an import statement per call would cost host time)."""
    global _launch_mod
    if _launch_mod is None:
        from sdtw.cuda import _launch as mod

        _launch_mod = mod
    return _launch_mod


class Lease:
    """The gradients of one replayed call, still in the graph's static buffers: what
    :func:`call` returns for them instead of copies (a clone each would be a kernel on the
    step's path).  :meth:`bind` ties it to the autograd node that will use it; before the
    graph's next replay overwrites the buffers, :meth:`settle` copies them out if that node
    may still run its backward (not run yet, or run with ``retain_graph=True``)."""

    __slots__ = ("__weakref__", "grads", "token")

    def __init__(self, grads: tuple) -> None:
        self.grads = grads
        self.token = None

    def bind(self, token: torch.Tensor) -> None:
        """``token``: a tensor held only by the node's saved tensors, which autograd frees when
        the node's backward has run for the last time (or the node is dropped)."""
        self.token = weakref.ref(token)

    def settle(self) -> None:
        """Copy the gradients out of the static buffers unless the node is gone or its saved
        tensors were freed (then a backward through it raises torch's own error)."""
        if self.token is None or self.token() is not None:
            self.grads = tuple(None if t is None else t.clone() for t in self.grads)
        self.token = None


class _Graph:
    """One captured call: static inputs, the graph, static outputs, and the Numba launches
    the graph replays (added to :data:`sdtw.cuda._launch.launch_counts` at each replay).
    ``nodes``: the graph's own copy-in of its inputs (memcpy nodes pointed at each call's
    inputs, :class:`sdtw.cuda._private.CopyNode`), or None: the inputs are copied in before
    each replay."""

    __slots__ = (
        "cells",
        "graph",
        "launches",
        "lock",
        "nodes",
        "outs",
        "pending",
        "statics",
    )

    def __init__(self, statics, graph, outs, launches, cells, nodes) -> None:
        self.statics, self.graph, self.outs = statics, graph, outs
        self.launches, self.cells, self.nodes = launches, cells, nodes
        self.lock = threading.Lock()
        self.pending = None  # weakref to the last call's Lease

    def run(self, inputs: tuple, stream: int, copies: tuple | None = None) -> tuple:
        """Point the copy-in at the inputs (or copy them into the static inputs, on
        ``stream``, torch's current one, by its raw address), replay, and return the values
        (cloned) and the gradients (a :class:`Lease`, or a pair of None without gradients;
        with ``copies``, a dtype for each, copies in those dtypes made under the graph's
        lock, so another thread's replay cannot overwrite them first)."""
        L = _launch()
        with self.lock:  # two threads on one stream: copy, replay, clone stay together
            if self.nodes is not None:
                srcs = [_source(t, s.dtype) for t, s in zip(inputs, self.statics, strict=True)]
                try:
                    for node, src in zip(self.nodes, srcs, strict=True):
                        node.point(src.data_ptr())
                except RuntimeError as exc:
                    self._copies_instead(exc)
            if self.nodes is None:
                for st, t in zip(self.statics, inputs, strict=True):
                    _private.copy_into(st, t, stream)
            lease = self.pending() if self.pending is not None else None
            if lease is not None:
                lease.settle()
            self.graph.replay()
            out, gx, gy = self.outs
            grads = (None, None)
            if copies is not None:
                grads = tuple(
                    None if t is None else t.to(dt, copy=True)
                    for t, dt in zip((gx, gy), copies, strict=True)
                )
            elif gx is not None or gy is not None:
                grads = Lease((gx, gy))
                self.pending = weakref.ref(grads)
            res = (out.clone(), grads)
        L.launch_counts.update(self.launches)
        return res

    def _copies_instead(self, exc: Exception) -> None:
        """The driver refused to re-point a copy node (say, an input in memory it will not
        take there): leave the nodes out of later launches and copy the inputs in before
        each replay from now on, with a warning (once)."""
        global _warned_point
        for node in self.nodes:
            node.disable()
        self.nodes = None
        if not _warned_point:
            _warned_point = True
            warnings.warn(
                f"sdtw: re-pointing a library CUDA graph's input copy failed ({exc}); that "
                "graph copies its inputs in before each replay from now on",
                RuntimeWarning,
                stacklevel=5,
            )


def _source(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` as a graph's copy-in reads it: contiguous, of the static input's dtype."""
    if t.dtype != dtype:
        return t.detach().to(dtype).contiguous()
    return t if t.is_contiguous() else t.detach().contiguous()


def _key(inputs: tuple, params: tuple, cells: int) -> tuple | None:
    """The call's key, or None where it is not captured (see the module docstring)."""
    x = inputs[0]
    if not _enabled or not x.is_cuda:
        return None
    if cells > _max_cells or torch.cuda.is_current_stream_capturing():
        return None
    dev = x.get_device()
    stream = _private.current_stream_ptr(dev)
    # autocast, inference mode (whose static tensors a call outside it could not write), and
    # the overrides of the tuning rules (another variant is another graph)
    ov = current_overrides()  # (a frozen dataclass: hashable; None when nothing is forced)
    modes = (_cuda_autocast(), torch.is_inference_mode_enabled(), ov if ov.forced else None)
    shapes = tuple((t.shape, t.dtype) for t in inputs)
    return (shapes, dev, stream, params, modes)


def call(
    inputs: tuple,
    params: tuple,
    dtypes: tuple,
    compute: Compute,
    *,
    cells: int | None = None,
    copies: tuple | None = None,
) -> tuple | None:
    """``compute``'s results for ``inputs`` (x, y, and the lengths of a variable-length batch
    or none) from a replayed graph as ``(values, grads)`` (``grads``: a :class:`Lease` of the
    pair of gradients, or ``(None, None)`` without gradients; with ``copies``, a dtype for
    each gradient, copies of them in those dtypes), or None: run it eagerly.

    ``params``: the call's scalars (gamma, band, fused, gradients needed: part of the key);
    ``dtypes``: the kernels' input dtypes (the static inputs'); ``cells``: what the call's
    memory counts against the limits, in soft-DTW's cells of 8 bytes (None: ``B N M``)."""
    x, y = inputs[0], inputs[1]
    if cells is None:
        cells = x.shape[0] * x.shape[1] * y.shape[1]
    key = _key(inputs, params, cells)
    if key is None:
        return None
    with _lock:  # (another thread may be dropping it)
        g = _graphs.get(key, False)
        if g is not None and g is not False:
            _graphs.move_to_end(key)
    if g is None:  # capture failed before
        return None
    if g is not False:
        return g.run(inputs, key[2], copies)
    n = _seen.get(key, 0) + 1
    if n <= CAPTURE_AFTER:
        if len(_seen) >= 1024:  # one-off shapes: bounded all the same
            _seen.clear()
        _seen[key] = n
        return None
    _seen.pop(key, None)
    with _lock:
        g = _capture(key, inputs, dtypes, compute, cells)
    return None if g is None else g.run(inputs, key[2], copies)


def _side_stream(dev: int) -> torch.cuda.Stream:
    s = _side.get(dev)
    if s is None:
        s = _side[dev] = torch.cuda.Stream(dev)
    return s


def _new_graph(keep: bool) -> tuple[torch.cuda.CUDAGraph, bool]:
    """A graph object, and whether it keeps its ``CUgraph`` after capture (asked for by
    ``keep``; torch's ``keep_graph``, missing from older torch)."""
    if keep and hasattr(torch.cuda.CUDAGraph, "raw_cuda_graph_exec"):
        try:
            return torch.cuda.CUDAGraph(keep_graph=True), True
        except TypeError:  # pragma: no cover - older torch
            pass
    return torch.cuda.CUDAGraph(), False


def _record(side, inputs: tuple, statics: tuple, compute: Compute, copy_in: bool) -> tuple:
    """Capture ``compute(*statics)`` on stream ``side``, preceded where ``copy_in`` (and
    where torch keeps the graph's ``CUgraph``) by the copies of the inputs into the statics
    as memcpy nodes, then found in the instantiated graph
    (:func:`sdtw.cuda._private.copy_nodes`): (graph, outputs, copy nodes or None, whether the
    graph holds copies)."""
    graph, copy_in = _new_graph(copy_in)
    with torch.cuda.graph(graph, stream=side, capture_error_mode="thread_local"):
        if copy_in:
            for st, t in zip(statics, inputs, strict=True):
                _private.copy_into(st, _source(t, st.dtype), side.cuda_stream)
        outs = compute(*statics)
    if not copy_in:
        return graph, outs, None, False
    graph.instantiate()
    nodes = _private.copy_nodes(
        graph.raw_cuda_graph(), graph.raw_cuda_graph_exec(), tuple(s.data_ptr() for s in statics)
    )
    return graph, outs, nodes, True


def _capture(
    key: tuple, inputs: tuple, dtypes: tuple, compute: Compute, cells: int
) -> _Graph | None:
    """Warm up on a side stream, capture ``compute`` on static copies of x, y, with the
    copy-in as the graph's first nodes where the driver can re-point them (else it stays
    outside the graph, with a warning), keep the graph (dropping the least recently used
    ones beyond the limits); None if the capture failed."""
    global _warned, _warned_copy
    launch_counts = _launch().launch_counts
    dev = key[1]
    statics = tuple(
        torch.empty(t.shape, dtype=dt, device=t.device)
        for t, dt in zip(inputs, dtypes, strict=True)
    )
    for st, t in zip(statics, inputs, strict=True):
        st.copy_(t.detach())
    side = _side_stream(dev)
    cur = torch.cuda.current_stream(dev)
    try:
        side.wait_stream(cur)
        with torch.cuda.stream(side):  # warm-up, as PyTorch asks before a capture
            compute(*statics)
        cur.wait_stream(side)
        before = launch_counts.copy()
        graph, outs, nodes, copies = _record(side, inputs, statics, compute, True)
        if nodes is None:
            if not _warned_copy:
                _warned_copy = True
                warnings.warn(
                    "sdtw: this torch or driver cannot re-point a CUDA graph's copy nodes; "
                    "the library graphs copy their inputs in before each replay instead "
                    "(two driver calls per call)",
                    RuntimeWarning,
                    stacklevel=4,
                )
            if copies:  # copies from this call's addresses for good: capture again without
                launch_counts.subtract(_count_since(before))
                graph, outs, _, _ = _record(side, inputs, statics, compute, False)
        launches = _count_since(before)
        # the capture only recorded the launches: nothing ran; the replays will count them
        launch_counts.subtract(launches)
    except Exception as exc:  # an op this torch cannot capture: this key stays eager
        _graphs[key] = None
        if not _warned:
            _warned = True
            warnings.warn(
                f"sdtw: CUDA-graph capture failed ({exc!r}); calls of this shape run eagerly "
                "(about 0.5 ms more host time per call; sdtw.cuda.set_graphs(False) turns "
                "capture off)",
                RuntimeWarning,
                stacklevel=4,
            )
        return None
    g = _Graph(statics, graph, outs, +launches, cells, nodes)
    _graphs[key] = g
    _evict()
    return g


def _count_since(before):
    """The launches counted since the snapshot ``before``."""
    since = _launch().launch_counts.copy()
    since.subtract(before)
    return since


def _evict() -> None:
    """Drop the least recently used graphs beyond :data:`MAX_GRAPHS` or
    :data:`BUDGET_CELLS` (failed keys count toward neither, and are dropped with the oldest)."""
    while len(_graphs) > 4 * MAX_GRAPHS or (
        len(_graphs) > 1
        and (
            graph_count() > MAX_GRAPHS
            or sum(g.cells for g in _graphs.values() if g is not None) > BUDGET_CELLS
        )
    ):
        _graphs.popitem(last=False)
