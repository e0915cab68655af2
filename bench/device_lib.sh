# Sourced by the run_*_device.sh scripts on the GPU box (bench/bundle.sh puts
# it in every bundle beside them): the bundle folder D, its libraries on the
# loader path, the log folder OUT, and the shared helpers.
D=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)
export LD_LIBRARY_PATH=$D/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"

# One line: GPU name, driver, clocks, power, temperature.
smi() {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu \
    --format=csv,noheader
}

# sass_summary BINARY FILE: per kernel, its HGMMA count and local-memory
# (LDL/STL) instructions, from cuobjdump.
sass_summary() {
  cuobjdump --dump-sass "$1" 2>&1 | awk '
    /Function :/ { if (name) printf "%-100s HGMMA=%d LDL/STL=%d\n", name, h, l; name=$3; h=0; l=0 }
    /HGMMA/ { h++ } /[^A-Z](LDL|STL)[^A-Z]/ { l++ }
    END { if (name) printf "%-100s HGMMA=%d LDL/STL=%d\n", name, h, l }' >"$2"
}
