#!/usr/bin/env bash
# One GPU call: the GPU tests, compute-sanitizer (memcheck, racecheck, synccheck) on small
# cases, probes, then benchmark sweeps.
# Usage: bash experiments/gpu_run.sh OUTDIR [SWEEP ...]   (default sweeps: targets paper-grid gamma;
# the padded-batch and memory-mode sweeps: lengths memory)
# Writes OUTDIR/<sweep>.csv and OUTDIR/gpu-run.tar.gz, which holds those and tests.log,
# sanitizer.log, probe.txt (experiments.probes.first_call: a process's first steps and the
# kernel cache; experiments.probes.memory: a step's peak memory, forward and backward;
# experiments.probes.tc_rule: the gradients from E by Triton against cuBLAS at N = 128-512),
# kernels.txt (experiments.probes.kernels N for N = 512, 1024, 2048: GPU time per kernel in a
# step) and sweeps.log (the device tool returns at most 8 files); prints the summaries.
# Each step has a time limit (seconds: BENCH_T_TESTS, BENCH_T_SANITIZER per tool, BENCH_T_PROBE
# per probe, BENCH_T_SWEEPS in all); a step cut short says so in its log.  BENCH_SKIP_TESTS=1
# runs only the sweeps; BENCH_SKIP_CHECKS=1 skips the sanitizer and the probes (tests, then
# sweeps); BENCH_SKIP_SYNCCHECK=1 leaves out synccheck alone (one process per sanitize_case
# case, about 10 s each on the H200; racecheck runs one process per case too); extra run.py
# flags go in BENCH_RUN_FLAGS (e.g. "--impl sdtw-fused --impl sdtw-unfused", adding
# "--impl sdtw-fused-graph --impl sdtw-unfused-graph" for the CUDA-graph rows of targets and
# paper-grid: without it the sweeps also time every baseline, far more than one call).  On the
# H200 the tests take about 5.5 minutes (the kernel-cache round trip compiles a small step's
# kernels in fresh processes), and the sanitizer and probes, whose kernels then load from the
# on-disk cache, a few more: with a 10-minute limit per device call, run the sweeps in a
# second call: BENCH_SKIP_SWEEPS=1 in the first, BENCH_SKIP_TESTS=1 (or BENCH_SKIP_CHECKS=1,
# with the tests again) in the second; our implementations' rows of a few sweeps fit in one
# call (the forward rows of four sweeps and the barycenter rows took 163 s).
# On a copy of the tree, set BENCH_GIT_SHA (and BENCH_GIT_DIRTY) to the code's commit: the copy's
# own .git may lag it (see experiments.provenance).
set -uo pipefail
out=${1:?usage: gpu_run.sh OUTDIR [SWEEP ...]}
shift
sweeps=("$@")
[ ${#sweeps[@]} -eq 0 ] && sweeps=(targets paper-grid gamma)
mkdir -p "$out"
stage=$(mktemp -d)  # everything is written here, then packed into OUTDIR
real_out=$out
out=$stage
export PYTHONPATH=. PYTHONUNBUFFERED=1
status=0
limited() {  # limited SECONDS LOG CMD...: run CMD, appending to LOG; note a timeout there
    local secs=$1 log=$2
    shift 2
    timeout "$secs" "$@" >> "$log" 2>&1
    local rc=$?
    [ "$rc" -eq 124 ] && echo "gpu_run.sh: cut after ${secs} s: $*" | tee -a "$log"
    return "$rc"
}
if [ -z "${BENCH_GIT_SHA:-}" ]; then
    echo "gpu_run.sh: warning: BENCH_GIT_SHA is not set, so the CSVs record the SHA of this" \
        "tree's .git, which in a copy sent to another machine may be stale" >&2
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
if [ "${BENCH_SKIP_TESTS:-0}" != 1 ]; then
    limited "${BENCH_T_TESTS:-420}" "$out/tests.log" \
        python3 -m pytest -q -m cuda -p no:cacheprovider tests
    status=$?
    tail -3 "$out/tests.log"
fi
if [ "${BENCH_SKIP_TESTS:-0}" != 1 ] && [ "${BENCH_SKIP_CHECKS:-0}" != 1 ]; then
    : > "$out/sanitizer.log"
    limited "${BENCH_T_SANITIZER:-180}" "$out/sanitizer.log" compute-sanitizer --tool memcheck \
        --report-api-errors no python3 -m experiments.sanitize_case
    ncases=$(python3 -m experiments.sanitize_case --list | wc -l)
    # racecheck takes about 10 s per case on the H200: one process per case, so that a time
    # limit cuts one case, not the rest; synccheck ends the process at the first kernel it
    # flags: one process per case as well
    for k in $(seq 0 $((ncases - 1))); do
        echo "== racecheck sanitize_case --case $k" >> "$out/sanitizer.log"
        limited "${BENCH_T_SANITIZER:-180}" "$out/sanitizer.log" compute-sanitizer \
            --tool racecheck python3 -m experiments.sanitize_case --case "$k"
    done
    if [ "${BENCH_SKIP_SYNCCHECK:-0}" != 1 ]; then
        for k in $(seq 0 $((ncases - 1))); do
            echo "== synccheck sanitize_case --case $k" >> "$out/sanitizer.log"
            limited "${BENCH_T_SANITIZER:-180}" "$out/sanitizer.log" compute-sanitizer \
                --tool synccheck --print-limit 4 python3 -m experiments.sanitize_case --case "$k"
        done
    fi
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|hazard|Barrier error|cut after" \
        "$out/sanitizer.log" | sort | uniq -c
    for probe in first_call memory tc_rule; do
        echo "== experiments.probes.$probe" >> "$out/probe.txt"
        limited "${BENCH_T_PROBE:-120}" "$out/probe.txt" python3 -m "experiments.probes.$probe"
    done
    for n in 512 1024 2048; do
        limited "${BENCH_T_PROBE:-120}" "$out/kernels-raw.txt" \
            python3 -m experiments.probes.kernels "$n"
    done
    grep -E "^B=|cut after" "$out/kernels-raw.txt" > "$out/kernels.txt"
    rm -f "$out/kernels-raw.txt"
    grep -E "^B=|cut after" "$out/probe.txt" "$out/kernels.txt" |
        grep -E "all kernels|first|peak|Triton|cut"
fi
if [ "${BENCH_SKIP_SWEEPS:-0}" != 1 ]; then
    args=()
    for s in "${sweeps[@]}"; do args+=(--sweep "$s"); done
    # shellcheck disable=SC2086
    python3 -m experiments.run "${args[@]}" --out "$out" --time-limit-s "${BENCH_T_SWEEPS:-240}" \
        ${BENCH_RUN_FLAGS:-} 2>&1 | grep -v Warning | tee "$out/sweeps.log" | tail -40
fi
cp "$stage"/*.csv "$real_out"/ 2>/dev/null
tar -czf "$real_out/gpu-run.tar.gz" -C "$stage" .
exit "$status"
