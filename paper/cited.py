"""The numbers the report cites and does not measure: :data:`CITED`, each with its source,
and the authors' published CSV and their code's H200 grid, parsed.

Every other number in the report is read from our CSVs (:mod:`experiments.load`).
"""

# The text is typeset: γ, ×, –, − and ≤ are meant, not look-alikes of ASCII.
# ruff: noqa: RUF001

from __future__ import annotations

import csv
import io

from experiments.load import fmt_sig, num
from paper.markdown import DASH

__all__ = ["CITED", "published", "their_cell", "their_code", "their_mib", "their_ms"]


#: Everything we quote from elsewhere, each with its source.  ``PAPER.md`` is the project's
#: restatement of the paper and of the authors' code (``../shared/reference/PAPER.md``).
CITED: dict[str, dict] = {
    "paper": {
        "source": 'R. Shapira Weber, O. Freifeld, "SoftDTW-CUDA-Torch: Memory-Efficient '
        'GPU-Accelerated Soft Dynamic Time Warping for PyTorch", arXiv, 2026-02-19; code '
        "BGU-CS-VIL/sdtw-cuda-torch (package softdtw_cuda); as restated in PAPER.md",
    },
    "claims": {
        "source": "PAPER.md, sections 'The paper's three contributions' and 'Research questions'",
        "RQ1": "Tiled anti-diagonal execution removes the length cap of 1024 of the block-per-"
        "pair design (Maghoumi): arbitrary lengths on the GPU. Long sequences launch one kernel "
        "per anti-diagonal, N + M - 1 launches forward and again backward.",
        "RQ2": "The log-space backward (log E propagated with logsumexp) is stable at small "
        "gamma: e.g. gamma = 0.01 and 0.001 give no overflow or NaN.",
        "RQ3a": "Fused squared-Euclidean mode (distances recomputed in the kernels, no (B, N, M) "
        "cost tensor) saves 40–98 % of the memory of unfused mode.",
        "RQ3b": "Fused mode pays for it with 10–25× the runtime of unfused mode.",
        "RQ4": "Practical soft-DTW barycenters on the GPU (Adam, lr 0.1, cosine annealing, "
        "gradient clipping, early stopping); Figure 2: barycenter of block waves with random "
        "shifts.",
        # the barycenter recipe (PAPER.md, contributions and softdtw_barycenter's defaults)
        "RQ4_recipe": {
            "lr": 0.1,
            "lr_final": 0.01,  # "cosine annealing to lr/10"
            "max_iter": 100,
            "patience": 10,
            "tol": 1e-5,
        },
        "RQ3a_range_pct": (40.0, 98.0),
        "RQ3b_range_x": (10.0, 25.0),
        "RQ2_gammas": (0.01, 0.001),
    },
    "published_csv": {
        "source": "the authors' published benchmark CSV (../shared/reference/"
        "published_benchmark.csv), verbatim; their GPU; forward + backward of loss.sum(), "
        "gamma = 1, M = N; 'mb' = torch.cuda.max_memory_allocated, 'ms' = mean of 5 steps after "
        "a warm-up (PAPER.md)",
        "csv": """\
B,N,D,maghoumi_mb,ours_unfused_mb,ours_fused_mb,maghoumi_ms,ours_unfused_ms,ours_fused_ms,fused_saving_mb,fused_saving_pct
16,128,1,6.12841796875,24.06396484375,21.0322265625,2.2249471664428713,2.1552703857421873,36.775936889648435,-14.90380859375,-243.19177754760577
16,128,64,275.2509765625,26.03271484375,23.0009765625,3.3558143615722655,2.1559295654296875,35.951788330078124,252.25,91.6436348928712
16,512,1,112.75341796875,128.8779296875,80.75244140625,17.605427551269532,21.142732238769533,139.8458740234375,32.0009765625,28.38138048406584
16,512,64,4136.2509765625,136.7529296875,88.62744140625,33.38752136230469,19.339878845214844,141.80576171875,4047.62353515625,97.85730019990457
16,1024,1,401.25341796875,465.5029296875,273.25244140625,56.170037841796876,71.24581909179688,281.782275390625,128.0009765625,31.90028317029036
16,1024,64,16480.2509765625,481.2529296875,289.00244140625,128.134326171875,71.72091674804688,278.0872802734375,16191.24853515625,98.24637111523813
16,2048,1,,1810.7529296875,1042.25244140625,,489.842431640625,557.3357421875,,
16,2048,64,,1842.2529296875,1073.75244140625,,484.763232421875,592.2208984375,,
32,128,1,28.50341796875,30.5654296875,24.50244140625,2.1092351913452148,1.8978815078735352,35.78617553710937,4.0009765625,14.036830835117772
32,128,64,534.2509765625,34.5029296875,28.43994140625,4.311635208129883,1.9554304122924804,35.996063232421875,505.81103515625,94.6766702067183
32,512,1,209.25341796875,241.5029296875,145.25244140625,15.958572387695312,19.608985900878906,140.472314453125,64.0009765625,30.585391236982296
32,512,64,8256.2509765625,257.2529296875,161.00244140625,51.749273681640624,20.10234832763672,141.357666015625,8095.24853515625,98.04993281014231
32,1024,1,786.25341796875,914.7529296875,530.25244140625,59.09007568359375,73.65460815429688,281.0320556640625,256.0009765625,32.559601104675245
32,1024,64,,946.2529296875,561.75244140625,,75.22037353515626,288.988525390625,,
32,2048,1,,3609.2509765625,2071.2509765625,,489.45419921875,567.053515625,,
32,2048,64,,3672.2509765625,2134.2509765625,,491.692041015625,1838.2080078125,,
""",
    },
    "readme_headline": {
        "source": "the authors' README table, as quoted in PAPER.md ('Published benchmark'), "
        "B = 32, N = 512, D = 64",
        "B": 32,
        "N": 512,
        "D": 64,
        "mb": {"maghoumi": 8256.0, "unfused": 257.0, "fused": 161.0},
        "ms": {"maghoumi": 2791.0, "unfused": 42.0, "fused": 430.0},
    },
    "their_code_h200": {
        "source": "PAPER.md, 'What the reference code does on our H200' (measured 2026-11-29; "
        "torch 2.11 (CUDA 13), numba 0.68 with numba-cuda): forward + backward of loss.sum(), "
        "fp32, gamma = 1, B = 32, M = N; (ms, peak MiB), or the failure",
        "B": 32,
        # (N, D) -> implementation -> (ms, MiB) or a failure word
        "grid": {
            (128, 64): {
                "maghoumi": (2.27, 586.0),
                "maghoumi-bmm": (2.26, 84.0),
                "unfused": (2.37, 86.0),
                "fused": (28.9, 80.0),
            },
            (512, 1): {
                "maghoumi": (3.57, 261.0),
                "maghoumi-bmm": (3.68, 261.0),
                "unfused": (3.19, 293.0),
                "fused": (103.7, 197.0),
            },
            (512, 64): {
                "maghoumi": (14.07, 8308.0),
                "maghoumi-bmm": (3.94, 277.0),
                "unfused": (3.30, 309.0),
                "fused": (111.4, 213.0),
            },
            (1024, 64): {
                "maghoumi": "fails",
                "maghoumi-bmm": "fails",
                "unfused": "fails",
                "fused": (247.5, 614.0),
            },
            (2048, 64): {
                "maghoumi": "n/a",
                "maghoumi-bmm": "n/a",
                "unfused": (464.0, 3724.0),
                "fused": (552.0, 2186.0),
            },
        },
        "failure_1024": "its unfused mode (and Maghoumi's code) fails at N = 1024: the "
        "block-per-pair path it uses for N <= 1024 needs about 65 registers per thread, so at "
        "most 896 threads per block launch (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)",
        "launch_overhead_2048_ms": 330.0,
        # gradient relative error against float64 (B = 4, N = 512, D = 64, randn inputs);
        # PAPER.md does not say which norm
        "grad_error": {0.1: 0.19, 0.01: 1.6, 0.001: 5e6, 1e-4: "non-finite"},
        "grad_error_float64": "below 5e-6 at every gamma",
    },
}


