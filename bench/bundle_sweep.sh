#!/usr/bin/env bash
# Builds schedule_sweep here and bundles it with run_sweep_device.sh into
# MAIN/.gpu/sweep.tar.xz (git-ignored) for the device tool
# (carry [".gpu/sweep.tar.xz"]).
# usage: bench/bundle_sweep.sh [MAIN]
exec "$(dirname "$0")/bundle.sh" --tar "${1:-/work/main}" sweep bench/run_sweep_device.sh \
  //bench:schedule_sweep
