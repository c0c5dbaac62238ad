/*
finetune_lora.cu: LoRA fine-tuning on one GPU, checked against finetune_lora.c.

The same flags, data, files and logs as finetune_lora.c (an adapter or a checkpoint of one
resumes on the other); the arithmetic moves to the GPU:
  - the frozen base model on the GPU in bf16 (PRECISION=BF16, the default) or fp32
    (PRECISION=FP32), its matmuls through cuBLAS reading their inputs in that precision and
    summing in fp32; the adapter, its gradients, AdamW's moments and the activations
    between layers in fp32;
  - each of finetune_lora.c's layer functions a kernel (or cuBLAS call) and a launcher of
    the same name and arguments, so the two files read side by side: the norms, RoPE,
    causal attention with grouped key/value heads (its products cuBLAS's, batched over the
    key/value heads; the softmaxes and their backward a warp per row; or with -F 1 flash
    attention, dev/cuda/flash_attention.cu's kernels: no (B, NH, T, T) matrices),
    GELU or SwiGLU, the cross-entropy, LoRA's two thin matmuls each way (fp32 cuBLAS), LoRA
    dropout with the CPU's own masks, the clipped gradient norm and AdamW;
  - QLoRA (-Q nf4): the four linear layers' weights stay on the GPU in 4 bits, as
    bitsandbytes stores them (finetune_lora.c's quant4); before each of its matmuls a layer's
    weight is dequantized by a kernel into one scratch weight in floatX (bf16 compute, as
    QLoRA's), the same fp32 values as the CPU's. (The first rung: a whole layer's weight
    dequantized, then cuBLAS. Dequantizing inside the matmul's tiles comes next.)
  - activation recomputation (-A 1): only each block's input is kept through the forward
    pass, and the backward pass runs each block forward again before going back through it
    (the activations of one block instead of all of them, for about a third more compute);
  - every sum in a fixed order (no atomics): two runs are bit-identical.
What it shares with finetune_lora.c, as marked copies: the model files, the adapter's files
(PEFT's), the data's checks and templates, checkpoints, the flags and main. Only the
layers, the memory table, and where the numbers live (base_to_device, lora_to_device,
lora_to_host: main calls them where the host's copies change or are needed) differ.

    make finetune_loracu && ./finetune_loracu -r 8 -a 16 -T all-linear -e 1    # SmolLM2, as finetune_lora's default run
    make finetune_loracu PRECISION=FP32                                         # an fp32 base (the CPU's numbers, to ~1e-6)
Without a GPU, make test runs it through the CPU emulator (dev/emu) against finetune_lora.c
and PEFT (test_finetune_lora.cu, dev/test/test_finetune_lora_cuda.sh).

Sizes as finetune_lora.c's: B sequences of T positions, N = B T rows, C channels, NH query
and NKV key/value heads of HS channels, Q = NH HS, KV = NKV HS, H the MLP's width (MLP = H,
or 2H for SwiGLU's gate and up), V vocabulary (Vp padded), L layers, r the adapter's rank.
*/

// fsync, fileno, fseeko, mkdir, stat and clock_gettime are POSIX; M_PI is X/Open
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h> // (header-only: NVTX ranges for Nsight Systems)
#include <cuda_bf16.h>
#include <cublas_v2.h>

#define PROGRAM "./finetune_loracu" // in messages: how the user runs this program
#include "lib/utils.h"
#include "lib/rand.h"
#include "lib/json.h"
#include "lib/safetensors.h"
#include "lib/tokenizer.h"
#include "lib/model_notes.h"
#include "lib/cuda_utils.h"
#include "lib/phases.h"

// ----------------------------------------------------------------------------
// the GPU: precision, the cuBLAS handle and stream, memory

// floatX: what the frozen base model's weights are stored in on the GPU (and what its
// matmuls read their inputs in). The adapter, its gradients, AdamW's moments and the
// activations between layers stay fp32: the base is frozen, so nothing small is lost to
// rounding an update, and a 16-bit base halves the weights' memory and doubles the matmuls'
// speed (QLoRA goes to 4 bits, the next step).
#if defined(ENABLE_FP32)
typedef float floatX;
#define CUBLAS_FLOATX CUDA_R_32F
#define BASE_TYPE "fp32"
#elif defined(ENABLE_BF16)
typedef __nv_bfloat16 floatX;
#define CUBLAS_FLOATX CUDA_R_16BF
#define BASE_TYPE "bf16"
#else
#error "build with -DENABLE_FP32 or -DENABLE_BF16 (make finetune_loracu PRECISION=FP32|BF16)"
#endif
__device__ __host__ inline float to_float(floatX x) { return (float)x; }
__device__ __host__ inline floatX from_float(float x) { return (floatX)x; }

static cublasHandle_t cublas_handle;
static cudaStream_t main_stream;
#define BLOCK 256 // threads per block of the elementwise kernels

// the handle and the stream, once; a clear message where there is no GPU
static void gpu_init(void) {
    static int done = 0;
    if (done) { return; }
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        fprintf(stderr, "Error: no CUDA GPU found\nHINT: ./finetune_lora is the same program on the CPU\n");
        exit(EXIT_FAILURE);
    }
    cudaCheck(cudaStreamCreate(&main_stream));
    cublasCheck(cublasCreate(&cublas_handle));
    cublasCheck(cublasSetStream(cublas_handle, main_stream));
    cublasCheck(cublasSetMathMode(cublas_handle, CUBLAS_DEFAULT_MATH)); // (fp32 matmuls in fp32, not TF32)
    (void)rng_normal_at; // (splitmix-counter's normal draws start a new model's weights; a LoRA run makes none)
    done = 1;
}

// cudaMalloc, or one message saying what did not fit. What is held is counted (the
// benchmark's peak memory): a table of the live allocations, a few dozen at most.
#define MAX_ALLOCATIONS 64
static struct { void *p; size_t bytes; } live[MAX_ALLOCATIONS];
static size_t held_bytes, peak_bytes;
static void *gpu_alloc(size_t bytes, const char *what) {
    void *p = NULL;
    cudaError_t err = gpu_malloc_budgeted(&p, bytes > 0 ? bytes : 1);
    if (err != cudaSuccess) {
        size_t free_bytes = 0, total = 0;
        gpu_memory_info(&free_bytes, &total);
        fprintf(stderr, "Error: out of GPU memory%s for %s: %.1f MiB asked, %.1f MiB free of %.1f\n"
                "HINT: a smaller -b or -t, or -A 1 (activation recomputation)\n", gpu_budget > 0 ? " (the -G budget)" : "", what, bytes / 1048576.0,
                free_bytes / 1048576.0, total / 1048576.0);
        exit(EXIT_FAILURE);
    }
    int k = 0;
    while (k < MAX_ALLOCATIONS && live[k].p != NULL) { k++; }
    if (k == MAX_ALLOCATIONS) { fprintf(stderr, "Error: more than %d GPU allocations held at once (%s): a leak?\n", MAX_ALLOCATIONS, what); exit(EXIT_FAILURE); }
    live[k].p = p;
    live[k].bytes = bytes;
    held_bytes += bytes;
    peak_bytes = held_bytes > peak_bytes ? held_bytes : peak_bytes;
    return p;
}
static void gpu_free(void *p) {
    if (p == NULL) { return; }
    for (int k = 0; k < MAX_ALLOCATIONS; k++) {
        if (live[k].p == p) { held_bytes -= live[k].bytes; live[k].p = NULL; break; }
    }
    cudaCheck(cudaFree(p));
}

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

// splitmix-counter's uniform, on the GPU: LoRA dropout's masks are the CPU's, bit for bit
__device__ inline double device_uniform_at(uint64_t key, uint64_t i) {
    uint64_t z = key + i + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z = z ^ (z >> 31);
    return (double)(z >> 40) * 0x1p-24;
}

// ----------------------------------------------------------------------------
// the adapter: what LoRA adds to a linear layer

// --- begin shared-copy: lora-types ---
// LoRA (Hu et al. 2021): each adapted linear layer y = x W^T + b gets a low-rank update,
//     y = x W^T + b + s (x A^T) B^T,    A (r, in), B (out, r), s = alpha / r (rsLoRA: alpha / sqrt(r))
// W stays frozen; only A and B train: r (in + out) numbers instead of in x out. PEFT names
// each adapted module by its path in the Hugging Face model, and so do we (its files are
// ours). Our model files fuse some of Hugging Face's layers: q, k and v are one (Q + 2KV, C)
// matrix, gate and up one (2H, C); a module of Hugging Face's then adapts a band of rows of
// ours (its `offset`, `out` rows), which changes nothing in the arithmetic.

enum { SITE_QKV, SITE_ATTPROJ, SITE_FC, SITE_FCPROJ, NUM_SITES }; // the four linear layers of a block

// What of the base model an adapter must fit: the family (its module names), L layers, C
// channels, Q = NH HS query and KV = NKV HS key/value channels, the MLP's width H
typedef struct {
    int llama, L, C, Q, KV, H;
} LoraShape;

typedef struct {
    char name[128]; // PEFT's module path, e.g. "model.layers.3.self_attn.q_proj"
    int layer, site, offset, out, in;
    float *A, *B;   // (r, in), (out, r): into Lora.params
    float *dA, *dB; // their gradients: into Lora.grads (finetune_lora; NULL in infer)
} LoraModule;

typedef struct {
    int r;
    float alpha, scale;
    int rslora;
    float dropout;         // LoRA dropout p: on the adapter's input x (not the base layer's), while training
    int training;          // 1: dropout applies (0: evaluation, inference)
    uint64_t dropout_key;  // the current micro-batch's: which inputs are dropped (set before its forward pass)
    int num_modules;
    LoraModule *modules;
    size_t num_params;
    float *params, *grads, *m, *v; // all modules' A and B, back to back (training: their gradients, AdamW's moments)
} Lora;
// --- end shared-copy: lora-types ---

// ----------------------------------------------------------------------------
// the frozen weights in 4 bits (QLoRA): NF4 and FP4 as bitsandbytes stores them

// --- begin shared-copy: quant4 ---
// QLoRA (Dettmers et al., "QLoRA: Efficient Finetuning of Quantized LLMs", 2023) keeps the
// frozen weights in 4 bits and trains LoRA beside them. We store them exactly as
// bitsandbytes does (its quantize_4bit / dequantize_4bit, the layout of Hugging Face's
// *-bnb-4bit checkpoints), the same bytes as bitsandbytes computes on the CPU (where it
// summed the double quantization's mean in another order, on a GPU, the offset can differ
// in its last bit: torch_sum_f32):
//   - a tensor of n values, flattened row-major, cut into blocks of `blocksize` (64; any
//     power of two from 32 to 4096), the last block possibly partial;
//   - each block's absmax = max |x|, and each value the index of the code nearest to
//     x / absmax, two indices per byte, the first element in the high nibble (an odd n pads
//     the last byte with the index of 0);
//   - the codes: NF4 (16 quantiles of N(0, 1) scaled to [-1, 1]: each code equally likely
//     for normally distributed weights) or FP4 (a 4-bit float, 1 sign, 2 exponent and 1
//     mantissa bits, over 12), listed in bitsandbytes' order;
//   - dequantized, x = code[index] * absmax (fp32).
// Double quantization (bitsandbytes' compress_statistics, QLoRA's default) stores the absmax
// values in 8 bits too: minus their mean (the offset), in blocks of 256, each the index of
// the nearest of the 256 values of the signed 8-bit "dynamic" map times the fp32 absmax of
// its block of 256. Per 64 weights: 256 bits of codes + 8 + 32/256 bits of scale, 4.127
// bits a weight against 4.5 without it (QLoRA's 0.52 bytes per parameter, against fp32's 4).
// Checked against bitsandbytes 0.50.2 by test_finetune_lora (dev/reference/nf4_reference.py).
enum { QUANT_NONE = 0, QUANT_NF4 = 1, QUANT_FP4 = 2 };

static const float NF4_CODE[16] = {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
                                   -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
                                   0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
                                   0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};
// FP4 by bit pattern: 0, 0.0625, 8, 12, 4, 6, 2, 3 (and the same negated), / 12. (Both zeros
// are +0, as bitsandbytes' table has them.)
static const float FP4_CODE[16] = {0.0f, 0.0625f / 12, 8.0f / 12, 1.0f, 4.0f / 12, 6.0f / 12, 2.0f / 12, 3.0f / 12,
                                   0.0f, -0.0625f / 12, -8.0f / 12, -1.0f, -4.0f / 12, -6.0f / 12, -2.0f / 12, -3.0f / 12};
#define QUANT_NESTED_BLOCK 256 // double quantization's blocksize

typedef struct {
    int type;                 // QUANT_NF4 or QUANT_FP4
    int blocksize;
    size_t n, num_blocks;     // values; blocks, ceil(n / blocksize)
    uint8_t *packed;          // (n + 1) / 2 bytes
    float *absmax;            // (num_blocks): without double quantization; NULL with it
    uint8_t *qabsmax;         // (num_blocks): with it, the 8-bit index of absmax - offset ...
    float *nested_absmax;     // ... the fp32 absmax of each block of 256 of those
    float offset;             // ... their mean
    float nested_code[256];   // ... and the map (bitsandbytes' dynamic map)
} Quant4;

static const float *quant4_code(int type) { return type == QUANT_FP4 ? FP4_CODE : NF4_CODE; }
static const char *quant4_name(int type) { return type == QUANT_FP4 ? "fp4" : type == QUANT_NF4 ? "nf4" : "none"; }
static int quant4_blocksize_ok(long blocksize) {
    for (long b = 32; b <= 4096; b *= 2) {
        if (blocksize == b) { return 1; }
    }
    return 0;
}

// bitsandbytes' signed dynamic map (create_dynamic_map(signed=True)), as torch computes it in
// float32: for i = 0..6, the 2^i midpoints of linspace(0.1, 1, 2^i + 1), times 10^(i - 6),
// with both signs; then 0 and 1; sorted. 256 values from -0.993 to 1. (torch's linspace
// computes each point with one rounding, a fused multiply-add from the start before halfway
// and from the end after.)
static float linspace_point(float start, float end, int steps, int i) {
    float step = (end - start) / (float)(steps - 1);
    return i < steps / 2 ? fmaf(step, (float)i, start) : fmaf(-step, (float)(steps - i - 1), end);
}
static int compare_floats(const void *a, const void *b) { float x = *(const float *)a, y = *(const float *)b; return (x > y) - (x < y); }
static void dynamic_map(float code[256]) {
    int k = 0;
    for (int i = 0; i < 7; i++) {
        int steps = (1 << i) + 1;
        float scale = (float)pow(10.0, i - 6);
        for (int s = 0; s + 1 < steps; s++) {
            float mean = (linspace_point(0.1f, 1.0f, steps, s) + linspace_point(0.1f, 1.0f, steps, s + 1)) / 2.0f;
            code[k++] = scale * mean;
            code[k++] = -(scale * mean);
        }
    }
    code[k++] = 0.0f;
    code[k++] = 1.0f;
    qsort(code, 256, sizeof(float), compare_floats);
}

// torch's float32 sum, in its order (at::native's cascade sum with AVX2's 8-lane vectors,
// one thread): the mean that double quantization subtracts must be bitsandbytes' to the last
// bit. The data as rows of 4 vectors of 8 (32 lanes); each lane sums its column through four
// levels (a level's running sum added to the next every 16 rows); vectors left over go into
// the first vector; the 4 vectors are added, then the scalar tail, then the 8 lanes in order.
static float torch_sum_f32(const float *x, size_t n) {
    enum { W = 8, ILP = 4, LEVELS = 4 };
    if (n < W) { // (no vector: torch's scalar path, 4 running sums)
        float p[ILP] = {0};
        size_t rows = n / ILP;
        for (size_t i = 0; i < rows; i++) { for (int k = 0; k < ILP; k++) { p[k] += x[i * ILP + k]; } }
        for (size_t i = rows * ILP; i < n; i++) { p[0] += x[i]; }
        for (int k = 1; k < ILP; k++) { p[0] += p[k]; }
        return p[0];
    }
    size_t vecs = n / W, rows = vecs / ILP;
    int ceil_log2 = 1;
    while (rows > 2 && ((size_t)1 << ceil_log2) < rows) { ceil_log2++; }
    int power = ceil_log2 / LEVELS > 4 ? ceil_log2 / LEVELS : 4;
    size_t step = (size_t)1 << power, mask = step - 1;
    float acc[LEVELS][ILP][W] = {{{0}}};
    size_t i = 0;
    while (i + step <= rows) {
        for (size_t j = 0; j < step; j++, i++) {
            for (int k = 0; k < ILP; k++) { for (int w = 0; w < W; w++) { acc[0][k][w] += x[(i * ILP + k) * W + w]; } }
        }
        for (int l = 1; l < LEVELS; l++) {
            for (int k = 0; k < ILP; k++) { for (int w = 0; w < W; w++) { acc[l][k][w] += acc[l - 1][k][w]; acc[l - 1][k][w] = 0.0f; } }
            if ((i & (mask << (l * power))) != 0) { break; }
        }
    }
    for (; i < rows; i++) {
        for (int k = 0; k < ILP; k++) { for (int w = 0; w < W; w++) { acc[0][k][w] += x[(i * ILP + k) * W + w]; } }
    }
    for (int l = 1; l < LEVELS; l++) {
        for (int k = 0; k < ILP; k++) { for (int w = 0; w < W; w++) { acc[0][k][w] += acc[l][k][w]; } }
    }
    for (size_t v = rows * ILP; v < vecs; v++) { for (int w = 0; w < W; w++) { acc[0][0][w] += x[v * W + w]; } }
    for (int k = 1; k < ILP; k++) { for (int w = 0; w < W; w++) { acc[0][0][w] += acc[0][k][w]; } }
    float sum = 0.0f;
    for (size_t t = vecs * W; t < n; t++) { sum += x[t]; }
    for (int w = 0; w < W; w++) { sum += acc[0][0][w]; }
    return sum;
}

// bitsandbytes' 8-bit blockwise quantization on the CPU (the second level): each block's
// absmax, then each value x / absmax looked up in a table of 65,536 points of [-1, 1], each
// holding the index of the code nearest to it (ties to the lower). code: 256 sorted values.
static void quantize_blockwise8(uint8_t *out, float *absmax, const float *x, size_t n, int blocksize, const float code[256]) {
    uint8_t *lut = (uint8_t *)mallocCheck(65536);
    float mid[255];
    for (int i = 0; i < 255; i++) { mid[i] = 0.5f * (code[i] + code[i + 1]); }
    for (int i = 0, c = 0; i < 65536; i++) {
        float v = -1.0f + (2.0f * (float)i) / 65535.0f;
        while (c < 255 && mid[c] < v) { c++; }
        lut[i] = (uint8_t)c;
    }
    for (size_t b = 0; b * blocksize < n; b++) {
        size_t first = b * blocksize, last = first + blocksize < n ? first + blocksize : n;
        float am = 0.0f;
        for (size_t i = first; i < last; i++) { am = fmaxf(am, fabsf(x[i])); }
        absmax[b] = am;
        float inv = am == 0.0f ? 0.0f : 1.0f / am;
        for (size_t i = first; i < last; i++) {
            float v = fminf(fmaxf(x[i] * inv, -1.0f), 1.0f);
            volatile float t = (v + 1.0f) * 0.5f * 65535.0f; // (volatile: rounded here, then + 0.5, as bitsandbytes)
            out[i] = am == 0.0f ? 0 : lut[(uint16_t)(t + 0.5f)];
        }
    }
    free(lut);
}

// The absmax of block b: stored, or (double quantization) rebuilt from its 8 bits
static float quant4_absmax(const Quant4 *q, size_t b) {
    if (q->qabsmax == NULL) { return q->absmax[b]; }
    volatile float scaled = q->nested_code[q->qabsmax[b]] * q->nested_absmax[b / QUANT_NESTED_BLOCK]; // (rounded before the offset is added)
    return scaled + q->offset;
}

// x (n) into q, as bitsandbytes' quantize_4bit(x, blocksize, quant_type, compress_statistics
// = nested). A value equal to the midpoint of two codes takes the lower; a block of zeros
// stores absmax 0 (a last, partial one 1e-38, and divides where full blocks multiply by the
// reciprocal: bitsandbytes' own arithmetic, kept for the bits).
static void quant4_quantize(Quant4 *q, const float *x, size_t n, int type, int blocksize, int nested) {
    memset(q, 0, sizeof(*q));
    q->type = type; q->blocksize = blocksize; q->n = n; q->num_blocks = (n + blocksize - 1) / blocksize;
    q->packed = (uint8_t *)mallocCheck((n + 1) / 2);
    float *absmax = (float *)mallocCheck(q->num_blocks * sizeof(float));
    const float *code = quant4_code(type);
    float sorted[16], bound[15];
    int order[16];
    for (int i = 0; i < 16; i++) { sorted[i] = code[i]; order[i] = i; }
    for (int i = 1; i < 16; i++) { // sort the codes, keeping where each came from (FP4's are not in order)
        for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
            float t = sorted[j]; sorted[j] = sorted[j - 1]; sorted[j - 1] = t;
            int o = order[j]; order[j] = order[j - 1]; order[j - 1] = o;
        }
    }
    for (int i = 0; i < 15; i++) { bound[i] = (sorted[i] + sorted[i + 1]) / 2.0f; }
    for (size_t b = 0; b < q->num_blocks; b++) {
        size_t first = b * blocksize, last = first + blocksize < n ? first + blocksize : n;
        float am = 0.0f;
        for (size_t i = first; i < last; i++) { am = fmaxf(am, fabsf(x[i])); }
        int partial = last - first < (size_t)blocksize;
        float clamped = fmaxf(am, 1e-38f), inv = 1.0f / clamped;
        absmax[b] = partial ? clamped : am;
        for (size_t i = first; i < last; i++) {
            float s = partial ? x[i] / clamped : x[i] * inv;
            s = fminf(fmaxf(s, -1.0f), 1.0f);
            int k = 0;
            while (k < 15 && bound[k] < s) { k++; }
            uint8_t nib = (uint8_t)order[k];
            if (i % 2 == 0) { q->packed[i / 2] = (uint8_t)(nib << 4); } else { q->packed[i / 2] |= nib; }
        }
    }
    if (n % 2 == 1) { // the pad: the index of 0
        int k = 0;
        while (k < 15 && bound[k] < 0.0f) { k++; }
        q->packed[n / 2] |= (uint8_t)order[k];
    }
    if (!nested) { q->absmax = absmax; return; }
    q->offset = torch_sum_f32(absmax, q->num_blocks) / (float)q->num_blocks;
    for (size_t b = 0; b < q->num_blocks; b++) { absmax[b] -= q->offset; }
    dynamic_map(q->nested_code);
    q->qabsmax = (uint8_t *)mallocCheck(q->num_blocks);
    q->nested_absmax = (float *)mallocCheck(((q->num_blocks + QUANT_NESTED_BLOCK - 1) / QUANT_NESTED_BLOCK) * sizeof(float));
    quantize_blockwise8(q->qabsmax, q->nested_absmax, absmax, q->num_blocks, QUANT_NESTED_BLOCK, q->nested_code);
    free(absmax);
}

// Values [first, first + count) of the tensor, dequantized into out: what dequantize_4bit
// computes, any range of it (a tile of rows of a weight)
static void quant4_dequantize(const Quant4 *q, float *out, size_t first, size_t count) {
    const float *code = quant4_code(q->type);
    size_t i = first, end = first + count;
    while (i < end) {
        size_t b = i / q->blocksize, block_end = (b + 1) * q->blocksize < end ? (b + 1) * q->blocksize : end;
        float am = quant4_absmax(q, b);
        for (; i < block_end; i++) {
            uint8_t byte = q->packed[i / 2];
            out[i - first] = code[i % 2 == 0 ? byte >> 4 : byte & 15] * am;
        }
    }
}

// bytes held (the memory table): codes, and absmax or its 8 bits and their constants
static size_t quant4_bytes(const Quant4 *q) {
    size_t nested = (q->num_blocks + QUANT_NESTED_BLOCK - 1) / QUANT_NESTED_BLOCK;
    return (q->n + 1) / 2 + (q->qabsmax != NULL ? q->num_blocks + nested * sizeof(float) + sizeof(float) + sizeof(q->nested_code)
                                                : q->num_blocks * sizeof(float));
}

static void quant4_free(Quant4 *q) {
    free(q->packed); free(q->absmax); free(q->qabsmax); free(q->nested_absmax);
    memset(q, 0, sizeof(*q));
}
// --- end shared-copy: quant4 ---

// ----------------------------------------------------------------------------
// the layers on the GPU: a kernel and a launcher for each of finetune_lora.c's layer
// functions, in its order. Activations are fp32 (N, width) row-major as there; the base's
// matmuls read their input rounded to floatX (cast_to_floatx) and write fp32.

