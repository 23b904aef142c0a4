"""Offline SASS of the CUDA kernels, on a machine without a GPU: what each instruction class
costs per kernel and per loop body.

Usage
-----
::

    python -m experiments.sass [KERNEL ...] [--cc 90] [--max-regs N] [--out DIR] [--list]
    python -m experiments.sass --compile-all [--quick] [--cc 90]

Numba compiles the kernel's PTX for compute capability ``--cc`` on the CPU (its NVVM needs no
driver), ``ptxas`` assembles it (``-v``: registers, spills, shared memory) and ``nvdisasm``
disassembles the cubin.  Printed per kernel: ptxas' resource line, the static instruction
count by opcode, and for each loop (a label that a later branch jumps back to) its body's
opcodes, the part a kernel's time is made of.  ``--out`` keeps the PTX and SASS.

``--compile-all`` compiles the PTX of every kernel variant a GPU may compile (each DP variant
of ``FORWARD`` and ``BACKWARD``, the park kernels) in worker processes, and says which failed:
the simulator runs the kernels as Python, so Numba's typing of the device code and NVVM only
ever see a variant here or on a GPU (a test runs it with ``--quick``: the busy variants, one
quiet forward and one quiet backward).  It needs NVVM only, not ``ptxas``.

This is how the park kernel's k loop was found to spend ~45 of its ~100 instructions per 8
mma on 64-bit index arithmetic (``probe-dev.txt``, before run 59).  Static counts are not
dynamic ones: a loop body runs as often as its trip count, the rest once per block.  Numba's
``launch_bounds`` are not in the PTX; ``--max-regs`` (default: the kernel's bound, 128 for the
float32 park) stands in for them.

Needs numba-cuda with libNVVM, ``ptxas`` and ``nvdisasm`` (on ``PATH``, in
``$CUDA_HOME/bin``, or in the ``nvidia-cuda-*`` pip wheels' ``bin``); says which is missing.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def _forward_sig(f32: bool, fused: bool = False, tiled: bool = False) -> str:
    """Argument types of a DP forward kernel (X is the features, 3-D, in the fused mode
    without gradients, else flat; Y 3-D, but flat in the tiled mode)."""
    f = "f4" if f32 else "f8"
    x = f"{f}[:, :, ::1]" if fused else f"{f}[::1]"
    y = f"{f}[::1]" if tiled else f"{f}[:, :, ::1]"
    return f"{x}, {y}, i8, i8, i8, f8, i8, i8, {f}[::1], i8[::1], {f}[::1], b1"


def _backward_sig(f32: bool) -> str:
    """Argument types of a DP backward kernel (the in-sweep gradients' x, y, D, g_x, g_y last:
    float32 placeholders in the other variants)."""
    f = "f4" if f32 else "f8"
    return (
        f"{f}[::1], i8, i8, {f}[::1], i8[::1], {f}[:, ::1], f4[::1], f4[::1], i8, f4[::1], f4[::1]"
    )


def _park_sig(f32: bool) -> str:
    f = "f4" if f32 else "f8"
    return f"{f}[::1], {f}[::1], {f}[::1], i8, i8, i8"


#: Kernel name -> (its dispatcher in sdtw.cuda._kernels, its argument types, ptxas register
#: cap: the kernel's launch bound, which Numba does not put in the PTX)
KERNELS = {
    "park32": ("PARK32", _park_sig(True), 128),
    "park64": ("PARK", _park_sig(False), None),
    "cost-park32": ("COST_PARK", _park_sig(True), 128),
    "forward-hilo": ("FORWARD", _forward_sig(True), None),
    "forward-cost32": ("FORWARD", _forward_sig(True), None),
    "forward-hilo-mover": ("FORWARD", _forward_sig(True), None),
    "forward-cost32-mover": ("FORWARD", _forward_sig(True), None),
    "forward-fused32": ("FORWARD", _forward_sig(True, fused=True), None),
    "forward-tiled32": ("FORWARD", _forward_sig(True, tiled=True), None),
    "forward-cost64": ("FORWARD", _forward_sig(False), None),
    "backward32": ("BACKWARD", _backward_sig(True), None),
    "backward32-mover": ("BACKWARD", _backward_sig(True), None),
    # launch bounds (96, 4): 65536 / (4 * 96) registers, rounded down to a multiple of 8
    "backward32-grads": ("BACKWARD_GRADS", _backward_sig(True), 168),
    "backward32-grads1": ("BACKWARD_GRADS", _backward_sig(True), 168),
}
#: The key of the kernels stored in a dict (the busy variant: what a GPU runs).
_KEYS = {
    "cost-park32": True,
    "forward-hilo": ("hilo", True, True, False),
    "forward-hilo-mover": ("hilo", True, True, True),
    "forward-cost32": ("cost", True, True, False),
    "forward-cost32-mover": ("cost", True, True, True),
    "forward-cost64": ("cost", False, True, False),
    "forward-fused32": ("fused", True, True, False),
    "forward-tiled32": ("tiled", True, True, True),
    "backward32": (True, True, False),
    "backward32-mover": (True, True, True),
    "backward32-grads": (True, 8),
    "backward32-grads1": (True, 1),
}

_INSTR = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)")
_LABEL = re.compile(r"^(\.L_x_\d+):")
_BRANCH = re.compile(r"\bBRA\b.*`\((\.L_x_\d+)\)")


def find_tool(name: str) -> str | None:
    """``ptxas``/``nvdisasm`` on PATH, in ``$CUDA_HOME/bin``, or in an nvidia pip wheel."""
    found = shutil.which(name)
    if found:
        return found
    roots = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", "")]
    try:
        import nvidia

        roots += list(nvidia.__path__)  # (its cu13/, cu12/... wheels' bin/ are found below)
    except ImportError:
        pass
    for root in filter(None, roots):
        for cand in Path(root).glob(f"**/bin/{name}"):
            if os.access(cand, os.X_OK):
                return str(cand)
    return None


def missing_tools() -> list[str]:
    """What of libNVVM (numba-cuda's), ``ptxas`` and ``nvdisasm`` this machine lacks."""
    missing = [name for name in ("ptxas", "nvdisasm") if find_tool(name) is None]
    try:
        from numba.cuda.cudadrv import nvvm

        nvvm.NVVM()
    except Exception:  # not installed, or no libNVVM found
        missing.insert(0, "libNVVM")
    return missing


def _fake_device(cc: tuple[int, int]) -> None:
    """Device functions ask the current device for its compute capability when compiled;
    on a machine without a GPU, answer ``cc`` (compilation only: nothing is launched)."""
    import numba.cuda.dispatcher as dispatcher

    class _Device:
        compute_capability = cc

    dispatcher.get_current_device = lambda: _Device()


def _ptx(attr: str, key: object, args: str, cc: tuple[int, int]) -> str:
    """The PTX for ``cc`` of the dispatcher ``attr`` of sdtw.cuda._kernels (``attr[key]``
    where it is a dict of variants) compiled for the argument types ``args``."""
    from numba import cuda
    from numba.core import sigutils

    from sdtw.cuda import _kernels as K

    dispatcher = getattr(K, attr)
    if key is not None:
        dispatcher = dispatcher[key]
    sig = sigutils.normalize_signature(f"void({args})")[0]
    ptx, _ = cuda.compile_ptx(dispatcher.py_func, sig, cc=cc)
    return ptx


def ptx_of(kernel: str, cc: tuple[int, int]) -> str:
    """The PTX of one of :data:`KERNELS` for ``cc``."""
    attr, args, _ = KERNELS[kernel]
    return _ptx(attr, _KEYS.get(kernel), args, cc)


def variants() -> list[tuple[str, object, str]]:
    """Every kernel a GPU may compile: ``(dispatcher's name in sdtw.cuda._kernels, its key in
    that dict or None, the signature)``: each DP variant of ``FORWARD`` and ``BACKWARD`` (mode,
    dtype, busy or quiet, mover or not) and the park kernels."""
    from sdtw.cuda import _kernels as K

    out: list[tuple[str, object, str]] = []
    for key in K.FORWARD:
        sig = _forward_sig(key[1], fused=key[0] == K.FUSED, tiled=key[0] == K.TILED)
        out.append(("FORWARD", key, sig))
    for key in K.BACKWARD:
        out.append(("BACKWARD", key, _backward_sig(key[0])))
    for key in K.BACKWARD_GRADS:
        out.append(("BACKWARD_GRADS", key, _backward_sig(True)))
    for name in ("park32", "park64", "cost-park32"):
        attr, sig, _ = KERNELS[name]
        out.append((attr, _KEYS.get(name), sig))
    out.append(("COST_PARK", False, _park_sig(False)))  # the float64 cost's park
    assert len(out) == len(K.FORWARD) + len(K.BACKWARD) + len(K.BACKWARD_GRADS) + 2 + len(
        K.COST_PARK
    )
    return out


def _compile_variant(job: tuple[str, object, str, tuple[int, int]]) -> tuple[str, str | None]:
    """PTX of one of :func:`variants` (in a worker process); its label and the error, if any."""
    attr, key, args, cc = job
    label = attr if key is None else f"{attr}[{key!r}]"
    _fake_device(cc)
    try:
        _ptx(attr, key, args, cc)
    except Exception as exc:  # report every failure, not just the first
        return label, f"{type(exc).__name__}: {exc}"
    return label, None


def _quick(attr: str, key: object) -> bool:
    """``--quick``'s subset of :func:`variants`: every busy DP variant (what a GPU runs by
    default), the quiet ones of the float32 cost forward and the float32 backward (the code
    that only quiet variants compile), and the park kernels."""
    if attr == "FORWARD":
        return key[2] or key[:2] == ("cost", True)
    if attr == "BACKWARD":
        return key[1] or key[0]
    if attr == "BACKWARD_GRADS":
        return key[0]
    return True


def compile_all(cc: tuple[int, int], workers: int, quick: bool = False) -> int:
    """Compile every kernel variant's PTX (Numba's typing, then NVVM) for ``cc``: what the
    simulator never does, since it runs the kernels as Python (``quick``: the subset of
    :func:`_quick`).  0: all compiled; 1: some failed (printed); 2: no NVVM here, or no
    NVRTC (numba-cuda asks it which architectures it may compile for; the test extras
    install it on Linux, ``nvidia-cuda-nvrtc``)."""
    from concurrent.futures import ProcessPoolExecutor

    jobs = [(*v, cc) for v in variants() if not quick or _quick(v[0], v[1])]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(_compile_variant, jobs))
    failed = [(label, err) for label, err in results if err is not None]
    if failed:
        from sdtw.cuda._launch import missing_toolkit

        missing = set.intersection(*(set(missing_toolkit(err)) for _, err in failed))
        if missing:  # every variant failed for want of the same piece of the toolkit
            print(f"sass: no {', '.join(sorted(missing))} to compile with ({failed[0][1][:200]})")
            return 2
    for label, err in results:
        print(f"{'ok  ' if err is None else 'FAIL'} {label}" + ("" if err is None else f": {err}"))
    ok = len(results) - len(failed)
    print(f"{ok} of {len(results)} kernel variants compiled for sm_{cc[0]}{cc[1]}")
    return 1 if failed else 0


