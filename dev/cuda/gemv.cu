/*
gemv.cu: the kernel ladder for decode's linear layers as infer.cu runs them: for N = 1 to
8 input rows (decode: a row per sequence),
    out[n, o] = sum_i inp[n, i] * weight[o, i] (+ bias[o]),   n < N, o < OC, i < C,
with inp (N, C) and weight (OC, C) row-major in floatX (bf16 by default, fp32 with
-DENABLE_FP32), products summed in fp32, out (N, OC) fp32: the plain store epilogue of
infer.cu's logits (EPI_LOGITS), with a bias where the layer has one. At N = 1 a weight is
used once, 2 flops for its 2 bytes, and at N = 8 16 flops, where an H200 needs ~200 flops
a byte (989 TFLOP/s over 4.8 TB/s) to run out of arithmetic first: the whole game is
streaming the weights at the speed of memory. Decoding GPT-2 124M reads all of them,
~250 MB in bf16, every step; the shapes below are its matmuls (C -> OC):
    qkv 768 -> 2304, attn proj 768 -> 768, fc 768 -> 3072, fc proj 3072 -> 768,
    logits 768 -> 50304 (the tied token embedding, read as the output layer).

    1: infer.cu's gemv_kernel, verbatim: a warp per output, the lanes walking the weight
       row in 16-byte loads, each load dotted with all N inputs (read from L1/L2),
       warp_sum, lane 0 applies the epilogue                                 — ./dev/cuda/gemv 1
    2: as 1 with U = 2 or 4 of a lane's 16-byte weight loads issued together, before any
       of them is used                                                        — ./dev/cuda/gemv 2
    3: the inputs staged once per block in shared memory (STAGE_COLS columns at a time),
       R = 1, 2 or 4 outputs per warp, so each input pack read serves R rows — ./dev/cuda/gemv 3
    4: cuBLAS: the cublasGemmEx call infer.cu's linear_forward makes for N > 8 (fp32 out,
       CUBLAS_COMPUTE_32F), then its epilogue kernel where there is a bias: the
       baseline, and the "% of cuBLAS"                                         — ./dev/cuda/gemv 4

What each should gain, and why (to be measured; see the TODO below):
  - 1 keeps, per SM, only the loads its warps have issued and not yet used. A memory-bound
    kernel needs many bytes in flight (Little's law: ~4.8 TB/s times ~0.7 us of latency is
    ~3 MB across the GPU, ~25 KB per SM); 1 has 16 bytes a lane, 512 a warp, 4 KB per
    8-warp block, and its grid is small at OC = 768: 96 blocks for 132 SMs. In the PTX
    for sm_90 (bf16), nvcc unrolls 1's loop 4x at N = 1 (four weight loads an
    iteration), but not at N = 8 (one weight load, then the eight input loads).
  - 2 puts U x 512 bytes a warp in flight whatever N: expected to matter at N = 4 and 8,
    most where the rows are long (C = 3072) and the grid small (OC = 768), and little
    at N = 1 or for the logits, whose 6288 blocks already fill the GPU. Registers (sm_90,
    bf16, ptxas -v): 30 at N = 1 like 1, 72 at N = 8 (1: 44).
  - 3 cuts the load instructions: 1 issues 1 + N 16-byte loads per weight pack (N from
    L1), 3 issues 1 + N/R (from shared memory, no tag checks, fixed latency); R rows also
    put R weight loads in flight at once, like 2. Its costs: a block reads its inputs into
    shared memory first (N C floatX from L2 per block) and waits at two barriers per
    stage; R outputs per warp shrink the grid by R (bad at OC = 768), and R x N
    accumulators cost registers (122 at N = 8, R = 4: at most 16 warps an SM). Expected
    to help at N = 4 and 8, not at N = 1.
  - 4, cuBLAS, is tuned for big matrices: at N <= 8 its tiles are mostly empty and it may
    split C across blocks (a second pass to add the parts); for a layer with a bias, the
    bias is one more launch (infer.cu's epilogue_kernel). Expected to lose at N = 1, and
    to come closer at N = 8.
2 and 3 are drop-in replacements for 1: the same arguments (the Epilogue struct, its
epilogue_apply), the same 16-byte-load condition, and a scalar path where it fails (C
not a multiple of the pack, or a misaligned row); any OC (the last block's spare warps
do nothing, 3's spare rows are computed on a valid row and dropped). 3 takes any C, in
stages of STAGE_COLS columns.

main checks every variant, at each of its configurations (warps per block, and U or R),
at every N from 1 to 8, against a CPU reference in double, on fresh random inputs, at
C x OC = 768 x 2304, 3072 x 768, 768 x 50304 (no bias, as infer.cu's logits), 67 x 37 (no
16-byte loads) and 2056 x 1001 (stages with a ragged end). Then it times each variant and
configuration at the five GPT-2 shapes, N = 1, 4, 8, and prints the best configuration's
microseconds, GB/s of weight traffic (weight bytes / time; the inputs, bias and outputs
are left out: 3% more at most, at N = 8 and OC = 768) and % of the H200's 4.8 TB/s, and % of cuBLAS's speed (100 x cuBLAS's time /
the variant's). Timing as decode sees it: each call reads a different copy of the
weights, from a pool of >= 256 MB (5x the H200's 50 MB L2, so the weights come from
memory, as they do in decode, whose 250 MB go round once a step), the calls captured in
a CUDA graph, as infer.cu replays decode (a launch costs several us from the CPU, more
than most of these calls), median of 20 graph runs after a warm-up. It ends with
"N passed, M failed" and exits non-zero if a check failed. No atomics: every run gives
the same bits.
TODO: the H200 timings. Written on a machine without a GPU; so far only the emulator has
run its checks (variant 4 there is the emulator's cuBLAS stand-in, loops in double: it
checks our call's arguments, not cuBLAS).

    make dev/cuda/gemv                     (or: nvcc -O3 -DENABLE_BF16 -gencode
        arch=compute_90,code=sm_90 dev/cuda/gemv.cu -lcublas -o dev/cuda/gemv)
    ./dev/cuda/gemv        (N: one variant, -c checks only, -s SEED, -h all flags)
Without a GPU, the CPU emulator runs the checks of all four variants at small sizes
(-DENABLE_FP32 for fp32; make dev/emu/gemv_cpu builds the bf16 one, make test runs it):
    bash dev/emu/emu_build.sh dev/cuda/gemv.cu dev/emu/gemv_cpu -DENABLE_BF16
    ./dev/emu/gemv_cpu -c

Left out, for later: splitting a row over several warps when OC is small (768: 96
blocks of 8 warps for 132 SMs); streaming loads for the weights (ld.global.cs /
__ldcs: read once, they need not stay in L2, where the inputs should); a transposed
reduction (32 lanes reduce 32 sums in 31 shuffles, not 32 x 5) for N x R partial sums;
and the other epilogues (QKV into the cache, GELU, the residual add), which change no
byte of weight traffic.
*/
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>
#include <cublas_v2.h> // under the emulator its stand-in (dev/emu/include/cublas_v2.h), loops in double
#include "common.h"    // cudaCheck, cublasCheck, rng_uniform, ceil_div, warp_sum, parse_args, require_gpu, time_median_ms
#include "precision.h" // floatX (bf16 unless -DENABLE_FP32), to_float, from_float, Pack of PACK floatX

