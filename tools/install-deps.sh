#!/usr/bin/env bash
# Installs the Debian 12 packages the build needs, skipping what is present.
# The CUDA toolkit (13.0 at /usr/local/cuda) is expected to be there already.
set -euo pipefail

packages=(
  bazel-bootstrap
  g++ pkg-config
  protobuf-compiler protobuf-compiler-grpc libprotobuf-dev
  libgrpc++-dev libabsl-dev
  prometheus-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev
  libspdlog-dev libfmt-dev
  prometheus yamllint
  clang-14 libclang-rt-14-dev
  python3 python3-grpcio python3-protobuf python3-numpy
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "warning: /usr/local/cuda/bin/nvcc not found; the CUDA kernels will not build" >&2
fi