def analyse(sass: str) -> tuple[collections.Counter, list[tuple[str, collections.Counter]]]:
    """Opcode counts of the whole SASS, and of each loop body (label .. its last back
    branch), in the order they appear."""
    lines = sass.splitlines()
    total: collections.Counter = collections.Counter()
    where: dict[str, int] = {}
    ops: list[str | None] = []
    for i, line in enumerate(lines):
        m = _LABEL.match(line.strip())
        if m:
            where[m.group(1)] = i
        m = _INSTR.search(line)
        op = m.group(1) if m else None
        ops.append(op)
        if op:
            total[op] += 1
    loops: dict[str, int] = {}
    for i, line in enumerate(lines):
        m = _BRANCH.search(line)
        if m and m.group(1) in where and where[m.group(1)] < i:
            loops[m.group(1)] = max(loops.get(m.group(1), 0), i)
    bodies = []
    for label, end in sorted(loops.items(), key=lambda kv: where[kv[0]]):
        body = collections.Counter(op for op in ops[where[label] : end + 1] if op)
        bodies.append((label, body))
    return total, bodies


def _fmt(counts: collections.Counter, top: int = 14) -> str:
    return ", ".join(f"{op} {n}" for op, n in counts.most_common(top))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.sass", description=__doc__)
    parser.add_argument("kernels", nargs="*", default=["park32"], metavar="KERNEL")
    parser.add_argument("--cc", default="90", help="compute capability, e.g. 90 (default)")
    parser.add_argument("--max-regs", type=int, default=None, help="ptxas --maxrregcount")
    parser.add_argument("--out", type=Path, default=None, help="keep the PTX and SASS here")
    parser.add_argument("--list", action="store_true", help="list the kernels and exit")
    parser.add_argument(
        "--compile-all",
        action="store_true",
        help="compile every kernel variant's PTX (typing + NVVM; no ptxas needed) and exit",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="with --compile-all: the busy variants and one quiet forward and backward only",
    )
    args = parser.parse_args(argv)
    if args.list:
        for name, (attr, sig, _) in KERNELS.items():
            key = f"[{_KEYS[name]!r}]" if name in _KEYS else ""
            print(f"{name:16s} {attr}{key}({sig})")
        return 0
    if not re.fullmatch(r"\d\d+", args.cc):
        parser.error(f"--cc must look like 90, got {args.cc!r}")
    cc = (int(args.cc[:-1]), int(args.cc[-1]))
    if args.compile_all:
        os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
        return compile_all(cc, workers=max(1, min(4, os.cpu_count() or 1)), quick=args.quick)
    unknown = [k for k in args.kernels if k not in KERNELS]
    if unknown:
        parser.error(f"unknown kernel(s) {unknown}; choose from {sorted(KERNELS)}")
    missing = missing_tools()
    if missing:
        print(f"sass: {', '.join(missing)} not found (PATH, CUDA_HOME/bin, nvidia wheels)")
        return 2
    tools = {name: find_tool(name) for name in ("ptxas", "nvdisasm")}
    os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
    _fake_device(cc)
    out = args.out or Path(tempfile.mkdtemp(prefix="sdtw-sass-"))
    out.mkdir(parents=True, exist_ok=True)
    for kernel in args.kernels:
        ptx_path, cubin, sass_path = (out / f"{kernel}.{ext}" for ext in ("ptx", "cubin", "sass"))
        ptx_path.write_text(ptx_of(kernel, cc))
        regs = args.max_regs if args.max_regs is not None else KERNELS[kernel][2]
        cmd = [tools["ptxas"], f"-arch=sm_{args.cc}", "-O3", "-v", str(ptx_path), "-o", str(cubin)]
        if regs:
            cmd[1:1] = ["--maxrregcount", str(regs)]
        res = subprocess.run(cmd, capture_output=True, text=True, check=True)
        info = [ln.strip() for ln in res.stderr.splitlines() if "spill" in ln or "Used" in ln]
        sass = subprocess.run(
            [tools["nvdisasm"], str(cubin)], capture_output=True, text=True, check=True
        ).stdout
        sass_path.write_text(sass)
        total, bodies = analyse(sass)
        print(f"== {kernel} (sm_{args.cc}{f', --maxrregcount {regs}' if regs else ''})")
        for line in info:
            print(f"   {line.replace('ptxas info    : ', '')}")
        print(f"   {sum(total.values())} static instructions: {_fmt(total)}")
        for label, body in bodies:
            print(f"   loop {label}: {sum(body.values())} instructions: {_fmt(body, 10)}")
    if args.out is None:
        shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
