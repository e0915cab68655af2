#!/usr/bin/env bash
# Round 18 call 2: descriptor high words as immediates (hiword) against base18.
set -u
cd "$(dirname "$0")/.."
for t in base18 hiword; do tar -C /tmp -xJf .gpu/$t.tar.xz; done
mv /tmp/base18 /tmp/base
L=/tmp/logs; mkdir -p $L
export PATH=$PATH:/usr/local/cuda/bin
for b in base hiword; do
  cuobjdump -sass /tmp/$b/power_probe > /tmp/sass_$b.txt 2>&1
  awk '/Function :/ { if (name) printf "%s inst=%d HGMMA=%d R2UR=%d UMOV=%d MOV=%d\n", name, n, h, r, u, m; name=$3; n=0; h=0; r=0; u=0; m=0; next }
       /^ +\/\*[0-9a-f]+\*\// { n++ } /HGMMA/ { h++ } /R2UR/ { r++ } /UMOV/ { u++ } / MOV / { m++ }
       END { if (name) printf "%s inst=%d HGMMA=%d R2UR=%d UMOV=%d MOV=%d\n", name, n, h, r, u, m }' /tmp/sass_$b.txt > $L/sass_summary_$b.txt
  # the k-loop of the first bf16 128x256 kernel: 40 lines around its first HGMMA.64x256
  awk '/Function :/ { f=$3 } /HGMMA.64x256x16.F32.BF16/ && !done { print "function " f; done=1; start=NR-40 } { buf[NR]=$0 } END { }' /tmp/sass_$b.txt > $L/kloop_$b.txt
  ln=$(grep -n "HGMMA.64x256x16.F32.BF16" /tmp/sass_$b.txt | head -1 | cut -d: -f1)
  sed -n "$((ln-45)),$((ln+45))p" /tmp/sass_$b.txt >> $L/kloop_$b.txt
  echo "== $b: $(grep -c Sm90Gemm $L/sass_summary_$b.txt) kernels; R2UR total $(awk '{split($4,a,"="); s+=a[2]} END {print s}' $L/sass_summary_$b.txt)"
done
echo "== ncu 4096^3"
for b in base hiword; do
  LD_LIBRARY_PATH=/tmp/$b/lib:/usr/local/cuda/lib64 timeout 60 ncu --clock-control none -k regex:Sm90GemmKernel -c 1 \
    --metrics smsp__inst_executed.sum,gpu__time_duration.sum,dram__bytes_read.sum \
    /tmp/$b/power_probe once "variants 4096^3" > $L/ncu_$b.txt 2>&1
  echo "-- $b"; grep -E "Sm90GemmKernel<|inst_executed|gpu__time|dram__bytes" $L/ncu_$b.txt | head -4
done
echo "== A/B"
cat > /tmp/hiword/ab18.sh <<'EOS'
set -u
source "$(dirname "$0")/device_lib.sh"
B=/tmp/base
device_begin
kernel_gpu_tests || exit 1
for run in 1 2; do
  power_probe_sampled "$B" "base$run" "$@"
  power_probe_sampled "$D" "variant$run" "$@"
done
for dir in "$B" "$D"; do
  v=base; [ "$dir" = "$D" ] && v=variant
  echo "== schedule_bench $v"
  LD_LIBRARY_PATH=$dir/lib:$LD_LIBRARY_PATH timeout 120 "$dir/schedule_bench" "tiles well" "3072" "1920" "grouped" >"$OUT/bench_$v.log" 2>&1
  echo "rc=$?"
  grep -E "^\| (sk|grouped)" "$OUT/bench_$v.log" | cut -d'|' -f2,4,5,6,7,9
done
device_end
EOS
OUT=$L timeout 500 bash /tmp/hiword/ab18.sh "4096^3" "8192^3" "3072^3" "1920x1920x8192" "grouped 32" "grouped 128"
tar -C $L -czf $OUT/all.tgz .
