#!/usr/bin/env bash
# The in-sweep gradients (the default for float32 D <= 16, forced by SDTW_SWEEP_GRADS=1; see
# "Gradients in the backward's sweep" in PERFORMANCE.md) on the GPU, in one device call.
# Usage: bash experiments/sweep_grads.sh check|sanitize|ncu   (OUT: where logs go; default a
# temp dir)
#   check: their GPU tests (pytest -m cuda -k sweep), each band's pace with them forced
#          (SDTW_TIMING=1 probe --lag --dim D, D = 64 and 1), and probe --sweepab at N = 512
#          (D = 1, 8, 16, 32, 64: every variant of the gradient warp) and 2048 (D = 1, 16, 64)
#          (whole-step replays, kernel times and errors, in the sweep against from E).
#   sanitize: compute-sanitizer memcheck, racecheck and synccheck on the in-sweep cases of
#          experiments.sanitize_case (18-22: each variant of the gradient warp), a process
#          per case and tool.
#   ncu:   Nsight Compute (--clock-control none) on the third backward of probe --ncu 512
#          --dim D (D = 1 and 64) with the gradients in the sweep: OUT/sweep1-n512-dD-sass.csv,
#          the source page (SASS, warp-stall samples per instruction), and the main stall
#          counts printed; about 40 s (run 130).
set -u
mode=${1:?usage: sweep_grads.sh check|sanitize|ncu}
OUT=${OUT:-$(mktemp -d)}
export PYTHONPATH=. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
date -u
drop='warn\(errors|_warn_once|Profiler clears events'
case $mode in
check)
    timeout 200 python3 -m pytest -q -m cuda tests/test_cuda.py -k sweep > "$OUT/tests-sweep.log" 2>&1
    echo "tests rc=$?"
    tail -1 "$OUT/tests-sweep.log"
    for d in 64 1; do
        echo "== lag D=$d"
        SDTW_TIMING=1 SDTW_SWEEP_GRADS=1 timeout 100 python3 -m experiments.probe --lag --dim $d 2>&1 \
            | grep -E "B=32 N=512 .*backward|B=32 N=1024 fused=True backward|rror"
    done
    echo "== sweepab 512"
    timeout 240 python3 -m experiments.probe --sweepab 512 --dims 1,8,16,32,64 2>&1 | grep -v -E "$drop"
    echo "== sweepab 2048"
    timeout 200 python3 -m experiments.probe --sweepab 2048 --dims 1,16,64 2>&1 | grep -v -E "$drop"
    ;;
sanitize)
    listed=$(python3 -m experiments.sanitize_case --list | grep "in the sweep")
    for k in $(cut -d: -f1 <<< "$listed"); do
        for tool in "memcheck --report-api-errors no" racecheck "synccheck --print-limit 4"; do
            echo "== $tool, case $(grep "^$k:" <<< "$listed")"
            # shellcheck disable=SC2086
            timeout 120 compute-sanitizer --tool $tool python3 -m experiments.sanitize_case \
                --case "$k" 2>&1 | grep -E "SUMMARY|Invalid|hazard|Barrier|rror|case ok"
        done
    done
    ;;
ncu)
    sections="--section SpeedOfLight --section WarpStateStats --section SchedulerStats
        --section Occupancy --section LaunchStats --section SourceCounters --section InstructionStats"
    for d in 1 64; do
        tag=sweep1-n512-d$d
        rep=$(mktemp -u)
        # shellcheck disable=SC2086
        SDTW_SWEEP_GRADS=1 timeout 200 ncu --clock-control none -k regex:backward --launch-skip 2 \
            --launch-count 1 $sections -o "$rep" python3 -m experiments.probe --ncu 512 --dim $d \
            > "$OUT/$tag.log" 2>&1
        echo "$tag rc=$?"
        ncu -i "$rep.ncu-rep" --page source --csv --print-source sass > "$OUT/$tag-sass.csv" 2>&1
        ncu -i "$rep.ncu-rep" --print-details all 2>&1 \
            | grep -E "Duration|Registers Per|Warp Cycles Per Issued|Stall (Barrier|Long|Wait|Short|No Inst)" \
            | sort -u
    done
    ;;
*)
    echo "unknown mode: $mode (check, sanitize or ncu)" >&2
    exit 2
    ;;
esac
