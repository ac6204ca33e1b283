#!/usr/bin/env bash
# Installs every Debian package the build, tests and benchmark need.
# Idempotent: when everything is present it only runs dpkg-query (well under
# a second). Must run as root (or with sudo available) on Debian 12.
#
#   tools/setup.sh          everything: build, tests, Docker integration suite
#   tools/setup.sh --build  only what building gpustreamd and gpustreamctl
#                           needs (the Docker image's builder stage)
set -euo pipefail

build_packages=(
  bazel-bootstrap bazel-rules-java default-jdk-headless
  g++ libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  grpc-proto libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev
  libc-ares-dev libre2-dev libssl-dev zlib1g-dev
  libspdlog-dev libfmt-dev prometheus-cpp-dev
  # AMD code objects' kernel metadata (the HIP backend) is msgpack.
  libmsgpack-cxx-dev
  python3-grpcio python3-protobuf python3-setuptools python3-wheel
)
test_packages=(
  python3-numpy python3-pytest python3-venv python3-prometheus-client
  python3-yaml clang-format openssl
  # HIP's headers: the HIP backend's own prototypes are checked against
  # them (it builds without them). AMD sample kernels build with clang-14.
  libamdhip64-dev
  # The fuzz targets (tests/fuzz, tools/fuzz.sh): libFuzzer needs clang.
  clang-14 libclang-rt-14-dev libfuzzer-14-dev
  # The compose suite (tools/compose-test.sh) runs a real Docker engine.
  docker.io docker-compose debootstrap
  # tools/bench.sh --plots draws the benchmarks' figures; it counts
  # instructions per launch under valgrind's callgrind (this machine's
  # hypervisor gives perf no hardware counters).
  python3-matplotlib valgrind
)

packages=("${build_packages[@]}")
case "${1:-}" in
  --build) ;;
  "") packages+=("${test_packages[@]}") ;;
  *) echo "usage: tools/setup.sh [--build]" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ "$status" == installed ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "setup: installing ${missing[*]}" >&2
sudo_cmd=()
if [[ $(id -u) != 0 ]]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