#ifdef CUDA_EMU_H
// common.h leaves cublasCheck out under the emulator (its other ladders call no cuBLAS
// there); the stand-in has what it needs, so variant 4 is checked there too
static inline void cublas_check(cublasStatus_t status, const char *file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "Error: cuBLAS: %s [%s:%d]\n", cublasGetStatusString(status), file, line);
        exit(EXIT_FAILURE);
    }
}
#define cublasCheck(status) cublas_check(status, __FILE__, __LINE__)
#endif
#ifdef ENABLE_FP32
#define CUBLAS_FLOATX CUDA_R_32F
#else
#define CUBLAS_FLOATX CUDA_R_16BF
#endif

// ----------------------------------------------------------------------------
// the CPU reference, in double: out (N, OC), and the magnitude sum_i |inp[n, i] weight[o, i]|
// of each sum, which sets its tolerance

static void gemv_cpu(double *out, double *mag, const floatX *inp, const floatX *weight, const floatX *bias, int N, int C,
                     int OC) {
    for (int n = 0; n < N; n++) {
        for (int o = 0; o < OC; o++) {
            double s = bias != NULL ? to_float(bias[o]) : 0.0, m = 0.0;
            for (int i = 0; i < C; i++) {
                double p = (double)to_float(inp[(size_t)n * C + i]) * to_float(weight[(size_t)o * C + i]);
                s += p;
                m += fabs(p);
            }
            out[(size_t)n * OC + o] = s;
            mag[(size_t)n * OC + o] = m;
        }
    }
}

// ----------------------------------------------------------------------------
// the kernels, slowest first (warp_sum is infer.cu's and train_gpt2.cu's, in common.h)

// infer.cu's epilogues, verbatim: what a linear layer does with out[n, o]. The ladder uses
// EPI_LOGITS (a plain fp32 store), with or without a bias; the others change no byte of
// weight traffic, but are here so that 1 is infer's kernel as it is, and 2 and 3 can
// replace it.
// What a linear layer does with out[n, o] = inp[n] . weight[o] (+ bias[o]): each layer of
// the block has its own ending, fused into the matmul (or applied after cuBLAS).
// --- shared-copy of infer.cu: EPI_LOGITS ---
enum { EPI_LOGITS, EPI_QKV, EPI_GELU, EPI_RESIDUAL };
// --- shared-copy of infer.cu: Epilogue ---
typedef struct {
    int kind;
    const floatX *bias;  // (OC) or NULL
    float *f32;          // EPI_LOGITS: (N, OC) written; EPI_RESIDUAL: the residual stream (N, OC) +=
    floatX *x;           // EPI_GELU: (N, OC) GELU's output; EPI_QKV: the queries (N, C)
    floatX *key_cache;   // EPI_QKV: this layer's (B, S, KV) caches, and where row n goes in them
    floatX *value_cache;
    const int *seq, *pos;
    int S;
    int q_size, kv_size; // EPI_QKV: Q = NH HS queries, then KV = NKV HS keys and as many values
    // an adapter's update (-L; epilogue_lora), added first: out[n, o] += lora_h[n] . lora_B[o]
    // with lora_h = inp lora_A^T (N, lora_R), which linear_forward computes before
    const float *lora_A, *lora_B; // (lora_R, C), (OC, lora_R)
    float *lora_h;
    int lora_R;                   // 0: no adapter here
} Epilogue;

