"""Offline PTX and SASS of the CUDA kernels, on a machine without a GPU.

Usage
-----
::

    python -m experiments.sass [LABEL ...] [--cc 90] [--max-regs N] [--out DIR] [--list]
    python -m experiments.sass --compile-all [--cc 90]
    python -m experiments.sass --check [--digests FILE]
    python -m experiments.sass --record [--digests FILE]

Labels are the kernel specs' (``forward-hilo-f32-mover``, ``backward-f32``, ``park-f32``...;
``--list`` lists them): every spec that :func:`sdtw.cuda.kernels.registry.production_specs`
returns, the variants the tuning rules can choose.  Numba compiles a kernel's PTX for compute
capability ``--cc`` on the CPU (its NVVM needs no driver), ``ptxas`` assembles it (``-v``:
registers, spills, shared memory) and ``nvdisasm`` disassembles the cubin.  Printed per
kernel: ptxas' resource line, the static instruction count by opcode, and for each loop (a
label that a later branch jumps back to) its body's opcodes.  ``--out`` keeps the PTX and
SASS.  Static counts are not dynamic ones: a loop body runs as often as its trip count, the
rest once per block.

``--compile-all`` compiles the PTX of every production spec (Numba's typing, then NVVM; no
``ptxas``): the simulator runs the kernels as Python, so a typing error in a variant that no
simulator test reaches would otherwise only show on a GPU.

``--check`` compiles every production spec to sm_90 SASS and compares a digest of each one's
*normalised* SASS (the code sections only; symbol names, addresses and whitespace left out)
with the digests recorded in ``tests/data/sass-sm90.json``: a change of the kernels' code that
changes the instructions the GPU runs shows there, on a machine without a GPU.  The digests
hold for the toolchain they were recorded with (numba-cuda, NVVM, ptxas: in the file); with
another toolchain ``--check`` says so and exits 2.  ``--record`` writes the file anew (after a
deliberate change of the kernels, with the reason in the commit).

Needs numba-cuda with libNVVM, ``ptxas`` and ``nvdisasm`` (the ``nvidia-cuda-nvcc`` and
``nvidia-cuda-nvdisasm`` wheels, which the test extra installs on Linux, ``$CUDA_HOME/bin`` or
``PATH``; the wheels come first, they match the NVVM wheel); says which is missing (exit 2).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DIGESTS = REPO / "tests" / "data" / "sass-sm90.json"

_INSTR = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)")
_LABEL = re.compile(r"^(\.L_x_\d+):")
_BRANCH = re.compile(r"\bBRA\b.*`\((\.L_x_\d+)\)")


def specs() -> dict:
    """The production specs by label."""
    from sdtw.cuda.kernels import registry

    return {s.label: s for s in registry.production_specs()}


def signature(spec) -> str:
    """A kernel's argument types as the library's launchers pass them."""
    from sdtw.cuda.kernels import FUSED, TILED, BackwardSpec, ForwardSpec, RecomputeSpec

    if isinstance(spec, ForwardSpec):
        f = "f4" if spec.fast else "f8"
        x = f"{f}[:, :, ::1]" if spec.mode == FUSED else f"{f}[::1]"
        flat_y = spec.mode == TILED or spec.recurrence != "soft-dtw"  # (Soft-MSM's costs)
        y = f"{f}[::1]" if flat_y else f"{f}[:, :, ::1]"
        return f"{x}, {y}, i8, i8, i8, f8, i8, i8, {f}[::1], i8[::1], {f}[::1], b1"
    if isinstance(spec, RecomputeSpec):
        f = "f4" if spec.fast else "f8"
        return (
            f"{f}[:, :, ::1], {f}[:, :, ::1], i8, i8, i8, f8, i8, i8[::1], i8[::1], f8[::1], "
            "f8[:, :, ::1], f8[:, :, ::1]"
        )
    if isinstance(spec, BackwardSpec):
        f = "f4" if spec.fast else "f8"
        return (
            f"{f}[::1], i8, i8, {f}[::1], i8[::1], {f}[:, ::1], "
            "f4[::1], f4[::1], i8, f4[::1], f4[::1]"
        )
    f = "f4" if spec.f32 else "f8"
    return f"{f}[::1], {f}[::1], {f}[::1], i8, i8, i8"


def ptx_of(spec, cc: tuple[int, int]) -> str:
    """The PTX of ``spec``'s kernel for ``cc`` (compiled here, never from the disk cache)."""
    from sdtw.cuda.kernels import registry

    return registry.compile_ptx(spec, signature(spec), cc)