// the base model's weight W (OUT, in) floatX: y (N, OUT) = x (N, in) W^T (+ bias); dy W back.
// cuBLAS is column-major: row-major y is its y^T (OUT x N) = W^T (OUT x in: the row-major W
// read transposed) x^T (in x N).
static floatX *cast_scratch; // (the widest input rounded to floatX: see acts_allocate)
__global__ void cast_kernel(floatX *out, const float *in, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { out[i] = from_float(in[i]); }
}
static const floatX *cast_to_floatx(const float *x, size_t n) {
#if defined(ENABLE_FP32)
    (void)n;
    return x; // (floatX is float: nothing to round)
#else
    cast_kernel<<<ceil_div(n, BLOCK), BLOCK, 0, main_stream>>>(cast_scratch, x, n);
    cudaCheck(cudaGetLastError());
    return cast_scratch;
#endif
}
__global__ void bias_add_kernel(float *y, const floatX *bias, int N, int OUT) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)N * OUT) { y[i] += to_float(bias[i % OUT]); }
}
static void linear_forward(float *y, const float *x, const floatX *W, const floatX *bias, int N, int in, int OUT) {
    static const float one = 1.0f, zero = 0.0f;
    const floatX *xc = cast_to_floatx(x, (size_t)N * in);
    cublasCheck(cublasGemmEx(cublas_handle, CUBLAS_OP_T, CUBLAS_OP_N, OUT, N, in, &one, W, CUBLAS_FLOATX, in, xc, CUBLAS_FLOATX, in,
                             &zero, y, CUDA_R_32F, OUT, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (bias != NULL) {
        bias_add_kernel<<<ceil_div((size_t)N * OUT, BLOCK), BLOCK, 0, main_stream>>>(y, bias, N, OUT);
        cudaCheck(cudaGetLastError());
    }
}
// dx (N, in) += dy (N, OUT) W: dx^T (in x N) += W^T... in column-major terms W (in x OUT) dy^T (OUT x N)
static void linear_backward(float *dx, const float *dy, const floatX *W, int N, int in, int OUT) {
    static const float one = 1.0f;
    const floatX *dyc = cast_to_floatx(dy, (size_t)N * OUT);
    cublasCheck(cublasGemmEx(cublas_handle, CUBLAS_OP_N, CUBLAS_OP_N, in, N, OUT, &one, W, CUBLAS_FLOATX, in, dyc, CUBLAS_FLOATX, OUT,
                             &one, dx, CUDA_R_32F, in, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// -Q: one band of a 4-bit weight (quant4's layout, on the GPU) dequantized into W (floatX),
// one thread a value: code[index] * its block's absmax, the absmax rebuilt from its 8 bits
// under double quantization. __fmul_rn / __fadd_rn: each product rounded on its own (no
// fused multiply-add), so that the fp32 values are quant4_dequantize's, bit for bit.
typedef struct {
    const uint8_t *packed, *qabsmax;          // (n + 1) / 2 codes; the 8-bit absmax (NULL: no double quantization)
    const float *absmax, *nested_absmax, *nested_code; // absmax (NULL under double quantization), or its constants
    float offset;
    size_t n;
    int blocksize, fp4;
} DeviceQuant;

// --- begin shared-copy: quant4-device-codes ---
// quant4's NF4_CODE and FP4_CODE on the device
__device__ const float NF4_DEVICE[16] = {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
                                         -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
                                         0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
                                         0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};
__device__ const float FP4_DEVICE[16] = {0.0f, 0.0625f / 12, 8.0f / 12, 1.0f, 4.0f / 12, 6.0f / 12, 2.0f / 12, 3.0f / 12,
                                         0.0f, -0.0625f / 12, -8.0f / 12, -1.0f, -4.0f / 12, -6.0f / 12, -2.0f / 12, -3.0f / 12};
// --- end shared-copy: quant4-device-codes ---

__global__ void dequantize4_kernel(floatX *W, DeviceQuant q) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= q.n) { return; }
    size_t block = i / q.blocksize;
    float absmax = q.qabsmax != NULL ? __fadd_rn(__fmul_rn(q.nested_code[q.qabsmax[block]], q.nested_absmax[block / 256]), q.offset)
                                     : q.absmax[block];
    uint8_t byte = q.packed[i / 2];
    int index = i % 2 == 0 ? byte >> 4 : byte & 15;
    W[i] = from_float(__fmul_rn(q.fp4 ? FP4_DEVICE[index] : NF4_DEVICE[index], absmax));
}
static void dequantize4(floatX *W, const DeviceQuant *q) {
    dequantize4_kernel<<<ceil_div(q->n, BLOCK), BLOCK, 0, main_stream>>>(W, *q);
    cudaCheck(cudaGetLastError());
}

// fp32 row-major C (M, N) = alpha op(A) op(B) + beta C, op(A) (M, K), op(B) (K, N), with
// leading dimensions (row strides) lda, ldb, ldc: cublasSgemm on the transposes
static void sgemm(float *C, const float *A, const float *B, int M, int N, int K, int ta, int tb, float alpha, float beta, int lda,
                  int ldb, int ldc) {
    cublasCheck(cublasSgemm(cublas_handle, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, ldb, A,
                            lda, &beta, C, ldc));
}

// A module's update, as finetune_lora.c's: h = s x A^T (N, r), kept; y[:, offset:offset+out] += h B^T
static void lora_forward(float *y, float *h, const float *x, const float *A, const float *B, const LoraModule *m, float scale, int r,
                         int N, int OUT) {
    sgemm(h, x, A, N, r, m->in, 0, 1, scale, 0.0f, m->in, m->in, r);
    sgemm(y + m->offset, h, B, N, m->out, r, 0, 1, 1.0f, 1.0f, r, r, OUT);
}
// ... and back: dB += dy_m^T h, dh = s dy_m B, dA += dh^T x, dx += dh A
static void lora_backward(float *dx, float *dh, const float *dy, const float *h, const float *x, const float *A, const float *B,
                          float *dA, float *dB, const LoraModule *m, float scale, int r, int N, int OUT) {
    sgemm(dB, dy + m->offset, h, m->out, r, N, 1, 0, 1.0f, 1.0f, OUT, r, r);
    sgemm(dh, dy + m->offset, B, N, r, m->out, 0, 0, scale, 0.0f, OUT, r, r);
    sgemm(dA, dh, x, r, m->in, N, 1, 0, 1.0f, 1.0f, r, m->in, m->in);
    sgemm(dx, dh, A, N, m->in, r, 0, 0, 1.0f, 1.0f, r, m->in, m->in);
}

// x (N, C) = wte[token] + wpe[position] (without wpe: wte[token])
__global__ void embed_kernel(float *x, const int *tokens, const floatX *wte, const floatX *wpe, int N, int T, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) { return; }
    int n = (int)(i / C), c = (int)(i % C);
    x[i] = to_float(wte[(size_t)tokens[n] * C + c]) + (wpe != NULL ? to_float(wpe[(size_t)(n % T) * C + c]) : 0.0f);
}

// LayerNorm, or RMSNorm with rms, a warp per row: y = (x - mean) rstd w + b, mean and rstd kept
__global__ void norm_forward_kernel(float *y, float *mean, float *rstd, const float *x, const floatX *w, const floatX *bias, int N,
                                    int C, float eps, int rms) {
    int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (n >= N) { return; }
    const float *xn = x + (size_t)n * C;
    float m = 0.0f, v = 0.0f;
    for (int i = lane; i < C && !rms; i += 32) { m += xn[i]; }
    m = warp_sum(m) / C;
    for (int i = lane; i < C; i += 32) { v += (xn[i] - m) * (xn[i] - m); }
    float s = 1.0f / sqrtf(warp_sum(v) / C + eps);
    for (int i = lane; i < C; i += 32) { y[(size_t)n * C + i] = (xn[i] - m) * s * to_float(w[i]) + (bias != NULL ? to_float(bias[i]) : 0.0f); }
    if (lane == 0) { mean[n] = m; rstd[n] = s; }
}
static void norm_forward(float *y, float *mean, float *rstd, const float *x, const floatX *w, const floatX *bias, int N, int C, float eps,
                         int rms) {
    norm_forward_kernel<<<ceil_div(N, BLOCK / 32), BLOCK, 0, main_stream>>>(y, mean, rstd, x, w, bias, N, C, eps, rms);
    cudaCheck(cudaGetLastError());
}
// dx += the gradient through the norm (w frozen): rstd (g - mean(g) - x^ mean(g x^)), g = dy w
__global__ void norm_backward_kernel(float *dx, const float *dy, const float *x, const float *mean, const float *rstd, const floatX *w,
                                     int N, int C, int rms) {
    int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (n >= N) { return; }
    const float *xn = x + (size_t)n * C, *dyn = dy + (size_t)n * C;
    float g_mean = 0.0f, gx_mean = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float g = dyn[i] * to_float(w[i]), xh = (xn[i] - mean[n]) * rstd[n];
        g_mean += g;
        gx_mean += g * xh;
    }
    g_mean = rms ? 0.0f : warp_sum(g_mean) / C;
    gx_mean = warp_sum(gx_mean) / C;
    for (int i = lane; i < C; i += 32) {
        float g = dyn[i] * to_float(w[i]), xh = (xn[i] - mean[n]) * rstd[n];
        dx[(size_t)n * C + i] += rstd[n] * (g - g_mean - xh * gx_mean);
    }
}
static void norm_backward(float *dx, const float *dy, const float *x, const float *mean, const float *rstd, const floatX *w, int N, int C,
                          int rms) {
    norm_backward_kernel<<<ceil_div(N, BLOCK / 32), BLOCK, 0, main_stream>>>(dx, dy, x, mean, rstd, w, N, C, rms);
    cudaCheck(cudaGetLastError());
}

// RoPE in place on qkv's query and key heads (sign -1: turned back, the backward pass). The
// angles' cosines and sines come from table (T, HS): for each position HS/2 cosines, then
// HS/2 sines, computed on the host as finetune_lora.c computes them (rope_table_fill)
__global__ void rope_kernel(float *qkv, const float *table, int N, int T, int NH, int NKV, int HS, float sign) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, half = HS / 2;
    if (i >= (size_t)N * (NH + NKV) * half) { return; }
    int n = (int)(i / ((NH + NKV) * half)), h = (int)(i / half % (NH + NKV)), j = (int)(i % half);
    float *x = qkv + (size_t)n * (NH + 2 * NKV) * HS + (size_t)h * HS;
    const float *cs = table + (size_t)(n % T) * HS;
    float c = cs[j], s = sign * cs[half + j], x0 = x[j], x1 = x[j + half];
    x[j] = x0 * c - x1 * s;
    x[j + half] = x1 * c + x0 * s;
}
static void rope_apply(float *qkv, const float *table, int N, int T, int NH, int NKV, int HS, float sign) {
    rope_kernel<<<ceil_div((size_t)N * (NH + NKV) * (HS / 2), BLOCK), BLOCK, 0, main_stream>>>(qkv, table, N, T, NH, NKV, HS, sign);
    cudaCheck(cudaGetLastError());
}

// Causal attention as finetune_lora.c's: per sequence and query head h (key/value head
// g = h / group), S = Q K^T / sqrt(HS), P = the softmax of S's rows with the positions after
// t masked (kept in att (B, NH, T, T), zeros past t), O = P V; and back,
//     dP = dO V^T,  dV += P^T dO,  dZ = P * (dP - rowsum(P * dP)) / sqrt(HS),  dQ = dZ K,  dK += dZ^T Q.
// The products are cuBLAS's, batched over the key/value heads: the query heads at the same
// place j in their groups (h = g group + j) are a constant stride apart (group HS columns of
// qkv, group T^2 numbers of att), as are their key/value heads (HS), so one strided-batched
// call per (sequence, j) does NKV heads' product. The softmaxes are a warp per row.

// fp32 row-major C_z (M, N) = alpha op(A_z) op(B_z) + beta C_z for z < batch, X_z = X + z sX
static void sgemm_batched(float *C, const float *A, const float *B, int M, int N, int K, int ta, int tb, float alpha, float beta,
                          int lda, int ldb, int ldc, long long sA, long long sB, long long sC, int batch) {
    cublasCheck(cublasSgemmStridedBatched(cublas_handle, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha,
                                          B, ldb, sB, A, lda, sA, &beta, C, ldc, sC, batch));
}

#define ATT_WARPS 4
// att's rows (B NH T of them, row t of a head's T x T block) from scores to probabilities
__global__ void __launch_bounds__(ATT_WARPS * 32) causal_softmax_kernel(float *att, int rows, int T) {
    int row = blockIdx.x * ATT_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) { return; }
    int t = row % T;
    float *a = att + (size_t)row * T, maxval = -INFINITY, sum = 0.0f;
    for (int s = lane; s <= t; s += 32) { maxval = fmaxf(maxval, a[s]); }
    maxval = warp_max(maxval);
    for (int s = lane; s <= t; s += 32) { sum += expf(a[s] - maxval); }
    sum = warp_sum(sum);
    for (int s = lane; s < T; s += 32) { a[s] = s <= t ? expf(a[s] - maxval) / sum : 0.0f; }
}
// dz's rows from dP to dZ = P * (dP - rowsum(P * dP)) scale, zeros past t
__global__ void __launch_bounds__(ATT_WARPS * 32) causal_softmax_backward_kernel(float *dz, const float *att, int rows, int T, float scale) {
    int row = blockIdx.x * ATT_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) { return; }
    int t = row % T;
    const float *p = att + (size_t)row * T;
    float *z = dz + (size_t)row * T, dot = 0.0f;
    for (int s = lane; s <= t; s += 32) { dot += p[s] * z[s]; }
    dot = warp_sum(dot);
    for (int s = lane; s < T; s += 32) { z[s] = s <= t ? p[s] * (z[s] - dot) * scale : 0.0f; }
}

static void attention_forward(float *out, float *att, const float *qkv, int B, int T, int NH, int NKV, int HS) {
    int Q = NH * HS, KV = NKV * HS, QKV = Q + 2 * KV, group = NH / NKV;
    float scale = 1.0f / sqrtf((float)HS);
    long long TT = (long long)T * T;
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * QKV, *k = q + Q;
        for (int j = 0; j < group; j++) { // S = Q K^T scale for the heads j, group + j, 2 group + j, ...
            sgemm_batched(att + ((size_t)b * NH + j) * TT, q + (size_t)j * HS, k, T, T, HS, 0, 1, scale, 0.0f, QKV, QKV, T,
                          (long long)group * HS, HS, group * TT, NKV);
        }
    }
    causal_softmax_kernel<<<ceil_div((size_t)B * NH * T, ATT_WARPS), ATT_WARPS * 32, 0, main_stream>>>(att, B * NH * T, T);
    cudaCheck(cudaGetLastError());
    for (int b = 0; b < B; b++) {
        const float *v = qkv + (size_t)b * T * QKV + Q + KV;
        for (int j = 0; j < group; j++) { // O = P V
            sgemm_batched(out + (size_t)b * T * Q + (size_t)j * HS, att + ((size_t)b * NH + j) * TT, v, T, HS, T, 0, 0, 1.0f, 0.0f,
                          T, QKV, Q, group * TT, HS, (long long)group * HS, NKV);
        }
    }
}
// dqkv: every number written (dQ by one product, dK and dV by the group's first head's, with
// beta 0, then added to by the others' in order j = 1, 2, ...: no atomics, the same sums
// every run). dz: (B, NH, T, T) scratch.
static void attention_backward(float *dqkv, float *dz, const float *dout, const float *qkv, const float *att, int B, int T, int NH, int NKV,
                               int HS) {
    int Q = NH * HS, KV = NKV * HS, QKV = Q + 2 * KV, group = NH / NKV;
    float scale = 1.0f / sqrtf((float)HS);
    long long TT = (long long)T * T, sq = (long long)group * HS;
    for (int b = 0; b < B; b++) {
        const float *v = qkv + (size_t)b * T * QKV + Q + KV, *dO = dout + (size_t)b * T * Q;
        for (int j = 0; j < group; j++) { // dP = dO V^T
            sgemm_batched(dz + ((size_t)b * NH + j) * TT, dO + (size_t)j * HS, v, T, T, HS, 0, 1, 1.0f, 0.0f, Q, QKV, T, sq, HS,
                          group * TT, NKV);
        }
    }
    causal_softmax_backward_kernel<<<ceil_div((size_t)B * NH * T, ATT_WARPS), ATT_WARPS * 32, 0, main_stream>>>(dz, att, B * NH * T, T,
                                                                                                              scale);
    cudaCheck(cudaGetLastError());
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * QKV, *k = q + Q, *dO = dout + (size_t)b * T * Q;
        float *dq = dqkv + (size_t)b * T * QKV, *dk = dq + Q, *dv = dk + KV;
        for (int j = 0; j < group; j++) {
            const float *p = att + ((size_t)b * NH + j) * TT, *z = dz + ((size_t)b * NH + j) * TT;
            float beta = j > 0 ? 1.0f : 0.0f;
            sgemm_batched(dv, p, dO + (size_t)j * HS, T, HS, T, 1, 0, 1.0f, beta, T, Q, QKV, group * TT, sq, HS, NKV);  // dV += P^T dO
            sgemm_batched(dq + (size_t)j * HS, z, k, T, HS, T, 0, 0, 1.0f, 0.0f, T, QKV, QKV, group * TT, HS, sq, NKV); // dQ = dZ K
            sgemm_batched(dk, z, q + (size_t)j * HS, T, HS, T, 1, 0, 1.0f, beta, T, QKV, QKV, group * TT, sq, HS, NKV); // dK += dZ^T Q
        }
    }
}

// Flash attention (-F 1), finetune_lora.c's flash_attention_forward and _backward on the GPU:
// the same result without the (B, NH, T, T) probabilities, each row's log-sum-exp kept
// instead. The kernels are dev/cuda/flash_attention.cu's variant 3 (warp tiles), where the
// ladder from the materialised kernels above to these is checked and timed, and a shared copy
// of train_gpt2.cu's: there they read and write floatX, here this program's fp32 activations
// (floatA is float). In short: a block of 4 warps takes 16 queries of one head; the keys and
// values pass through shared memory 32 at a time; a warp scores 32 keys against its query at
// once (a lane a key), keeps the running maximum and sum of the online softmax, and each lane
// adds HS/32 of the output. The backward pass: D = rowsum(dO * O) a warp per row; a block per
// 16 keys of a key/value head walks the query tiles after them, over the group's query heads,
// for dk and dv; a block per 16 queries walks the key tiles before them for dq. Every sum in
// one thread, in a fixed order: no atomics. Head sizes up to 128 (the tiles are sized by HS
// rounded up to 32: HSP).
typedef float floatA;

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

template <int HSP>
static void flash_forward_hsp(float *out, float *lse, const float *qkv, Heads s) {
    const float *q = qkv, *k = qkv + s.NH * s.HS, *v = k + s.NKV * s.HS;
    flash_forward_kernel3<HSP><<<dim3(ceil_div(s.T, FLASH_BR), s.B * s.NH), FLASH_WARPS * 32, 0, main_stream>>>(out, lse, q, k, v, s,
                                                                                                       1.0f / sqrtf((float)s.HS));
    cudaCheck(cudaGetLastError());
}
template <int HSP>
static void flash_backward_hsp(float *dqkv, float *D, const float *dout, const float *qkv, const float *out, const float *lse, Heads s) {
    const float *q = qkv, *k = qkv + s.NH * s.HS, *v = k + s.NKV * s.HS;
    float *dq = dqkv, *dk = dqkv + s.NH * s.HS, *dv = dk + s.NKV * s.HS, scale = 1.0f / sqrtf((float)s.HS);
    static int smem_set = 0; // (one per instantiation)
    size_t smem = flash_backward_smem<HSP>();
    if (!smem_set) {
        cudaCheck(cudaFuncSetAttribute(flash_dkdv_kernel3<HSP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        cudaCheck(cudaFuncSetAttribute(flash_dq_kernel3<HSP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        smem_set = 1;
    }
    rowdot_kernel<<<ceil_div((size_t)s.B * s.NH * s.T, 8), 256, 0, main_stream>>>(D, dout, out, s);
    flash_dkdv_kernel3<HSP><<<dim3(ceil_div(s.T, FLASH_BR), s.B * s.NKV), FLASH_WARPS * 32, smem, main_stream>>>(dk, dv, q, k, v, dout, lse,
                                                                                                       D, s, scale);
    flash_dq_kernel3<HSP><<<dim3(ceil_div(s.T, FLASH_BR), s.B * s.NH), FLASH_WARPS * 32, smem, main_stream>>>(dq, q, k, v, dout, lse, D, s,
                                                                                                    scale);
    cudaCheck(cudaGetLastError());
}

// out (N, Q) and lse (B, NH, T) from qkv (N, Q + 2KV)
static void flash_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV, int HS) {
    int QKV = (NH + 2 * NKV) * HS;
    Heads s = {B, T, NH, NKV, HS, QKV, QKV, NH * HS};
    switch ((HS + 31) / 32) {
    case 1: flash_forward_hsp<32>(out, lse, qkv, s); break;
    case 2: flash_forward_hsp<64>(out, lse, qkv, s); break;
    case 3: flash_forward_hsp<96>(out, lse, qkv, s); break;
    default: flash_forward_hsp<128>(out, lse, qkv, s); break; // (HS <= 128: acts_allocate checks it with -F 1)
    }
}
// dqkv (N, Q + 2KV), every number written; D: (B, NH, T) scratch
static void flash_attention_backward(float *dqkv, float *D, const float *dout, const float *qkv, const float *out, const float *lse, int B,
                                     int T, int NH, int NKV, int HS) {
    int QKV = (NH + 2 * NKV) * HS;
    Heads s = {B, T, NH, NKV, HS, QKV, QKV, NH * HS};
    switch ((HS + 31) / 32) {
    case 1: flash_backward_hsp<32>(dqkv, D, dout, qkv, out, lse, s); break;
    case 2: flash_backward_hsp<64>(dqkv, D, dout, qkv, out, lse, s); break;
    case 3: flash_backward_hsp<96>(dqkv, D, dout, qkv, out, lse, s); break;
    default: flash_backward_hsp<128>(dqkv, D, dout, qkv, out, lse, s); break;
    }
}

// GPT-2's GELU (tanh form) or SwiGLU (silu(gate) up), and back
#define GELU_K 0.7978845608028654f // sqrt(2 / pi)
__global__ void activation_forward_kernel(float *out, const float *inp, int N, int H, int llama) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * H) { return; }
    size_t n = i / H, j = i % H;
    if (llama) {
        float a = inp[n * 2 * H + j], u = inp[n * 2 * H + H + j];
        out[i] = a / (1.0f + expf(-a)) * u;
    } else {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
    }
}
__global__ void activation_backward_kernel(float *dinp, const float *dout, const float *inp, int N, int H, int llama) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * H) { return; }
    size_t n = i / H, j = i % H;
    float d = dout[i];
    if (llama) {
        float a = inp[n * 2 * H + j], u = inp[n * 2 * H + H + j], sig = 1.0f / (1.0f + expf(-a));
        dinp[n * 2 * H + j] = d * u * sig * (1.0f + a * (1.0f - sig));
        dinp[n * 2 * H + H + j] = d * a * sig;
    } else {
        float x = inp[i], u = GELU_K * (x + 0.044715f * x * x * x), th = tanhf(u), du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = d * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du);
    }
}
static void activation_forward(float *out, const float *inp, int N, int H, int llama) {
    activation_forward_kernel<<<ceil_div((size_t)N * H, BLOCK), BLOCK, 0, main_stream>>>(out, inp, N, H, llama);
    cudaCheck(cudaGetLastError());
}
static void activation_backward(float *dinp, const float *dout, const float *inp, int N, int H, int llama) {
    activation_backward_kernel<<<ceil_div((size_t)N * H, BLOCK), BLOCK, 0, main_stream>>>(dinp, dout, inp, N, H, llama);
    cudaCheck(cudaGetLastError());
}

// y += x (the residual adds)
__global__ void add_kernel(float *y, const float *x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { y[i] += x[i]; }
}
static void add_inplace(float *y, const float *x, size_t n) {
    add_kernel<<<ceil_div(n, BLOCK), BLOCK, 0, main_stream>>>(y, x, n);
    cudaCheck(cudaGetLastError());
}

// LoRA dropout (finetune_lora.c's dropout_apply, the same draws): out = x masked (or += with accumulate)
__global__ void dropout_kernel(float *out, const float *x, uint64_t key, float p, size_t n, int accumulate) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) { return; }
    float v = device_uniform_at(key, i) < p ? 0.0f : x[i] * (1.0f / (1.0f - p));
    out[i] = accumulate ? out[i] + v : v;
}
static void dropout_apply(float *out, const float *x, const Lora *lora, int k, int N, int in, int accumulate) {
    size_t n = (size_t)N * in;
    dropout_kernel<<<ceil_div(n, BLOCK), BLOCK, 0, main_stream>>>(out, x, rng_subkey(lora->dropout_key, (uint64_t)k, 0), lora->dropout, n,
                                                                   accumulate);
    cudaCheck(cudaGetLastError());
}
static int dropping(const Lora *lora) { return lora->training && lora->dropout > 0.0f; }

// The cross-entropy, a block per row: the softmax over the V real tokens in place (the
// probabilities, for the backward pass) and the row's loss, or 0 without a label
__global__ void cross_entropy_kernel(float *logits, float *loss, const int *labels, int V, int Vp) {
    int n = blockIdx.x;
    float *row = logits + (size_t)n * Vp;
    if (labels[n] == -100) {
        if (threadIdx.x == 0) { loss[n] = 0.0f; }
        return;
    }
    float maxval = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x) { maxval = fmaxf(maxval, row[v]); }
    maxval = block_max(maxval);
    float sum = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) { sum += expf(row[v] - maxval); }
    sum = block_sum(sum);
    float target = row[labels[n]]; // (read by all before anyone writes: block_sum synchronised)
    __syncthreads();
    for (int v = threadIdx.x; v < V; v += blockDim.x) { row[v] = expf(row[v] - maxval) / sum; }
    if (threadIdx.x == 0) { loss[n] = logf(sum) + maxval - target; }
}
// dlogits = p - onehot(label) on labelled rows (0 on the padding columns); a row without a
// label keeps its logits (zero_unlabelled_kernel clears its gradient into nf after)
__global__ void cross_entropy_backward_kernel(float *logits, const int *labels, int N, int V, int Vp) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * Vp) { return; }
    int n = (int)(i / Vp), v = (int)(i % Vp);
    if (labels[n] == -100) { return; }
    logits[i] = v >= V ? 0.0f : logits[i] - (v == labels[n] ? 1.0f : 0.0f);
}
__global__ void zero_unlabelled_kernel(float *x, const int *labels, int N, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)N * C && labels[i / C] == -100) { x[i] = 0.0f; }
}
__global__ void scaled_copy_kernel(float *y, const float *x, float c, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { y[i] = c * x[i]; }
}

// ----------------------------------------------------------------------------
// the model files: llm.c's GPT-2 checkpoints and our Llama-family files (as infer.c reads them)

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
// --- begin shared-copy: gpt2-parameters ---
typedef struct {
    float *wte;      // (Vp, C) token embeddings, tied with the output layer
    float *wpe;      // (maxT, C) position embeddings
    float *ln1w;     // (L, C)
    float *ln1b;     // (L, C)
    float *qkvw;     // (L, 3*C, C)
    float *qkvb;     // (L, 3*C)
    float *attprojw; // (L, C, C)
    float *attprojb; // (L, C)
    float *ln2w;     // (L, C)
    float *ln2b;     // (L, C)
    float *fcw;      // (L, 4*C, C)
    float *fcb;      // (L, 4*C)
    float *fcprojw;  // (L, C, 4*C)
    float *fcprojb;  // (L, C)
    float *lnfw;     // (C)
    float *lnfb;     // (C)
} ParameterTensors;
// --- end shared-copy: gpt2-parameters ---
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
// --- begin shared-copy: gpt2-weights ---
// One allocation for a whole table; the struct's pointers are slices of it.
float *malloc_and_point(float **slices, const size_t *sizes, int n) {
    size_t total = 0;
    for (int i = 0; i < n; i++) { total += sizes[i]; }
    float *memory = (float *)mallocCheck(total * sizeof(float));
    float *p = memory;
    for (int i = 0; i < n; i++) {
        slices[i] = p;
        p += sizes[i];
    }
    return memory;
}

// The weights as loaded, fp32 in host memory whatever the file held (infer.cu uploads
// them to the GPU in its precision).
typedef struct {
    GPT2Config config;
    ParameterTensors params;
    size_t param_sizes[NUM_PARAMETER_TENSORS];
    float *params_memory;
    size_t num_parameters;
    int from_bf16;     // they came from a bf16 file (./convert -d auto keeps them bf16: exact)
    char source[4096]; // where they came from, for messages
} GPT2Weights;

static void gpt2_weights_allocate(GPT2Weights *w) {
    fill_in_parameter_sizes(w->param_sizes, w->config);
    w->num_parameters = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { w->num_parameters += w->param_sizes[i]; }
    w->params_memory = malloc_and_point((float **)&w->params, w->param_sizes, NUM_PARAMETER_TENSORS);
}

void gpt2_weights_free(GPT2Weights *w) {
    free(w->params_memory);
    w->params_memory = NULL;
}
// --- end shared-copy: gpt2-weights ---
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
// --- begin shared-copy: checkpoint-read ---
// Reads an llm.c / train_gpt2 checkpoint: version 3 (fp32) or 5 (bf16, widened to fp32).
void gpt2_build_from_checkpoint(GPT2Weights *w, const char *path) {
    FILE *fp = fopenCheck(path, "rb");
    int header[256];
    if (fread(header, sizeof(int), 256, fp) != 256) {
        die_file(path, "pass a model file (model_<step>.bin from train_gpt2; ./convert makes one from a Hugging Face folder)",
                 "file too short for a model header (256 x int32)");
    }
    if (header[0] != MODEL_MAGIC) {
        die_file(path, "pass a model file (model_<step>.bin, llm.c's gpt2_124M.bin; ./convert makes one from a Hugging Face"
                 " folder) or d<N> for a random model", "bad magic number: expected %d (llm.c GPT-2 model), found %d",
                 MODEL_MAGIC, header[0]);
    }
    if (header[1] != MODEL_VERSION_FP32 && header[1] != MODEL_VERSION_BF16) {
        die_file(path, NULL, "model file version %d, expected %d (fp32) or %d (bf16)", header[1],
                 MODEL_VERSION_FP32, MODEL_VERSION_BF16);
    }
    w->config.max_seq_len = header[2];
    w->config.vocab_size = header[3];
    w->config.num_layers = header[4];
    w->config.num_heads = header[5];
    w->config.channels = header[6];
    w->config.padded_vocab_size = header[7];
    gpt2_validate_config(w->config, path);
    size_t bytes_per = header[1] == MODEL_VERSION_BF16 ? 2 : 4;
    size_t expected = 256 * sizeof(int) + gpt2_count_parameters(w->config) * bytes_per;
    long actual = file_size(fp, path);
    if ((size_t)actual != expected) {
        die_file(path, NULL, "file has %ld bytes, its header (version %d, L=%d C=%d Vp=%d maxT=%d) needs %zu:"
                 " truncated or corrupt", actual, header[1], header[4], header[6], header[7], header[2], expected);
    }
    gpt2_weights_allocate(w);
    w->from_bf16 = header[1] == MODEL_VERSION_BF16;
    if (!w->from_bf16) {
        freadCheck(w->params_memory, sizeof(float), w->num_parameters, fp);
    } else { // in chunks, widening as we go
        uint16_t buf[1 << 16];
        for (size_t done = 0; done < w->num_parameters;) {
            size_t n = w->num_parameters - done < (1 << 16) ? w->num_parameters - done : (1 << 16);
            freadCheck(buf, sizeof(uint16_t), n, fp);
            for (size_t i = 0; i < n; i++) { w->params_memory[done + i] = bf16_to_float(buf[i]); }
            done += n;
        }
    }
    fcloseCheck(fp);
}
// --- end shared-copy: checkpoint-read ---
// --- begin shared-copy: llama-config ---
// Llama 2/3, SmolLM2, Qwen2 and their kin are GPT-2 with five changes: RMSNorm (no mean, no
// bias) for LayerNorm; RoPE (positions rotate each query and key) for learned positions;
// SwiGLU (down(silu(gate x) * up x)) for the GELU MLP; grouped-query attention (NKV
// key/value heads, each shared by NH/NKV query heads); and no biases, except Qwen2's on q,
// k and v. The output head may be the embedding (tied) or a matrix of its own.
typedef struct {
    int max_seq_len;  // maxT
    int vocab_size;   // V (no padding: every Llama-family vocabulary here is a multiple of 128)
    int num_layers;   // L
    int num_heads;    // NH query heads
    int num_kv_heads; // NKV key/value heads: NH is a multiple of NKV
    int channels;     // C
    int head_size;    // HS (usually C / NH; a config may set it apart: then NH x HS is not C)
    int hidden;       // H, SwiGLU's width
    int tied;         // the output head is wte
    int qkv_bias;     // q, k and v have biases (Qwen2)
    int family;       // LLAMA_FAMILY_*: which Hugging Face class an export names
    float rope_theta; // RoPE's base
    float norm_eps;   // RMSNorm's epsilon
    // Llama 3's RoPE scaling (transformers' rope_type "llama3"); factor 0: none
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max;
    int bos_token_id, eos_token_id; // -1: none
} LlamaConfig;
enum { LLAMA_FAMILY_LLAMA = 1, LLAMA_FAMILY_QWEN2 = 2 };

// Our Llama-family model file: a header of 256 int32, then the tensors below in order,
// float32 (version 3) or bf16 (version 5). The first 8 header fields are llm.c's Llama 3
// file's: magic 20240803, version, maxT, V, L, NH, NKV, C. llm.c stores its float
// settings as truncated ints after those; we store them as float32 bits, and add what
// the other families need:
//   [8] H  [9] HS  [10] flags: 1 tied head, 2 q/k/v biases  [11] rope_theta (float bits)
//   [12] norm_eps (float bits)  [13] Llama 3 RoPE factor (float bits, 0: none)
//   [14] low_freq_factor  [15] high_freq_factor (float bits)  [16] original max positions
//   [17] family (1 Llama, 2 Qwen2)  [18] bos token id  [19] eos token id (-1: none)
// Tensors are stored tensor by tensor, all layers of one together (as llm.c does); q, k and
// v are one matrix per layer (their rows in that order), and so are gate and up. RoPE pairs
// channel i with channel i + HS/2 of a head (Hugging Face's rotate_half layout; GGUF files
// pair neighbours, so reading one reorders q's and k's rows).
#define LLAMA_MAGIC 20240803
#define NUM_LLAMA_TENSORS 10
enum { LL_WTE, LL_LN1W, LL_QKVW, LL_QKVB, LL_ATTPROJW, LL_LN2W, LL_FCW, LL_FCPROJW, LL_LNFW, LL_LM_HEAD };

