set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section SourceCounters --section InstructionStats"
for cfg in "1 512 1" "1 512 64"; do
  set -- $cfg
  tag=sweep$1-n$2-d$3
  SDTW_SWEEP_GRADS=$1 timeout 200 ncu --clock-control none -k regex:backward --launch-skip 2 --launch-count 1 $S -o /tmp/$tag python3 -m experiments.probe --ncu $2 --dim $3 > /tmp/$tag.log 2>&1
  echo "$tag rc=$?"
  ncu -i /tmp/$tag.ncu-rep --page source --csv --print-source sass > $OUT/$tag-sass.csv 2>&1
  ncu -i /tmp/$tag.ncu-rep --print-details all 2>&1 | grep -E "Duration|Registers Per|Warp Cycles Per Issued|Stall (Barrier|Long|Wait|Short|MIO|Math|LG)" | head -12
done
