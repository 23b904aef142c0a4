#!/usr/bin/env bash
# One GPU call: the GPU tests, compute-sanitizer on a small case, then benchmark sweeps.
# Usage: bash experiments/gpu_run.sh OUTDIR [SWEEP ...]   (default sweeps: paper-grid gamma)
# Writes OUTDIR/tests.log, OUTDIR/sanitizer.log, OUTDIR/probe.txt (experiments.probe),
# OUTDIR/kernels.txt (experiments.probe --kernels: GPU time per kernel in a step) and
# OUTDIR/<sweep>.csv; prints the summaries.
# Set SDTW_SKIP_TESTS=1 to run only the sweeps.  Extra run.py flags go in SDTW_RUN_FLAGS.
set -uo pipefail
out=${1:?usage: gpu_run.sh OUTDIR [SWEEP ...]}
shift
sweeps=("$@")
[ ${#sweeps[@]} -eq 0 ] && sweeps=(paper-grid gamma)
mkdir -p "$out"
export PYTHONPATH=. PYTHONUNBUFFERED=1
status=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
if [ "${SDTW_SKIP_TESTS:-0}" != 1 ]; then
    python3 -m pytest -q -m cuda -p no:cacheprovider tests 2>&1 | tee "$out/tests.log" | tail -5
    status=${PIPESTATUS[0]}
    {
        compute-sanitizer --tool memcheck --report-api-errors no python3 -m experiments.sanitize_case
        compute-sanitizer --tool racecheck python3 -m experiments.sanitize_case
    } > "$out/sanitizer.log" 2>&1
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|hazard" "$out/sanitizer.log" | sort | uniq -c
    python3 -m experiments.probe 2>&1 | grep -v Warning | tee "$out/probe.txt"
    python3 -m experiments.probe --kernels 2>&1 | grep "^B=" | tee "$out/kernels.txt"
fi
args=()
for s in "${sweeps[@]}"; do args+=(--sweep "$s"); done
# shellcheck disable=SC2086
python3 -m experiments.run "${args[@]}" --out "$out" ${SDTW_RUN_FLAGS:-} 2>&1 | grep -v Warning
exit "$status"
