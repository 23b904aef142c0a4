"""The CPU kernels' parallel and serial twins stay apart in Numba's on-disk cache."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from numba.core.caching import NullCache
from numba.core.registry import CPUDispatcher

REPO = Path(__file__).resolve().parents[1]
MODULES = ["sdtw.cpu", "sdtw.cpu_dtw", "sdtw.cpu_fused", "sdtw.cpu_lanes", "sdtw.cpu_msm"]
MODULES += ["sdtw.cpu_pairs", "sdtw.cpu_msm_lanes", "sdtw._simd"]


def _dispatchers():
    for name in MODULES:
        for attr, obj in vars(importlib.import_module(name)).items():
            if isinstance(obj, CPUDispatcher):
                yield name, attr, obj


def test_every_cached_dispatcher_has_its_own_cache_entry():
    """Numba files a cache entry under (module, qualified name, first line), not the flags:
    two cached dispatchers with the same three would answer with each other's code."""
    seen, ids = {}, set()
    for name, attr, d in _dispatchers():
        if isinstance(d._cache, NullCache) or id(d) in ids:  # (imported into several modules)
            continue
        ids.add(id(d))
        f = d.py_func
        key = (f.__module__, f.__qualname__, f.__code__.co_firstlineno)
        assert key not in seen, f"{name}.{attr} shares a cache entry with {seen[key]}"
        seen[key] = f"{name}.{attr}"
    assert len(seen) > 20


def test_parallel_and_serial_twins_have_the_flags_their_names_say():
    pairs = 0
    for name, attr, d in _dispatchers():
        if attr.endswith("_parallel") or attr == "_parallel":
            assert d.targetoptions.get("parallel"), f"{name}.{attr}"
            pairs += 1
        elif "_serial" in attr:
            assert not d.targetoptions.get("parallel"), f"{name}.{attr}"
    assert pairs >= 12


_KERNEL = """
import numpy as np
from numba import prange
from sdtw._jit import parallel_and_serial

def add_one(a):
    for i in prange(a.shape[0]):
        a[i] += 1.0

par, ser = parallel_and_serial(add_one)
"""

_CALL = """
import sys, numpy as np, kern
from numba.np.ufunc import parallel
a = np.zeros(64)
getattr(kern, sys.argv[1])(a)
assert (a == 1.0).all()
print(int(parallel._is_initialized))
"""


def test_a_cached_parallel_compile_is_not_loaded_as_the_serial_kernel(tmp_path):
    """In a fresh cache: compile the parallel twin, then, in new processes, the serial twin runs
    serial code (Numba's thread pool never starts) and the parallel one parallel code."""
    (tmp_path / "kern.py").write_text(textwrap.dedent(_KERNEL))
    (tmp_path / "call.py").write_text(textwrap.dedent(_CALL))
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO)])

    def threads_started(which):
        res = subprocess.run(
            [sys.executable, str(tmp_path / "call.py"), which],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert res.returncode == 0, res.stderr[-2000:]
        return res.stdout.strip()

    assert threads_started("par") == "1"
    assert threads_started("ser") == "0"
    assert threads_started("par") == "1"


def test_warmup_runs_the_paths_it_names_and_rejects_others(capsys):
    from sdtw import warmup

    took = warmup.warmup(["all pairs"], verbose=True)
    assert list(took) == ["all pairs"] and took["all pairs"] >= 0
    assert "all pairs:" in capsys.readouterr().out
    with pytest.raises(ValueError, match=r"names of sdtw.warmup.PATHS .* got \['nope'\]"):
        warmup.warmup(["nope"])
    with pytest.raises(SystemExit):
        warmup.main(["--jobs", "0"])


def test_interleaved_sets_the_option_for_its_own_compiles_only(monkeypatch):
    """A compile of an interleaved dispatcher runs with -force-vector-interleave set, first
    call or a caller's compile, nested ones with their own count, and the option is back at the
    enclosing count or the cost model's 0 afterwards, a failed compile included."""
    import numpy as np
    from numba import njit
    from numba.core.errors import TypingError

    from sdtw import _jit

    if not _jit._CAN_RESET:
        pytest.skip("LLVM older than 15: interleaved is a no-op")
    calls = []
    real = _jit.llvm.set_option
    monkeypatch.setattr(_jit.llvm, "set_option", lambda *a: (calls.append(a[1]), real(*a)))
    flag = "-force-vector-interleave="

    def scaling(k):
        """A fresh jitted loop that multiplies an array by ``k`` in place."""

        @njit
        def scale(a):
            for i in range(a.shape[0]):
                a[i] *= k

        return scale

    d = _jit.interleaved(scaling(2.0), 2)
    assert d._interleave == 2
    a = np.arange(40.0)
    d(a)
    assert calls == [flag + "2", flag + "0"]
    np.testing.assert_array_equal(a, 2 * np.arange(40.0))
    calls.clear()
    d(np.arange(3.0))  # (compiled already: no option touched)
    assert calls == []
    with pytest.raises(TypingError):
        d("not an array")  # (a typing error inside the compile)
    assert calls == [flag + "2", flag + "0"]

    t = _jit.interleaved(scaling(3.0), 2)

    @njit
    def outer(a):
        t(a)
        for i in range(a.shape[0]):
            a[i] += 1.0

    calls.clear()
    outer(a)  # (the caller compiles first; t compiles inside its compile, asked twice)
    assert calls and calls == [flag + "2", flag + "0"] * (len(calls) // 2)
    np.testing.assert_array_equal(a, 6 * np.arange(40.0) + 1)

    q = _jit.interleaved(scaling(4.0), 3)

    @njit
    def wrapper(a):
        q(a)

    w = _jit.interleaved(wrapper, 4)
    calls.clear()
    w(a)
    inner = [flag + "3", flag + "4"]
    assert calls[0] == flag + "4" and calls[-1] == flag + "0" and len(calls) >= 4
    assert calls[1:-1] == inner * ((len(calls) - 2) // 2)
    with pytest.raises(ValueError, match="count"):
        _jit.interleaved(scaling(2.0), 0)


def test_the_soft_msm_row_kernels_are_interleaved():
    """Which CPU kernels compile interleaved (sdtw._jit.interleaved): the four row kernels,
    not the pushes pass (slower so)."""
    from sdtw import _jit, cpu_msm_lanes

    if not _jit._CAN_RESET:
        pytest.skip("LLVM older than 15: interleaved is a no-op")
    for name in ["msm_row", "msm_row_shared", "msm_row_units", "msm_push_row"]:
        assert getattr(cpu_msm_lanes, name)._interleave == 2, name
    assert not hasattr(cpu_msm_lanes.msm_pushes, "_interleave")
