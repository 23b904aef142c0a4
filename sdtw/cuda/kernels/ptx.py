"""Inline-PTX intrinsics of the GPU kernels (never imported under the simulator).

Each function here *builds* a Numba intrinsic: call it once, at import of
:mod:`sdtw.cuda.kernels.primitives`, which puts each intrinsic and its simulator twin
(:mod:`sdtw.cuda.kernels.sim`) behind one name.  Every instruction is one the compiler would
not emit by itself from Numba's IR (a relaxed L2 load, a predicated store, a named barrier, a
tensor-core ``mma``...), or one it would emit with surrounding code the kernels do not need.
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils, types
from numba.core.extending import intrinsic

from sdtw.cuda.kernels.geometry import TB


def unary_f32(name: str, instruction: str):
    """A float32 -> float32 device intrinsic that is one PTX instruction (inline asm)."""

    @intrinsic
    def fn(typingctx, x):
        def codegen(context, builder, signature, args):
            fty = ir.FunctionType(ir.FloatType(), [ir.FloatType()])
            return builder.asm(fty, f"{instruction} $0, $1;", "=f,f", args, False, name=name)

        return types.float32(types.float32), codegen

    return fn


def _item_pointer(context, builder, signature, args, k=0):
    """For the inline-asm intrinsics below: the array struct of argument ``k`` and the LLVM
    pointer to its element at index argument ``k + 1``."""

    aryty = signature.args[k]
    ary = context.make_array(aryty)(context, builder, args[k])
    idx = [args[k + 1]]
    return ary, cgutils.get_item_pointer(context, builder, aryty, ary, idx, wraparound=False)


def ld_relaxed():
    """``ld.relaxed.gpu.b64`` of ``arr[idx]`` (an int64 array): a coherent read at GPU scope
    (L2), without the atomic's read-modify-write."""

    @intrinsic
    def ld_relaxed(typingctx, arr, idx):
        def codegen(context, builder, signature, args):
            _, ptr = _item_pointer(context, builder, signature, args)
            fty = ir.FunctionType(ir.IntType(64), [ptr.type])
            return builder.asm(fty, "ld.relaxed.gpu.b64 $0, [$1];", "=l,l", [ptr], True)

        return types.int64(arr, idx), codegen

    return ld_relaxed


def named_barriers(*ops: tuple[str, int]):
    """Named-barrier instructions of two of the block's warps (``2 TB`` threads), in order:
    ``ops`` are (``"sync"`` or ``"arrive"``, barrier) pairs, e.g. ``bar.sync 1, 64``.  A
    ``memory`` clobber: no shared-memory access moves across them.  ``bar.arrive`` does not
    wait; it orders the arriving warp's earlier accesses before those that the waiting warp
    makes after its ``bar.sync`` (PTX ISA, "bar, barrier": a producer-consumer pair).

    ``bar.sync`` is ``barrier.sync.aligned``: the threads that *wait* in one generation of a
    barrier must all execute the same barrier instruction (others may arrive from anywhere).
    Our warps meet in that form only (one warp waits, the other arrives).  The non-aligned
    ``barrier.sync`` would allow any mix, but offline ptxas then merges the warps' paths (the
    movers' kernels 1.4-1.7x longer)."""
    text = " ".join(f"bar.{op} {barrier}, {2 * TB};" for op, barrier in ops)

    @intrinsic
    def bar_two(typingctx):
        def codegen(context, builder, signature, args):
            fty = ir.FunctionType(ir.VoidType(), [])
            builder.asm(fty, text, "~{memory}", [], True)
            return context.get_dummy_value()

        return types.void(), codegen

    return bar_two


