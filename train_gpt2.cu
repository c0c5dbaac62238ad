/*
train_gpt2.cu: GPT-2 training on one GPU, checked against train_gpt2.c.

The same model, flags, data loader, random numbers, log and checkpoint files as
train_gpt2.c (a CPU checkpoint resumes here and the other way round in fp32);
the arithmetic moves to the GPU. Each layer of train_gpt2.c has a launcher here
with the same name, so the two files read side by side. In it:
  - precision chosen at build time: PRECISION=FP32, BF16 (the default) or FP16:
    the parameters, gradients and activations are floatX; AdamW keeps fp32
    moments and, in BF16 and FP16, an fp32 master copy of the weights (rounded
    after every update), so small updates are not lost to a 16-bit mantissa
    (BF16 can do without, -w 0: stochastic rounding); FP16 scales the loss
    dynamically, so that gradients fit its narrow range;
  - matmuls through cuBLASLt (fp32 accumulation), the bias added in its epilogue,
    and GELU's derivative in the backward pass (GELU itself too with -r 0); attention as two batched
    GEMMs around a causal softmax kernel (the (B, NH, T, T) scores are kept for
    the backward pass); or flash attention (-F 1, train_gpt2.c's algorithm, our
    kernels: tiles in shared memory, an online softmax, a (B, NH, T) log-sum-exp
    kept and the probabilities made again in the backward pass, dev/cuda/
    flash_attention.cu's variant 3); or cuDNN's flash attention (USE_CUDNN=1);
  - our kernels for the embedding, LayerNorm (a warp per row), GELU, the
    residual adds, a fused classifier (softmax, loss and the gradient of the
    logits written in one kernel, over the logits in place), AdamW, and the
    global gradient norm; each is the first rung of its ladder in dev/cuda/;
  - activation recomputation (-r): GELU's output and LayerNorm's recomputed in
    the backward pass instead of kept, to save memory;
  - every kernel deterministic: sums over rows go through per-chunk partial
    sums added in a fixed order, the embedding gradient through tokens sorted
    on the host, never through atomics. Two runs are bit-identical.
Left for later: multi-GPU; faster kernels where the ladders find them.

Build and run:
    make train_gpt2cu && ./train_gpt2cu             # the default run of train_gpt2.c, on the GPU
    make train_gpt2cu PRECISION=FP32                # fp32 everywhere (FP16: fp16 with loss scaling)
    make train_gpt2cu USE_CUDNN=1                   # cuDNN attention (needs the cudnn-frontend headers)
Without a GPU, make test runs this file's kernels through the CPU emulator
(dev/emu) and compares them with train_gpt2.c (dev/test/test_train_gpt2_cuda.sh).
A debug build (-DGUARD_BYTES=256, see GUARD_BYTES below) checks after every step
that no kernel wrote past the end of its tensor.

Sizes: B batch, T time, C channels, NH heads, HS = C/NH, V vocabulary, Vp padded
vocabulary, L layers, maxT longest sequence. As in train_gpt2.c, parameter
gradients ACCUMULATE (+=), and so do LayerNorm's and the encoder's dinp (the
residual stream's one running gradient); other activation gradients are WRITTEN.
*/

#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <limits.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <glob.h>
#include <unistd.h>
#include <sys/stat.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h> // (header-only: NVTX ranges for Nsight Systems)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#if defined(ENABLE_CUDNN)
#define USE_CUDNN_ATTENTION 1
#else
#define USE_CUDNN_ATTENTION 0
#endif
#if defined(ENABLE_CUDNN)
// cuDNN's fused attention (make USE_CUDNN=1), through the cudnn-frontend headers;
// host code only (see the cuDNN section below)
#include <cudnn.h>
#ifndef __CUDA_ARCH__
#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>
#define CUDNN_FRONTEND_SKIP_JSON_LIB // (its JSON library only prints and saves graphs: a third less to compile)
#include <cudnn_frontend.h>
#endif
#endif
#define PROGRAM "./train_gpt2cu" // in messages: how the user runs this program
#include "lib/utils.h"
#include "lib/rand.h"
#include "lib/cuda_utils.h"
#include "lib/phases.h"
// Guard bands, for debug builds (-DGUARD_BYTES=256): each tensor carved out of a
// shared allocation (parameters, gradients, activations, activation gradients) is
// followed by at least this many bytes of a pattern (guard_byte, lib/cuda_utils.h), and after
// every training step we read them back: a kernel that writes past the end of its tensor (an `i <= N`, one
// block too many) is named, instead of silently corrupting its neighbour. The
// default 0 costs nothing: no bands, no checks, slices rounded to 256 bytes as ever.
#ifndef GUARD_BYTES
#define GUARD_BYTES 0
#endif

// Flash attention (-F 1): flash_attention_forward/backward, whose activations are a (B, NH, T)
// log-sum-exp a layer instead of the (B, NH, T, T) probabilities (and, built with cuDNN, ours
// instead of cuDNN's); 0: attention_forward/backward (built with cuDNN: cuDNN's). Set from the
// command line before a model is built.
static int flash_attention = 0;

// ----------------------------------------------------------------------------
// device memory: a ledger of what we allocate, checked allocations

// The ledger of this program's device memory: a few large blocks, each in it from
// cuda_malloc_check to cuda_free_check. What is live now and the most that ever
// was, so that the start-up memory table can be held to the byte (the emulator's
// test does) and the run can say what it allocated next to what the device says.
#define MAX_DEVICE_BLOCKS 64
static struct { void *p; size_t bytes; } device_blocks[MAX_DEVICE_BLOCKS];
static size_t device_bytes_live, device_bytes_peak;
static void ledger_add(void *p, size_t bytes) {
    for (int i = 0; i < MAX_DEVICE_BLOCKS; i++) {
        if (device_blocks[i].p == NULL) {
            device_blocks[i].p = p;
            device_blocks[i].bytes = bytes;
            device_bytes_live += bytes;
            device_bytes_peak = device_bytes_live > device_bytes_peak ? device_bytes_live : device_bytes_peak;
            return;
        }
    }
    fprintf(stderr, "Error: more than %d device blocks at once (a leak?)\n", MAX_DEVICE_BLOCKS);
    exit(EXIT_FAILURE);
}
// cudaFree of a block from cuda_malloc_check (NULL: nothing)
static void cuda_free_check(void *p) {
    if (p == NULL) { return; }
    for (int i = 0; i < MAX_DEVICE_BLOCKS; i++) {
        if (device_blocks[i].p == p) {
            device_bytes_live -= device_blocks[i].bytes;
            device_blocks[i].p = NULL;
            cudaCheck(cudaFree(p));
            return;
        }
    }
    fprintf(stderr, "Error: cuda_free_check(%p): not a block from cuda_malloc_check\n", p);
    exit(EXIT_FAILURE);
}

// Device memory for one group of tensors (`what`), or a message that says which
// group did not fit, by how much, and what to change.
static void *cuda_malloc_check(size_t bytes, const char *what) {
#if defined(ENABLE_FP32)
    const char *precision_hint = "; or build with 16-bit activations (PRECISION=BF16)";
#else
    const char *precision_hint = "";
#endif
    void *p = NULL;
    cudaError_t err = gpu_malloc_budgeted(&p, bytes > 0 ? bytes : 1);
    if (err != cudaSuccess) {
        size_t free_bytes = 0, total_bytes = 0;
        gpu_memory_info(&free_bytes, &total_bytes);
        size_t need = bytes > 0 ? bytes : 1, short_by = need > free_bytes ? need - free_bytes : 0;
        if (gpu_budget > 0) { // (what is in use may be past the budget already, the CUDA context alone can be: short too)
            size_t device_free = 0, device_total = 0;
            cudaMemGetInfo(&device_free, &device_total);
            size_t after = device_total - device_free + need;
            if (after > gpu_budget && after - gpu_budget > short_by) { short_by = after - gpu_budget; }
        }
        fprintf(stderr, "Error: out of GPU memory%s: %s need %.1f MiB, %.1f MiB of %.1f MiB are free: %.1f MiB short (%zu bytes; %s)\n"
                "HINT: lower the batch size (-b) or the sequence length (-t), and raise -d to keep the total batch;"
                " or recompute more activations (-r 2)%s%s\n",
                gpu_budget > 0 ? " (the -G budget)" : "", what, bytes / 1048576.0, free_bytes / 1048576.0, total_bytes / 1048576.0,
                short_by / 1048576.0, short_by, cudaGetErrorString(err),
                precision_hint,
                flash_attention || USE_CUDNN_ATTENTION ? "" : "; or flash attention (-F 1), which keeps no T x T matrices");
        exit(EXIT_FAILURE);
    }
    ledger_add(p, bytes > 0 ? bytes : 1);
    return p;
}

// ----------------------------------------------------------------------------
// precision: floatX is what parameters, gradients and activations are stored in

#if defined(ENABLE_FP32)
typedef float floatX;
#define CUBLAS_FLOATX CUDA_R_32F
#define PRECISION_NAME "fp32"
#define MODEL_VERSION_OURS MODEL_VERSION_FP32
#elif defined(ENABLE_BF16)
typedef __nv_bfloat16 floatX;
#define CUBLAS_FLOATX CUDA_R_16BF
#define PRECISION_NAME "bf16"
#define MODEL_VERSION_OURS MODEL_VERSION_BF16
#elif defined(ENABLE_FP16)
// fp16 keeps 3 more mantissa bits than bf16 but only 5 exponent bits (largest
// 65504, smallest normal 6e-5): gradients need the dynamic loss scale below
typedef __half floatX;
#define CUBLAS_FLOATX CUDA_R_16F
#define PRECISION_NAME "fp16"
#define MODEL_VERSION_OURS MODEL_VERSION_FP32 // llm.c's formats have no fp16 version: fp16 runs write fp32 files
#else
#error "build with -DENABLE_FP32, -DENABLE_BF16 or -DENABLE_FP16 (make train_gpt2cu PRECISION=FP32|BF16|FP16)"
#endif
#if defined(ENABLE_CUDNN) && defined(ENABLE_FP32)
#error "cuDNN's flash attention takes 16-bit q, k, v: USE_CUDNN=1 needs PRECISION=BF16 or FP16"
#endif
// all arithmetic is in fp32: values are converted on load and rounded on store
__device__ __host__ inline float to_float(floatX x) { return (float)x; }
__device__ __host__ inline floatX from_float(float x) { return (floatX)x; }

// A 32-bit hash of two numbers (murmur3's finaliser): the random bits of
// stochastic rounding, a fixed function of (step, tensor) and the element.
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

// ----------------------------------------------------------------------------
// the kernels

// --- begin shared-copy: gpu-reductions ---
// sums and maxima across the 32 threads of a warp, every thread gets the result
__device__ inline float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) { v += __shfl_xor_sync(0xffffffffu, v, offset); }
    return v;
}
__device__ inline float warp_max(float v) {
    for (int offset = 16; offset > 0; offset /= 2) { v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset)); }
    return v;
}
// ... and across a block (a whole number of warps, at most 1024 threads)
__device__ inline float block_sum(float v) {
    __shared__ float partial[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_sum(v);
    __syncthreads(); // partial may still be read by an earlier call
    if (lane == 0) { partial[warp] = v; }
    __syncthreads();
    return warp_sum(lane < (int)(blockDim.x / 32) ? partial[lane] : 0.0f);
}
__device__ inline float block_max(float v) {
    __shared__ float partial[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) { partial[warp] = v; }
    __syncthreads();
    return warp_max(lane < (int)(blockDim.x / 32) ? partial[lane] : -INFINITY);
}
// --- end shared-copy: gpu-reductions ---

// out[b,t,:] = wte[token] + wpe[t]; one thread per element
__global__ void encoder_forward_kernel(floatX *out, const int *inp, const floatX *wte, const floatX *wpe, int B, int T,
                                       int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * T * C) { return; }
    size_t bt = i / C, c = i % C, t = bt % T;
    out[i] = from_float(to_float(wte[(size_t)inp[bt] * C + c]) + to_float(wpe[t * C + c]));
}

// dwte: the positions of one token were sorted together on the host (order,
// seg_start); a block per distinct token, a thread per channel, adds them up in
// position order: no two threads write the same element, and the sums' order is
// fixed. (Atomics would be simpler and not reproducible.)
__global__ void encoder_backward_wte_kernel(floatX *dwte, const floatX *dout, const int *order, const int *seg_start,
                                            const int *seg_token, int C) {
    int s = blockIdx.x;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float sum = 0.0f;
        for (int i = seg_start[s]; i < seg_start[s + 1]; i++) { sum += to_float(dout[(size_t)order[i] * C + c]); }
        floatX *d = dwte + (size_t)seg_token[s] * C + c;
        *d = from_float(to_float(*d) + sum);
    }
}

// dwpe[t, c] += sum over the batch of dout[b, t, c]
__global__ void encoder_backward_wpe_kernel(floatX *dwpe, const floatX *dout, int B, int T, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * C) { return; }
    float sum = 0.0f;
    for (int b = 0; b < B; b++) { sum += to_float(dout[(size_t)b * T * C + i]); }
    dwpe[i] = from_float(to_float(dwpe[i]) + sum);
}

// One warp per position: mean and variance over its C channels (two passes, as
// train_gpt2.c), then the normalised, scaled and shifted output.
__global__ void layernorm_forward_kernel(floatX *out, float *mean, float *rstd, const floatX *inp, const floatX *weight,
                                         const floatX *bias, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) { return; } // a whole warp leaves together
    const floatX *x = inp + (size_t)row * C;
    float m = 0.0f;
    for (int i = lane; i < C; i += 32) { m += to_float(x[i]); }
    m = warp_sum(m) / C;
    float v = 0.0f;
    for (int i = lane; i < C; i += 32) { float d = to_float(x[i]) - m; v += d * d; }
    float s = 1.0f / sqrtf(warp_sum(v) / C + 1e-5f);
    floatX *o = out + (size_t)row * C;
    for (int i = lane; i < C; i += 32) { o[i] = from_float((to_float(x[i]) - m) * s * to_float(weight[i]) + to_float(bias[i])); }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

// dinp += rstd (g - mean(g) - xhat mean(g xhat)), g = dout * weight; a warp per position
__global__ void layernorm_backward_kernel(floatX *dinp, const floatX *dout, const floatX *inp, const floatX *weight,
                                          const float *mean, const float *rstd, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) { return; }
    const floatX *dy = dout + (size_t)row * C, *x = inp + (size_t)row * C;
    float m = mean[row], s = rstd[row], g_mean = 0.0f, gx_mean = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float g = to_float(dy[i]) * to_float(weight[i]);
        g_mean += g;
        gx_mean += g * (to_float(x[i]) - m) * s;
    }
    g_mean = warp_sum(g_mean) / C;
    gx_mean = warp_sum(gx_mean) / C;
    floatX *dx = dinp + (size_t)row * C;
    for (int i = lane; i < C; i += 32) {
        float xhat = (to_float(x[i]) - m) * s;
        float d = s * (to_float(dy[i]) * to_float(weight[i]) - g_mean - xhat * gx_mean);
        dx[i] = from_float(to_float(dx[i]) + d);
    }
}

// Sums down the rows of a (rows, cols) matrix in two steps, without atomics:
// each block sums a chunk of ROWS_PER_CHUNK rows for its columns into partial
// (chunk, cols); then reduce_partials adds the chunks in order. LayerNorm's
// parameter gradients need two such sums at once (of dout * xhat and of dout),
// the bias gradients one (of dout).
#define ROWS_PER_CHUNK 128
// (the chunks run along grid.x, which has room for 2^31 of them; grid.y only 65535)
__global__ void layernorm_param_partials_kernel(float *partial, const floatX *dout, const floatX *inp, const float *mean,
                                                const float *rstd, int N, int C) {
    int c = blockIdx.y * blockDim.x + threadIdx.x, chunk = blockIdx.x;
    if (c >= C) { return; }
    float dw = 0.0f, db = 0.0f;
    int end = min(N, (chunk + 1) * ROWS_PER_CHUNK);
    for (int r = chunk * ROWS_PER_CHUNK; r < end; r++) {
        float dy = to_float(dout[(size_t)r * C + c]);
        dw += dy * (to_float(inp[(size_t)r * C + c]) - mean[r]) * rstd[r];
        db += dy;
    }
    partial[(size_t)chunk * 2 * C + c] = dw;
    partial[(size_t)chunk * 2 * C + C + c] = db;
}

__global__ void column_partials_kernel(float *partial, const floatX *x, int rows, int cols) {
    int c = blockIdx.y * blockDim.x + threadIdx.x, chunk = blockIdx.x;
    if (c >= cols) { return; }
    float sum = 0.0f;
    int end = min(rows, (chunk + 1) * ROWS_PER_CHUNK);
    for (int r = chunk * ROWS_PER_CHUNK; r < end; r++) { sum += to_float(x[(size_t)r * cols + c]); }
    partial[(size_t)chunk * cols + c] = sum;
}

// out[c] += sum over chunks of partial[chunk * stride + c], in chunk order
__global__ void reduce_partials_kernel(floatX *out, const float *partial, int chunks, int cols, int stride) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) { return; }
    float sum = 0.0f;
    for (int k = 0; k < chunks; k++) { sum += partial[(size_t)k * stride + c]; }
    out[c] = from_float(to_float(out[c]) + sum);
}

// Attention works per head on (T, HS) matrices, so q, k and v are first copied
// out of qkv (B, T, 3, NH, HS) into qkvr (3, B, NH, T, HS); the inverse copies
// the gradient back.
__global__ void permute_qkv_kernel(floatX *qkvr, floatX *qkv, int B, int T, int NH, int HS, int inverse) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, C = (size_t)NH * HS;
    if (i >= (size_t)B * T * 3 * C) { return; }
    // i indexes qkv: (b, t, which, h, d)
    size_t d = i % HS, h = (i / HS) % NH, which = (i / C) % 3, t = (i / (3 * C)) % T, b = i / (3 * C * T);
    size_t r = (((which * B + b) * NH + h) * T + t) * HS + d;
    if (inverse) { qkv[i] = qkvr[r]; } else { qkvr[r] = qkv[i]; }
}

// y (B, T, C) <-> yr (B, NH, T, HS): the heads' outputs side by side again
__global__ void permute_heads_kernel(floatX *yr, floatX *y, int B, int T, int NH, int HS, int to_heads) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, C = (size_t)NH * HS;
    if (i >= (size_t)B * T * C) { return; }
    size_t d = i % HS, h = (i / HS) % NH, t = (i / C) % T, b = i / (C * T);
    size_t r = ((b * NH + h) * T + t) * HS + d;
    if (to_heads) { yr[r] = y[i]; } else { y[i] = yr[r]; }
}

// Causal softmax over each row t of the (already scaled) scores, in place: the
// entries t2 <= t become probabilities, those above the diagonal 0. A warp per row.
__global__ void causal_softmax_kernel(floatX *att, int rows, int T) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) { return; }
    int t = row % T;
    floatX *a = att + (size_t)row * T;
    float m = -INFINITY;
    for (int i = lane; i <= t; i += 32) { m = fmaxf(m, to_float(a[i])); }
    m = warp_max(m);
    float sum = 0.0f;
    for (int i = lane; i <= t; i += 32) { sum += expf(to_float(a[i]) - m); }
    float inv = 1.0f / warp_sum(sum);
    for (int i = lane; i < T; i += 32) { a[i] = from_float(i <= t ? expf(to_float(a[i]) - m) * inv : 0.0f); }
}

// Through the softmax, in place: datt becomes the gradient of the scores,
// att (datt - sum(att datt)) times the scale the scores were multiplied by.
__global__ void causal_softmax_backward_kernel(floatX *datt, const floatX *att, int rows, int T, float scale) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) { return; }
    int t = row % T;
    const floatX *a = att + (size_t)row * T;
    floatX *d = datt + (size_t)row * T;
    float dot = 0.0f;
    for (int i = lane; i <= t; i += 32) { dot += to_float(a[i]) * to_float(d[i]); }
    dot = warp_sum(dot);
    for (int i = lane; i < T; i += 32) { d[i] = from_float(i <= t ? to_float(a[i]) * (to_float(d[i]) - dot) * scale : 0.0f); }
}

// Flash attention (-F 1): train_gpt2.c's flash_attention_forward and _backward on the GPU,
// the same numbers without the (B, NH, T, T) probabilities: each row's log-sum-exp is all
// the forward pass keeps. These are dev/cuda/flash_attention.cu's variant 3 (warp tiles),
// checked there against attention in double and timed against the materialised kernels
// above. A block of 4 warps takes 16 queries of a head; keys and values pass through shared
// memory 32 at a time; a warp scores 32 keys against its query at once (lane j: key k0 + j),
// keeps the online softmax's running maximum and sum (two shuffle reductions a tile), and
// each lane adds HS/32 of the output, the probabilities passed lane to lane by shuffles. The
// backward pass: D = rowsum(dO * O) a warp per row; a block per 16 keys of a key/value head
// walks the query tiles after them (over the query heads that share it) for dk and dv; a
// block per 16 queries walks the key tiles before them for dq. Each output is summed by one
// thread in a fixed order: no atomics, the same bits every run. Heads of any size up to 128
// (the tiles are sized by HSP, HS rounded up to 32; numbers past HS are zeros there).
// floatA, the type of q, k, v, out and their gradients, is floatX here; finetune_lora.cu runs
// the same kernels (a shared copy) on its fp32 activations, with floatA float. So they convert
// with casts, which mean the same for every floatA, not with to_float and from_float.
typedef floatX floatA;

// --- begin shared-copy: flash-attention-kernels ---
// Where the heads are: query head h of position t of sequence b at q[(b T + t) q_row + h HS],
// its key and value at k, v[(b T + t) kv_row + (h / (NH / NKV)) HS]; out and dout rows o_row
typedef struct {
    int B, T, NH, NKV, HS;
    int q_row, kv_row, o_row; // elements between positions t and t+1 of q (and dq), k and v, out (and dout)
} Heads;

// D_t = dO_t . O_t, the softmax backward's row term (a warp per row b, h, t)
__global__ void rowdot_kernel(float *D, const floatA *dout, const floatA *out, Heads s) {
    size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32, T = s.T;
    if (row >= (size_t)s.B * s.NH * T) { return; }
    int t = (int)(row % T), h = (int)(row / T % s.NH), b = (int)(row / T / s.NH);
    size_t o = ((size_t)b * T + t) * s.o_row + h * s.HS;
    float d = 0.0f;
    for (int i = lane; i < s.HS; i += 32) { d += (float)dout[o + i] * (float)out[o + i]; }
    d = warp_sum(d);
    if (lane == 0) { D[row] = d; }
}

#define FLASH_WARPS 4 // warps per block
#define FLASH_ROWS 4 // queries (or keys) per warp
#define FLASH_BR (FLASH_WARPS * FLASH_ROWS) // queries (or keys) per block
#define FLASH_BC 32 // keys (or queries) per shared tile: one a lane

template <int HSP>
__global__ void __launch_bounds__(FLASH_WARPS * 32) flash_forward_kernel3(floatA *out, float *lse, const floatA *q,
                                                                        const floatA *k, const floatA *v, Heads s,
                                                                        float scale) {
    __shared__ float k_tile[FLASH_BC][HSP + 1], v_tile[FLASH_BC][HSP], q_rows[FLASH_BR][HSP];
    int b = blockIdx.y / s.NH, h = blockIdx.y % s.NH, kvh = h / (s.NH / s.NKV), T = s.T;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int tile = gridDim.x - 1 - blockIdx.x, t0 = tile * FLASH_BR, last = min(t0 + FLASH_BR, T) - 1;
    for (int e = threadIdx.x; e < FLASH_BR * HSP; e += blockDim.x) {
        int r = e / HSP, i = e % HSP;
        q_rows[r][i] = t0 + r < T && i < s.HS ? (float)q[((size_t)b * T + t0 + r) * s.q_row + h * s.HS + i] * scale : 0.0f;
    }
    float m[FLASH_ROWS], l[FLASH_ROWS], acc[FLASH_ROWS][HSP / 32];
#pragma unroll
    for (int r = 0; r < FLASH_ROWS; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int c = 0; c < HSP / 32; c++) { acc[r][c] = 0.0f; }
    }
    for (int k0 = 0; k0 <= last; k0 += FLASH_BC) {
        __syncthreads(); // (the first time: q_rows written)
        for (int e = threadIdx.x; e < FLASH_BC * HSP; e += blockDim.x) {
            int j = e / HSP, i = e % HSP;
            size_t kv = ((size_t)b * T + k0 + j) * s.kv_row + kvh * s.HS + i;
            k_tile[j][i] = k0 + j < T && i < s.HS ? (float)k[kv] : 0.0f;
            v_tile[j][i] = k0 + j < T && i < s.HS ? (float)v[kv] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < FLASH_ROWS; r++) {
            int row = warp * FLASH_ROWS + r, t = t0 + row;
            if (t >= T || k0 > t) { continue; } // the same for the whole warp
            int key = k0 + lane;
            float sc = -INFINITY;
            if (key <= t) {
                sc = 0.0f;
                for (int i = 0; i < HSP; i++) { sc += q_rows[row][i] * k_tile[lane][i]; }
            }
            float m_new = fmaxf(m[r], warp_max(sc)), p = key <= t ? expf(sc - m_new) : 0.0f;
            float rescale = expf(m[r] - m_new);
            l[r] = l[r] * rescale + warp_sum(p);
            m[r] = m_new;
#pragma unroll
            for (int c = 0; c < HSP / 32; c++) { acc[r][c] *= rescale; }
            for (int j = 0; j < FLASH_BC; j++) {
                float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
                for (int c = 0; c < HSP / 32; c++) { acc[r][c] += pj * v_tile[j][lane + 32 * c]; }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < FLASH_ROWS; r++) {
        int t = t0 + warp * FLASH_ROWS + r;
        if (t >= T) { continue; }
#pragma unroll
        for (int c = 0; c < HSP / 32; c++) {
            if (lane + 32 * c < s.HS) { out[((size_t)b * T + t) * s.o_row + h * s.HS + lane + 32 * c] = (floatA)(acc[r][c] / l[r]); }
        }
        if (lane == 0) { lse[((size_t)b * s.NH + h) * T + t] = m[r] + logf(l[r]); }
    }
}

// dk, dv: a warp per key (4 keys a warp, 16 a block); per query tile of 32 (lane j: query
// q0 + j) the lanes compute P and dS of their query against the warp's key, then each lane
// owns HSP/32 of dk and dv and adds the 32 queries' terms, passed by shuffles.
template <int HSP>
__global__ void __launch_bounds__(FLASH_WARPS * 32) flash_dkdv_kernel3(floatA *dk, floatA *dv, const floatA *q,
                                                                     const floatA *k, const floatA *v,
                                                                     const floatA *dout, const float *lse,
                                                                     const float *D, Heads s, float scale) {
    // (dynamic shared memory: 49 KiB at HSP = 128, past the 48 KiB a block gets by default)
    extern __shared__ float smem[];
    float(*q_tile)[HSP + 1] = (float(*)[HSP + 1])smem, (*do_tile)[HSP + 1] = q_tile + FLASH_BC;
    float(*k_rows)[HSP] = (float(*)[HSP])(do_tile + FLASH_BC), (*v_rows)[HSP] = k_rows + FLASH_BR;
    int b = blockIdx.y / s.NKV, kvh = blockIdx.y % s.NKV, G = s.NH / s.NKV, T = s.T;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, k0 = blockIdx.x * FLASH_BR;
    for (int e = threadIdx.x; e < FLASH_BR * HSP; e += blockDim.x) {
        int r = e / HSP, i = e % HSP;
        size_t kv = ((size_t)b * T + k0 + r) * s.kv_row + kvh * s.HS + i;
        k_rows[r][i] = k0 + r < T && i < s.HS ? (float)k[kv] * scale : 0.0f;
        v_rows[r][i] = k0 + r < T && i < s.HS ? (float)v[kv] : 0.0f;
    }
    float dk_acc[FLASH_ROWS][HSP / 32], dv_acc[FLASH_ROWS][HSP / 32];
#pragma unroll
    for (int r = 0; r < FLASH_ROWS; r++) {
#pragma unroll
        for (int c = 0; c < HSP / 32; c++) { dk_acc[r][c] = dv_acc[r][c] = 0.0f; }
    }
    for (int h = kvh * G; h < kvh * G + G; h++) {
        for (int q0 = k0 / FLASH_BC * FLASH_BC; q0 < T; q0 += FLASH_BC) {
            __syncthreads();
            for (int e = threadIdx.x; e < FLASH_BC * HSP; e += blockDim.x) {
                int j = e / HSP, i = e % HSP, t = q0 + j;
                q_tile[j][i] = t < T && i < s.HS ? (float)q[((size_t)b * T + t) * s.q_row + h * s.HS + i] : 0.0f;
                do_tile[j][i] = t < T && i < s.HS ? (float)dout[((size_t)b * T + t) * s.o_row + h * s.HS + i] : 0.0f;
            }
            __syncthreads();
            int t = q0 + lane; // this lane's query
            size_t row = ((size_t)b * s.NH + h) * T + t;
            float lse_t = t < T ? lse[row] : 0.0f, d_t = t < T ? D[row] : 0.0f;
#pragma unroll
            for (int r = 0; r < FLASH_ROWS; r++) {
                int key = k0 + warp * FLASH_ROWS + r;
                if (key >= T || q0 + FLASH_BC <= key) { continue; } // no query of this tile sees it (whole warp)
                float p = 0.0f, ds = 0.0f;
                if (t < T && t >= key) {
                    float sc = 0.0f, dp = 0.0f;
                    for (int i = 0; i < HSP; i++) {
                        sc += q_tile[lane][i] * k_rows[warp * FLASH_ROWS + r][i];
                        dp += do_tile[lane][i] * v_rows[warp * FLASH_ROWS + r][i];
                    }
                    p = expf(sc - lse_t);
                    ds = p * (dp - d_t);
                }
                for (int j = 0; j < FLASH_BC; j++) {
                    float pj = __shfl_sync(0xffffffffu, p, j), dsj = __shfl_sync(0xffffffffu, ds, j);
#pragma unroll
                    for (int c = 0; c < HSP / 32; c++) {
                        dv_acc[r][c] += pj * do_tile[j][lane + 32 * c];
                        dk_acc[r][c] += dsj * q_tile[j][lane + 32 * c];
                    }
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < FLASH_ROWS; r++) {
        int key = k0 + warp * FLASH_ROWS + r;
        if (key >= T) { continue; }
        size_t kv = ((size_t)b * T + key) * s.kv_row + kvh * s.HS;
#pragma unroll
        for (int c = 0; c < HSP / 32; c++) {
            if (lane + 32 * c >= s.HS) { continue; }
            dk[kv + lane + 32 * c] = (floatA)(dk_acc[r][c] * scale);
            dv[kv + lane + 32 * c] = (floatA)dv_acc[r][c];
        }
    }
}

// dq: as the forward kernel 3, a warp per query, the lanes across 32 keys for dS, then
// across the head for dq = dS . K.
template <int HSP>
__global__ void __launch_bounds__(FLASH_WARPS * 32) flash_dq_kernel3(floatA *dq, const floatA *q, const floatA *k,
                                                                   const floatA *v, const floatA *dout,
                                                                   const float *lse, const float *D, Heads s,
                                                                   float scale) {
    extern __shared__ float smem[]; // (the same 49 KiB at HSP = 128 as flash_dkdv_kernel3's)
    float(*k_tile)[HSP + 1] = (float(*)[HSP + 1])smem, (*v_tile)[HSP + 1] = k_tile + FLASH_BC;
    float(*q_rows)[HSP] = (float(*)[HSP])(v_tile + FLASH_BC), (*do_rows)[HSP] = q_rows + FLASH_BR;
    int b = blockIdx.y / s.NH, h = blockIdx.y % s.NH, kvh = h / (s.NH / s.NKV), T = s.T;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int tile = gridDim.x - 1 - blockIdx.x, t0 = tile * FLASH_BR, last = min(t0 + FLASH_BR, T) - 1;
    for (int e = threadIdx.x; e < FLASH_BR * HSP; e += blockDim.x) {
        int r = e / HSP, i = e % HSP, t = t0 + r;
        q_rows[r][i] = t < T && i < s.HS ? (float)q[((size_t)b * T + t) * s.q_row + h * s.HS + i] * scale : 0.0f;
        do_rows[r][i] = t < T && i < s.HS ? (float)dout[((size_t)b * T + t) * s.o_row + h * s.HS + i] : 0.0f;
    }
    float dq_acc[FLASH_ROWS][HSP / 32], lse_r[FLASH_ROWS], d_r[FLASH_ROWS];
#pragma unroll
    for (int r = 0; r < FLASH_ROWS; r++) {
        int t = t0 + warp * FLASH_ROWS + r;
        lse_r[r] = t < T ? lse[((size_t)b * s.NH + h) * T + t] : 0.0f;
        d_r[r] = t < T ? D[((size_t)b * s.NH + h) * T + t] : 0.0f;
#pragma unroll
        for (int c = 0; c < HSP / 32; c++) { dq_acc[r][c] = 0.0f; }
    }
    for (int k0 = 0; k0 <= last; k0 += FLASH_BC) {
        __syncthreads();
        for (int e = threadIdx.x; e < FLASH_BC * HSP; e += blockDim.x) {
            int j = e / HSP, i = e % HSP;
            size_t kv = ((size_t)b * T + k0 + j) * s.kv_row + kvh * s.HS + i;
            k_tile[j][i] = k0 + j < T && i < s.HS ? (float)k[kv] : 0.0f;
            v_tile[j][i] = k0 + j < T && i < s.HS ? (float)v[kv] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < FLASH_ROWS; r++) {
            int row = warp * FLASH_ROWS + r, t = t0 + row, key = k0 + lane;
            if (t >= T || k0 > t) { continue; }
            float ds = 0.0f;
            if (key <= t) {
                float sc = 0.0f, dp = 0.0f;
                for (int i = 0; i < HSP; i++) {
                    sc += q_rows[row][i] * k_tile[lane][i];
                    dp += do_rows[row][i] * v_tile[lane][i];
                }
                ds = expf(sc - lse_r[r]) * (dp - d_r[r]);
            }
            for (int j = 0; j < FLASH_BC; j++) {
                float dsj = __shfl_sync(0xffffffffu, ds, j);
#pragma unroll
                for (int c = 0; c < HSP / 32; c++) { dq_acc[r][c] += dsj * k_tile[j][lane + 32 * c]; }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < FLASH_ROWS; r++) {
        int t = t0 + warp * FLASH_ROWS + r;
        if (t >= T) { continue; }
#pragma unroll
        for (int c = 0; c < HSP / 32; c++) {
            if (lane + 32 * c < s.HS) { dq[((size_t)b * T + t) * s.q_row + h * s.HS + lane + 32 * c] = (floatA)(dq_acc[r][c] * scale); }
        }
    }
}

// the dynamic shared memory of the two backward kernels: 49 KiB at HS = 128, more than a
// block gets without asking (cudaFuncSetAttribute, once for each head size)
template <int HSP>
static size_t flash_backward_smem(void) {
    return (2 * FLASH_BC * (HSP + 1) + 2 * FLASH_BR * HSP) * sizeof(float);
}
// --- end shared-copy: flash-attention-kernels ---

// GELU, tanh approximation, as train_gpt2.c
#define GELU_SCALE 0.7978845608028654f // sqrt(2/pi)
__global__ void gelu_forward_kernel(floatX *out, const floatX *inp, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) { return; }
    float x = to_float(inp[i]);
    out[i] = from_float(0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x))));
}

// The epilogues' work, for a cuBLASLt that cannot fuse it (see matmul_lt):
// out (rows, OC) += bias, broadcast over the rows; and d *= GELU'(x), in place
__global__ void add_bias_kernel(floatX *out, const floatX *bias, size_t N, int OC) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) { out[i] = from_float(to_float(out[i]) + to_float(bias[i % OC])); }
}
__global__ void gelu_backward_inplace_kernel(floatX *d, const floatX *inp, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) { return; }
    float x = to_float(inp[i]);
    float th = tanhf(GELU_SCALE * (x + 0.044715f * x * x * x));
    float du = GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
    d[i] = from_float(to_float(d[i]) * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du));
}

