#!/bin/sh
# Compile a small CUDA kernel to an object file (no GPU needed), the way torch's extension builds call nvcc: with
# -ccbin $CC when CC is set (torch.utils.cpp_extension); and, when CXX is set, a C++ file with it (the ops' C++
# sources). Usage: nvcc_check.sh NVCC. Exit status: nvcc's or $CXX's, or 1 when no object file came out.
# Run by roles/cuda/tasks/verify.yml.
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
if [ -n "${CXX:-}" ]; then
  echo 'int f(int x) { return x + 1; }' >"$dir/f.cpp"
  "$CXX" -c "$dir/f.cpp" -o "$dir/f.o" || { echo "error: CXX=$CXX cannot compile C++" >&2; exit 1; }
fi
echo "compiled $(wc -c <"$dir/k.o") bytes"
