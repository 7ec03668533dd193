#!/bin/sh
# gpu_check_adamw.sh: the one GPU check of the fused AdamW kernel. Run it on a
# machine with an NVIDIA GPU and the CUDA toolkit (not in CI, which has no GPU):
#   sh tools/gpu_check_adamw.sh [--quick] [--params N]
#
# Compiles, with nvcc and cc directly (no CMake, and only the files it needs:
# the kernels layer and core/util.c, so work in progress elsewhere cannot
# break it), src/kernels/adamw.cu, the CPU kernels and tools/adamw_gpu_check.c
# into $BUILD (default build-gpu/), for the GPU found or $CUDA_ARCH, then runs:
#   1. validation: 100 steps through the CUDA kernel and the CPU reference from
#      the same start with the same gradients, 5 option sets (NaN/Inf gradients,
#      misaligned arrays, zero weight decay, loss scaling, stochastic rounding,
#      a 1000-tensor list); must agree within 1 BF16 ulp / 1e-5 relative, and
#      by design bit for bit;
#   2. speed (skipped with --quick): one step over 512Mi parameters (8 GiB of
#      state, 14 GiB moved per step, 18 GiB of device memory at the peak;
#      --params N to change), best of 20, against a device-to-device
#      copy of the same bytes; the same step as 4096 tensors; a small call.
# About a minute on an H100/H200.
# Exit: 0 pass, 1 failure, 77 no usable GPU or no nvcc (nothing checked).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$root/build-gpu}
command -v nvcc >/dev/null 2>&1 || PATH=/usr/local/cuda/bin:$PATH
if ! command -v nvcc >/dev/null 2>&1; then
  echo "gpu_check_adamw: nvcc not found (install the CUDA toolkit or put it on PATH)"
  exit 77
fi
arch=${CUDA_ARCH:-}
if [ -z "$arch" ] && command -v nvidia-smi >/dev/null 2>&1; then
  # compute capability of GPU 0: "9.0" -> 90
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')
fi
if [ -n "$arch" ]; then gencode="-gencode arch=compute_$arch,code=sm_$arch"
else gencode="-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]"; fi
cc=${CC:-cc}
mkdir -p "$build"
echo "gpu_check_adamw: building into $build ($gencode)"
cd "$root"
# The flags that make every path agree bit for bit: no FMA contraction,
# IEEE division and square root (cmake/cuda.cmake uses the same).
nvcc -O3 -std=c++17 --fmad=false -prec-div=true -prec-sqrt=true $gencode -Iinclude -Isrc \
  -c src/kernels/adamw.cu -o "$build/adamw_cu.o"
for f in src/kernels/adamw.c src/kernels/adamw_avx2.c src/kernels/adamw_avx512.c src/core/util.c \
         tools/adamw_gpu_check.c; do
  [ -f "$f" ] || continue
  "$cc" -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -ffp-contract=off -fno-math-errno -Iinclude -Isrc \
    -I"$(dirname "$(command -v nvcc)")/../include" -c "$f" -o "$build/$(basename "$f" .c).o"
done
nvcc -o "$build/hbm_adamw_gpu_check" "$build"/*.o -lpthread -lm
"$build/hbm_adamw_gpu_check" "$@"