// element counts: wte (V, C); ln1w (L, C); qkvw (L, (NH + 2 NKV) HS, C); qkvb (L, (NH + 2 NKV) HS)
// or none; attprojw (L, C, NH HS); ln2w (L, C); fcw (L, 2H, C): gate rows, then up rows;
// fcprojw (L, C, H); lnfw (C); lm_head (V, C) or none when tied
static void llama_tensor_sizes(size_t *sizes, LlamaConfig c) {
    size_t L = c.num_layers, C = c.channels, V = c.vocab_size, QKV = (size_t)(c.num_heads + 2 * c.num_kv_heads) * c.head_size;
    size_t Q = (size_t)c.num_heads * c.head_size, H = c.hidden;
    size_t s[NUM_LLAMA_TENSORS] = {V * C, L * C, L * QKV * C, c.qkv_bias ? L * QKV : 0, L * C * Q, L * C, L * 2 * H * C,
                                   L * C * H, C, c.tied ? 0 : V * C};
    memcpy(sizes, s, sizeof(s));
}

// The shapes a header or a config may give, checked before they size anything: caps far
// above any model here (Llama 3.1 405B: L 126, C 16384, H 53248, V 128256), so that no
// product overflows and a corrupt header is reported as one.
static int llama_check_config(LlamaConfig c, char *err, size_t err_size) {
#define LLAMA_FAIL(...) return (snprintf(err, err_size, __VA_ARGS__), -1)
    if (c.max_seq_len < 1 || c.max_seq_len > (1 << 24) || c.vocab_size < 1 || c.vocab_size > (1 << 22) || c.num_layers < 1 ||
        c.num_layers > 1024 || c.num_heads < 1 || c.num_heads > 1024 || c.num_kv_heads < 1 || c.channels < 1 ||
        c.channels > (1 << 17) || c.head_size < 2 || c.head_size > 1024 || c.hidden < 1 || c.hidden > (1 << 20)) {
        LLAMA_FAIL("a size out of range: maxT=%d V=%d L=%d NH=%d NKV=%d C=%d HS=%d H=%d", c.max_seq_len,
                       c.vocab_size, c.num_layers, c.num_heads, c.num_kv_heads, c.channels, c.head_size, c.hidden);
    }
    if (c.num_heads % c.num_kv_heads != 0) { LLAMA_FAIL("%d query heads cannot share %d key/value heads evenly", c.num_heads, c.num_kv_heads); }
    if (c.head_size % 2 != 0) { LLAMA_FAIL("head size %d is odd: RoPE rotates pairs of channels", c.head_size); }
    if (!(c.rope_theta > 0.0f) || !(c.norm_eps > 0.0f) || c.norm_eps > 1.0f || !(c.rope_factor >= 0.0f)) {
        LLAMA_FAIL("rope_theta %g, norm_eps %g or the RoPE scaling factor %g is not a sensible number",
                       c.rope_theta, c.norm_eps, c.rope_factor);
    }
    if (c.rope_factor > 0.0f && (c.rope_original_max < 1 || !(c.rope_low_freq_factor > 0.0f) || !(c.rope_high_freq_factor > c.rope_low_freq_factor))) {
        LLAMA_FAIL("Llama 3 RoPE scaling needs original_max_position_embeddings >= 1 and high_freq_factor > low_freq_factor > 0");
    }
    if (c.family != LLAMA_FAMILY_LLAMA && c.family != LLAMA_FAMILY_QWEN2) { LLAMA_FAIL("unknown family %d", c.family); }
    if (c.family == LLAMA_FAMILY_LLAMA && c.qkv_bias) { LLAMA_FAIL("q/k/v biases without o's: only Qwen2 has those"); }
    if (c.bos_token_id < -1 || c.bos_token_id >= c.vocab_size || c.eos_token_id < -1 || c.eos_token_id >= c.vocab_size) {
        LLAMA_FAIL("start or end token (%d, %d) outside the vocabulary of %d", c.bos_token_id, c.eos_token_id, c.vocab_size);
    }
    return 0;
#undef LLAMA_FAIL
}

typedef struct {
    LlamaConfig config;
    size_t sizes[NUM_LLAMA_TENSORS];
    float *tensors[NUM_LLAMA_TENSORS]; // into params; NULL for a tensor of size 0
    float *params;
    size_t num_parameters;
    int from_bf16; // every weight read was bf16 (-d auto then writes bf16)
    // a 4-bit model (file version 7, or a Hugging Face *-bnb-4bit folder): the four linear
    // layers of every block as bitsandbytes stores them, (L, 4, 3) bands (llama_bands: one
    // per Hugging Face module); their tensors above then hold no floats (size 0)
    int quant, quant_blocksize, quant_nested; // QUANT_NF4 or QUANT_FP4 (QUANT_NONE: not 4-bit), blocksize, 0 or 1
    Quant4 *qw;
} LlamaWeights;

// (with w->quant set, the four linear layers go to qw, empty bands for their reader to fill)
static void llama_allocate(LlamaWeights *w) {
    llama_tensor_sizes(w->sizes, w->config);
    if (w->quant != QUANT_NONE) {
        w->sizes[LL_QKVW] = w->sizes[LL_ATTPROJW] = w->sizes[LL_FCW] = w->sizes[LL_FCPROJW] = 0;
        w->qw = (Quant4 *)calloc((size_t)w->config.num_layers * 4 * 3, sizeof(Quant4));
        if (w->qw == NULL) { fprintf(stderr, "Error: out of memory for the 4-bit weights\n"); exit(EXIT_FAILURE); }
    }
    w->num_parameters = 0;
    for (int k = 0; k < NUM_LLAMA_TENSORS; k++) { w->num_parameters += w->sizes[k]; }
    w->params = (float *)mallocCheck(w->num_parameters * sizeof(float));
    float *p = w->params;
    for (int k = 0; k < NUM_LLAMA_TENSORS; k++) {
        w->tensors[k] = w->sizes[k] > 0 ? p : NULL;
        p += w->sizes[k];
    }
}

static void llama_free(LlamaWeights *w) {
    for (size_t k = 0; w->qw != NULL && k < (size_t)w->config.num_layers * 4 * 3; k++) { quant4_free(&w->qw[k]); }
    free(w->qw);
    free(w->params);
    memset(w, 0, sizeof(*w));
}
// --- end shared-copy: llama-config ---

// --- begin shared-copy: llama-4bit ---
// Our 4-bit Llama-family model file (version 7: ./convert makes one of a Hugging Face
// *-bnb-4bit folder): the header of versions 3 and 5, and
//   [20] the 4-bit type (1 NF4, 2 FP4)  [21] its blocksize  [22] 1: double quantization
//   [23] 1: the other tensors in bf16, 0: in fp32
// then the tensors of the table above without qkvw, attprojw, fcw and fcprojw, in its order;
// then those four, layer by layer, each Hugging Face module a band of its own as
// bitsandbytes stores it (q, k, v; o; gate, up; down: llama_bands), each band: its codes
// ((n + 1) / 2 bytes, two a byte, the first in the high nibble), then its absmax (fp32 per
// block) or, under double quantization, its 8-bit absmax (a byte per block), the fp32 absmax
// of each 256 of those, and their offset (fp32). (quant4: the format, finetune_lora.c's.)
#define MODEL_VERSION_4BIT 7
// the rows of each band of the four linear layers (0: none), and their inputs
static void llama_bands(LlamaConfig c, int rows[4][3], int in[4]) {
    int C = c.channels, Q = c.num_heads * c.head_size, KV = c.num_kv_heads * c.head_size, H = c.hidden;
    int r[4][3] = {{Q, KV, KV}, {C, 0, 0}, {H, H, 0}, {C, 0, 0}}, i[4] = {C, Q, C, H};
    memcpy(rows, r, sizeof(r));
    memcpy(in, i, sizeof(i));
}

// a band of n values: its bytes in the file, and its parts (up to 4 buffers) in their order
static size_t quant4_file_bytes(size_t n, int blocksize, int nested) {
    size_t blocks = (n + blocksize - 1) / blocksize;
    return (n + 1) / 2 + (nested ? blocks + (blocks + QUANT_NESTED_BLOCK - 1) / QUANT_NESTED_BLOCK * sizeof(float) + sizeof(float)
                                 : blocks * sizeof(float));
}
static int quant4_file_parts(const Quant4 *q, const void **bufs, size_t *sizes) {
    bufs[0] = q->packed;
    sizes[0] = (q->n + 1) / 2;
    if (q->qabsmax == NULL) { bufs[1] = q->absmax; sizes[1] = q->num_blocks * sizeof(float); return 2; }
    bufs[1] = q->qabsmax;
    sizes[1] = q->num_blocks;
    bufs[2] = q->nested_absmax;
    sizes[2] = (q->num_blocks + QUANT_NESTED_BLOCK - 1) / QUANT_NESTED_BLOCK * sizeof(float);
    bufs[3] = &q->offset;
    sizes[3] = sizeof(float);
    return 4;
}

// the bytes of all the bands of a model
static size_t llama_4bit_bytes(LlamaConfig c, int blocksize, int nested) {
    int rows[4][3], in[4];
    llama_bands(c, rows, in);
    size_t total = 0;
    for (int s = 0; s < 4; s++) {
        for (int k = 0; k < 3; k++) { total += rows[s][k] > 0 ? quant4_file_bytes((size_t)rows[s][k] * in[s], blocksize, nested) : 0; }
    }
    return total * c.num_layers;
}
// --- end shared-copy: llama-4bit ---
// --- begin shared-copy: llama-model-read ---
static float bits_float(int i) {
    float f;
    memcpy(&f, &i, 4);
    return f;
}

// Reads our Llama-family model file, or exits with a message naming it.
void llama_load(LlamaWeights *w, const char *path) {
    memset(w, 0, sizeof(*w));
    FILE *fp = fopenCheck(path, "rb");
    int h[256];
    if (fread(h, sizeof(int), 256, fp) != 256) { die_file(path, NULL, "file too short for a model header (256 x int32)"); }
    long size = file_size(fp, path); // (and back to the end of the header)
    if (h[0] != LLAMA_MAGIC) { die_file(path, NULL, "bad magic number: expected %d (a Llama-family model), found %d", LLAMA_MAGIC, h[0]); }
    if (h[1] != MODEL_VERSION_FP32 && h[1] != MODEL_VERSION_BF16 && h[1] != MODEL_VERSION_4BIT) {
        die_file(path, NULL, "version %d: we read 3 (fp32), 5 (bf16) and 7 (4-bit linear layers)", h[1]);
    }
    int four = h[1] == MODEL_VERSION_4BIT;
    if (four && ((h[20] != QUANT_NF4 && h[20] != QUANT_FP4) || !quant4_blocksize_ok(h[21]) || (h[22] != 0 && h[22] != 1) ||
                 (h[23] != 0 && h[23] != 1))) {
        die_file(path, NULL, "its 4-bit header fields (type %d, blocksize %d, double quantization %d, bf16 %d) are not a model's: "
                 "truncated or corrupt", h[20], h[21], h[22], h[23]);
    }
    LlamaConfig c = {h[2], h[3], h[4], h[5], h[6], h[7], h[9], h[8], h[10] & 1, (h[10] >> 1) & 1, h[17],
                     bits_float(h[11]), bits_float(h[12]), bits_float(h[13]), bits_float(h[14]), bits_float(h[15]), h[16], h[18], h[19]};
    char err[256];
    if (h[17] == 0 && h[8] >= 0 && h[8] < 16) { // llm.c's own Llama 3 files: ffn_dim_multiplier, multiple_of, ... from field 8
        die_file(path, NULL, "an llm.c Llama 3 model file (its header stores other fields from field 8 on); we read our own "
                 "(./convert makes one from a Hugging Face folder or a GGUF file)");
    }
    if ((h[10] & ~3) != 0 || llama_check_config(c, err, sizeof(err)) != 0) {
        die_file(path, NULL, "its header is not a model's (%s): truncated or corrupt", (h[10] & ~3) != 0 ? "unknown flags" : err);
    }
    size_t element = h[1] == MODEL_VERSION_BF16 || (four && h[23]) ? 2 : 4, sizes[NUM_LLAMA_TENSORS], count = 0;
    llama_tensor_sizes(sizes, c);
    for (int k = 0; k < NUM_LLAMA_TENSORS; k++) {
        count += four && (k == LL_QKVW || k == LL_ATTPROJW || k == LL_FCW || k == LL_FCPROJW) ? 0 : sizes[k];
    }
    size_t bands = four ? llama_4bit_bytes(c, h[21], h[22]) : 0;
    if ((unsigned long)size != sizeof(h) + count * element + bands) { // (before allocating: a corrupt header may ask for terabytes)
        die_file(path, NULL, "file has %ld bytes, its header (version %d, L=%d C=%d V=%d H=%d) needs %zu: truncated or corrupt",
                 size, h[1], c.num_layers, c.channels, c.vocab_size, c.hidden, sizeof(h) + count * element + bands);
    }
    w->config = c;
    if (four) { w->quant = h[20]; w->quant_blocksize = h[21]; w->quant_nested = h[22]; }
    llama_allocate(w);
    if (element == 4) {
        freadCheck(w->params, sizeof(float), w->num_parameters, fp);
    } else { // bf16 -> fp32, a chunk at a time
        uint16_t chunk[4096];
        for (size_t at = 0; at < w->num_parameters; at += 4096) {
            size_t n = w->num_parameters - at < 4096 ? w->num_parameters - at : 4096;
            freadCheck(chunk, sizeof(uint16_t), n, fp);
            for (size_t i = 0; i < n; i++) { w->params[at + i] = bf16_to_float(chunk[i]); }
        }
        w->from_bf16 = 1;
    }
    int rows[4][3], in[4];
    llama_bands(c, rows, in);
    for (int l = 0; four && l < c.num_layers; l++) { // the bands (their sizes checked with the file's above)
        for (int s = 0; s < 4; s++) {
            for (int k = 0; k < 3 && rows[s][k] > 0; k++) {
                Quant4 *q = &w->qw[((size_t)l * 4 + s) * 3 + k];
                q->type = w->quant;
                q->blocksize = w->quant_blocksize;
                q->n = (size_t)rows[s][k] * in[s];
                q->num_blocks = (q->n + q->blocksize - 1) / q->blocksize;
                q->packed = (uint8_t *)mallocCheck((q->n + 1) / 2);
                if (w->quant_nested) {
                    q->qabsmax = (uint8_t *)mallocCheck(q->num_blocks);
                    q->nested_absmax = (float *)mallocCheck((q->num_blocks + QUANT_NESTED_BLOCK - 1) / QUANT_NESTED_BLOCK * sizeof(float));
                    dynamic_map(q->nested_code);
                } else {
                    q->absmax = (float *)mallocCheck(q->num_blocks * sizeof(float));
                }
                const void *parts[4];
                size_t bytes[4];
                int n = quant4_file_parts(q, parts, bytes);
                for (int p = 0; p < n; p++) { freadCheck((void *)parts[p], 1, bytes[p], fp); }
            }
        }
    }
    fcloseCheck(fp);
}
// --- end shared-copy: llama-model-read ---
// --- begin shared-copy: model-file-write ---
// Our model files (GPT-2's and the Llama family's): the 256-int header, then n weights as
// float32, or bf16 (rounded to nearest even), written atomically.
static void write_model_file(const char *path, const int *header, const float *params, size_t n, int bf16) {
    uint16_t *narrow = NULL;
    const void *bufs[2] = {header, params};
    size_t sizes[2] = {256 * sizeof(int), n * sizeof(float)};
    if (bf16) {
        narrow = (uint16_t *)mallocCheck(n * sizeof(uint16_t));
        for (size_t i = 0; i < n; i++) { narrow[i] = float_to_bf16(params[i]); }
        bufs[1] = narrow;
        sizes[1] = n * sizeof(uint16_t);
    }
    write_file_atomic(path, bufs, sizes, 2);
    free(narrow);
}

// Writes an llm.c checkpoint: version 3 (fp32) or, with bf16, version 5; with notes (NULL:
// none) where the model came from and how to sample it (lib/model_notes.h).
void gpt2_save_checkpoint(const GPT2Weights *w, const char *path, int bf16, const ModelNotes *notes) {
    int header[256] = {0};
    header[0] = MODEL_MAGIC;
    header[1] = bf16 ? MODEL_VERSION_BF16 : MODEL_VERSION_FP32;
    header[2] = w->config.max_seq_len;
    header[3] = w->config.vocab_size;
    header[4] = w->config.num_layers;
    header[5] = w->config.num_heads;
    header[6] = w->config.channels;
    header[7] = w->config.padded_vocab_size;
    model_notes_put(header, notes);
    write_model_file(path, header, w->params_memory, w->num_parameters, bf16);
}
// --- end shared-copy: model-file-write ---
// --- begin shared-copy: llama-model-write ---
static int float_bits(float f) {
    int i;
    memcpy(&i, &f, 4);
    return i;
}

void llama_save(const LlamaWeights *w, const char *path, int bf16, const ModelNotes *notes) {
    LlamaConfig c = w->config;
    int header[256] = {0};
    int fields[20] = {LLAMA_MAGIC, bf16 ? MODEL_VERSION_BF16 : MODEL_VERSION_FP32, c.max_seq_len, c.vocab_size, c.num_layers,
                      c.num_heads, c.num_kv_heads, c.channels, c.hidden, c.head_size, (c.tied ? 1 : 0) | (c.qkv_bias ? 2 : 0),
                      float_bits(c.rope_theta), float_bits(c.norm_eps), float_bits(c.rope_factor), float_bits(c.rope_low_freq_factor),
                      float_bits(c.rope_high_freq_factor), c.rope_original_max, c.family, c.bos_token_id, c.eos_token_id};
    memcpy(header, fields, sizeof(fields));
    model_notes_put(header, notes);
    if (w->qw == NULL) {
        write_model_file(path, header, w->params, w->num_parameters, bf16);
        return;
    }
    // 4-bit (version 7): the other tensors, then every band's parts, in one atomic write
    header[1] = MODEL_VERSION_4BIT;
    header[20] = w->quant;
    header[21] = w->quant_blocksize;
    header[22] = w->quant_nested;
    header[23] = bf16;
    int rows[4][3], in[4], n = 2;
    llama_bands(c, rows, in);
    size_t max_parts = 2 + (size_t)c.num_layers * 4 * 3 * 4, *sizes = (size_t *)mallocCheck(max_parts * sizeof(size_t));
    const void **bufs = (const void **)mallocCheck(max_parts * sizeof(void *));
    uint16_t *narrow = NULL;
    bufs[0] = header;
    sizes[0] = sizeof(header);
    bufs[1] = w->params;
    sizes[1] = w->num_parameters * sizeof(float);
    if (bf16) {
        narrow = (uint16_t *)mallocCheck((w->num_parameters > 0 ? w->num_parameters : 1) * sizeof(uint16_t));
        for (size_t i = 0; i < w->num_parameters; i++) { narrow[i] = float_to_bf16(w->params[i]); }
        bufs[1] = narrow;
        sizes[1] = w->num_parameters * sizeof(uint16_t);
    }
    for (int l = 0; l < c.num_layers; l++) {
        for (int s = 0; s < 4; s++) {
            for (int k = 0; k < 3 && rows[s][k] > 0; k++) { n += quant4_file_parts(&w->qw[((size_t)l * 4 + s) * 3 + k], bufs + n, sizes + n); }
        }
    }
    write_file_atomic(path, bufs, sizes, n);
    free(narrow);
    free(bufs);
    free(sizes);
}
// --- end shared-copy: llama-model-write ---
// --- begin shared-copy: rope-frequencies ---
// RoPE's HS/2 frequencies, inv_freq[i] = theta^(-2i/HS), in float as transformers computes
// them; with Llama 3's scaling, long wavelengths (beyond original_max / low_freq_factor
// positions) are slowed down by factor, short ones (within original_max /
// high_freq_factor) kept, those between blended (transformers' rope_type "llama3").
static float *rope_frequencies(const LlamaConfig *c) {
    int half = c->head_size / 2;
    float *f = (float *)mallocCheck((size_t)half * sizeof(float));
    for (int i = 0; i < half; i++) {
        f[i] = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)c->head_size);
        if (c->rope_factor > 0.0f) {
            float wavelen = 2.0f * (float)M_PI / f[i], old = (float)c->rope_original_max;
            float low = old / c->rope_low_freq_factor, high = old / c->rope_high_freq_factor;
            if (wavelen > low) { f[i] = f[i] / c->rope_factor; }
            else if (wavelen >= high) {
                float smooth = (old / wavelen - c->rope_low_freq_factor) / (c->rope_high_freq_factor - c->rope_low_freq_factor);
                f[i] = (1.0f - smooth) * f[i] / c->rope_factor + smooth * f[i];
            }
        }
    }
    return f;
}
// --- end shared-copy: rope-frequencies ---
// --- begin shared-copy: llama-random ---
// Random Llama-family models of real models' shapes, for benchmarks (-m llama:NAME): what
// matters for speed is the shape, not the values. Weights uniform in [-0.02, 0.02] (0.02
// is GPT-2's init scale), RMSNorm weights 1. (Llama 3.2 1B: 1.24B parameters, 4.6 GiB fp32;
// Llama 3.1 8B: 8.03B, 29.9 GiB.)
static const struct { const char *name; LlamaConfig c; } LLAMA_SHAPES[] = {
    // maxT, V, L, NH, NKV, C, HS, H, tied, qkv_bias, family, theta, eps, Llama 3 RoPE scaling (4), bos, eos
    {"smollm2-135m", {8192, 49152, 30, 9, 3, 576, 64, 1536, 1, 0, LLAMA_FAMILY_LLAMA, 1e5f, 1e-5f, 0.0f, 0.0f, 0.0f, 0, 1, 2}},
    {"llama3.2-1b", {131072, 128256, 16, 32, 8, 2048, 64, 8192, 1, 0, LLAMA_FAMILY_LLAMA, 5e5f, 1e-5f, 32.0f, 1.0f, 4.0f, 8192,
                     128000, 128009}},
    {"qwen2.5-0.5b", {32768, 151936, 24, 14, 2, 896, 64, 4864, 1, 1, LLAMA_FAMILY_QWEN2, 1e6f, 1e-6f, 0.0f, 0.0f, 0.0f, 0, -1,
                      151645}},
    {"llama3.2-3b", {131072, 128256, 28, 24, 8, 3072, 128, 8192, 1, 0, LLAMA_FAMILY_LLAMA, 5e5f, 1e-5f, 32.0f, 1.0f, 4.0f, 8192,
                     128000, 128009}},
    {"llama3.1-8b", {131072, 128256, 32, 32, 8, 4096, 128, 14336, 0, 0, LLAMA_FAMILY_LLAMA, 5e5f, 1e-5f, 8.0f, 1.0f, 4.0f, 8192,
                     128000, 128009}},
    {"qwen2.5-7b", {32768, 152064, 28, 28, 4, 3584, 128, 18944, 0, 1, LLAMA_FAMILY_QWEN2, 1e6f, 1e-6f, 0.0f, 0.0f, 0.0f, 0, -1,
                    151645}},
};

static int llama_random(LlamaWeights *w, const char *source, uint64_t seed) {
    if (strncmp(source, "llama:", 6) != 0) { return 0; }
    for (size_t k = 0; k < sizeof(LLAMA_SHAPES) / sizeof(LLAMA_SHAPES[0]); k++) {
        if (strcmp(source + 6, LLAMA_SHAPES[k].name) != 0) { continue; }
        memset(w, 0, sizeof(*w));
        w->config = LLAMA_SHAPES[k].c;
        llama_allocate(w);
        uint64_t key = rng_key(seed, 0);
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < w->num_parameters; i++) { w->params[i] = (float)(0.04 * rng_uniform_at(key, i) - 0.02); }
        const int norms[3] = {LL_LN1W, LL_LN2W, LL_LNFW};
        for (int n = 0; n < 3; n++) {
            for (size_t i = 0; i < w->sizes[norms[n]]; i++) { w->tensors[norms[n]][i] = 1.0f; }
        }
        return 1;
    }
    die_file(source, "-m llama:NAME takes smollm2-135m, llama3.2-1b, llama3.2-3b, llama3.1-8b, qwen2.5-0.5b or qwen2.5-7b", "no such shape");
    return 0;
}
// --- end shared-copy: llama-random ---

// ----------------------------------------------------------------------------
// the base model, frozen: either family's tensors under one set of names

// the classifier's logits at most at a time (logits_rows): 128 MiB of fp32, 261 rows of Llama
// 3's vocabulary: enough rows for cuBLAS and a block per row of the cross-entropy to fill the GPU
#define LOGITS_FLOATS ((size_t)1 << 25)

// --- begin shared-copy: finetune-base ---

// The tensors of the forward pass (as infer.c's ForwardTensors), pointers into the loaded
// weights: GPT-2's 16 (lm_head = wte), or the Llama family's (no wpe, no LayerNorm biases;
// Qwen2 has qkvb). Shapes per layer: qkvw (Q + 2 KV, C), attprojw (C, Q), fcw (MLP, C) with
// MLP = H (GPT-2) or 2H (gate rows, then up rows), fcprojw (C, H); lm_head (Vp, C).
typedef struct {
    int llama, L, C, NH, NKV, HS, H, V, Vp, maxT;
    float eps;
    const float *wte, *wpe, *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb,
        *lnfw, *lnfb, *lm_head;
    float *inv_freq; // the Llama family's RoPE frequencies (HS/2)
    GPT2Weights gpt2;
    LlamaWeights llama_weights;
    ModelNotes notes; // where the model came from, how to sample it (lib/model_notes.h): for the files we write
    // -Q (QLoRA): the four linear layers' weights in 4 bits, their fp32 gone (qkvw, attprojw,
    // fcw, fcprojw are NULL). Each site in bands, Hugging Face's modules, as bitsandbytes
    // quantizes them: the Llama family's q, k, v and gate, up (GPT-2's c_attn and c_fc are one
    // module each there too); band k of site s in layer l is qw[(l NUM_SITES + s) 3 + k].
    int quant;                   // QUANT_NONE, QUANT_NF4 or QUANT_FP4
    int quant_blocksize, quant_nested;
    Quant4 *qw;
    int band_rows[NUM_SITES][3]; // rows of each band of a site (0: no such band)
} Base;

// The base's pointers, from the weights as loaded (again after base_quantize moves them)
static void base_point(Base *b) {
    if (b->llama) {
        LlamaConfig c = b->llama_weights.config;
        float **t = b->llama_weights.tensors; // wte ln1w qkvw qkvb attprojw ln2w fcw fcprojw lnfw lm_head
        b->wte = t[0]; b->ln1w = t[1]; b->qkvw = t[2]; b->qkvb = t[3]; b->attprojw = t[4]; b->ln2w = t[5]; b->fcw = t[6];
        b->fcprojw = t[7]; b->lnfw = t[8]; b->lm_head = c.tied ? t[0] : t[9];
    } else {
        ParameterTensors p = b->gpt2.params;
        b->wte = p.wte; b->wpe = p.wpe; b->ln1w = p.ln1w; b->ln1b = p.ln1b; b->qkvw = p.qkvw; b->qkvb = p.qkvb; b->attprojw = p.attprojw;
        b->attprojb = p.attprojb; b->ln2w = p.ln2w; b->ln2b = p.ln2b; b->fcw = p.fcw; b->fcb = p.fcb; b->fcprojw = p.fcprojw;
        b->fcprojb = p.fcprojb; b->lnfw = p.lnfw; b->lnfb = p.lnfb; b->lm_head = p.wte;
    }
}

// the rows of each band of the four linear layers: one per Hugging Face module (base_quantize's)
static void base_band_rows(Base *b) {
    int C = b->C, Q = b->NH * b->HS, KV = b->NKV * b->HS, H = b->H;
    int rows[NUM_SITES][3] = {{Q, KV, KV}, {C, 0, 0}, {H, H, 0}, {C, 0, 0}}, gpt2_rows[NUM_SITES][3] = {{3 * C, 0, 0}, {C, 0, 0}, {4 * C, 0, 0}, {C, 0, 0}};
    memcpy(b->band_rows, b->llama ? rows : gpt2_rows, sizeof(rows));
}

// Our model file: GPT-2 (llm.c's checkpoint) or the Llama family's (./convert's), by its magic
// (or llama:NAME, a random model of that shape: the benchmark's, -B 1)
static void base_load(Base *b, const char *path) {
    memset(b, 0, sizeof(*b));
    int magic = 0, random = strncmp(path, "llama:", 6) == 0;
    if (!random) {
        FILE *fp = fopenCheck(path, "rb");
        if (fread(&magic, sizeof(magic), 1, fp) != 1) { magic = 0; }
        fcloseCheck(fp);
    }
    if (magic == LLAMA_MAGIC || random) {
        if (random) { llama_random(&b->llama_weights, path, 1337); } else { llama_load(&b->llama_weights, path); }
        LlamaConfig c = b->llama_weights.config;
        b->llama = 1; b->L = c.num_layers; b->C = c.channels; b->NH = c.num_heads; b->NKV = c.num_kv_heads; b->HS = c.head_size;
        b->H = c.hidden; b->V = c.vocab_size; b->Vp = c.vocab_size; b->maxT = c.max_seq_len; b->eps = c.norm_eps;
        b->inv_freq = rope_frequencies(&c);
        if (b->llama_weights.qw != NULL) { // a 4-bit file (./convert's, of a *-bnb-4bit folder): its bands are the base's, as base_quantize leaves them
            b->qw = b->llama_weights.qw;
            b->llama_weights.qw = NULL;
            b->quant = b->llama_weights.quant;
            b->quant_blocksize = b->llama_weights.quant_blocksize;
            b->quant_nested = b->llama_weights.quant_nested;
            base_band_rows(b);
            LlamaWeights *w = &b->llama_weights; // (the sizes and count of the whole model, as after base_quantize)
            llama_tensor_sizes(w->sizes, c);
            w->num_parameters = 0;
            for (int k = 0; k < NUM_LLAMA_TENSORS; k++) { w->num_parameters += w->sizes[k]; }
        }
    } else {
        gpt2_build_from_checkpoint(&b->gpt2, path);
        GPT2Config c = b->gpt2.config;
        b->llama = 0; b->L = c.num_layers; b->C = c.channels; b->NH = c.num_heads; b->NKV = c.num_heads; b->HS = c.channels / c.num_heads;
        b->H = 4 * c.channels; b->V = c.vocab_size; b->Vp = c.padded_vocab_size; b->maxT = c.max_seq_len; b->eps = 1e-5f;
    }
    base_point(b);
    model_notes_read(path, b->V, &b->notes); // (checked now, not when the first checkpoint is written)
}