__global__ void residual_forward_kernel(floatX *out, const floatX *inp1, const floatX *inp2, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) { out[i] = from_float(to_float(inp1[i]) + to_float(inp2[i])); }
}

// The fused classifier, a block per position. One pass over the V logits finds
// the max and the sum of exponentials together (the running sum is rescaled
// whenever the max grows: the "online softmax" of Milakov & Gimelshein 2018);
// the loss is logsumexp - logit[target]. With dloss > 0 a second pass writes the
// gradient (softmax - onehot) * dloss over the logits, in place; the padded
// columns V..Vp-1 get 0. The probabilities are never stored.
__global__ void fused_classifier_kernel(floatX *logits, float *losses, const int *targets, float dloss, int V, int Vp) {
    size_t bt = blockIdx.x;
    floatX *z = logits + bt * Vp;
    float m = -INFINITY, s = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float x = to_float(z[i]);
        if (x > m) {
            s = s * expf(m - x) + 1.0f;
            m = x;
        } else {
            s += expf(x - m);
        }
    }
    float block_m = block_max(m);
    s = block_sum(m == -INFINITY ? 0.0f : s * expf(m - block_m));
    float lse = block_m + logf(s);
    int target = targets[bt];
    float target_logit = to_float(z[target]);
    __syncthreads(); // everyone has read z[target] before it is overwritten
    if (threadIdx.x == 0) { losses[bt] = lse - target_logit; }
    if (dloss > 0.0f) {
        for (int i = threadIdx.x; i < Vp; i += blockDim.x) {
            float g = i < V ? (expf(to_float(z[i]) - lse) - (i == target ? 1.0f : 0.0f)) * dloss : 0.0f;
            z[i] = from_float(g);
        }
    }
}

// AdamW on one tensor, as gpt2_update in train_gpt2.c. With master weights (bf16,
// fp16) the update is made to the fp32 copy and the parameter is its rounding;
// without, a bf16 parameter is rounded stochastically (seed: random bits for this call;
// first: param[0]'s index in its tensor, which the random bits are drawn for, so that
// ZeRO's shards round as the whole tensor would).
__global__ void adamw_kernel(floatX *param, float *master, const floatX *grad, float *m, float *v, size_t n, float beta1,
                             float beta2, float step_size, float sqrt_bc2, float eps, float decay, float grad_scale,
                             uint32_t seed, size_t first) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) { return; }
    float p = master != NULL ? master[i] : to_float(param[i]);
    float g = to_float(grad[i]) * grad_scale;
    m[i] = beta1 * m[i] + (1.0f - beta1) * g;
    v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
    p = p * decay - step_size * m[i] / (sqrtf(v[i]) / sqrt_bc2 + eps);
    param[i] = master != NULL ? from_float(p) : from_float_stochastic(p, hash_u32(seed, (uint32_t)(first + i)));
    if (master != NULL) { master[i] = p; }
}

// The squared gradient norm in NORM_BLOCKS partial sums: block k sums a fixed
// stride of the gradients (fixed order); the host adds the partials in double.
#define NORM_BLOCKS 1024
__global__ void norm_partials_kernel(float *partial, const floatX *g, size_t n) {
    float s = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float x = to_float(g[i]);
        s += x * x;
    }
    s = block_sum(s);
    if (threadIdx.x == 0) { partial[blockIdx.x] = s; }
}
// The same over the values [first, first + width) of each of g's `chunks` chunks of s
// values (a ZeRO-1 rank's pieces of a tensor)
__global__ void norm_strided_partials_kernel(float *partial, const floatX *g, size_t chunks, size_t s, size_t first,
                                             size_t width) {
    float sum = 0.0f;
    size_t n = chunks * width;
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += (size_t)gridDim.x * blockDim.x) {
        float x = to_float(g[t / width * s + first + t % width]);
        sum += x * x;
    }
    sum = block_sum(sum);
    if (threadIdx.x == 0) { partial[blockIdx.x] = sum; }
}

// dst += src, in floatX (ZeRO-2: a layer's summed gradients into this rank's shard of them)
__global__ void accumulate_kernel(floatX *dst, const floatX *src, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { dst[i] = from_float(to_float(dst[i]) + to_float(src[i])); }
}

// float -> floatX (loading fp32 checkpoints) and back (writing them)
__global__ void convert_kernel(floatX *out, const float *inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { out[i] = from_float(inp[i]); }
}

// ----------------------------------------------------------------------------
// the layers: launchers with train_gpt2.c's names, in the order data flows

#define BLOCK 256 // threads per block of the elementwise kernels
// Partial sums of the row reductions: (chunks, up to 4C) floats. One buffer for
// the process, grown by gpt2_allocate_activations to the largest model's need
// (several models may be alive at once, as in the tests), never shrunk.
static float *reduce_scratch;
static size_t reduce_scratch_floats;

// Every matmul goes through cuBLASLt, whose epilogues add the bias and apply GELU
// (or GELU's derivative) to the results while they are still in registers: no
// separate pass over the output. 32 MiB of workspace is what NVIDIA recommends for
// Hopper (the cuBLAS documentation, "cublasSetWorkspace").
static cublasLtHandle_t cublaslt_handle;
static void *cublaslt_workspace;
#define CUBLASLT_WORKSPACE_BYTES ((size_t)32 << 20)
typedef enum {
    EPILOGUE_NONE,  // C = alpha op(A) op(B) + beta C
    EPILOGUE_BIAS,  // + bias (N), broadcast over the M rows
    EPILOGUE_GELU,  // + bias, then GELU; the pre-GELU values are stored in aux (M, N)
    EPILOGUE_DGELU, // times GELU'(aux): the backward of EPILOGUE_GELU's activation
} Epilogue;

// C = epilogue(alpha op(A) @ op(B) + beta C), all row-major, `batch` times with
// the given strides. op(A) = A stored (M, K), or with ta = 1 A^T of an A stored
// (K, M); likewise op(B) = B stored (K, N), or with tb = 1 B^T of a B stored (N, K).
// cuBLASLt is column-major: a row-major (R, S) matrix is, as it lies in memory, the
// column-major (S, R) matrix of its transpose, so we ask for C^T = op(B)^T op(A)^T,
// and the bias (one per column of our C) is one per row of cuBLASLt's. Inputs and
// outputs are floatX; products are summed in fp32 (on the tensor cores in BF16),
// and the epilogue works in fp32 before the result is rounded.
static void matmul_lt(floatX *C, const floatX *A, const floatX *B, int M, int N, int K, int ta, int tb, float alpha,
                      float beta, int batch, size_t stride_a, size_t stride_b, size_t stride_c, Epilogue epilogue,
                      const floatX *bias, floatX *aux) {
    cublasLtMatmulDesc_t desc;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t op_a = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = ta ? CUBLAS_OP_T : CUBLAS_OP_N; // cuBLASLt's A is our B
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
    uint32_t epi = epilogue == EPILOGUE_BIAS ? CUBLASLT_EPILOGUE_BIAS
                 : epilogue == EPILOGUE_GELU ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                 : epilogue == EPILOGUE_DGELU ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_DEFAULT;
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    if (epilogue == EPILOGUE_BIAS || epilogue == EPILOGUE_GELU) {
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    if (epilogue == EPILOGUE_GELU || epilogue == EPILOGUE_DGELU) {
        int64_t aux_ld = N; // aux has C's shape and layout
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
    }
    // the stored matrices, column-major: (rows, cols, leading dimension) and the batch
    cublasLtMatrixLayout_t la, lb, lc;
    cublasCheck(cublasLtMatrixLayoutCreate(&la, CUBLAS_FLOATX, tb ? K : N, tb ? N : K, tb ? K : N));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, CUBLAS_FLOATX, ta ? M : K, ta ? K : M, ta ? M : K));
    cublasCheck(cublasLtMatrixLayoutCreate(&lc, CUBLAS_FLOATX, N, M, N));
    if (batch > 1) {
        int32_t count = batch;
        int64_t strides[3] = {(int64_t)stride_b, (int64_t)stride_a, (int64_t)stride_c};
        cublasLtMatrixLayout_t layouts[3] = {la, lb, lc};
        for (int i = 0; i < 3; i++) {
            cublasCheck(cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
            cublasCheck(cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
                                                         sizeof(strides[i])));
        }
    }
    // cuBLASLt's heuristic picks the kernel; it caches its answers for repeated shapes
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t workspace = CUBLASLT_WORKSPACE_BYTES;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                     sizeof(workspace)));
    cublasLtMatmulHeuristicResult_t heuristic;
    int found = 0;
    cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(cublaslt_handle, desc, la, lb, lc, lc, pref, 1, &heuristic, &found);
    int ok = status == CUBLAS_STATUS_SUCCESS && found > 0; // (cuBLASLt says "not supported" either way)
    if (ok) {
        cublasCheck(cublasLtMatmul(cublaslt_handle, desc, &alpha, B, la, A, lb, &beta, C, lc, C, lc, &heuristic.algo,
                                   cublaslt_workspace, CUBLASLT_WORKSPACE_BYTES, 0));
    }
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    cublasCheck(cublasLtMatrixLayoutDestroy(la));
    cublasCheck(cublasLtMatrixLayoutDestroy(lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(lc));
    cublasCheck(cublasLtMatmulDescDestroy(desc));
    if (ok) { return; }
    if (epilogue == EPILOGUE_NONE || batch > 1) {
        fprintf(stderr, "Error: cuBLASLt has no algorithm for a %d x %d x %d matmul (ta %d, tb %d, batch %d, epilogue %d): %s\n",
                M, N, K, ta, tb, batch, (int)epilogue, cublasGetStatusString(status));
        exit(EXIT_FAILURE);
    }
    // No fused epilogue for this shape and precision on this GPU and cuBLASLt: the
    // plain matmul, then the epilogue's work by our kernels (the same arithmetic,
    // with the matmul's result rounded to floatX in between)
    static int said = 0;
    if (!said) {
        printf("note: cuBLASLt cannot fuse epilogue %d into a %d x %d x %d matmul here (%s): our kernels do it\n",
               (int)epilogue, M, N, K, cublasGetStatusString(status));
        said = 1;
    }
    size_t n = (size_t)M * N;
    if (epilogue == EPILOGUE_BIAS) {
        matmul_lt(C, A, B, M, N, K, ta, tb, alpha, beta, 1, 0, 0, 0, EPILOGUE_NONE, NULL, NULL);
        add_bias_kernel<<<ceil_div(n, BLOCK), BLOCK>>>(C, bias, n, N);
    } else if (epilogue == EPILOGUE_GELU) { // the pre-GELU values into aux, then GELU
        matmul_lt(aux, A, B, M, N, K, ta, tb, alpha, beta, 1, 0, 0, 0, EPILOGUE_BIAS, bias, NULL);
        gelu_forward_kernel<<<ceil_div(n, BLOCK), BLOCK>>>(C, aux, n);
    } else { // EPILOGUE_DGELU
        matmul_lt(C, A, B, M, N, K, ta, tb, alpha, beta, 1, 0, 0, 0, EPILOGUE_NONE, NULL, NULL);
        gelu_backward_inplace_kernel<<<ceil_div(n, BLOCK), BLOCK>>>(C, aux, n);
    }
    cudaCheck(cudaGetLastError());
}
static void matmul_strided(floatX *C, const floatX *A, const floatX *B, int M, int N, int K, int ta, int tb, float alpha,
                           float beta, int batch, size_t stride_a, size_t stride_b, size_t stride_c) {
    matmul_lt(C, A, B, M, N, K, ta, tb, alpha, beta, batch, stride_a, stride_b, stride_c, EPILOGUE_NONE, NULL, NULL);
}
static void matmul(floatX *C, const floatX *A, const floatX *B, int M, int N, int K, int ta, int tb, float alpha, float beta) {
    matmul_lt(C, A, B, M, N, K, ta, tb, alpha, beta, 1, 0, 0, 0, EPILOGUE_NONE, NULL, NULL);
}

void encoder_forward(floatX *out, const int *inp, const floatX *wte, const floatX *wpe, size_t B, size_t T, size_t C) {
    encoder_forward_kernel<<<ceil_div(B * T * C, BLOCK), BLOCK>>>(out, inp, wte, wpe, (int)B, (int)T, (int)C);
    cudaCheck(cudaGetLastError());
}

// inp: the tokens in host memory. Their positions are sorted by token here (a
// counting sort, stable: positions of a token stay in order), so that the kernel
// can sum each token's rows without atomics.
void encoder_backward(floatX *dwte, floatX *dwpe, const floatX *dout, const int *inp, size_t B, size_t T, size_t C) {
    static int *order, *seg_start, *seg_token, *count, *dev; // host buffers, and one device block for all three
    static size_t capacity, count_capacity;
    size_t N = B * T;
    int max_token = 0;
    for (size_t i = 0; i < N; i++) { max_token = inp[i] > max_token ? inp[i] : max_token; }
    if (N > capacity) {
        free(order); free(seg_start); free(seg_token);
        cuda_free_check(dev);
        order = (int *)mallocCheck(N * sizeof(int));
        seg_start = (int *)mallocCheck((N + 1) * sizeof(int));
        seg_token = (int *)mallocCheck(N * sizeof(int));
        dev = (int *)cuda_malloc_check((3 * N + 1) * sizeof(int), "the embedding gradient's token buckets");
        capacity = N;
    }
    if ((size_t)max_token + 2 > count_capacity) {
        free(count);
        count_capacity = (size_t)max_token + 2;
        count = (int *)mallocCheck(count_capacity * sizeof(int));
    }
    memset(count, 0, count_capacity * sizeof(int));
    for (size_t i = 0; i < N; i++) { count[inp[i] + 1]++; }
    int segments = 0;
    for (int tok = 0; tok <= max_token; tok++) {
        if (count[tok + 1] > 0) {
            seg_token[segments] = tok;
            seg_start[segments++] = count[tok];
        }
        count[tok + 1] += count[tok]; // count[tok] is now where token tok's positions start
    }
    seg_start[segments] = (int)N;
    for (size_t i = 0; i < N; i++) { order[count[inp[i]]++] = (int)i; }
    cudaCheck(cudaMemcpy(dev, order, N * sizeof(int), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dev + N, seg_start, (segments + 1) * sizeof(int), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dev + 2 * N + 1, seg_token, segments * sizeof(int), cudaMemcpyHostToDevice));
    encoder_backward_wte_kernel<<<segments, BLOCK>>>(dwte, dout, dev, dev + N, dev + 2 * N + 1, (int)C);
    cudaCheck(cudaGetLastError());
    encoder_backward_wpe_kernel<<<ceil_div(T * C, BLOCK), BLOCK>>>(dwpe, dout, (int)B, (int)T, (int)C);
    cudaCheck(cudaGetLastError());
}

void layernorm_forward(floatX *out, float *mean, float *rstd, const floatX *inp, const floatX *weight,
                       const floatX *bias, size_t B, size_t T, size_t C) {
    layernorm_forward_kernel<<<ceil_div(B * T, BLOCK / 32), BLOCK>>>(out, mean, rstd, inp, weight, bias, (int)(B * T), (int)C);
    cudaCheck(cudaGetLastError());
}

void layernorm_backward(floatX *dinp, floatX *dweight, floatX *dbias, const floatX *dout, const floatX *inp,
                        const floatX *weight, const float *mean, const float *rstd, size_t B, size_t T, size_t C) {
    int N = (int)(B * T), chunks = (int)ceil_div(N, ROWS_PER_CHUNK);
    layernorm_backward_kernel<<<ceil_div(N, BLOCK / 32), BLOCK>>>(dinp, dout, inp, weight, mean, rstd, N, (int)C);
    cudaCheck(cudaGetLastError());
    layernorm_param_partials_kernel<<<dim3(chunks, ceil_div(C, BLOCK)), BLOCK>>>(reduce_scratch, dout, inp, mean, rstd, N, (int)C);
    cudaCheck(cudaGetLastError());
    reduce_partials_kernel<<<ceil_div(C, BLOCK), BLOCK>>>(dweight, reduce_scratch, chunks, (int)C, 2 * (int)C);
    cudaCheck(cudaGetLastError());
    reduce_partials_kernel<<<ceil_div(C, BLOCK), BLOCK>>>(dbias, reduce_scratch + C, chunks, (int)C, 2 * (int)C);
    cudaCheck(cudaGetLastError());
}

// out (B,T,OC) = inp (B,T,C) @ weight^T + bias, weight (OC,C) as in nn.Linear;
// the bias is added in cuBLASLt's epilogue
void matmul_forward(floatX *out, const floatX *inp, const floatX *weight, const floatX *bias,
                    size_t B, size_t T, size_t C, size_t OC) {
    matmul_lt(out, inp, weight, (int)(B * T), (int)OC, (int)C, 0, 1, 1.0f, 0.0f, 1, 0, 0, 0,
              bias != NULL ? EPILOGUE_BIAS : EPILOGUE_NONE, bias, NULL);
}

// out = GELU(inp @ weight^T + bias), and pre_gelu (B,T,OC) = the values before
// the GELU, for the backward pass: the MLP's first layer and its activation in one
// cuBLASLt call (GELU with the tanh approximation, as GPT-2 and cuBLASLt have it)
void matmul_forward_gelu(floatX *out, floatX *pre_gelu, const floatX *inp, const floatX *weight, const floatX *bias,
                         size_t B, size_t T, size_t C, size_t OC) {
    matmul_lt(out, inp, weight, (int)(B * T), (int)OC, (int)C, 0, 1, 1.0f, 0.0f, 1, 0, 0, 0, EPILOGUE_GELU, bias, pre_gelu);
}

// dinp (B,T,C) = scale dout @ weight (written); dweight (OC,C) += scale dout^T @ inp;
// dbias (OC) += scale * column sums of dout. scale is 1 except for the classifier,
// whose dlogits were written before the loss scale was known. With pre_gelu, the
// layer's input was GELU(pre_gelu), and dinp is the gradient at pre_gelu instead:
// (dout @ weight) * GELU'(pre_gelu), in cuBLASLt's epilogue.
static void matmul_backward_full(floatX *dinp, floatX *dweight, floatX *dbias, const floatX *dout, const floatX *inp,
                                 const floatX *weight, size_t B, size_t T, size_t C, size_t OC, float scale,
                                 const floatX *pre_gelu) {
    matmul_lt(dinp, dout, weight, (int)(B * T), (int)C, (int)OC, 0, 0, scale, 0.0f, 1, 0, 0, 0,
              pre_gelu != NULL ? EPILOGUE_DGELU : EPILOGUE_NONE, NULL, (floatX *)pre_gelu);
    matmul(dweight, dout, inp, (int)OC, (int)C, (int)(B * T), 1, 0, scale, 1.0f);
    if (dbias != NULL) { // (no layer with a bias is scaled)
        // our own column sums, not cuBLASLt's BGRAD epilogues: those overwrite the
        // bias gradient, and gradient accumulation needs it added to
        int chunks = (int)ceil_div(B * T, ROWS_PER_CHUNK);
        column_partials_kernel<<<dim3(chunks, ceil_div(OC, BLOCK)), BLOCK>>>(reduce_scratch, dout, (int)(B * T), (int)OC);
        cudaCheck(cudaGetLastError());
        reduce_partials_kernel<<<ceil_div(OC, BLOCK), BLOCK>>>(dbias, reduce_scratch, chunks, (int)OC, (int)OC);
        cudaCheck(cudaGetLastError());
    }
}
void matmul_backward(floatX *dinp, floatX *dweight, floatX *dbias, const floatX *dout, const floatX *inp,
                     const floatX *weight, size_t B, size_t T, size_t C, size_t OC) {
    matmul_backward_full(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC, 1.0f, NULL);
}
void matmul_backward_scaled(floatX *dinp, floatX *dweight, floatX *dbias, const floatX *dout, const floatX *inp,
                            const floatX *weight, size_t B, size_t T, size_t C, size_t OC, float scale) {
    matmul_backward_full(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC, scale, NULL);
}
void matmul_backward_gelu(floatX *dpre_gelu, floatX *dweight, floatX *dbias, const floatX *dout, const floatX *inp,
                          const floatX *pre_gelu, const floatX *weight, size_t B, size_t T, size_t C, size_t OC) {
    matmul_backward_full(dpre_gelu, dweight, dbias, dout, inp, weight, B, T, C, OC, 1.0f, pre_gelu);
}

// out (B,T,C) = softmax(q k^T * scale, causal) v per head. qkvr (3,B,NH,T,HS)
// keeps the per-head q, k, v and att (B,NH,T,T) the probabilities, both for the
// backward pass; yr (B,NH,T,HS) is scratch.
void attention_forward(floatX *out, floatX *qkvr, floatX *att, floatX *yr, const floatX *qkv, size_t B, size_t T, size_t C,
                       size_t NH) {
    size_t HS = C / NH, BTC = B * T * C;
    float scale = 1.0f / sqrtf((float)HS);
    permute_qkv_kernel<<<ceil_div(3 * BTC, BLOCK), BLOCK>>>(qkvr, (floatX *)qkv, (int)B, (int)T, (int)NH, (int)HS, 0);
    cudaCheck(cudaGetLastError());
    const floatX *q = qkvr, *k = qkvr + BTC, *v = qkvr + 2 * BTC;
    // scores (T, T) = q (T, HS) @ k^T * scale, for each of the B*NH heads
    matmul_strided(att, q, k, (int)T, (int)T, (int)HS, 0, 1, scale, 0.0f, (int)(B * NH), T * HS, T * HS, T * T);
    causal_softmax_kernel<<<ceil_div(B * NH * T, BLOCK / 32), BLOCK>>>(att, (int)(B * NH * T), (int)T);
    cudaCheck(cudaGetLastError());
    // y (T, HS) = att (T, T) @ v (T, HS)
    matmul_strided(yr, att, v, (int)T, (int)HS, (int)T, 0, 0, 1.0f, 0.0f, (int)(B * NH), T * T, T * HS, T * HS);
    permute_heads_kernel<<<ceil_div(BTC, BLOCK), BLOCK>>>(yr, out, (int)B, (int)T, (int)NH, (int)HS, 0);
    cudaCheck(cudaGetLastError());
}

// dqkv (B,T,3C) written; datt (B,NH,T,T), dqkvr (3,B,NH,T,HS) and dyr (B,NH,T,HS) are scratch
void attention_backward(floatX *dqkv, floatX *dqkvr, floatX *datt, floatX *dyr, const floatX *dout, const floatX *qkvr,
                        const floatX *att, size_t B, size_t T, size_t C, size_t NH) {
    size_t HS = C / NH, BTC = B * T * C;
    float scale = 1.0f / sqrtf((float)HS);
    const floatX *q = qkvr, *k = qkvr + BTC, *v = qkvr + 2 * BTC;
    floatX *dq = dqkvr, *dk = dqkvr + BTC, *dv = dqkvr + 2 * BTC;
    permute_heads_kernel<<<ceil_div(BTC, BLOCK), BLOCK>>>(dyr, (floatX *)dout, (int)B, (int)T, (int)NH, (int)HS, 1);
    cudaCheck(cudaGetLastError());
    int heads = (int)(B * NH);
    // through y = att @ v: dv = att^T @ dy, datt = dy @ v^T
    matmul_strided(dv, att, dyr, (int)T, (int)HS, (int)T, 1, 0, 1.0f, 0.0f, heads, T * T, T * HS, T * HS);
    matmul_strided(datt, dyr, v, (int)T, (int)T, (int)HS, 0, 1, 1.0f, 0.0f, heads, T * HS, T * HS, T * T);
    // through the softmax (and the scale), in place
    causal_softmax_backward_kernel<<<ceil_div(B * NH * T, BLOCK / 32), BLOCK>>>(datt, att, (int)(B * NH * T), (int)T, scale);
    cudaCheck(cudaGetLastError());
    // through the scores q @ k^T: dq = dscores @ k, dk = dscores^T @ q
    matmul_strided(dq, datt, k, (int)T, (int)HS, (int)T, 0, 0, 1.0f, 0.0f, heads, T * T, T * HS, T * HS);
    matmul_strided(dk, datt, q, (int)T, (int)HS, (int)T, 1, 0, 1.0f, 0.0f, heads, T * T, T * HS, T * HS);
    permute_qkv_kernel<<<ceil_div(3 * BTC, BLOCK), BLOCK>>>(dqkvr, dqkv, (int)B, (int)T, (int)NH, (int)HS, 1);
    cudaCheck(cudaGetLastError());
}

// The same attention in linear memory (-F 1: the flash kernels above). out (B,T,C) and lse
// (L's slice: B,NH,T) from qkv (B,T,3C), read where it is: no permute, no (T,T) matrix.

