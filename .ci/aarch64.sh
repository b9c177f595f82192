#!/usr/bin/env bash
# aarch64 CI: cross-build with Debian's gcc-aarch64-linux-gnu into build-aarch64/ and run the
# tests labelled "aarch64" (kernels, models, golden and bit-identity tests) under qemu-aarch64.
# qemu emulates a CPU with the dot product and i8mm, so every NEON level runs (the tests force each).
# Speed means nothing under qemu; correctness does. Extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps-aarch64.sh
BUILD=${BUILD:-build-aarch64}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
[ -f "$BUILD/CMakeCache.txt" ] || cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" >/dev/null
cmake --build "$BUILD" -j "$JOBS"
cd "$BUILD" && ctest --output-on-failure -j "$JOBS" -L aarch64 "$@"