def published() -> dict[tuple[int, int, int], dict[str, float | None]]:
    """The published CSV as (B, N, D) -> column -> float (None where blank)."""
    reader = csv.DictReader(io.StringIO(CITED["published_csv"]["csv"]))
    out = {}
    for row in reader:
        key = (int(row["B"]), int(row["N"]), int(row["D"]))
        out[key] = {k: num(v) for k, v in row.items() if k not in ("B", "N", "D")}
    return out


def their_code(N: int, D: int, which: str) -> tuple[float, float] | str | None:
    """The authors' code on our H200 (PAPER.md) at B = 32: (ms, MiB), a failure word, None."""
    return CITED["their_code_h200"]["grid"].get((N, D), {}).get(which)


def their_ms(N: int, D: int, which: str, B: int) -> float | None:
    entry = their_code(N, D, which) if B == CITED["their_code_h200"]["B"] else None
    return entry[0] if isinstance(entry, tuple) else None


def their_mib(N: int, D: int, which: str, B: int) -> float | None:
    entry = their_code(N, D, which) if B == CITED["their_code_h200"]["B"] else None
    return entry[1] if isinstance(entry, tuple) else None


def their_cell(N: int, D: int, which: str, B: int, index: int) -> str:
    if B != CITED["their_code_h200"]["B"]:
        return DASH
    entry = their_code(N, D, which)
    if entry is None:
        return DASH
    if isinstance(entry, str):
        return entry
    return fmt_sig(entry[index], 3)