def find_tool(name: str) -> str | None:
    """``name`` from the nvidia pip wheels (they match the NVVM wheel numba-cuda loads), then
    ``$CUDA_HOME/bin``, then ``PATH``."""
    roots = []
    try:
        import nvidia

        roots += list(nvidia.__path__)  # (its cu13/, cu12/... wheels' bin/ are found below)
    except ImportError:
        pass
    roots += [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", "")]
    for root in filter(None, roots):
        for cand in sorted(Path(root).glob(f"**/bin/{name}")):
            if os.access(cand, os.X_OK):
                return str(cand)
    return shutil.which(name)


def missing_tools() -> list[str]:
    """What of libNVVM (numba-cuda's), ``ptxas`` and a disassembler this machine lacks."""
    missing = [name for name in ("ptxas", "nvdisasm") if find_tool(name) is None]
    try:
        from numba.cuda.cudadrv import nvvm

        nvvm.NVVM()
    except Exception:  # not installed, or no libNVVM found
        missing.insert(0, "libNVVM")
    return missing


def sass_of(
    spec, cc: tuple[int, int], keep: Path | None = None, regs: int | None = None
) -> tuple[str, list[str]]:
    """The SASS of ``spec``'s kernel and ptxas' resource lines (``keep``: a folder for the
    PTX, cubin and SASS; ``regs``: a register cap for ptxas besides the kernel's launch bound,
    which is in the PTX)."""
    out = keep or Path(tempfile.mkdtemp(prefix="sdtw-sass-"))
    ptx_path, cubin, sass_path = (out / f"{spec.label}.{ext}" for ext in ("ptx", "cubin", "sass"))
    ptx_path.write_text(ptx_of(spec, cc))
    cmd = [find_tool("ptxas"), f"-arch=sm_{cc[0]}{cc[1]}", "-O3", "-v", str(ptx_path)]
    if regs:
        cmd += ["--maxrregcount", str(regs)]
    res = subprocess.run([*cmd, "-o", str(cubin)], capture_output=True, text=True)
    if res.returncode:
        raise RuntimeError(f"ptxas failed on {spec.label}: {res.stderr.strip()[-500:]}")
    info = [ln.strip() for ln in res.stderr.splitlines() if "spill" in ln or "Used" in ln]
    sass = subprocess.run(
        [find_tool("nvdisasm"), str(cubin)], capture_output=True, text=True, check=True
    ).stdout
    sass_path.write_text(sass)
    if keep is None:
        shutil.rmtree(out, ignore_errors=True)
    return sass, info


def normalise(sass: str) -> list[str]:
    """The code of an nvdisasm listing: the instruction lines and labels of its ``.text``
    sections (its ``//-----`` headers start each section), with symbol names, addresses and
    runs of whitespace replaced."""
    out, on = [], False
    for line in sass.splitlines():
        if line.startswith("//---------------------"):
            on = ".text." in line
        if not on:
            continue
        line = re.sub(r"/\*[0-9a-f]{4,}\*/", "", line)
        line = re.sub(r"_Z\w+", "SYM", line)
        line = re.sub(r"_cudapy_smem_\d+", "SMEM", line)
        line = re.sub(r"\s+", " ", line).strip()
        if line:
            out.append(line)
    return out


def digest(sass: str) -> str:
    return hashlib.sha256("\n".join(normalise(sass)).encode()).hexdigest()


def toolchain() -> dict:
    """What the SASS depends on besides the kernels' code."""
    import numba_cuda
    from numba.cuda.cudadrv import nvvm

    def version(tool: str) -> str:
        res = subprocess.run([find_tool(tool), "--version"], capture_output=True, text=True)
        return res.stdout.strip().splitlines()[-1]

    return {
        "numba_cuda": numba_cuda.__version__,
        "nvvm": ".".join(map(str, nvvm.NVVM().get_version())),
        "ptxas": version("ptxas"),
        "nvdisasm": version("nvdisasm"),
    }


def _digest_job(job: tuple[str, tuple[int, int]]) -> tuple[str, str | None, str | None]:
    """(label, digest, error) of one production spec, in a worker process."""
    label, cc = job
    try:
        return label, digest(sass_of(specs()[label], cc)[0]), None
    except Exception as exc:  # report every failure, not just the first
        return label, None, f"{type(exc).__name__}: {exc}"


def _ptx_job(job: tuple[str, tuple[int, int]]) -> tuple[str, str | None]:
    label, cc = job
    try:
        ptx_of(specs()[label], cc)
    except Exception as exc:
        return label, f"{type(exc).__name__}: {exc}"
    return label, None


def _pool_map(fn, jobs: list) -> list:
    from concurrent.futures import ProcessPoolExecutor

    workers = max(1, min(4, os.cpu_count() or 1))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(fn, jobs))