// --- shared-copy of infer.cu: GELU_SCALE ---
#define GELU_SCALE 0.7978845608028654f // sqrt(2/pi)

// --- shared-copy of infer.cu: epilogue_apply ---
__device__ inline void epilogue_apply(const Epilogue e, int n, int o, int OC, float v) {
    if (e.lora_R > 0) { // an adapter's update (-L): h[n] . B[o], h = inp A^T from lora_down_kernel
        const float *h = e.lora_h + (size_t)n * e.lora_R, *b = e.lora_B + (size_t)o * e.lora_R;
        for (int j = 0; j < e.lora_R; j++) { v += h[j] * b[j]; }
    }
    if (e.bias != NULL) { v += to_float(e.bias[o]); }
    if (e.kind == EPI_LOGITS) {
        e.f32[(size_t)n * OC + o] = v;
    } else if (e.kind == EPI_RESIDUAL) {
        e.f32[(size_t)n * OC + o] += v;
    } else if (e.kind == EPI_GELU) { // tanh approximation, as GPT-2 (and infer.c)
        e.x[(size_t)n * OC + o] = from_float(0.5f * v * (1.0f + tanhf(GELU_SCALE * (v + 0.044715f * v * v * v))));
    } else if (o < e.q_size) { // EPI_QKV: the query stays with the row, key and value go into the cache
        e.x[(size_t)n * e.q_size + o] = from_float(v);
    } else {
        int KV = e.kv_size, c = o - e.q_size, value = c >= KV;
        size_t at = ((size_t)e.seq[n] * e.S + e.pos[n]) * KV + (value ? c - KV : c);
        (value ? e.value_cache : e.key_cache)[at] = from_float(v);
    }
}

// 1: infer.cu's gemv_kernel, verbatim but for the name. Its 16-byte Pack is a typedef of
// its own there, `typedef struct __align__(16) { floatX v[VEC]; } Pack;`; here it is
// precision.h's, the same 16 bytes (PACK == VEC), so the kernel compiles unchanged.
// Its comment:
// Decode's linear layers: out[n, o] for N <= GEMV_MAX_ROWS input rows, a warp per output
// o. The lanes walk the weight row in 16-byte loads (8 bf16 or 4 fp32), each dotted with
// all N inputs (which stay in L1/L2), so every weight is read once per step: the kernel
// runs at the speed of memory. Most of decode's time goes here.
// --- shared-copy of infer.cu: GEMV_MAX_ROWS ---
#define GEMV_MAX_ROWS 8
// --- shared-copy of infer.cu: GEMV_WARPS ---
#define GEMV_WARPS 8 // outputs per block
// --- shared-copy of infer.cu: VEC ---
#define VEC (16 / (int)sizeof(floatX))

// --- shared-copy of infer.cu: gemv_kernel (as gemv_kernel1) ---
template <int N>
__global__ void __launch_bounds__(GEMV_WARPS * 32) gemv_kernel1(const floatX *inp, const floatX *weight, Epilogue e, int C, int OC,
                                                                int vectorized) {
    int o = blockIdx.x * GEMV_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (o >= OC) { return; }
    const floatX *w = weight + (size_t)o * C;
    float acc[N];
    for (int n = 0; n < N; n++) { acc[n] = 0.0f; }
    if (vectorized) { // 16-byte loads: every row of weight and inp starts 16-byte aligned
        for (int i = lane * VEC; i < C; i += 32 * VEC) {
            Pack wp = *(const Pack *)(w + i);
            for (int n = 0; n < N; n++) {
                Pack xp = *(const Pack *)(inp + (size_t)n * C + i);
                for (int k = 0; k < VEC; k++) { acc[n] += to_float(wp.v[k]) * to_float(xp.v[k]); }
            }
        }
    } else {
        for (int i = lane; i < C; i += 32) {
            float wi = to_float(w[i]);
            for (int n = 0; n < N; n++) { acc[n] += wi * to_float(inp[(size_t)n * C + i]); }
        }
    }
    for (int n = 0; n < N; n++) {
        float sum = warp_sum(acc[n]);
        if (lane == 0) { epilogue_apply(e, n, o, OC, sum); }
    }
}

// the epilogue after a cuBLAS matmul (variant 4, as infer.cu's prefill): scratch (N, OC) fp32
// --- shared-copy of infer.cu: epilogue_kernel ---
__global__ void epilogue_kernel(const float *scratch, Epilogue e, int N, int OC) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * OC) { return; }
    epilogue_apply(e, (int)(i / OC), (int)(i % OC), OC, scratch[i]);
}

