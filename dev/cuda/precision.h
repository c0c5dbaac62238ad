/*
precision.h: floatX for the ladders of train_gpt2.cu's kernels in dev/cuda
(layernorm_forward.cu, causal_softmax.cu, fused_classifier.cu), after common.h.

floatX is what the trainer stores activations in, and the definitions below are its
own (train_gpt2.cu's precision section), so that variant 1 of each ladder, the
trainer's kernel as it is, compiles here unchanged. One difference: the trainer
stops without -DENABLE_FP32 or -DENABLE_BF16, while here bf16 is the default, so the
emulator builds (bash dev/emu/emu_build.sh, no -D) need no flag. matmul.cu does not
include this: it is fp32 throughout, but for variant 5's bf16 inputs.

For the dev/cuda ladders only, like common.h; the root programs keep their own.
*/
#ifndef DEV_CUDA_PRECISION_H
#define DEV_CUDA_PRECISION_H
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#if defined(ENABLE_FP32)
typedef float floatX;
#define PRECISION_NAME "fp32"
#else
typedef __nv_bfloat16 floatX;
#define PRECISION_NAME "bf16"
#endif
// all arithmetic is in fp32: values are converted on load and rounded on store
__device__ __host__ inline float to_float(floatX x) { return (float)x; }
__device__ __host__ inline floatX from_float(float x) { return (floatX)x; }

// 16 bytes of floatX, 8 bf16 or 4 fp32. Copied whole from a 16-byte aligned address, a
// Pack moves in one 128-bit load or store (ld.global.v4 / st.global.v4 in the PTX);
// cudaMalloc aligns the start of every allocation to 256 bytes, so a row of floatX is
// aligned when its length is a multiple of PACK.
constexpr int PACK = 16 / (int)sizeof(floatX);
struct alignas(16) Pack {
    floatX v[PACK];
};

#endif // DEV_CUDA_PRECISION_H