template <int HSP>
static void flash_forward_hsp(floatX *out, float *lse, const floatX *qkv, Heads s) {
    const floatX *q = qkv, *k = qkv + s.NH * s.HS, *v = k + s.NKV * s.HS;
    flash_forward_kernel3<HSP><<<dim3(ceil_div(s.T, FLASH_BR), s.B * s.NH), FLASH_WARPS * 32>>>(out, lse, q, k, v, s,
                                                                                             1.0f / sqrtf((float)s.HS));
    cudaCheck(cudaGetLastError());
}
template <int HSP>
static void flash_backward_hsp(floatX *dqkv, float *D, const floatX *dout, const floatX *qkv, const floatX *out, const float *lse,
                               Heads s) {
    const floatX *q = qkv, *k = qkv + s.NH * s.HS, *v = k + s.NKV * s.HS;
    floatX *dq = dqkv, *dk = dqkv + s.NH * s.HS, *dv = dk + s.NKV * s.HS;
    float scale = 1.0f / sqrtf((float)s.HS);
    static int smem_set = 0; // (one for each HSP)
    size_t smem = flash_backward_smem<HSP>();
    if (!smem_set) {
        cudaCheck(cudaFuncSetAttribute(flash_dkdv_kernel3<HSP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        cudaCheck(cudaFuncSetAttribute(flash_dq_kernel3<HSP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        smem_set = 1;
    }
    rowdot_kernel<<<ceil_div((size_t)s.B * s.NH * s.T, BLOCK / 32), BLOCK>>>(D, dout, out, s);
    flash_dkdv_kernel3<HSP><<<dim3(ceil_div(s.T, FLASH_BR), s.B * s.NKV), FLASH_WARPS * 32, smem>>>(dk, dv, q, k, v, dout, lse, D,
                                                                                                 s, scale);
    flash_dq_kernel3<HSP><<<dim3(ceil_div(s.T, FLASH_BR), s.B * s.NH), FLASH_WARPS * 32, smem>>>(dq, q, k, v, dout, lse, D, s,
                                                                                              scale);
    cudaCheck(cudaGetLastError());
}
void flash_attention_forward(floatX *out, float *lse, const floatX *qkv, size_t B, size_t T, size_t C, size_t NH) {
    int HS = (int)(C / NH);
    Heads s = {(int)B, (int)T, (int)NH, (int)NH, HS, (int)(3 * C), (int)(3 * C), (int)C};
    switch ((HS + 31) / 32) {
    case 1: flash_forward_hsp<32>(out, lse, qkv, s); break;
    case 2: flash_forward_hsp<64>(out, lse, qkv, s); break;
    case 3: flash_forward_hsp<96>(out, lse, qkv, s); break;
    default: flash_forward_hsp<128>(out, lse, qkv, s); break; // (HS <= 128: check_flash refuses larger heads)
    }
}
// dqkv (B,T,3C) written; D (B,NH,T) fp32 scratch
void flash_attention_backward(floatX *dqkv, float *D, const floatX *dout, const floatX *qkv, const floatX *out, const float *lse,
                              size_t B, size_t T, size_t C, size_t NH) {
    int HS = (int)(C / NH);
    Heads s = {(int)B, (int)T, (int)NH, (int)NH, HS, (int)(3 * C), (int)(3 * C), (int)C};
    switch ((HS + 31) / 32) {
    case 1: flash_backward_hsp<32>(dqkv, D, dout, qkv, out, lse, s); break;
    case 2: flash_backward_hsp<64>(dqkv, D, dout, qkv, out, lse, s); break;
    case 3: flash_backward_hsp<96>(dqkv, D, dout, qkv, out, lse, s); break;
    default: flash_backward_hsp<128>(dqkv, D, dout, qkv, out, lse, s); break;
    }
}

#if defined(ENABLE_CUDNN)
// The same attention through cuDNN's fused flash attention (USE_CUDNN=1): its code is in
// its own section, next to main.
void attention_forward_cudnn(floatX *out, float *stats, const floatX *qkv, size_t B, size_t T, size_t NH, size_t C);
void attention_backward_cudnn(floatX *dqkv, const floatX *dout, const floatX *qkv, const floatX *out,
                              const float *stats, size_t B, size_t T, size_t NH, size_t C);
#endif

void gelu_forward(floatX *out, const floatX *inp, size_t N) {
    gelu_forward_kernel<<<ceil_div(N, BLOCK), BLOCK>>>(out, inp, N);
    cudaCheck(cudaGetLastError());
}

void residual_forward(floatX *out, const floatX *inp1, const floatX *inp2, size_t N) {
    residual_forward_kernel<<<ceil_div(N, BLOCK), BLOCK>>>(out, inp1, inp2, N);
    cudaCheck(cudaGetLastError());
}

// losses (B,T) and, with dloss > 0, the gradient of the logits written over them
void fused_classifier(floatX *logits, float *losses, const int *targets, float dloss, size_t B, size_t T, size_t V,
                      size_t Vp) {
    fused_classifier_kernel<<<(unsigned)(B * T), 1024>>>(logits, losses, targets, dloss, (int)V, (int)Vp);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// the model: configuration, parameter and activation tables

// Set from the command line (-r, -w) before a model is built.
// Activation recomputation trades compute for memory: 0 keeps every activation
// for the backward pass; 1 keeps only GELU's input and recomputes its output
// (one elementwise pass per layer, saving L x B x T x 4C values, the largest
// activation after the attention matrices); 2 also recomputes both LayerNorms'
// outputs from their inputs and statistics. The recomputed values are the same
// bits (the same kernels on the same inputs), so levels 1 and 2 train identically.
// Level 0 applies GELU in the MLP matmul's epilogue instead of by our kernel (one
// pass less; nothing to recompute); it rounds once less, so its bits differ.
static int recompute_level = 1;
// (flash_attention, -F, is defined with the device memory's ledger, whose out-of-memory
// message mentions it)
// BF16: AdamW updates an fp32 master copy of the weights (+4 bytes a parameter);
// without it the bf16 weights are updated directly, rounded stochastically so
// that updates smaller than a bf16 step are not lost on average.
static int use_master_weights = 1;
// -M 1: print the memory plan of the run and exit (print_plan_and_exit)
static int plan_only = 0;
// FP16's dynamic loss scaling, with torch.cuda.amp.GradScaler's defaults: start at
// 2^16; halve the scale and skip the update when a gradient overflowed; double it
// after 2000 steps in a row without overflow (torch.amp.GradScaler's documentation).
#if defined(ENABLE_FP16)
#define LOSS_SCALE_INIT 65536.0f
#else
#define LOSS_SCALE_INIT 1.0f
#endif
#define LOSS_SCALE_GROWTH_INTERVAL 2000

// --- begin shared-copy: gpt2-config ---
typedef struct {
    int max_seq_len;       // maxT, e.g. 1024
    int vocab_size;        // V, e.g. 50257
    int padded_vocab_size; // Vp, V rounded up to a multiple of 128, e.g. 50304
    int num_layers;        // L
    int num_heads;         // NH
    int channels;          // C
} GPT2Config;

// The parameters, in the order of llm.c's checkpoint files (which we read and write).
#define NUM_PARAMETER_TENSORS 16
// --- end shared-copy: gpt2-config ---

// --- begin shared-copy: gpt2-shapes ---
// (extern: in C++ a const array would have internal linkage, and a program that does not
// print the names would be warned about it; the tests use them)
extern const char *const PARAMETER_NAMES[NUM_PARAMETER_TENSORS];
const char *const PARAMETER_NAMES[NUM_PARAMETER_TENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

void fill_in_parameter_sizes(size_t *sizes, GPT2Config config) {
    size_t Vp = config.padded_vocab_size, C = config.channels, maxT = config.max_seq_len, L = config.num_layers;
    size_t shapes[NUM_PARAMETER_TENSORS] = {
        Vp * C, maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C,
        L * C, L * C, L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C};
    memcpy(sizes, shapes, sizeof(shapes));
}

// Check a configuration for sizes that cannot work; `source` names where it came
// from. The caps are far above any GPT-2 (V 50257, L 48, C 1600, maxT 1024) and
// keep every size product far from overflowing: a corrupt header is then reported
// as such, not as an attempt to allocate petabytes.
static void gpt2_validate_config(GPT2Config c, const char *source) {
    if (c.max_seq_len <= 0 || c.max_seq_len > (1 << 20) || c.vocab_size <= 0 || c.vocab_size > (1 << 24) ||
        c.padded_vocab_size < c.vocab_size || c.padded_vocab_size > (1 << 24) || c.num_layers <= 0 ||
        c.num_layers > 1024 || c.num_heads <= 0 || c.channels <= 0 || c.channels > (1 << 16) ||
        c.channels % c.num_heads != 0) {
        fprintf(stderr, "Error: %s: impossible model shape maxT=%d V=%d Vp=%d L=%d NH=%d C=%d (need all > 0,"
                " Vp >= V, C divisible by NH, maxT <= 2^20, V and Vp <= 2^24, L <= 1024, C <= 2^16): corrupt header?\n",
                source, c.max_seq_len, c.vocab_size, c.padded_vocab_size, c.num_layers, c.num_heads, c.channels);
        exit(EXIT_FAILURE);
    }
}

static size_t gpt2_count_parameters(GPT2Config config) {
    size_t sizes[NUM_PARAMETER_TENSORS], n = 0;
    fill_in_parameter_sizes(sizes, config);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { n += sizes[i]; }
    return n;
}

// --- end shared-copy: gpt2-shapes ---

// Which tensors get weight decay: the matrices (embeddings and linear weights),
// not the biases and LayerNorm parameters (as in nanoGPT and most GPT training).
static const int WEIGHT_DECAYED[NUM_PARAMETER_TENSORS] = {1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};

// The parameters, in the order of llm.c's checkpoint files, as floatX on the GPU.
typedef struct {
    floatX *wte;      // (Vp, C) token embeddings, tied with the output layer
    floatX *wpe;      // (maxT, C) position embeddings
    floatX *ln1w;     // (L, C)
    floatX *ln1b;     // (L, C)
    floatX *qkvw;     // (L, 3*C, C)
    floatX *qkvb;     // (L, 3*C)
    floatX *attprojw; // (L, C, C)
    floatX *attprojb; // (L, C)
    floatX *ln2w;     // (L, C)
    floatX *ln2b;     // (L, C)
    floatX *fcw;      // (L, 4*C, C)
    floatX *fcb;      // (L, 4*C)
    floatX *fcprojw;  // (L, C, 4*C)
    floatX *fcprojb;  // (L, C)
    floatX *lnfw;     // (C)
    floatX *lnfb;     // (C)
} ParameterTensors;

// The activations of one forward pass, kept for the backward pass. Most are
// floatX; the LayerNorm statistics and the losses stay fp32 (ACT_FP32 below).
#define NUM_ACTIVATION_TENSORS 25
typedef struct {
    floatX *encoded;   // (B, T, C) token + position embeddings
    floatX *ln1;       // (L, B, T, C); with recomputation level 2, one layer's (B, T, C)
    float *ln1_mean;   // (L, B, T)
    float *ln1_rstd;   // (L, B, T)
    floatX *qkv;       // (L, B, T, 3*C)
    floatX *qkvr;      // (L, 3, B, NH, T, HS) q, k, v per head
    floatX *atty;      // (L, B, T, C) attention output, before the projection
    floatX *att;       // (L, B, NH, T, T) softmaxed attention scores
    floatX *attproj;   // (L, B, T, C)
    floatX *residual2; // (L, B, T, C) residual stream after attention
    floatX *ln2;       // (L, B, T, C); level 2: (B, T, C)
    float *ln2_mean;   // (L, B, T)
    float *ln2_rstd;   // (L, B, T)
    floatX *fch;       // (L, B, T, 4*C) MLP hidden layer, before GELU
    floatX *fch_gelu;  // (L, B, T, 4*C); recomputation level 1 and 2: one layer's (B, T, 4*C)
    floatX *fcproj;    // (L, B, T, C)
    floatX *residual3; // (L, B, T, C) residual stream after the MLP = the block's output
    floatX *lnf;       // (B, T, C)
    float *lnf_mean;   // (B, T)
    float *lnf_rstd;   // (B, T)
    floatX *logits;    // (B, T, Vp); with targets, overwritten by dlogits (the fused classifier)
    float *losses;     // (B, T)
    floatX *yr;        // (B, NH, T, HS) scratch of attention_forward
    float *att_stats;  // with cuDNN or -F 1 (L, B, NH, T): the logsumexp of each row of scores,
                       // all their backward passes keep; then att, qkvr and yr are empty
    float *att_D;      // with -F 1 (B, NH, T): flash_attention_backward's row terms (scratch)
} ActivationTensors;
static const int ACT_FP32[NUM_ACTIVATION_TENSORS] = {0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1, 1, 0, 1, 0, 1, 1};
static const char *const ACTIVATION_NAMES[NUM_ACTIVATION_TENSORS] = {
    "encoded", "ln1", "ln1_mean", "ln1_rstd", "qkv", "qkvr", "atty", "att", "attproj", "residual2", "ln2", "ln2_mean",
    "ln2_rstd", "fch", "fch_gelu", "fcproj", "residual3", "lnf", "lnf_mean", "lnf_rstd", "logits", "losses", "yr", "att_stats",
    "att_D"};

// (recompute: the level; the recomputed activations get one layer's buffer, reused; flash: -F)
void fill_in_activation_sizes(size_t *sizes, GPT2Config config, size_t B, size_t T, int recompute, int flash) {
    size_t C = config.channels, NH = config.num_heads, L = config.num_layers, Vp = config.padded_vocab_size;
    size_t L_ln = recompute >= 2 ? 1 : L, L_gelu = recompute >= 1 ? 1 : L;
    // which attention's buffers: ours materialised (the probabilities), or rows' statistics (cuDNN's or flash)
    size_t ours = USE_CUDNN_ATTENTION || flash ? 0 : 1, stats = 1 - ours, D = flash ? 1 : 0;
    size_t shapes[NUM_ACTIVATION_TENSORS] = {
        B * T * C, L_ln * B * T * C, L * B * T, L * B * T, L * B * T * 3 * C, ours * L * B * T * 3 * C, L * B * T * C,
        ours * L * B * NH * T * T, L * B * T * C, L * B * T * C, L_ln * B * T * C, L * B * T, L * B * T,
        L * B * T * 4 * C, L_gelu * B * T * 4 * C, L * B * T * C, L * B * T * C, B * T * C, B * T, B * T,
        B * T * Vp, B * T, ours * B * T * C, stats * L * B * NH * T, D * B * NH * T};
    memcpy(sizes, shapes, sizeof(shapes));
}

// Gradients of the activations: one buffer of each shape for the whole network.
#define NUM_GRAD_ACT_TENSORS 8
typedef struct {
    floatX *dresidual; // (B, T, C) the running gradient of the residual stream
    floatX *dln;       // (B, T, C) gradient at a LayerNorm output (ln1, ln2 and lnf in turn)
    floatX *datty;     // (B, T, C)
    floatX *dqkv;      // (B, T, 3*C)
    floatX *datt;      // (B, NH, T, T)
    floatX *dfch;      // (B, T, 4*C) gradient at fch, the GELU's input
    floatX *dqkvr;     // (3, B, NH, T, HS) scratch of attention_backward
    floatX *dyr;       // (B, NH, T, HS) scratch of attention_backward
} GradActTensors;
static const char *const GRAD_ACT_NAMES[NUM_GRAD_ACT_TENSORS] = {"dresidual", "dln", "datty", "dqkv", "datt", "dfch", "dqkvr", "dyr"};

void fill_in_grad_act_sizes(size_t *sizes, GPT2Config config, size_t B, size_t T, int flash) {
    size_t C = config.channels, NH = config.num_heads, ours = USE_CUDNN_ATTENTION || flash ? 0 : 1; // (cuDNN, flash: no scratch)
    size_t shapes[NUM_GRAD_ACT_TENSORS] = {B * T * C, B * T * C, B * T * C, B * T * 3 * C, ours * B * NH * T * T,
                                           B * T * 4 * C, ours * B * T * 3 * C, ours * B * T * C};
    memcpy(sizes, shapes, sizeof(shapes));
}

// The bytes of tensor i of a table (is_fp32 marks the tensors of fp32 elements,
// NULL: all floatX), and the bytes from its start to the next tensor's: at least
// GUARD_BYTES more, rounded up so that every slice starts on a 256-byte boundary.
static size_t slice_bytes(const size_t *sizes, const int *is_fp32, int i) {
    return sizes[i] * (is_fp32 != NULL && is_fp32[i] ? sizeof(float) : sizeof(floatX));
}
static size_t slice_stride(size_t bytes) { return (bytes + GUARD_BYTES + 255) / 256 * 256; }

// With GUARD_BYTES > 0: everything from each tensor's end to the next one's start (the
// band and the alignment padding) holds its band's pattern; again after every memset of
// a whole table.
static void guard_fill(void *const *slices, const size_t *sizes, const int *is_fp32, int n) {
    if (GUARD_BYTES > 0) {
        for (int i = 0; i < n; i++) {
            size_t bytes = slice_bytes(sizes, is_fp32, i);
            guard_fill_band((char *)slices[i] + bytes, slice_stride(bytes) - bytes, i);
        }
    }
}

// ... and the check that every band is still whole; byte K of a band is the K-th
// byte past its tensor's end. what: the kind of tensor ("activation"), names: the table's.
static void guard_check(void *const *slices, const size_t *sizes, const int *is_fp32, int n, const char *const *names,
                        const char *what) {
    if (GUARD_BYTES > 0) {
        for (int i = 0; i < n; i++) {
            size_t bytes = slice_bytes(sizes, is_fp32, i);
            long at = guard_band_broken((char *)slices[i] + bytes, slice_stride(bytes) - bytes, i);
            if (at >= 0) {
                fprintf(stderr, "Error: a kernel wrote past the end of the %s tensor %s (guard band after it overwritten"
                        " at byte %ld)\n", what, names[i], at);
                exit(EXIT_FAILURE);
            }
        }
    }
}

// One device allocation for a whole table (what: its name in an out-of-memory
// message), its slices 256-byte aligned and, in debug builds, guarded. Returns
// the bytes allocated.
static size_t table_bytes(const size_t *sizes, const int *is_fp32, int n) {
    size_t total = 0;
    for (int i = 0; i < n; i++) { total += slice_stride(slice_bytes(sizes, is_fp32, i)); }
    return total;
}
static size_t cuda_malloc_and_point(void **slices, const size_t *sizes, const int *is_fp32, int n, const char *what,
                                    void **memory) {
    size_t total = table_bytes(sizes, is_fp32, n);
    char *p = (char *)cuda_malloc_check(total, what);
    *memory = p;
    for (int i = 0; i < n; i++) {
        slices[i] = p;
        p += slice_stride(slice_bytes(sizes, is_fp32, i));
    }
    guard_fill(slices, sizes, is_fp32, n);
    return total;
}

typedef struct {
    GPT2Config config;
    ParameterTensors params;       // on the GPU, floatX
    size_t param_sizes[NUM_PARAMETER_TENSORS];
    floatX *params_memory;
    size_t num_parameters;
    float *master_memory;          // BF16 and FP16: the fp32 master weights AdamW updates; NULL in FP32 and with -w 0
    ParameterTensors grads;
    floatX *grads_memory;
    size_t grad_bytes;
    size_t grad_sizes[NUM_PARAMETER_TENSORS]; // the gradients' tensors: param_sizes (ZeRO-2: the layers' tensors 0)
    // ZeRO-2 (-Z 2): the layers' gradients live one layer at a time, in two tables taken in
    // turn (layer_sizes: one layer of each layer tensor), summed over the ranks into
    // shard_grads (this rank's shard of them, in the optimizer state's layout) through recv_grads
    // (one layer's pieces, as the reduce-scatter delivers them); NULL without it
    ParameterTensors layer_grads[2];
    void *layer_grads_memory[2];
    size_t layer_sizes[NUM_PARAMETER_TENSORS], layer_grad_bytes;
    floatX *shard_grads, *recv_grads;
    float *m_memory;               // AdamW first moments, allocated on the first update
    float *v_memory;               // AdamW second moments
    float *norm_partials;          // (NORM_BLOCKS) on the GPU, and its host copy
    float *norm_partials_host;
    ActivationTensors acts;
    size_t act_sizes[NUM_ACTIVATION_TENSORS];
    void *acts_memory;
    size_t num_activations, act_bytes;
    GradActTensors grads_acts;
    size_t grad_act_sizes[NUM_GRAD_ACT_TENSORS];
    void *grads_acts_memory;
    size_t grad_act_bytes;
    int batch_size;                // the B and T the activations were allocated for; 0 until the first forward
    int recompute;                 // and the recomputation level they were allocated for
    int flash;                     // and the attention (flash_attention)
    int seq_len;
    int B, T;                      // the batch of the last forward pass, which gpt2_backward works on
    int *inputs, *targets;         // (B, T) the current batch, in host memory
    int *inputs_dev, *targets_dev; // and on the GPU
    float *losses_host;            // (B, T) host copy of the losses
    float mean_loss;               // of the last forward with targets, -1 without
    // FP16's dynamic loss scale (1 in FP32 and BF16, whose range needs none): the
    // loss is multiplied by it before the backward pass, so that small gradients
    // do not underflow fp16; gpt2_loss_scale_update adjusts it after each step
    float loss_scale;
    int good_steps;                // steps since the scale last changed
    int skipped_updates;           // steps whose gradients overflowed (no AdamW update)
} GPT2;

// ----------------------------------------------------------------------------
// data parallelism: ranks on GPUs, their gradients summed by NCCL

// train_gpt2.c's ranks (processes, each with the whole model and its own slice of every
// batch; its "data parallelism" says how and why) with a GPU each: make train_gpt2cu_mpi
// builds this file with NCCL (-DUSE_NCCL) and, where it is installed, MPI (-DUSE_MPI).
// mpirun starts the ranks and MPI hands them NCCL's unique id; or any launcher starts them
// and they find rank 0 through a shared folder or a TCP port (-pi fs, tcp; see
// ranks_init). NCCL then moves gradients and weights between the GPUs (NVLink, PCIe,
// InfiniBand), from GPU memory to GPU memory, on CUDA streams. Without USE_NCCL: one rank,
// and the functions below do nothing.
//
// The gradients are summed while the backward pass makes them. On the last micro-batch of
// a step (the gradients then hold all of the step's), once layer l's backward kernels are
// issued, a second stream waits for them (an event) and sums that layer's gradients while
// the default stream goes on to layer l - 1: the communication hides behind the backward
// pass, but for the first layer's and the embeddings'. They travel in floatX, summed by
// NCCL in floatX (in the bf16 build half the bytes of fp32); the fp32 master weights and
// AdamW's and the norm's arithmetic stay fp32.
//
// ZeRO-1 (-Z 1; Rajbhandari et al. 2020): the shards are cut per chunk, tensor k's values
// of one layer (the whole tensor for wte, wpe, lnfw and lnfb), s values: each rank gets a
// piece of q = s / ranks values (rank r: [r q, (r + 1) q)) and the s - ranks q left at
// the chunk's end (the rest) belong to every rank. A chunk's gradients are
// reduce-scattered (rank r receives the sum of its piece) and its rest all-reduced; each
// rank keeps AdamW's moments and the fp32 master weights of its pieces and the rests only,
// updates them (the rests alike on every rank: the same sums, the same moments), and the
// pieces of the weights are all-gathered. Chunks per layer let each layer's sums start as
// soon as its backward pass is done, and need no padding.
//
// ZeRO-2 (-Z 2) shards the gradients too: the layers' gradients are no longer kept whole.
// Each layer's backward pass writes its gradients into one of two one-layer tables, taken in
// turn; the second stream reduce-scatters them (on every micro-batch, as they are made) and
// adds each rank's piece into its shard of the gradients, then frees the table for the
// layer after next. The embeddings' and lnf's gradients, whole only when the backward pass
// ends, are kept whole and summed as with ZeRO-1. (ZeRO-3, which shards the weights, is not
// here.)
#ifdef USE_NCCL
#ifdef USE_MPI
#include <mpi.h>
#endif
#include <nccl.h>
#include <pthread.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
static void nccl_check(ncclResult_t r, const char *file, int line) {
    if (r != ncclSuccess) {
        fprintf(stderr, "Error: NCCL: %s (%s:%d)\n", ncclGetErrorString(r), file, line);
        exit(EXIT_FAILURE); // (ranks_at_exit: under mpirun every rank stops)
    }
}
#define ncclCheck(call) nccl_check((call), __FILE__, __LINE__)
#if defined(ENABLE_FP32)
#define NCCL_FLOATX ncclFloat32
#elif defined(ENABLE_BF16)
#define NCCL_FLOATX ncclBfloat16
#else
#define NCCL_FLOATX ncclFloat16
#endif
static ncclComm_t nccl_comm;
static cudaStream_t comm_stream;          // where the backward pass's sums run
static cudaEvent_t layer_done, sums_done; // the default stream's work up to a layer; the sums so far
static cudaEvent_t table_free[2];         // ZeRO-2: the second stream is done with one-layer table 0, 1
#endif
// how the ranks were started (-pi): by mpirun, or by any launcher, each told its rank (-pn,
// -pr), finding rank 0 through a file in a shared folder (-pf) or a TCP port (-ps)
enum { START_MPI, START_FS, START_TCP };
typedef struct {
    int rank, world; // this process's rank, and how many there are
    int zero;        // -Z: 1 the optimizer state sharded over the ranks (ZeRO-1), 2 the layers' gradients too
    int device;      // this rank's GPU: its rank among the ranks on its machine (-1: not known, rank mod GPUs)
    int start;       // START_MPI, START_FS or START_TCP
    const char *meet; // -pf's folder or -ps's host:port
    int timeout;     // -pt: seconds a rank may wait for the others before it gives up
} Ranks;
static Ranks ranks = {0, 1, 0, 0, START_MPI, NULL, 600};
// set by main for the last micro-batch of a step: its backward pass sums the gradients
static int sum_grads_in_backward = 0;

// whether the optimizer state is sharded: -Z 1 or 2 over MPI, on one rank too (whose shard is all
// of it: the sharded path then runs, the collectives on one GPU, for checking it there)
#ifdef USE_NCCL
static int sharded(void) { return ranks.zero; }
#else
static int sharded(void) { return 0; }
#endif

// the chunks of tensor k: one per layer for the layers' tensors, else one
static const int PER_LAYER[NUM_PARAMETER_TENSORS] = {0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0};
static size_t chunks_of(GPT2Config c, int k) { return PER_LAYER[k] ? (size_t)c.num_layers : 1; }
// a chunk of s values: each rank's piece, and the rest every rank keeps (unsharded: one
// piece of all of it)
static size_t piece_of(size_t s) { return sharded() ? s / (size_t)ranks.world : s; }
static size_t rest_of(size_t s) { return s - piece_of(s) * (sharded() ? (size_t)ranks.world : 1); }

// ZeRO-2: the gradients sharded too (see above)
static int zero2(void) { return sharded() && ranks.zero == 2; }

// the sizes of the gradients' table (the layers' tensors 0 with ZeRO-2, which keeps them one
// layer at a time) and of one layer of the layers' tensors (the others 0)
static void grad_table_sizes(GPT2Config c, size_t *grad_sizes, size_t *layer_sizes) {
    fill_in_parameter_sizes(grad_sizes, c);
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        layer_sizes[k] = PER_LAYER[k] ? grad_sizes[k] / (size_t)c.num_layers : 0;
        if (zero2() && PER_LAYER[k]) { grad_sizes[k] = 0; }
    }
}

// where chunk l of tensor k starts in the shard layout (this rank's pieces and the rests,
// chunk by chunk in table order)
static size_t shard_offset(GPT2Config c, int k, size_t l) {
    size_t sizes[NUM_PARAMETER_TENSORS], at = 0;
    fill_in_parameter_sizes(sizes, c);
    for (int j = 0; j < k; j++) {
        size_t chunks = chunks_of(c, j), s = sizes[j] / chunks;
        at += chunks * (piece_of(s) + rest_of(s));
    }
    size_t s = sizes[k] / chunks_of(c, k);
    return at + l * (piece_of(s) + rest_of(s));
}

// ZeRO-2's shard of the gradients holds the layers' tensors' part of the shard layout only
// (the others' gradients stay whole, as with ZeRO-1): where it starts in that layout, and
// its length (the layers' tensors, ln1w .. fcprojb, are together in table order)
static size_t layer_shard_start(GPT2Config c) {
    int k = 0;
    while (!PER_LAYER[k]) { k++; }
    return shard_offset(c, k, 0);
}
static size_t layer_shard_elements(GPT2Config c) {
    size_t sizes[NUM_PARAMETER_TENSORS], total = 0;
    fill_in_parameter_sizes(sizes, c);
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        size_t s = sizes[k] / chunks_of(c, k);
        if (PER_LAYER[k]) { total += chunks_of(c, k) * (piece_of(s) + rest_of(s)); }
    }
    return total;
}

// the norm's partial sums: per tensor, and sharded also for the rests (see gpt2_grad_norm)
static int norm_partial_sets(void) { return sharded() ? 2 : 1; }

// How many values of the optimizer state (AdamW's m, v, the master weights) each rank
// keeps: every parameter, or its pieces and the rests (the same count on every rank)
static size_t shard_elements(GPT2Config c) {
    size_t sizes[NUM_PARAMETER_TENSORS], total = 0;
    fill_in_parameter_sizes(sizes, c);
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        size_t chunks = chunks_of(c, k), s = sizes[k] / chunks;
        total += chunks * (piece_of(s) + rest_of(s));
    }
    return total;
}

// This rank's shard of flat (all the parameters' values, in checkpoint order): its pieces and
// the rests, chunk by chunk in table order, which is how it keeps its optimizer state (and
// gpt2_update walks it)
static void shard_of(GPT2Config c, const float *flat, float *shard) {
    size_t sizes[NUM_PARAMETER_TENSORS], offset = 0, at = 0;
    fill_in_parameter_sizes(sizes, c);
    size_t w = sharded() ? (size_t)ranks.world : 1, r = sharded() ? (size_t)ranks.rank : 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        size_t chunks = chunks_of(c, k), s = sizes[k] / chunks, q = piece_of(s), rest = rest_of(s);
        for (size_t l = 0; l < chunks; l++) {
            const float *chunk = flat + offset + l * s;
            memcpy(shard + at, chunk + r * q, q * sizeof(float));
            memcpy(shard + at + q, chunk + w * q, rest * sizeof(float));
            at += q + rest;
        }
        offset += sizes[k];
    }
}

#ifdef USE_NCCL
#ifdef USE_MPI
// Any exit() after MPI started (an error's, or -h's and -M's success): a success finishes
// MPI as the run's end does; a failure aborts every rank (MPI_Abort), so that none waits
// forever in a collective for this one, whatever started them (mpirun stops the others
// itself, not every launcher does)
static void ranks_at_exit(int status, void *arg) {
    (void)arg;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) { return; }
    if (status != 0) { MPI_Abort(MPI_COMM_WORLD, status); }
    MPI_Finalize();
}
#endif

static int meet_from_env; // -pi tcp: rank 0's address from MASTER_ADDR (and its port from MASTER_PORT)
// the value of flag `name` in argv (NULL: not given); ranks_init reads the -p flags before
// the other flags are parsed (and parse_device_flag takes them then as read)
static const char *flag_in(int argc, char **argv, const char *name) {
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], name) == 0) { return argv[i + 1]; }
    }
    return NULL;
}
// a -p flag's number, else the first of two environment variables set (the launchers':
// torchrun's, Slurm's), else fallback
static int rank_number(int argc, char **argv, const char *flag, const char *env1, const char *env2, int lo, int fallback) {
    const char *v = flag_in(argc, argv, flag), *from = flag;
    if (v == NULL && (v = getenv(env1)) != NULL) { from = env1; }
    if (v == NULL && (v = getenv(env2)) != NULL) { from = env2; }
    return v != NULL ? (int)parse_int(from, v, lo) : fallback;
}
#endif