def st_if():
    """``st_if(arr, idx, val, pred)``: ``arr[idx] = val`` (an int64 array) where ``pred``, as
    one predicated store.  A step's publishing lane is one of the warp's 32: a branch around
    its store made the warp diverge and reconverge at every step."""

    @intrinsic
    def st_if(typingctx, arr, idx, val, pred):
        def codegen(context, builder, signature, args):
            _, ptr = _item_pointer(context, builder, signature, args)
            i32 = ir.IntType(32)
            fty = ir.FunctionType(ir.VoidType(), [ptr.type, ir.IntType(64), i32])
            builder.asm(
                fty,
                "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p st.b64 [$0], $1; }",
                "l,l,r",
                [ptr, args[2], builder.zext(args[3], i32)],
                True,
            )
            return context.get_dummy_value()

        return types.none(arr, idx, types.int64, types.boolean), codegen

    return st_if


def u32():
    """``u32(x)``: ``x`` truncated to an unsigned 32-bit value that the compiler must keep as
    one (an inline-asm move).  Numba computes integer expressions in 64 bits and a truncation
    followed by the index's zero-extension folds into a 64-bit mask, so without it a 32-bit
    offset costs 64-bit multiply-adds and shifts; with it, offset arithmetic narrows to 32 bits
    and the access is one wide multiply-add onto the base (see :func:`band_view`)."""

    @intrinsic
    def u32(typingctx, x):
        def codegen(context, builder, signature, args):
            i32 = ir.IntType(32)
            v = builder.trunc(args[0], i32) if args[0].type.width > 32 else args[0]
            return builder.asm(ir.FunctionType(i32, [i32]), "mov.b32 $0, $1;", "=r,r", [v], False)

        return types.uint32(x), codegen

    return u32


def band_view():
    """``band_view(A, start)``: the 1-D array ``A`` from element ``start`` on (shape and
    strides as ``A``'s: only ever indexed with non-negative offsets, no bounds checks), its data
    pointer passed through inline asm (``cvta.to.global``) so that the compiler cannot fold
    ``start`` back into each access's index: ``view[u32]`` is then one wide multiply-add of
    the 32-bit offset onto a 64-bit base, where ``A[start + u32]`` costs a 64-bit add and a
    64-bit shift-add."""

    @intrinsic
    def band_view(typingctx, arr, start):
        def codegen(context, builder, signature, args):
            aryty = signature.args[0]
            ary, ptr = _item_pointer(context, builder, signature, args)
            i64 = ir.IntType(64)
            fty = ir.FunctionType(i64, [i64])
            raw = builder.asm(
                fty, "cvta.to.global.u64 $0, $1;", "=l,l", [builder.ptrtoint(ptr, i64)], False
            )
            # a global-space pointer, cast back to the generic one the array holds: the
            # compiler infers the global space for the accesses (ld/st.global)
            gptr = builder.inttoptr(raw, ir.PointerType(ptr.type.pointee, addrspace=1))
            out = context.make_array(aryty)(context, builder)
            context.populate_array(
                out,
                data=builder.addrspacecast(gptr, ptr.type),
                shape=ary.shape,
                strides=ary.strides,
                itemsize=ary.itemsize,
                meminfo=ary.meminfo,
                parent=ary.parent,
            )
            return out._getvalue()

        return arr(arr, start), codegen

    return band_view


def tf32():
    """``tf32(x)``: ``x`` rounded to TF32 (10 mantissa bits, to nearest, ties away: the
    rounding of ``cvt.rna.tf32.f32``) as a float32, by two integer operations on its bits
    (half a TF32 unit added to the magnitude, the low 13 bits cleared): ``cvt.rna`` itself
    compiles to a sequence that also handles NaN and infinity (offline SASS: FSETP and SEL
    around it), which E, x and y never hold.  Only float32 values within a TF32 unit of the
    largest would round differently (to infinity)."""

    @intrinsic
    def tf32(typingctx, x):
        def codegen(context, builder, signature, args):
            i32 = ir.IntType(32)
            r = builder.asm(
                ir.FunctionType(i32, [i32]),
                "{ .reg .b32 t; add.u32 t, $1, 4096; and.b32 $0, t, -8192; }",
                "=r,r",
                [builder.bitcast(args[0], i32)],
                False,
            )
            return builder.bitcast(r, ir.FloatType())

        return types.float32(types.float32), codegen

    return tf32


