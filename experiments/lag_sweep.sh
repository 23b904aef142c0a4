export PYTHONPATH=. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader; date -u
timeout 200 python3 -m pytest -q -m cuda tests/test_cuda.py -k "sweep" > $OUT/tests-sweep.log 2>&1; echo "tests rc=$?"; tail -2 $OUT/tests-sweep.log
for d in 64 1; do
echo "== lag D=$d"
SDTW_TIMING=1 SDTW_SWEEP_GRADS=1 timeout 100 python3 -m experiments.probe --lag --dim $d 2>&1 | grep -E "B=32 N=512 .*backward|B=32 N=1024 fused=True backward|rror"
done
echo "== sweepab 512"
timeout 150 python3 -m experiments.probe --sweepab 512 2>&1 | grep -v -i "warn(" | head -40