// This process's rank, and its rank on its machine (which picks its GPU). Under mpirun
// (-pi mpi, the default) MPI says; with -pi fs or tcp the launcher does (-pn ranks, -pr
// this one's, -pg GPUs a machine; or torchrun's WORLD_SIZE, RANK, LOCAL_RANK, or Slurm's
// SLURM_NTASKS, SLURM_PROCID, SLURM_LOCALID) and MPI is not used at all. The ranks but the
// first print nothing (rank 0 speaks for all; errors still reach stderr).
void ranks_init(int *argc, char ***argv) {
#ifdef USE_NCCL
    const char *how = flag_in(*argc, *argv, "-pi");
    ranks.start = how == NULL || strcmp(how, "mpi") == 0 ? START_MPI : strcmp(how, "fs") == 0 ? START_FS
                : strcmp(how, "tcp") == 0 ? START_TCP : -1;
    if (ranks.start < 0) { usage_error("-pi %s: the ranks start by mpi (mpirun), fs (a shared folder, -pf) or tcp (-ps)", how); }
    ranks.timeout = rank_number(*argc, *argv, "-pt", "", "", 1, 600);
    if (ranks.start == START_MPI) {
        const char *theirs[] = {"-pn", "-pr", "-pg", "-pf", "-ps"};
        for (int i = 0; i < 5; i++) {
            if (flag_in(*argc, *argv, theirs[i]) != NULL) { usage_error("%s: for -pi fs or tcp (under mpirun, MPI says)", theirs[i]); }
        }
#ifndef USE_MPI
        if (how != NULL) { usage_error("-pi %s: this build has no MPI (make train_gpt2cu_mpi where MPI is installed)", how); }
#else
        int provided; // (MPI calls come from the main thread only: FUNNELED)
        MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
        on_exit(ranks_at_exit, NULL);
        if (provided < MPI_THREAD_FUNNELED) {
            fprintf(stderr, "Error: this MPI does not allow a threaded (OpenMP) program: thread level %d\n", provided);
            exit(EXIT_FAILURE);
        }
        MPI_Comm_rank(MPI_COMM_WORLD, &ranks.rank);
        MPI_Comm_size(MPI_COMM_WORLD, &ranks.world);
        MPI_Comm machine;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, ranks.rank, MPI_INFO_NULL, &machine);
        MPI_Comm_rank(machine, &ranks.device);
        MPI_Comm_free(&machine);
#endif
        // (a launcher's processes started without -pi would each train alone, over one another's files)
        const char *launched = getenv("WORLD_SIZE");
        if (ranks.world == 1 && launched != NULL && atoi(launched) > 1) {
            fprintf(stderr, "Error: WORLD_SIZE=%s says a launcher (torchrun) started %s ranks, not mpirun\n"
                    "HINT: -pi tcp (rank 0's address from MASTER_ADDR, MASTER_PORT) or -pi fs -pf FOLDER\n", launched, launched);
            exit(EXIT_FAILURE);
        }
    } else {
        ranks.world = rank_number(*argc, *argv, "-pn", "WORLD_SIZE", "SLURM_NTASKS", 1, -1);
        ranks.rank = rank_number(*argc, *argv, "-pr", "RANK", "SLURM_PROCID", 0, -1);
        if (ranks.world < 0 || ranks.rank < 0) {
            usage_error("-pi %s: say how many ranks there are and which this is (-pn, -pr; or WORLD_SIZE and RANK)", how);
        }
        if (ranks.rank >= ranks.world) { usage_error("-pr %s: ranks count from 0 to -pn - 1", flag_in(*argc, *argv, "-pr")); }
        int per_machine = rank_number(*argc, *argv, "-pg", "", "", 1, 0);
        ranks.device = per_machine > 0 ? ranks.rank % per_machine : rank_number(*argc, *argv, "", "LOCAL_RANK", "SLURM_LOCALID", 0, -1);
        ranks.meet = flag_in(*argc, *argv, ranks.start == START_FS ? "-pf" : "-ps");
        if (ranks.meet == NULL && ranks.start == START_TCP && (ranks.meet = getenv("MASTER_ADDR")) != NULL) { meet_from_env = 1; }
        if (ranks.meet == NULL) {
            usage_error(ranks.start == START_FS ? "-pi %s needs -pf: a folder every rank sees (a shared file system)"
                                                : "-pi %s needs -ps host[:port]: rank 0's address (or MASTER_ADDR)", how);
        }
    }
    if (ranks.rank > 0 && freopen("/dev/null", "w", stdout) == NULL) {
        fprintf(stderr, "Error: rank %d: cannot send its output to /dev/null\n", ranks.rank);
        exit(EXIT_FAILURE);
    }
#else
    (void)argc; (void)argv;
#endif
}

#ifdef USE_NCCL
// The watchdog. A collective waits for every rank, and NCCL on a GPU waits forever: a rank
// that died, or hangs, would stall the others. So a thread checks five times a second that
// this rank is still getting on (ranks_alive: each collective it starts, each forward and
// backward pass) and that NCCL reports no error (a peer gone), and ends the process
// otherwise, with a message, after -pt seconds; mpirun, or the launcher, then stops the
// rest. (-pt must cover the longest another rank works alone while this one waits: rank
// 0's samples and checkpoint writes, a slow rank's loading.)
static long long alive_ms;   // when this rank last got on (CLOCK_MONOTONIC, ms)
static int watchdog_stop;
static pthread_t watchdog_thread;
static long long monotonic_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
static void ranks_alive(void) { __atomic_store_n(&alive_ms, monotonic_ms(), __ATOMIC_RELAXED); }
// (ncclCommGetAsyncError from this second thread while the main one issues collectives: NCCL
// asks for one thread at a time per communicator, but this query is the one meant for a
// watchdog, as PyTorch's and XLA's call it)
static void watchdog_stop_process(void) {
    fflush(stdout); // (rank 0's last lines)
    fflush(stderr);
    _exit(EXIT_FAILURE);
}
static void *watchdog(void *arg) {
    (void)arg;
    while (!__atomic_load_n(&watchdog_stop, __ATOMIC_RELAXED)) {
        usleep(200000);
        ncclComm_t comm = __atomic_load_n(&nccl_comm, __ATOMIC_ACQUIRE);
        ncclResult_t async = ncclSuccess;
        if (comm != NULL && ncclCommGetAsyncError(comm, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress) {
            fprintf(stderr, "Error: rank %d: NCCL: %s (another rank gone?); stopping\n", ranks.rank, ncclGetErrorString(async));
            watchdog_stop_process();
        }
        long long idle = monotonic_ms() - __atomic_load_n(&alive_ms, __ATOMIC_RELAXED);
        if (idle > (long long)ranks.timeout * 1000) {
            fprintf(stderr, "Error: rank %d: waited %d s for the other ranks (-pt): one died or hangs; stopping\n"
                    "HINT: raise -pt if a rank legitimately works alone longer (rank 0's samples, checkpoints, loading)\n",
                    ranks.rank, ranks.timeout);
            watchdog_stop_process();
        }
    }
    return NULL;
}

// -pi fs: rank 0's NCCL id through a folder all ranks see. Each other rank leaves a mark
// (rank_<r>, holding a number of its own, made at start) and puts it back whenever it is
// gone; rank 0 first clears out an earlier run's id and marks, waits for every mark, then
// writes the id (atomically) with the numbers it read: a rank takes only an id that holds
// its own number, never one a crashed run left. Rank 0 removes the marks and the id once
// every rank has joined NCCL.
static void meet_path(char *out, size_t size, const char *name) { format_path(out, size, "%s/%s", ranks.meet, name); }
static void mark_path(char *out, size_t size, int r) {
    char name[64];
    snprintf(name, sizeof(name), "rank_%d", r);
    meet_path(out, size, name);
}
static void unshare_id_fs(void) {
    char path[4096];
    meet_path(path, sizeof(path), "nccl_id");
    remove(path);
    for (int r = 1; r < ranks.world; r++) {
        mark_path(path, sizeof(path), r);
        remove(path);
    }
}
static void share_id_fs(ncclUniqueId *id) {
    char id_path[4096], mark[4096];
    struct stat st;
    mkdir(ranks.meet, 0755); // (every rank: whichever comes first; it may be -o's folder, not made yet)
    int found = stat(ranks.meet, &st) == 0;
    if (!found || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "Error: rank %d: -pf %s: not a folder (%s)\n", ranks.rank, ranks.meet, found ? "a file" : strerror(errno));
        exit(EXIT_FAILURE);
    }
    meet_path(id_path, sizeof(id_path), "nccl_id");
    long long deadline = monotonic_ms() + (long long)ranks.timeout * 1000;
    size_t w = (size_t)ranks.world;
    unsigned long long *numbers = (unsigned long long *)calloc(w, sizeof(unsigned long long));
    if (ranks.rank == 0) {
        unshare_id_fs(); // (an earlier run's)
        for (int r = 1; r < ranks.world; r++) {
            mark_path(mark, sizeof(mark), r);
            for (;;) {
                FILE *fp = fopen(mark, "rb");
                int got = fp != NULL && fread(&numbers[r], sizeof(numbers[r]), 1, fp) == 1;
                if (fp != NULL) { fclose(fp); }
                if (got) { break; }
                if (monotonic_ms() > deadline) {
                    fprintf(stderr, "Error: rank 0: rank %d did not come in %d s (-pt; no %s)\nHINT: start all %d ranks with "
                            "the same -pf, a folder they all see\n", r, ranks.timeout, mark, ranks.world);
                    exit(EXIT_FAILURE);
                }
                usleep(100000);
            }
        }
        int world = ranks.world;
        const void *bufs[3] = {&world, numbers, id};
        size_t sizes[3] = {sizeof(world), w * sizeof(unsigned long long), sizeof(*id)};
        write_file_atomic(id_path, bufs, sizes, 3);
        free(numbers);
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long long mine = ((unsigned long long)ts.tv_sec * 1000000007ull) ^ ((unsigned long long)ts.tv_nsec << 20) ^
                              ((unsigned long long)getpid() << 40) ^ (unsigned long long)ranks.rank;
    mark_path(mark, sizeof(mark), ranks.rank);
    for (;;) {
        if (access(mark, F_OK) != 0) { // (first, or rank 0 cleared it out)
            const void *bufs[1] = {&mine};
            size_t sizes[1] = {sizeof(mine)};
            write_file_atomic(mark, bufs, sizes, 1);
        }
        FILE *fp = fopen(id_path, "rb");
        int world = 0, ours = fp != NULL && fread(&world, sizeof(world), 1, fp) == 1 && world == ranks.world &&
                              fread(numbers, sizeof(unsigned long long), w, fp) == w && numbers[ranks.rank] == mine &&
                              fread(id, sizeof(*id), 1, fp) == 1;
        if (fp != NULL) { fclose(fp); }
        if (ours) { break; }
        if (monotonic_ms() > deadline) {
            fprintf(stderr, "Error: rank %d: no id for it from rank 0 in %s after %d s (-pt)\nHINT: start rank 0 (-pr 0) with "
                    "the same -pf and -pn %d\n", ranks.rank, id_path, ranks.timeout, ranks.world);
            exit(EXIT_FAILURE);
        }
        usleep(200000); // (thousands of ranks polling a shared file system's server: not too often)
    }
    free(numbers);
}

// -pi tcp: rank 0 listens on -ps's port (29500 when none is given; MASTER_PORT + 1 from
// torchrun's variables), each other rank connects (trying again until -pt runs out: rank 0
// may start later) and says which rank it is of how many; rank 0 answers each with the id,
// and ignores a connection that does not say so within seconds (a port scan, a health
// check, another run's rank).
typedef struct { int magic, rank, world; } Hello;
#define HELLO_MAGIC 0x6c6c6548 // "Hell"
static int tcp_port(char *host, size_t size) {
    const char *colon = strrchr(ranks.meet, ':');
    size_t n = colon != NULL ? (size_t)(colon - ranks.meet) : strlen(ranks.meet);
    if (n == 0 || n >= size) { usage_error("-ps %s: host[:port]", ranks.meet); }
    memcpy(host, ranks.meet, n);
    host[n] = '\0';
    if (colon != NULL) { return (int)parse_int("-ps's port", colon + 1, 1); }
    // (from torchrun's variables: its own store listens on MASTER_PORT, ours on the next)
    const char *port = meet_from_env ? getenv("MASTER_PORT") : NULL;
    return port != NULL ? (int)parse_int("MASTER_PORT", port, 1) + 1 : 29500;
}
// the whole of n bytes, or 0 when the peer closed, failed or -pt ran out
static int tcp_io(int fd, void *data, size_t n, int sending, long long deadline) {
    char *p = (char *)data;
    while (n > 0) {
        struct pollfd w = {fd, (short)(sending ? POLLOUT : POLLIN), 0};
        long long left = deadline - monotonic_ms();
        if (left <= 0 || poll(&w, 1, (int)left) <= 0) { return 0; }
        ssize_t got = sending ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (got <= 0) { return 0; }
        p += got;
        n -= (size_t)got;
    }
    return 1;
}
static void share_id_tcp(ncclUniqueId *id) {
    char host[1024], service[16];
    int port = tcp_port(host, sizeof(host)), one = 1;
    if (port > 65535) { usage_error("-ps %s: a port is at most 65535", ranks.meet); }
    snprintf(service, sizeof(service), "%d", port);
    long long deadline = monotonic_ms() + (long long)ranks.timeout * 1000;
    if (ranks.rank == 0) {
        int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in any;
        memset(&any, 0, sizeof(any));
        any.sin_family = AF_INET;
        any.sin_addr.s_addr = htonl(INADDR_ANY);
        any.sin_port = htons((uint16_t)port);
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (listener < 0 || bind(listener, (struct sockaddr *)&any, sizeof(any)) != 0 || listen(listener, 128) != 0) {
            fprintf(stderr, "Error: rank 0: cannot listen on port %d (-ps %s): %s\n", port, ranks.meet, strerror(errno));
            exit(EXIT_FAILURE);
        }
        char *joined = (char *)calloc((size_t)ranks.world, 1);
        for (int n = 1; n < ranks.world;) {
            struct pollfd w = {listener, POLLIN, 0};
            long long left = deadline - monotonic_ms();
            int fd = left > 0 && poll(&w, 1, (int)left) > 0 ? accept(listener, NULL, NULL) : -1;
            if (fd < 0) {
                fprintf(stderr, "Error: rank 0: %d of %d ranks came to port %d in %d s (-pt)\nHINT: start every rank with -ps %s "
                        "and -pn %d\n", n, ranks.world, port, ranks.timeout, ranks.meet, ranks.world);
                exit(EXIT_FAILURE);
            }
            Hello h;
            long long soon = monotonic_ms() + 5000; // (a rank says hello at once)
            if (!tcp_io(fd, &h, sizeof(h), 0, soon < deadline ? soon : deadline) || h.magic != HELLO_MAGIC) {
                close(fd); // (not one of ours)
                continue;
            }
            if (h.world != ranks.world || h.rank < 1 || h.rank >= ranks.world || joined[h.rank]) {
                fprintf(stderr, "Warning: rank 0: a process on port %d says it is rank %d of %d; this run has %d ranks%s: "
                        "ignored\n", port, h.rank, h.world, ranks.world,
                        h.rank >= 1 && h.rank < ranks.world && joined[h.rank] ? " and has that one" : "");
                close(fd);
                continue;
            }
            joined[h.rank] = 1;
            if (!tcp_io(fd, id, sizeof(*id), 1, deadline)) {
                fprintf(stderr, "Error: rank 0: cannot send rank %d the id\n", h.rank);
                exit(EXIT_FAILURE);
            }
            close(fd);
            n++;
        }
        free(joined);
        close(listener);
        return;
    }
    struct addrinfo hints, *found = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    int err = getaddrinfo(host, service, &hints, &found);
    if (err != 0) {
        fprintf(stderr, "Error: rank %d: -ps %s: %s\n", ranks.rank, ranks.meet, gai_strerror(err));
        exit(EXIT_FAILURE);
    }
    Hello h = {HELLO_MAGIC, ranks.rank, ranks.world};
    int err_connect = 0;
    for (;;) {
        // (a connect that waits at most 2 s a try, and never past -pt: where packets are
        // dropped, a blocking connect can take minutes)
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), ok = 0;
        if (fd >= 0 && (connect(fd, found->ai_addr, found->ai_addrlen) == 0 || errno == EINPROGRESS)) {
            struct pollfd w = {fd, POLLOUT, 0};
            long long left = deadline - monotonic_ms();
            socklen_t len = sizeof(err_connect);
            err_connect = ETIMEDOUT;
            if (left > 0 && poll(&w, 1, left < 2000 ? (int)left : 2000) > 0) {
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err_connect, &len);
            }
            ok = err_connect == 0;
        } else {
            err_connect = errno;
        }
        if (ok) {
            int got = tcp_io(fd, &h, sizeof(h), 1, deadline) && tcp_io(fd, id, sizeof(*id), 0, deadline);
            close(fd);
            if (!got) {
                fprintf(stderr, "Error: rank %d: rank 0 at %s did not send the id (see its message)\n", ranks.rank, ranks.meet);
                exit(EXIT_FAILURE);
            }
            break;
        }
        if (fd >= 0) { close(fd); }
        if (monotonic_ms() > deadline) {
            fprintf(stderr, "Error: rank %d: cannot reach rank 0 at %s:%d in %d s (-pt): %s\n", ranks.rank, host, port,
                    ranks.timeout, strerror(err_connect));
            exit(EXIT_FAILURE);
        }
        usleep(50000);
    }
    freeaddrinfo(found);
}
#else
static void ranks_alive(void) {}
#endif

// Once this rank has its GPU: NCCL's communicator (its unique id from rank 0, through MPI,
// the shared folder or TCP), the second stream, and the watchdog. With NCCL there is a
// communicator even on one rank (its collectives copy in place), so that one GPU runs the
// very path many do.
static void ranks_connect(void) {
#ifdef USE_NCCL
    ncclUniqueId id;
    if (ranks.rank == 0) { ncclCheck(ncclGetUniqueId(&id)); }
#ifdef USE_MPI
    if (ranks.start == START_MPI) { MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD); }
#endif
    if (ranks.start == START_FS && ranks.world > 1) { share_id_fs(&id); }
    if (ranks.start == START_TCP && ranks.world > 1) { share_id_tcp(&id); }
    ranks_alive(); // (the rendezvous has its own time-outs; from here on the watchdog's)
    if (ranks.world > 1 && pthread_create(&watchdog_thread, NULL, watchdog, NULL) != 0) {
        fprintf(stderr, "Error: rank %d: cannot start the watchdog thread\n", ranks.rank);
        exit(EXIT_FAILURE);
    }
    ncclComm_t comm;
    ncclCheck(ncclCommInitRank(&comm, ranks.world, id, ranks.rank));
    __atomic_store_n(&nccl_comm, comm, __ATOMIC_RELEASE);
    if (ranks.start == START_FS && ranks.world > 1 && ranks.rank == 0) { unshare_id_fs(); } // (all have joined)
    // (non-blocking: the default stream must not wait for it, nor it for the default
    // stream, but where the events say)
    cudaCheck(cudaStreamCreateWithFlags(&comm_stream, cudaStreamNonBlocking));
    cudaCheck(cudaEventCreateWithFlags(&layer_done, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&sums_done, cudaEventDisableTiming));
    for (int t = 0; t < 2; t++) { cudaCheck(cudaEventCreateWithFlags(&table_free[t], cudaEventDisableTiming)); }
    ranks_alive();
#endif
}

void ranks_finalize(void) {
#ifdef USE_NCCL
    if (ranks.world > 1) {
        __atomic_store_n(&watchdog_stop, 1, __ATOMIC_RELAXED);
        pthread_join(watchdog_thread, NULL);
    }
    if (nccl_comm != NULL) {
        cudaCheck(cudaStreamSynchronize(comm_stream));
        ncclCheck(ncclCommDestroy(nccl_comm));
        nccl_comm = NULL;
        cudaCheck(cudaStreamDestroy(comm_stream));
        cudaCheck(cudaEventDestroy(layer_done));
        cudaCheck(cudaEventDestroy(sums_done));
        for (int t = 0; t < 2; t++) { cudaCheck(cudaEventDestroy(table_free[t])); }
    }
#ifdef USE_MPI
    if (ranks.start == START_MPI) { MPI_Finalize(); }
#endif
#endif
}

#ifdef USE_NCCL
// The host's few collectives (a loss, checks that the ranks agree, the weights at start,
// checkpoints) go through NCCL too, so that no rank needs MPI once started: through a
// buffer on the GPU, cuBLASLt's workspace (CUBLASLT_WORKSPACE_BYTES; idle between matmuls,
// and everything here is on the default stream, in order with them).
static void *link_buffer(void) { return cublaslt_workspace; }
#define LINK_BYTES CUBLASLT_WORKSPACE_BYTES
// every rank's value of x, in rank order
static void ranks_all(long long x, long long *all) {
    long long *link = (long long *)link_buffer();
    ranks_alive();
    cudaCheck(cudaMemcpy(link + ranks.rank, &x, sizeof(x), cudaMemcpyHostToDevice));
    ncclCheck(ncclAllGather(link + ranks.rank, link, 1, ncclInt64, nccl_comm, 0));
    cudaCheck(cudaMemcpy(all, link, (size_t)ranks.world * sizeof(x), cudaMemcpyDeviceToHost));
    ranks_alive();
}
// 1 when every rank has the same x; else the smallest and largest
static int ranks_agree(long long x, long long *lo, long long *hi) {
    long long *all = (long long *)mallocCheck((size_t)ranks.world * sizeof(long long));
    ranks_all(x, all);
    *lo = *hi = all[0];
    for (int r = 1; r < ranks.world; r++) {
        if (all[r] < *lo) { *lo = all[r]; }
        if (all[r] > *hi) { *hi = all[r]; }
    }
    free(all);
    return *lo == *hi;
}
#endif

// x summed over the ranks (a loss: each rank's share of the mean)
double ranks_sum(double x) {
#ifdef USE_NCCL
    if (ranks.world > 1) {
        double *link = (double *)link_buffer();
        ranks_alive();
        cudaCheck(cudaMemcpy(link, &x, sizeof(x), cudaMemcpyHostToDevice));
        ncclCheck(ncclAllReduce(link, link, 1, ncclFloat64, ncclSum, nccl_comm, 0));
        cudaCheck(cudaMemcpy(&x, link, sizeof(x), cudaMemcpyDeviceToHost));
        ranks_alive();
    }
#endif
    return x;
}

// Every rank starts from rank 0's weights: the fp32 values a model is built from (drawn
// from the seed or read from -e), once on the GPU (staging, n values), are broadcast from
// rank 0's, and copied back to host (from which the master weights' shard is cut). (The
// ranks must agree on the model's size first.)
static void ranks_same_params(float *host, float *staging, size_t n) {
#ifdef USE_NCCL
    if (ranks.world == 1) { return; }
    long long lo, hi;
    if (!ranks_agree((long long)n, &lo, &hi)) {
        fprintf(stderr, "Error: rank %d: the ranks built models of different sizes (%lld to %lld parameters)\n"
                "HINT: every rank must read the same -e, from storage they all share\n", ranks.rank, lo, hi);
        exit(EXIT_FAILURE);
    }
    ncclCheck(ncclBroadcast(staging, staging, n, ncclFloat32, 0, nccl_comm, 0));
    cudaCheck(cudaMemcpy(host, staging, n * sizeof(float), cudaMemcpyDeviceToHost));
#else
    (void)host; (void)staging; (void)n;
#endif
}

// After the model is built: every rank must have found the same checkpoint.
void ranks_start_alike(GPT2 *model, int resume_step) {
    (void)model;
#ifdef USE_NCCL
    long long lo, hi;
    if (ranks.world > 1 && !ranks_agree(resume_step, &lo, &hi)) {
        fprintf(stderr, "Error: rank %d: the ranks resume from different checkpoints (steps %lld to %lld)\n"
                "HINT: -o must be a folder every machine sees, the same one (a shared file system)\n", ranks.rank, lo, hi);
        exit(EXIT_FAILURE);
    }
#else
    (void)resume_step;
#endif
}

// Layer l's gradients summed over the ranks (l = -1: wte, wpe, lnfw and lnfb, after the
// whole backward pass), on the second stream, once the default stream's work issued so far
// is done; in floatX, chunk by chunk: all-reduced, or sharded, each piece reduce-scattered
// to its rank and the rest all-reduced. (Called on the last micro-batch of a step; with
// ZeRO-2 for l = -1 only.)
static void sum_layer_grads(GPT2 *model, int l) {
#ifdef USE_NCCL
    ranks_alive();
    cudaCheck(cudaEventRecord(layer_done, 0));
    cudaCheck(cudaStreamWaitEvent(comm_stream, layer_done, 0));
    floatX **grads = (floatX **)&model->grads;
    size_t w = sharded() ? (size_t)ranks.world : 1;
    ncclCheck(ncclGroupStart());
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        if (PER_LAYER[k] != (l >= 0)) { continue; }
        size_t s = model->param_sizes[k] / chunks_of(model->config, k), q = piece_of(s), rest = rest_of(s);
        floatX *g = grads[k] + (l >= 0 ? (size_t)l * s : 0);
        if (!sharded()) {
            ncclCheck(ncclAllReduce(g, g, s, NCCL_FLOATX, ncclSum, nccl_comm, comm_stream));
            continue;
        }
        if (q > 0) { ncclCheck(ncclReduceScatter(g, g + (size_t)ranks.rank * q, q, NCCL_FLOATX, ncclSum, nccl_comm, comm_stream)); }
        if (rest > 0) { ncclCheck(ncclAllReduce(g + w * q, g + w * q, rest, NCCL_FLOATX, ncclSum, nccl_comm, comm_stream)); }
    }
    ncclCheck(ncclGroupEnd());
#else
    (void)model; (void)l;
#endif
}

// ZeRO-2, before layer l's backward pass: its one-layer table (l's parity), once the second
// stream is done with the layer two above that used it, zeroed (the backward kernels add
// into their gradients)
static ParameterTensors layer_grads_begin(GPT2 *model, int l) {
    int t = l % 2;
#ifdef USE_NCCL
    cudaCheck(cudaStreamWaitEvent(0, table_free[t], 0));
#endif
#if GUARD_BYTES > 0 // (debug builds: the table's guard bands still whole from its last layer, before they are zeroed)
    guard_check((void *const *)&model->layer_grads[t], model->layer_sizes, NULL, NUM_PARAMETER_TENSORS, PARAMETER_NAMES,
                "one-layer gradient");
#endif
    cudaCheck(cudaMemset(model->layer_grads_memory[t], 0, model->layer_grad_bytes));
    guard_fill((void *const *)&model->layer_grads[t], model->layer_sizes, NULL, NUM_PARAMETER_TENSORS); // (debug builds)
    return model->layer_grads[t];
}

// ZeRO-2, after layer l's backward pass (every micro-batch): the second stream waits for it,
// reduce-scatters each of the layer's tensors from the table into recv_grads and
// all-reduces the rest in place, adds this rank's piece and the rest into its shard of the
// gradients, and frees the table
static void sum_layer_grads2(GPT2 *model, int l) {
#ifdef USE_NCCL
    ranks_alive();
    int t = l % 2;
    cudaCheck(cudaEventRecord(layer_done, 0));
    cudaCheck(cudaStreamWaitEvent(comm_stream, layer_done, 0));
    floatX **table = (floatX **)&model->layer_grads[t];
    size_t w = (size_t)ranks.world, at = 0;
    ncclCheck(ncclGroupStart());
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        size_t s = model->layer_sizes[k], q = piece_of(s), rest = rest_of(s);
        if (s == 0) { continue; }
        if (q > 0) { ncclCheck(ncclReduceScatter(table[k], model->recv_grads + at, q, NCCL_FLOATX, ncclSum, nccl_comm, comm_stream)); }
        if (rest > 0) { ncclCheck(ncclAllReduce(table[k] + w * q, table[k] + w * q, rest, NCCL_FLOATX, ncclSum, nccl_comm, comm_stream)); }
        at += q;
    }
    ncclCheck(ncclGroupEnd());
    at = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        size_t s = model->layer_sizes[k], q = piece_of(s), rest = rest_of(s);
        if (s == 0) { continue; }
        floatX *shard = model->shard_grads + shard_offset(model->config, k, (size_t)l) - layer_shard_start(model->config);
        const floatX *from[2] = {model->recv_grads + at, table[k] + w * q};
        size_t count[2] = {q, rest};
        for (int j = 0; j < 2; j++) {
            if (count[j] == 0) { continue; }
            accumulate_kernel<<<ceil_div(count[j], BLOCK), BLOCK, 0, comm_stream>>>(shard + j * q, from[j], count[j]);
            cudaCheck(cudaGetLastError());
        }
        at += q;
    }
    cudaCheck(cudaEventRecord(table_free[t], comm_stream));
#else
    (void)model; (void)l;
#endif
}

// After the step's backward passes: the default stream waits for the sums they started
void gpt2_sum_grads(GPT2 *model) {
    (void)model;
#ifdef USE_NCCL
    cudaCheck(cudaEventRecord(sums_done, comm_stream));
    cudaCheck(cudaStreamWaitEvent(0, sums_done, 0));
#endif
}

// Sharded, after each rank's update of its pieces: the pieces of the weights into every
// rank's weights (floatX, on the default stream, where the next forward pass reads them)
static void gather_params(GPT2 *model) {
#ifdef USE_NCCL
    ranks_alive();
    floatX **params = (floatX **)&model->params;
    ncclCheck(ncclGroupStart());
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        size_t chunks = chunks_of(model->config, k), s = model->param_sizes[k] / chunks, q = piece_of(s);
        for (size_t l = 0; l < chunks && q > 0; l++) {
            floatX *p = params[k] + l * s;
            ncclCheck(ncclAllGather(p + (size_t)ranks.rank * q, p, q, NCCL_FLOATX, nccl_comm, 0));
        }
    }
    ncclCheck(ncclGroupEnd());
#else
    (void)model;
#endif
}

// Sharded checkpoints hold the whole state: one state array (m, v or the master weights,
// this rank's shard on its GPU) gathered into flat (num_parameters values in checkpoint
// order, in rank 0's host memory; NULL elsewhere), chunk by chunk through the link buffer:
// the ranks' pieces, a slice of each at a time, all-gathered side by side and copied where
// they belong; the rests are rank 0's own.
static void gather_state(const GPT2 *model, const float *shard, float *flat) {
#ifdef USE_NCCL
    size_t sizes[NUM_PARAMETER_TENSORS], offset = 0, at = 0, w = (size_t)ranks.world;
    size_t slice = LINK_BYTES / sizeof(float) / w; // (the most of each piece the link holds at once)
    float *link = (float *)link_buffer();
    fill_in_parameter_sizes(sizes, model->config);
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        size_t chunks = chunks_of(model->config, k), s = sizes[k] / chunks, q = piece_of(s), rest = rest_of(s);
        for (size_t l = 0; l < chunks; l++) {
            float *chunk = flat != NULL ? flat + offset + l * s : NULL;
            for (size_t from = 0; from < q; from += slice) {
                size_t n = q - from < slice ? q - from : slice;
                ranks_alive();
                cudaCheck(cudaMemcpy(link + (size_t)ranks.rank * n, shard + at + from, n * sizeof(float), cudaMemcpyDeviceToDevice));
                ncclCheck(ncclAllGather(link + (size_t)ranks.rank * n, link, n, ncclFloat32, nccl_comm, 0));
                for (size_t r = 0; r < w && chunk != NULL; r++) {
                    cudaCheck(cudaMemcpy(chunk + r * q + from, link + r * n, n * sizeof(float), cudaMemcpyDeviceToHost));
                }
            }
            if (chunk != NULL && rest > 0) {
                cudaCheck(cudaMemcpy(chunk + w * q, shard + at + q, rest * sizeof(float), cudaMemcpyDeviceToHost));
            }
            at += q + rest;
        }
        offset += sizes[k];
    }
    ranks_alive();
#else
    (void)model; (void)shard; (void)flat;
#endif
}

// This rank's shard of one flat state array in a checkpoint file (at byte `base`): its
// pieces and the rests only, chunk by chunk, so that no rank holds the whole state
static void read_shard(FILE *fp, const char *path, long base, GPT2Config c, float *shard) {
    size_t sizes[NUM_PARAMETER_TENSORS], offset = 0, at = 0;
    fill_in_parameter_sizes(sizes, c);
    size_t w = sharded() ? (size_t)ranks.world : 1, r = sharded() ? (size_t)ranks.rank : 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        size_t chunks = chunks_of(c, k), s = sizes[k] / chunks, q = piece_of(s), rest = rest_of(s);
        for (size_t l = 0; l < chunks; l++) {
            size_t from[2] = {offset + l * s + r * q, offset + l * s + w * q}, count[2] = {q, rest};
            for (int j = 0; j < 2; j++) {
                if (count[j] == 0) { continue; }
                if (fseek(fp, base + (long)(from[j] * sizeof(float)), SEEK_SET) != 0) {
                    fprintf(stderr, "Error: %s: cannot seek in it\n", path);
                    exit(EXIT_FAILURE);
                }
                freadCheck(shard + at, sizeof(float), count[j], fp);
                at += count[j];
            }
        }
        offset += sizes[k];
    }
}