def mma(tf32: bool):
    """``(d0, d1, d2, d3) = mma.sync.m16n8k8.row.col(a0..a3, b0, b1, c0..c3)`` for one lane,
    float64 (``tf32`` False: :func:`dmma`) or TF32 products with float32
    accumulators (``tf32``: the fragments float32 bits of TF32 values, whose low 13 mantissa
    bits are ignored; the same fragment layout).  Warp-collective."""

    kind = "f32.tf32.tf32.f32" if tf32 else "f64.f64.f64.f64"
    nt = types.float32 if tf32 else types.float64

    @intrinsic
    def mma(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        sig = types.UniTuple(nt, 4)(*([nt] * 10))

        def codegen(context, builder, signature, args):
            ft = ir.FloatType() if tf32 else ir.DoubleType()
            if tf32:  # (A and B as .b32 registers)
                i32 = ir.IntType(32)
                ins = [i32] * 6 + [ft] * 4
                ops = [builder.bitcast(a, i32) for a in args[:6]] + list(args[6:])
                cons = ["=f"] * 4 + ["r"] * 6 + ["f"] * 4
            else:
                ins, ops, cons = [ft] * 10, list(args), ["=d"] * 4 + ["d"] * 10
            res = builder.asm(
                ir.FunctionType(ir.LiteralStructType([ft] * 4), ins),
                f"mma.sync.aligned.m16n8k8.row.col.{kind} {{$0, $1, $2, $3}}, "
                "{$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};",
                ",".join(cons),
                ops,
                True,
                name="tmma" if tf32 else "dmma",
            )
            out = [builder.extract_value(res, i) for i in range(4)]
            return context.make_tuple(builder, signature.return_type, out)

        return sig, codegen

    return mma


def cp_async(size: int):
    """``cp_async(S, i, A, j)``: ``S[i .. i + n) = A[j .. j + n)`` (float32, ``n = size // 4``;
    ``S`` in shared, ``A`` in global memory, both addresses ``size``-byte aligned) as an
    asynchronous copy (``cp.async.ca.shared.global``, ``size`` bytes): no register holds the
    values, and the issuing thread goes on until :func:`cp_wait`."""

    @intrinsic
    def cp_async(typingctx, S, i, A, j):
        def codegen(context, builder, signature, args):
            _, dst = _item_pointer(context, builder, signature, args)
            _, src = _item_pointer(context, builder, signature, args, 2)
            i64 = ir.IntType(64)
            builder.asm(
                ir.FunctionType(ir.VoidType(), [i64, i64]),
                "{ .reg .u64 s, g; cvta.to.shared.u64 s, $0; cvta.to.global.u64 g, $1; "
                f"cp.async.ca.shared.global [s], [g], {size}; }}",
                "l,l",
                [builder.ptrtoint(dst, i64), builder.ptrtoint(src, i64)],
                True,
            )
            return context.get_dummy_value()

        return types.void(S, i, A, j), codegen

    return cp_async


def _bare(text: str):
    """An intrinsic of no arguments that emits the PTX ``text`` (a memory clobber: the
    compiler moves no memory access across it)."""

    @intrinsic
    def bare(typingctx):
        def codegen(context, builder, signature, args):
            builder.asm(ir.FunctionType(ir.VoidType(), []), text, "~{memory}", [], True)
            return context.get_dummy_value()

        return types.void(), codegen

    return bare


def cp_wait():
    """``cp_wait()``: commit this thread's :func:`cp_async` copies and wait until they are all
    done (``cp.async.commit_group; cp.async.wait_all``); other lanes' copies are seen after a
    warp barrier."""
    return _bare("cp.async.commit_group; cp.async.wait_all;")


def cp_commit():
    """``cp_commit()``: close this thread's group of :func:`cp_async` copies
    (``cp.async.commit_group``), for :func:`cp_wait_group` to wait on."""
    return _bare("cp.async.commit_group;")


def cp_wait_group(n: int):
    """``cp_wait_group()``: wait until at most ``n`` of this thread's committed groups of
    copies are pending (``cp.async.wait_group n``): the older ones have landed.  A block
    barrier does not wait for copies in flight, as it waits for loads into registers."""
    return _bare(f"cp.async.wait_group {int(n)};")


def red2():
    """``red2(A, j, v0, v1)``: ``A[j] += v0; A[j + 1] += v1`` (float32, global memory, ``j``
    even: an 8-byte aligned pair) as one vector reduction, ``red.global.add.v2.f32`` (sm_90,
    PTX 8.1): half the instructions of two ``cuda.atomic.add``, whose results are not read."""

    @intrinsic
    def red2(typingctx, A, j, v0, v1):
        def codegen(context, builder, signature, args):
            _, ptr = _item_pointer(context, builder, signature, args)
            i64, f32 = ir.IntType(64), ir.FloatType()
            builder.asm(
                ir.FunctionType(ir.VoidType(), [i64, f32, f32]),
                "{ .reg .u64 g; cvta.to.global.u64 g, $0; red.global.add.v2.f32 [g], {$1, $2}; }",
                "l,f,f",
                [builder.ptrtoint(ptr, i64), args[2], args[3]],
                True,
            )
            return context.get_dummy_value()

        return types.void(A, j, v0, v1), codegen

    return red2


def dmma():
    """``(d0, d1, d2, d3) = mma.sync.m16n8k8.row.col.f64(a0..a3, b0, b1, c0..c3)`` for one
    lane (inline PTX; ``DMMA.16x8x8`` on sm_90, where the Ampere shape m8n8k4 does a quarter
    of the work per instruction).

    With ``g = lane // 4``, ``t = lane % 4``: the lane holds ``A[g, t], A[g + 8, t],
    A[g, t + 4], A[g + 8, t + 4]`` of A (16 x 8, row-major), ``B[t, g], B[t + 4, g]`` of B
    (8 x 8) and ``C[g, 2 t], C[g, 2 t + 1], C[g + 8, 2 t], C[g + 8, 2 t + 1]`` of C; the
    result has C's layout (PTX ISA, "Matrix Fragments for mma.m16n8k8", .f64).
    Warp-collective: every lane of the warp must reach it together (marked as having side
    effects, so that LLVM neither moves it into a branch nor merges it)."""
    return mma(tf32=False)


def st2_if():
    """``st2_if(arr, idx, a, b, pred)``: ``arr[idx], arr[idx + 1] = a, b`` (a float32 or
    float64 array) where ``pred``, as one predicated vector store (``st.v2``); ``idx`` must
    be even and the array's data 8- (float32) or 16-byte (float64) aligned."""

    @intrinsic
    def st2_if(typingctx, arr, idx, a, b, pred):
        wide = arr.dtype == types.float64
        vt = types.float64 if wide else types.float32

        def codegen(context, builder, signature, args):
            _, ptr = _item_pointer(context, builder, signature, args)
            i32 = ir.IntType(32)
            ft = ir.DoubleType() if wide else ir.FloatType()
            fty = ir.FunctionType(ir.VoidType(), [ptr.type, ft, ft, i32])
            kind, reg = ("f64", "d") if wide else ("f32", "f")
            builder.asm(
                fty,
                "{ .reg .pred p; setp.ne.b32 p, $3, 0; @p st.v2." + kind + " [$0], {$1, $2}; }",
                f"l,{reg},{reg},r",
                [ptr, args[2], args[3], builder.zext(args[4], i32)],
                True,
            )
            return context.get_dummy_value()

        return types.none(arr, idx, vt, vt, types.boolean), codegen

    return st2_if
