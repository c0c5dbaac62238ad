#!/usr/bin/env bash
# Every CUDA program compiles and links, warnings as errors, for every architecture
# in GPU_ARCH (default sm_90 and sm_120). On machines without a GPU this is how CI
# verifies GPU code (see the design notes); without nvcc there is nothing to check.
#     bash dev/test/check_cuda_builds.sh
set -u
cd "$(dirname "$0")/../.." || exit 1
if ! command -v nvcc > /dev/null 2>&1; then
    echo "nvcc not found: CUDA builds not checked (install the CUDA toolkit to check them)"
    echo "0 passed, 0 failed"
    exit 0
fi
passed=0
failed=0
for prog in $(make -s -p -n 2> /dev/null | sed -n 's/^CUDA_PROGRAMS :\{0,1\}= //p' | head -1); do
    if make -s -B "$prog" > /tmp/cuda_build.$$ 2>&1; then
        echo "OK      $prog builds for GPU_ARCH=\"${GPU_ARCH:-90 120}\" with warnings as errors"
        passed=$((passed + 1))
    else
        echo "NOT OK  $prog:"; grep -v "^[✓✗·]" /tmp/cuda_build.$$ | head -20
        failed=$((failed + 1))
    fi
done
rm -f /tmp/cuda_build.$$
echo "$passed passed, $failed failed"
[ $failed = 0 ]