// The weight tensors of the loaded model, as its struct holds them (sizes in floats), and
// which of them are the four linear layers' (what -Q quantizes)
static int base_tensors(Base *b, float ***tensors, size_t **sizes, int quantized[4]) {
    static const int GPT2_LINEAR[4] = {4, 6, 10, 12}, LLAMA_LINEAR[4] = {2, 4, 6, 7}; // qkvw, attprojw, fcw, fcprojw
    memcpy(quantized, b->llama ? LLAMA_LINEAR : GPT2_LINEAR, sizeof(GPT2_LINEAR));
    if (b->llama) { *tensors = b->llama_weights.tensors; *sizes = b->llama_weights.sizes; return NUM_LLAMA_TENSORS; }
    *tensors = (float **)&b->gpt2.params; *sizes = b->gpt2.param_sizes;
    return NUM_PARAMETER_TENSORS;
}

// -Q: the four linear layers of every block into 4 bits (bitsandbytes' quantize_4bit, band by
// band), then the rest of the model (embeddings, norms, biases, the head: what stays fp32)
// moved into an allocation of its own, and the fp32 weights freed
static void base_quantize(Base *b, int type, int blocksize, int nested) {
    int C = b->C, Q = b->NH * b->HS, H = b->H, L = b->L;
    base_band_rows(b);
    int in[NUM_SITES] = {C, Q, C, H};
    const float *W[NUM_SITES] = {b->qkvw, b->attprojw, b->fcw, b->fcprojw};
    b->qw = (Quant4 *)calloc((size_t)L * NUM_SITES * 3, sizeof(Quant4));
    if (b->qw == NULL) { fprintf(stderr, "Error: out of memory for the 4-bit weights\n"); exit(EXIT_FAILURE); }
    #pragma omp parallel for schedule(dynamic)
    for (int j = 0; j < L * NUM_SITES * 3; j++) { // (each band on its own: the same bytes in any order)
        int l = j / (NUM_SITES * 3), s = j / 3 % NUM_SITES, k = j % 3;
        if (b->band_rows[s][k] == 0) { continue; }
        size_t site_rows = (size_t)b->band_rows[s][0] + b->band_rows[s][1] + b->band_rows[s][2], row = 0;
        for (int i = 0; i < k; i++) { row += b->band_rows[s][i]; }
        const float *band = W[s] + ((size_t)l * site_rows + row) * in[s];
        quant4_quantize(&b->qw[j], band, (size_t)b->band_rows[s][k] * in[s], type, blocksize, nested);
    }
    float **tensors;
    size_t *sizes, keep = 0;
    int linear[4], n = base_tensors(b, &tensors, &sizes, linear);
    for (int k = 0; k < n; k++) { keep += k == linear[0] || k == linear[1] || k == linear[2] || k == linear[3] ? 0 : sizes[k]; }
    float *kept = (float *)mallocCheck((keep > 0 ? keep : 1) * sizeof(float)), *at = kept;
    for (int k = 0; k < n; k++) {
        int gone = k == linear[0] || k == linear[1] || k == linear[2] || k == linear[3];
        if (!gone && sizes[k] > 0) { memcpy(at, tensors[k], sizes[k] * sizeof(float)); }
        tensors[k] = gone || sizes[k] == 0 ? NULL : at;
        at += gone ? 0 : sizes[k];
    }
    if (b->llama) { free(b->llama_weights.params); b->llama_weights.params = kept; }
    else { free(b->gpt2.params_memory); b->gpt2.params_memory = kept; }
    b->quant = type;
    b->quant_blocksize = blocksize;
    b->quant_nested = nested;
    base_point(b);
}

// Layer l's site, dequantized into W (OUT, in): its bands in the order of its rows
static void site_dequantize(const Base *b, int l, int site, float *W) {
    for (int j = 0; j < 3 && b->band_rows[site][j] > 0; j++) {
        const Quant4 *q = &b->qw[((size_t)l * NUM_SITES + site) * 3 + j];
        quant4_dequantize(q, W, 0, q->n);
        W += q->n;
    }
}

// ... and back: every weight fp32 again, the 4-bit ones dequantized (-M merges into these)
static void base_dequantize(Base *b) {
    if (b->quant == QUANT_NONE) { return; }
    float **tensors;
    size_t *sizes, total = 0;
    int linear[4], n = base_tensors(b, &tensors, &sizes, linear);
    for (int k = 0; k < n; k++) { total += sizes[k]; }
    float *full = (float *)mallocCheck(total * sizeof(float)), *at = full;
    for (int k = 0; k < n; k++) {
        int s = k == linear[0] ? 0 : k == linear[1] ? 1 : k == linear[2] ? 2 : k == linear[3] ? 3 : -1;
        if (s < 0 && sizes[k] > 0) { memcpy(at, tensors[k], sizes[k] * sizeof(float)); }
        for (int l = 0; s >= 0 && l < b->L; l++) { site_dequantize(b, l, s, at + sizes[k] / b->L * l); }
        tensors[k] = sizes[k] > 0 ? at : NULL;
        at += sizes[k];
    }
    if (b->llama) { free(b->llama_weights.params); b->llama_weights.params = full; }
    else { free(b->gpt2.params_memory); b->gpt2.params_memory = full; }
    for (size_t k = 0; k < (size_t)b->L * NUM_SITES * 3; k++) { quant4_free(&b->qw[k]); }
    free(b->qw);
    b->qw = NULL;
    b->quant = QUANT_NONE;
    base_point(b);
}

// bytes of the base's weights as held: fp32, and the 4-bit ones with their constants
static size_t base_bytes(const Base *b) {
    size_t bytes = 0;
    float **tensors;
    size_t *sizes;
    int linear[4], n = base_tensors((Base *)b, &tensors, &sizes, linear);
    for (int k = 0; k < n; k++) { bytes += tensors[k] != NULL ? sizes[k] * sizeof(float) : 0; }
    for (size_t k = 0; b->qw != NULL && k < (size_t)b->L * NUM_SITES * 3; k++) { bytes += b->qw[k].packed != NULL ? quant4_bytes(&b->qw[k]) : 0; }
    return bytes;
}

// The classifier a chunk of rows at a time: the logits of all N rows at once would be N Vp
// floats (1 GiB for T = 2,048 and Llama 3's 128,256 tokens), and nothing needs them after
// their row's loss and (the head being frozen) its gradient into nf. logits_floats of them at
// most, one row at least: the tiny test models' all fit, and keep their logits to compare.
static size_t logits_floats = LOGITS_FLOATS; // (a variable: the tests make chunks of a few rows)
static int logits_rows(const Base *b, int N) {
    size_t rows = logits_floats / (size_t)b->Vp;
    rows = rows > 0 ? rows : 1;
    return rows < (size_t)N ? (int)rows : N;
}

// --- what a run would hold: --plan's arithmetic, from a base's shape alone
// (memory_plan, each program's own, sums the parts as that program allocates them)
#ifndef TESTING // (the tests take the base, not the planner)
typedef struct {
    const char *name[16];
    double bytes[16];
    int n;
    double total, per_layer; // all parts; one layer's activations (the share recomputation saves)
} MemoryPlan;
typedef struct {
    int quant, blocksize, nested, modules, r, B, T, recompute, flash;
    size_t adapter_params;
    float dropout;
} PlanRun;
static void plan_add(MemoryPlan *p, const char *name, double bytes) {
    p->name[p->n] = name;
    p->bytes[p->n++] = bytes;
    p->total += bytes;
}
// the base's parameters; those of its four linear layers (what -Q quantizes)
static size_t plan_linear_params(const Base *b) {
    size_t C = b->C, Q = (size_t)b->NH * b->HS, QKV = Q + 2 * (size_t)b->NKV * b->HS, MLP = (b->llama ? 2 : 1) * (size_t)b->H;
    return (size_t)b->L * (QKV * C + C * Q + MLP * C + C * b->H);
}
static size_t plan_base_params(const Base *b) { return b->llama ? b->llama_weights.num_parameters : b->gpt2.num_parameters; }
// base_quantize's bytes: each band's codes, and its constants (quant4_bytes, less the codes)
static void plan_quant_bytes(const Base *b, int blocksize, int nested, size_t *codes, size_t *constants) {
    int C = b->C, Q = b->NH * b->HS, KV = b->NKV * b->HS, H = b->H;
    int rows[NUM_SITES][3] = {{Q, KV, KV}, {C, 0, 0}, {H, H, 0}, {C, 0, 0}}, gpt2_rows[NUM_SITES][3] = {{3 * C, 0, 0}, {C, 0, 0}, {4 * C, 0, 0}, {C, 0, 0}};
    int in[NUM_SITES] = {C, Q, C, H};
    *codes = 0; *constants = 0;
    for (int s = 0; s < NUM_SITES; s++) {
        for (int k = 0; k < 3; k++) {
            size_t n = (size_t)(b->llama ? rows[s][k] : gpt2_rows[s][k]) * in[s], blocks = (n + blocksize - 1) / blocksize;
            if (n == 0) { continue; }
            *codes += (size_t)b->L * ((n + 1) / 2);
            *constants += (size_t)b->L * (nested ? blocks + (blocks + QUANT_NESTED_BLOCK - 1) / QUANT_NESTED_BLOCK * 4 + 4 + 256 * 4 : blocks * 4);
        }
    }
}
#endif

static void base_free(Base *b) {
    for (size_t k = 0; b->qw != NULL && k < (size_t)b->L * NUM_SITES * 3; k++) { quant4_free(&b->qw[k]); }
    free(b->qw);
    gpt2_weights_free(&b->gpt2);
    llama_free(&b->llama_weights);
    free(b->inv_freq);
    memset(b, 0, sizeof(*b));
}
// --- end shared-copy: finetune-base ---

// ----------------------------------------------------------------------------
// an adapter's files: PEFT's LoRA layout (adapter_config.json, adapter_model.safetensors)

// --- begin shared-copy: lora-adapter ---
// Every module the family has, in PEFT's names: fills names/sites/offsets/outs/ins for layer
// l and returns how many (GPT-2: 4, the Llama family: 7)
static int family_modules(const LoraShape *b, int l, char names[][128], int *site, int *offset, int *out, int *in) {
    int C = b->C, Q = b->Q, KV = b->KV, H = b->H;
    if (!b->llama) {
        const char *n[4] = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
        int s[4] = {SITE_QKV, SITE_ATTPROJ, SITE_FC, SITE_FCPROJ}, o[4] = {3 * C, C, H, C}, i[4] = {C, C, C, H};
        for (int k = 0; k < 4; k++) {
            snprintf(names[k], 128, "transformer.h.%d.%s", l, n[k]);
            site[k] = s[k]; offset[k] = 0; out[k] = o[k]; in[k] = i[k];
        }
        return 4;
    }
    const char *n[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                        "mlp.up_proj", "mlp.down_proj"};
    int s[7] = {SITE_QKV, SITE_QKV, SITE_QKV, SITE_ATTPROJ, SITE_FC, SITE_FC, SITE_FCPROJ};
    int f[7] = {0, Q, Q + KV, 0, 0, H, 0}, o[7] = {Q, KV, KV, C, H, H, C}, i[7] = {C, C, C, Q, C, C, H};
    for (int k = 0; k < 7; k++) {
        snprintf(names[k], 128, "model.layers.%d.%s", l, n[k]);
        site[k] = s[k]; offset[k] = f[k]; out[k] = o[k]; in[k] = i[k];
    }
    return 7;
}

static const char *ADAPTER_HINT = "an adapter folder holds adapter_config.json and adapter_model.safetensors (PEFT's save_pretrained)";

// The numbers of lora's modules (num_modules, their in, out and lora->r set): params, each
// module's A then B; for training also grads (dA, dB alike) and AdamW's m and v, zeroed
static void lora_allocate(Lora *lora, int training, const char *what) {
    lora->params = (float *)calloc(lora->num_params, sizeof(float));
    int ok = lora->params != NULL;
    if (training) {
        lora->grads = (float *)calloc(lora->num_params, sizeof(float));
        lora->m = (float *)calloc(lora->num_params, sizeof(float));
        lora->v = (float *)calloc(lora->num_params, sizeof(float));
        ok = ok && lora->grads != NULL && lora->m != NULL && lora->v != NULL;
    }
    if (!ok) { die_file(what, NULL, "out of memory for an adapter of %zu numbers", lora->num_params); }
    size_t at = 0;
    for (int k = 0; k < lora->num_modules; k++) {
        LoraModule *m = &lora->modules[k];
        m->A = lora->params + at; m->dA = training ? lora->grads + at : NULL; at += (size_t)lora->r * m->in;
        m->B = lora->params + at; m->dB = training ? lora->grads + at : NULL; at += (size_t)lora->r * m->out;
    }
}

// Reads a PEFT LoRA adapter folder for a base model of shape b: adapter_config.json
// (peft_type LORA, r, lora_alpha, use_rslora, bias "none") and adapter_model.safetensors,
// whose every tensor must be the lora_A or lora_B of a module the base has, with shapes
// [r, in] and [out, r]. Any mismatch is one error naming the file. training: 1 allocates
// the gradients and AdamW's moments too (lora_allocate).
static void lora_load(Lora *lora, const LoraShape *b, const char *dir, int training) {
    memset(lora, 0, sizeof(*lora));
    char path[MAX_PATH_LEN], err[256];
    path_concat(path, dir, "/adapter_config.json");
    size_t len;
    uint8_t *text = read_whole_file(path, &len, ADAPTER_HINT);
    Json j;
    if (json_parse(&j, (const char *)text, len, err, sizeof(err)) != 0) { die_file(path, NULL, "%s", err); }
    if (j.tokens[0].type != JSON_OBJECT) { die_file(path, NULL, "not a JSON object"); }
    char s[64] = "";
    int at = json_get(&j, 0, "peft_type");
    if (at < 0 || json_string(&j, at, s, sizeof(s)) < 0 || strcmp(s, "LORA") != 0) { die_file(path, NULL, "peft_type is not \"LORA\""); }
    int64_t r = 0;
    double alpha = 0.0;
    at = json_get(&j, 0, "r");
    if (at < 0 || json_int64(&j, at, &r) != 0 || r < 1 || r > 4096) { die_file(path, NULL, "r is not a rank in 1..4096"); }
    at = json_get(&j, 0, "lora_alpha");
    if (at < 0 || json_double(&j, at, &alpha) != 0 || !(alpha > 0.0)) { die_file(path, NULL, "lora_alpha is not a positive number"); }
    at = json_get(&j, 0, "lora_dropout");
    double dropout = 0.0;
    if (at >= 0 && (json_double(&j, at, &dropout) != 0 || !(dropout >= 0.0 && dropout < 1.0))) { die_file(path, NULL, "lora_dropout is not a probability below 1"); }
    lora->dropout = (float)dropout;
    at = json_get(&j, 0, "use_rslora");
    lora->rslora = at >= 0 && j.tokens[at].type == JSON_TRUE;
    at = json_get(&j, 0, "bias");
    if (at >= 0 && (json_string(&j, at, s, sizeof(s)) < 0 || strcmp(s, "none") != 0)) {
        die_file(path, NULL, "bias is not \"none\": we train LoRA's A and B only");
    }
    at = json_get(&j, 0, "use_dora");
    if (at >= 0 && j.tokens[at].type == JSON_TRUE) { die_file(path, NULL, "a DoRA adapter (use_dora): we read LoRA's"); }
    json_free(&j);
    free(text);
    lora->r = (int)r;
    lora->alpha = (float)alpha;
    lora->scale = (float)(lora->rslora ? alpha / sqrt((double)r) : alpha / (double)r);

    path_concat(path, dir, "/adapter_model.safetensors");
    SafeTensors st;
    safetensors_open(&st, path, ADAPTER_HINT);
    // the modules present: each of the family's whose lora_A is in the file
    int max_modules = b->L * 7;
    lora->modules = (LoraModule *)calloc((size_t)max_modules, sizeof(LoraModule));
    if (lora->modules == NULL) { die_file(path, NULL, "out of memory"); }
    int found = 0;
    for (int l = 0; l < b->L; l++) {
        char names[7][128];
        int site[7], offset[7], out[7], in[7], n = family_modules(b, l, names, site, offset, out, in);
        for (int k = 0; k < n; k++) {
            char key_a[256], key_b[256];
            snprintf(key_a, sizeof(key_a), "base_model.model.%.127s.lora_A.weight", names[k]); // (%.127s: a name is 127
            snprintf(key_b, sizeof(key_b), "base_model.model.%.127s.lora_B.weight", names[k]); // characters at most)
            const StTensor *ta = safetensors_find(&st, key_a), *tb = safetensors_find(&st, key_b);
            if (ta == NULL && tb == NULL) { continue; }
            if (ta == NULL || tb == NULL) { die_file(path, ADAPTER_HINT, "%s without %s", ta != NULL ? key_a : key_b, ta != NULL ? key_b : key_a); }
            if (ta->ndim != 2 || ta->shape[0] != r || ta->shape[1] != in[k] || tb->ndim != 2 || tb->shape[0] != out[k] || tb->shape[1] != r) {
                die_file(path, "the adapter is for another model, or another rank than adapter_config.json's",
                         "%s: lora_A must be [%d, %d] and lora_B [%d, %d] (r = %d)", names[k], (int)r, in[k], out[k], (int)r, (int)r);
            }
            if (!st_float_dtype(ta->dtype) || !st_float_dtype(tb->dtype)) { die_file(path, NULL, "%s: dtype %s, we read F32, F16, BF16, F64", names[k], ta->dtype); }
            LoraModule *m = &lora->modules[lora->num_modules++];
            snprintf(m->name, sizeof(m->name), "%.127s", names[k]);
            m->layer = l; m->site = site[k]; m->offset = offset[k]; m->out = out[k]; m->in = in[k];
            lora->num_params += (size_t)r * (in[k] + out[k]);
            found += 2;
        }
    }
    if (found != st.num) { // a tensor that is no module of ours
        for (int k = 0; k < st.num; k++) {
            int ours = 0;
            for (int m = 0; m < lora->num_modules && !ours; m++) {
                char key[256];
                snprintf(key, sizeof(key), "base_model.model.%s.lora_", lora->modules[m].name);
                ours = strncmp(st.tensors[k].name, key, strlen(key)) == 0;
            }
            if (!ours) { die_file(path, "the adapter is for another model family or layout", "tensor %s is no LoRA module of this %s model", st.tensors[k].name, b->llama ? "Llama-family" : "GPT-2"); }
        }
    }
    if (lora->num_modules == 0) { die_file(path, NULL, "no LoRA tensors"); }
    lora_allocate(lora, training, path);
    FILE *fp = fopenCheck(path, "rb");
    size_t largest = 0; // (the biggest tensor, in bytes at 8 a number: the read buffer)
    for (int m = 0; m < lora->num_modules; m++) {
        size_t side = (size_t)(lora->modules[m].in > lora->modules[m].out ? lora->modules[m].in : lora->modules[m].out);
        largest = (size_t)r * side > largest ? (size_t)r * side : largest;
    }
    void *buf = mallocCheck(largest * 8);
    for (int m = 0; m < lora->num_modules; m++) {
        LoraModule *mod = &lora->modules[m];
        char key[256];
        snprintf(key, sizeof(key), "base_model.model.%s.lora_A.weight", mod->name);
        st_read_floats(fp, &st, safetensors_find(&st, key), mod->A, buf, path);
        snprintf(key, sizeof(key), "base_model.model.%s.lora_B.weight", mod->name);
        st_read_floats(fp, &st, safetensors_find(&st, key), mod->B, buf, path);
    }
    free(buf);
    fcloseCheck(fp);
    safetensors_free(&st);
}

static void lora_free(Lora *lora) {
    free(lora->modules); free(lora->params); free(lora->grads); free(lora->m); free(lora->v);
    memset(lora, 0, sizeof(*lora));
}
// --- end shared-copy: lora-adapter ---

// ----------------------------------------------------------------------------
// the base model and the adapter on the GPU

// The frozen base's tensors (Base's names), floatX, in one allocation; lm_head is wte's
// pointer when tied. Rebuilt whenever the host's change (base_to_device: a load, -M's merge).
typedef struct {
    floatX *memory;
    size_t count; // floatX numbers
    floatX *wte, *wpe, *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb, *lnfw,
        *lnfb, *lm_head;
    // -Q: the four linear layers' bands in 4 bits (Base.qw's, on the GPU: bands[k] for qw[k]),
    // and the one layer's site they are dequantized into before its matmul (floatX)
    uint8_t *quant_memory;
    DeviceQuant *bands;
    floatX *site_scratch;
} DeviceBase;
static DeviceBase device_base;

// -Q: every band's codes and constants in one allocation (each piece on 256 bytes)
static void quant_to_device(const Base *b) {
    size_t nbands = (size_t)b->L * NUM_SITES * 3, total = 0;
    gpu_free(device_base.quant_memory);
    free(device_base.bands);
    gpu_free(device_base.site_scratch);
    device_base.quant_memory = NULL; device_base.bands = NULL; device_base.site_scratch = NULL;
    if (b->quant == QUANT_NONE) { return; }
    for (size_t k = 0; k < nbands; k++) {
        const Quant4 *q = &b->qw[k];
        if (q->packed == NULL) { continue; }
        size_t nested = (q->num_blocks + QUANT_NESTED_BLOCK - 1) / QUANT_NESTED_BLOCK;
        total += (q->n + 1) / 2 + 255 + (q->qabsmax != NULL ? q->num_blocks + 255 + nested * 4 + 255 + sizeof(q->nested_code) : q->num_blocks * 4 + 255);
    }
    uint8_t *staging = (uint8_t *)calloc(total, 1);
    device_base.quant_memory = (uint8_t *)gpu_alloc(total, "the base model's 4-bit weights");
    device_base.bands = (DeviceQuant *)calloc(nbands, sizeof(DeviceQuant));
    if (staging == NULL || device_base.bands == NULL) { fprintf(stderr, "Error: out of host memory for the 4-bit weights\n"); exit(EXIT_FAILURE); }
    size_t at = 0;
    for (size_t k = 0; k < nbands; k++) {
        const Quant4 *q = &b->qw[k];
        DeviceQuant *d = &device_base.bands[k];
        if (q->packed == NULL) { continue; }
        d->n = q->n; d->blocksize = q->blocksize; d->fp4 = q->type == QUANT_FP4; d->offset = q->offset;
        const void *from[4] = {q->packed, q->qabsmax != NULL ? (const void *)q->qabsmax : (const void *)q->absmax, q->nested_absmax, q->nested_code};
        size_t bytes[4] = {(q->n + 1) / 2, q->qabsmax != NULL ? q->num_blocks : q->num_blocks * 4,
                           q->qabsmax != NULL ? (q->num_blocks + QUANT_NESTED_BLOCK - 1) / QUANT_NESTED_BLOCK * 4 : 0,
                           q->qabsmax != NULL ? sizeof(q->nested_code) : 0};
        const void *to[4];
        for (int p = 0; p < 4; p++) {
            to[p] = bytes[p] > 0 ? device_base.quant_memory + at : NULL;
            if (bytes[p] > 0) { memcpy(staging + at, from[p], bytes[p]); at += (bytes[p] + 255) / 256 * 256; }
        }
        d->packed = (const uint8_t *)to[0];
        d->qabsmax = q->qabsmax != NULL ? (const uint8_t *)to[1] : NULL;
        d->absmax = q->qabsmax != NULL ? NULL : (const float *)to[1];
        d->nested_absmax = (const float *)to[2];
        d->nested_code = (const float *)to[3];
    }
    cudaCheck(cudaMemcpy(device_base.quant_memory, staging, total, cudaMemcpyHostToDevice));
    free(staging);
    size_t C = b->C, Q = (size_t)b->NH * b->HS, QKV = Q + 2 * (size_t)b->NKV * b->HS, MLP = (b->llama ? 2 : 1) * (size_t)b->H;
    size_t widest = QKV * C > MLP * C ? QKV * C : MLP * C;
    widest = widest > C * Q ? widest : C * Q;
    widest = widest > C * b->H ? widest : C * b->H;
    device_base.site_scratch = (floatX *)gpu_alloc(widest * sizeof(floatX), "a layer's weight, dequantized (-Q)");
}

// The weight of layer l's site on the GPU (OUT, in): a slice of the base's, or (-Q) its
// bands dequantized into the scratch (valid until the next call)
static const floatX *device_site_weight(const Base *b, int l, int site) {
    const DeviceBase *d = &device_base;
    size_t C = b->C, Q = (size_t)b->NH * b->HS, QKV = Q + 2 * (size_t)b->NKV * b->HS, MLP = (b->llama ? 2 : 1) * (size_t)b->H;
    if (b->quant == QUANT_NONE) {
        return site == SITE_QKV ? d->qkvw + l * QKV * C : site == SITE_ATTPROJ ? d->attprojw + l * C * Q
             : site == SITE_FC ? d->fcw + l * MLP * C : d->fcprojw + l * C * b->H;
    }
    floatX *W = d->site_scratch;
    for (int k = 0; k < 3 && b->band_rows[site][k] > 0; k++) {
        const DeviceQuant *q = &d->bands[((size_t)l * NUM_SITES + site) * 3 + k];
        dequantize4(W, q);
        W += q->n;
    }
    return d->site_scratch;
}

static void base_to_device(const Base *b) {
    gpu_init();
    quant_to_device(b); // (first: after -M's merge it frees the 4-bit weights before the merged ones come)
    size_t C = b->C, L = b->L, Q = (size_t)b->NH * b->HS, QKV = Q + 2 * (size_t)b->NKV * b->HS, H = b->H;
    size_t MLP = (b->llama ? 2 : 1) * H, Vp = b->Vp;
    int tied = b->lm_head == b->wte;
    const float *src[17] = {b->wte, b->wpe, b->ln1w, b->ln1b, b->qkvw, b->qkvb, b->attprojw, b->attprojb, b->ln2w, b->ln2b, b->fcw,
                            b->fcb, b->fcprojw, b->fcprojb, b->lnfw, b->lnfb, tied ? NULL : b->lm_head};
    size_t sizes[17] = {Vp * C, (size_t)b->maxT * C, L * C, L * C, L * QKV * C, L * QKV, L * C * Q, L * C, L * C, L * C, L * MLP * C,
                        L * MLP, L * C * H, L * C, C, C, Vp * C};
    floatX **dst[17] = {&device_base.wte, &device_base.wpe, &device_base.ln1w, &device_base.ln1b, &device_base.qkvw,
                        &device_base.qkvb, &device_base.attprojw, &device_base.attprojb, &device_base.ln2w, &device_base.ln2b,
                        &device_base.fcw, &device_base.fcb, &device_base.fcprojw, &device_base.fcprojb, &device_base.lnfw,
                        &device_base.lnfb, &device_base.lm_head};
    size_t total = 0;
    for (int k = 0; k < 17; k++) { total += src[k] != NULL ? (sizes[k] + 63) / 64 * 64 : 0; } // (each on 128 bytes or more)
    if (device_base.count != total) {
        gpu_free(device_base.memory);
        device_base.memory = (floatX *)gpu_alloc(total * sizeof(floatX), "the base model's weights");
        device_base.count = total;
    }
    floatX *staging = (floatX *)mallocCheck(total * sizeof(floatX)); // (the host's fp32, rounded to floatX)
    size_t at = 0;
    for (int k = 0; k < 17; k++) {
        *dst[k] = src[k] != NULL ? device_base.memory + at : NULL;
        if (src[k] == NULL) { continue; }
        for (size_t i = 0; i < sizes[k]; i++) { staging[at + i] = from_float(src[k][i]); }
        at += (sizes[k] + 63) / 64 * 64;
    }
    if (tied) { device_base.lm_head = device_base.wte; }
    cudaCheck(cudaMemcpy(device_base.memory, staging, total * sizeof(floatX), cudaMemcpyHostToDevice));
    free(staging);
}

// The adapter being trained: params (every module's A, then B, as Lora.params), its
// gradients and AdamW's two moments, fp32 on the GPU. Module k's A is at the offset of its
// host A in Lora.params (device_param). lora_to_device and lora_to_host copy all four.
typedef struct {
    float *params, *grads, *m, *v;
    size_t count;
    double *partial; // (NORM_BLOCKS) the gradient norm's per-block sums
} DeviceLora;
static DeviceLora device_lora;
#define NORM_BLOCKS 128