// Set up sizes and the parameter block; host_params (num_parameters fp32
// values, in table order; over MPI rank 0's, broadcast into it) are copied in
// (rounded to floatX), and to the master copy in BF16 and FP16 (unless -w 0): all
// of them, or with ZeRO-1 this rank's shard.
static size_t peak_while_loading; // (the fp32 staging copy: the ledger's peak may be here)
static void gpt2_allocate_parameters(GPT2 *model, float *host_params) {
    fill_in_parameter_sizes(model->param_sizes, model->config);
    model->num_parameters = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { model->num_parameters += model->param_sizes[i]; }
    void *memory;
    cuda_malloc_and_point((void **)&model->params, model->param_sizes, NULL, NUM_PARAMETER_TENSORS, "the parameters", &memory);
    model->params_memory = (floatX *)memory;
    // slices are padded to 256 bytes: copy tensor by tensor
    float *staging = (float *)cuda_malloc_check(model->num_parameters * sizeof(float), "the parameters (fp32 staging)");
    cudaCheck(cudaMemcpy(staging, host_params, model->num_parameters * sizeof(float), cudaMemcpyHostToDevice));
    ranks_same_params(host_params, staging, model->num_parameters);
    floatX **tensors = (floatX **)&model->params;
    size_t offset = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        convert_kernel<<<ceil_div(model->param_sizes[k], BLOCK), BLOCK>>>(tensors[k], staging + offset, model->param_sizes[k]);
        cudaCheck(cudaGetLastError());
        offset += model->param_sizes[k];
    }
    if (sizeof(floatX) < sizeof(float) && use_master_weights && !sharded()) {
        model->master_memory = staging; // the staging copy becomes the master weights
    } else {
        cuda_free_check(staging);
        model->master_memory = NULL;
    }
    peak_while_loading = device_bytes_peak;
    if (sizeof(floatX) < sizeof(float) && use_master_weights && sharded()) { // (this rank's shard of them)
        size_t ns = shard_elements(model->config);
        float *shard = (float *)mallocCheck((ns > 0 ? ns : 1) * sizeof(float));
        shard_of(model->config, host_params, shard);
        model->master_memory = (float *)cuda_malloc_check(ns * sizeof(float), "the fp32 master weights (this rank's shard)");
        cudaCheck(cudaMemcpy(model->master_memory, shard, ns * sizeof(float), cudaMemcpyHostToDevice));
        free(shard);
    }
    model->grads_memory = NULL;
    model->layer_grads_memory[0] = model->layer_grads_memory[1] = NULL;
    model->shard_grads = model->recv_grads = NULL;
    model->m_memory = NULL;
    model->v_memory = NULL;
    model->norm_partials = NULL;
    model->norm_partials_host = NULL;
    model->acts_memory = NULL;
    model->grads_acts_memory = NULL;
    model->inputs = NULL;
    model->targets = NULL;
    model->losses_host = NULL;
    model->inputs_dev = NULL;
    model->targets_dev = NULL;
    model->batch_size = 0;
    model->seq_len = 0;
    model->mean_loss = -1.0f;
    model->loss_scale = LOSS_SCALE_INIT;
    model->good_steps = 0;
    model->skipped_updates = 0;
}

// --- begin shared-copy: gpt2-model-file ---
// The size of an open file in bytes; the position is left just after the 256 x
// int32 header that all our binary files start with.
static long file_size(FILE *fp, const char *path) {
    long bytes = -1;
    if (fseek(fp, 0, SEEK_END) == 0) { bytes = ftell(fp); }
    if (bytes < 0 || fseek(fp, 256 * sizeof(int), SEEK_SET) != 0) {
        fprintf(stderr, "Error: %s: cannot seek: %s\n", path, strerror(errno));
        exit(EXIT_FAILURE);
    }
    return bytes;
}

// Model checkpoints use llm.c's format, so its GPT-2 files load here unchanged:
// a header of 256 int32 (magic 20240326, version 3 = fp32, maxT, V, L, NH, C, Vp),
// then the 16 parameter tensors in table order, float32.
#define MODEL_MAGIC 20240326
#define MODEL_VERSION_FP32 3
#define MODEL_VERSION_BF16 5
// --- end shared-copy: gpt2-model-file ---

// --- begin shared-copy: gpt2-init ---
// Fill the parameters with random numbers: tensor k gets mean_k + std_k * N(0,1)
// from random stream k of `seed`, then the vocabulary padding rows are zeroed.
// GPT-2's scheme (Radford et al. 2019, and its released code): weights N(0, 0.02),
// the two projections that feed the residual stream scaled by 1/sqrt(2L) so the
// stream's variance does not grow with depth, biases 0, LayerNorms 1 and 0.
// With noisy = 1, biases and LayerNorms get noise too: the tests use that, so a
// bias or a LayerNorm weight that is ignored somewhere cannot go unnoticed.
// params: all of them, fp32, in table order (sizes: param_sizes).
void init_parameters(float *params, const size_t *param_sizes, GPT2Config config, uint64_t seed, int noisy) {
    double std_w = 0.02, std_proj = 0.02 / sqrt(2.0 * config.num_layers);
    double std_b = noisy ? 0.02 : 0.0, std_ln = noisy ? 0.1 : 0.0;
    //                                   wte    wpe    ln1w   ln1b   qkvw   qkvb   attprojw  attprojb
    double means[NUM_PARAMETER_TENSORS] = {0,     0,     1,     0,     0,     0,     0,        0,
    //                                   ln2w   ln2b   fcw    fcb    fcprojw   fcprojb lnfw lnfb
                                         1,     0,     0,     0,     0,        0,      1,   0};
    double stds[NUM_PARAMETER_TENSORS] = {std_w, std_w, std_ln, std_ln, std_w, std_b, std_proj, std_b,
                                          std_ln, std_ln, std_w, std_b, std_proj, std_b, std_ln, std_ln};
    float *p = params;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        uint64_t key = rng_key(seed, (uint64_t)k);
        double mean = means[k], std = stds[k];
        #pragma omp parallel for
        for (size_t i = 0; i < param_sizes[k]; i++) {
            // the product is rounded before the add, as numpy does it: GCC would
            // otherwise fuse the two into an FMA, which can differ in the last bit
            volatile double scaled = std * rng_normal_at(key, i);
            p[i] = (float)(mean + scaled);
        }
        p += param_sizes[k];
    }
    // wte is the first tensor: its rows V..Vp-1 are the padding
    size_t V = config.vocab_size, Vp = config.padded_vocab_size, C = config.channels;
    memset(params + V * C, 0, (Vp - V) * C * sizeof(float));
}

// The configuration of a new model from a short descriptor: "d<N>", depth L = N,
// channels C = 64 N, heads NH = N (so the head size is always 64, as in every
// GPT-2), or one of the four GPT-2 sizes by name; maxT = 1024, GPT-2's vocabulary.
// d12 is gpt2-124M, GPT-2 small; gpt2-350M (medium) is 24 layers of C = 1024 in
// 16 heads, which no d<N> makes.
static const struct { const char *name; int L, NH, C; } GPT2_SIZES[] = { // name, layers, heads, channels
    {"gpt2-124M", 12, 12, 768}, {"gpt2-350M", 24, 16, 1024}, {"gpt2-774M", 36, 20, 1280}, {"gpt2-1558M", 48, 25, 1600}};
GPT2Config gpt2_config_from_descriptor(const char *descriptor) {
    for (size_t i = 0; i < sizeof(GPT2_SIZES) / sizeof(GPT2_SIZES[0]); i++) {
        if (strcmp(descriptor, GPT2_SIZES[i].name) == 0) {
            GPT2Config c = {1024, 50257, 50304, GPT2_SIZES[i].L, GPT2_SIZES[i].NH, GPT2_SIZES[i].C};
            return c;
        }
    }
    char *end = NULL;
    long depth = descriptor[0] == 'd' ? strtol(descriptor + 1, &end, 10) : 0;
    if (end == NULL || *end != '\0' || depth < 1 || depth > 64) {
        fprintf(stderr, "Error: model '%s' is neither an existing file nor a descriptor d<N> (1 <= N <= 64)"
                " or gpt2-124M, gpt2-350M, gpt2-774M, gpt2-1558M\n", descriptor);
        fprintf(stderr, "HINT: d4 makes a new 4-layer model; path/model.bin loads a checkpoint\n");
        exit(EXIT_FAILURE);
    }
    GPT2Config c = {1024, 50257, 50304, (int)depth, (int)depth, 64 * (int)depth};
    return c;
}
// --- end shared-copy: gpt2-init ---

// The GPU memory a training run of batches of B x T will allocate, group by group,
// in bytes: exactly what it asks cuda_malloc_check for, so that the table printed at
// start-up (and by -M without a GPU) is the run's allocation to the byte, which the
// ledger checks after the first step. With cuDNN's attention its workspace, sized
// by cuDNN when the first graph is built, comes on top.
enum { MEM_PARAMETERS, MEM_MASTER, MEM_GRADIENTS, MEM_MOMENTS, MEM_ACTIVATIONS, MEM_GRAD_ACTS, MEM_SMALL, MEM_WORKSPACE,
       NUM_MEM_GROUPS };
static const char *const MEM_GROUP_NAMES[NUM_MEM_GROUPS] = {
    "parameters", "fp32 master weights", "gradients", "AdamW moments (fp32)", "activations", "activation gradients",
    "batch and scratch", "cuBLASLt workspace"};
static size_t gpt2_memory_plan(size_t bytes[NUM_MEM_GROUPS], GPT2Config c, size_t B, size_t T, int recompute,
                               int master_weights, int flash) {
    size_t param_sizes[NUM_PARAMETER_TENSORS], act_sizes[NUM_ACTIVATION_TENSORS], grad_act_sizes[NUM_GRAD_ACT_TENSORS];
    fill_in_parameter_sizes(param_sizes, c);
    fill_in_activation_sizes(act_sizes, c, B, T, recompute, flash);
    fill_in_grad_act_sizes(grad_act_sizes, c, B, T, flash);
    size_t N = B * T;
    bytes[MEM_PARAMETERS] = table_bytes(param_sizes, NULL, NUM_PARAMETER_TENSORS);
    size_t ns = shard_elements(c); // (n, or with ZeRO-1 this rank's shard)
    bytes[MEM_MASTER] = sizeof(floatX) < sizeof(float) && master_weights ? ns * sizeof(float) : 0;
    size_t grad_sizes[NUM_PARAMETER_TENSORS], layer_sizes[NUM_PARAMETER_TENSORS], recv = 0;
    grad_table_sizes(c, grad_sizes, layer_sizes);
    bytes[MEM_GRADIENTS] = table_bytes(grad_sizes, NULL, NUM_PARAMETER_TENSORS); // (all of them, but with ZeRO-2:)
    if (zero2()) { // two one-layer tables, this rank's shard of the layers', one layer's pieces
        for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) { recv += piece_of(layer_sizes[k]); }
        bytes[MEM_GRADIENTS] += 2 * table_bytes(layer_sizes, NULL, NUM_PARAMETER_TENSORS) + (layer_shard_elements(c) + recv) * sizeof(floatX);
    }
    bytes[MEM_MOMENTS] = 2 * ns * sizeof(float);
    bytes[MEM_ACTIVATIONS] = table_bytes(act_sizes, ACT_FP32, NUM_ACTIVATION_TENSORS);
    bytes[MEM_GRAD_ACTS] = table_bytes(grad_act_sizes, NULL, NUM_GRAD_ACT_TENSORS);
    bytes[MEM_SMALL] = 2 * N * sizeof(int)                                              // the batch: inputs, targets
                       + (size_t)ceil_div(N, ROWS_PER_CHUNK) * 4 * c.channels * sizeof(float) // the column sums' partials
                       + norm_partial_sets() * NUM_PARAMETER_TENSORS * NORM_BLOCKS * sizeof(float) // the norm's partial sums
                       + (3 * N + 1) * sizeof(int);                                     // the embedding gradient's buckets
    bytes[MEM_WORKSPACE] = CUBLASLT_WORKSPACE_BYTES;
    size_t total = 0;
    for (int i = 0; i < NUM_MEM_GROUPS; i++) { total += bytes[i]; }
    return total;
}

// the table: each group in MiB, the total also in bytes
void gpt2_print_memory_plan(GPT2Config c, size_t B, size_t T, int recompute, int master_weights, int flash) {
    size_t bytes[NUM_MEM_GROUPS];
    size_t total = gpt2_memory_plan(bytes, c, B, T, recompute, master_weights, flash);
    printf("GPU memory (%s, B=%zu, T=%zu, recomputation -r %d%s%s):\n", PRECISION_NAME, B, T, recompute,
           flash ? ", flash attention (-F 1)" : USE_CUDNN_ATTENTION ? ", cuDNN attention: its workspace comes on top" : "",
           zero2() ? ", ZeRO-2: each rank's shard of the master weights, moments and the layers' gradients"
           : sharded() ? ", ZeRO-1: each rank's shard of the master weights and moments" : "");
    for (int i = 0; i < NUM_MEM_GROUPS; i++) { printf("  %-22s %10.1f MiB\n", MEM_GROUP_NAMES[i], bytes[i] / 1048576.0); }
    printf("  %-22s %10.1f MiB = %zu bytes (predicted; after the first step the run checks it)\n", "total",
           total / 1048576.0, total);
}
// and the table of a model whose activations are allocated
void gpt2_print_memory(const GPT2 *model, size_t B, size_t T) {
    gpt2_print_memory_plan(model->config, B, T, model->recompute, model->master_memory != NULL, model->flash);
}

// the parameters exactly as stored on the GPU (floatX), in table order, into host memory
static void gpt2_download_params(const GPT2 *model, floatX *out) {
    const floatX *const *tensors = (const floatX *const *)&model->params;
    size_t offset = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        cudaCheck(cudaMemcpy(out + offset, tensors[k], model->param_sizes[k] * sizeof(floatX), cudaMemcpyDeviceToHost));
        offset += model->param_sizes[k];
    }
}

// A model file of llm.c's format: version 3 (fp32) or 5 (bf16) parameters; either
// loads in either precision (converted on the way in).
// Its header, checked against the file's size: the configuration, and the bytes of
// one stored parameter (elem).
static GPT2Config read_model_header(FILE *fp, const char *checkpoint_path, size_t *elem_out) {
    GPT2Config config;
    int header[256];
    if (fread(header, sizeof(int), 256, fp) != 256) {
        fprintf(stderr, "Error: %s: file too short for a model header (256 x int32)\n", checkpoint_path);
        fprintf(stderr, "HINT: is this a model checkpoint? train_gpt2 writes them as model_<step>.bin\n");
        exit(EXIT_FAILURE);
    }
    if (header[0] != MODEL_MAGIC) {
        fprintf(stderr, "Error: %s: bad magic number: expected %d (llm.c GPT-2 model), found %d\n",
                checkpoint_path, MODEL_MAGIC, header[0]);
        fprintf(stderr, "HINT: pass a model file (model_<step>.bin, or llm.c's gpt2_124M.bin), or -e d<N> for a new model\n");
        exit(EXIT_FAILURE);
    }
    if (header[1] != MODEL_VERSION_FP32 && header[1] != MODEL_VERSION_BF16) {
        fprintf(stderr, "Error: %s: model file version %d; this trainer reads versions %d (fp32) and %d (bf16)\n",
                checkpoint_path, header[1], MODEL_VERSION_FP32, MODEL_VERSION_BF16);
        exit(EXIT_FAILURE);
    }
    config.max_seq_len = header[2];
    config.vocab_size = header[3];
    config.num_layers = header[4];
    config.num_heads = header[5];
    config.channels = header[6];
    config.padded_vocab_size = header[7];
    gpt2_validate_config(config, checkpoint_path);
    size_t n = gpt2_count_parameters(config), elem = header[1] == MODEL_VERSION_FP32 ? 4 : 2;
    size_t expected = 256 * sizeof(int) + n * elem;
    long actual = file_size(fp, checkpoint_path);
    if ((size_t)actual != expected) {
        fprintf(stderr, "Error: %s: file has %ld bytes, its header (L=%d C=%d Vp=%d maxT=%d, %s) needs %zu: truncated or corrupt\n",
                checkpoint_path, actual, header[4], header[6], header[7], header[2], elem == 4 ? "fp32" : "bf16", expected);
        exit(EXIT_FAILURE);
    }
    *elem_out = elem;
    return config;
}

void gpt2_build_from_checkpoint(GPT2 *model, const char *checkpoint_path) {
    FILE *fp = fopenCheck(checkpoint_path, "rb");
    size_t elem;
    model->config = read_model_header(fp, checkpoint_path, &elem);
    size_t n = gpt2_count_parameters(model->config);
    float *host = (float *)mallocCheck(n * sizeof(float));
    if (elem == 4) {
        freadCheck(host, sizeof(float), n, fp);
    } else { // bf16: the top half of an fp32, so widening is exact
        uint16_t *raw = (uint16_t *)mallocCheck(n * sizeof(uint16_t));
        freadCheck(raw, sizeof(uint16_t), n, fp);
        for (size_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)raw[i] << 16;
            memcpy(&host[i], &u, sizeof(float));
        }
        free(raw);
    }
    fcloseCheck(fp);
    gpt2_allocate_parameters(model, host);
    free(host);
}

// llm.c's model file in this build's precision: version 3 (fp32) or 5 (bf16)
void gpt2_save_checkpoint(const GPT2 *model, const char *path) {
    int header[256] = {0};
    header[0] = MODEL_MAGIC;
    header[1] = MODEL_VERSION_OURS;
    header[2] = model->config.max_seq_len;
    header[3] = model->config.vocab_size;
    header[4] = model->config.num_layers;
    header[5] = model->config.num_heads;
    header[6] = model->config.channels;
    header[7] = model->config.padded_vocab_size;
    size_t n = model->num_parameters;
    floatX *host = (floatX *)mallocCheck(n * sizeof(floatX));
    gpt2_download_params(model, host);
    const void *bufs[2] = {header, host};
    size_t sizes[2] = {sizeof(header), n * sizeof(floatX)};
    float *wide = NULL;
    if (MODEL_VERSION_OURS == MODEL_VERSION_FP32 && sizeof(floatX) != sizeof(float)) {
        // fp16, written as fp32 (every fp16 value is exactly a float)
        wide = (float *)mallocCheck(n * sizeof(float));
        for (size_t i = 0; i < n; i++) { wide[i] = to_float(host[i]); }
        bufs[1] = wide;
        sizes[1] = n * sizeof(float);
    }
    write_file_atomic(path, bufs, sizes, 2);
    free(wide);
    free(host);
}

// a new model with random weights, from a descriptor d<N>, drawn on the host
// exactly as train_gpt2.c draws them
void gpt2_build_from_descriptor(GPT2 *model, const char *descriptor, uint64_t seed) {
    model->config = gpt2_config_from_descriptor(descriptor);
    size_t sizes[NUM_PARAMETER_TENSORS];
    fill_in_parameter_sizes(sizes, model->config);
    float *host = (float *)mallocCheck(gpt2_count_parameters(model->config) * sizeof(float));
    init_parameters(host, sizes, model->config, seed, 0);
    gpt2_allocate_parameters(model, host);
    free(host);
}

// ----------------------------------------------------------------------------
// the model: forward, backward, update

// -r 0 applies GELU in cuBLASLt's epilogue, which stores its input with a leading
// dimension of 4C, and needs that to be a multiple of 8
static void check_recompute_level(GPT2Config c, int recompute) {
    if (recompute == 0 && (4 * c.channels) % 8 != 0) {
        fprintf(stderr, "Error: -r 0 (GELU in cuBLASLt's epilogue) needs an even channel count, the model has C=%d\n"
                "HINT: -r 1\n", c.channels);
        exit(EXIT_FAILURE);
    }
}
// -F 1's kernels size their tiles for heads of up to 128 channels, and launch a block row per
// sequence and head (a grid's second dimension: at most 65,535)
static void check_flash(GPT2Config c, size_t B, int flash) {
    if (flash && c.channels / c.num_heads > 128) {
        fprintf(stderr, "Error: -F 1: flash attention's kernels take heads of up to 128 channels, the model's are %d\n"
                "HINT: -F 0\n", c.channels / c.num_heads);
        exit(EXIT_FAILURE);
    }
    if (flash && B * (size_t)c.num_heads > 65535) {
        fprintf(stderr, "Error: -F 1: at most 65,535 sequences x heads a batch, -b %zu x %d heads is more\nHINT: a smaller -b"
                " (and -d to keep the total batch)\n", B, c.num_heads);
        exit(EXIT_FAILURE);
    }
}

// Activations for batches of up to B x T tokens, and the scratch of the row
// reductions (the widest: 4C columns for the MLP's bias).
void gpt2_allocate_activations(GPT2 *model, size_t B, size_t T) {
    model->batch_size = (int)B;
    model->seq_len = (int)T;
    model->recompute = recompute_level;
    model->flash = flash_attention;
    check_recompute_level(model->config, model->recompute);
    check_flash(model->config, B, model->flash);
    fill_in_activation_sizes(model->act_sizes, model->config, B, T, model->recompute, model->flash);
    model->num_activations = 0;
    for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) { model->num_activations += model->act_sizes[i]; }
    model->act_bytes = cuda_malloc_and_point((void **)&model->acts, model->act_sizes, ACT_FP32, NUM_ACTIVATION_TENSORS,
                                             "the activations", &model->acts_memory);
    size_t needed = (size_t)ceil_div(B * T, ROWS_PER_CHUNK) * 4 * model->config.channels;
    if (needed > reduce_scratch_floats) {
        cuda_free_check(reduce_scratch);
        reduce_scratch = (float *)cuda_malloc_check(needed * sizeof(float), "the reduction scratch");
        reduce_scratch_floats = needed;
    }
    model->inputs = (int *)mallocCheck(B * T * sizeof(int));
    model->targets = (int *)mallocCheck(B * T * sizeof(int));
    model->losses_host = (float *)mallocCheck(B * T * sizeof(float));
    model->inputs_dev = (int *)cuda_malloc_check(2 * B * T * sizeof(int), "the batch");
    model->targets_dev = model->inputs_dev + B * T;
}

// Forward pass over inputs (B,T), host arrays. With targets it also computes the
// mean loss, and the fused classifier leaves d(mean loss)/d(logits) where the
// logits were (the backward pass comes next; validation simply ignores it);
// without targets (sampling) it stops at the logits.
void gpt2_forward(GPT2 *model, const int *inputs, const int *targets, size_t B, size_t T) {
    ranks_alive(); // (the watchdog: this rank is getting on)
    GPT2Config c = model->config;
    size_t V = c.vocab_size, Vp = c.padded_vocab_size, L = c.num_layers, NH = c.num_heads, C = c.channels;
    if (T > (size_t)c.max_seq_len) {
        fprintf(stderr, "Error: sequence length T=%zu exceeds the model's maximum maxT=%d\n", T, c.max_seq_len);
        exit(EXIT_FAILURE);
    }
    for (size_t i = 0; i < B * T; i++) {
        if (inputs[i] < 0 || (size_t)inputs[i] >= V || (targets != NULL && (targets[i] < 0 || (size_t)targets[i] >= V))) {
            fprintf(stderr, "Error: token id %d at position %zu is outside the vocabulary [0, %zu)\n",
                    targets != NULL && (inputs[i] >= 0 && (size_t)inputs[i] < V) ? targets[i] : inputs[i], i, V);
            exit(EXIT_FAILURE);
        }
    }
    if (model->acts_memory == NULL) {
        gpt2_allocate_activations(model, B, T);
    } else if (B > (size_t)model->batch_size || T > (size_t)model->seq_len) {
        fprintf(stderr, "Error: forward with B=%zu T=%zu, but activations were allocated for B=%d T=%d\n",
                B, T, model->batch_size, model->seq_len);
        exit(EXIT_FAILURE);
    }
    memcpy(model->inputs, inputs, B * T * sizeof(int));
    cudaCheck(cudaMemcpy(model->inputs_dev, inputs, B * T * sizeof(int), cudaMemcpyHostToDevice));
    if (targets != NULL) {
        memcpy(model->targets, targets, B * T * sizeof(int));
        cudaCheck(cudaMemcpy(model->targets_dev, targets, B * T * sizeof(int), cudaMemcpyHostToDevice));
    }
    model->B = (int)B;
    model->T = (int)T;

    ParameterTensors p = model->params;
    ActivationTensors a = model->acts;
    encoder_forward(a.encoded, model->inputs_dev, p.wte, p.wpe, B, T, C);
    for (size_t l = 0; l < L; l++) {
        layer_range_push("forward", (int)l);
        // this layer's slices of the parameters and activations
        const floatX *residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * B * T * C;
        const floatX *l_ln1w = p.ln1w + l * C, *l_ln1b = p.ln1b + l * C;
        const floatX *l_qkvw = p.qkvw + l * 3 * C * C, *l_qkvb = p.qkvb + l * 3 * C;
        const floatX *l_attprojw = p.attprojw + l * C * C, *l_attprojb = p.attprojb + l * C;
        const floatX *l_ln2w = p.ln2w + l * C, *l_ln2b = p.ln2b + l * C;
        const floatX *l_fcw = p.fcw + l * 4 * C * C, *l_fcb = p.fcb + l * 4 * C;
        const floatX *l_fcprojw = p.fcprojw + l * C * 4 * C, *l_fcprojb = p.fcprojb + l * C;
        // (the recomputed activations: the same buffer for every layer)
        size_t l_ln = model->recompute >= 2 ? 0 : l, l_gelu = model->recompute >= 1 ? 0 : l;
        floatX *l_ln1 = a.ln1 + l_ln * B * T * C;
        float *l_ln1_mean = a.ln1_mean + l * B * T, *l_ln1_rstd = a.ln1_rstd + l * B * T;
        floatX *l_qkv = a.qkv + l * B * T * 3 * C, *l_atty = a.atty + l * B * T * C, *l_attproj = a.attproj + l * B * T * C;
        floatX *l_residual2 = a.residual2 + l * B * T * C, *l_ln2 = a.ln2 + l_ln * B * T * C;
        float *l_ln2_mean = a.ln2_mean + l * B * T, *l_ln2_rstd = a.ln2_rstd + l * B * T;
        floatX *l_fch = a.fch + l * B * T * 4 * C, *l_fch_gelu = a.fch_gelu + l_gelu * B * T * 4 * C;
        floatX *l_fcproj = a.fcproj + l * B * T * C, *l_residual3 = a.residual3 + l * B * T * C;

        // attention block: x + attproj(attention(ln1(x)))
        layernorm_forward(l_ln1, l_ln1_mean, l_ln1_rstd, residual, l_ln1w, l_ln1b, B, T, C);
        matmul_forward(l_qkv, l_ln1, l_qkvw, l_qkvb, B, T, C, 3 * C);
        if (model->flash) {
            flash_attention_forward(l_atty, a.att_stats + l * B * NH * T, l_qkv, B, T, C, NH);
        } else {
#if defined(ENABLE_CUDNN)
            attention_forward_cudnn(l_atty, a.att_stats + l * B * NH * T, l_qkv, B, T, NH, C);
#else
            attention_forward(l_atty, a.qkvr + l * B * T * 3 * C, a.att + l * B * NH * T * T, a.yr, l_qkv, B, T, C, NH);
#endif
        }
        matmul_forward(l_attproj, l_atty, l_attprojw, l_attprojb, B, T, C, C);
        residual_forward(l_residual2, residual, l_attproj, B * T * C);
        // MLP block: x + fcproj(gelu(fc(ln2(x))))
        layernorm_forward(l_ln2, l_ln2_mean, l_ln2_rstd, l_residual2, l_ln2w, l_ln2b, B, T, C);
        if (model->recompute == 0) {
            matmul_forward_gelu(l_fch_gelu, l_fch, l_ln2, l_fcw, l_fcb, B, T, C, 4 * C);
        } else {
            // GELU by our kernel, as the backward pass will recompute it: cuBLASLt's
            // epilogue applies GELU before rounding, so its bits would differ
            matmul_forward(l_fch, l_ln2, l_fcw, l_fcb, B, T, C, 4 * C);
            gelu_forward(l_fch_gelu, l_fch, B * T * 4 * C);
        }
        matmul_forward(l_fcproj, l_fch_gelu, l_fcprojw, l_fcprojb, B, T, 4 * C, C);
        residual_forward(l_residual3, l_residual2, l_fcproj, B * T * C);
        nvtxRangePop();
    }
    const floatX *residual = a.residual3 + (L - 1) * B * T * C;
    layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, residual, p.lnfw, p.lnfb, B, T, C);
    matmul_forward(a.logits, a.lnf, p.wte, NULL, B, T, C, Vp);

    if (targets != NULL) {
        // the gradient of the mean loss, d/dlogits = (softmax - onehot) / (B*T), times
        // the loss scale (FP16; else 1)
        fused_classifier(a.logits, a.losses, model->targets_dev, model->loss_scale / (float)(B * T), B, T, V, Vp);
        cudaCheck(cudaMemcpy(model->losses_host, a.losses, B * T * sizeof(float), cudaMemcpyDeviceToHost));
        double sum = 0.0;
        for (size_t i = 0; i < B * T; i++) { sum += model->losses_host[i]; }
        model->mean_loss = (float)(sum / (B * T));
    } else {
        model->mean_loss = -1.0f;
    }
}

void gpt2_zero_grad(GPT2 *model) {
    if (model->grads_memory == NULL) { return; }
    cudaCheck(cudaMemset(model->grads_memory, 0, model->grad_bytes));
    guard_fill((void *const *)&model->grads, model->grad_sizes, NULL, NUM_PARAMETER_TENSORS); // (debug builds)
    if (model->shard_grads != NULL) { cudaCheck(cudaMemset(model->shard_grads, 0, layer_shard_elements(model->config) * sizeof(floatX))); }
}

// Debug builds (GUARD_BYTES > 0): every guard band of the four tables still
// whole? Called after each training step and when the model is freed.
static void gpt2_check_guard_bands(const GPT2 *model) {
    guard_check((void *const *)&model->params, model->param_sizes, NULL, NUM_PARAMETER_TENSORS, PARAMETER_NAMES,
                "parameter");
    if (model->grads_memory != NULL) {
        guard_check((void *const *)&model->grads, model->grad_sizes, NULL, NUM_PARAMETER_TENSORS, PARAMETER_NAMES,
                    "gradient");
        for (int t = 0; t < 2 && model->layer_grads_memory[t] != NULL; t++) {
            guard_check((void *const *)&model->layer_grads[t], model->layer_sizes, NULL, NUM_PARAMETER_TENSORS, PARAMETER_NAMES,
                        "one-layer gradient");
        }
        guard_check((void *const *)&model->grads_acts, model->grad_act_sizes, NULL, NUM_GRAD_ACT_TENSORS, GRAD_ACT_NAMES,
                    "activation gradient");
    }
    if (model->acts_memory != NULL) {
        guard_check((void *const *)&model->acts, model->act_sizes, ACT_FP32, NUM_ACTIVATION_TENSORS, ACTIVATION_NAMES,
                    "activation");
    }
}

