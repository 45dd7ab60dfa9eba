#!/usr/bin/env bash
# One device call for the GPU evidence (docs/verifier.md, docs/benchmark.md, docs/results-h200.md):
#   PYTHONPATH=. bash ci/evidence/h200_session.sh   (writes under $OUT)
# The CUDA-hack tests run beside the search sweep: both take the exclusive timing lock,
# so no two measurements share the GPU. A/A repeats run last, alone.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm --format=csv > $OUT/gpu.txt
(timeout 400 python3 -m pytest tests/test_gpu.py -q -p no:cacheprovider -k "hacks or roofline" \
    > $OUT/gpu_tests.log 2>&1; echo "pytest rc=$?" >> $OUT/gpu_tests.log) &
timeout 470 python3 -m bot optimize problems/*.py --strategy search --device cuda --jobs 5 \
    --time-cap-s 2 --exclude 'compile-max-autotune*' --out /tmp/search > $OUT/search.txt 2> /tmp/search.err
echo "search rc=$? after $(( $(date +%s) - start )) s" >> $OUT/search.txt
cp /tmp/search/results.json $OUT/search_results.json 2>/dev/null
grep -v -E "trial|reference [0-9]" /tmp/search.err | tail -300 > $OUT/search_progress.log
wait
left=$(( 585 - ($(date +%s) - start) ))
if [ $left -gt 40 ]; then
  timeout $left python3 ci/evidence/verifier_benchmark.py --out $OUT --aa-repeats 3 --cap-s 2 \
      --problems rmsnorm,softmax,matmul_bias_gelu 2>&1 | grep -v '^\.\.\.' > $OUT/aa.log
fi
tail -5 $OUT/gpu_tests.log; tail -3 $OUT/search.txt; cat $OUT/aa.log 2>/dev/null
