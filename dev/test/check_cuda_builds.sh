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
# two builds at a time (nvcc compiles one file on one core); each logs to its own file
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
# make test checks CUDA_BUILD_CHECKS (the Makefile says which it leaves out and why);
# CUDA_BUILDS=all: every one of CUDA_PROGRAMS (make test-long)
list=CUDA_BUILD_CHECKS
[ "${CUDA_BUILDS:-}" = all ] && list=CUDA_PROGRAMS
programs=$(make -s -p -n 2> /dev/null | sed -n "s/^$list :\{0,1\}= //p" | head -1)
printf '%s\n' $programs | xargs -P 2 -I{} sh -c 'make -s -B "$1" > "$2/$(echo "$1" | tr / %).log" 2>&1 && touch "$2/$(echo "$1" | tr / %).ok"' sh {} "$logs"
for prog in $programs; do
    key=$(echo "$prog" | tr / %)
    if [ -f "$logs/$key.ok" ]; then
        echo "OK      $prog builds for GPU_ARCH=\"${GPU_ARCH:-90 120}\" with warnings as errors (register spills included)"
        passed=$((passed + 1))
    else
        echo "NOT OK  $prog:"; grep -v "^[✓✗·]" "$logs/$key.log" | head -20
        failed=$((failed + 1))
    fi
done
echo "$passed passed, $failed failed"
[ $failed = 0 ]
