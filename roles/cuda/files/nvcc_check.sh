#!/bin/sh
# Compile a small CUDA kernel to an object file (no GPU needed), the way torch's extension builds call nvcc: with
# -ccbin $CC when CC is set (torch.utils.cpp_extension). Usage: nvcc_check.sh NVCC. Exit status: nvcc's, or 1 when
# no object file came out. Run by roles/cuda/tasks/verify.yml.
set -u
nvcc=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat >"$dir/k.cu" <<'CU'
__global__ void axpy(float a, const float *x, float *y) { y[threadIdx.x] += a * x[threadIdx.x]; }
CU
if [ -n "${CC:-}" ]; then
  "$nvcc" -ccbin "$CC" -c "$dir/k.cu" -o "$dir/k.o" || exit $?
else
  "$nvcc" -c "$dir/k.cu" -o "$dir/k.o" || exit $?
fi
[ -s "$dir/k.o" ] || { echo "nvcc exited 0 but wrote no object file" >&2; exit 1; }
echo "compiled $(wc -c <"$dir/k.o") bytes"
