#!/usr/bin/env bash
# Builds overload_test and gemm_cli and bundles them, with their shared
# libraries and run_overload.sh, into the main checkout's git-ignored
# .gpu/overload, for a run on a host with cores to spare (the device tool
# carries it: carry [".gpu/overload"]).
# usage: tests/bundle_overload.sh [/work/main]
exec "$(dirname "$0")/../bench/bundle.sh" "${1:-/work/main}" overload tests/run_overload.sh \
  //tests:overload_test //client:gemm_cli