// Backward pass of the last forward (which must have had targets). Parameter
// gradients ACCUMULATE over micro-batches; loss_scale is d(total loss)/d(this
// batch's mean loss), applied to the classifier's gradient as it is used.
void gpt2_backward(GPT2 *model, float loss_scale) {
    ranks_alive();
    if (model->mean_loss == -1.0f) {
        fprintf(stderr, "Error: gpt2_backward called without a forward pass with targets\n");
        exit(EXIT_FAILURE);
    }
    GPT2Config c = model->config;
    size_t B = model->B, T = model->T;
    size_t Vp = c.padded_vocab_size, L = c.num_layers, NH = c.num_heads, C = c.channels;
    if (model->grads_memory == NULL) {
        // first call: parameter gradients (zeroed) and the activation gradients
        void *memory;
        grad_table_sizes(c, model->grad_sizes, model->layer_sizes);
        model->grad_bytes = cuda_malloc_and_point((void **)&model->grads, model->grad_sizes, NULL, NUM_PARAMETER_TENSORS,
                                                  "the gradients", &memory);
        model->grads_memory = (floatX *)memory;
        if (zero2()) {
            size_t recv = 0, ns = layer_shard_elements(c);
            for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) { recv += piece_of(model->layer_sizes[k]); }
            for (int t = 0; t < 2; t++) {
                model->layer_grad_bytes = cuda_malloc_and_point((void **)&model->layer_grads[t], model->layer_sizes, NULL,
                                                                NUM_PARAMETER_TENSORS, "one layer's gradients (ZeRO-2)",
                                                                &model->layer_grads_memory[t]);
            }
            model->shard_grads = (floatX *)cuda_malloc_check(ns * sizeof(floatX), "this rank's shard of the layers' gradients (ZeRO-2)");
            model->recv_grads = (floatX *)cuda_malloc_check(recv * sizeof(floatX), "one layer's summed pieces (ZeRO-2)");
        }
        gpt2_zero_grad(model);
        fill_in_grad_act_sizes(model->grad_act_sizes, c, model->batch_size, model->seq_len, model->flash);
        model->grad_act_bytes = cuda_malloc_and_point((void **)&model->grads_acts, model->grad_act_sizes, NULL,
                                                      NUM_GRAD_ACT_TENSORS, "the activation gradients",
                                                      &model->grads_acts_memory);
        size_t partials = norm_partial_sets() * NUM_PARAMETER_TENSORS * NORM_BLOCKS;
        model->norm_partials = (float *)cuda_malloc_check(partials * sizeof(float), "the norm's partial sums");
        model->norm_partials_host = (float *)mallocCheck(partials * sizeof(float));
    }
    ParameterTensors p = model->params, g = model->grads;
    ActivationTensors a = model->acts;
    GradActTensors ga = model->grads_acts;

    // the logits hold d(mean loss)/d(logits) already (fused classifier); loss_scale is applied here
    const floatX *dlogits = a.logits;
    matmul_backward_scaled(ga.dln, g.wte, NULL, dlogits, a.lnf, p.wte, B, T, C, Vp, loss_scale);
    // dresidual starts as the gradient at the last block's output...
    const floatX *residual = a.residual3 + (L - 1) * B * T * C;
    cudaCheck(cudaMemset(ga.dresidual, 0, B * T * C * sizeof(floatX)));
    layernorm_backward(ga.dresidual, g.lnfw, g.lnfb, ga.dln, residual, p.lnfw, a.lnf_mean, a.lnf_rstd, B, T, C);

    // ...and flows down the residual stream, as in train_gpt2.c
    for (int li = (int)L - 1; li >= 0; li--) {
        size_t l = (size_t)li;
        layer_range_push("backward", li);
        residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * B * T * C;
        const floatX *l_ln1w = p.ln1w + l * C, *l_qkvw = p.qkvw + l * 3 * C * C, *l_attprojw = p.attprojw + l * C * C;
        const floatX *l_ln2w = p.ln2w + l * C, *l_fcw = p.fcw + l * 4 * C * C, *l_fcprojw = p.fcprojw + l * C * 4 * C;
        // the layer's gradients: layer l of the tensors, or with ZeRO-2 a one-layer table's
        ParameterTensors gl = zero2() ? layer_grads_begin(model, li) : g;
        size_t at = zero2() ? 0 : l;
        floatX *dl_ln1w = gl.ln1w + at * C, *dl_ln1b = gl.ln1b + at * C;
        floatX *dl_qkvw = gl.qkvw + at * 3 * C * C, *dl_qkvb = gl.qkvb + at * 3 * C;
        floatX *dl_attprojw = gl.attprojw + at * C * C, *dl_attprojb = gl.attprojb + at * C;
        floatX *dl_ln2w = gl.ln2w + at * C, *dl_ln2b = gl.ln2b + at * C;
        floatX *dl_fcw = gl.fcw + at * 4 * C * C, *dl_fcb = gl.fcb + at * 4 * C;
        floatX *dl_fcprojw = gl.fcprojw + at * C * 4 * C, *dl_fcprojb = gl.fcprojb + at * C;
        size_t l_ln = model->recompute >= 2 ? 0 : l, l_gelu = model->recompute >= 1 ? 0 : l;
        floatX *l_ln1 = a.ln1 + l_ln * B * T * C;
        float *l_ln1_mean = a.ln1_mean + l * B * T, *l_ln1_rstd = a.ln1_rstd + l * B * T;
        const floatX *l_atty = a.atty + l * B * T * C;
        floatX *l_ln2 = a.ln2 + l_ln * B * T * C;
        const floatX *l_residual2 = a.residual2 + l * B * T * C;
        float *l_ln2_mean = a.ln2_mean + l * B * T, *l_ln2_rstd = a.ln2_rstd + l * B * T;
        floatX *l_fch = a.fch + l * B * T * 4 * C, *l_fch_gelu = a.fch_gelu + l_gelu * B * T * 4 * C;

        // recomputation: what the forward pass did not keep, computed again from
        // what it did (the same kernels and inputs, so the same bits; LayerNorm
        // writes its statistics again, unchanged)
        if (model->recompute >= 1) { gelu_forward(l_fch_gelu, l_fch, B * T * 4 * C); }
        if (model->recompute >= 2) {
            layernorm_forward(l_ln2, l_ln2_mean, l_ln2_rstd, l_residual2, p.ln2w + l * C, p.ln2b + l * C, B, T, C);
            layernorm_forward(l_ln1, l_ln1_mean, l_ln1_rstd, residual, p.ln1w + l * C, p.ln1b + l * C, B, T, C);
        }

        // MLP block, in reverse; dresidual is the gradient at fcproj's output
        matmul_backward_gelu(ga.dfch, dl_fcprojw, dl_fcprojb, ga.dresidual, l_fch_gelu, l_fch, l_fcprojw, B, T, 4 * C, C);
        matmul_backward(ga.dln, dl_fcw, dl_fcb, ga.dfch, l_ln2, l_fcw, B, T, C, 4 * C);
        layernorm_backward(ga.dresidual, dl_ln2w, dl_ln2b, ga.dln, l_residual2, l_ln2w, l_ln2_mean, l_ln2_rstd, B, T, C);
        // attention block, in reverse; dresidual is now the gradient at residual2
        matmul_backward(ga.datty, dl_attprojw, dl_attprojb, ga.dresidual, l_atty, l_attprojw, B, T, C, C);
        if (model->flash) {
            flash_attention_backward(ga.dqkv, a.att_D, ga.datty, a.qkv + l * B * T * 3 * C, l_atty, a.att_stats + l * B * NH * T, B,
                                     T, C, NH);
        } else {
#if defined(ENABLE_CUDNN)
            attention_backward_cudnn(ga.dqkv, ga.datty, a.qkv + l * B * T * 3 * C, l_atty, a.att_stats + l * B * NH * T, B, T,
                                     NH, C);
#else
            attention_backward(ga.dqkv, ga.dqkvr, ga.datt, ga.dyr, ga.datty, a.qkvr + l * B * T * 3 * C,
                               a.att + l * B * NH * T * T, B, T, C, NH);
#endif
        }
        matmul_backward(ga.dln, dl_qkvw, dl_qkvb, ga.dqkv, l_ln1, l_qkvw, B, T, C, 3 * C);
        layernorm_backward(ga.dresidual, dl_ln1w, dl_ln1b, ga.dln, residual, l_ln1w, l_ln1_mean, l_ln1_rstd, B, T, C);
        nvtxRangePop();
        if (zero2()) { sum_layer_grads2(model, li); } // (ZeRO-2: summed on every pass, as they are made)
        else if (sum_grads_in_backward) { sum_layer_grads(model, li); } // (the step's last pass: this layer's are whole)
    }
    encoder_backward(g.wte, g.wpe, ga.dresidual, model->inputs, B, T, C);
    if (sum_grads_in_backward) { sum_layer_grads(model, -1); } // (and wte, wpe, lnfw, lnfb)
}

// The L2 norm of all parameter gradients: per tensor (the slices are padded) up
// to NORM_BLOCKS partial sums of squares on the GPU, fewer for small tensors (the
// split depends on the size only: fixed order); one copy, added on the host in double.
// Sharded, each rank sums its pieces of the tensor's chunks (whose sums it received) and
// rank 0 the rests too (the same on every rank: counted once), then the ranks' sums are
// added.
float gpt2_grad_norm(const GPT2 *model) {
    const floatX *const *grads = (const floatX *const *)&model->grads;
    unsigned blocks[2 * NUM_PARAMETER_TENSORS] = {0};
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        size_t n = model->param_sizes[k];
        if (!sharded()) {
            blocks[k] = ceil_div(n, BLOCK) < NORM_BLOCKS ? ceil_div(n, BLOCK) : NORM_BLOCKS;
            norm_partials_kernel<<<blocks[k], BLOCK>>>(model->norm_partials + k * NORM_BLOCKS, grads[k], n);
            cudaCheck(cudaGetLastError());
            continue;
        }
        size_t chunks = chunks_of(model->config, k), s = n / chunks, q = piece_of(s), rest = rest_of(s);
        size_t first[2] = {(size_t)ranks.rank * q, (size_t)ranks.world * q}, width[2] = {q, ranks.rank == 0 ? rest : 0};
        const floatX *g = grads[k];
        if (zero2() && PER_LAYER[k]) { // (the shard of the layers' gradients: each chunk's piece, then its rest)
            g = model->shard_grads + shard_offset(model->config, k, 0) - layer_shard_start(model->config);
            first[0] = 0;
            first[1] = q;
            s = q + rest;
        }
        for (int j = 0; j < 2; j++) {
            size_t values = chunks * width[j];
            if (values == 0) { continue; }
            int set = j * NUM_PARAMETER_TENSORS + k;
            blocks[set] = ceil_div(values, BLOCK) < NORM_BLOCKS ? ceil_div(values, BLOCK) : NORM_BLOCKS;
            norm_strided_partials_kernel<<<blocks[set], BLOCK>>>(model->norm_partials + set * NORM_BLOCKS, g, chunks, s,
                                                                 first[j], width[j]);
            cudaCheck(cudaGetLastError());
        }
    }
    size_t n = norm_partial_sets() * NUM_PARAMETER_TENSORS * NORM_BLOCKS;
    cudaCheck(cudaMemcpy(model->norm_partials_host, model->norm_partials, n * sizeof(float), cudaMemcpyDeviceToHost));
    double sumsq = 0.0;
    for (int set = 0; set < norm_partial_sets() * NUM_PARAMETER_TENSORS; set++) {
        for (unsigned i = 0; i < blocks[set]; i++) { sumsq += model->norm_partials_host[set * NORM_BLOCKS + i]; }
    }
    if (sharded()) { sumsq = ranks_sum(sumsq); }
    return (float)(sqrt(sumsq) / model->loss_scale); // the norm of the true, unscaled gradients
}

// AdamW exactly as train_gpt2.c's gpt2_update (torch.optim.AdamW), one kernel per tensor
// The AdamW moments, zero, allocated lazily at the first step, so that inference
// and evaluation never pay for the optimizer. m, v (and the master weights) are
// flat arrays of num_parameters floats, in the order of checkpoint files, which
// gpt2_update walks by param_sizes: not sliced, so they have no guard bands.
static void gpt2_allocate_moments(GPT2 *model) {
    if (model->m_memory != NULL) { return; }
    size_t ns = shard_elements(model->config); // (all of them, or this rank's shard)
    model->m_memory = (float *)cuda_malloc_check(2 * ns * sizeof(float), "the AdamW moments");
    model->v_memory = model->m_memory + ns;
    cudaCheck(cudaMemset(model->m_memory, 0, 2 * ns * sizeof(float)));
}

#ifndef TESTING // (a test holds several models at once: one ledger, several tables)
// After the first update everything is allocated (the moments at the first update, or
// by load_state when the run resumed). The ledger's figure must be the start-up table's
// (cuDNN's workspace, which cuDNN sizes when it builds a graph, added); what the device
// says is in use has more: the CUDA context, the libraries' own memory, other processes.
#if defined(ENABLE_CUDNN)
size_t cudnn_workspace_bytes(void); // (with cuDNN's attention, below)
#endif
static void gpt2_report_memory(const GPT2 *model) {
    size_t bytes[NUM_MEM_GROUPS], free_bytes = 0, total_bytes = 0;
    size_t predicted = gpt2_memory_plan(bytes, model->config, model->batch_size, model->seq_len, model->recompute,
                                        model->master_memory != NULL, model->flash);
#if defined(ENABLE_CUDNN)
    size_t cudnn_bytes = cudnn_workspace_bytes();
#else
    size_t cudnn_bytes = 0;
#endif
    cudaCheck(cudaMemGetInfo(&free_bytes, &total_bytes));
    // (the peak is now, or while the model was loaded: its fp32 staging copy, when the
    // master weights are a shard or none)
    int peak_expected = device_bytes_peak == (device_bytes_live > peak_while_loading ? device_bytes_live : peak_while_loading);
    printf("GPU memory after the first step: allocated %zu bytes (%.1f MiB), peak %zu bytes, predicted %zu bytes%s%s;"
           " the device has %.1f MiB of %.1f MiB in use (measured)\n",
           device_bytes_live, device_bytes_live / 1048576.0, device_bytes_peak, predicted + cudnn_bytes,
           cudnn_bytes > 0 ? " with cuDNN's workspace" : "",
           device_bytes_live == predicted + cudnn_bytes && peak_expected ? " (equal)" : " (DIFFERENT)",
           (total_bytes - free_bytes) / 1048576.0, total_bytes / 1048576.0);
    if (device_bytes_live != predicted + cudnn_bytes || !peak_expected) {
        fprintf(stderr, "Warning: the start-up memory table does not match what was allocated (a bug: please report it)\n");
    }
}
#endif

// t counts the steps from 1; those skipped for an overflow (FP16) made no update,
// so AdamW's bias correction counts only the others, as PyTorch's does when its
// GradScaler skips optimizer.step(). The gradients are divided by the loss scale.
void gpt2_update(GPT2 *model, float learning_rate, float beta1, float beta2, float eps, float weight_decay,
                 float grad_scale, int t) {
    gpt2_allocate_moments(model);
    t -= model->skipped_updates;
    grad_scale /= model->loss_scale;
    float bias_correction1 = 1.0f - powf(beta1, (float)t);
    float sqrt_bias_correction2 = sqrtf(1.0f - powf(beta2, (float)t));
    float step_size = learning_rate / bias_correction1;
    floatX **params = (floatX **)&model->params, **grads = (floatX **)&model->grads;
    size_t at = 0; // in the optimizer state (m, v, master): all of it, or this rank's shard
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        float decay = WEIGHT_DECAYED[k] ? 1.0f - learning_rate * weight_decay : 1.0f;
        // the tensor whole; or sharded, chunk by chunk, this rank's piece then the rest
        size_t chunks = sharded() ? chunks_of(model->config, k) : 1, s = model->param_sizes[k] / chunks;
        size_t q = piece_of(s), rest = rest_of(s), w = sharded() ? (size_t)ranks.world : 1, r = sharded() ? (size_t)ranks.rank : 0;
        for (size_t l = 0; l < chunks; l++) {
            size_t first[2] = {l * s + r * q, l * s + w * q}, count[2] = {q, rest};
            for (int j = 0; j < 2; j++) {
                if (count[j] == 0) { continue; }
                size_t i = first[j], n = count[j];
                const floatX *grad = zero2() && PER_LAYER[k] ? model->shard_grads + at - layer_shard_start(model->config)
                                                             : grads[k] + i; // (ZeRO-2: the layers' from their shard)
                adamw_kernel<<<ceil_div(n, BLOCK), BLOCK>>>(params[k] + i, model->master_memory != NULL ? model->master_memory + at : NULL,
                                                           grad, model->m_memory + at, model->v_memory + at, n, beta1,
                                                           beta2, step_size, sqrt_bias_correction2, eps, decay, grad_scale,
                                                           hash_u32((uint32_t)t, (uint32_t)k), i);
                cudaCheck(cudaGetLastError());
                at += n;
            }
        }
    }
    if (sharded()) { gather_params(model); }
    // FP16: enough updates without overflow, try a larger loss scale (after this
    // update, which divided by the scale its gradients were made with)
    if (LOSS_SCALE_INIT != 1.0f && ++model->good_steps == LOSS_SCALE_GROWTH_INTERVAL) {
        model->loss_scale *= 2.0f;
        model->good_steps = 0;
    }
    gpt2_check_guard_bands(model); // (debug builds: the step's kernels stayed inside their tensors?)
#ifndef TESTING
    static int memory_reported = 0;
    if (!memory_reported) {
        memory_reported = 1;
        gpt2_report_memory(model);
    }
#endif
}

// the learning rate schedule: linear warm-up, then cosine decay to a floor
// --- begin shared-copy: gpt2-lr-schedule ---
// Step s (counting from 0) uses lr(s): warm-up from max_lr/warmup up to max_lr
// at s = warmup-1, then a cosine from max_lr (at s = warmup) towards
// max_lr*final_frac, which the curve would reach at s = max_steps, one past the
// last step. (llm.c's schedule; the peak is used twice, at warmup-1 and warmup.)
float get_learning_rate(int step, float max_lr, int warmup_steps, int max_steps, float final_frac) {
    if (step < warmup_steps) { return max_lr * (step + 1) / warmup_steps; }
    if (max_steps <= warmup_steps) { return max_lr; }
    float progress = (float)(step - warmup_steps) / (float)(max_steps - warmup_steps);
    float cosine = 0.5f * (1.0f + cosf((float)M_PI * progress)); // 1 -> 0
    float min_lr = max_lr * final_frac;
    return min_lr + (max_lr - min_lr) * cosine;
}

// --- end shared-copy: gpt2-lr-schedule ---

void gpt2_free(GPT2 *model) {
    gpt2_check_guard_bands(model); // (debug builds: nor did the evaluations and samples since)
    cuda_free_check(model->params_memory);
    cuda_free_check(model->master_memory);
    cuda_free_check(model->grads_memory);
    for (int t = 0; t < 2; t++) { cuda_free_check(model->layer_grads_memory[t]); }
    cuda_free_check(model->shard_grads);
    cuda_free_check(model->recv_grads);
    cuda_free_check(model->m_memory);
    cuda_free_check(model->norm_partials);
    cuda_free_check(model->acts_memory);
    cuda_free_check(model->grads_acts_memory);
    cuda_free_check(model->inputs_dev);
    free(model->norm_partials_host);
    free(model->inputs);
    free(model->targets);
    free(model->losses_host);
}

// ----------------------------------------------------------------------------
// data: token shards in llm.c's format, read in shuffled order

// --- begin shared-copy: gpt2-data-shards ---
// A shard: a header of 256 int32 (magic 20240520, version 1, number of tokens),
// then the tokens as uint16. data/tokenizer writes them.
#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD_HINT "HINT: make data (or data/tokenizer -i your.txt -o prefix) writes token shards"

// Read one shard's header, check it against the file's size, return the token count.
static size_t shard_read_header(FILE *fp, const char *path) {
    int header[256];
    if (fread(header, sizeof(int), 256, fp) != 256) {
        fprintf(stderr, "Error: %s: too short for a token shard header (256 x int32)\n%s\n", path, SHARD_HINT);
        exit(EXIT_FAILURE);
    }
    if (header[0] != SHARD_MAGIC || header[1] != SHARD_VERSION) {
        fprintf(stderr, "Error: %s: not a token shard: expected magic %d version %d, found magic %d version %d\n%s\n",
                path, SHARD_MAGIC, SHARD_VERSION, header[0], header[1], SHARD_HINT);
        exit(EXIT_FAILURE);
    }
    long bytes = file_size(fp, path);
    size_t ntok = header[2] < 0 ? 0 : (size_t)header[2];
    if (header[2] < 0 || (size_t)bytes != 256 * sizeof(int) + ntok * sizeof(uint16_t)) {
        fprintf(stderr, "Error: %s: header says %d tokens (%zu bytes), the file has %ld bytes: truncated or corrupt\n%s\n",
                path, header[2], 256 * sizeof(int) + ntok * sizeof(uint16_t), bytes, SHARD_HINT);
        exit(EXIT_FAILURE);
    }
    return ntok;
}

typedef struct {
    size_t B, T;
    int vocab_size;          // every token must be below this
    glob_t glob_result;      // the shard paths
    size_t num_shards;
    int shuffle;             // train: 1, validation: 0
    uint64_t seed;
    // position: epoch, index into shard_order, index into sample_order
    size_t epoch, shard_pos, sample_pos;
    size_t *shard_order;     // (num_shards) the order we visit shards in this epoch
    uint16_t *tokens;        // the current shard
    size_t num_tokens;
    size_t num_samples;      // sequences of T+1 tokens that start at multiples of T
    size_t num_samples_total; // over all shards
    size_t *sample_order;    // (num_samples)
    size_t tokens_capacity, samples_capacity;
    int *inputs;             // (B, T) the batch
    int *targets;            // (B, T) the inputs shifted by one
} DataLoader;

// --- end shared-copy: gpt2-data-shards ---

// --- begin shared-copy: gpt2-data-loader ---
// Random streams of the data loader and the sampler. The shuffles are functions
// of (seed, epoch, shard), so resuming needs only the position, not a state.
#define STREAM_SHARD_ORDER 16  // index: epoch
#define STREAM_SAMPLE_ORDER 17 // index: epoch << 32 | shard position
#define STREAM_SAMPLING 18     // index: step

static void dataloader_load_shard(DataLoader *loader) {
    const char *path = loader->glob_result.gl_pathv[loader->shard_order[loader->shard_pos]];
    FILE *fp = fopenCheck(path, "rb");
    size_t ntok = shard_read_header(fp, path); // at least T+1: dataloader_init checked
    if (ntok > loader->tokens_capacity) {
        free(loader->tokens);
        loader->tokens = (uint16_t *)mallocCheck(ntok * sizeof(uint16_t));
        loader->tokens_capacity = ntok;
    }
    freadCheck(loader->tokens, sizeof(uint16_t), ntok, fp);
    fcloseCheck(fp);
    for (size_t i = 0; i < ntok; i++) {
        if (loader->tokens[i] >= loader->vocab_size) {
            fprintf(stderr, "Error: %s: token %zu has id %d, outside the model's vocabulary of %d\n"
                    "HINT: the shard was made with another tokenizer than the model's\n",
                    path, i, loader->tokens[i], loader->vocab_size);
            exit(EXIT_FAILURE);
        }
    }
    loader->num_tokens = ntok;
    loader->num_samples = (ntok - 1) / loader->T;
    if (loader->num_samples > loader->samples_capacity) {
        free(loader->sample_order);
        loader->sample_order = (size_t *)mallocCheck(loader->num_samples * sizeof(size_t));
        loader->samples_capacity = loader->num_samples;
    }
    if (loader->shuffle) {
        uint64_t index = ((uint64_t)loader->epoch << 32) | loader->shard_pos;
        random_permutation(loader->sample_order, loader->num_samples, rng_subkey(loader->seed, STREAM_SAMPLE_ORDER, index));
    } else {
        for (size_t i = 0; i < loader->num_samples; i++) { loader->sample_order[i] = i; }
    }
}

static void dataloader_start_epoch(DataLoader *loader) {
    if (loader->shuffle) {
        random_permutation(loader->shard_order, loader->num_shards, rng_subkey(loader->seed, STREAM_SHARD_ORDER, loader->epoch));
    } else {
        for (size_t i = 0; i < loader->num_shards; i++) { loader->shard_order[i] = i; }
    }
}

// Go to a position (epoch, shard, sample): at the start, on reset, on resume.
// sample_pos may equal the shard's sample count: the shard is used up, and the
// next batch moves on to the next shard (that is where a checkpoint taken right
// at a shard's end stands). Returns 0 if the position does not exist in this data.
int dataloader_seek(DataLoader *loader, size_t epoch, size_t shard_pos, size_t sample_pos) {
    if (shard_pos >= loader->num_shards) { return 0; }
    loader->epoch = epoch;
    loader->shard_pos = shard_pos;
    dataloader_start_epoch(loader);
    dataloader_load_shard(loader);
    if (sample_pos > loader->num_samples) { return 0; }
    loader->sample_pos = sample_pos;
    return 1;
}

void dataloader_init(DataLoader *loader, const char *pattern, size_t B, size_t T, int vocab_size, int shuffle, uint64_t seed) {
    memset(loader, 0, sizeof(*loader));
    loader->B = B;
    loader->T = T;
    loader->vocab_size = vocab_size;
    loader->shuffle = shuffle;
    loader->seed = seed;
    int status = glob(pattern, 0, NULL, &loader->glob_result);
    if (status != 0 || loader->glob_result.gl_pathc == 0) {
        fprintf(stderr, "Error: no data file matches '%s'\n%s\n", pattern, SHARD_HINT);
        exit(EXIT_FAILURE);
    }
    loader->num_shards = loader->glob_result.gl_pathc;
    // Check every shard's header and size now, rather than fail hours into a run
    // (the token ids are checked as each shard is loaded). A batch may span
    // shards, so each shard needs one sequence (T+1 tokens) and all of them
    // together one batch.
    size_t total_samples = 0;
    for (size_t i = 0; i < loader->num_shards; i++) {
        const char *path = loader->glob_result.gl_pathv[i];
        FILE *fp = fopenCheck(path, "rb");
        size_t ntok = shard_read_header(fp, path);
        fcloseCheck(fp);
        if (ntok < T + 1) {
            fprintf(stderr, "Error: %s: has %zu tokens, fewer than the T+1 = %zu of one sequence (-t %zu)\n"
                    "HINT: lower -t, or leave this file out of the pattern\n", path, ntok, T + 1, T);
            exit(EXIT_FAILURE);
        }
        total_samples += (ntok - 1) / T;
    }
    if (total_samples < B) {
        fprintf(stderr, "Error: %s: the data holds %zu sequences of T+1 = %zu tokens, fewer than the B = %zu of one batch\n"
                "HINT: lower -b or -t, or use more data\n", pattern, total_samples, T + 1, B);
        exit(EXIT_FAILURE);
    }
    loader->num_samples_total = total_samples;
    loader->shard_order = (size_t *)mallocCheck(loader->num_shards * sizeof(size_t));
    loader->inputs = (int *)mallocCheck(B * T * sizeof(int));
    loader->targets = (int *)mallocCheck(B * T * sizeof(int));
    dataloader_seek(loader, 0, 0, 0);
}

// Fill inputs and targets with the next B sequences; move to the next shard
// (and the next epoch, reshuffled) when this one runs out.
void dataloader_next_batch(DataLoader *loader) {
    size_t T = loader->T;
    for (size_t b = 0; b < loader->B; b++) {
        if (loader->sample_pos >= loader->num_samples) {
            loader->shard_pos++;
            if (loader->shard_pos >= loader->num_shards) {
                loader->epoch++;
                loader->shard_pos = 0;
                dataloader_start_epoch(loader);
            }
            dataloader_load_shard(loader); // reshuffles its samples for the new epoch
            loader->sample_pos = 0;
        }
        const uint16_t *seq = loader->tokens + loader->sample_order[loader->sample_pos] * T;
        for (size_t t = 0; t < T; t++) {
            loader->inputs[b * T + t] = seq[t];
            loader->targets[b * T + t] = seq[t + 1];
        }
        loader->sample_pos++;
    }
}

void dataloader_free(DataLoader *loader) {
    globfree(&loader->glob_result);
    free(loader->shard_order);
    free(loader->tokens);
    free(loader->sample_order);
    free(loader->inputs);
    free(loader->targets);
}

// --- end shared-copy: gpt2-data-loader ---

// ----------------------------------------------------------------------------
// decoding tokens to text, for the samples

// --- begin shared-copy: gpt2-tokenizer ---

// llm.c's tokenizer.bin: a header of 256 int32 (magic 20240328, version 2, vocab
// size, end-of-text id), then per token a uint8 length and that many bytes.
#define TOKENIZER_MAGIC 20240328
typedef struct {
    int vocab_size;
    int eot_token;
    char **token_table; // NULL when no tokenizer could be loaded: we print ids instead
} Tokenizer;

// Load tokenizer.bin for a model with vocabulary size model_vocab. A missing
// file is not fatal (training works without it; samples are then printed as
// token ids), a broken one is.
void tokenizer_init(Tokenizer *tok, const char *path, int model_vocab) {
    tok->token_table = NULL;
    tok->vocab_size = 0;
    tok->eot_token = 50256 < model_vocab ? 50256 : model_vocab - 1;
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        fprintf(stderr, "Warning: could not open tokenizer '%s' (%s); samples will be printed as token ids\n"
                "HINT: make data writes data/gpt2_tokenizer.bin\n", path, strerror(errno));
        return;
    }
    const char *hint = "HINT: make data writes data/gpt2_tokenizer.bin";
    int header[256];
    if (fread(header, sizeof(int), 256, fp) != 256) {
        fprintf(stderr, "Error: %s: too short for a tokenizer header (256 x int32)\n%s\n", path, hint);
        exit(EXIT_FAILURE);
    }
    if (header[0] != TOKENIZER_MAGIC || header[1] != 2) {
        fprintf(stderr, "Error: %s: not a tokenizer file: expected magic %d version 2, found magic %d version %d\n%s\n",
                path, TOKENIZER_MAGIC, header[0], header[1], hint);
        exit(EXIT_FAILURE);
    }
    if (header[2] <= 0 || header[2] > (1 << 24) || header[3] < 0 || header[3] >= header[2] || header[3] >= model_vocab) {
        fprintf(stderr, "Error: %s: vocabulary size %d and end-of-text id %d do not fit a model with %d tokens\n%s\n",
                path, header[2], header[3], model_vocab, hint);
        exit(EXIT_FAILURE);
    }
    tok->vocab_size = header[2];
    tok->eot_token = header[3];
    tok->token_table = (char **)mallocCheck((size_t)tok->vocab_size * sizeof(char *));
    for (int i = 0; i < tok->vocab_size; i++) {
        unsigned char length = 0;
        tok->token_table[i] = (char *)mallocCheck(256);
        if (fread(&length, 1, 1, fp) != 1 || fread(tok->token_table[i], 1, length, fp) != length) {
            fprintf(stderr, "Error: %s: ends inside token %d of %d: truncated\n%s\n", path, i, tok->vocab_size, hint);
            exit(EXIT_FAILURE);
        }
        tok->token_table[i][length] = '\0';
    }
    fcloseCheck(fp);
}