static void lora_to_device(const Lora *lora) {
    gpu_init();
    size_t n = lora->num_params, bytes = n * sizeof(float);
    if (device_lora.count != n) {
        float **all[4] = {&device_lora.params, &device_lora.grads, &device_lora.m, &device_lora.v};
        for (int k = 0; k < 4; k++) { gpu_free(*all[k]); *all[k] = (float *)gpu_alloc(bytes, "the adapter"); }
        if (device_lora.partial == NULL) { device_lora.partial = (double *)gpu_alloc(NORM_BLOCKS * sizeof(double), "the norm's sums"); }
        device_lora.count = n;
    }
    const float *host[4] = {lora->params, lora->grads, lora->m, lora->v};
    float *dev[4] = {device_lora.params, device_lora.grads, device_lora.m, device_lora.v};
    for (int k = 0; k < 4; k++) {
        if (host[k] != NULL) { cudaCheck(cudaMemcpy(dev[k], host[k], bytes, cudaMemcpyHostToDevice)); }
        else { cudaCheck(cudaMemset(dev[k], 0, bytes)); }
    }
}
static void lora_to_host(Lora *lora) {
    size_t bytes = lora->num_params * sizeof(float);
    float *host[4] = {lora->params, lora->grads, lora->m, lora->v};
    const float *dev[4] = {device_lora.params, device_lora.grads, device_lora.m, device_lora.v};
    for (int k = 0; k < 4; k++) {
        if (host[k] != NULL) { cudaCheck(cudaMemcpy(host[k], dev[k], bytes, cudaMemcpyDeviceToHost)); }
    }
}
static void lora_zero_grads(Lora *lora) { cudaCheck(cudaMemsetAsync(device_lora.grads, 0, lora->num_params * sizeof(float), main_stream)); }
// where module m's A (or B, dA, dB) is on the GPU: at its offset into the host's arrays
static float *device_param(const Lora *lora, const float *host, const float *base_host, float *base_device) {
    (void)lora;
    return base_device + (host - base_host);
}

// ----------------------------------------------------------------------------
// the model with its adapter: forward to the loss, backward to the adapter's gradients

// What the backward pass needs of the forward one, on the GPU. Each block's input x[l] is
// kept; the rest of a block's activations are kept for every layer, or with recomputation
// (-A 1) for one, and the backward pass runs each block forward again before going back
// through it.
typedef struct {
    int B, T, recompute, slots;  // slots: L, or 1 with recomputation
    int flash;                   // -F 1: flash attention (att holds each row's log-sum-exp, dz the rows' D)
    int *tokens, *labels;        // (N) on the GPU
    float *x;                    // (L + 1, N, C) the residual stream into each block, and out of the last
    float *xmid, *n1, *n2;       // (slots, N, C)
    float *stats;                // (slots, 4, N) mean1, rstd1, mean2, rstd2
    float *qkv;                  // (slots, N, Q + 2KV) after RoPE
    float *att;                  // (slots, B, NH, T, T) the probabilities; -F 1: (slots, B, NH, T) log-sum-exps
    float *atty;                 // (slots, N, Q)
    float *fc;                   // (slots, N, MLP) before the activation
    float *act;                  // (slots, N, H)
    float *h;                    // each module's h (N, r), back to back
    float *nf, *nf_stats;        // (N, C), (2, N)
    float *logits;               // (logits_rows, Vp): a chunk of rows' logits, their probabilities, their gradient
    float *loss;                 // (N) each row's loss
    float *dnf;                  // (N, C): (p - onehot(label)) lm_head, made chunk by chunk in the forward pass
    float *dx, *dbuf, *dbuf2, *dh, *dz; // backward scratch: (N, C), (N, wide) twice, (N, r), (B, NH, T, T) (-F 1: (B, NH, T))
    float *drop, *drop2;         // LoRA dropout's (N, wide), twice
    float *rope;                 // (T, HS) the Llama family's RoPE cosines and sines (rope_kernel)
    float *host_loss;            // (N) its copy, for the loss's sum
    size_t bytes;                // on the GPU, all of it
    char *memory;
    int forward_only;            // 1: no backward pass follows (an evaluation): model_forward makes no dnf
} Acts;

static size_t max3(size_t a, size_t b, size_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

// The floats of each of Acts' arrays, in the order of its fields (x .. rope), each rounded up
// to 64: what acts_allocate takes in one allocation, and what --plan predicts (memory_plan).
// S: the layers whose activations are kept (all, or one with recomputation).
enum { ACTS_LOGITS = 13, ACTS_SCRATCH = 16, NUM_ACTS = 24 }; // (kept for the backward pass: 0..12; the classifier's: 13..15)
static void acts_sizes(size_t *sizes, const Base *b, int modules, int r, float dropout, int B, int T, int recompute, int flash) {
    size_t N = (size_t)B * T, L = b->L, S = recompute ? 1 : L, C = b->C, Q = (size_t)b->NH * b->HS, QKV = Q + 2 * (size_t)b->NKV * b->HS;
    size_t MLP = (b->llama ? 2 : 1) * (size_t)b->H, wide = max3(QKV, MLP, max3(C, Q, b->H)), att = (size_t)B * b->NH * T * (flash ? 1 : T);
    size_t drop = dropout > 0.0f ? N * wide : 1;
    size_t s[NUM_ACTS] = {(L + 1) * N * C, S * N * C, S * N * C, S * N * C, S * 4 * N, S * N * QKV, S * att, S * N * Q, S * N * MLP,
                          S * N * b->H, (size_t)modules * N * r + 1, N * C, 2 * N, (size_t)logits_rows(b, (int)N) * b->Vp, N, N * C,
                          N * C, N * wide, N * wide, N * r + 1, att, drop, drop, (size_t)T * b->HS};
    for (int k = 0; k < NUM_ACTS; k++) { sizes[k] = (s[k] + 63) / 64 * 64; }
}
// the matmuls' floatX inputs (none in fp32): the widest but dlogits, which model_backward takes
// in slices of rows, and at least one row of those (Vp: more than N x wide for a few tokens of
// a small model with a large vocabulary)
static size_t cast_floats(const Base *b, int B, int T) {
#if defined(ENABLE_FP32)
    (void)b; (void)B; (void)T;
    return 0;
#else
    size_t C = b->C, Q = (size_t)b->NH * b->HS, QKV = Q + 2 * (size_t)b->NKV * b->HS, MLP = (b->llama ? 2 : 1) * (size_t)b->H;
    size_t widest = (size_t)B * T * max3(QKV, MLP, max3(C, Q, b->H));
    return widest > (size_t)b->Vp ? widest : (size_t)b->Vp;
#endif
}

static void acts_allocate(Acts *a, const Base *b, const Lora *lora, int B, int T, int recompute, int flash) {
    if (flash && b->HS > 128) {
        fprintf(stderr, "Error: -F 1: flash attention's kernels take head sizes up to 128, this model's is %d (run with -F 0)\n", b->HS);
        exit(EXIT_FAILURE);
    }
    if (flash && (size_t)B * b->NH > 65535) { // (a grid's second dimension: a block row per sequence and head)
        fprintf(stderr, "Error: -F 1: at most 65,535 sequences x heads a micro-batch, -b %d x %d heads is more (a smaller -b)\n", B, b->NH);
        exit(EXIT_FAILURE);
    }
    memset(a, 0, sizeof(*a));
    a->B = B; a->T = T; a->recompute = recompute; a->slots = recompute ? 1 : b->L; a->flash = flash;
    size_t N = (size_t)B * T;
    float **slots[NUM_ACTS] = {&a->x, &a->xmid, &a->n1, &a->n2, &a->stats, &a->qkv, &a->att, &a->atty, &a->fc, &a->act, &a->h, &a->nf,
                               &a->nf_stats, &a->logits, &a->loss, &a->dnf, &a->dx, &a->dbuf, &a->dbuf2, &a->dh, &a->dz, &a->drop, &a->drop2,
                               &a->rope};
    size_t sizes[NUM_ACTS], total = 0, at[NUM_ACTS];
    acts_sizes(sizes, b, lora->num_modules, lora->r, lora->dropout, B, T, recompute, flash);
    for (size_t k = 0; k < NUM_ACTS; k++) { at[k] = total; total += sizes[k]; }
    size_t ints = (2 * N + 63) / 64 * 64;
    a->bytes = total * sizeof(float) + ints * sizeof(int);
    a->memory = (char *)gpu_alloc(a->bytes, "the activations");
    for (size_t k = 0; k < NUM_ACTS; k++) { *slots[k] = (float *)a->memory + at[k]; }
    a->tokens = (int *)(a->memory + total * sizeof(float));
    a->labels = a->tokens + N;
    gpu_free(cast_scratch);
    cast_scratch = NULL;
#if !defined(ENABLE_FP32)
    size_t cast = cast_floats(b, B, T);
    cast_scratch = (floatX *)gpu_alloc(cast * sizeof(floatX), "the matmuls' floatX inputs");
    a->bytes += cast * sizeof(floatX);
#endif
    if (b->llama) { // RoPE's table: angle pos inv_freq[i], as finetune_lora.c's rope_apply computes it
        float *table = (float *)mallocCheck((size_t)T * b->HS * sizeof(float));
        for (int t = 0; t < T; t++) {
            for (int i = 0; i < b->HS / 2; i++) {
                float angle = (float)t * b->inv_freq[i];
                table[(size_t)t * b->HS + i] = cosf(angle);
                table[(size_t)t * b->HS + b->HS / 2 + i] = sinf(angle);
            }
        }
        cudaCheck(cudaMemcpy(a->rope, table, (size_t)T * b->HS * sizeof(float), cudaMemcpyHostToDevice));
        free(table);
    }
    a->host_loss = (float *)mallocCheck(N * sizeof(float));
}

static void acts_free(Acts *a) {
    gpu_free(a->memory);
    gpu_free(cast_scratch);
    cast_scratch = NULL;
    free(a->host_loss);
    memset(a, 0, sizeof(*a));
}

// One layer's activations: its slot (layer l's own, or the one slot with recomputation)
typedef struct {
    float *x, *xmid, *n1, *n2, *st, *qkv, *att, *atty, *fc, *act, *xout;
} LayerActs;
static LayerActs layer_acts(const Acts *a, const Base *b, int l) {
    size_t N = (size_t)a->B * a->T, C = b->C, Q = (size_t)b->NH * b->HS, QKV = Q + 2 * (size_t)b->NKV * b->HS;
    size_t MLP = (b->llama ? 2 : 1) * (size_t)b->H, s = a->recompute ? 0 : (size_t)l;
    LayerActs la = {a->x + l * N * C, a->xmid + s * N * C, a->n1 + s * N * C, a->n2 + s * N * C, a->stats + s * 4 * N, a->qkv + s * N * QKV,
                    a->att + s * a->B * b->NH * a->T * (a->flash ? 1 : a->T), a->atty + s * N * Q, a->fc + s * N * MLP, a->act + s * N * b->H,
                    a->x + (l + 1) * N * C};
    return la;
}

// The LoRA modules of one layer and site, added to y from x (finetune_lora.c's, on the GPU)
static void site_lora_forward(float *y, const float *x, int layer, int site, const Lora *lora, Acts *a, int N, int OUT) {
    for (int k = 0; k < lora->num_modules; k++) {
        const LoraModule *m = &lora->modules[k];
        if (m->layer != layer || m->site != site) { continue; }
        const float *in = x;
        if (dropping(lora)) { dropout_apply(a->drop, x, lora, k, N, m->in, 0); in = a->drop; }
        lora_forward(y, a->h + (size_t)k * N * lora->r, in, device_param(lora, m->A, lora->params, device_lora.params),
                     device_param(lora, m->B, lora->params, device_lora.params), m, lora->scale, lora->r, N, OUT);
    }
}
static void site_lora_backward(float *dx, const float *dy, const float *x, int layer, int site, Lora *lora, Acts *a, int N, int OUT) {
    for (int k = 0; k < lora->num_modules; k++) {
        LoraModule *m = &lora->modules[k];
        if (m->layer != layer || m->site != site) { continue; }
        const float *A = device_param(lora, m->A, lora->params, device_lora.params), *B = device_param(lora, m->B, lora->params, device_lora.params);
        float *dA = device_param(lora, m->A, lora->params, device_lora.grads), *dB = device_param(lora, m->B, lora->params, device_lora.grads);
        const float *h = a->h + (size_t)k * N * lora->r;
        if (!dropping(lora)) {
            lora_backward(dx, a->dh, dy, h, x, A, B, dA, dB, m, lora->scale, lora->r, N, OUT);
            continue;
        }
        dropout_apply(a->drop, x, lora, k, N, m->in, 0);
        cudaCheck(cudaMemsetAsync(a->drop2, 0, (size_t)N * m->in * sizeof(float), main_stream));
        lora_backward(a->drop2, a->dh, dy, h, a->drop, A, B, dA, dB, m, lora->scale, lora->r, N, OUT);
        dropout_apply(dx, a->drop2, lora, k, N, m->in, 1);
    }
}

// block l forward, from la.x into its slot and la.xout
static void layer_forward(const Base *b, const Lora *lora, Acts *a, int l) {
    int B = a->B, T = a->T, N = B * T, C = b->C, Q = b->NH * b->HS, QKV = Q + 2 * b->NKV * b->HS, H = b->H, MLP = (b->llama ? 2 : 1) * H;
    LayerActs la = layer_acts(a, b, l);
    const DeviceBase *d = &device_base;
    norm_forward(la.n1, la.st, la.st + N, la.x, d->ln1w + (size_t)l * C, d->ln1b != NULL ? d->ln1b + (size_t)l * C : NULL, N, C, b->eps, b->llama);
    linear_forward(la.qkv, la.n1, device_site_weight(b, l, SITE_QKV), d->qkvb != NULL ? d->qkvb + (size_t)l * QKV : NULL, N, C, QKV);
    site_lora_forward(la.qkv, la.n1, l, SITE_QKV, lora, a, N, QKV);
    if (b->llama) { rope_apply(la.qkv, a->rope, N, T, b->NH, b->NKV, b->HS, 1.0f); }
    if (a->flash) {
        flash_attention_forward(la.atty, la.att, la.qkv, B, T, b->NH, b->NKV, b->HS);
    } else {
        attention_forward(la.atty, la.att, la.qkv, B, T, b->NH, b->NKV, b->HS);
    }
    linear_forward(la.xmid, la.atty, device_site_weight(b, l, SITE_ATTPROJ), d->attprojb != NULL ? d->attprojb + (size_t)l * C : NULL, N, Q, C);
    site_lora_forward(la.xmid, la.atty, l, SITE_ATTPROJ, lora, a, N, C);
    add_inplace(la.xmid, la.x, (size_t)N * C);
    norm_forward(la.n2, la.st + 2 * N, la.st + 3 * N, la.xmid, d->ln2w + (size_t)l * C, d->ln2b != NULL ? d->ln2b + (size_t)l * C : NULL, N, C,
                 b->eps, b->llama);
    linear_forward(la.fc, la.n2, device_site_weight(b, l, SITE_FC), d->fcb != NULL ? d->fcb + (size_t)l * MLP : NULL, N, C, MLP);
    site_lora_forward(la.fc, la.n2, l, SITE_FC, lora, a, N, MLP);
    activation_forward(la.act, la.fc, N, H, b->llama);
    linear_forward(la.xout, la.act, device_site_weight(b, l, SITE_FCPROJ), d->fcprojb != NULL ? d->fcprojb + (size_t)l * C : NULL, N, H, C);
    site_lora_forward(la.xout, la.act, l, SITE_FCPROJ, lora, a, N, C);
    add_inplace(la.xout, la.xmid, (size_t)N * C);
}

// The forward pass over tokens (B, T) (host), and the summed cross-entropy of the rows
// whose label is not -100; *count: how many. Unless a->forward_only, the classifier's
// gradient into nf is left in a->dnf; rows without a label keep their logits (a->logits: the
// last chunk's rows, all of them when they fit one).
static double model_forward(const Base *b, const Lora *lora, Acts *a, const int *tokens, const int *labels, int *count) {
    int N = a->B * a->T, C = b->C, L = b->L, counted = 0;
    for (int n = 0; n < N; n++) {
        if (tokens[n] < 0 || tokens[n] >= b->V) { fprintf(stderr, "Error: token %d at row %d is outside the vocabulary (%d)\n", tokens[n], n, b->V); exit(EXIT_FAILURE); }
        if (labels[n] != -100 && (labels[n] < 0 || labels[n] >= b->V)) { fprintf(stderr, "Error: label %d at row %d is outside the vocabulary (%d)\n", labels[n], n, b->V); exit(EXIT_FAILURE); }
        counted += labels[n] != -100;
    }
    cudaCheck(cudaMemcpyAsync(a->tokens, tokens, (size_t)N * sizeof(int), cudaMemcpyHostToDevice, main_stream));
    cudaCheck(cudaMemcpyAsync(a->labels, labels, (size_t)N * sizeof(int), cudaMemcpyHostToDevice, main_stream));
    embed_kernel<<<ceil_div((size_t)N * C, BLOCK), BLOCK, 0, main_stream>>>(a->x, a->tokens, device_base.wte, device_base.wpe, N, a->T, C);
    cudaCheck(cudaGetLastError());
    for (int l = 0; l < L; l++) {
        layer_range_push("forward", l);
        layer_forward(b, lora, a, l);
        nvtxRangePop();
    }
    norm_forward(a->nf, a->nf_stats, a->nf_stats + N, a->x + (size_t)L * N * C, device_base.lnfw, device_base.lnfb, N, C, b->eps, b->llama);
    // the classifier a chunk of rows at a time (logits_rows): logits, loss, and (unless an
    // evaluation's) the gradient into nf, (p - onehot(label)) lm_head, into a->dnf
    int chunk = logits_rows(b, N);
    size_t cast = cast_floats(b, a->B, a->T); // rows of dlogits whose floatX copy fits in cast_scratch (one at least; fp32: no copy, all)
    int slice = cast > 0 ? (int)(cast / b->Vp) : chunk;
    for (int first = 0; first < N; first += chunk) {
        int rows = N - first < chunk ? N - first : chunk;
        linear_forward(a->logits, a->nf + (size_t)first * C, device_base.lm_head, NULL, rows, C, b->Vp);
        cross_entropy_kernel<<<rows, 512, 0, main_stream>>>(a->logits, a->loss + first, a->labels + first, b->V, b->Vp);
        cudaCheck(cudaGetLastError());
        if (a->forward_only) { continue; }
        float *dnf = a->dnf + (size_t)first * C;
        cross_entropy_backward_kernel<<<ceil_div((size_t)rows * b->Vp, BLOCK), BLOCK, 0, main_stream>>>(a->logits, a->labels + first, rows, b->V, b->Vp);
        cudaCheck(cudaGetLastError());
        cudaCheck(cudaMemsetAsync(dnf, 0, (size_t)rows * C * sizeof(float), main_stream));
        for (int r0 = 0; r0 < rows; r0 += slice) {
            int part = rows - r0 < slice ? rows - r0 : slice;
            linear_backward(dnf + (size_t)r0 * C, a->logits + (size_t)r0 * b->Vp, device_base.lm_head, part, C, b->Vp);
        }
        zero_unlabelled_kernel<<<ceil_div((size_t)rows * C, BLOCK), BLOCK, 0, main_stream>>>(dnf, a->labels + first, rows, C);
        cudaCheck(cudaGetLastError());
    }
    cudaCheck(cudaMemcpyAsync(a->host_loss, a->loss, (size_t)N * sizeof(float), cudaMemcpyDeviceToHost, main_stream));
    cudaCheck(cudaStreamSynchronize(main_stream));
    double total = 0.0; // (summed here, in row order: the same sum every run)
    for (int n = 0; n < N; n++) { total += a->host_loss[n]; }
    *count = counted;
    return total;
}

// The gradient of dscale x (the loss sum) into the adapter's gradients (added: micro-batches
// accumulate). Call after model_forward on the same batch.
static void model_backward(const Base *b, Lora *lora, Acts *a, const int *labels, float dscale) {
    (void)labels; // (model_forward put them on the GPU)
    int B = a->B, T = a->T, N = B * T, C = b->C, L = b->L, Q = b->NH * b->HS, QKV = Q + 2 * b->NKV * b->HS, H = b->H;
    int MLP = (b->llama ? 2 : 1) * H;
    size_t NC = (size_t)N * C;
    const DeviceBase *d = &device_base;
    // the classifier's gradient into nf: model_forward made (p - onehot(label)) lm_head, row by row
    float *dnf = a->dbuf, *dx = a->dx;
    scaled_copy_kernel<<<ceil_div(NC, BLOCK), BLOCK, 0, main_stream>>>(dnf, a->dnf, dscale, NC);
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaMemsetAsync(dx, 0, NC * sizeof(float), main_stream));
    norm_backward(dx, dnf, a->x + (size_t)L * NC, a->nf_stats, a->nf_stats + N, d->lnfw, N, C, b->llama);
    for (int l = L - 1; l >= 0; l--) {
        layer_range_push("backward", l);
        if (a->recompute && l < L - 1) { layer_forward(b, lora, a, l); } // (the last block's are still in the slot)
        LayerActs la = layer_acts(a, b, l);
        float *dact = a->dbuf;
        cudaCheck(cudaMemsetAsync(dact, 0, (size_t)N * H * sizeof(float), main_stream));
        linear_backward(dact, dx, device_site_weight(b, l, SITE_FCPROJ), N, H, C);
        site_lora_backward(dact, dx, la.act, l, SITE_FCPROJ, lora, a, N, C);
        float *dfc = a->dbuf2;
        activation_backward(dfc, dact, la.fc, N, H, b->llama);
        float *dn2 = a->dbuf;
        cudaCheck(cudaMemsetAsync(dn2, 0, NC * sizeof(float), main_stream));
        linear_backward(dn2, dfc, device_site_weight(b, l, SITE_FC), N, C, MLP);
        site_lora_backward(dn2, dfc, la.n2, l, SITE_FC, lora, a, N, MLP);
        norm_backward(dx, dn2, la.xmid, la.st + 2 * N, la.st + 3 * N, d->ln2w + (size_t)l * C, N, C, b->llama); // dx is now d xmid
        float *datty = a->dbuf;
        cudaCheck(cudaMemsetAsync(datty, 0, (size_t)N * Q * sizeof(float), main_stream));
        linear_backward(datty, dx, device_site_weight(b, l, SITE_ATTPROJ), N, Q, C);
        site_lora_backward(datty, dx, la.atty, l, SITE_ATTPROJ, lora, a, N, C);
        float *dqkv = a->dbuf2;
        if (a->flash) {
            flash_attention_backward(dqkv, a->dz, datty, la.qkv, la.atty, la.att, B, T, b->NH, b->NKV, b->HS);
        } else {
            attention_backward(dqkv, a->dz, datty, la.qkv, la.att, B, T, b->NH, b->NKV, b->HS);
        }
        if (b->llama) { rope_apply(dqkv, a->rope, N, T, b->NH, b->NKV, b->HS, -1.0f); }
        float *dn1 = a->dbuf;
        cudaCheck(cudaMemsetAsync(dn1, 0, NC * sizeof(float), main_stream));
        linear_backward(dn1, dqkv, device_site_weight(b, l, SITE_QKV), N, C, QKV);
        site_lora_backward(dn1, dqkv, la.n1, l, SITE_QKV, lora, a, N, QKV);
        norm_backward(dx, dn1, la.x, la.st, la.st + N, d->ln1w + (size_t)l * C, N, C, b->llama); // dx is now d x
        nvtxRangePop();
    }
}

// ----------------------------------------------------------------------------
// the optimizer, over the adapter only (on the GPU)

// the squared gradient's partial sums, NORM_BLOCKS blocks over fixed strides (the same sum
// every run: no atomics), added in order on the host
__global__ void norm_squares_kernel(double *partial, const float *g, size_t n) {
    __shared__ double sums[256];
    double s = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) { s += (double)g[i] * g[i]; }
    sums[threadIdx.x] = s;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if ((int)threadIdx.x < stride) { sums[threadIdx.x] += sums[threadIdx.x + stride]; }
        __syncthreads();
    }
    if (threadIdx.x == 0) { partial[blockIdx.x] = sums[0]; }
}
__global__ void scale_kernel(float *x, float c, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { x[i] *= c; }
}
// The gradient's norm, and scaled to at most max_norm as torch's clip_grad_norm_ does (by
// max_norm / (norm + 1e-6) when that is below 1). Returns the norm before clipping.
static float clip_gradients(Lora *lora, float max_norm) {
    size_t n = lora->num_params;
    norm_squares_kernel<<<NORM_BLOCKS, 256, 0, main_stream>>>(device_lora.partial, device_lora.grads, n);
    cudaCheck(cudaGetLastError());
    double partial[NORM_BLOCKS], sq = 0.0;
    cudaCheck(cudaMemcpyAsync(partial, device_lora.partial, sizeof(partial), cudaMemcpyDeviceToHost, main_stream));
    cudaCheck(cudaStreamSynchronize(main_stream));
    for (int k = 0; k < NORM_BLOCKS; k++) { sq += partial[k]; }
    float norm = (float)sqrt(sq), coef = max_norm / (norm + 1e-6f);
    if (max_norm > 0.0f && coef < 1.0f) {
        scale_kernel<<<ceil_div(n, BLOCK), BLOCK, 0, main_stream>>>(device_lora.grads, coef, n);
        cudaCheck(cudaGetLastError());
    }
    return norm;
}
// AdamW (Loshchilov & Hutter), torch's, as finetune_lora.c's: a thread per number
__global__ void adamw_kernel(float *params, const float *grads, float *m, float *v, size_t n, float lr, float beta1, float beta2, float eps,
                             float weight_decay, float c1, float c2) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) { return; }
    float g = grads[i];
    m[i] = beta1 * m[i] + (1.0f - beta1) * g;
    v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
    float p = params[i] * (1.0f - lr * weight_decay);
    params[i] = p - lr * (m[i] / c1) / (sqrtf(v[i] / c2) + eps);
}
static void adamw_update(Lora *lora, float lr, float beta1, float beta2, float eps, float weight_decay, int step) {
    float c1 = 1.0f - powf(beta1, (float)step), c2 = 1.0f - powf(beta2, (float)step);
    adamw_kernel<<<ceil_div(lora->num_params, BLOCK), BLOCK, 0, main_stream>>>(device_lora.params, device_lora.grads, device_lora.m,
                                                                               device_lora.v, lora->num_params, lr, beta1, beta2, eps,
                                                                               weight_decay, c1, c2);
    cudaCheck(cudaGetLastError());
}

// --- begin shared-copy: lora-train-host ---
// the shape an adapter for base b must have
static LoraShape base_shape(const Base *b) {
    return (LoraShape){.llama = b->llama, .L = b->L, .C = b->C, .Q = b->NH * b->HS, .KV = b->NKV * b->HS, .H = b->H};
}

// Folds module m into the base weight W of its site (W + s B A into its band of rows): a
// model that runs with no adapter at all (PEFT's merge_and_unload). W is (OUT, in).
static void lora_merge(float *W, const LoraModule *m, float scale, int r) {
    for (int o = 0; o < m->out; o++) {
        for (int i = 0; i < m->in; i++) {
            float sum = 0.0f;
            for (int k = 0; k < r; k++) { sum += m->B[(size_t)o * r + k] * m->A[(size_t)k * m->in + i]; }
            W[(size_t)(m->offset + o) * m->in + i] += scale * sum;
        }
    }
}

// Every module of the adapter folded into the base's weights: the model, with no adapter,
// computes what base + adapter did (up to fp32's rounding in the order of the sums)
static void merge_adapter(Base *b, const Lora *lora) {
    base_dequantize(b); // (-Q: into the dequantized weights)
    size_t C = b->C, Q = (size_t)b->NH * b->HS, QKV = Q + 2 * (size_t)b->NKV * b->HS, H = b->H, MLP = (b->llama ? 2 : 1) * H;
    for (int k = 0; k < lora->num_modules; k++) {
        const LoraModule *m = &lora->modules[k];
        float *W = m->site == SITE_QKV ? (float *)b->qkvw + m->layer * QKV * C : m->site == SITE_ATTPROJ ? (float *)b->attprojw + m->layer * C * Q
                 : m->site == SITE_FC ? (float *)b->fcw + m->layer * MLP * C : (float *)b->fcprojw + m->layer * C * H;
        lora_merge(W, m, lora->scale, lora->r);
    }
}

// ----------------------------------------------------------------------------
// a new adapter: the modules chosen, PEFT's initialisation

// -T: "all-linear" or PEFT module names, comma-separated ("q_proj,v_proj"; GPT-2's: c_attn,
// c_proj, c_fc). A name this family does not have is an error.
static int target_wanted(const char *targets, const char *module_name) {
    if (strcmp(targets, "all-linear") == 0) { return 1; }
    const char *leaf = strrchr(module_name, '.') + 1; // "q_proj" of "model.layers.3.self_attn.q_proj"
    for (const char *p = targets; *p != '\0';) {
        const char *comma = strchr(p, ',');
        size_t n = comma != NULL ? (size_t)(comma - p) : strlen(p);
        if (n == strlen(leaf) && strncmp(p, leaf, n) == 0) { return 1; }
        p += n + (comma != NULL);
    }
    return 0;
}