// 2: 1 with U packs of the weight row in flight per lane. A lane's loop step covers U
// packs 512 bytes apart (the warp still reads 512 contiguous bytes per load
// instruction); all U weight loads are issued before the first multiply waits on one.
// The lane's last < U packs go one at a time, as in 1. Any number of warps per block
// (blockDim.x / 32), no __launch_bounds__: the launcher picks.
template <int N, int U>
__global__ void gemv_kernel2(const floatX *inp, const floatX *weight, Epilogue e, int C, int OC, int vectorized) {
    int o = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (o >= OC) { return; } // a whole warp leaves together
    const floatX *w = weight + (size_t)o * C;
    float acc[N];
#pragma unroll
    for (int n = 0; n < N; n++) { acc[n] = 0.0f; }
    if (vectorized) {
        int i = lane * VEC;
        for (; i + (U - 1) * 32 * VEC < C; i += U * 32 * VEC) { // U whole packs left for this lane
            Pack wp[U];
#pragma unroll
            for (int u = 0; u < U; u++) { wp[u] = *(const Pack *)(w + i + u * 32 * VEC); }
#pragma unroll
            for (int u = 0; u < U; u++) {
#pragma unroll
                for (int n = 0; n < N; n++) {
                    Pack xp = *(const Pack *)(inp + (size_t)n * C + i + u * 32 * VEC);
                    for (int k = 0; k < VEC; k++) { acc[n] += to_float(wp[u].v[k]) * to_float(xp.v[k]); }
                }
            }
        }
        for (; i < C; i += 32 * VEC) {
            Pack wp = *(const Pack *)(w + i);
#pragma unroll
            for (int n = 0; n < N; n++) {
                Pack xp = *(const Pack *)(inp + (size_t)n * C + i);
                for (int k = 0; k < VEC; k++) { acc[n] += to_float(wp.v[k]) * to_float(xp.v[k]); }
            }
        }
    } else { // as 1: a value at a time (C not a multiple of the pack, or a misaligned row)
        for (int i = lane; i < C; i += 32) {
            float wi = to_float(w[i]);
#pragma unroll
            for (int n = 0; n < N; n++) { acc[n] += wi * to_float(inp[(size_t)n * C + i]); }
        }
    }
#pragma unroll
    for (int n = 0; n < N; n++) {
        float sum = warp_sum(acc[n]);
        if (lane == 0) { epilogue_apply(e, n, o, OC, sum); }
    }
}

