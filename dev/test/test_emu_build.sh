#!/usr/bin/env bash
# The emulator's build step follows the includes (dev/emu/emu_build.sh, dev/paste_includes.awk):
# a kernel, a __shared__ array and a launch that live in a header of ours, two includes
# deep, are rewritten and checked like the program's own; a header included three times is
# pasted once (it has no include guard: it builds only so); an include of ours inside #if
# is refused (pasted once, it would be on one branch only); what the rewrite cannot
# understand, in a header as in the program, is refused with the file's line. And the
# amalgamation pastes the same way.
#     bash dev/test/test_emu_build.sh        (ends with "N passed, M failed")
set -u
cd "$(dirname "$0")/../.." || exit 1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0
ok() { echo "OK      $1"; passed=$((passed + 1)); }
not_ok() { echo "NOT OK  $1"; failed=$((failed + 1)); }
mkdir -p "$TMP/src/inc/deeper"
# a kernel in a header two includes deep that reads shared memory no thread has written
# (element 31 of a 32-float array, with 31 threads writing 0..30): on a GPU, garbage
# (no include guard: included three times, it builds only if pasted once)
cat > "$TMP/src/inc/deeper/reduce.cuh" << 'H'
__global__ void sum_kernel(float *out, const float *in, int n) {
    __shared__ float part[32];
    if ((int)threadIdx.x < n) { part[threadIdx.x] = in[threadIdx.x]; }
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int i = 0; i < 32; i++) { s += part[i]; }
        out[0] = s;
    }
}
// the launch, in the header too
static inline void sum(float *out, const float *in, int n) { sum_kernel<<<1, 32>>>(out, in, n); }
H
cat > "$TMP/src/inc/helpers.h" << 'H'
#ifndef HELPERS_H
#define HELPERS_H
#include "deeper/reduce.cuh"
#include "deeper/reduce.cuh"
#endif
H
cat > "$TMP/src/prog.cu" << 'H'
#include <cstdio>
#include <cuda_runtime.h>
#include "inc/helpers.h"
#include "inc/deeper/reduce.cuh"
int main() {
    float *in, *out, host[32], result = 0.0f;
    for (int i = 0; i < 32; i++) { host[i] = 1.0f; }
    cudaMalloc(&in, sizeof(host));
    cudaMalloc(&out, sizeof(float));
    cudaMemcpy(in, host, sizeof(host), cudaMemcpyHostToDevice);
    sum(out, in, 31);
    cudaMemcpy(&result, out, sizeof(float), cudaMemcpyDeviceToHost);
    printf("sum %g\n", result);
    return 0;
}
H
if bash dev/emu/emu_build.sh -m race "$TMP/src/prog.cu" "$TMP/prog_race" > "$TMP/build.log" 2>&1; then
    ok "a header's kernel, shared array and launch, two includes deep and included three times, build"
    "$TMP/prog_race" > "$TMP/run.log" 2>&1
    if grep -q "no thread of its block has written" "$TMP/run.log"; then
        ok "the race detector sees the header's __shared__ array: $(grep -m1 -o "reads 4 bytes.*written" "$TMP/run.log" | cut -c 1-90)"
    else
        not_ok "the header's uninitialised shared read went unseen: $(tail -1 "$TMP/run.log")"
    fi
    if grep -q 'reduce.cuh:7' "$TMP/run.log"; then
        ok "the report names the header's own line (reduce.cuh:7)"
    else
        not_ok "the report does not name reduce.cuh:7: $(grep -m1 -i "error\|race" "$TMP/run.log")"
    fi
else
    not_ok "the header program does not build: $(grep -m1 -i error "$TMP/build.log")"
fi
# what the rewrite cannot understand, in a header
cp "$TMP/src/inc/deeper/reduce.cuh" "$TMP/keep.cuh"
sed -i 's|    __shared__ float part\[32\];|    __shared__ float part[32],\n                     spare[32];|' "$TMP/src/inc/deeper/reduce.cuh"
if bash dev/emu/emu_build.sh "$TMP/src/prog.cu" "$TMP/prog_bad" > "$TMP/bad.log" 2>&1; then
    not_ok "a __shared__ declaration over two lines in a header was not refused"
elif grep -q "a __shared__ declaration it cannot rewrite" "$TMP/bad.log"; then
    ok "a __shared__ declaration over two lines in a header is refused"
else
    not_ok "a __shared__ declaration over two lines failed otherwise: $(head -1 "$TMP/bad.log")"
fi
cp "$TMP/keep.cuh" "$TMP/src/inc/deeper/reduce.cuh"
sed -i 's|{ sum_kernel<<<1, 32>>>(out, in, n); }|{ sum_kernel<<<1,\n                                                                    32>>>(out, in, n); }|' "$TMP/src/inc/deeper/reduce.cuh"
if bash dev/emu/emu_build.sh "$TMP/src/prog.cu" "$TMP/prog_bad" > "$TMP/bad.log" 2>&1; then
    not_ok "a launch over two lines in a header was not refused"
elif grep -q "a kernel launch it cannot rewrite" "$TMP/bad.log"; then
    ok "a launch over two lines in a header is refused"
else
    not_ok "a launch over two lines failed otherwise: $(head -1 "$TMP/bad.log")"
fi
cp "$TMP/keep.cuh" "$TMP/src/inc/deeper/reduce.cuh"
# an include of ours inside #if: pasted once, it would be on one branch only: refused
cp "$TMP/src/prog.cu" "$TMP/keep.cu"
sed -i 's|^#include "inc/helpers.h"$|#ifdef NEVER\n#include "inc/helpers.h"\n#endif|' "$TMP/src/prog.cu"
if bash dev/emu/emu_build.sh "$TMP/src/prog.cu" "$TMP/prog_bad" > "$TMP/bad.log" 2>&1; then
    not_ok "an include of ours inside #ifdef was not refused"
elif grep -q 'inside #if/#ifdef' "$TMP/bad.log"; then
    ok "an include of ours inside #ifdef is refused: $(grep -m1 -o 'prog.cu:[0-9]*: #include "inc/helpers.h" inside #if/#ifdef' "$TMP/bad.log")"
else
    not_ok "an include inside #ifdef failed otherwise: $(head -1 "$TMP/bad.log")"
fi
cp "$TMP/keep.cu" "$TMP/src/prog.cu"
# the amalgamation: one copy of the header, no include of ours left, and it builds alone
bash dev/amalgamate.sh "$TMP/src/prog.cu" "$TMP/one.cu" > /dev/null
n=$(grep -c '^__global__ void sum_kernel' "$TMP/one.cu")
if [ "$n" = 1 ] && ! grep -qE '^#include "' "$TMP/one.cu" && bash dev/emu/emu_build.sh "$TMP/one.cu" "$TMP/one" > /dev/null 2>&1; then
    ok "the amalgamation holds the header once, no include of ours, and builds alone"
else
    not_ok "the amalgamation: $n copies of the kernel, $(grep -cE '^#include "' "$TMP/one.cu") includes left"
fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