// A fresh adapter on base b: rank r on the -T modules; A Kaiming-uniform with a = sqrt(5)
// (PEFT's, and nn.Linear's own init: U(-1/sqrt(in), 1/sqrt(in))) from the seed, B zero, so
// that the adapted model starts as the base model exactly.
// The modules -T names (and -r fits each): an error naming the problem, else how many and
// their parameters (what lora_create makes; --plan asks it too)
static void lora_check_targets(const Base *b, int r, const char *targets, int *modules, size_t *params) {
    LoraShape shape = base_shape(b);
    *modules = 0; *params = 0;
    for (int l = 0; l < b->L; l++) {
        char names[7][128];
        int site[7], offset[7], out[7], in[7], n = family_modules(&shape, l, names, site, offset, out, in);
        for (int k = 0; k < n; k++) {
            if (!target_wanted(targets, names[k])) { continue; }
            if (r > in[k] || r > out[k]) {
                fprintf(stderr, "Error: -r %d: larger than %s (%d x %d): the rank can be at most its smaller side\n", r, names[k], out[k], in[k]);
                exit(EXIT_FAILURE);
            }
            (*modules)++;
            *params += (size_t)r * (in[k] + out[k]);
        }
    }
    // every name asked for must be one of the family's
    char names[7][128];
    int site[7], offset[7], out[7], in[7], n = family_modules(&shape, 0, names, site, offset, out, in);
    for (const char *p = targets; strcmp(targets, "all-linear") != 0 && *p != '\0';) {
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        int known = 0;
        for (int k = 0; k < n && !known; k++) { known = len == strlen(strrchr(names[k], '.') + 1) && strncmp(p, strrchr(names[k], '.') + 1, len) == 0; }
        if (!known) {
            fprintf(stderr, "Error: -T: this %s model has no module \"%.*s\"; it has:", b->llama ? "Llama-family" : "GPT-2", (int)len, p);
            for (int k = 0; k < n; k++) { fprintf(stderr, " %s", strrchr(names[k], '.') + 1); }
            fprintf(stderr, " (or all-linear)\n");
            exit(EXIT_FAILURE);
        }
        p += len + (comma != NULL);
    }
}

static void lora_create(Lora *lora, const Base *b, int r, float alpha, int rslora, const char *targets, uint64_t seed) {
    memset(lora, 0, sizeof(*lora));
    int modules;
    size_t params;
    lora_check_targets(b, r, targets, &modules, &params);
    lora->r = r;
    lora->alpha = alpha;
    lora->rslora = rslora;
    lora->scale = rslora ? alpha / sqrtf((float)r) : alpha / (float)r;
    lora->modules = (LoraModule *)calloc((size_t)modules + 1, sizeof(LoraModule));
    if (lora->modules == NULL) { fprintf(stderr, "Error: out of memory\n"); exit(EXIT_FAILURE); }
    LoraShape shape = base_shape(b);
    for (int l = 0; l < b->L; l++) {
        char names[7][128];
        int site[7], offset[7], out[7], in[7], n = family_modules(&shape, l, names, site, offset, out, in);
        for (int k = 0; k < n; k++) {
            if (!target_wanted(targets, names[k])) { continue; }
            LoraModule *m = &lora->modules[lora->num_modules++];
            snprintf(m->name, sizeof(m->name), "%.127s", names[k]);
            m->layer = l; m->site = site[k]; m->offset = offset[k]; m->out = out[k]; m->in = in[k];
            lora->num_params += (size_t)r * (in[k] + out[k]);
        }
    }
    lora_allocate(lora, 1, "the new adapter");
    for (int k = 0; k < lora->num_modules; k++) {
        LoraModule *m = &lora->modules[k];
        float bound = 1.0f / sqrtf((float)m->in);
        uint64_t key = rng_key(seed, (uint64_t)k + 1);
        for (size_t i = 0; i < (size_t)r * m->in; i++) { m->A[i] = bound * (float)(2.0 * rng_uniform_at(key, i) - 1.0); }
    }
}

// ----------------------------------------------------------------------------
// writing an adapter as PEFT does: a folder PeftModel.from_pretrained loads

// safetensors' layout (see the reader): 8 bytes of header length, the JSON header (padded
// with spaces to a multiple of 8), then each tensor's bytes, F32 little endian
static void lora_save(const Lora *lora, const Base *b, const char *dir, const char *base_path) {
    char path[MAX_PATH_LEN];
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) { die_file(dir, NULL, "cannot make the folder: %s", strerror(errno)); }
    // adapter_config.json: what PEFT needs to rebuild the modules
    // base_model_name_or_path: what PEFT's AutoPeftModel loads the base from, the Hugging Face
    // folder our model file was converted from (./convert notes it in the file), else null.
    // Our file's own name goes in adapter_model.safetensors' metadata, as base_model_file (a
    // key of ours in adapter_config.json would have PEFT warn that it is too old to know it).
    char base_name[6 * NOTE_ORIGIN_BYTES + 8] = "null", base_file[6 * MAX_PATH_LEN + 32] = "\"base_model_file\":";
    size_t at = strlen(base_file); // (json_quote writes a control character as 6 bytes)
    if (b->notes.origin[0] != '\0' && json_quote(b->notes.origin, base_name, sizeof(base_name)) >= sizeof(base_name)) { die_file(dir, NULL, "the base model's origin does not fit adapter_config.json's buffer"); }
    if (json_quote(base_path, base_file + at, sizeof(base_file) - at) >= sizeof(base_file) - at) { die_file(dir, NULL, "the base model's path is too long"); }
    size_t cap = 4096 + sizeof(base_name) + (size_t)lora->num_modules * 64;
    char *json = (char *)mallocCheck(cap);
    int n = snprintf(json, cap, "{\n  \"base_model_name_or_path\": %s,\n  \"bias\": \"none\",\n  \"fan_in_fan_out\": %s,\n"
                     "  \"inference_mode\": true,\n  \"init_lora_weights\": true,\n  \"lora_alpha\": %g,\n  \"lora_dropout\": %g,\n"
                     "  \"modules_to_save\": null,\n  \"peft_type\": \"LORA\",\n  \"r\": %d,\n  \"target_modules\": [",
                     base_name, b->llama ? "false" : "true", lora->alpha, lora->dropout, lora->r);
    int first = 1;
    for (int k = 0; k < lora->num_modules; k++) { // each leaf name once, in the order met
        const char *leaf = strrchr(lora->modules[k].name, '.') + 1;
        int seen = 0;
        for (int j = 0; j < k && !seen; j++) { seen = strcmp(strrchr(lora->modules[j].name, '.') + 1, leaf) == 0; }
        if (!seen) { n += snprintf(json + n, cap - (size_t)n, "%s\n    \"%s\"", first ? "" : ",", leaf); first = 0; }
    }
    n += snprintf(json + n, cap - (size_t)n, "\n  ],\n  \"task_type\": \"CAUSAL_LM\",\n  \"use_dora\": false,\n  \"use_rslora\": %s\n}\n",
                  lora->rslora ? "true" : "false");
    path_concat(path, dir, "/adapter_config.json");
    const void *bufs[3] = {json};
    size_t sizes[3] = {(size_t)n};
    write_file_atomic(path, bufs, sizes, 1);
    free(json);
    // adapter_model.safetensors: each module's A (r, in) then B (out, r), in PEFT's names;
    // they are back to back in params in this order, so the data is one buffer
    int n_out = 2 * lora->num_modules;
    StOut *outs = (StOut *)mallocCheck((size_t)(n_out > 0 ? n_out : 1) * sizeof(StOut));
    char (*names)[256] = (char (*)[256])mallocCheck((size_t)(n_out > 0 ? n_out : 1) * 256);
    for (int k = 0; k < lora->num_modules; k++) {
        const LoraModule *m = &lora->modules[k];
        snprintf(names[2 * k], 256, "base_model.model.%s.lora_A.weight", m->name);
        snprintf(names[2 * k + 1], 256, "base_model.model.%s.lora_B.weight", m->name);
        outs[2 * k] = (StOut){.name = names[2 * k], .dtype = "F32", .ndim = 2, .shape = {lora->r, m->in}};
        outs[2 * k + 1] = (StOut){.name = names[2 * k + 1], .dtype = "F32", .ndim = 2, .shape = {m->out, lora->r}};
    }
    size_t header_len, data_bytes;
    uint8_t *header = safetensors_header_bytes(outs, n_out, base_file, &header_len, &data_bytes);
    path_concat(path, dir, "/adapter_model.safetensors");
    bufs[0] = header; bufs[1] = lora->params;
    sizes[0] = header_len; sizes[1] = lora->num_params * sizeof(float);
    write_file_atomic(path, bufs, sizes, 2);
    free(outs);
    free(names);
    free(header);
}
// --- end shared-copy: lora-train-host ---

// ----------------------------------------------------------------------------
// the prompt templates (the tokenizer is lib/tokenizer.h's)

// --- begin shared-copy: alpaca-template ---
// The instruction template of the fine-tuning chapter (Alpaca's, Taori et al. 2023): the
// one place it is written down. finetune_lora.c trains on exactly this text, so a model it
// tuned answers the instruction when prompted the same way (-a 1).
#define ALPACA_PREAMBLE "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n"
#define ALPACA_WITH_INPUT                                                                                  \
    "Below is an instruction that describes a task, paired with an input that provides further context. " \
    "Write a response that appropriately completes the request.\n\n"                                       \
    "### Instruction:\n%s\n\n### Input:\n%s\n\n### Response:\n"
#define ALPACA_NO_INPUT ALPACA_PREAMBLE "### Instruction:\n%s\n\n### Response:\n"

// The prompt text for an instruction (and an optional input, NULL or "" for none); malloc'ed.
char *alpaca_prompt(const char *instruction, const char *input) {
    int with_input = input != NULL && input[0] != '\0';
    size_t n = strlen(ALPACA_WITH_INPUT) + strlen(instruction) + (with_input ? strlen(input) : 0) + 1;
    char *text = (char *)mallocCheck(n);
    if (with_input) { snprintf(text, n, ALPACA_WITH_INPUT, instruction, input); }
    else { snprintf(text, n, ALPACA_NO_INPUT, instruction); }
    return text;
}

// A conversation in the Alpaca template, for a model without a chat template of its own
// (GPT-2's tokenizer, ours): the system message (if it comes first) in place of the
// preamble, then each user message as an instruction and each assistant message as its
// response; with add_generation_prompt, "### Response:\n" last. As a Jinja chat template
// (dev/reference/chat_reference.py renders conversations with it, for the tests):
//   {%- if messages and messages[0]['role'] == 'system' %}{{ messages[0]['content'] + '\n\n' }}
//   {%- set messages = messages[1:] %}{%- else %}{{ PREAMBLE }}{%- endif %}
//   {%- for m in messages %}{%- if m['role'] == 'user' %}{{ '### Instruction:\n' + m['content'] + '\n\n' }}
//   {%- elif m['role'] == 'assistant' %}{{ '### Response:\n' + m['content'] + '\n\n' }}
//   {%- else %}{{ m['content'] + '\n\n' }}{%- endif %}{%- endfor %}
//   {%- if add_generation_prompt %}{{ '### Response:\n' }}{%- endif %}
// One user message gives alpaca_prompt's text. Malloc'ed.
char *alpaca_render(const ChatMessage *m, int n, int add_generation_prompt) {
    size_t cap = strlen(ALPACA_PREAMBLE) + 32;
    for (int i = 0; i < n; i++) { cap += strlen(m[i].content) + 32; }
    char *text = (char *)mallocCheck(cap);
    int first = n > 0 && strcmp(m[0].role, "system") == 0;
    size_t at = (size_t)snprintf(text, cap, "%s%s", first ? m[0].content : ALPACA_PREAMBLE, first ? "\n\n" : "");
    for (int i = first; i < n; i++) {
        const char *head = strcmp(m[i].role, "user") == 0 ? "### Instruction:\n" : strcmp(m[i].role, "assistant") == 0 ? "### Response:\n" : "";
        at += (size_t)snprintf(text + at, cap - at, "%s%s\n\n", head, m[i].content);
    }
    if (add_generation_prompt) { snprintf(text + at, cap - at, "### Response:\n"); }
    return text;
}

// --- end shared-copy: alpaca-template ---

// --- begin shared-copy: instruct-prompt ---
// -a 1: an instruction (and an optional input) as the model expects it: in its chat
// template as one user message (after the system message, NULL for the template's own),
// or, for a tokenizer without one (GPT-2's, our models), in the Alpaca template (where a
// system message takes the opening sentence's place, as in alpaca_render). Malloc'ed.
char *instruct_prompt(const Tokenizer *tok, const char *system, const char *instruction, const char *input) {
    if ((tok == NULL || tok->chat == CHAT_NONE) && system != NULL) {
        char *plain = alpaca_prompt(instruction, input), *body = strstr(plain, "### Instruction:"); // (after the opening sentence)
        size_t n = strlen(system) + strlen(body) + 3;
        char *text = (char *)mallocCheck(n);
        snprintf(text, n, "%s\n\n%s", system, body);
        free(plain);
        return text;
    }
    if (tok == NULL || tok->chat == CHAT_NONE) { return alpaca_prompt(instruction, input); }
    if (input == NULL || input[0] == '\0') { return tokenizer_chat_prompt(tok, system, instruction); }
    size_t n = strlen(instruction) + strlen(input) + 3;
    char *user = (char *)mallocCheck(n);
    snprintf(user, n, "%s\n\n%s", instruction, input);
    char *text = tokenizer_chat_prompt(tok, system, user);
    free(user);
    return text;
}

// A conversation (-a 1 without -i, or -f's {"messages": [...]}) in the model's chat
// template, or in the Alpaca template for a tokenizer without one; with the generation
// prompt. Malloc'ed.
char *conversation_prompt(const Tokenizer *tok, const ChatMessage *m, int n) {
    if (tok == NULL || tok->chat == CHAT_NONE) { return alpaca_render(m, n, 1); }
    return tokenizer_chat_render(tok, m, n, 1);
}
// --- end shared-copy: instruct-prompt ---

#ifndef TESTING // (test_finetune_lora.cu takes what is above)

// -P's events go on the stream where the work is queued
static void phases_device_setup(Phases *p) { p->clock.stream = main_stream; }
static void gpu_budget_flag(const char *flag, const char *value) { gpu_budget_set(flag, value); } // -G
// the benchmark's peak memory: the most this program held at once (its allocations; cuBLAS's
// workspace not among them), and the device's memory in use now (all of it: CUDA's context,
// cuBLAS, other processes)
static void print_peak_memory(void) {
    size_t free_bytes = 0, total = 0;
    cudaCheck(cudaMemGetInfo(&free_bytes, &total));
    printf("peak memory: %.1f MiB allocated by this program at most (%zu bytes: --plan's total); %.1f MiB of the GPU's %.1f MiB in "
           "use now (CUDA's context and cuBLAS's workspace included)\n", peak_bytes / 1048576.0, (size_t)peak_bytes,
           (total - free_bytes) / 1048576.0, total / 1048576.0);
}

// what the run holds in memory, by kind, on the GPU (the activations: what acts_allocate took)
static void print_memory(const Base *b, const Lora *lora, const Acts *a) {
    size_t base_params = b->llama ? b->llama_weights.num_parameters : b->gpt2.num_parameters;
    double base_mib = base_params * (double)sizeof(floatX) / (1 << 20);
    if (b->quant != QUANT_NONE) { // the 4-bit bands as held, the rest in floatX, and one layer's site dequantized
        size_t C = b->C, Q = (size_t)b->NH * b->HS, QKV = Q + 2 * (size_t)b->NKV * b->HS, MLP = (b->llama ? 2 : 1) * (size_t)b->H;
        size_t linear = (size_t)b->L * (QKV * C + C * Q + MLP * C + C * b->H), widest = QKV * C > MLP * C ? QKV * C : MLP * C, quant = 0;
        widest = widest > C * Q ? widest : C * Q;
        widest = widest > C * b->H ? widest : C * b->H;
        for (size_t k = 0; k < (size_t)b->L * NUM_SITES * 3; k++) { quant += b->qw[k].packed != NULL ? quant4_bytes(&b->qw[k]) : 0; }
        base_mib = ((base_params - linear + widest) * (double)sizeof(floatX) + quant) / (1 << 20);
    }
    printf("memory on the GPU (MiB): base weights %.1f (%s, no gradients), adapter %.2f, its gradients %.2f, AdamW's "
           "moments %.2f (fp32), activations %.1f (B=%d, T=%d%s)\n", base_mib,
           b->quant != QUANT_NONE ? "the linear layers 4-bit, one layer's dequantized, the rest " BASE_TYPE : BASE_TYPE,
           lora->num_params * 4.0 / (1 << 20), lora->num_params * 4.0 / (1 << 20), lora->num_params * 8.0 / (1 << 20),
           a->bytes / 1048576.0, a->B, a->T, a->recompute ? ", recomputed: one block's" : ", every block's");
}

// --plan: what this program would allocate on the GPU, part by part, for base b's shape: the
// sums base_to_device, quant_to_device, lora_to_device and acts_allocate make (gpu_alloc's
// ledger: -B 1's peak is this total; dev/test/test_finetune_lora_cuda.sh checks it). cuBLAS's
// workspace and CUDA's own context are not among them.
#define PLAN_WHERE "the GPU, the base in " BASE_TYPE "; CUDA's context and cuBLAS's workspace not counted"
#define PLAN_RECOMPUTE 1   // (-A 1 keeps one layer's activations)
#define PLAN_LOAD_COUNTS 0 // (loading is host memory: printed, not counted against the card)
static void memory_plan(MemoryPlan *p, const Base *b, const PlanRun *run) {
    memset(p, 0, sizeof(*p));
    size_t C = b->C, L = b->L, Q = (size_t)b->NH * b->HS, QKV = Q + 2 * (size_t)b->NKV * b->HS, H = b->H;
    size_t MLP = (b->llama ? 2 : 1) * H, Vp = b->Vp, N = (size_t)run->B * run->T;
    int quant = run->quant != QUANT_NONE, qkv_bias = b->llama ? b->llama_weights.config.qkv_bias : 1;
    int tied = b->llama ? b->llama_weights.config.tied : 1;
    // base_to_device's tensors (those the family has), each rounded up to 64 numbers
    size_t sizes[17] = {Vp * C, b->llama ? 0 : (size_t)b->maxT * C, L * C, b->llama ? 0 : L * C, quant ? 0 : L * QKV * C,
                        qkv_bias ? L * QKV : 0, quant ? 0 : L * C * Q, b->llama ? 0 : L * C, L * C, b->llama ? 0 : L * C,
                        quant ? 0 : L * MLP * C, b->llama ? 0 : L * MLP, quant ? 0 : L * C * H, b->llama ? 0 : L * C, C,
                        b->llama ? 0 : C, tied ? 0 : Vp * C};
    double weights = 0.0;
    for (int k = 0; k < 17; k++) { weights += (double)((sizes[k] + 63) / 64 * 64) * sizeof(floatX); }
    plan_add(p, quant ? "base weights, " BASE_TYPE " (embeddings, norms, biases, head)" : "base weights, " BASE_TYPE, weights);
    if (quant) { // quant_to_device: each piece of each band rounded up to 256 bytes (the allocation's sum), and one site's scratch
        int Qi = (int)Q, KV = b->NKV * b->HS, Ci = (int)C, Hi = (int)H;
        int rows[NUM_SITES][3] = {{Qi, KV, KV}, {Ci, 0, 0}, {Hi, Hi, 0}, {Ci, 0, 0}}, gpt2_rows[NUM_SITES][3] = {{3 * Ci, 0, 0}, {Ci, 0, 0}, {4 * Ci, 0, 0}, {Ci, 0, 0}};
        int in[NUM_SITES] = {Ci, Qi, Ci, Hi};
        double codes = 0.0, constants = 0.0;
        for (int s = 0; s < NUM_SITES; s++) {
            for (int k = 0; k < 3; k++) {
                size_t n = (size_t)(b->llama ? rows[s][k] : gpt2_rows[s][k]) * in[s], blocks = (n + run->blocksize - 1) / run->blocksize;
                if (n == 0) { continue; }
                codes += (double)L * ((n + 1) / 2 + 255);
                constants += (double)L * (run->nested ? blocks + 255 + (blocks + QUANT_NESTED_BLOCK - 1) / QUANT_NESTED_BLOCK * 4 + 255 + 256 * 4
                                                      : blocks * 4 + 255);
            }
        }
        plan_add(p, "base weights, 4-bit codes (the linear layers)", codes);
        plan_add(p, "quantization constants (absmax, nested, maps)", constants);
        plan_add(p, "one layer's weight, dequantized (" BASE_TYPE ")", (double)max3(QKV * C, MLP * C, max3(C * Q, C * H, 0)) * sizeof(floatX));
    }
    plan_add(p, "adapter (fp32)", (double)run->adapter_params * 4);
    plan_add(p, "its gradients, and the norm's partial sums", (double)run->adapter_params * 4 + NORM_BLOCKS * sizeof(double));
    plan_add(p, "AdamW's moments", (double)run->adapter_params * 8);
    size_t a[NUM_ACTS], kept = 0, scratch = 0;
    acts_sizes(a, b, run->modules, run->r, run->dropout, run->B, run->T, run->recompute, run->flash);
    for (int k = 0; k < ACTS_LOGITS; k++) { kept += a[k]; }
    for (int k = ACTS_SCRATCH; k < NUM_ACTS; k++) { scratch += a[k]; }
    plan_add(p, run->recompute ? "activations kept: each layer's input, one layer's rest" : "activations kept for the backward pass, every layer's",
             (double)kept * 4);
    size_t one[NUM_ACTS];
    acts_sizes(one, b, run->modules, run->r, run->dropout, run->B, run->T, 1, run->flash); // (a layer's share: what -A 1 keeps of it)
    for (int k = 1; k < 10; k++) { p->per_layer += (double)one[k] * 4; }
    plan_add(p, "logits, a chunk of rows at a time; the rows' losses; their gradient into nf",
             (double)(a[ACTS_LOGITS] + a[ACTS_LOGITS + 1] + a[ACTS_LOGITS + 2]) * 4);
    plan_add(p, "backward scratch, LoRA dropout's, RoPE's table, the batch", (double)scratch * 4 + (double)((2 * N + 63) / 64 * 64) * 4);
    if (cast_floats(b, run->B, run->T) > 0) { plan_add(p, "the matmuls' inputs in " BASE_TYPE, (double)cast_floats(b, run->B, run->T) * sizeof(floatX)); }
}

// --- begin shared-copy: finetune-main ---
// ----------------------------------------------------------------------------
// the instruction data: Alpaca JSONL, checked, laid out in the model's template

// One example: the prompt (the instruction and input in the model's chat template, or
// Alpaca's for a model without one), then the response and the end token. The loss is on
// the response and the end token only: the model learns to answer, not to ask.
typedef struct {
    int *tokens;
    int len, prompt_len;
} Example;

typedef struct {
    Example *examples;
    int n;
} Dataset;

// a field of a record: 1 with a string (maybe empty) in *out (malloc'ed), 0 if the key is
// missing, -1 if it is not a string
static int record_field(const Json *j, const char *key, char **out) {
    int at = json_get(j, 0, key);
    *out = NULL;
    if (at < 0) { return 0; }
    if (j->tokens[at].type != JSON_STRING) { return -1; }
    size_t cap = j->tokens[at].end - j->tokens[at].start + 1;
    *out = (char *)mallocCheck(cap);
    if (json_string(j, at, *out, cap) < 0) { free(*out); *out = NULL; return -1; }
    return 1;
}

static int compare_ints(const void *a, const void *b) { return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b); }

// Reads path: one JSON object per line with "instruction", "input" (optional) and "output".
// A line that is not a JSON object stops us (its number in the message). A record with an
// empty or missing instruction or output, invalid UTF-8, the same as an earlier one, or more
// than T tokens laid out is counted and dropped, or (refuse) reported and the run stops.
// Then a seeded val_frac of the rest (at least 1) is held out for validation.
static void read_examples(Dataset *train, Dataset *val, const char *path, const Tokenizer *tok, int T, int refuse, float val_frac,
                          uint64_t seed) {
    size_t len;
    char *text = (char *)read_whole_file(path, &len, "the instruction data: JSONL, one {\"instruction\", \"input\", \"output\"} a line (make data/iso/train.jsonl writes some)");
    Example *all = NULL;
    int n = 0, cap = 0, lines = 0, empty = 0, bad_utf8 = 0, duplicates = 0, too_long = 0, first_bad[4] = {0, 0, 0, 0};
    uint64_t *seen = NULL;
    int *lengths = NULL;
    int32_t *ids = (int32_t *)mallocCheck(tokenizer_max_ids(tok, len + 4096) * sizeof(int32_t));
    for (char *line = text; line < text + len;) {
        char *end = (char *)memchr(line, '\n', (size_t)(text + len - line));
        size_t line_len = end != NULL ? (size_t)(end - line) : (size_t)(text + len - line);
        lines++;
        char *next = line + line_len + 1;
        if (line_len == 0 || (line_len == 1 && line[0] == '\r')) { line = next; continue; } // (a blank line)
        Json j;
        char err[256];
        int parsed = json_parse(&j, line, line_len, err, sizeof(err)) == 0;
        if (!parsed || j.tokens[0].type != JSON_OBJECT) {
            die_file(path, "each line must be one JSON object: {\"instruction\": ..., \"input\": ..., \"output\": ...}",
                     "line %d: %s", lines, parsed ? "not a JSON object" : err);
        }
        char *instruction, *input, *output;
        int fi = record_field(&j, "instruction", &instruction), fn = record_field(&j, "input", &input), fo = record_field(&j, "output", &output);
        json_free(&j);
        if (fi < 0 || fn < 0 || fo < 0) { die_file(path, NULL, "line %d: instruction, input and output must be strings", lines); }
        int problem = -1; // 0 empty, 1 UTF-8, 2 duplicate, 3 too long
        if (fi == 0 || fo == 0 || instruction[0] == '\0' || output[0] == '\0') { problem = 0; }
        else if (!utf8_valid((const uint8_t *)instruction, strlen(instruction)) || !utf8_valid((const uint8_t *)output, strlen(output)) ||
                 (input != NULL && !utf8_valid((const uint8_t *)input, strlen(input)))) { problem = 1; }
        if (problem < 0) { // exact duplicates: the three fields' hash (FNV-1a 64), compared with every earlier one
            uint64_t hash = 14695981039346656037ull;
            const char *fields[3] = {instruction, input != NULL ? input : "", output};
            for (int f = 0; f < 3; f++) {
                for (const unsigned char *p = (const unsigned char *)fields[f]; ; p++) {
                    hash = (hash ^ *p) * 1099511628211ull;
                    if (*p == '\0') { break; }
                }
            }
            for (int k = 0; k < n && problem < 0; k++) { problem = seen[k] == hash ? 2 : -1; }
            if (problem < 0) {
                char *prompt = instruct_prompt(tok, NULL, instruction, input);
                size_t m = 0;
                if (tok->add_bos && tok->chat == CHAT_NONE && tok->bos_token >= 0) { ids[m++] = tok->bos_token; }
                m += tokenizer_encode((Tokenizer *)tok, (const uint8_t *)prompt, strlen(prompt), 1, ids + m);
                int prompt_len = (int)m;
                m += tokenizer_encode((Tokenizer *)tok, (const uint8_t *)output, strlen(output), 0, ids + m);
                ids[m++] = tok->eot_token;
                free(prompt);
                if ((int)m > T + 1) { problem = 3; } // (T inputs and T labels: T + 1 tokens)
                else {
                    if (n == cap) {
                        cap = cap == 0 ? 1024 : 2 * cap;
                        all = (Example *)realloc(all, (size_t)cap * sizeof(Example));
                        seen = (uint64_t *)realloc(seen, (size_t)cap * sizeof(uint64_t));
                        lengths = (int *)realloc(lengths, (size_t)cap * sizeof(int));
                        if (all == NULL || seen == NULL || lengths == NULL) { die_file(path, NULL, "out of memory"); }
                    }
                    all[n].tokens = (int *)mallocCheck(m * sizeof(int));
                    for (size_t i = 0; i < m; i++) { all[n].tokens[i] = ids[i]; }
                    all[n].len = (int)m;
                    all[n].prompt_len = prompt_len;
                    seen[n] = hash;
                    lengths[n] = (int)m;
                    n++;
                }
            }
        }
        if (problem >= 0) {
            int *count[4] = {&empty, &bad_utf8, &duplicates, &too_long};
            (*count[problem])++;
            if (first_bad[problem] == 0) { first_bad[problem] = lines; }
        }
        free(instruction); free(input); free(output);
        line = next;
    }
    free(ids);
    free(text);
    int dropped = empty + bad_utf8 + duplicates + too_long;
    printf("data: %s: %d records; %d dropped: %d with an empty or missing instruction or output, %d with invalid UTF-8, "
           "%d duplicates, %d longer than T = %d tokens\n", path, n + dropped, dropped, empty, bad_utf8, duplicates, too_long, T);
    if (refuse && dropped > 0) {
        const char *what[4] = {"an empty or missing field", "invalid UTF-8", "a duplicate", "longer than T (-t)"};
        for (int k = 0; k < 4; k++) {
            if (first_bad[k] > 0) { fprintf(stderr, "Error: %s: line %d: %s\n", path, first_bad[k], what[k]); }
        }
        fprintf(stderr, "HINT: -x drop leaves such records out instead\n");
        exit(EXIT_FAILURE);
    }
    if (n < 2) { die_file(path, NULL, "%d usable records: too few to train and validate on", n); }
    qsort(lengths, (size_t)n, sizeof(int), compare_ints);
    printf("tokens per example (template, response, end token): min %d, median %d, p90 %d, p99 %d, max %d\n", lengths[0],
           lengths[n / 2], lengths[(int)(0.9 * (n - 1))], lengths[(int)(0.99 * (n - 1))], lengths[n - 1]);
    free(lengths);
    free(seen);
    // the split: a seeded shuffle, then the last val_frac
    for (int i = n - 1; i > 0; i--) {
        int k = (int)(rng_uniform_at(rng_key(seed, 101), (uint64_t)i) * (i + 1));
        Example t = all[i]; all[i] = all[k]; all[k] = t;
    }
    int nv = (int)(val_frac * n);
    nv = nv < 1 ? 1 : nv;
    train->examples = all;
    train->n = n - nv;
    val->examples = all + (n - nv);
    val->n = nv;
    printf("split: %d for training, %d for validation (seed %llu)\n", train->n, val->n, (unsigned long long)seed);
}

