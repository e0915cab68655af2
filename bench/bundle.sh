#!/usr/bin/env bash
# Builds Bazel targets here and bundles the binaries, with their shared
# libraries (../shared/tools/bundle-libs), a run script, bench/device_lib.sh
# (which the run scripts source) and a COMMIT file, into the main
# checkout's git-ignored .gpu/ for the device tool to carry:
# the folder .gpu/NAME (carry [".gpu/NAME"]) or, with --tar, the tarball
# .gpu/NAME.tar.xz that unpacks to NAME/ (carry [".gpu/NAME.tar.xz"]).
# A tarball's COMMIT also lists the tree's uncommitted changes ("dirty: "
# lines) for the run scripts that copy it into their report; a folder's
# holds the commit alone (run_overload.sh prints it on one line).
# The bench/bundle_*.sh and tests/bundle_overload.sh scripts call this.
# usage: bench/bundle.sh [--tar] MAIN NAME RUN_SCRIPT //package:target...
set -euo pipefail
as_tar=false
if [[ ${1:-} == --tar ]]; then
  as_tar=true
  shift
fi
main=$1 name=$2 run=$3
shift 3
cd "$(dirname "$0")/.."
build_log=$(mktemp)
bazel build "$@" 2>&1 | tee "$build_log"
# NOTES: ptxas reports these only when a .cu file recompiles, as info lines
# easy to miss in Bazel's output; either costs far more on the GPU than any
# change is likely to gain (KERNEL_NOTES v8: a wgmma under a branch, C7520,
# made every kernel 20-30% slower; v18: C7515, accumulators written outside
# wgmma in a pipeline stage, 3-10%). Any C75xx counts.
if grep -E "C75[0-9][0-9]|spilled to local memory" "$build_log"; then
  echo "bundle: WARNING: ptxas serialized wgmma (C75xx) or spilled registers (above)" >&2
fi
rm -f "$build_log"
bins=()
for target in "$@"; do
  target=${target#//}
  bins+=("bazel-bin/${target/://}")
done
if $as_tar; then
  tmp=$(mktemp -d)
  out=$tmp/$name
else
  out=$main/.gpu/$name
  rm -rf "$out"
fi
../shared/tools/bundle-libs "$out" "${bins[@]}"
cp "$run" bench/device_lib.sh "$out/"
git rev-parse HEAD >"$out/COMMIT"
if $as_tar; then
  git status --short --untracked-files=no | sed 's/^/dirty: /' >>"$out/COMMIT"
  mkdir -p "$main/.gpu"
  tar -C "$tmp" -cJf "$main/.gpu/$name.tar.xz" "$name"
  rm -rf "$tmp"
  ls -l "$main/.gpu/$name.tar.xz"
fi
