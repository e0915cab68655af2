#!/usr/bin/env bash
# Round 18 call 1: the mend on the GPU (server + kernel tests) and the group_m A/B.
set -u
cd "$(dirname "$0")/.."
for t in base18 groupm; do tar -C /tmp -xJf .gpu/$t.tar.xz; done
mv /tmp/base18 /tmp/base
export OUT=${OUT:-/tmp/out}
L=/tmp/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv,noheader
echo "== gpu_server_test (base18 = HEAD)"
(cd /tmp/base && LD_LIBRARY_PATH=lib:/usr/local/cuda/lib64 timeout 150 ./gpu_server_test >$L/gpu_server_test.log 2>&1; echo rc=$?)
grep -E "^\[  (PASSED|FAILED|SKIPPED)|^\[  FAILED|Failure" $L/gpu_server_test.log | head
echo "== A/B"
OUT=$L PROBE_RUNS=2 BENCH_RUNS=1 timeout 420 bash /tmp/groupm/run_env_ab_device.sh GEMM_EXP_GROUP_M "16 32" "4096^3" "8192^3" "4224^3" "3072^3" "grouped 32"
echo "== ncu dram"
export PATH=$PATH:/usr/local/cuda/bin
for v in 8 16 32; do
  for c in "variants 4096^3" "variants 4224^3"; do
    echo "-- group_m $v $c"
    GEMM_EXP_GROUP_M=$v LD_LIBRARY_PATH=/tmp/groupm/lib:/usr/local/cuda/lib64 timeout 60 ncu --clock-control none -k regex:Sm90GemmKernel -c 1 \
      --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum,lts__t_bytes.sum \
      /tmp/groupm/power_probe once "$c" >"$L/ncu_${v}_${c// /_}.txt" 2>&1
    grep -E "Sm90GemmKernel<|dram__bytes|gpu__time|lts__t_bytes" "$L/ncu_${v}_${c// /_}.txt" | head -6
  done
done
tar -C $L -czf $OUT/all.tgz .