// A micro-batch of B examples into tokens and labels (B, T): example e at row b, padded
// with token 0 after its end; label[t] = token t + 1 where that token is the response's or
// the end token, -100 elsewhere (the prompt, the padding). Returns the labelled count.
static int fill_batch(int *tokens, int *labels, const Dataset *d, const int *order, int first, int B, int T) {
    int count = 0;
    for (int b = 0; b < B; b++) {
        const Example *e = &d->examples[order[(first + b) % d->n]];
        for (int t = 0; t < T; t++) {
            tokens[b * T + t] = t < e->len ? e->tokens[t] : 0;
            int labelled = t + 1 < e->len && t + 1 >= e->prompt_len;
            labels[b * T + t] = labelled ? e->tokens[t + 1] : -100;
            count += labelled;
        }
    }
    return count;
}

// ----------------------------------------------------------------------------
// checkpoints: a run that stops can go on, bit for bit

// At step s (-S): the adapter as PEFT's files in OUT/step_<s>/ (usable as it is), and
// OUT/state_<s>.bin, what else the run needs to go on exactly: int32 header [magic, version,
// step, epoch, cursor, training records, B, accum, T, steps, r, seed (2 x 32 bits),
// parameters, 0...] (256 x int32), the training order (records x int32), AdamW's m and v
// (2 x parameters x float32). All written atomically: a crash leaves the last whole one.
#define STATE_MAGIC 20261202
typedef struct {
    int step, epoch, cursor;
} Progress;

static void checkpoint_save(const char *out, const Lora *lora, const Base *b, const char *model_path, const Progress *pr,
                            const int *order, int n_train, int B, int accum, int T, int steps, uint64_t seed) {
    char dir[MAX_PATH_LEN], path[MAX_PATH_LEN];
    format_path(dir, sizeof(dir), "%s/step_%06d", out, pr->step);
    lora_save(lora, b, dir, model_path);
    int h[256] = {STATE_MAGIC, 1, pr->step, pr->epoch, pr->cursor, n_train, B, accum, T, steps, lora->r, (int)(seed & 0x7fffffff),
                  (int)(seed >> 31), (int)lora->num_params, b->quant, b->quant != QUANT_NONE ? b->quant_blocksize : 0,
                  b->quant != QUANT_NONE ? b->quant_nested : 0};
    const void *bufs[4] = {h, order, lora->m, lora->v};
    size_t sizes[4] = {sizeof(h), (size_t)n_train * sizeof(int), lora->num_params * sizeof(float), lora->num_params * sizeof(float)};
    format_path(path, sizeof(path), "%s/state_%06d.bin", out, pr->step);
    write_file_atomic(path, bufs, sizes, 4);
}

// the newest step with both its state and its adapter in out, -1 if none
static int find_latest_adapter_checkpoint(const char *out) {
    char pattern[MAX_PATH_LEN], dir[MAX_PATH_LEN];
    format_path(pattern, sizeof(pattern), "%s/state_*.bin", out);
    glob_t g;
    int latest = -1;
    if (glob(pattern, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++) {
            int step;
            if (sscanf(strrchr(g.gl_pathv[i], '/') + 1, "state_%d.bin", &step) != 1) { continue; }
            format_path(dir, sizeof(dir), "%s/step_%06d/adapter_model.safetensors", out, step);
            if (access(dir, R_OK) == 0 && step > latest) { latest = step; }
        }
        globfree(&g);
    }
    return latest;
}

// Reads state_<step>.bin into pr, order and the moments; the run's settings must be the
// ones it was written with (else one error saying which flags to give)
static void checkpoint_load(const char *out, int step, Lora *lora, const Base *b, Progress *pr, int *order, int n_train, int B,
                            int accum, int T, int steps, uint64_t seed) {
    char path[MAX_PATH_LEN];
    format_path(path, sizeof(path), "%s/state_%06d.bin", out, step);
    FILE *fp = fopenCheck(path, "rb");
    int h[256];
    if (fread(h, sizeof(int), 256, fp) != 256 || h[0] != STATE_MAGIC || h[1] != 1) { die_file(path, NULL, "not a finetune_lora state file (magic %d)", STATE_MAGIC); }
    if (h[5] != n_train || h[6] != B || h[7] != accum || h[8] != T || h[9] != steps || h[10] != lora->r || h[11] != (int)(seed & 0x7fffffff) ||
        h[12] != (int)(seed >> 31) || h[13] != (int)lora->num_params) {
        die_file(path, "resume with the flags and data of the run that wrote it",
                 "written by a run with %d training records, -b %d -k %d, T %d, %d steps, -r %d, seed %d; this one has %d, -b %d -k %d, "
                 "T %d, %d steps, -r %d, seed %d", h[5], h[6], h[7], h[8], h[9], h[10], h[11], n_train, B, accum, T, steps, lora->r,
                 (int)(seed & 0x7fffffff));
    }
    // -Q: the base the adapter trained on (fields 14..16; 0 in a state from before -Q, or without it)
    int quant_blocksize = b->quant != QUANT_NONE ? b->quant_blocksize : 0, quant_nested = b->quant != QUANT_NONE ? b->quant_nested : 0;
    if (h[14] != b->quant || h[15] != quant_blocksize || h[16] != quant_nested) {
        char was[64], is[64];
        snprintf(was, sizeof(was), h[14] == QUANT_NONE ? "fp32 (no -Q)" : "-Q %s:%d:%d", quant4_name(h[14]), h[15], h[16]);
        snprintf(is, sizeof(is), b->quant == QUANT_NONE ? "fp32 (no -Q)" : "-Q %s:%d:%d", quant4_name(b->quant), quant_blocksize, quant_nested);
        die_file(path, "resume with the -Q of the run that wrote it", "written by a run whose base was %s; this one's is %s", was, is);
    }
    if (h[2] != step || h[3] < 0 || h[4] < 0 || h[4] > n_train) { die_file(path, NULL, "its header is not a state's: corrupt"); }
    pr->step = h[2];
    pr->epoch = h[3];
    pr->cursor = h[4];
    freadCheck(order, sizeof(int), (size_t)n_train, fp);
    freadCheck(lora->m, sizeof(float), lora->num_params, fp);
    freadCheck(lora->v, sizeof(float), lora->num_params, fp);
    for (int i = 0; i < n_train; i++) {
        if (order[i] < 0 || order[i] >= n_train) { die_file(path, NULL, "its record order is corrupt"); }
    }
    fcloseCheck(fp);
}

// ----------------------------------------------------------------------------
// the leakage check (-E): an evaluation says nothing if its questions were trained on

// one JSONL file's records as (text, line) pairs: for each record, the instruction and its
// input ("what was asked", as one lowercase line of single spaces), and every field's text
// (where an answer would show); the fields absent are empty
typedef struct {
    char *asked, *all;
    int line;
} LeakRecord;

static char *normalized(const char *s) { // lowercase ASCII, runs of white space as one space, trimmed
    size_t n = strlen(s), k = 0;
    char *out = (char *)mallocCheck(n + 1);
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') {
            if (k > 0 && out[k - 1] != ' ') { out[k++] = ' '; }
            continue;
        }
        out[k++] = ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch;
    }
    while (k > 0 && out[k - 1] == ' ') { k--; }
    out[k] = '\0';
    return out;
}

static int read_leak_records(const char *path, const char *answer_key, LeakRecord **out, char ***answers) {
    size_t len;
    char *data = (char *)read_whole_file(path, &len, NULL);
    int n = 0, cap = 64, line_no = 0;
    LeakRecord *rs = (LeakRecord *)mallocCheck((size_t)cap * sizeof(LeakRecord));
    if (answers != NULL) { *answers = (char **)mallocCheck((size_t)cap * sizeof(char *)); }
    for (size_t start = 0; start < len;) {
        size_t end = start;
        while (end < len && data[end] != '\n') { end++; }
        line_no++;
        const char *line = data + start;
        size_t line_len = end - start;
        start = end + 1;
        while (line_len > 0 && (line[line_len - 1] == '\r' || line[line_len - 1] == ' ')) { line_len--; }
        if (line_len == 0) { continue; }
        Json j;
        char err[256] = "";
        if (json_parse(&j, line, line_len, err, sizeof(err)) != 0) { die_file(path, NULL, "line %d: JSON error: %s", line_no, err); }
        if (j.tokens[0].type != JSON_OBJECT) { die_file(path, NULL, "line %d is not a JSON object", line_no); }
        char *f[3], *answer = NULL;
        const char *keys[3] = {"instruction", "input", "output"};
        for (int k = 0; k < 3; k++) {
            if (record_field(&j, keys[k], &f[k]) < 0) { die_file(path, NULL, "line %d: %s is not a string", line_no, keys[k]); }
        }
        if (answer_key != NULL && (record_field(&j, answer_key, &answer) <= 0 || answer[0] == '\0')) {
            die_file(path, "-E takes an evaluation's questions, each with its \"answer\" (data/iso/eval.jsonl)",
                     "line %d: no \"%s\" string", line_no, answer_key);
        }
        int p = answer_key != NULL ? json_get(&j, 0, "partial") : -1; // (its other forms, one a line after it)
        if (p >= 0 && j.tokens[p].type == JSON_ARRAY) {
            for (int k = 0, at = p + 1; k < j.tokens[p].size; k++, at = j.tokens[at].next) {
                size_t have = strlen(answer), cap_more = j.tokens[at].end - j.tokens[at].start + 2;
                answer = (char *)realloc(answer, have + cap_more);
                if (answer == NULL) { die_file(path, NULL, "out of memory"); }
                answer[have] = '\n';
                if (json_string(&j, at, answer + have + 1, cap_more) < 0) { answer[have] = '\0'; }
            }
        }
        json_free(&j);
        if (n == cap) {
            cap *= 2;
            rs = (LeakRecord *)realloc(rs, (size_t)cap * sizeof(LeakRecord));
            if (answers != NULL) { *answers = (char **)realloc(*answers, (size_t)cap * sizeof(char *)); }
            if (rs == NULL || (answers != NULL && *answers == NULL)) { die_file(path, NULL, "out of memory"); }
        }
        size_t total = 3;
        for (int k = 0; k < 3; k++) { total += f[k] != NULL ? strlen(f[k]) + 1 : 0; }
        char *asked = (char *)mallocCheck(total), *all = (char *)mallocCheck(total);
        snprintf(asked, total, "%s\n%s", f[0] != NULL ? f[0] : "", f[1] != NULL ? f[1] : "");
        snprintf(all, total, "%s\n%s\n%s", f[0] != NULL ? f[0] : "", f[1] != NULL ? f[1] : "", f[2] != NULL ? f[2] : "");
        rs[n].asked = normalized(asked);
        rs[n].all = all;
        rs[n].line = line_no;
        if (answers != NULL) { (*answers)[n] = answer; }
        n++;
        free(asked);
        for (int k = 0; k < 3; k++) { free(f[k]); }
    }
    free(data);
    *out = rs;
    return n;
}

static int ascii_alnum(char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

// whether word (a whole word of letters and digits) is in text, not inside a longer one
static int contains_word(const char *text, const char *word) {
    size_t n = strlen(word);
    for (const char *p = strstr(text, word); p != NULL; p = strstr(p + 1, word)) {
        int before = p > text && ascii_alnum(p[-1]), after = ascii_alnum(p[n]);
        if (!before && !after) { return 1; }
    }
    return 0;
}

// Refuses (exit 1, naming lines) if an evaluation question was trained on: the same
// instruction and input as a record of the data (case and white space aside), or its
// expected answer (or one of its "partial" forms) a word of any record (whichever field). Both files whole: the validation
// records are held out for the loss, but they come from the same data.
static void check_leakage(const char *data_path, const char *eval_path) {
    LeakRecord *train, *eval;
    char **answers;
    int nt = read_leak_records(data_path, NULL, &train, NULL), ne = read_leak_records(eval_path, "answer", &eval, &answers);
    int leaked = 0, shown = 0;
    for (int e = 0; e < ne; e++) {
        int hit = 0;
        for (int t = 0; t < nt; t++) {
            int same = strcmp(eval[e].asked, train[t].asked) == 0, answer = 0;
            for (char *a = answers[e]; *a != '\0' && !answer;) { // the answer and its partial forms, a line each
                char *end = strchr(a, '\n'), keep = end != NULL ? *end : '\0';
                if (end != NULL) { *end = '\0'; }
                answer = a[0] != '\0' && contains_word(train[t].all, a);
                if (end != NULL) { *end = keep; }
                a = end != NULL ? end + 1 : a + strlen(a);
            }
            if (!same && !answer) { continue; }
            hit = 1;
            if (shown++ < 5) {
                fprintf(stderr, "leak: %s line %d: %s %s line %d\n", eval_path, eval[e].line,
                        same ? "the same question as" : "its answer is a word of", data_path, train[t].line);
            }
        }
        leaked += hit;
    }
    if (leaked > 0) {
        die_file(eval_path, "drop those records from the training data (data/instructions holds countries out for this), or those questions",
                 "%d of its %d questions are in the training data %s (asked there, or their answer a word there): "
                 "an evaluation on them measures memory", leaked, ne, data_path);
    }
    printf("leakage: none of %s's %d questions and answers is in %s's %d records\n", eval_path, ne, data_path, nt);
    for (int i = 0; i < nt; i++) { free(train[i].asked); free(train[i].all); }
    for (int i = 0; i < ne; i++) { free(eval[i].asked); free(eval[i].all); free(answers[i]); }
    free(train); free(eval); free(answers);
}

// ----------------------------------------------------------------------------
// what a run is made of: the schedule, the flags, the validation loss, the benchmark

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

typedef struct {
    const char *model, *tokenizer, *data, *eval, *out, *targets, *init, *merge;
    int r, rslora, B, accum, T, steps, epochs, warmup, val_every, refuse, save_every, resume, recompute, flash, bench;
    float alpha, dropout, lr, weight_decay, clip, val_frac, final_frac;
    uint64_t seed;
    int phase_every;
    int dropout_set; // -D was given (else an adapter read from a folder keeps its own)
    int quant, quant_blocksize, quant_nested; // -Q: the base's linear layers in 4 bits (QUANT_NONE: fp32)
    int plan;           // --plan: print what the run would hold, and what fits -G GiB; run nothing
    const char *budget; // -G's value (finetune_loracu's budget; --plan's memory)
} Options;

// The defaults (-h shows them). r 8 and alpha 16 on every linear layer, lr 1e-3 with a short
// warm-up, no weight decay: the usual LoRA recipe (PEFT's examples, alpaca-lora) for a small
// model and a couple of thousand records. LoRA dropout 0.05 as alpaca-lora and QLoRA's
// smaller runs use (PEFT's own default is 0: -D 0): with a few epochs over small data, a
// little dropout on the adapter's input keeps it from memorising the records.
static const Options DEFAULTS = {
    .model = "data/smollm2/SmolLM2-135M-Instruct.bin", .tokenizer = NULL, .data = "data/iso/train.jsonl", .eval = NULL,
    .out = "log_lora", .targets = "all-linear", .init = NULL, .merge = NULL,
    .r = 8, .rslora = 0, .B = 4, .accum = 4, .T = 128, .steps = 0, .epochs = 1, .warmup = 10, .val_every = 50, .refuse = 0,
    .save_every = 0, .resume = 0, .recompute = 0, .flash = 0, .bench = 0,
    .alpha = 16.0f, .dropout = 0.05f, .lr = 1e-3f, .weight_decay = 0.0f, .clip = 1.0f, .val_frac = 0.05f, .final_frac = 0.1f,
    .seed = 1337, .phase_every = 0, .dropout_set = 0, .quant = QUANT_NONE, .quant_blocksize = 64, .quant_nested = 1, .plan = 0,
    .budget = NULL};

static void print_usage(const Options *d) {
    printf("usage: %s [flags]    LoRA fine-tuning of a model file on instruction data (Alpaca JSONL)\n"
           "  -m FILE   the base model, frozen: our GPT-2 or Llama-family model file [%s]\n"
           "  -g FILE   its tokenizer [the model's NAME_tokenizer.bin, else data/gpt2]\n"
           "  -d FILE   the training data, JSONL: instruction, input, output [%s]\n"
           "  -E FILE   an evaluation's questions (JSONL with \"answer\"; infer -E asks them): refuse to train if one of\n"
           "            them, or its answer, is in the training data (leakage) [none]\n"
           "  -o DIR    where the adapter (PEFT's files) and metrics.tsv go [%s]\n"
           "  -i DIR    start from this adapter (PEFT's files; its rank, alpha, modules and dropout) instead of a new one\n"
           "  -M FILE   no training: merge -i's adapter into the model and write it to FILE (with its tokenizer beside it),\n"
           "            after checking on -d's validation records that it computes what model + adapter do\n"
           "  -T LIST   the modules to adapt: all-linear, or PEFT names (q_proj,v_proj; GPT-2: c_attn,c_proj,c_fc) [%s]\n"
           "  -r N      LoRA's rank [%d]\n"
           "  -a X      LoRA's alpha: the update is scaled by alpha / r [%g]\n"
           "  -R 0|1    rsLoRA: scale by alpha / sqrt(r) [%d]\n"
           "  -D X      LoRA dropout: the probability that an entry of an adapter's input is dropped (PEFT's default: 0;\n"
           "            with -i or -y 1, the adapter's own unless -D is given) [%g]\n"
           "  -b N      sequences per micro-batch [%d]\n"
           "  -k N      micro-batches per step (gradient accumulation) [%d]\n"
           "  -t N      tokens per sequence, T: the longest example (printed with the data) must fit [%d]\n"
           "  -x 0|1    records with a problem (empty field, bad UTF-8, duplicate, longer than T): 0 drop, 1 refuse [%d]\n"
           "  -e N      epochs over the training records (when -n is 0) [%d]\n"
           "  -n N      optimizer steps (0: from -e) [%d]\n"
           "  -l X      peak learning rate (AdamW) [%g]\n"
           "  -u N      warm-up steps, then a cosine down to -q x peak [%d]\n"
           "  -q X      the cosine's end, a fraction of the peak [%g]\n"
           "  -w X      weight decay [%g]\n"
           "  -c X      clip the gradient to this norm (0: never) [%g]\n"
           "  -v N      validation loss every N steps (and at the end) [%d]\n"
           "  -V X      fraction of the records held out for validation [%g]\n"
           "  -S N      a checkpoint every N steps (OUT/step_N/: the adapter; OUT/state_N.bin), 0: none [%d]\n"
           "  -y 0|1    resume from the newest checkpoint in -o, with the same flags and data [%d]\n"
           "  -A 0|1    activation recomputation: keep only each block's input, run the block again in the\n"
           "            backward pass: the same numbers, less memory, about a third more compute [%d]\n"
           "  -F 0|1    flash attention: tiles and an online softmax, the probabilities made again in the backward\n"
           "            pass; keeps (B, heads, T) numbers a layer instead of (B, heads, T, T) [%d]\n"
           "  -B 0|1    benchmark: random tokens on -m (a model file, or llama:NAME: random weights of the shape of\n"
           "            smollm2-135m, llama3.2-1b, llama3.2-3b, llama3.1-8b, qwen2.5-0.5b, qwen2.5-7b), -n steps (10 if 0) of -k x -b x -t; no data,\n"
           "            no files written: tokens/s and peak memory [%d]\n"
           "  -s N      seed: the adapter's start, the split, the order [%llu]\n"
           "  -P N      time the phases of every N-th step (data, forward, backward, norm, update; in metrics.tsv\n"
           "            too), 0 = off [%d]\n"
           "  -G GiB    finetune_lora.cu: behave as if the GPU had only this much memory (a 16 GB card on a\n"
           "            bigger one), 0 = all of it [0]\n"
           "  --plan    print the memory this run would take, part by part, full fine-tuning / LoRA / QLoRA beside it,\n"
           "            and the largest -b and longest -t that fit -G GiB (16 if not given); -m may also be llama:NAME or\n"
           "            gpt2-xl (a shape: nothing is loaded); runs nothing\n"
           "  -Q TYPE   QLoRA: the base's linear layers frozen in 4 bits, as bitsandbytes stores them: nf4 or fp4, with\n"
           "            double quantization and blocksize 64 (QLoRA's); nf4:128 another blocksize (32 to 4096), nf4:64:0\n"
           "            without double quantization; none: fp32 [none]\n"
           "  -h        this help\n",
           PROGRAM, d->model, d->data, d->out, d->targets, d->r, d->alpha, d->rslora, d->dropout, d->B, d->accum, d->T, d->refuse, d->epochs,
           d->steps, d->lr, d->warmup, d->final_frac, d->weight_decay, d->clip, d->val_every, d->val_frac, d->save_every, d->resume,
           d->recompute, d->flash, d->bench, (unsigned long long)d->seed, d->phase_every);
}

// the mean loss over a dataset's labelled tokens (forward only)
static double evaluate(const Base *b, Lora *lora, Acts *a, const Dataset *d, int *tokens, int *labels) {
    int training = lora->training;
    lora->training = 0; // (no dropout)
    a->forward_only = 1;
    int *order = (int *)mallocCheck((size_t)d->n * sizeof(int));
    for (int i = 0; i < d->n; i++) { order[i] = i; }
    double sum = 0.0;
    int total = 0;
    for (int first = 0; first < d->n; first += a->B) {
        fill_batch(tokens, labels, d, order, first, a->B, a->T);
        for (int r = d->n - first; r < a->B; r++) { // (rows past the end repeat earlier examples: unlabelled)
            for (int t = 0; t < a->T; t++) { labels[r * a->T + t] = -100; }
        }
        int count;
        sum += model_forward(b, lora, a, tokens, labels, &count);
        total += count;
    }
    free(order);
    lora->training = training;
    a->forward_only = 0;
    return total > 0 ? sum / total : 0.0;
}

// -B 1: the benchmark. Random tokens (every position labelled with the next one), a new
// adapter on the -T modules, -n optimizer steps (10 if 0) of -k micro-batches of -b x -t;
// tokens/s over the steps after the first (which allocates and warms up), and the peak
// memory (print_peak_memory). What dev/bench_lora.sh sets beside PyTorch + PEFT.
static void run_bench(const Base *b, const Options *o) {
    int B = o->B, T = o->T, N = B * T, steps = o->steps > 0 ? o->steps : 10;
    Lora lora;
    lora_create(&lora, b, o->r, o->alpha, o->rslora, o->targets, o->seed);
    lora.dropout = o->dropout;
    lora.training = 1;
    lora_to_device(&lora);
    Acts a;
    acts_allocate(&a, b, &lora, B, T, o->recompute, o->flash);
    printf("benchmark: %s, LoRA r=%d on %s (%d modules, %zu parameters), dropout %g; %d steps of %d x %d sequences of %d tokens%s\n",
           o->model, o->r, o->targets, lora.num_modules, lora.num_params, o->dropout, steps, o->accum, B, T,
           o->recompute ? ", activations recomputed" : "");
    print_memory(b, &lora, &a);
    int *tokens = (int *)mallocCheck((size_t)N * sizeof(int)), *labels = (int *)mallocCheck((size_t)N * sizeof(int));
    double timed = 0.0;
    Phases ph;
    memset(&ph, 0, sizeof(ph));
    ph.every = o->phase_every;
    phases_device_setup(&ph);
    for (int step = 0; step < steps; step++) {
        phases_begin(&ph, step); // (first: on the GPU a timed step waits here for the one before)
        double t0 = wall_seconds(), sum = 0.0;
        phases_enter(&ph, PHASE_UPDATE);
        lora_zero_grads(&lora);
        for (int k = 0; k < o->accum; k++) {
            phases_enter(&ph, PHASE_DATA);
            uint64_t key = rng_subkey(o->seed, 404, (uint64_t)step * 256 + (uint64_t)k);
            for (int n = 0; n < N; n++) { tokens[n] = (int)(rng_uniform_at(key, (uint64_t)n) * b->V) % b->V; }
            for (int n = 0; n < N; n++) { labels[n] = n % T == T - 1 ? -100 : tokens[n + 1]; }
            phases_enter(&ph, PHASE_FORWARD);
            int count;
            lora.dropout_key = key;
            sum += model_forward(b, &lora, &a, tokens, labels, &count);
            phases_enter(&ph, PHASE_BACKWARD);
            model_backward(b, &lora, &a, labels, 1.0f / (float)(count * o->accum));
        }
        phases_enter(&ph, PHASE_NORM);
        float norm = clip_gradients(&lora, o->clip);
        phases_enter(&ph, PHASE_UPDATE);
        adamw_update(&lora, o->lr, 0.9f, 0.999f, 1e-8f, o->weight_decay, step + 1);
        phases_end(&ph);
        double dt = wall_seconds() - t0;
        if (step > 0) { timed += dt; }
        printf("step %3d/%d | loss %.4f | norm %.3f | %.1f ms | %.0f tokens/s", step + 1, steps, sum / ((double)(T - 1) * B * o->accum),
               norm, dt * 1000.0, (double)N * o->accum / dt);
        phases_print(&ph, 1e3 * dt);
        printf("\n");
        phases_print_host(&ph);
    }
    lora_to_host(&lora); // (the end of the work)
    if (steps > 1) {
        printf("tokens/s: %.0f (steps 2-%d, %d tokens a step)\n", (double)N * o->accum * (steps - 1) / timed, steps, N * o->accum);
    }
    print_peak_memory();
    free(tokens); free(labels);
    acts_free(&a);
    lora_free(&lora);
}

// metrics.tsv: a line a step (0: before any); the ms_ columns are -P's phases, empty on the steps not timed
#define METRICS_HEADER "step\tlr\tloss\tgrad_norm\tval_loss\ttokens_per_s\tms_data\tms_forward\tms_backward\tms_norm\tms_update\n"

// ----------------------------------------------------------------------------
// main: its steps, in the order it takes them

// A run: the flags and everything main builds from them
typedef struct {
    Options o;
    Base b;
    Tokenizer tok;
    const char *tok_path;            // the tokenizer file read (NULL: GPT-2's folder, data/gpt2)
    char tok_beside[MAX_PATH_LEN];   // (NAME_tokenizer.bin beside the model, when that is it)
    Dataset train, val;
    int T;                           // positions a sequence: the longest example's, at most -t
    int steps, per_step;             // optimizer steps; sequences a step (-k x -b)
    Lora lora;
    int resume_step;                 // the checkpoint resumed (-y 1), -1 if none
    char from[MAX_PATH_LEN];         // ... its folder
    Acts a;
} Run;

// ----------------------------------------------------------------------------
// --plan: the memory a run would take, before it takes it

// A base of -m's shape, its dimensions only (llama:NAME, gpt2-xl), or the model file loaded
// A 4-bit model file is QLoRA's base as it is: -Q says nothing (then it is the file's format)
// or the file's format; another is an error
static void quant_from_file(Options *o, const Base *b) {
    if (b->quant == QUANT_NONE) { return; }
    if (o->quant != QUANT_NONE && (o->quant != b->quant || o->quant_blocksize != b->quant_blocksize || o->quant_nested != b->quant_nested)) {
        die_file(o->model, "leave -Q out (or give the file's format), or ./convert -Q none makes a float model of it",
                 "its linear layers are %s in blocks of %d%s already", quant4_name(b->quant), b->quant_blocksize,
                 b->quant_nested ? " with double quantization" : "");
    }
    o->quant = b->quant;
    o->quant_blocksize = b->quant_blocksize;
    o->quant_nested = b->quant_nested;
}

static void plan_shape(Base *b, const char *model) {
    memset(b, 0, sizeof(*b));
    if (strcmp(model, "gpt2-xl") == 0) { // GPT-2 XL: 1.56B parameters
        GPT2Config c = {.max_seq_len = 1024, .vocab_size = 50257, .padded_vocab_size = 50304, .num_layers = 48, .num_heads = 25, .channels = 1600};
        b->gpt2.config = c;
        fill_in_parameter_sizes(b->gpt2.param_sizes, c);
        for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) { b->gpt2.num_parameters += b->gpt2.param_sizes[k]; }
        b->L = c.num_layers; b->C = c.channels; b->NH = b->NKV = c.num_heads; b->HS = c.channels / c.num_heads; b->H = 4 * c.channels;
        b->V = c.vocab_size; b->Vp = c.padded_vocab_size; b->maxT = c.max_seq_len;
        return;
    }
    if (strncmp(model, "llama:", 6) != 0) {
        base_load(b, model);
        return;
    }
    for (size_t k = 0; k < sizeof(LLAMA_SHAPES) / sizeof(LLAMA_SHAPES[0]); k++) {
        if (strcmp(model + 6, LLAMA_SHAPES[k].name) != 0) { continue; }
        LlamaConfig c = LLAMA_SHAPES[k].c;
        b->llama_weights.config = c;
        llama_tensor_sizes(b->llama_weights.sizes, c);
        for (int t = 0; t < NUM_LLAMA_TENSORS; t++) { b->llama_weights.num_parameters += b->llama_weights.sizes[t]; }
        b->llama = 1; b->L = c.num_layers; b->C = c.channels; b->NH = c.num_heads; b->NKV = c.num_kv_heads; b->HS = c.head_size;
        b->H = c.hidden; b->V = c.vocab_size; b->Vp = c.vocab_size; b->maxT = c.max_seq_len;
        return;
    }
    die_file(model, "--plan takes a model file, llama:NAME (smollm2-135m, llama3.2-1b, llama3.2-3b, llama3.1-8b, qwen2.5-0.5b, "
             "qwen2.5-7b) or gpt2-xl", "no such shape");
}

static double plan_total(const Base *b, PlanRun run, int B, int T) {
    MemoryPlan p;
    run.B = B; run.T = T;
    memory_plan(&p, b, &run);
    return p.total;
}