// 3: the block copies the inputs into shared memory, STAGE_COLS columns of all N rows at a
// time (16 KB at N = 8 in bf16, 32 KB in fp32: static, so the emulator runs it too, and
// several blocks fit an SM), then each warp computes R consecutive outputs over that
// stage: R weight loads, then each input pack read once from shared memory and dotted
// with all R. A lane's 16-byte reads of shared memory are consecutive across the warp:
// no bank conflicts. Every thread reaches every barrier: the warps past OC skip the math
// only, and a warp's rows past OC read row OC - 1 (in bounds) and are dropped.
#define STAGE_COLS 1024 // a multiple of 32 * VEC: a lane's packs sit at the same offsets in every stage
template <int N, int R>
__global__ void gemv_kernel3(const floatX *inp, const floatX *weight, Epilogue e, int C, int OC, int vectorized) {
    __shared__ Pack xs[N * STAGE_COLS / VEC]; // (N, STAGE_COLS) floatX: a stage of the inputs
    floatX *xsf = (floatX *)xs;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int o0 = (blockIdx.x * (blockDim.x / 32) + warp) * R; // this warp's first output
    const floatX *w[R];
#pragma unroll
    for (int r = 0; r < R; r++) { w[r] = weight + (size_t)min(o0 + r, OC - 1) * C; }
    float acc[R][N];
#pragma unroll
    for (int r = 0; r < R; r++) {
#pragma unroll
        for (int n = 0; n < N; n++) { acc[r][n] = 0.0f; }
    }
    for (int c0 = 0; c0 < C; c0 += STAGE_COLS) {
        int cols = min(STAGE_COLS, C - c0);
        __syncthreads(); // every warp is done with the previous stage
        if (vectorized) { // cols is a multiple of VEC here
            int packs = cols / VEC;
            for (int p = threadIdx.x; p < N * packs; p += blockDim.x) {
                int n = p / packs, q = p % packs;
                xs[n * (STAGE_COLS / VEC) + q] = *(const Pack *)(inp + (size_t)n * C + c0 + q * VEC);
            }
        } else {
            for (int p = threadIdx.x; p < N * cols; p += blockDim.x) {
                int n = p / cols, c = p % cols;
                xsf[n * STAGE_COLS + c] = inp[(size_t)n * C + c0 + c];
            }
        }
        __syncthreads(); // the stage is in shared memory
        if (o0 >= OC) { continue; } // (the whole warp: o0 is the same for its lanes)
        if (vectorized) {
            for (int i = lane * VEC; i < cols; i += 32 * VEC) {
                Pack wp[R];
#pragma unroll
                for (int r = 0; r < R; r++) { wp[r] = *(const Pack *)(w[r] + c0 + i); }
#pragma unroll
                for (int n = 0; n < N; n++) {
                    Pack xp = xs[n * (STAGE_COLS / VEC) + i / VEC];
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        for (int k = 0; k < VEC; k++) { acc[r][n] += to_float(wp[r].v[k]) * to_float(xp.v[k]); }
                    }
                }
            }
        } else {
            for (int i = lane; i < cols; i += 32) {
                float wi[R];
#pragma unroll
                for (int r = 0; r < R; r++) { wi[r] = to_float(w[r][c0 + i]); }
#pragma unroll
                for (int n = 0; n < N; n++) {
                    float x = to_float(xsf[n * STAGE_COLS + i]);
#pragma unroll
                    for (int r = 0; r < R; r++) { acc[r][n] += wi[r] * x; }
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (o0 + r >= OC) { break; } // the same for the whole warp: warp_sum's shuffles stay full
#pragma unroll
        for (int n = 0; n < N; n++) {
            float sum = warp_sum(acc[r][n]);
            if (lane == 0) { epilogue_apply(e, n, o0 + r, OC, sum); }
        }
    }
}

// ----------------------------------------------------------------------------
// the launcher: variant and configuration first, then linear_forward's own arguments.
// Kernels are picked as pointers: a template's <...> in front of <<< >>> would not
// survive the emulator's rewriting of launches.

static const char *variant_names[5] = {"", "1 infer (warp/output)", "2 U loads in flight", "3 inputs in smem, R/warp",
                                       "4 cuBLAS GemmEx"};
// a configuration of a variant: warps per block, and U (2) or R (3); 1 is fixed (infer's
// GEMV_WARPS), 4 is cuBLAS's own
struct Config {
    int variant, warps, param;
};
static const Config configs[] = {
    {1, GEMV_WARPS, 0},
    {2, 2, 2}, {2, 4, 2}, {2, 8, 2}, {2, 16, 2}, {2, 2, 4}, {2, 4, 4}, {2, 8, 4}, {2, 16, 4},
    {3, 2, 1}, {3, 4, 1}, {3, 8, 1}, {3, 16, 1}, {3, 2, 2}, {3, 4, 2}, {3, 8, 2}, {3, 16, 2},
    {3, 2, 4}, {3, 4, 4}, {3, 8, 4}, {3, 16, 4},
    {4, 0, 0},
};
static const char *config_name(const Config &c) {
    static char name[32];
    if (c.variant == 1) { snprintf(name, sizeof(name), "%d warps", c.warps); }
    else if (c.variant == 2) { snprintf(name, sizeof(name), "%d warps, U=%d", c.warps, c.param); }
    else if (c.variant == 3) { snprintf(name, sizeof(name), "%d warps, R=%d", c.warps, c.param); }
    else { snprintf(name, sizeof(name), "GemmEx"); }
    return name;
}

typedef void (*gemv_kernel_ptr)(const floatX *, const floatX *, Epilogue, int, int, int);
template <int N>
static gemv_kernel_ptr gemv_kernel_for_n(const Config &c) {
    switch (c.variant) {
    case 1: return gemv_kernel1<N>;
    case 2: return c.param == 2 ? gemv_kernel2<N, 2> : gemv_kernel2<N, 4>;
    default: return c.param == 1 ? gemv_kernel3<N, 1> : c.param == 2 ? gemv_kernel3<N, 2> : gemv_kernel3<N, 4>;
    }
}
// (N a constant in each copy, as in infer.cu, so the accumulators live in registers)
static gemv_kernel_ptr gemv_kernel_for(const Config &c, int N) {
    switch (N) {
    case 1: return gemv_kernel_for_n<1>(c);
    case 2: return gemv_kernel_for_n<2>(c);
    case 3: return gemv_kernel_for_n<3>(c);
    case 4: return gemv_kernel_for_n<4>(c);
    case 5: return gemv_kernel_for_n<5>(c);
    case 6: return gemv_kernel_for_n<6>(c);
    case 7: return gemv_kernel_for_n<7>(c);
    case 8: return gemv_kernel_for_n<8>(c);
    default: fprintf(stderr, "Error: N = %d rows, the kernels take 1 to %d\n", N, GEMV_MAX_ROWS); exit(EXIT_FAILURE);
    }
}

// Whether a block of that many warps can run the kernel: a kernel with many registers (3
// at R = 4, N = 8) may not launch 512 threads; such configurations are skipped. The
// emulator has no register file: there every size fits.
static int config_fits(const Config &c, int N) {
#ifdef CUDA_EMU_H
    (void)c, (void)N;
    return 1;
#else
    if (c.variant == 4) { return 1; }
    cudaFuncAttributes attr;
    cudaCheck(cudaFuncGetAttributes(&attr, gemv_kernel_for(c, N)));
    return c.warps * 32 <= attr.maxThreadsPerBlock;
#endif
}

static cublasHandle_t cublas_handle;

// out = inp (N, C) @ weight (OC, C)^T, then the epilogue e, on `stream`. scratch: (N, OC)
// fp32 for cuBLAS when there is an epilogue to apply after it (as in linear_forward).
static void gemv_forward(const Config &c, cudaStream_t stream, const floatX *inp, const floatX *weight, Epilogue e,
                         float *scratch, int N, int C, int OC) {
    // 16-byte loads need every row to start on 16 bytes (linear_forward's test)
    int vectorized = C % VEC == 0 && (uintptr_t)inp % 16 == 0 && (uintptr_t)weight % 16 == 0;
    switch (c.variant) {
    case 1:
    case 2:
    case 3: {
        int outputs = c.warps * (c.variant == 3 ? c.param : 1); // per block
        gemv_kernel_ptr kernel = gemv_kernel_for(c, N);
        kernel<<<ceil_div(OC, outputs), c.warps * 32, 0, stream>>>(inp, weight, e, C, OC, vectorized);
        break;
    }
    case 4: { // linear_forward's cuBLAS path, verbatim but for the handle's stream and BLOCK
        static const float one = 1.0f, zero = 0.0f; // static: a captured graph keeps pointers to them
        int direct = e.kind == EPI_LOGITS && e.bias == NULL; // logits need no epilogue: straight into place
        cublasCheck(cublasSetStream(cublas_handle, stream));
        cublasCheck(cublasGemmEx(cublas_handle, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, weight, CUBLAS_FLOATX, C, inp,
                                 CUBLAS_FLOATX, C, &zero, direct ? e.f32 : scratch, CUDA_R_32F, OC, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
        if (!direct) { epilogue_kernel<<<ceil_div((size_t)N * OC, 256), 256, 0, stream>>>(scratch, e, N, OC); }
        break;
    }
    default: fprintf(stderr, "Error: no variant %d\n", c.variant); exit(EXIT_FAILURE);
    }
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// one problem on the device, the checks, the timing

static floatX *d_inp, *d_weight, *d_bias; // (GEMV_MAX_ROWS, C), (OC, C) (or the timing's pool of copies), (OC)
static float *d_out, *d_scratch;          // (GEMV_MAX_ROWS, OC) each

// Fresh random inputs, never zero: inputs uniform in [-1, 1), each row with a scale of
// its own in [0.5, 1.5) (a row mixed up with another shows); weights uniform in
// [-0.1, 0.1) and biases in [-0.5, 0.5). GEMV_MAX_ROWS rows: a check at N rows uses the
// first N (out[n] depends on inp[n] only). `copies` copies of the weights one after
// another (the timing's pool; 1 for the checks), made on the device from the first.
static void problem_make(std::vector<floatX> &inp, std::vector<floatX> &weight, std::vector<floatX> &bias, int C, int OC,
                         int copies) {
    size_t wsize = (size_t)OC * C;
    inp.resize((size_t)GEMV_MAX_ROWS * C);
    weight.resize(wsize);
    bias.resize(OC);
    for (int n = 0; n < GEMV_MAX_ROWS; n++) {
        float scale = 1.0f + 0.5f * rng_uniform();
        for (int i = 0; i < C; i++) { inp[(size_t)n * C + i] = from_float(scale * rng_uniform()); }
    }
    for (size_t i = 0; i < wsize; i++) { weight[i] = from_float(0.1f * rng_uniform()); }
    for (int o = 0; o < OC; o++) { bias[o] = from_float(0.5f * rng_uniform()); }
    cudaCheck(cudaMalloc(&d_inp, inp.size() * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_weight, copies * wsize * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_bias, OC * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_out, (size_t)GEMV_MAX_ROWS * OC * sizeof(float)));
    cudaCheck(cudaMalloc(&d_scratch, (size_t)GEMV_MAX_ROWS * OC * sizeof(float)));
    cudaCheck(cudaMemcpy(d_inp, inp.data(), inp.size() * sizeof(floatX), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_weight, weight.data(), wsize * sizeof(floatX), cudaMemcpyHostToDevice));
    for (int k = 1; k < copies; k++) {
        cudaCheck(cudaMemcpy(d_weight + k * wsize, d_weight, wsize * sizeof(floatX), cudaMemcpyDeviceToDevice));
    }
    cudaCheck(cudaMemcpy(d_bias, bias.data(), OC * sizeof(floatX), cudaMemcpyHostToDevice));
}

static void problem_free(void) {
    for (void *p : {(void *)d_inp, (void *)d_weight, (void *)d_bias, (void *)d_out, (void *)d_scratch}) { cudaCheck(cudaFree(p)); }
}

// infer.cu's logits epilogue: a plain fp32 store into out, with the bias or without
static Epilogue store_epilogue(int with_bias) {
    Epilogue e = {EPI_LOGITS, with_bias ? d_bias : NULL, d_out, NULL, NULL, NULL, NULL, NULL, 0, 0, 0, NULL, NULL, NULL, 0};
    return e;
}

// Tolerances, all in one place, in U = FLT_EPSILON = 2^-23 (twice fp32's unit roundoff u).
// Each output is a sum of C products, exact in fp32 for bf16 inputs (8 + 8 significant
// bits) and rounded once for fp32 ones, added up in fp32; the reference is in double, on
// the same floatX values. Our kernels add in chains of at most C / 32 (a lane's share of
// the row) and then a 5-level tree (warp_sum), so their error is below (C / 32 + 6) u
// sum|products| (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., chapter
// 4), and in practice, with rounding errors of random sign, like sqrt(C) u sum|products|
// (the same book, section 3.1; Higham and Mary, SIAM J. Sci. Comput. 2019, for the
// probabilistic bound). We allow
//     tol = TOL_SUMS sqrt(C) U sum|inp w| + 2 U |out|   (the bias add, the fp32 store),
// TOL_SUMS = 4 for ours: above the worst-case bound for every C >= 1 (at C = 3072 it is
// 443 u against 102 u). Random signs keep the partial sums far below sum|products|, so
// the errors seen are ~100x smaller still (0.01 of tol at worst under the emulator). cuBLAS's order of summation is its
// own (long chains in a tile, C split across blocks), and tensor cores have been found to
// truncate rather than round when they add (Fasi, Higham, Mikaitis and Pranesh, PeerJ CS
// 2021, on V100, T4 and A100): TOL_CUBLAS = 16. A bug (a pack skipped, a wrong row, the
// bias lost, a stage missed) is off by about sum|inp w| / C or more: ~10x tol at C = 3072
// for a single product missed, ~1000x at C = 256 for a pack.
#define TOL_SUMS 4.0
#define TOL_CUBLAS 16.0
static int num_passed = 0, num_failed = 0;

// Runs variant v at each of its configurations and at every N from 1 to GEMV_MAX_ROWS
// (out all NaN first: an output never written fails), and compares every output with the
// reference. One line: how many (configuration, N) runs, the largest error, the worst as a fraction
// of its tolerance (<= 1 passes), OK or NOT OK.
static void check_variant(int v, const double *ref, const double *mag, int with_bias, int C, int OC) {
    printf("%4d x %5d  %-4s %-25s ", C, OC, with_bias ? "bias" : "", variant_names[v]);
    std::vector<float> got((size_t)GEMV_MAX_ROWS * OC);
    double max_err = 0.0, worst = 0.0, tol_sums = v == 4 ? TOL_CUBLAS : TOL_SUMS;
    char where[200] = "";
    int runs = 0;
    for (const Config &c : configs) {
        if (c.variant != v) { continue; }
        for (int N = 1; N <= GEMV_MAX_ROWS; N++) {
            if (!config_fits(c, N)) { continue; }
            runs++;
            cudaCheck(cudaMemset(d_out, 0xFF, got.size() * sizeof(float)));
            gemv_forward(c, 0, d_inp, d_weight, store_epilogue(with_bias), d_scratch, N, C, OC);
            cudaCheck(cudaMemcpy(got.data(), d_out, (size_t)N * OC * sizeof(float), cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < (size_t)N * OC; i++) {
                double tol = tol_sums * sqrt((double)C) * FLT_EPSILON * mag[i] + 2 * FLT_EPSILON * fabs(ref[i]);
                double err = fabs(got[i] - ref[i]), ratio = std::isnan(err) ? INFINITY : err / tol;
                max_err = std::isnan(err) ? INFINITY : fmax(max_err, err);
                if (ratio > worst) {
                    worst = ratio;
                    snprintf(where, sizeof(where), "%s, N = %d: out[%zu, %zu] = %.9g, expected %.9g, tolerance %.2g",
                             config_name(c), N, i / OC, i % OC, got[i], ref[i], tol);
                }
            }
        }
    }
    int ok = worst <= 1.0 && runs > 0;
    printf("N 1-%d, %3d runs  max err %.1e, worst %.2f of tol  %s\n", GEMV_MAX_ROWS, runs, max_err, worst,
           ok ? "OK" : "NOT OK");
    if (!ok) { printf("    worst at %s\n", where); }
    if (ok) { num_passed++; } else { num_failed++; }
}

#ifndef CUDA_EMU_H
#define PEAK_GBS 4800.0            // H200 (HBM3e), NVIDIA's figure; on another GPU the % is still of this
#define POOL_BYTES (256ull << 20) // the timing's weights: >= 5x the H200's 50 MB of L2
#define CUBLAS_WORKSPACE (32u << 20) // cuBLAS's scratch, ours so that graph capture never allocates

// Median GPU time of one call in us: `copies` calls, each on its own copy of the weights,
// captured in a CUDA graph on `stream`; the graph launched once to warm up, then 20 times
// timed (CUDA events on the legacy default stream, which waits for `stream`).
static float time_config(const Config &c, cudaStream_t stream, int with_bias, int N, int C, int OC, int copies) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaCheck(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    for (int k = 0; k < copies; k++) {
        gemv_forward(c, stream, d_inp, d_weight + (size_t)k * OC * C, store_epilogue(with_bias), d_scratch, N, C, OC);
    }
    cudaCheck(cudaStreamEndCapture(stream, &graph));
    cudaCheck(cudaGraphInstantiate(&exec, graph, 0));
    float ms = time_median_ms([&] { cudaCheck(cudaGraphLaunch(exec, 0)); });
    cudaCheck(cudaGraphExecDestroy(exec));
    cudaCheck(cudaGraphDestroy(graph));
    return 1000.0f * ms / copies;
}
#endif

// ----------------------------------------------------------------------------

static void usage(void) {
    printf("usage: gemv [N] [-v N] [-c] [-s SEED] [-h]\n"
           "  N, -v N  only variant N, checked and then timed (default: all of 1-4; with one of\n"
           "           1-3, cuBLAS is timed too, for the %% of cuBLAS)\n"
           "           1 infer's gemv_kernel, 2 U loads in flight, 3 inputs in shared memory, R outputs\n"
           "           a warp, 4 cuBLAS\n"
           LADDER_COMMON_FLAGS);
}

int main(int argc, char **argv) {
    LadderArgs args = parse_args(argc, argv, 4, 1, usage); // variants 1-4, also as a plain N
    rng_state = args.seed;
    int first = args.only ? args.only : 1, last = args.only ? args.only : 4;
    // C, OC, and whether the layer has a bias
#ifdef CUDA_EMU_H
    // On the CPU every thread of a block is a fiber: small sizes only, and no timing
    const int shapes[][3] = {{67, 37, 1}, {256, 100, 0}, {1000, 41, 1}, {2056, 19, 1}};
    printf("CPU emulation (dev/emu), %s: checks at small sizes, no timing; seed %llu\n", PRECISION_NAME, args.seed);
#else
    const int shapes[][3] = {{768, 2304, 1}, {3072, 768, 1}, {768, 50304, 0}, {67, 37, 1}, {2056, 1001, 1}};
    require_gpu("runs the checks: bash dev/emu/emu_build.sh dev/cuda/gemv.cu /tmp/gemv_cpu && /tmp/gemv_cpu -c",
                PRECISION_NAME, args.seed);
#endif
    cublasCheck(cublasCreate(&cublas_handle));
#ifdef ENABLE_FP32
    cublasCheck(cublasSetMathMode(cublas_handle, CUBLAS_PEDANTIC_MATH)); // as infer.cu: fp32 means fp32, no TF32
#endif

    // 1. correctness, every variant at every shape, configuration and N, before any timing
    for (const int *shape : shapes) {
        int C = shape[0], OC = shape[1], with_bias = shape[2];
        std::vector<floatX> inp, weight, bias;
        problem_make(inp, weight, bias, C, OC, 1);
        std::vector<double> ref((size_t)GEMV_MAX_ROWS * OC), mag((size_t)GEMV_MAX_ROWS * OC);
        gemv_cpu(ref.data(), mag.data(), inp.data(), weight.data(), with_bias ? bias.data() : NULL, GEMV_MAX_ROWS, C, OC);
        for (int v = first; v <= last; v++) { check_variant(v, ref.data(), mag.data(), with_bias, C, OC); }
        problem_free();
    }

#ifndef CUDA_EMU_H
    // 2. timing, at GPT-2 124M's decode shapes; cuBLAS always (the yardstick)
    if (!args.check_only) {
        const struct { const char *name; int C, OC, bias; } layers[] = {
            {"qkv", 768, 2304, 1}, {"attn proj", 768, 768, 1}, {"fc", 768, 3072, 1}, {"fc proj", 3072, 768, 1},
            {"logits", 768, 50304, 0}};
        cudaStream_t stream;
        void *workspace;
        cudaCheck(cudaStreamCreate(&stream));
        cudaCheck(cudaMalloc(&workspace, CUBLAS_WORKSPACE));
        cublasCheck(cublasSetWorkspace(cublas_handle, workspace, CUBLAS_WORKSPACE));
        printf("\nus per call: median of 20 runs of a CUDA graph of calls, each on its own copy of the weights\n"
               "(>= 256 MB of them: read from memory, not L2), at each variant's best configuration; GB/s of\n"
               "weight traffic, %% of the H200's 4.8 TB/s, %% of cuBLAS's speed\n");
        printf("%-9s %4s %5s %2s  %-25s %-15s %8s %7s %7s %8s\n", "layer", "C", "OC", "N", "variant", "best config",
               "us", "GB/s", "% peak", "% cuBLAS");
        for (const auto &l : layers) {
            size_t wbytes = (size_t)l.OC * l.C * sizeof(floatX);
            int copies = (int)std::max<size_t>(2, (POOL_BYTES + wbytes - 1) / wbytes);
            std::vector<floatX> inp, weight, bias;
            problem_make(inp, weight, bias, l.C, l.OC, copies);
            for (int N : {1, 4, 8}) {
                float best[5] = {INFINITY, INFINITY, INFINITY, INFINITY, INFINITY};
                const Config *best_config[5] = {NULL, NULL, NULL, NULL, NULL};
                for (const Config &c : configs) {
                    if ((c.variant < first || c.variant > last) && c.variant != 4) { continue; }
                    if (!config_fits(c, N)) { continue; }
                    float us = time_config(c, stream, l.bias, N, l.C, l.OC, copies);
                    if (us < best[c.variant]) { best[c.variant] = us; best_config[c.variant] = &c; }
                }
                for (int v = first; v <= last; v++) {
                    if (best_config[v] == NULL) { continue; }
                    double gbs = wbytes / (best[v] * 1e-6) / 1e9;
                    printf("%-9s %4d %5d %2d  %-25s %-15s %8.2f %7.0f %6.1f%% %7.0f%%\n", l.name, l.C, l.OC, N,
                           variant_names[v], config_name(*best_config[v]), best[v], gbs, 100.0 * gbs / PEAK_GBS,
                           100.0 * best[4] / best[v]);
                }
            }
            problem_free();
        }
        cudaCheck(cudaFree(workspace));
        cudaCheck(cudaStreamDestroy(stream));
    }
#endif
    cublasCheck(cublasDestroy(cublas_handle));
    printf("%d passed, %d failed\n", num_passed, num_failed);
    return num_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