// Print a token's bytes, but only if they are printable or whitespace: a single
// token can be part of a multi-byte UTF-8 character, which alone is garbage.
void tokenizer_print(const Tokenizer *tok, int token) {
    if (tok->token_table == NULL || token < 0 || token >= tok->vocab_size) {
        printf("<%d>", token);
        return;
    }
    const char *s = tok->token_table[token];
    if (s[0] != '\0' && s[1] == '\0' && !((unsigned char)s[0] >= 32 && (unsigned char)s[0] < 127) &&
        s[0] != '\n' && s[0] != '\t') {
        return; // a lone non-printable byte
    }
    fputs(s, stdout);
}

void tokenizer_free(Tokenizer *tok) {
    if (tok->token_table != NULL) {
        for (int i = 0; i < tok->vocab_size; i++) { free(tok->token_table[i]); }
        free(tok->token_table);
    }
}

// --- end shared-copy: gpt2-tokenizer ---

// ----------------------------------------------------------------------------
// sampling

// --- begin shared-copy: gpt2-sample-mult ---
// Draw an index from a probability vector with the uniform coin in [0, 1).
int sample_mult(const float *probs, int n, float coin) {
    float cdf = 0.0f;
    for (int i = 0; i < n; i++) {
        cdf += probs[i];
        if (coin < cdf) { return i; }
    }
    return n - 1; // rounding left the cdf a hair below 1
}
// --- end shared-copy: gpt2-sample-mult ---

// Generate up to gen_tokens tokens after <|endoftext|> and print them, as
// train_gpt2.c does: each token re-runs the forward pass over the prefix with
// B = 1; the last position's logits are copied to the host and turned into
// probabilities there (in double; V numbers, once per token).
void gpt2_sample(GPT2 *model, const Tokenizer *tok, size_t gen_tokens, uint64_t seed, int step) {
    size_t T = gen_tokens + 1 < (size_t)model->seq_len ? gen_tokens + 1 : (size_t)model->seq_len;
    size_t V = model->config.vocab_size, Vp = model->config.padded_vocab_size;
    int *tokens = (int *)mallocCheck(T * sizeof(int));
    floatX *logits = (floatX *)mallocCheck(V * sizeof(floatX));
    float *probs = (float *)mallocCheck(V * sizeof(float));
    uint64_t rng = rng_subkey(seed, STREAM_SAMPLING, (uint64_t)step);
    // Every forward pass has the same length T, the tokens not yet drawn set to
    // <|endoftext|>: attention is causal, so position t-1 never sees them, and
    // one shape means one cuDNN graph and one set of cuBLASLt algorithms, instead
    // of one per prefix length (and no 1-row matmuls)
    for (size_t t = 0; t < T; t++) { tokens[t] = tok->eot_token; }
    printf("generating:\n---\n");
    for (size_t t = 1; t < T; t++) {
        gpt2_forward(model, tokens, NULL, 1, T);
        cudaCheck(cudaMemcpy(logits, model->acts.logits + (t - 1) * Vp, V * sizeof(floatX), cudaMemcpyDeviceToHost));
        float maxval = -INFINITY;
        for (size_t i = 0; i < V; i++) { maxval = fmaxf(maxval, to_float(logits[i])); }
        double sum = 0.0;
        for (size_t i = 0; i < V; i++) { sum += exp((double)to_float(logits[i]) - maxval); }
        for (size_t i = 0; i < V; i++) { probs[i] = (float)(exp((double)to_float(logits[i]) - maxval) / sum); }
        tokens[t] = sample_mult(probs, (int)V, rng_float(&rng));
        tokenizer_print(tok, tokens[t]);
        fflush(stdout);
    }
    printf("\n---\n");
    free(tokens);
    free(logits);
    free(probs);
}

// ----------------------------------------------------------------------------
// training state: everything a resumed run needs to continue bit for bit

// --- begin shared-copy: gpt2-train-state ---
// A checkpoint is two files in the output directory, written atomically:
//   model_<step>.bin  the parameters, in llm.c's model format (usable on its own)
//   state_<step>.bin  a header of 256 int32, then AdamW's m and v (fp32)
// The state is renamed into place last, so a state file implies its model file
// is complete. The random streams are functions of the seed and the position,
// so (seed, step, data position) is the whole random state.
#define STATE_MAGIC 20261129
#define STATE_VERSION 1
#define STATE_HINT "HINT: checkpoints are written by train_gpt2 -n <every> into its -o directory"

typedef struct {
    int step;                 // steps completed
    uint64_t seed;
    size_t B, T, total_batch_size;
    size_t num_parameters;
    size_t epoch, shard_pos, sample_pos; // training data loader position
} TrainState;

static void put64(int *header, int at, uint64_t value) {
    header[at] = (int)(uint32_t)(value & 0xffffffffu);
    header[at + 1] = (int)(uint32_t)(value >> 32);
}
static uint64_t get64(const int *header, int at) {
    return (uint64_t)(uint32_t)header[at] | ((uint64_t)(uint32_t)header[at + 1] << 32);
}
// --- end shared-copy: gpt2-train-state ---


// The state file as train_gpt2.c writes it (header, AdamW's m and v), plus, in
// BF16 and FP16, the fp32 master weights after them (header[21] = 1), and in FP16
// the loss scale's state (header[22..24]): a resumed run then continues bit for
// bit. (train_gpt2.c refuses a file with master weights: it has none to put them in.)
// Every rank calls it, rank 0 writes; sharded (ZeRO-1), the ranks' shards of the state are
// gathered on rank 0 first, so that the file holds the whole state, whatever the ranks
// that read it back.
void save_checkpoint(const char *out_dir, const GPT2 *model, const TrainState *st) {
    size_t n = model->num_parameters;
    int moments = model->m_memory != NULL, master = model->master_memory != NULL && moments;
    float *host = NULL; // (rank 0: m, v and the master weights, flat, as the file has them)
    if (ranks.rank == 0) {
        size_t floats = (moments ? 2 * n : 0) + (master ? n : 0);
        host = (float *)mallocCheck((floats > 0 ? floats : 1) * sizeof(float));
    }
    if (sharded()) {
        size_t ns = shard_elements(model->config);
        if (moments) {
            gather_state(model, model->m_memory, host);
            gather_state(model, model->m_memory + ns, host != NULL ? host + n : NULL);
        }
        if (master) { gather_state(model, model->master_memory, host != NULL ? host + 2 * n : NULL); }
    }
    if (ranks.rank != 0) { return; }
    if (!sharded()) {
        if (moments) { cudaCheck(cudaMemcpy(host, model->m_memory, 2 * n * sizeof(float), cudaMemcpyDeviceToHost)); }
        if (master) { cudaCheck(cudaMemcpy(host + 2 * n, model->master_memory, n * sizeof(float), cudaMemcpyDeviceToHost)); }
    }
    char model_path[4096], state_path[4096];
    format_path(model_path, sizeof(model_path), "%s/model_%08d.bin", out_dir, st->step);
    format_path(state_path, sizeof(state_path), "%s/state_%08d.bin", out_dir, st->step);
    gpt2_save_checkpoint(model, model_path);
    int header[256] = {0};
    header[0] = STATE_MAGIC;
    header[1] = STATE_VERSION;
    header[2] = st->step;
    put64(header, 4, st->seed);
    put64(header, 6, st->B);
    put64(header, 8, st->T);
    put64(header, 10, st->total_batch_size);
    put64(header, 12, st->num_parameters);
    put64(header, 14, st->epoch);
    put64(header, 16, st->shard_pos);
    put64(header, 18, st->sample_pos);
    header[20] = moments; // no moments before the first update
    header[21] = master;
    // FP16: the dynamic loss scale's state, so that a resumed run scales as this one would
    if (LOSS_SCALE_INIT != 1.0f) {
        memcpy(&header[22], &model->loss_scale, sizeof(float));
        header[23] = model->good_steps;
        header[24] = model->skipped_updates;
    }
    size_t moment_bytes = header[20] ? n * sizeof(float) : 0;
    const void *bufs[4] = {header, host, host + n, host + 2 * n};
    size_t sizes[4] = {sizeof(header), moment_bytes, moment_bytes, header[21] ? n * sizeof(float) : 0};
    write_file_atomic(state_path, bufs, sizes, 4);
    free(host);
    printf("wrote checkpoint %s + %s\n", model_path, state_path);
}

// Read a state file written by save_checkpoint (either trainer's) into st and the
// model's moments (and master weights, when the file has them).
void load_state(const char *path, GPT2 *model, TrainState *st) {
    FILE *fp = fopenCheck(path, "rb");
    int header[256];
    if (fread(header, sizeof(int), 256, fp) != 256) {
        fprintf(stderr, "Error: %s: too short for a training state header (256 x int32)\n%s\n", path, STATE_HINT);
        exit(EXIT_FAILURE);
    }
    if (header[0] != STATE_MAGIC || header[1] != STATE_VERSION) {
        fprintf(stderr, "Error: %s: not a training state: expected magic %d version %d, found magic %d version %d\n%s\n",
                path, STATE_MAGIC, STATE_VERSION, header[0], header[1], STATE_HINT);
        exit(EXIT_FAILURE);
    }
    st->step = header[2];
    st->seed = get64(header, 4);
    st->B = get64(header, 6);
    st->T = get64(header, 8);
    st->total_batch_size = get64(header, 10);
    st->num_parameters = get64(header, 12);
    st->epoch = get64(header, 14);
    st->shard_pos = get64(header, 16);
    st->sample_pos = get64(header, 18);
    if (st->num_parameters != model->num_parameters) {
        fprintf(stderr, "Error: %s: holds optimizer state for %zu parameters, the model has %zu\n%s\n",
                path, st->num_parameters, model->num_parameters, STATE_HINT);
        exit(EXIT_FAILURE);
    }
    if (st->step < 0 || (st->step > 0) != (header[20] != 0) || (header[21] != 0 && header[20] == 0)) {
        fprintf(stderr, "Error: %s: corrupt header (step %d, moments %s)\n%s\n", path, st->step,
                header[20] ? "present" : "absent", STATE_HINT);
        exit(EXIT_FAILURE);
    }
    // the loss scale's state (FP16), when the file has one (0: written by a
    // trainer without it, which is a scale of 1: start FP16's from scratch)
    float scale;
    memcpy(&scale, &header[22], sizeof(float));
    if (LOSS_SCALE_INIT == 1.0f && header[24] > 0) {
        printf("Warning: %s was written by an fp16 run that skipped %d of its %d updates; this build counts all %d"
               " in AdamW's bias correction\n", path, header[24], st->step, st->step);
    }
    if (LOSS_SCALE_INIT != 1.0f && scale != 0.0f) {
        if (!(scale >= 1.0f && scale <= 0x1p64f) || header[23] < 0 || header[24] < 0 || header[24] > st->step) {
            fprintf(stderr, "Error: %s: corrupt loss scale state (scale %g, %d good steps, %d skipped)\n%s\n", path, scale,
                    header[23], header[24], STATE_HINT);
            exit(EXIT_FAILURE);
        }
        model->loss_scale = scale;
        model->good_steps = header[23];
        model->skipped_updates = header[24];
    }
    size_t n = model->num_parameters, floats = (header[20] ? 2 * n : 0) + (header[21] ? n : 0);
    long bytes = file_size(fp, path);
    if ((size_t)bytes != 256 * sizeof(int) + floats * sizeof(float)) {
        fprintf(stderr, "Error: %s: has %ld bytes, expected %zu: truncated or corrupt\n%s\n",
                path, bytes, 256 * sizeof(int) + floats * sizeof(float), STATE_HINT);
        exit(EXIT_FAILURE);
    }
    if (floats > 0) {
        // m, v, and the master weights: from the file, or else the model file's values
        // (already there); sharded, this rank reads its shard of each only
        size_t ns = shard_elements(model->config);
        float *host = (float *)mallocCheck(ns * sizeof(float));
        model->m_memory = (float *)cuda_malloc_check(2 * ns * sizeof(float), "the AdamW moments");
        model->v_memory = model->m_memory + ns;
        int arrays = header[21] && model->master_memory != NULL ? 3 : 2;
        float *to[3] = {model->m_memory, model->v_memory, model->master_memory};
        for (int a = 0; a < arrays; a++) {
            read_shard(fp, path, (long)(256 * sizeof(int) + (size_t)a * n * sizeof(float)), model->config, host);
            cudaCheck(cudaMemcpy(to[a], host, ns * sizeof(float), cudaMemcpyHostToDevice));
        }
        free(host);
    }
    fcloseCheck(fp);
}

// --- begin shared-copy: gpt2-find-checkpoint ---
// The step of the newest complete checkpoint in out_dir, or -1 if none.
int find_latest_checkpoint(const char *out_dir) {
    char pattern[4096];
    format_path(pattern, sizeof(pattern), "%s/state_*.bin", out_dir);
    glob_t g;
    int latest = -1;
    if (glob(pattern, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++) {
            const char *name = strrchr(g.gl_pathv[i], '/') + 1;
            int step;
            char model_path[4096];
            if (sscanf(name, "state_%d.bin", &step) != 1) { continue; }
            format_path(model_path, sizeof(model_path), "%s/model_%08d.bin", out_dir, step);
            if (access(model_path, R_OK) == 0 && step > latest) { latest = step; }
        }
        globfree(&g);
    }
    return latest;
}

// --- end shared-copy: gpt2-find-checkpoint ---

// ----------------------------------------------------------------------------
// cuDNN's attention (USE_CUDNN=1): building and running its graphs

#if defined(ENABLE_CUDNN)
// The same attention through cuDNN's fused flash attention (Dao et al. 2022,
// "FlashAttention"): q, k and v read in place from qkv, the (T, T) scores never
// stored; the backward rebuilds them from a logsumexp per row (stats, fp32). Written
// and checked on its own in dev/cuda/attention_cudnn.cu; this is a marked copy.
// --- begin shared-copy: cudnn-attention ---
void cudnn_create(void);
void cudnn_destroy(void);
void cudnn_describe(char *buf, size_t size);
int cudnn_backward_is_deterministic(void);
size_t cudnn_workspace_bytes(void);
void attention_forward_cudnn(floatX *out, float *stats, const floatX *qkv, size_t B, size_t T, size_t NH, size_t C);
void attention_backward_cudnn(floatX *dqkv, const floatX *dout, const floatX *qkv, const floatX *out,
                              const float *stats, size_t B, size_t T, size_t NH, size_t C);

#ifndef __CUDA_ARCH__
namespace fe = cudnn_frontend;
#if defined(ENABLE_FP16)
static const fe::DataType_t CUDNN_FLOATX = fe::DataType_t::HALF;
#else
static const fe::DataType_t CUDNN_FLOATX = fe::DataType_t::BFLOAT16;
#endif

// check macros in the style of cudaCheck: the library's message, file and line, exit 1
static void cudnn_check(cudnnStatus_t status, const char *file, int line) {
    if (status != CUDNN_STATUS_SUCCESS) {
        fprintf(stderr, "Error: cuDNN: %s [%s:%d]\n", cudnnGetErrorString(status), file, line);
        exit(EXIT_FAILURE);
    }
}
#define cudnnCheck(status) cudnn_check(status, __FILE__, __LINE__)
static void cudnn_fe_check(const fe::error_object &e, const char *file, int line) {
    if (e.is_bad()) {
        fprintf(stderr, "Error: cuDNN frontend: %s [%s:%d]\n", e.err_msg.c_str(), file, line);
        exit(EXIT_FAILURE);
    }
}
#define cudnnFECheck(err) cudnn_fe_check(err, __FILE__, __LINE__)

static cudnnHandle_t cudnn_handle;
// one workspace for every graph, grown to the largest any of them asks for (cuDNN's
// backward wants some for its fp32 dq accumulator; the forward often none)
static void *cudnn_workspace = NULL;
static size_t cudnn_workspace_size = 0;
// Building a graph takes cuDNN's heuristics and plan compilation, from tens of ms to
// seconds, so we build each shape once and keep it. The trainer meets one or two
// shapes (B,T for training and for evaluation); NH and HS are in the key for main's checks.
typedef std::array<int64_t, 4> GraphKey; // B, T, NH, HS
static std::map<GraphKey, std::shared_ptr<fe::graph::Graph>> forward_graphs, backward_graphs;
static int backward_deterministic = 1; // cleared if cuDNN has no deterministic backward for a shape

// Each tensor of a graph has a number (UID); at run time a map from these numbers to
// device pointers binds the graph to the buffers of one call.
enum { Q_UID = 1, K_UID, V_UID, O_UID, STATS_UID, DO_UID, DQ_UID, DK_UID, DV_UID };

void cudnn_create(void) { cudnnCheck(cudnnCreate(&cudnn_handle)); }

void cudnn_destroy(void) {
    forward_graphs.clear(); // the plans first: they were built on the handle
    backward_graphs.clear();
    cuda_free_check(cudnn_workspace);
    cudnn_workspace = NULL;
    cudnn_workspace_size = 0;
    cudnnCheck(cudnnDestroy(cudnn_handle));
}

void cudnn_describe(char *buf, size_t size) {
    snprintf(buf, size, "cuDNN %zu (headers %d), cudnn-frontend %d.%d.%d", cudnnGetVersion(), (int)CUDNN_VERSION,
             CUDNN_FRONTEND_MAJOR_VERSION, CUDNN_FRONTEND_MINOR_VERSION, CUDNN_FRONTEND_PATCH_VERSION);
}

int cudnn_backward_is_deterministic(void) { return backward_deterministic; }
size_t cudnn_workspace_bytes(void) { return cudnn_workspace_size; }

// (B,NH,T,HS) views. One of q, k, v inside qkv (B,T,3C): heads HS apart within a token's
// row, tokens 3C apart, sequences 3C*T apart; the pointer bound at run time (qkv, +C or
// +2C) picks which of the three. The same strides serve dq, dk, dv inside dqkv.
static std::vector<int64_t> qkv_strides(int64_t T, int64_t NH, int64_t HS) {
    return {3 * NH * HS * T, HS, 3 * NH * HS, 1};
}
// out and dout (B,T,C): the same with C in place of 3C
static std::vector<int64_t> out_strides(int64_t T, int64_t NH, int64_t HS) { return {NH * HS * T, HS, NH * HS, 1}; }

static std::shared_ptr<fe::graph::Tensor_attributes> input_tensor(fe::graph::Graph &graph, const char *name, int64_t uid,
                                                                  std::vector<int64_t> dim, std::vector<int64_t> stride) {
    return graph.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dim).set_stride(stride));
}

// The steps from a described graph to a runnable plan; the first error stops them.
// Heuristic mode A: cuDNN's fast heuristic, which ranks its engines for the shape.
static fe::error_object build_graph(fe::graph::Graph &graph) {
    if (fe::error_object e = graph.validate(); e.is_bad()) { return e; }
    if (fe::error_object e = graph.build_operation_graph(cudnn_handle); e.is_bad()) { return e; }
    if (fe::error_object e = graph.create_execution_plans({fe::HeurMode_t::A}); e.is_bad()) { return e; }
    if (fe::error_object e = graph.check_support(); e.is_bad()) { return e; }
    if (fe::error_object e = graph.build_plans(); e.is_bad()) { return e; }
    int64_t bytes = 0;
    if (fe::error_object e = graph.get_workspace_size(bytes); e.is_bad()) { return e; }
    if ((size_t)bytes > cudnn_workspace_size) {
        cuda_free_check(cudnn_workspace); // (waits for the GPU)
        cudnn_workspace = cuda_malloc_check((size_t)bytes, "cuDNN's attention workspace"); // (within -G's budget)
        cudnn_workspace_size = (size_t)bytes;
    }
    return fe::error_object();
}

// The forward graph of one shape: one SDPA node. Scale and causal mask are fixed, so
// they are baked into the graph instead of being passed at every call.
static std::shared_ptr<fe::graph::Graph> forward_graph(int64_t B, int64_t T, int64_t NH, int64_t HS) {
    GraphKey key = {B, T, NH, HS};
    auto found = forward_graphs.find(key);
    if (found != forward_graphs.end()) { return found->second; }
    auto graph = std::make_shared<fe::graph::Graph>();
    graph->set_io_data_type(CUDNN_FLOATX)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    std::vector<int64_t> dim = {B, NH, T, HS}, qkv_stride = qkv_strides(T, NH, HS);
    auto Q = input_tensor(*graph, "Q", Q_UID, dim, qkv_stride);
    auto K = input_tensor(*graph, "K", K_UID, dim, qkv_stride);
    auto V = input_tensor(*graph, "V", V_UID, dim, qkv_stride);
    // causal: query t sees keys 0..t, the band's right edge on the diagonal (right
    // bound 0), the diagonal starting at the top left as q and k have the same length
    auto options = fe::graph::SDPA_attributes()
                       .set_name("attention_forward")
                       .set_generate_stats(true)
                       .set_attn_scale(1.0f / sqrtf((float)HS))
                       .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                       .set_diagonal_band_right_bound(0);
    auto [O, stats] = graph->sdpa(Q, K, V, options);
    // out (B,T,C) as the trainer lays it out: the heads side by side in a token's row
    O->set_output(true).set_uid(O_UID).set_dim(dim).set_stride(out_strides(T, NH, HS));
    // stats (B,NH,T,1) fp32, logsumexp in natural log: what the backward reads back
    stats->set_output(true).set_uid(STATS_UID).set_data_type(fe::DataType_t::FLOAT)
        .set_dim({B, NH, T, 1}).set_stride({NH * T, T, 1, 1});
    cudnnFECheck(build_graph(*graph));
    forward_graphs[key] = graph;
    return graph;
}

// The backward graph's description; deterministic or not (see backward_graph).
static std::shared_ptr<fe::graph::Graph> describe_backward(int64_t B, int64_t T, int64_t NH, int64_t HS, bool deterministic) {
    auto graph = std::make_shared<fe::graph::Graph>();
    graph->set_io_data_type(CUDNN_FLOATX)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    std::vector<int64_t> dim = {B, NH, T, HS}, qkv_stride = qkv_strides(T, NH, HS), out_stride = out_strides(T, NH, HS);
    auto Q = input_tensor(*graph, "Q", Q_UID, dim, qkv_stride);
    auto K = input_tensor(*graph, "K", K_UID, dim, qkv_stride);
    auto V = input_tensor(*graph, "V", V_UID, dim, qkv_stride);
    auto O = input_tensor(*graph, "O", O_UID, dim, out_stride);
    auto dO = input_tensor(*graph, "dO", DO_UID, dim, out_stride);
    auto stats = input_tensor(*graph, "stats", STATS_UID, {B, NH, T, 1}, {NH * T, T, 1, 1});
    stats->set_data_type(fe::DataType_t::FLOAT);
    // the same scale and mask as the forward, or the rebuilt probabilities would differ
    auto options = fe::graph::SDPA_backward_attributes()
                       .set_name("attention_backward")
                       .set_attn_scale(1.0f / sqrtf((float)HS))
                       .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                       .set_diagonal_band_right_bound(0)
                       .set_deterministic_algorithm(deterministic);
    auto [dQ, dK, dV] = graph->sdpa_backward(Q, K, V, O, dO, stats, options);
    // dq, dk, dv land in their thirds of dqkv (B,T,3C), the layout the qkv matmul's backward reads
    dQ->set_output(true).set_uid(DQ_UID).set_dim(dim).set_stride(qkv_stride);
    dK->set_output(true).set_uid(DK_UID).set_dim(dim).set_stride(qkv_stride);
    dV->set_output(true).set_uid(DV_UID).set_dim(dim).set_stride(qkv_stride);
    return graph;
}

// The backward walks the keys block by block, and each block adds its share to dq. By
// default those adds are fp32 atomics, in an order that changes from run to run, and so
// do the last bits of dq; we ask for cuDNN's deterministic algorithm instead. Where this
// cuDNN and GPU have none (the frontend names Blackwell before cuDNN 9.18), we say so and
// take the other.
static std::shared_ptr<fe::graph::Graph> backward_graph(int64_t B, int64_t T, int64_t NH, int64_t HS) {
    GraphKey key = {B, T, NH, HS};
    auto found = backward_graphs.find(key);
    if (found != backward_graphs.end()) { return found->second; }
    auto graph = describe_backward(B, T, NH, HS, true);
    fe::error_object e = build_graph(*graph);
    if (e.is_bad()) {
        fprintf(stderr, "Warning: cuDNN has no deterministic attention backward for B %lld T %lld NH %lld HS %lld (%s); "
                "using the non-deterministic one\n", (long long)B, (long long)T, (long long)NH, (long long)HS,
                e.err_msg.c_str());
        graph = describe_backward(B, T, NH, HS, false);
        cudnnFECheck(build_graph(*graph));
        backward_deterministic = 0;
    }
    backward_graphs[key] = graph;
    return graph;
}

// out (B,T,C) and stats (B,NH,T) written, from qkv (B,T,3C); on the default stream
void attention_forward_cudnn(floatX *out, float *stats, const floatX *qkv, size_t B, size_t T, size_t NH, size_t C) {
    size_t HS = C / NH;
    auto graph = forward_graph((int64_t)B, (int64_t)T, (int64_t)NH, (int64_t)HS);
    floatX *q = (floatX *)qkv; // cuDNN takes void *, also for what it only reads
    std::unordered_map<int64_t, void *> pointers = {
        {Q_UID, q}, {K_UID, q + C}, {V_UID, q + 2 * C}, {O_UID, out}, {STATS_UID, stats}};
    cudnnFECheck(graph->execute(cudnn_handle, pointers, cudnn_workspace));
    cudaCheck(cudaGetLastError());
}

// dqkv (B,T,3C) written, from dout (B,T,C) and the forward's qkv, out and stats
void attention_backward_cudnn(floatX *dqkv, const floatX *dout, const floatX *qkv, const floatX *out,
                              const float *stats, size_t B, size_t T, size_t NH, size_t C) {
    size_t HS = C / NH;
    auto graph = backward_graph((int64_t)B, (int64_t)T, (int64_t)NH, (int64_t)HS);
    floatX *q = (floatX *)qkv;
    std::unordered_map<int64_t, void *> pointers = {
        {Q_UID, q},             {K_UID, q + C},         {V_UID, q + 2 * C},
        {O_UID, (void *)out},   {DO_UID, (void *)dout}, {STATS_UID, (void *)stats},
        {DQ_UID, dqkv},         {DK_UID, dqkv + C},     {DV_UID, dqkv + 2 * C}};
    cudnnFECheck(graph->execute(cudnn_handle, pointers, cudnn_workspace));
    cudaCheck(cudaGetLastError());
}
#endif // __CUDA_ARCH__
// --- end shared-copy: cudnn-attention ---
#endif

// ----------------------------------------------------------------------------
// main: argument parsing and the training loop

// the hardware line at start-up
void print_hardware(void) {
    cudaDeviceProp p;
    int device = 0;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaGetDeviceProperties(&p, device));
    printf("hardware: ");
    if (ranks.world > 1) {
        const char *started[] = {"started by mpirun", "met in a shared folder", "met over TCP"};
        printf("%d ranks (NCCL, %s%s), rank 0 on ", ranks.world, started[ranks.start], zero2() ? ", ZeRO-2" : sharded() ? ", ZeRO-1" : "");
    }
    printf("GPU %d: %s, compute capability %d.%d, %d SMs, %.1f GiB | precision %s%s\n", device, p.name, p.major,
           p.minor, p.multiProcessorCount, p.totalGlobalMem / 1073741824.0, PRECISION_NAME,
           sizeof(floatX) == sizeof(float) ? "" : use_master_weights ? " with fp32 master weights" : " without master weights (stochastic rounding)");
    if (flash_attention) {
        printf("attention: ours, flash attention (-F 1: tiles in shared memory, an online softmax, no T x T matrices)\n");
    } else {
#if defined(ENABLE_CUDNN)
        char version[128];
        cudnn_describe(version, sizeof(version));
        printf("attention: %s, fused flash attention\n", version);
#else
        printf("attention: ours (batched cuBLASLt matmuls and a causal softmax kernel; -F 1 for flash attention)\n");
#endif
    }
#ifdef USE_NCCL
    if (ranks.zero && ranks.world == 1) {
        printf("note: -Z %d on one rank: its shard is the whole optimizer state%s\n", ranks.zero,
               ranks.zero == 2 ? " (and -Z 2's one-layer tables come on top of the gradients)" : "");
    }
#else
    if (ranks.zero) { printf("note: -Z %d without MPI: one rank, nothing to shard (make train_gpt2cu_mpi)\n", ranks.zero); }
#endif
}