def compile_all(cc: tuple[int, int]) -> int:
    """Every production spec's PTX for ``cc``: 0 all compiled; 1 some failed (printed); 2 no
    NVVM or NVRTC here (numba-cuda asks NVRTC which architectures it may compile for)."""
    from sdtw.cuda import missing_toolkit

    results = _pool_map(_ptx_job, [(label, cc) for label in specs()])
    failed = [(label, err) for label, err in results if err is not None]
    if failed:
        missing = set.intersection(*(set(missing_toolkit(err)) for _, err in failed))
        if missing:  # every variant failed for want of the same piece of the toolkit
            print(f"sass: no {', '.join(sorted(missing))} to compile with ({failed[0][1][:200]})")
            return 2
    for label, err in results:
        print(f"{'ok  ' if err is None else 'FAIL'} {label}" + ("" if err is None else f": {err}"))
    print(f"{len(results) - len(failed)} of {len(results)} kernel variants compiled")
    return 1 if failed else 0


def check(path: Path, record: bool = False) -> int:
    """Compare (or with ``record`` write) the production specs' SASS digests for sm_90: 0 all
    the same; 1 some differ or failed (printed); 2 another toolchain than the recorded one."""
    tools = toolchain()
    if not record:
        recorded = json.loads(path.read_text())
        if recorded["toolchain"] != tools:
            print(f"sass: digests recorded with {recorded['toolchain']}, this machine has {tools}")
            return 2
    results = _pool_map(_digest_job, [(label, (9, 0)) for label in specs()])
    errors = [(label, err) for label, _, err in results if err]
    for label, err in errors:
        print(f"FAIL {label}: {err}")
    if record:
        if errors:
            return 1
        got = {label: d for label, d, _ in results}
        path.write_text(json.dumps({"toolchain": tools, "sm_90": got}, indent=1) + "\n")
        print(f"recorded {len(got)} digests in {path}")
        return 0
    want = recorded["sm_90"]
    differ = [label for label, d, err in results if not err and want.get(label) != d]
    for label in differ:
        print(f"DIFF {label}: {'not recorded' if label not in want else 'other SASS'}")
    gone = sorted(set(want) - set(specs()))
    for label in gone:
        print(f"GONE {label}: recorded, no longer a production spec")
    same = len(results) - len(differ) - len(errors)
    print(f"{same} of {len(results)} kernels' sm_90 SASS as recorded")
    return 1 if differ or errors or gone else 0


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
    parser.add_argument("kernels", nargs="*", default=["park-f32"], metavar="LABEL")
    parser.add_argument("--cc", default="90", help="compute capability, e.g. 90 (default)")
    parser.add_argument("--max-regs", type=int, default=None, help="ptxas --maxrregcount")
    parser.add_argument("--out", type=Path, default=None, help="keep the PTX and SASS here")
    parser.add_argument("--list", action="store_true", help="list the kernels and exit")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--compile-all", action="store_true", help="every spec's PTX (no ptxas)")
    what.add_argument("--check", action="store_true", help="compare SASS digests (sm_90)")
    what.add_argument("--record", action="store_true", help="write the SASS digests (sm_90)")
    parser.add_argument("--digests", type=Path, default=DIGESTS, help="the digests' file")
    args = parser.parse_args(argv)
    os.environ.pop("NUMBA_ENABLE_CUDASIM", None)  # (before sdtw reads its settings)
    if args.list:
        for label, spec in specs().items():
            print(f"{label:28s} {spec}")
        return 0
    if not re.fullmatch(r"\d\d+", args.cc):
        parser.error(f"--cc must look like 90, got {args.cc!r}")
    cc = (int(args.cc[:-1]), int(args.cc[-1]))
    if args.compile_all:
        return compile_all(cc)
    missing = missing_tools()
    if missing:
        print(f"sass: {', '.join(missing)} not found (nvidia wheels, CUDA_HOME/bin, PATH)")
        return 2
    if args.check or args.record:
        return check(args.digests, record=args.record)
    known = specs()
    unknown = [k for k in args.kernels if k not in known]
    if unknown:
        parser.error(f"unknown kernel(s) {unknown}; choose from {sorted(known)}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    for label in args.kernels:
        spec = known[label]
        cap = args.max_regs
        sass, info = sass_of(spec, cc, args.out, cap)
        total, bodies = analyse(sass)
        regs = f", --maxrregcount {cap}" if cap else ""
        print(f"== {label} (sm_{args.cc}{regs})")
        for line in info:
            print(f"   {line.replace('ptxas info    : ', '')}")
        print(f"   {sum(total.values())} static instructions: {_fmt(total)}")
        for loop, body in bodies:
            print(f"   loop {loop}: {sum(body.values())} instructions: {_fmt(body, 10)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