static void run_plan(const Options *given) {
    Base b;
    Options file = *given, *o = &file;
    plan_shape(&b, o->model);
    quant_from_file(o, &b);
    double budget = (o->budget != NULL ? parse_float("-G", o->budget) : 16.0) * 1073741824.0, mib = 1048576.0;
    if (!(budget > 0.0)) { usage_error("-G %s: the memory to plan for must be above 0 GiB", o->budget); }
    int T = o->T;
    if (T > b.maxT) {
        char msg[160];
        snprintf(msg, sizeof(msg), "-t %d: longer than the model's context (%d)", T, b.maxT);
        usage_error("%s", msg);
    }
    PlanRun run = {.quant = o->quant, .blocksize = o->quant_blocksize, .nested = o->quant_nested, .modules = 0, .r = o->r, .B = o->B,
                   .T = T, .recompute = o->recompute, .flash = o->flash, .adapter_params = 0, .dropout = o->dropout};
    lora_check_targets(&b, o->r, o->targets, &run.modules, &run.adapter_params); // (the adapter lora_create would make)
    size_t params = plan_base_params(&b), linear = plan_linear_params(&b);
    printf("plan: %s: %s, %.2fB parameters (%.2fB in the linear layers); B=%d, T=%d, LoRA r=%d on %s (%d modules, %zu parameters)%s%s\n",
           o->model, b.llama ? "Llama family" : "GPT-2", params / 1e9, linear / 1e9, o->B, T, o->r, o->targets, run.modules,
           run.adapter_params, o->quant != QUANT_NONE ? ", the base in " : "", o->quant != QUANT_NONE ? quant4_name(o->quant) : "");
    printf("what %s allocates (%s), part by part:\n\n| part | MiB |\n|---|---:|\n", PROGRAM, PLAN_WHERE);
    MemoryPlan p;
    memory_plan(&p, &b, &run);
    for (int k = 0; k < p.n; k++) { printf("| %s | %.1f |\n", p.name[k], p.bytes[k] / mib); }
    printf("| total | %.1f |\n\n(%.0f bytes)\n", p.total / mib, p.total);
    printf("one layer's activations: %.1f MiB (of %d layers; %s)\n", p.per_layer / mib, b.L, PLAN_RECOMPUTE ?
           (o->recompute ? "-A 1 keeps one layer's" : "-A 1 would keep one layer's instead of all") : "finetune_loracu's -A 1 keeps one layer's");
    // loading: the model file is read whole in fp32, then (-Q) quantized, the fp32 rest copied
    // out and the file's weights freed: host memory, for a moment, before any of the above
    size_t codes, constants;
    plan_quant_bytes(&b, o->quant_blocksize, o->quant_nested, &codes, &constants);
    double load_q = (double)params * 4 + (double)codes + constants + (double)(params - linear) * 4;
    double load = o->quant != QUANT_NONE ? load_q : (double)params * 4;
    printf("loading: %.1f MiB of host memory at most, for a moment (the fp32 weights read whole%s)\n\n", load / mib,
           o->quant != QUANT_NONE ? ", quantized, the rest copied out" : "");
    // the three ways to fine-tune at these B and T, in this program's arithmetic; full
    // fine-tuning as mixed precision takes it: 16 bytes a parameter (16-bit weights and
    // gradients, fp32 master weights and AdamW's two moments), an estimate
    PlanRun lora = run, qlora = run;
    lora.quant = QUANT_NONE;
    qlora.quant = o->quant != QUANT_NONE ? o->quant : QUANT_NF4;
    MemoryPlan pl, pq;
    memory_plan(&pl, &b, &lora);
    memory_plan(&pq, &b, &qlora);
    double adapter_state = (double)run.adapter_params * 16, acts = pl.total - pl.bytes[0] - adapter_state;
    double full = (double)params * 16 + acts;
    printf("| fine-tuning, B=%d T=%d | weights (MiB) | trained state (MiB) | activations and scratch (MiB) | total (MiB) | fits %.0f GiB |\n"
           "|---|---:|---:|---:|---:|---|\n", o->B, T, budget / 1073741824.0);
    double load_floor = PLAN_LOAD_COUNTS ? load : 0.0; // (the CPU: loading needs this much first)
    printf("| full (estimate: 16 B a parameter) | %.1f | %.1f | %.1f | %.1f | %s |\n", params * 4.0 / mib, params * 12.0 / mib, acts / mib,
           full / mib, full <= budget ? "yes" : "no");
    printf("| LoRA | %.1f | %.1f | %.1f | %.1f | %s |\n", pl.bytes[0] / mib, adapter_state / mib, acts / mib, pl.total / mib,
           fmax(pl.total, PLAN_LOAD_COUNTS ? (double)params * 4 : 0.0) <= budget ? "yes" : "no");
    double qweights = pq.bytes[0] + pq.bytes[1] + pq.bytes[2];
    printf("| QLoRA (%s) | %.1f | %.1f | %.1f | %.1f | %s |\n\n", quant4_name(qlora.quant), qweights / mib, adapter_state / mib,
           (pq.total - qweights - adapter_state) / mib, pq.total / mib, fmax(pq.total, PLAN_LOAD_COUNTS ? load_q : 0.0) <= budget ? "yes" : "no");
    // the largest micro-batch at this T, the longest T at B = 1, in what fits the budget
    int best_b = 0, best_t = 0;
    for (int bb = 1; bb <= (1 << 20) && fmax(plan_total(&b, run, bb, T), load_floor) <= budget; bb *= 2) { best_b = bb; }
    for (int step = best_b / 2; best_b > 0 && step > 0; step /= 2) {
        if (fmax(plan_total(&b, run, best_b + step, T), load_floor) <= budget) { best_b += step; }
    }
    int lo = 1, hi = b.maxT;
    while (lo < hi) { // the largest T with plan_total(B = 1) within the budget
        int mid = lo + (hi - lo + 1) / 2;
        if (fmax(plan_total(&b, run, 1, mid), load_floor) <= budget) { lo = mid; } else { hi = mid - 1; }
    }
    best_t = fmax(plan_total(&b, run, 1, lo), load_floor) <= budget ? lo : 0;
    printf("in %.0f GiB, with these settings: the largest micro-batch at T=%d is B=%d; the longest T at B=1 is %d (the model's context: %d)\n",
           budget / 1073741824.0, T, best_b, best_t, b.maxT);
    base_free(&b);
}

// -Q TYPE[:BLOCKSIZE[:DOUBLE]]: nf4, fp4 or none; 64; 1
static void parse_quant(Options *o, const char *v) {
    char type[16] = "";
    long blocksize = 64, nested = 1;
    int got = sscanf(v, "%15[a-z0-9]:%ld:%ld", type, &blocksize, &nested);
    o->quant = strcmp(type, "nf4") == 0 ? QUANT_NF4 : strcmp(type, "fp4") == 0 ? QUANT_FP4 : QUANT_NONE;
    char again[64];
    snprintf(again, sizeof(again), got >= 3 ? "%s:%ld:%ld" : got == 2 ? "%s:%ld" : "%s", type, blocksize, nested);
    if (got < 1 || strcmp(again, v) != 0 || (o->quant == QUANT_NONE && (strcmp(type, "none") != 0 || got > 1))) {
        usage_error("-Q %s: expected nf4, fp4 or none, then optionally :BLOCKSIZE and :0 or :1 (double quantization)", v);
    }
    if (!quant4_blocksize_ok(blocksize)) { usage_error("-Q %s: the blocksize must be a power of two from 32 to 4096", v); }
    if (nested != 0 && nested != 1) { usage_error("-Q %s: double quantization is 0 or 1", v); }
    o->quant_blocksize = (int)blocksize;
    o->quant_nested = (int)nested;
}

static Options parse_args(int argc, char **argv) {
    Options o = DEFAULTS;
    for (int i = 1; i < argc; i += 2) {
        if (strcmp(argv[i], "-h") == 0) { print_usage(&DEFAULTS); exit(EXIT_SUCCESS); }
        if (strcmp(argv[i], "--plan") == 0) { o.plan = 1; i--; continue; } // (takes no value)
        if (argv[i][0] != '-' || argv[i][1] == '\0' || argv[i][2] != '\0') { usage_error("unknown argument '%s'", argv[i]); }
        if (i + 1 >= argc) { usage_error("flag %s needs a value", argv[i]); }
        const char *v = argv[i + 1], *flag = argv[i];
        switch (flag[1]) {
        case 'm': o.model = v; break;
        case 'g': o.tokenizer = v; break;
        case 'd': o.data = v; break;
        case 'E': o.eval = v; break;
        case 'o': o.out = v; break;
        case 'T': o.targets = v; break;
        case 'i': o.init = v; break;
        case 'M': o.merge = v; break;
        case 'r': o.r = (int)parse_int(flag, v, 1); break;
        case 'a': o.alpha = parse_float(flag, v); break;
        case 'R': o.rslora = (int)parse_int(flag, v, 0) != 0; break;
        case 'D': o.dropout = parse_float(flag, v); o.dropout_set = 1; break;
        case 'b': o.B = (int)parse_int(flag, v, 1); break;
        case 'k': o.accum = (int)parse_int(flag, v, 1); break;
        case 't': o.T = (int)parse_int(flag, v, 2); break;
        case 'x': o.refuse = (int)parse_int(flag, v, 0) != 0; break;
        case 'e': o.epochs = (int)parse_int(flag, v, 1); break;
        case 'n': o.steps = (int)parse_int(flag, v, 0); break;
        case 'l': o.lr = parse_float(flag, v); break;
        case 'u': o.warmup = (int)parse_int(flag, v, 0); break;
        case 'q': o.final_frac = parse_float(flag, v); break;
        case 'w': o.weight_decay = parse_float(flag, v); break;
        case 'c': o.clip = parse_float(flag, v); break;
        case 'v': o.val_every = (int)parse_int(flag, v, 1); break;
        case 'V': o.val_frac = parse_float(flag, v); break;
        case 's': o.seed = (uint64_t)parse_int(flag, v, 0); break;
        case 'S': o.save_every = (int)parse_int(flag, v, 0); break;
        case 'y': o.resume = (int)parse_int(flag, v, 0) != 0; break;
        case 'A': o.recompute = (int)parse_int(flag, v, 0) != 0; break;
        case 'F':
            o.flash = (int)parse_int(flag, v, 0);
            if (o.flash > 1) { usage_error("-F %s: 0 (attention keeps its T x T probabilities) or 1 (flash attention)", v); }
            break;
        case 'B': o.bench = (int)parse_int(flag, v, 0) != 0; break;
        case 'P': o.phase_every = (int)parse_int(flag, v, 0); break;
        case 'G': o.budget = v; break;
        case 'Q': parse_quant(&o, v); break;
        default: usage_error("unknown flag %s", flag);
        }
    }
    if (!(o.alpha > 0.0f)) { usage_error("-a: alpha must be above 0, got '%s'", "0"); }
    if (o.merge != NULL && o.init == NULL) { usage_error("-M %s: merges an adapter: name it with -i", o.merge); }
    if (o.dropout >= 1.0f) { usage_error("-D: the dropout probability must be below 1%s", ""); }
    if (o.accum > 256) { usage_error("-k: at most 256 micro-batches a step, got more%s", ""); }
    if (o.val_frac >= 1.0f) { usage_error("-V: the validation fraction must be below 1%s", ""); }
    if (o.budget != NULL && !o.plan) { gpu_budget_flag("-G", o.budget); }
    return o;
}

// the frozen base model (on the GPU too, in finetune_lora.cu)
static void load_base(Run *r) {
    base_load(&r->b, r->o.model);
    quant_from_file(&r->o, &r->b);
    if (r->o.quant != QUANT_NONE && r->b.quant == QUANT_NONE) { base_quantize(&r->b, r->o.quant, r->o.quant_blocksize, r->o.quant_nested); }
    base_to_device(&r->b);
    if (r->o.T > r->b.maxT) {
        char msg[160];
        snprintf(msg, sizeof(msg), "-t %d: longer than the model's context (%d)", r->o.T, r->b.maxT);
        usage_error("%s", msg);
    }
}

// the tokenizer: -g, else the one ./convert wrote beside the model, else GPT-2's
static void open_tokenizer(Run *r) {
    const Options *o = &r->o;
    r->tok_path = o->tokenizer;
    size_t model_len = strlen(o->model);
    if (r->tok_path == NULL && model_len > 4 && strcmp(o->model + model_len - 4, ".bin") == 0 && model_len < sizeof(r->tok_beside) - 16) {
        snprintf(r->tok_beside, sizeof(r->tok_beside), "%.*s_tokenizer.bin", (int)(model_len - 4), o->model);
        if (access(r->tok_beside, R_OK) == 0) { r->tok_path = r->tok_beside; }
    }
    if (r->tok_path == NULL && r->b.llama) {
        die_file(o->model, "./convert writes NAME_tokenizer.bin beside the model; -g names another", "a Llama-family model without its tokenizer");
    }
    tokenizer_init(&r->tok, r->tok_path != NULL ? r->tok_path : "data/gpt2");
    if (r->tok.vocab_size > r->b.V) {
        die_file(o->model, "-g names the model's tokenizer", "%d tokens, its tokenizer %d: they do not belong together", r->b.V, r->tok.vocab_size);
    }
}

// the records, checked and split (and, with -E, checked for leakage); T and the steps follow
static void read_data(Run *r) {
    const Options *o = &r->o;
    read_examples(&r->train, &r->val, o->data, &r->tok, o->T, o->refuse, o->val_frac, o->seed);
    if (o->eval != NULL) { check_leakage(o->data, o->eval); }
    int longest = 0; // T: as long as the longest example needs, at most -t
    for (int i = 0; i < r->train.n + r->val.n; i++) {
        longest = r->train.examples[i].len - 1 > longest ? r->train.examples[i].len - 1 : longest;
    }
    r->T = longest < o->T ? longest : o->T;
    r->per_step = o->B * o->accum;
    r->steps = o->steps > 0 ? o->steps : o->epochs * ((r->train.n + r->per_step - 1) / r->per_step);
}

// the adapter: from the newest checkpoint (-y 1), from -i, or new. One read from a folder
// keeps its rank, alpha, rsLoRA and dropout (PEFT's adapter_config.json), unless -D says
// otherwise for the dropout.
static void open_adapter(Run *r) {
    Options *o = &r->o;
    r->resume_step = o->resume ? find_latest_adapter_checkpoint(o->out) : -1;
    if (o->resume && r->resume_step < 0) {
        die_file(o->out, "a run with -S N writes them; -y 1 resumes it with the same flags", "-y 1, but no checkpoint here (state_N.bin with step_N/)");
    }
    if (!o->resume && o->save_every > 0 && find_latest_adapter_checkpoint(o->out) >= 0) {
        die_file(o->out, "resume them with -y 1, or pick another -o", "already holds checkpoints (the newest: step %d); not writing over them",
                 find_latest_adapter_checkpoint(o->out));
    }
    LoraShape shape = base_shape(&r->b);
    const char *folder = NULL;
    if (r->resume_step >= 0) {
        format_path(r->from, sizeof(r->from), "%s/step_%06d", o->out, r->resume_step);
        folder = r->from;
        o->targets = "from the checkpoint";
    } else if (o->init != NULL) {
        folder = o->init;
        o->targets = "from -i";
    }
    if (folder != NULL) {
        lora_load(&r->lora, &shape, folder, 1);
        o->r = r->lora.r; o->alpha = r->lora.alpha; o->rslora = r->lora.rslora;
        if (o->dropout_set) { r->lora.dropout = o->dropout; } else { o->dropout = r->lora.dropout; }
    } else {
        lora_create(&r->lora, &r->b, o->r, o->alpha, o->rslora, o->targets, o->seed);
        r->lora.dropout = o->dropout;
    }
    lora_to_device(&r->lora);
}

// the activations' memory, and what the run is
static void allocate_and_report(Run *r) {
    const Options *o = &r->o;
    size_t base_params = r->b.llama ? r->b.llama_weights.num_parameters : r->b.gpt2.num_parameters;
    acts_allocate(&r->a, &r->b, &r->lora, o->B, r->T, o->recompute, o->flash);
    printf("model: %s: %s, %.1fM parameters, frozen", o->model, r->b.llama ? "Llama family" : "GPT-2", base_params / 1e6);
    if (r->b.quant != QUANT_NONE) {
        printf(", its linear layers in %s (blocksize %d%s): %.1f MiB in all", quant4_name(r->b.quant), o->quant_blocksize,
               o->quant_nested ? ", double quantization" : "", base_bytes(&r->b) / 1048576.0);
    }
    printf("\n");
    printf("LoRA: r=%d, alpha %g (scale %.4g%s), dropout %g, %d modules (%s): %zu trainable parameters, %.3f%% of the model's\n",
           o->r, o->alpha, r->lora.scale, o->rslora ? ", rsLoRA" : "", o->dropout, r->lora.num_modules, o->targets, r->lora.num_params,
           100.0 * r->lora.num_params / base_params);
    if (o->flash) { printf("attention: flash (-F 1): a layer keeps (B, heads, T) log-sum-exps, not (B, heads, T, T) probabilities\n"); }
    print_memory(&r->b, &r->lora, &r->a);
}

// -M: merge -i's adapter into the model, check on the validation records that the merged
// model computes what model + adapter do, and write it (with its tokenizer beside it)
static void merge_and_write(Run *r) {
    const Options *o = &r->o;
    Base *b = &r->b;
    size_t N = (size_t)o->B * r->T;
    int *tokens = (int *)mallocCheck(N * sizeof(int)), *labels = (int *)mallocCheck(N * sizeof(int));
    double adapted = evaluate(b, &r->lora, &r->a, &r->val, tokens, labels);
    Lora none = r->lora;
    none.num_modules = 0;
    merge_adapter(b, &r->lora);
    base_to_device(b);
    double merged = evaluate(b, &none, &r->a, &r->val, tokens, labels);
    printf("validation loss: %.6f with the adapter, %.6f merged\n", adapted, merged);
    int bf16 = b->llama ? b->llama_weights.from_bf16 : b->gpt2.from_bf16;
    // the base's notes (lib/model_notes.h: its sampling settings) go along; its origin does
    // not: the merged model is not that model any more
    ModelNotes notes = b->notes;
    memset(notes.origin, 0, sizeof(notes.origin));
    if (b->llama) { llama_save(&b->llama_weights, o->merge, bf16, &notes); } else { gpt2_save_checkpoint(&b->gpt2, o->merge, bf16, &notes); }
    size_t merge_len = strlen(o->merge);
    struct stat info; // a tokenizer file goes beside it, as ./convert does; GPT-2's folder (-g data/gpt2) stays where it is
    int tok_file = r->tok_path != NULL && stat(r->tok_path, &info) == 0 && S_ISREG(info.st_mode);
    if (tok_file && merge_len > 4 && strcmp(o->merge + merge_len - 4, ".bin") == 0) {
        char tok_out[MAX_PATH_LEN];
        format_path(tok_out, sizeof(tok_out), "%.*s_tokenizer.bin", (int)(merge_len - 4), o->merge);
        size_t len;
        uint8_t *bytes = read_whole_file(r->tok_path, &len, NULL);
        const void *bufs[1] = {bytes};
        write_file_atomic(tok_out, bufs, &len, 1);
        free(bytes);
        printf("wrote %s (%s, the adapter merged%s) and %s\n", o->merge, b->llama ? "Llama-family model file" : "GPT-2 checkpoint",
               bf16 ? ", rounded to bf16 as the base was" : "", tok_out);
    } else {
        printf("wrote %s (%s, the adapter merged%s)\n", o->merge, b->llama ? "Llama-family model file" : "GPT-2 checkpoint",
               bf16 ? ", rounded to bf16 as the base was" : "");
    }
    free(tokens); free(labels);
}

// metrics.tsv, opened for the run: a new run writes its header and the step-0 validation
// loss; a resumed one keeps the lines up to its checkpoint. Lines written by an older
// version, with fewer columns, are padded with empty ones, so that the file stays one
// table (dev/plot_metrics.py refuses a ragged one).
static FILE *open_metrics(Run *r, Progress *pr, int *order, int *tokens, int *labels) {
    const Options *o = &r->o;
    char path[MAX_PATH_LEN];
    path_concat(path, o->out, "/metrics.tsv");
    if (r->resume_step < 0) {
        FILE *log = fopenCheck(path, "w");
        fputs(METRICS_HEADER, log);
        double val_loss = evaluate(&r->b, &r->lora, &r->a, &r->val, tokens, labels);
        printf("step %5d/%d | val loss %.4f (the %s)\n", 0, r->steps, val_loss, o->init != NULL ? "start adapter" : "base model");
        fprintf(log, "0\t\t\t\t%.6f\t\t\t\t\t\t\n", val_loss);
        return log;
    }
    checkpoint_load(o->out, r->resume_step, &r->lora, &r->b, pr, order, r->train.n, o->B, o->accum, r->T, r->steps, o->seed);
    lora_to_device(&r->lora); // (AdamW's moments, read just now)
    log_truncate_after(path, "%d", r->resume_step); // (the lines the stopped run wrote after its checkpoint go,
    size_t len;                                     // and the header, which has no step: written again)
    uint8_t *kept = read_whole_file(path, &len, NULL);
    int columns = 1;
    for (const char *c = METRICS_HEADER; *c != '\0'; c++) { columns += *c == '\t'; }
    char *padded = (char *)mallocCheck(len + 1 + (len / 2 + 1) * (size_t)columns); // (a line is 2 bytes at least)
    size_t at = 0;
    for (size_t i = 0; i < len;) {
        size_t end = i;
        int tabs = 0;
        while (end < len && kept[end] != '\n') { tabs += kept[end] == '\t'; end++; }
        memcpy(padded + at, kept + i, end - i);
        at += end - i;
        for (; tabs < columns - 1; tabs++) { padded[at++] = '\t'; }
        padded[at++] = '\n';
        i = end + 1;
    }
    const void *bufs[2] = {METRICS_HEADER, padded};
    size_t sizes[2] = {strlen(METRICS_HEADER), at};
    write_file_atomic(path, bufs, sizes, 2);
    free(kept);
    free(padded);
    printf("resuming at step %d of %d from %s\n", pr->step, r->steps, r->from);
    return fopenCheck(path, "a");
}

// One optimizer step: the micro-batches' data (a new order at each epoch), their forward
// and backward passes, the clipped norm, AdamW. Returns the step's mean loss per labelled
// token; *norm the gradient's norm before clipping.
static float train_step(Run *r, Phases *ph, Progress *pr, int *order, int *tokens, int *labels, int step, float lr, float *norm) {
    const Options *o = &r->o;
    phases_enter(ph, PHASE_UPDATE);
    lora_zero_grads(&r->lora);
    // the step's micro-batches first, to count their labelled tokens: the loss is their mean
    phases_enter(ph, PHASE_DATA);
    int firsts[256], count = 0;
    for (int k = 0; k < o->accum && k < 256; k++) {
        if (pr->cursor + o->B > r->train.n) { // a new epoch: a new order
            for (int i = r->train.n - 1; i > 0; i--) {
                int j = (int)(rng_uniform_at(rng_subkey(o->seed, 202, (uint64_t)pr->epoch), (uint64_t)i) * (i + 1));
                int t = order[i]; order[i] = order[j]; order[j] = t;
            }
            pr->cursor = 0;
            pr->epoch++;
        }
        firsts[k] = pr->cursor;
        pr->cursor += o->B;
        count += fill_batch(tokens, labels, &r->train, order, firsts[k], o->B, r->T);
    }
    double sum = 0.0;
    for (int k = 0; k < o->accum && k < 256; k++) {
        int c;
        phases_enter(ph, PHASE_DATA);
        r->lora.training = 1;
        r->lora.dropout_key = rng_subkey(o->seed, 303, (uint64_t)step * 256 + (uint64_t)k);
        fill_batch(tokens, labels, &r->train, order, firsts[k], o->B, r->T);
        phases_enter(ph, PHASE_FORWARD);
        sum += model_forward(&r->b, &r->lora, &r->a, tokens, labels, &c);
        phases_enter(ph, PHASE_BACKWARD);
        model_backward(&r->b, &r->lora, &r->a, labels, 1.0f / (float)(count > 0 ? count : 1));
    }
    phases_enter(ph, PHASE_NORM);
    float loss = (float)(sum / (count > 0 ? count : 1));
    *norm = clip_gradients(&r->lora, o->clip);
    phases_enter(ph, PHASE_UPDATE);
    adamw_update(&r->lora, lr, 0.9f, 0.999f, 1e-8f, o->weight_decay, step + 1);
    return loss;
}

// The training loop: steps, validation, the step's line and metrics row, checkpoints; then
// the adapter, written as PEFT does
static void train(Run *r) {
    const Options *o = &r->o;
    size_t N = (size_t)o->B * r->T;
    printf("training: %d steps of %d x %d sequences (%.2f epochs of %d records), lr %g, warm-up %d, weight decay %g, clip %g\n", r->steps,
           o->accum, o->B, (double)r->steps * r->per_step / r->train.n, r->train.n, o->lr, o->warmup, o->weight_decay, o->clip);
    if (mkdir(o->out, 0755) != 0 && errno != EEXIST) { die_file(o->out, NULL, "cannot make the folder: %s", strerror(errno)); }
    char path[MAX_PATH_LEN];
    path_concat(path, o->out, "/adapter_model.safetensors");
    if (r->resume_step < 0 && access(path, F_OK) == 0) { // (a new run would write its metrics and adapter over a finished one's)
        die_file(o->out, "pick another -o, or remove the folder's files first", "already holds an adapter (adapter_model.safetensors); not writing over it");
    }
    int *tokens = (int *)mallocCheck(N * sizeof(int)), *labels = (int *)mallocCheck(N * sizeof(int));
    int *order = (int *)mallocCheck((size_t)r->train.n * sizeof(int));
    for (int i = 0; i < r->train.n; i++) { order[i] = i; }
    Progress pr = {0, 0, r->train.n}; // (the cursor past the end: the first step starts an epoch, with a new order)
    FILE *log = open_metrics(r, &pr, order, tokens, labels);
    double start = wall_seconds(), val_loss = 0.0;
    int first_step = pr.step; // (a resumed run's ETA counts the steps it runs)
    Phases ph;
    memset(&ph, 0, sizeof(ph));
    ph.every = o->phase_every;
    phases_device_setup(&ph);
    for (int step = pr.step; step < r->steps; step++) {
        phases_begin(&ph, step); // (first: on the GPU a timed step waits here for the one before)
        double t0 = wall_seconds();
        float lr = get_learning_rate(step, o->lr, o->warmup, r->steps, o->final_frac), norm;
        float loss = train_step(r, &ph, &pr, order, tokens, labels, step, lr, &norm);
        phases_end(&ph); // (on the GPU: waits for the step's kernels, so that dt below includes them)
        double dt = wall_seconds() - t0, elapsed = wall_seconds() - start;
        int last = step + 1 == r->steps, validate = (step + 1) % o->val_every == 0 || last;
        if (validate) { val_loss = evaluate(&r->b, &r->lora, &r->a, &r->val, tokens, labels); }
        printf("step %5d/%d | loss %.4f | norm %.3f | lr %.2e | %.0f tokens/s", step + 1, r->steps, loss, norm, lr, N * o->accum / dt);
        if (validate) { printf(" | val loss %.4f", val_loss); }
        char eta[32];
        format_eta(eta, sizeof(eta), elapsed, step + 1 - first_step, r->steps - first_step);
        printf(" | %s", eta);
        phases_print(&ph, 1e3 * dt);
        printf("\n");
        phases_print_host(&ph);
        fflush(stdout);
        fprintf(log, "%d\t%g\t%.6f\t%.6f\t", step + 1, lr, loss, norm);
        if (validate) { fprintf(log, "%.6f", val_loss); }
        fprintf(log, "\t%.1f", N * o->accum / dt);
        for (int k = 0; k < NUM_PHASES; k++) {
            if (ph.on) { fprintf(log, "\t%.3f", ph.ms[k]); } else { fprintf(log, "\t"); }
        }
        fprintf(log, "\n");
        fflush(log);
        pr.step = step + 1;
        if (o->save_every > 0 && ((step + 1) % o->save_every == 0 || last)) {
            lora_to_host(&r->lora);
            checkpoint_save(o->out, &r->lora, &r->b, o->model, &pr, order, r->train.n, o->B, o->accum, r->T, r->steps, o->seed);
            printf("checkpoint: %s/step_%06d/ and state_%06d.bin\n", o->out, step + 1, step + 1);
        }
    }
    fcloseCheck(log);
    lora_to_host(&r->lora);
    lora_save(&r->lora, &r->b, o->out, o->model);
    printf("wrote %s/adapter_config.json and adapter_model.safetensors (PEFT's LoRA adapter), %s/metrics.tsv\n", o->out, o->out);
    free(tokens); free(labels); free(order);
}

static void run_free(Run *r) {
    for (int i = 0; i < r->train.n + r->val.n; i++) { free(r->train.examples[i].tokens); }
    free(r->train.examples);
    acts_free(&r->a);
    lora_free(&r->lora);
    tokenizer_free(&r->tok);
    base_free(&r->b);
}

int main(int argc, char **argv) {
    set_omp_wait_policy(argv); // first of all: it may start the program over
    Run r;
    memset(&r, 0, sizeof(r));
    r.o = parse_args(argc, argv);
    if (r.o.plan) { run_plan(&r.o); return 0; }
    load_base(&r);
    if (r.o.bench) { // -B 1: random tokens, no data, no files
        run_bench(&r.b, &r.o);
        base_free(&r.b);
        return 0;
    }
    open_tokenizer(&r);
    read_data(&r);
    open_adapter(&r);
    allocate_and_report(&r);
    if (r.o.merge != NULL) {
        merge_and_write(&r);
    } else {
        train(&r);
    }
    run_free(&r);
    return 0;
}
// --- end shared-copy: finetune-main ---
#endif