// Find the GPU (or say clearly that there is none) and start cuBLASLt (and cuDNN).
void setup_hardware(void) {
    int devices = 0;
    cudaError_t err = cudaGetDeviceCount(&devices);
    if (err != cudaSuccess || devices == 0) {
        fprintf(stderr, "Error: no usable CUDA GPU: %s\nHINT: train_gpt2.c is the same trainer on the CPU (make train_gpt2)\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
        exit(EXIT_FAILURE);
    }
    // (one GPU visible: this rank's own, when the launcher gives each rank one through
    // CUDA_VISIBLE_DEVICES; more: the rank's own is its rank on the machine)
    if (ranks.device < 0) { ranks.device = ranks.rank % devices; } // (-pi fs, tcp with no word of the machines)
    if (devices > 1 && ranks.device >= devices) {
        fprintf(stderr, "Error: rank %d is rank %d of its machine, which has %d GPUs: one rank a GPU\n"
                "HINT: start at most as many ranks on each machine as it has GPUs (mpirun -np, or a hostfile's slots)\n",
                ranks.rank, ranks.device, devices);
        exit(EXIT_FAILURE);
    }
    cudaCheck(cudaSetDevice(devices > 1 ? ranks.device : 0));
    // (compute type 32F in matmul_lt: fp32 data is multiplied in full fp32, no TF32;
    // bf16 data on the tensor cores)
    cublasCheck(cublasLtCreate(&cublaslt_handle));
#if defined(ENABLE_CUDNN)
    cudnn_create();
#endif
    cublaslt_workspace = cuda_malloc_check(CUBLASLT_WORKSPACE_BYTES, "cuBLASLt's workspace");
    ranks_connect();
}

// After the backward pass, with the step's gradient norm: FP16's dynamic loss
// scale. Returns 1 when the gradients overflowed (a non-finite norm): the update
// is skipped and the scale halved (gpt2_update doubles it after
// LOSS_SCALE_GROWTH_INTERVAL updates in a row). note gets what the step's line
// should say. With the scale at 1 an overflow is no longer the scale's fault:
// returns 0 (the step diverged).
int gpt2_loss_scale_update(GPT2 *model, float norm, char *note, size_t note_size) {
    note[0] = '\0';
    if (LOSS_SCALE_INIT == 1.0f) { return 0; } // fp32 and bf16: no loss scaling
    if (!isfinite(norm) && model->loss_scale > 1.0f) {
        model->loss_scale *= 0.5f;
        model->good_steps = 0;
        model->skipped_updates++;
        gpt2_allocate_moments(model); // (a checkpoint after a skipped first step has zero moments)
        gpt2_check_guard_bands(model);  // (debug builds: as after an update)
        snprintf(note, note_size, " | gradients overflowed: update skipped, loss scale down to %g", model->loss_scale);
        return 1;
    }
    snprintf(note, note_size, " | loss scale %g", model->loss_scale);
    return 0;
}

// Peak dense throughput of the GPUs we know, in the precision this build uses.
// H100 / H200 SXM: 989.4 TFLOP/s bf16 on the tensor cores (fp32 accumulate), 66.9
// TFLOP/s fp32 (NVIDIA's datasheets; the PCIe and NVL H100s are slower, so their
// MFU reads high here). RTX 5070 Ti: fp32 from its 8,960 cores at a
// 2.452 GHz boost clock, 2 FLOPs per FMA = 43.9 TFLOP/s; bf16 with fp32 accumulate
// 87.9 TFLOP/s: NVIDIA's RTX Blackwell whitepaper gives the RTX 5090 209.5 dense
// (170 SMs at 2.407 GHz, so 512 FLOPs per SM per clock; GeForce cards accumulate
// in fp32 at half their fp16-accumulate rate), times 70 SMs at 2.452 GHz. fp16
// runs at bf16's rate on all three.
typedef struct {
    const char *name; // matched as a substring of the device name
    double bf16, fp32;
} PeakFlops;
static const PeakFlops PEAKS[] = {{"H100", 989.4e12, 66.9e12}, {"H200", 989.4e12, 66.9e12}, {"RTX 5070 Ti", 87.9e12, 43.9e12}};

// FLOPs of a training step per token, as in the PaLM paper's appendix B: 6 per
// parameter (forward 2, backward 4) plus attention's 12 L C T (scores and
// weighted values, forward and backward, over the full T x T).
double model_flops_utilization(const GPT2 *model, size_t tokens, size_t T, double seconds) {
    static double peak = -1.0;
    if (peak < 0.0) {
        cudaDeviceProp p;
        int device = 0;
        cudaCheck(cudaGetDevice(&device));
        cudaCheck(cudaGetDeviceProperties(&p, device));
        peak = 0.0;
        for (size_t i = 0; i < sizeof(PEAKS) / sizeof(PEAKS[0]); i++) {
            if (strstr(p.name, PEAKS[i].name) != NULL) { peak = sizeof(floatX) < sizeof(float) ? PEAKS[i].bf16 : PEAKS[i].fp32; }
        }
    }
    if (peak == 0.0) { return -1.0; } // a GPU without a figure in PEAKS
    const GPT2Config *c = &model->config;
    double flops_per_token = 6.0 * model->num_parameters + 12.0 * c->num_layers * c->channels * (double)T;
    return flops_per_token * tokens / seconds / peak;
}

#ifndef TESTING

// --- begin shared-copy: gpt2-options ---
// Defaults: the embedded default run trains a 4-layer GPT-2 (d4, 16M parameters,
// most of them the embeddings) on tinyshakespeare in a few minutes on 2 cores.
typedef struct {
    const char *train_pattern, *val_pattern, *tokenizer_path, *model, *out_dir;
    int B, T, total_batch_size;
    float lr, final_lr_frac, weight_decay, grad_clip, beta1, beta2, eps;
    int warmup, max_steps, val_every, val_batches, sample_every, gen_tokens, checkpoint_every, resume, phase_every;
    uint64_t seed;
} Options;

// The trainer's own flags (train_gpt2.cu: recomputation, master weights; none on
// the CPU), defined after parse_int: their help lines, and their parser, which
// returns 0 for a flag it does not know.
static void print_device_usage(void);
static int parse_device_flag(const char *flag, const char *value);

static void print_usage(const Options *d) {
    printf("Usage: %s [options]\n", PROGRAM);
    printf("Options (default in brackets):\n");
    printf("  -i <pattern>  training token shards, a glob [%s]\n", d->train_pattern);
    printf("  -j <pattern>  validation token shards [%s]\n", d->val_pattern);
    printf("  -k <path>     tokenizer for printing samples [%s]\n", d->tokenizer_path);
    printf("  -e <model>    checkpoint file, or a new random model: d<N> (L=N, C=64N, NH=N) or gpt2-124M, -350M, -774M, -1558M [%s]\n",
           d->model);
    printf("  -o <dir>      output directory for the log and checkpoints, \"\" for none [%s]\n", d->out_dir);
    printf("  -b <int>      batch size B [%d]\n", d->B);
    printf("  -t <int>      sequence length T [%d]\n", d->T);
    printf("  -d <int>      total batch size in tokens; a multiple of B*T accumulates gradients, 0 = B*T [%d]\n", d->total_batch_size);
    printf("  -l <float>    peak learning rate [%g]\n", d->lr);
    printf("  -u <int>      warm-up steps [%d]\n", d->warmup);
    printf("  -q <float>    final learning rate as a fraction of the peak (cosine decay) [%g]\n", d->final_lr_frac);
    printf("  -c <float>    AdamW weight decay (on matrices only) [%g]\n", d->weight_decay);
    printf("  -z <float>    clip the global gradient norm to this, 0 = off [%g]\n", d->grad_clip);
    printf("  -x <int>      number of training steps [%d]\n", d->max_steps);
    printf("  -v <int>      validation loss every this many steps, 0 = off [%d]\n", d->val_every);
    printf("  -m <int>      validation batches [%d]\n", d->val_batches);
    printf("  -s <int>      print a sample every this many steps, 0 = off [%d]\n", d->sample_every);
    printf("  -g <int>      tokens per sample, at most T-1 [%d]\n", d->gen_tokens);
    printf("  -n <int>      checkpoint every this many steps and at the end, 0 = off [%d]\n", d->checkpoint_every);
    printf("  -y <0|1>      resume from the newest checkpoint in -o [%d]\n", d->resume);
    printf("  -p <int>      random seed (model init, data order, samples) [%llu]\n", (unsigned long long)d->seed);
    printf("  -P <int>      time the phases of every this many steps (data, forward, backward, norm, update), 0 = off [%d]\n",
           d->phase_every);
    print_device_usage();
    printf("  -h            this help\n");
}

// --- end shared-copy: gpt2-options ---

// the GPU trainer's own flags: recomputation (-r), master weights (-w), flash attention (-F), memory (-G, -M), ZeRO (-Z)
static void print_device_usage(void) {
    printf("  -r <0|1|2>    recompute activations in the backward pass: 0 none, 1 GELU, 2 GELU + LayerNorm [%d]\n",
           recompute_level);
    printf("  -w <0|1>      keep fp32 master weights (bf16 builds; fp16 always keeps them, fp32 needs none) [%d]\n",
           use_master_weights);
    printf("  -F <0|1>      flash attention: tiles and an online softmax, keeping no (B,NH,T,T) scores%s [%d]\n",
           USE_CUDNN_ATTENTION ? " (0: cuDNN's)" : "", flash_attention);
    printf("  -G <GiB>      behave as if the GPU had only this much memory (a 16 GB card on a bigger one), 0 = all [0]\n");
    printf("  -M <0|1>      print the model and the GPU memory this run would allocate, and exit (needs no GPU) [0]\n");
    printf("  -Z <0|1|2>    ZeRO across ranks (train_gpt2cu_mpi): 1 each keeps the master weights and AdamW moments of its\n"
           "                shard only, 2 the layers' gradients too [0]\n");
    printf("  -pi <how>     how the ranks start (train_gpt2cu_mpi): mpi (mpirun), fs (a shared folder) or tcp [mpi]\n");
    printf("  -pn <n>       fs, tcp: how many ranks [$WORLD_SIZE or $SLURM_NTASKS]\n");
    printf("  -pr <r>       fs, tcp: this one's rank, 0 .. n - 1 [$RANK or $SLURM_PROCID]\n");
    printf("  -pg <g>       fs, tcp: GPUs a machine (a rank's GPU: r mod g) [$LOCAL_RANK or $SLURM_LOCALID, else r mod GPUs]\n");
    printf("  -pf <dir>     fs: a folder every rank sees, where rank 0 leaves NCCL's id\n");
    printf("  -ps <h[:p]>   tcp: rank 0's host and port [port 29500; or $MASTER_ADDR, port $MASTER_PORT + 1]\n");
    printf("  -pt <s>       seconds a rank waits for the others before it stops with an error [600]\n");
}
static int parse_device_flag(const char *flag, const char *value) {
    if (strcmp(flag, "-G") == 0) {
        gpu_budget_set(flag, value);
        return 1;
    }
    if (strcmp(flag, "-M") == 0) {
        plan_only = (int)parse_int(flag, value, 0);
        if (plan_only > 1) { usage_error("flag -M takes 0 or 1, got '%s'", value); }
        return 1;
    }
    if (flag[0] == '-' && flag[1] == 'p' && strchr("inrgfst", flag[2]) != NULL && flag[2] != '\0' && flag[3] == '\0') {
#ifdef USE_NCCL
        return 1; // (read by ranks_init)
#else
        usage_error("%s: ranks are train_gpt2cu_mpi's (make train_gpt2cu_mpi)", flag);
#endif
    }
    if (strcmp(flag, "-Z") == 0) {
        ranks.zero = (int)parse_int(flag, value, 0);
        if (ranks.zero > 2) { usage_error("-Z %s: ZeRO stage 0, 1 or 2 (stage 3 is not here)", value); }
        return 1;
    }
    if (strcmp(flag, "-F") == 0) {
        flash_attention = (int)parse_int(flag, value, 0);
        if (flash_attention > 1) { usage_error("-F %s: 0 (attention keeps its T x T scores) or 1 (flash attention)", value); }
        return 1;
    }
    if (strcmp(flag, "-r") == 0) {
        recompute_level = (int)parse_int(flag, value, 0);
        if (recompute_level > 2) { usage_error("flag -r takes 0, 1 or 2, got '%s'", value); }
        return 1;
    }
    if (strcmp(flag, "-w") == 0) {
        use_master_weights = (int)parse_int(flag, value, 0);
        if (use_master_weights > 1) { usage_error("flag -w takes 0 or 1, got '%s'", value); }
        if (use_master_weights == 0 && LOSS_SCALE_INIT != 1.0f) {
            usage_error("-w %s: an fp16 build always keeps master weights (stochastic rounding is bf16's)", value);
        }
        return 1;
    }
    return 0;
}

// -M 1: the model's shape and the start-up memory table of a run with these flags,
// without a GPU (nothing CUDA is called), for planning runs and for the sweep
// (dev/sweep_gpt2.sh); a run prints the same table and checks it after its first step.
static void print_plan_and_exit(const Options *o) {
    if (!plan_only) { return; }
    if (o->resume) {
        fprintf(stderr, "Error: -M plans a new run; -y 1 resumes one\nHINT: -M 1 -e %s/model_<step>.bin\n", o->out_dir);
        exit(EXIT_FAILURE);
    }
    GPT2Config c;
    if (access(o->model, F_OK) == 0) {
        FILE *fp = fopenCheck(o->model, "rb");
        size_t elem;
        c = read_model_header(fp, o->model, &elem);
        fcloseCheck(fp);
    } else {
        c = gpt2_config_from_descriptor(o->model);
    }
    if (o->T > c.max_seq_len) {
        fprintf(stderr, "Error: -t %d is longer than the model's maximum sequence length %d\n", o->T, c.max_seq_len);
        exit(EXIT_FAILURE);
    }
    check_recompute_level(c, recompute_level);
    check_flash(c, (size_t)o->B, flash_attention);
    printf("model: %s | maxT %d | V %d (padded %d) | L %d | NH %d | C %d | %zu parameters\n", o->model, c.max_seq_len,
           c.vocab_size, c.padded_vocab_size, c.num_layers, c.num_heads, c.channels, gpt2_count_parameters(c));
    gpt2_print_memory_plan(c, (size_t)o->B, (size_t)o->T, recompute_level, use_master_weights, flash_attention);
    if (gpu_budget > 0) { // (-G: the run's check counts the device's memory in use besides, the CUDA context first)
        size_t bytes[NUM_MEM_GROUPS], total = gpt2_memory_plan(bytes, c, o->B, o->T, recompute_level, use_master_weights,
                                                              flash_attention);
        printf("-G %.2f GiB: the table %s the budget by %.1f MiB, before the CUDA context and the libraries' memory\n",
               gpu_budget / 1073741824.0, total <= gpu_budget ? "fits" : "exceeds",
               (total <= gpu_budget ? gpu_budget - total : total - gpu_budget) / 1048576.0);
    }
    exit(EXIT_SUCCESS);
}

// --- begin shared-copy: gpt2-main ---

// The flags. The defaults are the embedded default run. lr 1e-3 with a short warm-up suits
// a 4-layer model (GPT-2 small trained at 6e-4); betas (0.9, 0.95) and weight decay 0.1
// are GPT-3's and nanoGPT's; B x T = 512 tokens keeps a step near half a second on 2
// cores, so the validation loss visibly falls within a minute.
static Options parse_args(int argc, char **argv) {
    Options o = {
        .train_pattern = "data/tinyshakespeare/tiny_shakespeare_train.bin",
        .val_pattern = "data/tinyshakespeare/tiny_shakespeare_val.bin",
        .tokenizer_path = "data/gpt2_tokenizer.bin",
        .model = "d4", .out_dir = "log_gpt2",
        .B = 8, .T = 64, .total_batch_size = 0,
        .lr = 1e-3f, .final_lr_frac = 0.1f, .weight_decay = 0.1f, .grad_clip = 1.0f,
        .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
        .warmup = 20, .max_steps = 300, .val_every = 50, .val_batches = 16, .sample_every = 100,
        .gen_tokens = 60, .checkpoint_every = 0, .resume = 0, .phase_every = 0, .seed = 1337};
    const Options defaults = o;
    // every flag is "-x value"; anything else is an error, never silently ignored
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) { print_usage(&defaults); exit(0); }
        if (a[0] != '-' || a[1] == '\0') { usage_error("unknown argument '%s'", a); }
        if (i + 1 >= argc) { usage_error("flag %s needs a value", a); }
        const char *v = argv[++i];
        if (a[2] != '\0') { // (longer flags are the program's own: train_gpt2.cu's -pi, -pn, ...)
            if (!parse_device_flag(a, v)) { usage_error("unknown flag '%s'", a); }
            continue;
        }
        switch (a[1]) {
        case 'i': o.train_pattern = v; break;
        case 'j': o.val_pattern = v; break;
        case 'k': o.tokenizer_path = v; break;
        case 'e': o.model = v; break;
        case 'o': o.out_dir = v; break;
        case 'b': o.B = (int)parse_int(a, v, 1); break;
        case 't': o.T = (int)parse_int(a, v, 1); break;
        case 'd': o.total_batch_size = (int)parse_int(a, v, 0); break;
        case 'l': o.lr = parse_float(a, v); break;
        case 'u': o.warmup = (int)parse_int(a, v, 0); break;
        case 'q': o.final_lr_frac = parse_float(a, v); break;
        case 'c': o.weight_decay = parse_float(a, v); break;
        case 'z': o.grad_clip = parse_float(a, v); break;
        case 'x': o.max_steps = (int)parse_int(a, v, 1); break;
        case 'v': o.val_every = (int)parse_int(a, v, 0); break;
        case 'm': o.val_batches = (int)parse_int(a, v, 1); break;
        case 's': o.sample_every = (int)parse_int(a, v, 0); break;
        case 'g': o.gen_tokens = (int)parse_int(a, v, 1); break;
        case 'n': o.checkpoint_every = (int)parse_int(a, v, 0); break;
        case 'y': o.resume = (int)parse_int(a, v, 0); break;
        case 'p': o.seed = (uint64_t)parse_int(a, v, 0); break;
        case 'P': o.phase_every = (int)parse_int(a, v, 0); break;
        default:
            if (!parse_device_flag(a, v)) { usage_error("unknown flag '%s'", a); }
        }
    }
    return o;
}

// What main carries from one step of setting up to the next.
typedef struct {
    Options o;
    int accum_steps;       // forward/backward passes of B x T per update
    int have_out;          // an output directory (-o "" runs without log and checkpoints)
    int resume_step;       // the checkpoint this run resumes from, -1 for none
    char state_path[4096]; // its training state
    TrainState st;         // where the run starts: step 0, or the checkpoint's step and data position
    double start_time;     // when its first step began (wall_seconds), for the ETA
} Run;

// Batch sizes that fit, gradient accumulation, whether there is an output directory.
static void plan_run(Run *r) {
    Options *o = &r->o;
    // sizes that fit: B*T*Vp floats of logits must be addressable, and gemm takes ints
    size_t tokens_per_batch = (size_t)o->B * o->T;
    if (o->B > (1 << 16) || o->T > (1 << 20) || tokens_per_batch > (1 << 24)) {
        fprintf(stderr, "Error: -b %d x -t %d = %zu tokens per batch is more than this trainer handles (2^24)\n",
                o->B, o->T, tokens_per_batch);
        exit(EXIT_FAILURE);
    }
    if (o->total_batch_size == 0) { o->total_batch_size = (int)(tokens_per_batch * ranks.world); } // (one pass of every rank)
    if (o->total_batch_size % tokens_per_batch != 0) {
        fprintf(stderr, "Error: total batch size -d %d is not a multiple of B*T = %zu\n", o->total_batch_size, tokens_per_batch);
        exit(EXIT_FAILURE);
    }
    r->accum_steps = (int)(o->total_batch_size / tokens_per_batch);
    if (r->accum_steps % ranks.world != 0) { // (each rank's B x T are part of every pass: the data parallelism)
        fprintf(stderr, "Error: total batch size -d %d is not a multiple of B*T x %d ranks = %zu\n", o->total_batch_size,
                ranks.world, tokens_per_batch * ranks.world);
        exit(EXIT_FAILURE);
    }
    r->accum_steps /= ranks.world;
    r->have_out = o->out_dir[0] != '\0';
    if ((o->resume || o->checkpoint_every > 0) && !r->have_out) {
        fprintf(stderr, "Error: -n and -y need an output directory (-o)\n");
        exit(EXIT_FAILURE);
    }
}

// the output directory, made if it is missing
static void make_out_dir(const Run *r) {
    const Options *o = &r->o;
    if (r->have_out && ranks.rank == 0 && mkdir(o->out_dir, 0755) != 0 && errno != EEXIST) { // (rank 0 writes for all)
        fprintf(stderr, "Error: could not create output directory %s: %s\n", o->out_dir, strerror(errno));
        exit(EXIT_FAILURE);
    }
}

// The model: resumed from the newest checkpoint (-y 1), loaded (-e file), or new (-e d<N>).
static void build_model(Run *r, GPT2 *model) {
    Options *o = &r->o;
    memset(&r->st, 0, sizeof(r->st));
    r->resume_step = o->resume ? find_latest_checkpoint(o->out_dir) : -1;
    if (o->resume && r->resume_step < 0) {
        fprintf(stderr, "Error: -y 1 but no checkpoint (state_*.bin with its model_*.bin) in %s\n%s\n", o->out_dir, STATE_HINT);
        exit(EXIT_FAILURE);
    }
    if (!o->resume && o->checkpoint_every > 0 && find_latest_checkpoint(o->out_dir) >= 0) {
        // a new run would write its checkpoints over these, step by step
        fprintf(stderr, "Error: %s already holds checkpoints (newest: step %d); not overwriting them\n"
                "HINT: resume them with -y 1, or pick another -o\n", o->out_dir, find_latest_checkpoint(o->out_dir));
        exit(EXIT_FAILURE);
    }
    if (r->resume_step >= 0) {
        // The model comes from the checkpoint (-e is not used). The flags that
        // decide what the next batch is must be the same as before (-t, -d, -p); the
        // others (-x to train longer, -l, -v, ...) may change, at the cost of
        // exactness. -b and the number of ranks may change too: they only split each
        // step's sequences (the same ones, in the same order) into other passes, which
        // round differently.
        static char model_path[4096];
        TrainState *st = &r->st;
        format_path(model_path, sizeof(model_path), "%s/model_%08d.bin", o->out_dir, r->resume_step);
        format_path(r->state_path, sizeof(r->state_path), "%s/state_%08d.bin", o->out_dir, r->resume_step);
        gpt2_build_from_checkpoint(model, model_path);
        load_state(r->state_path, model, st);
        if (st->T != (size_t)o->T || st->total_batch_size != (size_t)o->total_batch_size || st->seed != o->seed) {
            fprintf(stderr, "Error: %s was written with -b %zu -t %zu -d %zu -p %llu; resume with the same -t, -d and -p\n",
                    r->state_path, st->B, st->T, st->total_batch_size, (unsigned long long)st->seed);
            exit(EXIT_FAILURE);
        }
        if (st->step != r->resume_step || st->step >= o->max_steps) {
            fprintf(stderr, "Error: %s is the state after step %d%s\n", r->state_path, st->step,
                    st->step != r->resume_step ? ", not the step in its name: corrupt" : "; nothing left to do (raise -x to train longer)");
            exit(EXIT_FAILURE);
        }
        printf("resuming from %s at step %d\n", r->state_path, st->step);
        o->model = model_path;
    } else if (access(o->model, F_OK) == 0) {
        gpt2_build_from_checkpoint(model, o->model);
    } else {
        gpt2_build_from_descriptor(model, o->model, o->seed);
    }
    if (o->T > model->config.max_seq_len) {
        fprintf(stderr, "Error: -t %d is longer than the model's maximum sequence length %d\n", o->T, model->config.max_seq_len);
        exit(EXIT_FAILURE);
    }
}

// The data: training batches shuffled, validation always the same first batches (so
// validation losses of different steps and runs compare like with like; without
// validation, -v 0, the validation data is not read at all). With several ranks every
// rank reads the batches of all of them, B x ranks sequences, in the order one process
// would, and takes its own B (rank_batch): the data seen does not depend on the ranks.
static void open_data(const Run *r, const GPT2 *model, DataLoader *train, DataLoader *val) {
    const Options *o = &r->o;
    const TrainState *st = &r->st;
    int V = model->config.vocab_size;
    size_t B_all = (size_t)o->B * ranks.world;
    dataloader_init(train, o->train_pattern, B_all, o->T, V, 1, o->seed);
    if (o->val_every > 0) { dataloader_init(val, o->val_pattern, B_all, o->T, V, 0, o->seed); }
    if (r->resume_step >= 0 && !dataloader_seek(train, st->epoch, st->shard_pos, st->sample_pos)) {
        fprintf(stderr, "Error: %s: its data position (shard %zu, sequence %zu) does not exist in '%s'\n"
                "HINT: resume with the same -i data the run started with\n", r->state_path, st->shard_pos, st->sample_pos,
                o->train_pattern);
        exit(EXIT_FAILURE);
    }
    if (o->val_every > 0 && (size_t)o->val_batches * B_all > val->num_samples_total) {
        fprintf(stderr, "Error: -m %d validation batches of -b %d x %d ranks need %zu sequences, '%s' holds %zu\n"
                "HINT: lower -m\n", o->val_batches, o->B, ranks.world, (size_t)o->val_batches * B_all, o->val_pattern,
                val->num_samples_total);
        exit(EXIT_FAILURE);
    }
    if (o->sample_every > 0 && o->gen_tokens >= o->T) {
        fprintf(stderr, "Error: -g %d tokens per sample do not fit after the prompt token in -t %d\n"
                "HINT: -g at most %d\n", o->gen_tokens, o->T, o->T - 1);
        exit(EXIT_FAILURE);
    }
}

// this rank's B sequences of the batch the loader holds (inputs, or targets)
static const int *rank_batch(const int *all, const Options *o) { return all + (size_t)ranks.rank * o->B * o->T; }

// The mean loss over the first val_batches batches of the validation data (each rank its
// share of every batch, summed over the ranks).
static double validation_loss(GPT2 *model, DataLoader *val, const Options *o) {
    dataloader_seek(val, 0, 0, 0);
    double val_loss = 0.0;
    for (int i = 0; i < o->val_batches; i++) {
        dataloader_next_batch(val);
        gpt2_forward(model, rank_batch(val->inputs, o), rank_batch(val->targets, o), o->B, o->T);
        val_loss += model->mean_loss;
    }
    return ranks_sum(val_loss / ranks.world) / o->val_batches;
}

// One optimizer step (step counts from 0): accumulate gradients over accum_steps
// micro-batches, each backward scaled so that the sum is the gradient of the mean loss
// (over the ranks too: each rank's share, then summed over them); clip; update; print and
// log the step's line.
static void train_step(const Run *r, GPT2 *model, DataLoader *train, int step, FILE *logfile, Phases *ph) {
    const Options *o = &r->o;
    phases_begin(ph, step); // (first: on the GPU a timed step waits here for the one before)
    double t0 = wall_seconds();
    phases_enter(ph, PHASE_UPDATE);
    gpt2_zero_grad(model);
    double loss = 0.0;
    for (int micro = 0; micro < r->accum_steps; micro++) {
        phases_enter(ph, PHASE_DATA);
        dataloader_next_batch(train);
        phases_enter(ph, PHASE_FORWARD);
        gpt2_forward(model, rank_batch(train->inputs, o), rank_batch(train->targets, o), o->B, o->T);
        phases_enter(ph, PHASE_BACKWARD);
        sum_grads_in_backward = micro == r->accum_steps - 1; // (train_gpt2.cu: the last pass sums each layer's as it goes)
        gpt2_backward(model, 1.0f / ((float)r->accum_steps * ranks.world));
        sum_grads_in_backward = 0;
        loss += model->mean_loss;
    }
    gpt2_sum_grads(model); // (one rank: nothing to do)
    loss = ranks_sum(loss / ((double)r->accum_steps * ranks.world));
    phases_enter(ph, PHASE_NORM);
    float norm = gpt2_grad_norm(model);
    // (train_gpt2.cu in FP16: gradients that overflowed skip the update and
    // lower the loss scale; otherwise skip is 0 and note empty)
    char note[128];
    int skip = gpt2_loss_scale_update(model, norm, note, sizeof(note));
    if (!isfinite(loss) || (!isfinite(norm) && !skip)) {
        // nothing good can come of the next step: stop while the checkpoints are sound
        fprintf(stderr, "Error: step %d: loss %g, gradient norm %g: training diverged\n"
                "HINT: lower the learning rate (-l), or keep gradient clipping on (-z)\n", step + 1, loss, norm);
        exit(EXIT_FAILURE);
    }
    // clip as torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when above 1
    float grad_scale = 1.0f;
    if (o->grad_clip > 0.0f && o->grad_clip / (norm + 1e-6f) < 1.0f) { grad_scale = o->grad_clip / (norm + 1e-6f); }
    float lr = get_learning_rate(step, o->lr, o->warmup, o->max_steps, o->final_lr_frac);
    phases_enter(ph, PHASE_UPDATE);
    if (!skip) { gpt2_update(model, lr, o->beta1, o->beta2, o->eps, o->weight_decay, grad_scale, step + 1); }
    phases_end(ph); // (on the GPU this waits for the step's kernels: the step's time below includes them)
    double ms = (wall_seconds() - t0) * 1000.0;
    printf("step %4d/%d | loss %.6f | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s", step + 1, o->max_steps,
           loss, lr, norm, ms, o->total_batch_size / (ms / 1000.0));
    double mfu = model_flops_utilization(model, (size_t)o->total_batch_size, (size_t)o->T, ms / 1000.0);
    if (mfu >= 0.0) { printf(" | MFU %.1f%%", 100.0 * mfu); }
    char eta[32]; // (at the pace of this run's steps so far, validation and samples included)
    format_eta(eta, sizeof(eta), wall_seconds() - r->start_time, step + 1 - r->st.step, o->max_steps - r->st.step);
    printf(" | %s%s", eta, note);
    phases_print(ph, ms);
    printf("\n");
    phases_print_host(ph);
    if (logfile != NULL) {
        // %.9g prints a float so that it reads back exactly: logs can be compared bit for bit
        fprintf(logfile, "s:%d trl:%.9g lr:%.9g norm:%.9g ms:%.1f", step + 1, (float)loss, lr, norm, ms);
        phases_log(ph, logfile);
        fprintf(logfile, "\n");
        fflush(logfile);
    }
}

int main(int argc, char **argv) {
    set_omp_wait_policy(argv); // first of all: it may start the program over
    ranks_init(&argc, &argv);
    Run r;
    memset(&r, 0, sizeof(r));
    r.o = parse_args(argc, argv);
    const Options *o = &r.o;
    plan_run(&r);
    print_plan_and_exit(o); // (train_gpt2.cu's -M: the memory the run would take, without a GPU)
    setup_hardware();
    make_out_dir(&r);
    GPT2 model;
    build_model(&r, &model);
    ranks_start_alike(&model, r.resume_step);
    GPT2Config c = model.config;
    DataLoader train_loader, val_loader;
    open_data(&r, &model, &train_loader, &val_loader);
    Tokenizer tokenizer;
    tokenizer_init(&tokenizer, o->tokenizer_path, c.vocab_size);

    // the run, and its memory: parameters, gradients, AdamW moments, activations
    gpt2_allocate_activations(&model, o->B, o->T);
    printf("model: %s | maxT %d | V %d (padded %d) | L %d | NH %d | C %d | seed %llu\n", o->model,
           c.max_seq_len, c.vocab_size, c.padded_vocab_size, c.num_layers, c.num_heads, c.channels,
           (unsigned long long)o->seed);
    printf("data: %s (%zu shards) | val %s\n", o->train_pattern, train_loader.num_shards, o->val_every > 0 ? o->val_pattern : "none (-v 0)");
    printf("batch: B %d x T %d", o->B, o->T);
    if (ranks.world > 1) { printf(" x %d ranks", ranks.world); }
    printf(" x %d accumulation steps = %d tokens | steps %d | lr %g warm-up %d\n", r.accum_steps, o->total_batch_size,
           o->max_steps, o->lr, o->warmup);
    print_hardware();
    gpt2_print_memory(&model, o->B, o->T);
    FILE *logfile = NULL;
    if (r.have_out && ranks.rank == 0) {
        char path[4096];
        format_path(path, sizeof(path), "%s/main.log", o->out_dir);
        if (r.resume_step >= 0) { log_truncate_after(path, "s:%d", r.resume_step); }
        logfile = fopenCheck(path, r.resume_step >= 0 ? "a" : "w");
    }

    Phases phases;
    memset(&phases, 0, sizeof(phases));
    phases.every = o->phase_every; // (the GPU's events go on the default stream, where train_gpt2.cu queues its work)
    r.start_time = wall_seconds();
    for (int step = r.st.step; step <= o->max_steps; step++) {
        int last_step = step == o->max_steps;
        // A resumed run starts where the checkpoint was taken: after that step's
        // validation and sample, which the first run already did and logged.
        int resumed_here = r.resume_step >= 0 && step == r.st.step;
        if (o->val_every > 0 && (step % o->val_every == 0 || last_step) && !resumed_here) {
            double val_loss = validation_loss(&model, &val_loader, o);
            printf("step %d | val loss %.6f\n", step, val_loss);
            if (logfile != NULL) { fprintf(logfile, "s:%d tel:%.9g\n", step, val_loss); fflush(logfile); }
        }
        if (o->sample_every > 0 && (step % o->sample_every == 0 || last_step) && !resumed_here && ranks.rank == 0) {
            gpt2_sample(&model, &tokenizer, (size_t)o->gen_tokens, o->seed, step);
        }
        // a checkpoint after `step` steps (not at the step we resumed from: it exists)
        if (o->checkpoint_every > 0 && step > r.st.step && (step % o->checkpoint_every == 0 || last_step)) { // (rank 0 writes)
            TrainState now = {step, o->seed, (size_t)o->B, (size_t)o->T, (size_t)o->total_batch_size,
                              model.num_parameters, train_loader.epoch, train_loader.shard_pos, train_loader.sample_pos};
            save_checkpoint(o->out_dir, &model, &now);
        }
        if (last_step) { break; }
        train_step(&r, &model, &train_loader, step, logfile, &phases);
    }

    if (logfile != NULL) { fcloseCheck(logfile); }
    dataloader_free(&train_loader);
    if (o->val_every > 0) { dataloader_free(&val_loader); }
    tokenizer_free(&tokenizer);
    gpt2_free(&model);
    ranks_finalize();
    return 0;
}
// --- end shared-copy: gpt2-main ---
#endif
