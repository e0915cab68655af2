#!/usr/bin/env bash
# On the GPU box: bench/power_probe with nvidia-smi sampling beside it
# (device_lib.sh power_probe_sampled), then its per-phase table. Bundle with
#   bench/bundle.sh --tar MAIN power bench/run_power_probe_device.sh //bench:power_probe
# usage: bash power/run_power_probe_device.sh [case-substring...]
set -u
source "$(dirname "$0")/device_lib.sh"
device_begin
power_probe_sampled "$D" probe "$@"
cat "$OUT/probe_probe.log"
device_end
