/*
precision.h: floatX for the ladders of train_gpt2.cu's kernels in dev/cuda
(layernorm_forward.cu, causal_softmax.cu, fused_classifier.cu), after common.h.

floatX is what the trainer stores activations in, and the definitions below are its
own (train_gpt2.cu's precision section), so that variant 1 of each ladder, the
trainer's kernel as it is, compiles here unchanged. The functions marked "shared-copy
of train_gpt2.cu" are checked against the trainer's by dev/test/check_copies.sh. Two
differences: the trainer stops without -DENABLE_FP32, -DENABLE_BF16 or -DENABLE_FP16,
while here bf16 is the default, so the emulator builds (bash dev/emu/emu_build.sh, no
-D) need no flag; and the ladders have no fp16 build yet (their tolerances know fp32
and bf16 only), so -DENABLE_FP16 stops here rather than quietly building bf16.
matmul.cu does not include this: it is fp32 throughout, but for variant 5's bf16 inputs.

For the dev/cuda ladders only, like common.h; the root programs keep their own.
*/
#ifndef DEV_CUDA_PRECISION_H
#define DEV_CUDA_PRECISION_H
#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#if defined(ENABLE_FP16)
#error "the dev/cuda ladders have no fp16 build yet: PRECISION=BF16 (the default) or FP32"
#endif
#if !defined(ENABLE_FP32) && !defined(ENABLE_BF16)
#define ENABLE_BF16 // the default, named, so that the trainer's #if defined(ENABLE_BF16) below reads the same
#endif
#if defined(ENABLE_FP32)
typedef float floatX;
#define PRECISION_NAME "fp32"
#else
typedef __nv_bfloat16 floatX;
#define PRECISION_NAME "bf16"
#endif
// all arithmetic is in fp32: values are converted on load and rounded on store
// --- shared-copy of train_gpt2.cu: to_float ---
__device__ __host__ inline float to_float(floatX x) { return (float)x; }
// --- shared-copy of train_gpt2.cu: from_float ---
__device__ __host__ inline floatX from_float(float x) { return (floatX)x; }

// A 32-bit hash of two numbers (murmur3's finaliser): the random bits of
// stochastic rounding, a fixed function of (step, tensor) and the element.
// --- shared-copy of train_gpt2.cu: hash_u32 ---
__device__ __host__ inline uint32_t hash_u32(uint32_t a, uint32_t b) {
    uint32_t h = a ^ (b * 0x9e3779b9u);
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}
// x rounded up or down to a neighbouring floatX, up with probability equal to the
// fraction of the step that x is above the lower one (so the expected result is
// x): the 16 bits that bf16 drops plus 16 random bits carry into the kept ones
// with just that probability. fp32 needs no rounding.
// --- shared-copy of train_gpt2.cu: from_float_stochastic ---
__device__ inline floatX from_float_stochastic(float x, uint32_t random) {
#if defined(ENABLE_BF16)
    uint32_t bits = __float_as_uint(x);
    if ((bits & 0x7f800000u) != 0x7f800000u) { bits = (bits + (random & 0xffffu)) & 0xffff0000u; } // not inf / NaN
    return from_float(__uint_as_float(bits)); // exact: the low 16 bits are zero
#else
    (void)random;
    return from_float(x);
#endif
}

// 16 bytes of floatX, 8 bf16 or 4 fp32. Copied whole from a 16-byte aligned address, a
// Pack moves in one 128-bit load or store (ld.global.v4 / st.global.v4 in the PTX);
// cudaMalloc aligns the start of every allocation to 256 bytes, so a row of floatX is
// aligned when its length is a multiple of PACK.
constexpr int PACK = 16 / (int)sizeof(floatX);
struct alignas(16) Pack {
    floatX v[PACK];
};

#endif // DEV_CUDA_PRECISION_H
