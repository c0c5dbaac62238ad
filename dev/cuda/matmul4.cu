/*
matmul4.cu: the kernel ladder for linear layers whose weights are 4-bit (bitsandbytes' NF4 or
FP4, finetune_lora's and infer's -Q: quant4's layout, double quantization or not), out (N, OC)
= inp (N, C) @ W^T with W (OC, C) stored as 4-bit codes and a scale per block of 64 values
through the flattened weight, inp in floatX (bf16 by default, fp32 with -DENABLE_FP32),
products summed in fp32, out fp32. Two regimes:
  - decode (N = 1 to 8 rows): every weight is used N times, so the kernel streams the
    codes at the speed of memory; at 0.52 bytes a weight it can be ~3.9x faster than bf16's
    2 bytes, if the widening (code -> codebook value x scale) keeps up;
  - prefill and training (N = 64 to thousands of rows): compute bound; the 4-bit weight
    is read once per tile of rows, so its widening is paid once per N rows.

    1: infer.cu's quant_gemv_kernel, verbatim: a warp per output row, a lane 8 values at a
       time (one 32-bit load of codes, one scale), widened in registers, dotted with all N
       inputs (decode)                                                     — ./dev/cuda/matmul4 1
    2: infer.cu's prefill (and finetune_lora.cu's rung 1): dequantize_band_kernel writes
       the whole layer in floatX, then cuBLAS (cublasGemmEx, fp32 out)        — ./dev/cuda/matmul4 2
    3: the widening inside the tile: a block computes TILE x TILE outputs; per step of
       TILE_K columns it loads its inputs' tile and widens its weights' tile from the codes
       into shared memory (floatX), then each thread accumulates a 4 x 4 micro-tile in
       fp32 registers. No floatX copy of the layer is ever written (CUDA cores: the
       tensor-core version is the next rung)                                 — ./dev/cuda/matmul4 3
    4: cuBLAS on the layer already in floatX (a bf16 model): what the 4-bit layer costs
       against                                                                — ./dev/cuda/matmul4 4

main checks every variant against a CPU reference in double (the weight dequantized with
quant4_dequantize, finetune_lora.c's: bitsandbytes' values bit for bit) at N = 1..8 (1; 2-4
too) and N = 64, 333 (2-4), at C x OC = 576 x 1536, 96 x 70 (rows that are not whole blocks:
blocks straddle rows; C not a multiple of 8 for 1's one-value path: 42 x 33), 1536 x 576,
with NF4 + double quantization and FP4 without. Then (on a GPU) it times them at Llama 3.1
8B's shapes (4096 -> 4096, 4096 -> 14336, 14336 -> 4096) and N = 1, 8 (1, 2, 4) and 2048 (2,
3, 4): microseconds, GB/s of weight bytes (decode) or TFLOP/s (prefill), % of cuBLAS bf16.
It ends with "N passed, M failed" and exits non-zero if a check failed.
TODO: the H200 timings (written without a GPU: the emulator has run the checks only).

    make dev/cuda/matmul4 && ./dev/cuda/matmul4          (-v N: one variant, -c checks only)
    make dev/emu/matmul4_cpu && ./dev/emu/matmul4_cpu -c   (the checks on the CPU, small sizes)

Left out, for later: tensor cores for 3 (mma.sync on bf16 fragments widened in shared
memory, or wgmma on sm_90); a split over C for decode's short, wide layers; 8-bit codes
(q8_0) here (infer's kernel 1 takes them, and test_infer.cu checks them).
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
#include <cublas_v2.h>
#include "common.h"
#include "precision.h"
#define PROGRAM "./dev/cuda/matmul4"
#include "../../lib/utils.h" // mallocCheck, for quant4

#ifdef CUDA_EMU_H
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
#define BLOCK 256

// ----------------------------------------------------------------------------
// the 4-bit format on the host (finetune_lora.c's quant4, a checked copy): quantize, dequantize

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
enum { QUANT_Q8_0 = 3 }; // (infer's: the kernels below know it; the ladder's weights are 4-bit)

// ----------------------------------------------------------------------------
// the kernels (infer.cu's, verbatim, then ours)

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

// --- shared-copy of infer.cu: GEMV_MAX_ROWS ---
#define GEMV_MAX_ROWS 8 // decode's linear layers: up to 8 rows through the matrix-vector kernels
// --- shared-copy of infer.cu: GEMV_WARPS ---
#define GEMV_WARPS 8    // outputs per block (a warp each)

// --- shared-copy of infer.cu: DeviceBand ---
typedef struct {
    int type, rows, blocksize;  // QUANT_NF4, QUANT_FP4 or QUANT_Q8_0; (rows, C); 32 for q8_0
    const uint8_t *codes;       // 4-bit: (n + 1) / 2 bytes, two codes each; q8_0: n int8
    const float *absmax;        // 4-bit: each block's, or under double quantization NULL, and ...
    const uint8_t *qabsmax;     // ... its 8 bits,
    const float *nested_absmax, *nested_code; // the second level's scales and map,
    float offset;               // ... and the mean
    const uint16_t *d;          // q8_0: each block's fp16 scale
} DeviceBand;

// --- begin shared-copy: quant4-device-codes ---
// quant4's NF4_CODE and FP4_CODE on the device
__device__ const float NF4_DEVICE[16] = {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
                                         -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
                                         0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
                                         0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};
__device__ const float FP4_DEVICE[16] = {0.0f, 0.0625f / 12, 8.0f / 12, 1.0f, 4.0f / 12, 6.0f / 12, 2.0f / 12, 3.0f / 12,
                                         0.0f, -0.0625f / 12, -8.0f / 12, -1.0f, -4.0f / 12, -6.0f / 12, -2.0f / 12, -3.0f / 12};
// --- end shared-copy: quant4-device-codes ---

// --- shared-copy of infer.cu: band_scale ---
__device__ inline float band_scale(const DeviceBand &b, size_t block) {
    if (b.type == QUANT_Q8_0) {
        uint16_t h = b.d[block];
        float f = __uint_as_float((uint32_t)(h & 0x7fffu) << 13) * 0x1p112f;
        return h & 0x8000u ? -f : f;
    }
    if (b.qabsmax != NULL) { return __fadd_rn(__fmul_rn(b.nested_code[b.qabsmax[block]], b.nested_absmax[block / QUANT_NESTED_BLOCK]), b.offset); }
    return b.absmax[block];
}
// --- shared-copy of infer.cu: band_code ---
__device__ inline float band_code(const DeviceBand &b, size_t i) {
    if (b.type == QUANT_Q8_0) { return (float)(int8_t)b.codes[i]; }
    uint8_t byte = b.codes[i / 2];
    int index = i % 2 == 0 ? byte >> 4 : byte & 15;
    return b.type == QUANT_FP4 ? FP4_DEVICE[index] : NF4_DEVICE[index];
}

// 2's first half: the layer in floatX, a thread a value
// --- shared-copy of infer.cu: dequantize_band_kernel ---
__global__ void dequantize_band_kernel(floatX *W, DeviceBand b, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) { return; }
    W[i] = from_float(__fmul_rn(band_code(b, i), band_scale(b, i / b.blocksize)));
}

// 1: decode's rows
// --- shared-copy of infer.cu: quant_gemv_kernel ---
template <int N>
__global__ void __launch_bounds__(GEMV_WARPS * 32) quant_gemv_kernel(const floatX *inp, DeviceBand b, Epilogue e, int C, int OC,
                                                                     int row0) {
    int o = blockIdx.x * GEMV_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (o >= b.rows) { return; }
    size_t first = (size_t)o * C;
    float acc[N];
    #pragma unroll
    for (int n = 0; n < N; n++) { acc[n] = 0.0f; }
    if (C % 8 == 0) {
        for (int i = lane * 8; i < C; i += 32 * 8) {
            size_t at = first + i;
            float scale = band_scale(b, at / b.blocksize), w[8];
            if (b.type == QUANT_Q8_0) {
                const uint32_t *q = (const uint32_t *)(b.codes + at); // (two words: 8 codes, the first in the low byte)
                uint32_t lo = q[0], hi = q[1];
                #pragma unroll
                for (int k = 0; k < 8; k++) { w[k] = __fmul_rn((float)(int8_t)(((k < 4 ? lo : hi) >> (8 * (k % 4))) & 0xff), scale); }
            } else {
                uint32_t q = *(const uint32_t *)(b.codes + at / 2);
                const float *code = b.type == QUANT_FP4 ? FP4_DEVICE : NF4_DEVICE;
                #pragma unroll
                for (int k = 0; k < 8; k++) { // byte k/2 of the little-endian word; its high nibble first
                    int index = (q >> (8 * (k / 2) + (k % 2 == 0 ? 4 : 0))) & 15;
                    w[k] = __fmul_rn(code[index], scale);
                }
            }
            #pragma unroll
            for (int n = 0; n < N; n++) {
                const floatX *x = inp + (size_t)n * C + i;
                #pragma unroll
                for (int k = 0; k < 8; k++) { acc[n] += w[k] * to_float(x[k]); }
            }
        }
    } else {
        for (int i = lane; i < C; i += 32) {
            float w = __fmul_rn(band_code(b, first + i), band_scale(b, (first + i) / b.blocksize));
            #pragma unroll
            for (int n = 0; n < N; n++) { acc[n] += w * to_float(inp[(size_t)n * C + i]); }
        }
    }
    #pragma unroll
    for (int n = 0; n < N; n++) {
        float sum = warp_sum(acc[n]);
        if (lane == 0) { epilogue_apply(e, n, row0 + o, OC, sum); }
    }
}

// 3: the widening inside the tile. Block (TILE x TILE outputs: rows n0.., columns o0..),
// 256 threads, each a 4 x 4 micro-tile (rows ty*4.., columns tx*4..). Per step of TILE_K
// columns of C: the inputs' tile (TILE x TILE_K) and the weights' (TILE x TILE_K), each
// weight widened from its code and its block's scale as it goes into shared memory, one
// thread a value (so any C, any blocksize, blocks straddling rows); out of range: 0.
#define TILE 64
#define TILE_K 32
__global__ void __launch_bounds__(256) matmul4_tiled_kernel(float *out, const floatX *inp, DeviceBand b, int N, int C, int OC) {
    __shared__ float xs[TILE_K][TILE + 4], ws[TILE_K][TILE + 4]; // (k-major: a micro-tile reads 4 neighbours of a row)
    int tx = threadIdx.x % 16, ty = threadIdx.x / 16, n0 = blockIdx.y * TILE, o0 = blockIdx.x * TILE;
    float acc[4][4] = {{0.0f}};
    for (int k0 = 0; k0 < C; k0 += TILE_K) {
        for (int i = threadIdx.x; i < TILE * TILE_K; i += blockDim.x) {
            int r = i / TILE_K, k = i % TILE_K, n = n0 + r, o = o0 + r, kk = k0 + k;
            xs[k][r] = n < N && kk < C ? to_float(inp[(size_t)n * C + kk]) : 0.0f;
            size_t at = (size_t)o * C + kk;
            ws[k][r] = o < OC && kk < C ? to_float(from_float(__fmul_rn(band_code(b, at), band_scale(b, at / b.blocksize)))) : 0.0f;
        }
        __syncthreads();
        for (int k = 0; k < TILE_K; k++) {
            float x[4], w[4];
            for (int i = 0; i < 4; i++) { x[i] = xs[k][ty * 4 + i]; w[i] = ws[k][tx * 4 + i]; }
            for (int i = 0; i < 4; i++) {
                for (int j = 0; j < 4; j++) { acc[i][j] += x[i] * w[j]; }
            }
        }
        __syncthreads();
    }
    for (int i = 0; i < 4; i++) {
        for (int j = 0; j < 4; j++) {
            int n = n0 + ty * 4 + i, o = o0 + tx * 4 + j;
            if (n < N && o < OC) { out[(size_t)n * OC + o] = acc[i][j]; }
        }
    }
}

// ----------------------------------------------------------------------------
// the variants, one call each

static cublasHandle_t cublas_handle;
static void cublas_matmul(float *out, const floatX *W, const floatX *inp, int N, int C, int OC, cudaStream_t stream) {
    static const float one = 1.0f, zero = 0.0f;
    cublasCheck(cublasSetStream(cublas_handle, stream));
    cublasCheck(cublasGemmEx(cublas_handle, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, W, CUBLAS_FLOATX, C, inp, CUBLAS_FLOATX, C, &zero, out,
                             CUDA_R_32F, OC, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
static Epilogue store_epilogue(float *out) {
    Epilogue e;
    memset(&e, 0, sizeof(e));
    e.kind = EPI_LOGITS;
    e.f32 = out;
    return e;
}
// variant v on N rows: out (N, OC); W16, the layer in floatX (2's scratch, 4's weight)
static void run_variant(int v, float *out, const floatX *inp, const DeviceBand &b, floatX *W16, int N, int C, int OC, cudaStream_t stream) {
    if (v == 1) {
        unsigned grid = ceil_div(OC, GEMV_WARPS), threads = GEMV_WARPS * 32;
        Epilogue e = store_epilogue(out);
        switch (N) {
        case 1: quant_gemv_kernel<1><<<grid, threads, 0, stream>>>(inp, b, e, C, OC, 0); break;
        case 2: quant_gemv_kernel<2><<<grid, threads, 0, stream>>>(inp, b, e, C, OC, 0); break;
        case 3: quant_gemv_kernel<3><<<grid, threads, 0, stream>>>(inp, b, e, C, OC, 0); break;
        case 4: quant_gemv_kernel<4><<<grid, threads, 0, stream>>>(inp, b, e, C, OC, 0); break;
        case 5: quant_gemv_kernel<5><<<grid, threads, 0, stream>>>(inp, b, e, C, OC, 0); break;
        case 6: quant_gemv_kernel<6><<<grid, threads, 0, stream>>>(inp, b, e, C, OC, 0); break;
        case 7: quant_gemv_kernel<7><<<grid, threads, 0, stream>>>(inp, b, e, C, OC, 0); break;
        default: quant_gemv_kernel<8><<<grid, threads, 0, stream>>>(inp, b, e, C, OC, 0); break;
        }
    } else if (v == 2) {
        size_t n = (size_t)OC * C;
        dequantize_band_kernel<<<ceil_div(n, BLOCK), BLOCK, 0, stream>>>(W16, b, n);
        cudaCheck(cudaGetLastError());
        cublas_matmul(out, W16, inp, N, C, OC, stream);
    } else if (v == 3) {
        dim3 grid(ceil_div(OC, TILE), ceil_div(N, TILE));
        matmul4_tiled_kernel<<<grid, 256, 0, stream>>>(out, inp, b, N, C, OC);
    } else {
        cublas_matmul(out, W16, inp, N, C, OC, stream);
    }
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// a problem: random weights quantized on the host, uploaded as infer.cu uploads a band

struct Problem {
    int C, OC;
    Quant4 q;
    std::vector<float> deq; // the weight, dequantized (quant4_dequantize)
    DeviceBand b;
    void *mem[4];
    floatX *W16, *inp;
    float *out;
};
static void problem_make(Problem &p, int C, int OC, int type, int nested, int maxN) {
    std::vector<float> w((size_t)OC * C);
    for (float &x : w) { x = 0.05f * rng_uniform() * (rng_uniform() > 0.98f ? 8.0f : 1.0f); }
    p.C = C; p.OC = OC;
    quant4_quantize(&p.q, w.data(), w.size(), type, 64, nested);
    p.deq.resize(w.size());
    quant4_dequantize(&p.q, p.deq.data(), 0, w.size());
    size_t sizes[4] = {(w.size() + 1) / 2, p.q.num_blocks * (nested ? 1 : sizeof(float)),
                       nested ? (p.q.num_blocks + QUANT_NESTED_BLOCK - 1) / QUANT_NESTED_BLOCK * sizeof(float) : 0, nested ? sizeof(p.q.nested_code) : 0};
    const void *from[4] = {p.q.packed, nested ? (const void *)p.q.qabsmax : p.q.absmax, p.q.nested_absmax, p.q.nested_code};
    for (int k = 0; k < 4; k++) {
        p.mem[k] = NULL;
        if (sizes[k] == 0) { continue; }
        cudaCheck(cudaMalloc(&p.mem[k], sizes[k]));
        cudaCheck(cudaMemcpy(p.mem[k], from[k], sizes[k], cudaMemcpyHostToDevice));
    }
    memset(&p.b, 0, sizeof(p.b));
    p.b.type = type; p.b.rows = OC; p.b.blocksize = 64;
    p.b.codes = (const uint8_t *)p.mem[0];
    p.b.absmax = nested ? NULL : (const float *)p.mem[1];
    p.b.qabsmax = nested ? (const uint8_t *)p.mem[1] : NULL;
    p.b.nested_absmax = (const float *)p.mem[2];
    p.b.nested_code = (const float *)p.mem[3];
    p.b.offset = p.q.offset;
    std::vector<floatX> W16(w.size()), x((size_t)maxN * C);
    for (size_t i = 0; i < w.size(); i++) { W16[i] = from_float(p.deq[i]); } // (4's weight: the same values in floatX)
    for (floatX &v : x) { v = from_float(rng_uniform()); }
    cudaCheck(cudaMalloc(&p.W16, W16.size() * sizeof(floatX)));
    cudaCheck(cudaMalloc(&p.inp, x.size() * sizeof(floatX)));
    cudaCheck(cudaMalloc(&p.out, (size_t)maxN * OC * sizeof(float)));
    cudaCheck(cudaMemcpy(p.W16, W16.data(), W16.size() * sizeof(floatX), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(p.inp, x.data(), x.size() * sizeof(floatX), cudaMemcpyHostToDevice));
}
static void problem_free(Problem &p) {
    for (int k = 0; k < 4; k++) { if (p.mem[k] != NULL) { cudaCheck(cudaFree(p.mem[k])); } }
    cudaCheck(cudaFree(p.W16)); cudaCheck(cudaFree(p.inp)); cudaCheck(cudaFree(p.out));
    quant4_free(&p.q);
}

// ----------------------------------------------------------------------------
// checks: every output against the double reference on the dequantized weight (in floatX,
// as the kernels widen it: bf16 rounds each weight), tolerance as gemv.cu's

static int num_passed = 0, num_failed = 0;
static const char *variant_names[5] = {"", "1 infer's quant gemv", "2 dequantize, cuBLAS", "3 widened in the tile", "4 cuBLAS, floatX weight"};
static void check_variant(int v, Problem &p, const int *Ns, int nN, const char *what) {
    int C = p.C, OC = p.OC, maxN = 0;
    for (int i = 0; i < nN; i++) { maxN = std::max(maxN, Ns[i]); }
    std::vector<floatX> x((size_t)maxN * C);
    cudaCheck(cudaMemcpy(x.data(), p.inp, x.size() * sizeof(floatX), cudaMemcpyDeviceToHost));
    double worst = 0.0;
    char where[200] = "";
    for (int t = 0; t < nN; t++) {
        int N = Ns[t];
        std::vector<float> got((size_t)N * OC);
        cudaCheck(cudaMemset(p.out, 0xFF, got.size() * sizeof(float)));
        run_variant(v, p.out, p.inp, p.b, p.W16, N, C, OC, 0);
        cudaCheck(cudaMemcpy(got.data(), p.out, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
        for (int n = 0; n < N; n++) {
            for (int o = 0; o < OC; o++) {
                double ref = 0.0, mag = 0.0;
                for (int i = 0; i < C; i++) {
                    // 1 widens in fp32 (the weight exact); 2-4 store it in floatX first
                    double w = v == 1 ? (double)p.deq[(size_t)o * C + i] : (double)to_float(from_float(p.deq[(size_t)o * C + i]));
                    double pr = w * to_float(x[(size_t)n * C + i]);
                    ref += pr;
                    mag += fabs(pr);
                }
                double tol = 16.0 * sqrt((double)C) * FLT_EPSILON * mag + 2 * FLT_EPSILON * fabs(ref);
                double err = fabs(got[(size_t)n * OC + o] - ref), ratio = std::isnan(err) ? INFINITY : err / tol;
                if (ratio > worst) {
                    worst = ratio;
                    snprintf(where, sizeof(where), "N = %d: out[%d, %d] = %.9g, expected %.9g", N, n, o, got[(size_t)n * OC + o], ref);
                }
            }
        }
    }
    int ok = worst <= 1.0;
    printf("%5d x %5d  %-18s %-26s worst %.2f of tol  %s\n", C, OC, what, variant_names[v], worst, ok ? "OK" : "NOT OK");
    if (!ok) { printf("    worst at %s\n", where); }
    if (ok) { num_passed++; } else { num_failed++; }
}

static void usage(void) {
    printf("usage: matmul4 [N] [-v N] [-c] [-s SEED] [-h]\n"
           "  N, -v N  only variant N (default: all of 1-4): 1 infer's quant gemv (decode), 2 dequantize then\n"
           "           cuBLAS, 3 widened in the tile, 4 cuBLAS on the floatX weight\n"
           LADDER_COMMON_FLAGS);
}

int main(int argc, char **argv) {
    LadderArgs args = parse_args(argc, argv, 4, 1, usage);
    rng_state = args.seed;
    int first = args.only ? args.only : 1, last = args.only ? args.only : 4;
#ifdef CUDA_EMU_H
    printf("CPU emulation (dev/emu), %s: checks at small sizes, no timing; seed %llu\n", PRECISION_NAME, args.seed);
    const int shapes[][2] = {{96, 70}, {42, 33}, {256, 40}};
    const int prefill[] = {1, 9, 70};
#else
    require_gpu("runs the checks: make dev/emu/matmul4_cpu && ./dev/emu/matmul4_cpu -c", PRECISION_NAME, args.seed);
    const int shapes[][2] = {{576, 1536}, {96, 70}, {42, 33}, {1536, 576}};
    const int prefill[] = {1, 8, 64, 333};
#endif
    const int decode[] = {1, 2, 3, 4, 5, 6, 7, 8};
    cublasCheck(cublasCreate(&cublas_handle));
#ifdef ENABLE_FP32
    cublasCheck(cublasSetMathMode(cublas_handle, CUBLAS_PEDANTIC_MATH));
#endif
    const struct { int type, nested; const char *name; } formats[] = {{QUANT_NF4, 1, "nf4, double quant"}, {QUANT_FP4, 0, "fp4"}};
    for (const auto &f : formats) {
        for (const int *s : shapes) {
            Problem p;
            problem_make(p, s[0], s[1], f.type, f.nested, 333);
            printf("%d x %d in %s (blocks of 64%s, %s): %zu bytes, %.3f bits a weight\n", s[0], s[1], quant4_name(f.type),
                   f.nested ? ", double quantization" : "", quant4_blocksize_ok(64) ? "bitsandbytes' default" : "?", quant4_bytes(&p.q),
                   8.0 * quant4_bytes(&p.q) / ((double)s[0] * s[1]));
            for (int v = first; v <= last; v++) {
                if (v == 1) { check_variant(v, p, decode, 8, f.name); }
                else { check_variant(v, p, prefill, (int)(sizeof(prefill) / sizeof(prefill[0])), f.name); }
            }
            problem_free(p);
        }
    }
#ifndef CUDA_EMU_H
    if (!args.check_only) { // timing: Llama 3.1 8B's layers, NF4 with double quantization
        const struct { const char *name; int C, OC; } layers[] = {{"q / o", 4096, 4096}, {"gate / up", 4096, 14336}, {"down", 14336, 4096}};
        printf("\nus per call (median of 20), NF4 with double quantization, Llama 3.1 8B's shapes; decode: GB/s of the\n"
               "4-bit weight's bytes; prefill: TFLOP/s; %% of cuBLAS on the floatX weight (4)\n");
        printf("%-10s %5s %5s %5s  %-26s %9s %9s %9s\n", "layer", "C", "OC", "N", "variant", "us", "GB/s|TF", "% cuBLAS");
        for (const auto &l : layers) {
            Problem p;
            problem_make(p, l.C, l.OC, QUANT_NF4, 1, 2048);
            double bytes4 = (double)quant4_bytes(&p.q);
            for (int N : {1, 8, 2048}) {
                float t4 = time_median_ms([&] { run_variant(4, p.out, p.inp, p.b, p.W16, N, l.C, l.OC, 0); });
                for (int v = first; v <= last; v++) {
                    if ((v == 1 && N > 8) || (v == 3 && N <= 8)) { continue; }
                    float ms = time_median_ms([&] { run_variant(v, p.out, p.inp, p.b, p.W16, N, l.C, l.OC, 0); });
                    double rate = N <= 8 ? bytes4 / (ms * 1e-3) / 1e9 : 2.0 * N * l.C * l.OC / (ms * 1e-3) / 1e12;
                    printf("%-10s %5d %5d %5d  %-26s %9.1f %9.1f %8.0f%%\n", l.name, l.C, l.OC, N, variant_names[v], 1000 * ms, rate, 100.0 * t4 / ms);
                }
            }
            problem_free(p);
        }
    }
#endif
    cublasCheck(cublasDestroy(cublas_handle));
    printf("%d passed, %d failed\n", num_passed, num_failed);
    return num_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
