/*
infer.cu: inference on one GPU, GPT-2 and the Llama family, checked against infer.c.

The same program as infer.c (flags, models in, tokenizer, sampling, batches, chat and
conversations, reports, the benchmark: all shared copies), with the forward pass on
the GPU:
  - weights, KV cache and the matmuls' inputs in floatX (PRECISION=BF16, the default, or
    FP32); the residual stream, LayerNorm statistics, logits and all sums in fp32;
  - decode (up to GEMV_MAX_ROWS sequences at a time) runs each linear layer as our own
    matrix-vector kernel: a warp per output, 16-byte loads along the weight row, every
    input row dotted in the same pass, the layer's epilogue fused (bias; the cache write
    of keys and values; GELU; the residual add). It reads the weights once per step,
    which is all that decoding GPT-2 124M is: 250 MB of bf16 per token;
  - prefill and larger batches use cuBLAS (fp32 accumulation, no TF32 at FP32) into an
    fp32 scratch, then the same epilogue as a separate kernel;
  - attention of each (row, head) over its sequence's cached keys and values, cut into
    parts of 256 positions (flash-decoding): a block per part, its scores in shared memory,
    softmax, the weighted values; a second kernel merges a row's parts;
  - the decode step captured once per batch size in a CUDA graph and replayed: the
    ~90 launches of a step (7 a layer) cost one launch, which at this size is most of the time
    (all its inputs, the tokens and positions, are read from device buffers, so one
    graph serves every step);
  - greedy sampling as an argmax kernel (one int per sequence comes back); other
    sampling (and greedy with a repetition penalty, which needs the logits) copies the
    logits back and runs infer.c's sampler on them.
FP32 builds compute what infer.c computes up to the order of sums: the greedy tokens
are the same (test_infer.cu, dev/test/test_infer_cuda.sh).

Build and run:
    make infercu && ./infercu -m gpt2.bin -i "Hello, I'm"        # bf16 (./convert makes gpt2.bin)
    make infercu PRECISION=FP32                                   # fp32 (also built as infercu_fp32)
    ./infercu -m d12 -B 1 -b 1,8,64                               # the benchmark
Without a GPU, make test runs this file through the CPU emulator (dev/emu) and compares
it with infer.c. Debug builds add -DGUARD_BYTES=256 (guard bands after every tensor, below).

How it reads against infer.c (diff the two: `diff infer.c infer.cu`): the same sections
in the same order, the host code the same lines (shared copies, dev/README.md), and these
differences only:
  - the layers: where infer.c has its layers and their fast paths (CPU loops, the blocked
    GEMM), this file has everything only the GPU needs, in one stretch: the precision
    (floatX), then for each of infer.c's layer functions (encoder_forward,
    layernorm_forward, linear_forward with its Epilogue, attention_forward,
    rope_forward, swiglu_forward, argmax_forward) a kernel and a launcher of the same name and
    arguments; then the GPU's memory: the cuBLAS handle and stream, one allocation per table
    of tensors, guard bands;
  - the model: ForwardTensors is a floatX copy of the weights on the GPU (infer.c: the
    loaded tensors themselves); allocating rows and cache fills DeviceTables; gpt2_build
    uploads the weights; GPT2 holds the decode graphs, and host copies of logits and argmax;
  - gpt2_forward: the same arguments and the same layers (gpt2_forward_layers, a shared
    copy), around them the copies to and from the GPU, the decode graph, the guard checks.
Everything from sampling to main is infer.c's (the tokenizer and the JSON reader are lib/'s).

Sizes: as infer.c. B sequences, S positions of cache per sequence, N rows of a forward
pass, NL rows with logits, C channels, NH and NKV heads, HS, Q, KV, H, V, Vp, L, maxT.
*/

#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <inttypes.h>
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
#include <cuda_bf16.h>
#include <cublas_v2.h>

#define PROGRAM "./infercu" // in messages: how the user runs this program
#include "lib/utils.h"
#include "lib/rand.h"
#include "lib/json.h"
#include "lib/safetensors.h"
#include "lib/tokenizer.h"
#include "lib/model_notes.h"
#include "lib/cuda_utils.h"

// Debug builds (make test's emulated ones) pass -DGUARD_BYTES=256: every tensor carved out
// of one GPU allocation (the weights, each layer's keys and values, the row buffers) is
// then followed by a guard band (a pattern: guard_byte, lib/cuda_utils.h), checked after every
// forward pass, so that a kernel writing past the end of its tensor is caught on the step
// it does (guard_check).
// 0: no bands, no checks, and the memory laid out exactly as without them.
#ifndef GUARD_BYTES
#define GUARD_BYTES 0
#endif

// ----------------------------------------------------------------------------
// where we run: the hardware's name for the reports

// where we run, for the reports
static const char *hardware_name(void) {
    static char name[300];
    if (name[0] == '\0') {
        cudaDeviceProp prop;
        int device = 0;
        if (cudaGetDevice(&device) == cudaSuccess && cudaGetDeviceProperties(&prop, device) == cudaSuccess) {
            snprintf(name, sizeof(name), "%s", prop.name);
        } else {
            cudaGetLastError(); // (clear it: this is only for a report)
            snprintf(name, sizeof(name), "a GPU (none found)");
        }
    }
    return name;
}

// ----------------------------------------------------------------------------
// the layers on the GPU: where infer.c has its layers and their fast paths, this file has
// everything only the GPU needs, in one stretch: the precision; for each of infer.c's layer
// functions a kernel and a launcher of the same name and arguments; the cuBLAS handle and
// the stream they launch on; the GPU's memory (one allocation per table of tensors, with
// guard bands in debug builds)

// precision: floatX is what weights, the KV cache and matmul inputs are stored in

#if defined(ENABLE_FP32)
typedef float floatX;
#define CUBLAS_FLOATX CUDA_R_32F
#define WEIGHTS_TYPE "fp32"
#elif defined(ENABLE_BF16)
typedef __nv_bfloat16 floatX;
#define CUBLAS_FLOATX CUDA_R_16BF
#define WEIGHTS_TYPE "bf16"
#else
#error "build with -DENABLE_FP32 or -DENABLE_BF16 (make infercu PRECISION=FP32|BF16)"
#endif
typedef floatX weightX; // the linear layers' weights: floatX too (infer.c: bf16 in make infer_bf16)
#define KV_ELEMENT_BYTES sizeof(floatX)
#define WEIGHT_BYTES sizeof(floatX)
__device__ __host__ inline float to_float(floatX x) { return (float)x; }
__device__ __host__ inline floatX from_float(float x) { return (floatX)x; }

// ----------------------------------------------------------------------------
// quantized weights (-Q), as infer.c's: the linear layers' weights quantized on the host at
// load (nf4 / fp4 as bitsandbytes stores them, q8_0 as llama.cpp does), then uploaded as
// they are; the kernels below widen each weight from its code and its block's scale as they
// read it (quant_gemv_kernel, decode), or dequantize a layer into floatX for cuBLAS (prefill)

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

// --- begin shared-copy: q8_0 ---
// llama.cpp's Q8_0 (ggml's block_q8_0: GGUF's type 8), the simplest of its formats: blocks of
// 32 consecutive values of a row, each stored as an fp16 scale d = absmax / 127 and 32 int8
// q = round(x / d) (halves away from zero; a block of zeros: d = 0, q = 0), dequantized as
// q x d. 34 bytes per 32 weights, 8.5 bits a weight. The same bytes as llama.cpp's
// quantize_row_q8_0_ref (checked against the gguf package's numpy quantizer). Rows whose
// length is not a multiple of 32 (llama.cpp refuses them) are blocked here as the 4-bit
// formats are, over the flattened tensor, the last block partial.
#define Q8_BLOCK 32
typedef struct {
    size_t n, num_blocks; // values; blocks, ceil(n / 32)
    int8_t *q;            // (n)
    uint16_t *d;          // (num_blocks) fp16 bits
} QuantQ8;

// IEEE fp16 bits, from a float rounded to nearest (ties to even), as F16C's vcvtps2ph
// (ggml's GGML_FP32_TO_FP16) and numpy's astype(float16) round
static uint16_t float_to_fp16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof(bits));
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    float a = fabsf(f);
    if (a != a) { return (uint16_t)(sign | 0x7e00u); } // NaN
    if (a >= 65520.0f) { return (uint16_t)(sign | 0x7c00u); } // rounds to infinity
    if (a < 6.103515625e-05f) { // subnormal (or 0): a multiple of 2^-24, rounded by the float addition
        float scaled = a + 0.5f; // (0.5 = 2^-1: its ulp is 2^-24, so the sum rounds a to fp16's subnormal step)
        uint32_t s;
        memcpy(&s, &scaled, sizeof(s));
        return (uint16_t)(sign | (s - 0x3f000000u));
    }
    uint32_t abits = bits & 0x7fffffffu, mantissa_odd = (abits >> 13) & 1u;
    abits += 0xfffu + mantissa_odd; // round the 13 bits that go, ties to even
    return (uint16_t)(sign | ((abits - ((uint32_t)(127 - 15) << 23)) >> 13));
}

static void q8_quantize(QuantQ8 *q, const float *x, size_t n) {
    q->n = n;
    q->num_blocks = (n + Q8_BLOCK - 1) / Q8_BLOCK;
    q->q = (int8_t *)mallocCheck(n > 0 ? n : 1);
    q->d = (uint16_t *)mallocCheck((q->num_blocks > 0 ? q->num_blocks : 1) * sizeof(uint16_t));
    for (size_t b = 0; b < q->num_blocks; b++) {
        size_t first = b * Q8_BLOCK, last = first + Q8_BLOCK < n ? first + Q8_BLOCK : n;
        float amax = 0.0f;
        for (size_t i = first; i < last; i++) { amax = fmaxf(amax, fabsf(x[i])); }
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        q->d[b] = float_to_fp16(d);
        for (size_t i = first; i < last; i++) { q->q[i] = (int8_t)roundf(x[i] * id); }
    }
}

// fp16 bits to float, the fast way for scales (finite: normal, subnormal or zero): the
// exponent and mantissa moved into a float's places, rescaled by 2^(127 - 15)
static inline float fp16_scale(uint16_t h) {
    uint32_t bits = (uint32_t)(h & 0x7fffu) << 13;
    float f;
    memcpy(&f, &bits, sizeof(f));
    f *= 0x1p112f;
    return h & 0x8000u ? -f : f;
}

// values [first, first + count) dequantized into out
static void q8_dequantize(const QuantQ8 *q, float *out, size_t first, size_t count) {
    for (size_t i = first; i < first + count; i++) { out[i - first] = (float)q->q[i] * fp16_scale(q->d[i / Q8_BLOCK]); }
}

static void q8_free(QuantQ8 *q) {
    free(q->q); free(q->d);
    memset(q, 0, sizeof(*q));
}
// --- end shared-copy: q8_0 ---

// --- begin shared-copy: infer-quant-band ---
enum { QUANT_Q8_0 = 3 }; // (after quant4's QUANT_NONE, QUANT_NF4, QUANT_FP4)

// One band of rows of a linear layer's weight (rows, C), in one of the formats, blocked over
// its flattened values: a whole linear layer, or one Hugging Face module of a fused one.
typedef struct {
    int type;   // QUANT_NF4, QUANT_FP4 (q4) or QUANT_Q8_0 (q8)
    int rows;
    Quant4 q4;
    QuantQ8 q8;
} QuantBand;

static int band_blocksize(const QuantBand *b) { return b->type == QUANT_Q8_0 ? Q8_BLOCK : b->q4.blocksize; }
static void band_quantize(QuantBand *b, int type, int blocksize, int nested, const float *x, int rows, int C) {
    memset(b, 0, sizeof(*b));
    b->type = type;
    b->rows = rows;
    if (type == QUANT_Q8_0) { q8_quantize(&b->q8, x, (size_t)rows * C); }
    else { quant4_quantize(&b->q4, x, (size_t)rows * C, type, blocksize, nested); }
}
__attribute__((unused)) static void band_dequantize(const QuantBand *b, float *out, size_t first, size_t count) { // (infer.cu: its tests)
    if (b->type == QUANT_Q8_0) { q8_dequantize(&b->q8, out, first, count); }
    else { quant4_dequantize(&b->q4, out, first, count); }
}
static size_t band_bytes(const QuantBand *b) {
    return b->type == QUANT_Q8_0 ? b->q8.n + b->q8.num_blocks * sizeof(uint16_t) : quant4_bytes(&b->q4);
}
static void band_free(QuantBand *b) {
    if (b->type == QUANT_Q8_0) { q8_free(&b->q8); } else { quant4_free(&b->q4); }
}
// --- end shared-copy: infer-quant-band ---

// ----------------------------------------------------------------------------
// kernels and their launchers, in infer.c's order

// every launch goes to main_stream, and cuBLAS's too (gpt2_build makes them: GPU memory, below)
static cublasHandle_t cublas_handle;
static cudaStream_t main_stream;

#define BLOCK 256 // threads per block of the elementwise kernels

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

// residual[n, :] = wte[token] + wpe[position] (without wpe: wte[token]), in fp32; one thread per element
__global__ void encoder_forward_kernel(float *residual, const int *tokens, const int *pos, const floatX *wte,
                                       const floatX *wpe, int N, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) { return; }
    size_t n = i / C, c = i % C;
    residual[i] = to_float(wte[(size_t)tokens[n] * C + c]) + (wpe != NULL ? to_float(wpe[(size_t)pos[n] * C + c]) : 0.0f);
}

void encoder_forward(float *residual, const int *tokens, const int *pos, const floatX *wte, const floatX *wpe, int N, int C) {
    encoder_forward_kernel<<<ceil_div((size_t)N * C, BLOCK), BLOCK, 0, main_stream>>>(residual, tokens, pos, wte, wpe, N, C);
    cudaCheck(cudaGetLastError());
}

// LayerNorm (or, with rms, RMSNorm: no mean taken out, no bias) of rows of the fp32
// residual stream into floatX, a warp per row (two passes for the variance, as infer.c).
// rows: which residual row each output row normalises (the logit rows), or NULL for row n.
__global__ void layernorm_forward_kernel(floatX *out, const float *inp, const int *rows, const floatX *weight,
                                         const floatX *bias, int N, int C, float eps, int rms) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) { return; } // a whole warp leaves together
    const float *x = inp + (size_t)(rows != NULL ? rows[row] : row) * C;
    float m = 0.0f;
    for (int i = lane; i < C && !rms; i += 32) { m += x[i]; }
    m = warp_sum(m) / C;
    float v = 0.0f;
    for (int i = lane; i < C; i += 32) { float d = x[i] - m; v += d * d; }
    float s = 1.0f / sqrtf(warp_sum(v) / C + eps);
    floatX *o = out + (size_t)row * C;
    for (int i = lane; i < C; i += 32) {
        o[i] = from_float((x[i] - m) * s * to_float(weight[i]) + (bias != NULL ? to_float(bias[i]) : 0.0f));
    }
}

void layernorm_forward(floatX *out, const float *inp, const int *rows, const floatX *weight, const floatX *bias,
                       int N, int C, float eps, int rms) {
    layernorm_forward_kernel<<<ceil_div(N, BLOCK / 32), BLOCK, 0, main_stream>>>(out, inp, rows, weight, bias, N, C, eps, rms);
    cudaCheck(cudaGetLastError());
}

// --- begin shared-copy: infer-epilogue ---
// What a linear layer does with out[n, o] = inp[n] . weight[o] (+ bias[o]): each layer of
// the block has its own ending, fused into the matmul (or applied after a big one).
enum { EPI_LOGITS, EPI_QKV, EPI_GELU, EPI_RESIDUAL };
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

// One constructor per kind, so that a call site names what it sets.
static Epilogue epilogue_none(int kind) {
    Epilogue e;
    memset(&e, 0, sizeof(e));
    e.kind = kind;
    return e;
}
static Epilogue epilogue_logits(float *logits) { // (N, OC) fp32 as it is: the logits, or SwiGLU's gate and up
    Epilogue e = epilogue_none(EPI_LOGITS);
    e.f32 = logits;
    return e;
}
static Epilogue epilogue_qkv(const floatX *bias, floatX *q, floatX *key_cache, floatX *value_cache, const int *seq,
                             const int *pos, int S, int Q, int KV) { // queries to q, keys and values into the layer's cache
    Epilogue e = epilogue_none(EPI_QKV);
    e.bias = bias;
    e.x = q;
    e.key_cache = key_cache;
    e.value_cache = value_cache;
    e.seq = seq;
    e.pos = pos;
    e.S = S;
    e.q_size = Q;
    e.kv_size = KV;
    return e;
}
static Epilogue epilogue_gelu(const floatX *bias, floatX *out) {
    Epilogue e = epilogue_none(EPI_GELU);
    e.bias = bias;
    e.x = out;
    return e;
}
static Epilogue epilogue_residual(const floatX *bias, float *residual) { // residual += out + bias
    Epilogue e = epilogue_none(EPI_RESIDUAL);
    e.bias = bias;
    e.f32 = residual;
    return e;
}
// --- end shared-copy: infer-epilogue ---

#define GELU_SCALE 0.7978845608028654f // sqrt(2/pi)

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

#define GEMV_MAX_ROWS 8 // decode's linear layers: up to 8 rows through the matrix-vector kernels
#define GEMV_WARPS 8    // outputs per block (a warp each)

// -Q: a band of a quantized linear layer on the GPU (QuantBand's arrays, uploaded). A value's
// weight is its code times its block's scale, one rounding, as band_dequantize computes it
// on the host (__fmul_rn, __fadd_rn: no fused multiply-add, so the fp32 values are the same
// bit for bit).
typedef struct {
    int type, rows, blocksize;  // QUANT_NF4, QUANT_FP4 or QUANT_Q8_0; (rows, C); 32 for q8_0
    const uint8_t *codes;       // 4-bit: (n + 1) / 2 bytes, two codes each; q8_0: n int8
    const float *absmax;        // 4-bit: each block's, or under double quantization NULL, and ...
    const uint8_t *qabsmax;     // ... its 8 bits,
    const float *nested_absmax, *nested_code; // the second level's scales and map,
    float offset;               // ... and the mean
    const uint16_t *d;          // q8_0: each block's fp16 scale
} DeviceBand;

// A linear layer's weight as linear_forward reads it (model_linear): floatX on the GPU, or
// (-Q) its bands (descriptors on the host, their arrays on the GPU) and where a whole layer
// is dequantized for cuBLAS
typedef struct {
    const floatX *weight;    // (OC, C); NULL under -Q
    const DeviceBand *bands; // ... or num_bands bands, their rows adding up to OC
    int num_bands;
    floatX *dequantized;     // (OC, C) scratch: prefill's rows dequantize the layer here first
} Linear;

// --- begin shared-copy: quant4-device-codes ---
// quant4's NF4_CODE and FP4_CODE on the device
__device__ const float NF4_DEVICE[16] = {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
                                         -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
                                         0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
                                         0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};
__device__ const float FP4_DEVICE[16] = {0.0f, 0.0625f / 12, 8.0f / 12, 1.0f, 4.0f / 12, 6.0f / 12, 2.0f / 12, 3.0f / 12,
                                         0.0f, -0.0625f / 12, -8.0f / 12, -1.0f, -4.0f / 12, -6.0f / 12, -2.0f / 12, -3.0f / 12};
// --- end shared-copy: quant4-device-codes ---

// block b's scale: q8_0's fp16 (fp16_scale's arithmetic), a stored absmax, or one rebuilt
// from its 8 bits (quant4_absmax's)
__device__ inline float band_scale(const DeviceBand &b, size_t block) {
    if (b.type == QUANT_Q8_0) {
        uint16_t h = b.d[block];
        float f = __uint_as_float((uint32_t)(h & 0x7fffu) << 13) * 0x1p112f;
        return h & 0x8000u ? -f : f;
    }
    if (b.qabsmax != NULL) { return __fadd_rn(__fmul_rn(b.nested_code[b.qabsmax[block]], b.nested_absmax[block / QUANT_NESTED_BLOCK]), b.offset); }
    return b.absmax[block];
}
// value i's code, as a float (a 4-bit one from the codebook)
__device__ inline float band_code(const DeviceBand &b, size_t i) {
    if (b.type == QUANT_Q8_0) { return (float)(int8_t)b.codes[i]; }
    uint8_t byte = b.codes[i / 2];
    int index = i % 2 == 0 ? byte >> 4 : byte & 15;
    return b.type == QUANT_FP4 ? FP4_DEVICE[index] : NF4_DEVICE[index];
}

// prefill's rows: the band dequantized into W (rows, C) floatX, a thread a value
__global__ void dequantize_band_kernel(floatX *W, DeviceBand b, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) { return; }
    W[i] = from_float(__fmul_rn(band_code(b, i), band_scale(b, i / b.blocksize)));
}

// decode's rows: gemv_kernel's loop over a band's rows (output row0 + o of the layer's OC),
// each weight widened from its code as it is read. A lane takes 8 consecutive values at a
// time (all in one block: blocks are multiples of 32 values, rows start on multiples of 8
// when C is), their codes in one load: 4 bytes of 4-bit codes, 8 of 8-bit ones; a row of
// another width, a value at a time.
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

// Decode's linear layers: out[n, o] for N <= GEMV_MAX_ROWS input rows, a warp per output
// o. The lanes walk the weight row in 16-byte loads (8 bf16 or 4 fp32), each dotted with
// all N inputs (which stay in L1/L2), so every weight is read once per step: the kernel
// runs at the speed of memory. Most of decode's time goes here.
#define VEC (16 / (int)sizeof(floatX))
typedef struct __align__(16) { floatX v[VEC]; } Pack;

template <int N>
__global__ void __launch_bounds__(GEMV_WARPS * 32) gemv_kernel(const floatX *inp, const floatX *weight, Epilogue e, int C, int OC,
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

// An adapter's first half (-L): h = inp A^T (N, R) into e.lora_h, a warp per (n, j); the
// layer's epilogue adds h[n] . B[o] to each output (epilogue_apply)
#define LORA_WARPS 8
__global__ void __launch_bounds__(LORA_WARPS * 32) lora_down_kernel(const floatX *inp, Epilogue e, int N, int C) {
    int i = blockIdx.x * LORA_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (i >= N * e.lora_R) { return; }
    int n = i / e.lora_R, j = i % e.lora_R;
    const floatX *x = inp + (size_t)n * C;
    const float *a = e.lora_A + (size_t)j * C;
    float sum = 0.0f;
    for (int k = lane; k < C; k += 32) { sum += to_float(x[k]) * a[k]; }
    sum = warp_sum(sum);
    if (lane == 0) { e.lora_h[i] = sum; }
}

// the epilogue after a cuBLAS matmul (prefill, big batches): scratch (N, OC) fp32
__global__ void epilogue_kernel(const float *scratch, Epilogue e, int N, int OC) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * OC) { return; }
    epilogue_apply(e, (int)(i / OC), (int)(i % OC), OC, scratch[i]);
}

// A linear layer over N rows, out = inp (N, C) @ weight (OC, C)^T, then its epilogue:
// decode's rows (up to GEMV_MAX_ROWS) through gemv_kernel, the epilogue fused; more rows
// through cuBLAS into scratch (N, OC) fp32, then epilogue_kernel (the logits need none:
// cuBLAS writes them in place). cuBLAS is column-major: the row-major out (N, OC) is its
// out^T (OC x N) = weight^T (OC x C: the row-major weight read transposed) @ inp^T (C x N).
void linear_forward(const floatX *inp, Linear w, Epilogue e, float *scratch, int N, int C, int OC) {
    unsigned blocks = ceil_div(OC, GEMV_WARPS), threads = GEMV_WARPS * 32;
    if (e.lora_R > 0) {
        lora_down_kernel<<<ceil_div((size_t)N * e.lora_R, LORA_WARPS), LORA_WARPS * 32, 0, main_stream>>>(inp, e, N, C);
        cudaCheck(cudaGetLastError());
    }
    const floatX *weight = w.weight;
    if (w.bands != NULL && N <= GEMV_MAX_ROWS) { // -Q, decode: each band's rows through quant_gemv_kernel
        for (int k = 0, row0 = 0; k < w.num_bands; row0 += w.bands[k].rows, k++) {
            DeviceBand b = w.bands[k];
            unsigned grid = ceil_div(b.rows, GEMV_WARPS);
            switch (N) {
            case 1: quant_gemv_kernel<1><<<grid, threads, 0, main_stream>>>(inp, b, e, C, OC, row0); break;
            case 2: quant_gemv_kernel<2><<<grid, threads, 0, main_stream>>>(inp, b, e, C, OC, row0); break;
            case 3: quant_gemv_kernel<3><<<grid, threads, 0, main_stream>>>(inp, b, e, C, OC, row0); break;
            case 4: quant_gemv_kernel<4><<<grid, threads, 0, main_stream>>>(inp, b, e, C, OC, row0); break;
            case 5: quant_gemv_kernel<5><<<grid, threads, 0, main_stream>>>(inp, b, e, C, OC, row0); break;
            case 6: quant_gemv_kernel<6><<<grid, threads, 0, main_stream>>>(inp, b, e, C, OC, row0); break;
            case 7: quant_gemv_kernel<7><<<grid, threads, 0, main_stream>>>(inp, b, e, C, OC, row0); break;
            default: quant_gemv_kernel<8><<<grid, threads, 0, main_stream>>>(inp, b, e, C, OC, row0); break;
            }
            cudaCheck(cudaGetLastError());
        }
        return;
    }
    if (w.bands != NULL) { // -Q, prefill: the layer dequantized into floatX, then cuBLAS as below
        for (int k = 0, row0 = 0; k < w.num_bands; row0 += w.bands[k].rows, k++) {
            size_t n = (size_t)w.bands[k].rows * C;
            dequantize_band_kernel<<<ceil_div(n, BLOCK), BLOCK, 0, main_stream>>>(w.dequantized + (size_t)row0 * C, w.bands[k], n);
            cudaCheck(cudaGetLastError());
        }
        weight = w.dequantized;
    }
    // 16-byte loads need every row to start on 16 bytes: rows of C elements from aligned bases
    int vectorized = C % VEC == 0 && (uintptr_t)inp % 16 == 0 && (uintptr_t)weight % 16 == 0;
    switch (N) { // the row count a constant in each copy, so the accumulators live in registers
    case 1: gemv_kernel<1><<<blocks, threads, 0, main_stream>>>(inp, weight, e, C, OC, vectorized); break;
    case 2: gemv_kernel<2><<<blocks, threads, 0, main_stream>>>(inp, weight, e, C, OC, vectorized); break;
    case 3: gemv_kernel<3><<<blocks, threads, 0, main_stream>>>(inp, weight, e, C, OC, vectorized); break;
    case 4: gemv_kernel<4><<<blocks, threads, 0, main_stream>>>(inp, weight, e, C, OC, vectorized); break;
    case 5: gemv_kernel<5><<<blocks, threads, 0, main_stream>>>(inp, weight, e, C, OC, vectorized); break;
    case 6: gemv_kernel<6><<<blocks, threads, 0, main_stream>>>(inp, weight, e, C, OC, vectorized); break;
    case 7: gemv_kernel<7><<<blocks, threads, 0, main_stream>>>(inp, weight, e, C, OC, vectorized); break;
    case 8: gemv_kernel<8><<<blocks, threads, 0, main_stream>>>(inp, weight, e, C, OC, vectorized); break;
    default: {
        static const float one = 1.0f, zero = 0.0f; // static: a captured graph keeps pointers to them
        int direct = e.kind == EPI_LOGITS && e.bias == NULL && e.lora_R == 0; // logits need no epilogue: straight into place
        cublasCheck(cublasGemmEx(cublas_handle, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, weight, CUBLAS_FLOATX, C, inp,
                                 CUBLAS_FLOATX, C, &zero, direct ? e.f32 : scratch, CUDA_R_32F, OC, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
        if (!direct) { epilogue_kernel<<<ceil_div((size_t)N * OC, BLOCK), BLOCK, 0, main_stream>>>(scratch, e, N, OC); }
    }
    }
    cudaCheck(cudaGetLastError());
}

// Causal attention of row n (position pos[n] of sequence seq[n]) over its cached keys
// and values, query head h (key/value head h / (NH / NKV): grouped-query attention shares
// each among NH / NKV query heads), as flash-decoding does it (Dao et al. 2023): the row's
// positions 0..pos[n] are cut into parts of ATT_PART, and a block per (n, h, part) computes
// the part's share, with the scores in shared memory:
//   1. each thread scores some of the part's positions: q . k * scale; the block's max
//   2. exp(score - max) in place; the block's sum
//   3. the weighted values sum_t p_t v_t: groups of HS threads split the positions, one
//      channel a thread, and add their partial sums in shared memory (a head wider than the
//      block: each thread takes channels in turn over all positions)
// and writes its maximum, its sum of exponentials and its weighted values, unnormalised, to
// partial (N, NH, parts, HS + 2). A second kernel merges a row's parts: each rescaled by
// e^(its max - the largest), summed, divided by the total (the online softmax's merge: the
// result is the softmax's, to rounding). Why parts: a decode step of one sequence has NH
// blocks per row without them (12 for GPT-2, 9 for SmolLM2), a few of a GPU's hundred-odd
// SMs, each walking the whole cache; with them a 4,096-position cache makes 16 times as many
// blocks, each walking 256 positions. And no row of S scores is kept: the scratch is
// (HS + 2) / ATT_PART of it. The parts depend on the row's length only, so a row's result is
// the same whatever else is in the batch (infer.c's attention_decode cuts its work the same
// way, for its threads). Prefill's rows take the same kernels, each row on its own: a row's
// attention is the same sums in the same order whether it came in a prefill chunk or a decode
// step, at the price of each row reading its keys itself, where train_gpt2.cu's flash
// kernels share a tile of keys among 16 queries.
#define ATT_BLOCK 128
#define ATT_PART 256 // positions per part
static int attention_parts(int S) { return (S + ATT_PART - 1) / ATT_PART; }
__global__ void __launch_bounds__(ATT_BLOCK) attention_part_kernel(float *partial, const floatX *q, const floatX *key_cache,
                                                                   const floatX *value_cache, const int *seq, const int *pos,
                                                                   int S, int NH, int NKV, int HS, int parts) {
    int n = blockIdx.x, h = blockIdx.y, j = blockIdx.z, t0 = j * ATT_PART, T = pos[n] + 1;
    if (t0 >= T) { return; } // (the whole block: a part past the row's length)
    int len = T - t0 < ATT_PART ? T - t0 : ATT_PART;
    size_t Q = (size_t)NH * HS, KV = (size_t)NKV * HS, kv_head = (size_t)(h / (NH / NKV)) * HS;
    float scale = 1.0f / sqrtf((float)HS);
    const floatX *q_nh = q + (size_t)n * Q + (size_t)h * HS;
    const floatX *keys = key_cache + ((size_t)seq[n] * S + t0) * KV + kv_head;
    const floatX *values = value_cache + ((size_t)seq[n] * S + t0) * KV + kv_head;
    __shared__ float scores[ATT_PART];
    float maxval = -INFINITY;
    for (int t = threadIdx.x; t < len; t += blockDim.x) {
        const floatX *k = keys + (size_t)t * KV;
        float s = 0.0f;
        for (int i = 0; i < HS; i++) { s += to_float(q_nh[i]) * to_float(k[i]); }
        scores[t] = s * scale;
        maxval = fmaxf(maxval, s * scale);
    }
    maxval = block_max(maxval);
    float sum = 0.0f;
    for (int t = threadIdx.x; t < len; t += blockDim.x) {
        float p = expf(scores[t] - maxval);
        scores[t] = p;
        sum += p;
    }
    sum = block_sum(sum); // (its __syncthreads also makes every score visible to the block)
    float *slot = partial + (((size_t)n * NH + h) * parts + j) * (HS + 2);
    if (threadIdx.x == 0) {
        slot[0] = maxval;
        slot[1] = sum;
    }
    if (HS > (int)blockDim.x) { // heads wider than the block (no GPT-2 has one): channels in turn
        for (int i = threadIdx.x; i < HS; i += blockDim.x) {
            float o = 0.0f;
            for (int t = 0; t < len; t++) { o += scores[t] * to_float(values[(size_t)t * KV + i]); }
            slot[2 + i] = o;
        }
        return;
    }
    __shared__ float partial_sums[ATT_BLOCK];
    int groups = blockDim.x / HS, g = threadIdx.x / HS, i = threadIdx.x % HS;
    float o = 0.0f;
    if (g < groups) {
        for (int t = g; t < len; t += groups) { o += scores[t] * to_float(values[(size_t)t * KV + i]); }
    }
    partial_sums[threadIdx.x] = o;
    __syncthreads();
    if ((int)threadIdx.x < HS) {
        float total = 0.0f;
        for (int k = 0; k < groups; k++) { total += partial_sums[k * HS + threadIdx.x]; }
        slot[2 + threadIdx.x] = total;
    }
}
// a row's parts merged, a block per (n, h), a thread per channel (in turn)
__global__ void __launch_bounds__(ATT_BLOCK) attention_merge_kernel(floatX *out, const float *partial, const int *pos, int NH,
                                                                    int HS, int parts) {
    int n = blockIdx.x, h = blockIdx.y, used = (pos[n] + ATT_PART) / ATT_PART; // ceil((pos + 1) / ATT_PART)
    const float *slots = partial + ((size_t)n * NH + h) * parts * (HS + 2);
    float m = -INFINITY, total = 0.0f;
    for (int j = 0; j < used; j++) { m = fmaxf(m, slots[(size_t)j * (HS + 2)]); }
    for (int j = 0; j < used; j++) { total += slots[(size_t)j * (HS + 2) + 1] * expf(slots[(size_t)j * (HS + 2)] - m); }
    floatX *out_nh = out + ((size_t)n * NH + h) * HS;
    for (int i = threadIdx.x; i < HS; i += blockDim.x) {
        float o = 0.0f;
        for (int j = 0; j < used; j++) { o += expf(slots[(size_t)j * (HS + 2)] - m) * slots[(size_t)j * (HS + 2) + 2 + i]; }
        out_nh[i] = from_float(o / total);
    }
}

// att: the parts' scratch (N, NH, attention_parts(S), HS + 2)
void attention_forward(floatX *out, float *att, const floatX *q, const floatX *key_cache, const floatX *value_cache,
                       const int *seq, const int *pos, int N, int S, int NH, int NKV, int HS) {
    int parts = attention_parts(S);
    attention_part_kernel<<<dim3(N, NH, parts), ATT_BLOCK, 0, main_stream>>>(att, q, key_cache, value_cache, seq, pos, S, NH,
                                                                            NKV, HS, parts);
    cudaCheck(cudaGetLastError());
    attention_merge_kernel<<<dim3(N, NH), ATT_BLOCK, 0, main_stream>>>(out, att, pos, NH, HS, parts);
    cudaCheck(cudaGetLastError());
}

// RoPE on the queries of N rows and the keys they just put into the cache: one thread per
// pair (i, i + HS/2) of a head, turned by the angle whose cosine and sine the table (S, HS)
// holds (on the GPU; rope_table_fill made it on the host, the same numbers as infer.c's)
__global__ void rope_forward_kernel(floatX *q, floatX *key_cache, const float *table, const int *seq, const int *pos,
                                    int N, int S, int NH, int NKV, int HS) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x, half = HS / 2, heads = NH + NKV;
    if (idx >= (size_t)N * heads * half) { return; }
    int n = (int)(idx / (heads * half)), h = (int)(idx / half % heads), i = (int)(idx % half);
    floatX *x = h < NH ? q + (size_t)n * NH * HS + (size_t)h * HS
                       : key_cache + ((size_t)seq[n] * S + pos[n]) * NKV * HS + (size_t)(h - NH) * HS;
    float c = table[(size_t)pos[n] * HS + i], s = table[(size_t)pos[n] * HS + half + i];
    float x0 = to_float(x[i]), x1 = to_float(x[i + half]);
    x[i] = from_float(x0 * c - x1 * s);
    x[i + half] = from_float(x1 * c + x0 * s);
}

void rope_forward(floatX *q, floatX *key_cache, const float *table, const int *seq, const int *pos, int N, int S,
                  int NH, int NKV, int HS) {
    rope_forward_kernel<<<ceil_div((size_t)N * (NH + NKV) * (HS / 2), BLOCK), BLOCK, 0, main_stream>>>(q, key_cache, table, seq,
                                                                                                     pos, N, S, NH, NKV, HS);
    cudaCheck(cudaGetLastError());
}

// SwiGLU: out[n, j] = silu(gate[n, j]) * up[n, j] from the fused matmul's (N, 2H) fp32 output
// (each row's H gates, then its H ups); one thread per output
__global__ void swiglu_forward_kernel(floatX *out, const float *inp, int N, int H) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * H) { return; }
    size_t n = i / H, j = i % H;
    float gate = inp[n * 2 * H + j], up = inp[n * 2 * H + H + j];
    out[i] = from_float(gate / (1.0f + expf(-gate)) * up);
}

void swiglu_forward(floatX *out, const float *inp, int N, int H) {
    swiglu_forward_kernel<<<ceil_div((size_t)N * H, BLOCK), BLOCK, 0, main_stream>>>(out, inp, N, H);
    cudaCheck(cudaGetLastError());
}

// The most probable token of each logit row (the lowest id on ties, as infer.c): a block
// per row, each thread a stride of the vocabulary, then a tree in shared memory.
#define ARGMAX_BLOCK 256
__global__ void __launch_bounds__(ARGMAX_BLOCK) argmax_kernel(int *out, const float *logits, int V, int Vp) {
    const float *row = logits + (size_t)blockIdx.x * Vp;
    float best = -INFINITY;
    int best_id = 0x7fffffff;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        if (row[i] > best) { best = row[i]; best_id = i; } // ascending i: ties keep the first
    }
    __shared__ float values[ARGMAX_BLOCK];
    __shared__ int ids[ARGMAX_BLOCK];
    values[threadIdx.x] = best;
    ids[threadIdx.x] = best_id;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if ((int)threadIdx.x < stride) {
            float v = values[threadIdx.x + stride];
            int id = ids[threadIdx.x + stride];
            if (v > values[threadIdx.x] || (v == values[threadIdx.x] && id < ids[threadIdx.x])) {
                values[threadIdx.x] = v;
                ids[threadIdx.x] = id;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) { out[blockIdx.x] = ids[0] == 0x7fffffff ? 0 : ids[0]; }
}

void argmax_forward(int *out, const float *logits, int NL, int V, int Vp) {
    argmax_kernel<<<NL, ARGMAX_BLOCK, 0, main_stream>>>(out, logits, V, Vp);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// GPU memory, the cuBLAS handle and the stream

static void *cuda_malloc_check(size_t bytes, const char *what) {
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes > 0 ? bytes : 1);
    if (err != cudaSuccess) {
        size_t free_bytes = 0, total_bytes = 0;
        cudaGetLastError(); // clear the error, so that the query below works
        cudaMemGetInfo(&free_bytes, &total_bytes);
        fprintf(stderr, "Error: out of GPU memory: %s need %.1f MiB, %.1f MiB of %.1f MiB are free (%s)\n"
                "HINT: fewer sequences at once (-f with fewer lines, -b for -B), shorter generations (-n), or bf16 (PRECISION=BF16)\n",
                what, bytes / 1048576.0, free_bytes / 1048576.0, total_bytes / 1048576.0, cudaGetErrorString(err));
        exit(EXIT_FAILURE);
    }
    return p;
}

// Tensors carved out of one GPU allocation (the weights; the KV cache, a slice per layer
// for keys, then one per layer for values; the row buffers). Tensor k is bytes [begin[k],
// end[k]) of memory. With GUARD_BYTES > 0, the bytes from its end to where the next one
// begins (or the allocation ends) are its guard band: its pattern (guard_byte, lib/cuda_utils.h), checked
// after every pass.
typedef struct {
    const char *group;        // for messages: "weight", "KV cache", "row buffer"
    const char *const *names; // (n) the tensors' names; NULL for the KV cache's slices
    int n;
    size_t *begin, *end;      // (n) bytes from memory
    size_t bytes;             // the allocation's
    char *memory;
} DeviceTable;

// The guard band after each tensor: GUARD_BYTES rounded up to 256, so that every tensor
// starts at the same address mod 256 as without bands, and the kernels take the same
// paths (16-byte loads or not) in debug builds as in the others.
#define GUARD_GAP (((size_t)GUARD_BYTES + 255) / 256 * 256)

static size_t guard_band_end(const DeviceTable *t, int k) { return k + 1 < t->n ? t->begin[k + 1] : t->bytes; }

// every band of a table holds its pattern: after allocating, and after anything that sets a whole table
static void guard_fill(const DeviceTable *t) {
    if (GUARD_BYTES > 0) {
        for (int k = 0; k < t->n; k++) { guard_fill_band(t->memory + t->end[k], guard_band_end(t, k) - t->end[k], k); }
    }
}

// After a forward pass (debug builds): a band that lost its pattern means a kernel wrote
// past the end of the tensor before it. Says which, and exits.
static void guard_check(const DeviceTable *t) {
    for (int k = 0; k < t->n; k++) {
        size_t len = guard_band_end(t, k) - t->end[k];
        long at = guard_band_broken(t->memory + t->end[k], len, k);
        if (at < 0) { continue; }
        char name[64];
        if (t->names != NULL) { snprintf(name, sizeof(name), "%s", t->names[k]); }
        else { snprintf(name, sizeof(name), "%s of layer %d", k < t->n / 2 ? "keys" : "values", k % (t->n / 2)); }
        fprintf(stderr, "Error: a kernel wrote past the end of %s tensor %s (guard band after it overwritten at byte %ld of %zu)\n",
                t->group, name, at, len);
        exit(EXIT_FAILURE);
    }
}

// One allocation for the n tensors of a table, bytes[k] each: tensor k starts at the first
// multiple of `align` after the one before (1: right after it), then a guard band.
static char *table_allocate(DeviceTable *t, const char *group, const char *const *names, const size_t *bytes, int n,
                            size_t align, const char *what) {
    t->group = group;
    t->names = names;
    t->n = n;
    t->begin = (size_t *)mallocCheck(n * sizeof(size_t));
    t->end = (size_t *)mallocCheck(n * sizeof(size_t));
    size_t at = 0;
    for (int k = 0; k < n; k++) {
        t->begin[k] = at;
        t->end[k] = at + bytes[k];
        at = (t->end[k] + align - 1) / align * align + GUARD_GAP;
    }
    t->bytes = at;
    t->memory = (char *)cuda_malloc_check(at, what);
    guard_fill(t);
    return t->memory;
}

static void table_free(DeviceTable *t) {
    cudaCheck(cudaFree(t->memory));
    free(t->begin);
    free(t->end);
    memset(t, 0, sizeof(*t));
}

#define CUBLAS_WORKSPACE (32u << 20) // cuBLAS's own scratch, ours so that graph capture never allocates
static void *cublas_workspace;
static int gpu_users; // models built and not yet freed: the handle and the stream live while there are any

// The cuBLAS handle and the stream, made for the first model built and ended with the last one freed.
static void gpu_acquire(void) {
    if (gpu_users++ > 0) { return; }
    int devices = 0;
    cudaError_t err = cudaGetDeviceCount(&devices);
    if (err != cudaSuccess || devices == 0) {
        fprintf(stderr, "Error: no CUDA GPU found (%s)\nHINT: ./infer runs the same on the CPU\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
        exit(EXIT_FAILURE);
    }
    cublasCheck(cublasCreate(&cublas_handle));
    cudaCheck(cudaStreamCreate(&main_stream));
    cublasCheck(cublasSetStream(cublas_handle, main_stream));
    cublas_workspace = cuda_malloc_check(CUBLAS_WORKSPACE, "cuBLAS's workspace");
    cublasCheck(cublasSetWorkspace(cublas_handle, cublas_workspace, CUBLAS_WORKSPACE));
#if defined(ENABLE_FP32)
    // fp32 means fp32: no TF32 tensor cores (they would round the inputs to 10 bits)
    cublasCheck(cublasSetMathMode(cublas_handle, CUBLAS_PEDANTIC_MATH));
#endif
}

static void gpu_release(void) {
    if (--gpu_users > 0) { return; }
    cudaCheck(cudaFree(cublas_workspace));
    cublasCheck(cublasDestroy(cublas_handle));
    cudaCheck(cudaStreamDestroy(main_stream));
    cublas_workspace = NULL;
    cublas_handle = NULL;
    main_stream = NULL;
}

// ----------------------------------------------------------------------------
// the model: its configuration, its tensors (on the host and on the GPU), what a forward pass keeps

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

// --- begin shared-copy: infer-model-config ---
// What the forward pass needs to know of a model of either family: GPT2Config's fields,
// under the same names, and what the Llama family adds.
typedef struct {
    int max_seq_len, vocab_size, padded_vocab_size, num_layers, num_heads, channels; // as GPT2Config's
    int llama;        // 0: GPT-2; 1: the Llama family (RMSNorm, RoPE, SwiGLU, grouped-query attention)
    int num_kv_heads; // key/value heads (GPT-2: one per query head)
    int head_size;    // HS (GPT-2: C / NH)
    int hidden;       // the MLP's width H (GPT-2: 4C)
    float norm_eps;   // GPT-2's LayerNorm: 1e-5
    int bos_token, eos_token; // where a text starts and the token that ends it, -1: none (GPT-2: <|endoftext|>, 50256, for both)
    int lora_rank;    // with an adapter (-L): its widest site's stacked rank R (LoraSite); 0: none
} ModelConfig;

// bytes of keys and values one token adds to the cache
static size_t kv_bytes_per_token(ModelConfig c) {
    return 2 * (size_t)c.num_layers * c.num_kv_heads * c.head_size * KV_ELEMENT_BYTES;
}

// The tensors the forward pass reads, of either family: GPT-2's 16, the Llama family's
// without biases (NULL; Qwen2 has qkvb) and wpe, and lm_head, the output head (wte when tied,
// as GPT-2's always is). Shapes per layer: qkvw (Q + 2 KV, C) with Q = NH HS and KV = NKV HS;
// attprojw (C, Q); fcw (H, C), or the Llama family's (2H, C): gate rows, then up rows;
// fcprojw (C, H). (infer.c: a copy, the linear layers' weights laid out in panels for its
// GEMM; infer.cu: floatX copies on the GPU.)
typedef struct {
    floatX *wte, *wpe, *ln1w, *ln1b;
    weightX *qkvw; // (the linear layers' weights: weightX)
    floatX *qkvb;
    weightX *attprojw;
    floatX *attprojb, *ln2w, *ln2b;
    weightX *fcw;
    floatX *fcb;
    weightX *fcprojw;
    floatX *fcprojb, *lnfw, *lnfb;
    weightX *lm_head;
} ForwardTensors;
// --- end shared-copy: infer-model-config ---
static const char *const FORWARD_TENSOR_NAMES[] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w",
                                                   "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb", "lm_head"};

// --- begin shared-copy: infer-lora-site ---
// An adapter applied unmerged (-L, a PEFT LoRA folder as finetune_lora writes): each adapted
// linear layer of a block (a site: QKV, the attention's projection, the MLP's two) adds
// s (x A^T) B^T to its output, before the bias and its epilogue. A site's modules are
// stacked (lora_sites_build): A (R, in) their A's one under the other, s folded in; B (OC, R)
// their B's side by side, each in its band of the fused layer's rows (q_proj's, k_proj's,
// v_proj's of QKV; gate's and up's of the MLP), zeros elsewhere; R = r x the modules there.
typedef struct {
    int R;          // 0: the site is not adapted
    const float *A; // (R, in) fp32 (infer.cu: on the GPU)
    const float *B; // (OC, R)
} LoraSite;
// --- end shared-copy: infer-lora-site ---

// -Q's format for a linear layer (infer.c's)
typedef struct {
    int type, blocksize, nested;
} QuantSpec;
#define NUM_LINEAR 5 // the linear layers: a block's four (SITE_QKV .. SITE_FCPROJ), then the head
#define LINEAR_HEAD 4
#define MAX_BANDS 3  // a linear layer's Hugging Face modules at most (q, k, v)

typedef struct GPT2 GPT2;
#define NUM_FORWARD_TENSORS 17 // the tensors the forward pass reads (forward_sources, with the models in)

// --- begin shared-copy: infer-row-buffers ---
// What one forward pass over up to N rows needs, NL of them with logits. Nothing is kept
// from one pass to the next except what goes into the KV cache, so one set of buffers
// serves every layer.
typedef struct {
    int *tokens, *seq, *pos; // (N) the rows: token, sequence, position
    int *logit_rows;         // (NL) which rows get logits
    int *argmax;             // (NL) greedy's tokens
    float *residual;         // (N, C) the residual stream
    floatX *ln;              // (N, C) a LayerNorm's output
    floatX *q;               // (N, Q) queries, Q = NH x HS (keys and values go to the cache)
    floatX *atty;            // (N, Q) attention output
    floatX *fch;             // (N, H) the MLP's hidden layer: GELU's (H = 4C) or SwiGLU's output
    float *scratch;          // (N, the widest matmul output) a big matmul's fp32 output before its epilogue
    float *att;              // attention's scratch: infer.cu's parts (N, NH, ceil(S / 256), HS + 2); none in infer.c
    float *logits;           // (NL, Vp)
    float *lora_h;           // (N, lora_rank) an adapter's x A^T, at one site at a time (-L)
} RowBuffers;
#define NUM_ROW_BUFFERS 14
// --- end shared-copy: infer-row-buffers ---
static const char *const ROW_BUFFER_NAMES[NUM_ROW_BUFFERS] = {
    "tokens", "seq", "pos", "logit_rows", "argmax", "residual", "ln", "q", "atty", "fch", "scratch", "att", "logits",
    "lora_h"};

// a decode step captured for n rows, replayed every step with that many sequences going
// (up to 64 sequences: beyond, the matmuls take long enough that launching costs little)
#define MAX_GRAPHS 65
struct GPT2 {
    ModelConfig config;
    GPT2Weights w;       // the weights as loaded (host, fp32): GPT-2's (freed once uploaded)
    LlamaWeights lw;     // ... or the Llama family's
    size_t num_parameters;
    char source[4096];   // where they came from, for messages
    ForwardTensors params; // on the GPU, in floatX
    size_t weight_bytes;   // their bytes
    size_t step_bytes;     // ... and those a decode step reads (all but the embedding tables, unless the head is wte)
    DeviceTable params_table;
    QuantSpec quant[NUM_LINEAR]; // -Q: each linear layer's format (QUANT_NONE: floatX in params)
    DeviceBand *bands;           // ... its bands: (NUM_LINEAR, L, MAX_BANDS) descriptors, unused ones of 0 rows
    DeviceTable quant_table;     // ... their arrays on the GPU
    floatX *dequantized;         // ... and a layer's scratch for prefill (the largest quantized layer)
    DeviceTable dequantized_table;
    char weights_type[160];      // what the weights are stored in, for reports
    float *rope_host;     // the Llama family: RoPE's HS/2 frequencies (rope_frequencies)
    float *rope_table;    // ... their cosines and sines at the cache's S positions (S, HS), on the GPU
    floatX *key_cache;   // (L, B, S, KV), layer l at key_cache + l * cache_layer
    floatX *value_cache; // (L, B, S, KV), the same
    size_t cache_layer;  // elements from one layer's slice to the next: B*S*KV (and a guard band)
    int cache_batch, cache_len; // B, S
    DeviceTable cache_table;
    LoraSite *lora_sites; // -L: (L, NUM_SITES) the adapter, stacked per site; NULL: none
    float *lora_memory;   // ... its A's and B's (infer.cu: on the GPU)
    DeviceTable lora_table; // (infer.cu: where they are)
    int lora_on;          // 1: applied (the evaluation, -E, answers with it off too: the base model)
    char lora_source[4096]; // the adapter's folder, and what it holds, for reports
    RowBuffers rows;
    DeviceTable rows_table;
    int max_rows, max_logit_rows;
    float *logits; // (max_logit_rows, Vp) on the host: the last pass's logits, copied back unless greedy
    int *argmax;   // (max_logit_rows) on the host: the last greedy pass's tokens
    cudaGraphExec_t graphs[MAX_GRAPHS]; // [n]: the decode step of n rows, or NULL
    int graph_argmax[MAX_GRAPHS];       // whether graphs[n] ends with the argmax
    int use_graphs;                     // 0: launch the kernels one by one (tests compare)
    int gpu_held;                       // gpt2_build took the cuBLAS handle and stream (gpu_acquire)
};

// ----------------------------------------------------------------------------
// models in: llm.c's checkpoints, our Llama-family files, new random models

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

// --- begin shared-copy: infer-models-in ---
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

// RoPE's cosines and sines of every position 0..S-1: for each, HS/2 cosines of pos *
// inv_freq[i], then the HS/2 sines (the angles in float, as transformers computes them)
static void rope_table_fill(float *table, const float *inv_freq, int S, int HS) {
    for (int t = 0; t < S; t++) {
        for (int i = 0; i < HS / 2; i++) {
            float angle = (float)t * inv_freq[i];
            table[(size_t)t * HS + i] = cosf(angle);
            table[(size_t)t * HS + HS / 2 + i] = sinf(angle);
        }
    }
}
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

// -m: a checkpoint file (GPT-2's, llm.c's format; or our Llama-family file, told apart by its
// magic number), d<N> for a new random GPT-2, or llama:NAME for a random Llama-family shape. We read only the project's own files: a
// Hugging Face folder or a GGUF file goes through ./convert first (a one-line hint says how).
void model_weights_build(GPT2 *model, const char *source, uint64_t seed) {
    struct stat info;
    if (stat(source, &info) == 0 && S_ISDIR(info.st_mode)) {
        char name[MAX_PATH_LEN];
        format_path(name, sizeof(name), "%s", source);
        for (size_t n = strlen(name); n > 1 && name[n - 1] == '/'; n--) { name[n - 1] = '\0'; }
        die_file(source, NULL, "is a folder; " PROGRAM " reads our model files (a Hugging Face folder: "
                 "./convert -i %s -o %s.bin, then -m %s.bin)", name, name, name);
    } else if (stat(source, &info) == 0) {
        size_t n = strlen(source);
        if (n > 5 && strcmp(source + n - 5, ".gguf") == 0) {
            die_file(source, NULL, "is a GGUF file; " PROGRAM " reads our model files (./convert -i %s -o %.*s.bin first)",
                     source, (int)(n - 5), source);
        }
        FILE *fp = fopenCheck(source, "rb");
        int magic = 0;
        if (fread(&magic, sizeof(magic), 1, fp) != 1) { magic = 0; }
        fcloseCheck(fp);
        if (magic == LLAMA_MAGIC) { llama_load(&model->lw, source); }
        else { gpt2_build_from_checkpoint(&model->w, source); }
    } else if (llama_random(&model->lw, source, seed)) {
        // (a random Llama-family model of a named shape)
    } else if (source[0] == 'd' && source[1] >= '0' && source[1] <= '9') {
        model->w.config = gpt2_config_from_descriptor(source);
        gpt2_weights_allocate(&model->w);
        init_parameters(model->w.params_memory, model->w.param_sizes, model->w.config, seed, 0);
    } else {
        die_file(source, "-m takes a model file, d<N> (a random GPT-2) or llama:NAME (a random Llama shape), "
                 "the last two for benchmarks", "no such file or folder");
    }
    snprintf(model->source, sizeof(model->source), "%s", source);
    ModelConfig *c = &model->config;
    if (model->lw.params != NULL) {
        LlamaConfig l = model->lw.config;
        *c = (ModelConfig){l.max_seq_len, l.vocab_size, l.vocab_size, l.num_layers, l.num_heads, l.channels, 1,
                           l.num_kv_heads, l.head_size, l.hidden, l.norm_eps, l.bos_token_id, l.eos_token_id, 0}; // (no adapter yet)
        model->num_parameters = model->lw.num_parameters;
        for (size_t k = 0; model->lw.qw != NULL && k < (size_t)l.num_layers * 4 * 3; k++) { model->num_parameters += model->lw.qw[k].n; }
        model->rope_host = rope_frequencies(&l);
    } else {
        GPT2Config g = model->w.config;
        int eot = g.vocab_size > 50256 ? 50256 : -1;
        *c = (ModelConfig){g.max_seq_len, g.vocab_size, g.padded_vocab_size, g.num_layers, g.num_heads, g.channels, 0,
                           g.num_heads, g.channels / g.num_heads, 4 * g.channels, 1e-5f, eot, eot, 0}; // (no adapter yet)
        model->num_parameters = model->w.num_parameters;
    }
}

// The loaded tensors in ForwardTensors' order and their sizes (NULL and 0: the model has
// none; a tied lm_head is wte, with size 0: nothing of its own).
static void forward_sources(const GPT2 *model, const float **src, size_t *sizes) {
    memset(src, 0, NUM_FORWARD_TENSORS * sizeof(*src));
    memset(sizes, 0, NUM_FORWARD_TENSORS * sizeof(*sizes));
    if (!model->config.llama) { // ParameterTensors: GPT-2's 16, in ForwardTensors' order
        const float *const *t = (const float *const *)&model->w.params;
        for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) { src[k] = t[k]; sizes[k] = model->w.param_sizes[k]; }
        src[16] = src[0];
        return;
    }
    const LlamaWeights *l = &model->lw; // ForwardTensors' slot of each of ours
    static const int slot[NUM_LLAMA_TENSORS] = {0, 2, 4, 5, 6, 8, 10, 12, 14, 16}; // wte ln1w qkvw qkvb attprojw ln2w fcw fcprojw lnfw lm_head
    for (int k = 0; k < NUM_LLAMA_TENSORS; k++) { src[slot[k]] = l->tensors[k]; sizes[slot[k]] = l->sizes[k]; }
    if (l->config.tied) { src[16] = src[0]; }
}

// --- end shared-copy: infer-models-in ---

// ----------------------------------------------------------------------------
// the model in memory: row buffers, the KV cache, build and free

// --- begin shared-copy: infer-row-sizes ---
// The bytes of each row buffer (RowBuffers' order) for passes of up to N rows, NL with logits,
// and att_floats for the attention's scratch (infer.cu's partial sums; none in infer.c).
static void row_buffer_bytes(size_t *bytes, ModelConfig c, size_t N, size_t NL, size_t att_floats) {
    size_t C = c.channels, Q = (size_t)c.num_heads * c.head_size, KV = (size_t)c.num_kv_heads * c.head_size, H = c.hidden;
    size_t widest = Q + 2 * KV > C ? Q + 2 * KV : C; // the matmuls' fp32 outputs: qkv, the MLP's (SwiGLU: 2H), C
    widest = widest > (c.llama ? 2 : 1) * H ? widest : (c.llama ? 2 : 1) * H;
    size_t X = sizeof(floatX), I = sizeof(int), F = sizeof(float);
    size_t b[NUM_ROW_BUFFERS] = {N * I, N * I, N * I, NL * I, NL * I, N * C * F, N * C * X, N * Q * X, N * Q * X, N * H * X,
                                 N * widest * F, att_floats * F, NL * c.padded_vocab_size * F, N * c.lora_rank * F};
    memcpy(bytes, b, sizeof(b));
}
// --- end shared-copy: infer-row-sizes ---

static void gpt2_drop_graphs(GPT2 *model) {
    for (int n = 0; n < MAX_GRAPHS; n++) {
        if (model->graphs[n] != NULL) { cudaCheck(cudaGraphExecDestroy(model->graphs[n])); }
        model->graphs[n] = NULL;
    }
}

static void gpt2_free_rows(GPT2 *model) {
    table_free(&model->rows_table);
    free(model->logits);
    free(model->argmax);
    model->logits = NULL;
    model->argmax = NULL;
    memset(&model->rows, 0, sizeof(model->rows));
    model->max_rows = model->max_logit_rows = 0;
}

// Buffers for forward passes of up to N rows, NL of them with logits: on the GPU one
// allocation, each buffer on 256 bytes; on the host the logits and tokens that come back.
void gpt2_allocate_rows(GPT2 *model, int N, int NL) {
    gpt2_drop_graphs(model); // they hold pointers into the old buffers
    gpt2_free_rows(model);
    ModelConfig c = model->config;
    size_t S = model->cache_len > 0 ? model->cache_len : 1, bytes[NUM_ROW_BUFFERS];
    // (the attention's parts: (N, NH, attention_parts(S), HS + 2) floats)
    row_buffer_bytes(bytes, c, (size_t)N, (size_t)NL, (size_t)N * c.num_heads * attention_parts((int)S) * (c.head_size + 2));
    // each on 256 bytes, as if allocated alone (16-byte loads need 16)
    char *m = table_allocate(&model->rows_table, "row buffer", ROW_BUFFER_NAMES, bytes, NUM_ROW_BUFFERS, 256,
                             "the row buffers (activations, attention's parts, logits)");
    const size_t *at = model->rows_table.begin;
    RowBuffers *r = &model->rows;
    r->tokens = (int *)(m + at[0]);
    r->seq = (int *)(m + at[1]);
    r->pos = (int *)(m + at[2]);
    r->logit_rows = (int *)(m + at[3]);
    r->argmax = (int *)(m + at[4]);
    r->residual = (float *)(m + at[5]);
    r->ln = (floatX *)(m + at[6]);
    r->q = (floatX *)(m + at[7]);
    r->atty = (floatX *)(m + at[8]);
    r->fch = (floatX *)(m + at[9]);
    r->scratch = (float *)(m + at[10]);
    r->att = (float *)(m + at[11]);
    r->logits = (float *)(m + at[12]);
    r->lora_h = (float *)(m + at[13]);
    model->logits = (float *)mallocCheck((size_t)NL * c.padded_vocab_size * sizeof(float));
    model->argmax = (int *)mallocCheck((size_t)NL * sizeof(int));
    model->max_rows = N;
    model->max_logit_rows = NL;
}

// The KV cache for B sequences of up to S positions each (floatX). At GPT-2 124M in
// bf16: 36 KiB a token, 2.3 GiB for 64 full 1024-token sequences.
void gpt2_allocate_cache(GPT2 *model, int B, int S) {
    gpt2_drop_graphs(model); // they hold pointers into the old buffers
    table_free(&model->cache_table);
    ModelConfig c = model->config;
    int L = c.num_layers;
    size_t *bytes = (size_t *)mallocCheck(2 * (size_t)L * sizeof(size_t));
    for (int k = 0; k < 2 * L; k++) { bytes[k] = (size_t)B * S * c.num_kv_heads * c.head_size * sizeof(floatX); }
    char *memory = table_allocate(&model->cache_table, "KV cache", NULL, bytes, 2 * L, 1, "the KV cache");
    free(bytes);
    model->key_cache = (floatX *)memory;
    model->value_cache = (floatX *)(memory + model->cache_table.begin[L]);
    model->cache_layer = (model->cache_table.begin[1] - model->cache_table.begin[0]) / sizeof(floatX);
    model->cache_batch = B;
    model->cache_len = S;
    if (c.llama) { // RoPE's cosines and sines for the S positions, made on the host
        size_t n = (size_t)S * c.head_size;
        float *table = (float *)mallocCheck(n * sizeof(float));
        rope_table_fill(table, model->rope_host, S, c.head_size);
        if (model->rope_table != NULL) { cudaCheck(cudaFree(model->rope_table)); }
        model->rope_table = (float *)cuda_malloc_check(n * sizeof(float), "RoPE's table");
        cudaCheck(cudaMemcpy(model->rope_table, table, n * sizeof(float), cudaMemcpyHostToDevice));
        free(table);
    }
    // the attention's parts scale with S too
    if (model->max_rows > 0) { gpt2_allocate_rows(model, model->max_rows, model->max_logit_rows); }
}

// --- begin shared-copy: infer-quant-spec ---
// -Q SPEC[,HEAD]: the format of the four linear layers of every block, and of the output head
// (none unless HEAD says: bitsandbytes leaves it as it is; llama.cpp's files have it in
// 8 bits). A SPEC is none, q8_0, or nf4 / fp4 with :BLOCKSIZE (64) and :0 or :1 (double
// quantization, 1), as finetune_lora -Q. Returns 0, or -1 with why in err.
static int parse_quant_spec(const char *v, QuantSpec *spec, char *err, size_t err_size) {
    char type[16] = "", again[64];
    long blocksize = 64, nested = 1;
    int got = sscanf(v, "%15[a-z0-9_]:%ld:%ld", type, &blocksize, &nested);
    snprintf(again, sizeof(again), got >= 3 ? "%s:%ld:%ld" : got == 2 ? "%s:%ld" : "%s", type, blocksize, nested);
    int four = strcmp(type, "nf4") == 0 || strcmp(type, "fp4") == 0;
    if (got < 1 || strcmp(again, v) != 0 || (!four && (got > 1 || (strcmp(type, "none") != 0 && strcmp(type, "q8_0") != 0)))) {
        snprintf(err, err_size, "'%s': expected none, q8_0, or nf4 or fp4 then optionally :BLOCKSIZE and :0 or :1 (double quantization)", v);
        return -1;
    }
    if (!quant4_blocksize_ok(blocksize)) { snprintf(err, err_size, "'%s': the blocksize must be a power of two from 32 to 4096", v); return -1; }
    if (nested != 0 && nested != 1) { snprintf(err, err_size, "'%s': double quantization is 0 or 1", v); return -1; }
    spec->type = strcmp(type, "nf4") == 0 ? (int)QUANT_NF4 : strcmp(type, "fp4") == 0 ? (int)QUANT_FP4 : strcmp(type, "q8_0") == 0 ? (int)QUANT_Q8_0 : (int)QUANT_NONE;
    spec->blocksize = (int)blocksize;
    spec->nested = (int)nested;
    return 0;
}
static int parse_quant(const char *v, QuantSpec *layers, QuantSpec *head, char *err, size_t err_size) {
    char first[64];
    const char *comma = strchr(v, ',');
    size_t n = comma != NULL ? (size_t)(comma - v) : strlen(v);
    if (n >= sizeof(first)) { snprintf(err, err_size, "'%s': too long", v); return -1; }
    memcpy(first, v, n);
    first[n] = '\0';
    *head = (QuantSpec){QUANT_NONE, 64, 1};
    return parse_quant_spec(first, layers, err, err_size) != 0 || (comma != NULL && parse_quant_spec(comma + 1, head, err, err_size) != 0) ? -1 : 0;
}

// a format in words, for reports
static void quant_describe(char *out, size_t size, QuantSpec q, const char *otherwise) {
    if (q.type == QUANT_NONE) { snprintf(out, size, "%s", otherwise); }
    else if (q.type == QUANT_Q8_0) { snprintf(out, size, "q8_0"); }
    else { snprintf(out, size, "%s (blocks of %d%s)", quant4_name(q.type), q.blocksize, q.nested ? ", double quantization" : ""); }
}

// A 4-bit model file keeps its linear layers as they are: -Q's blocks part must be none (then
// it is the file's format, set in *blocks and model->quant) or that format; 1 if it is one
static int quant_from_file(GPT2 *model, QuantSpec *blocks, const char *source) {
    if (model->lw.qw == NULL) { return 0; }
    QuantSpec file = {model->lw.quant, model->lw.quant_blocksize, model->lw.quant_nested};
    if (blocks->type != QUANT_NONE && (blocks->type != file.type || blocks->blocksize != file.blocksize || blocks->nested != file.nested)) {
        char what[96];
        quant_describe(what, sizeof(what), file, "");
        die_file(source, "-Q none,HEAD (or the file's own format) keeps them and sets the head", "its linear layers are %s already", what);
    }
    *blocks = file;
    for (int j = 0; j < LINEAR_HEAD; j++) { model->quant[j] = file; }
    return 1;
}
// --- end shared-copy: infer-quant-spec ---

// Layer l's linear layer j (SITE_QKV .. SITE_FCPROJ; LINEAR_HEAD, l = 0) as linear_forward reads it
static Linear model_linear(const GPT2 *model, int j, int l) {
    ModelConfig c = model->config;
    if (model->quant[j].type != QUANT_NONE) {
        const DeviceBand *bands = model->bands + ((size_t)j * c.num_layers + l) * MAX_BANDS;
        int n = 0;
        while (n < MAX_BANDS && bands[n].rows > 0) { n++; }
        return (Linear){NULL, bands, n, model->dequantized};
    }
    int C = c.channels, Q = c.num_heads * c.head_size, KV = c.num_kv_heads * c.head_size, H = c.hidden;
    const ForwardTensors *p = &model->params;
    const floatX *w[NUM_LINEAR] = {p->qkvw, p->attprojw, p->fcw, p->fcprojw, p->lm_head};
    size_t per_layer[NUM_LINEAR] = {(size_t)(Q + 2 * KV) * C, (size_t)C * Q, (size_t)(c.llama ? 2 * H : H) * C, (size_t)C * H, 0};
    return (Linear){w[j] + l * per_layer[j], NULL, 0, NULL};
}

// -Q: the linear layers of `quant`'s formats quantized on the host (infer.c's bands, as
// linear_bands cuts them), their arrays uploaded into one table (4 a band: codes, scales,
// and double quantization's scales and map), a descriptor each in model->bands; and the
// scratch that prefill dequantizes a layer into. src: the loaded tensors (forward_sources).
static const int LINEAR_SLOT[NUM_LINEAR] = {4, 6, 10, 12, 16};
static size_t quantize_linear_layers(GPT2 *model, const float **src) {
    ModelConfig c = model->config;
    int C = c.channels, Q = c.num_heads * c.head_size, KV = c.num_kv_heads * c.head_size, H = c.hidden, L = c.num_layers;
    const int OC[NUM_LINEAR] = {Q + 2 * KV, C, c.llama ? 2 * H : H, C, c.padded_vocab_size};
    const int IC[NUM_LINEAR] = {C, Q, C, H, C}, layers[NUM_LINEAR] = {L, L, L, L, 1};
    int rows[NUM_LINEAR][MAX_BANDS] = {{Q, KV, KV}, {C}, {H, H}, {C}, {c.vocab_size, c.padded_vocab_size - c.vocab_size}};
    if (!c.llama) { rows[0][0] = 3 * C; rows[0][1] = rows[0][2] = 0; rows[2][0] = 4 * C; rows[2][1] = 0; }
    size_t count = (size_t)NUM_LINEAR * L * MAX_BANDS, largest = 0;
    QuantBand *host = (QuantBand *)calloc(count, sizeof(QuantBand));
    model->bands = (DeviceBand *)calloc(count, sizeof(DeviceBand));
    size_t *bytes = (size_t *)calloc(4 * count, sizeof(size_t));
    if (host == NULL || model->bands == NULL || bytes == NULL) { fprintf(stderr, "Error: out of memory for the quantized weights\n"); exit(EXIT_FAILURE); }
    for (int j = 0; j < NUM_LINEAR; j++) {
        QuantSpec q = model->quant[j];
        if (q.type == QUANT_NONE) { continue; }
        size_t layer = (size_t)OC[j] * IC[j];
        largest = layer > largest ? layer : largest;
        if (j < LINEAR_HEAD && model->lw.qw != NULL) { // a 4-bit file's: its bands as they are (llama_load's (l, site, band) order)
            for (int t = 0; t < layers[j] * MAX_BANDS; t++) {
                int l = t / MAX_BANDS, k = t % MAX_BANDS;
                if (rows[j][k] == 0) { continue; }
                QuantBand *b = &host[(size_t)j * L * MAX_BANDS + t];
                Quant4 *from = &model->lw.qw[((size_t)l * LINEAR_HEAD + j) * 3 + k];
                b->type = q.type;
                b->rows = rows[j][k];
                b->q4 = *from;
                memset(from, 0, sizeof(*from)); // (moved: band_free frees it below)
            }
            continue;
        }
        #pragma omp parallel for schedule(dynamic)
        for (int t = 0; t < layers[j] * MAX_BANDS; t++) { // (each band on its own: the same bytes in any order)
            int l = t / MAX_BANDS, k = t % MAX_BANDS, row = 0;
            if (rows[j][k] == 0) { continue; }
            for (int i = 0; i < k; i++) { row += rows[j][i]; }
            band_quantize(&host[(size_t)j * L * MAX_BANDS + t], q.type, q.blocksize, q.nested,
                          src[LINEAR_SLOT[j]] + l * layer + (size_t)row * IC[j], rows[j][k], IC[j]);
        }
    }
    size_t total = 0;
    for (size_t i = 0; i < count; i++) { // each band's four arrays
        const QuantBand *b = &host[i];
        if (b->rows == 0) { continue; }
        total += band_bytes(b);
        if (b->type == QUANT_Q8_0) {
            bytes[4 * i] = b->q8.n;
            bytes[4 * i + 1] = b->q8.num_blocks * sizeof(uint16_t);
        } else {
            bytes[4 * i] = (b->q4.n + 1) / 2;
            bytes[4 * i + 1] = b->q4.num_blocks * (b->q4.qabsmax != NULL ? 1 : sizeof(float));
            bytes[4 * i + 2] = b->q4.qabsmax != NULL ? (b->q4.num_blocks + QUANT_NESTED_BLOCK - 1) / QUANT_NESTED_BLOCK * sizeof(float) : 0;
            bytes[4 * i + 3] = b->q4.qabsmax != NULL ? sizeof(b->q4.nested_code) : 0;
        }
    }
    char *memory = table_allocate(&model->quant_table, "quantized weight", NULL, bytes, (int)(4 * count), 256, "the quantized weights");
    for (size_t i = 0; i < count; i++) {
        const QuantBand *b = &host[i];
        if (b->rows == 0) { continue; }
        char *at[4];
        for (int k = 0; k < 4; k++) { at[k] = memory + model->quant_table.begin[4 * i + k]; }
        const void *from[4] = {b->type == QUANT_Q8_0 ? (const void *)b->q8.q : b->q4.packed,
                               b->type == QUANT_Q8_0 ? (const void *)b->q8.d : b->q4.qabsmax != NULL ? (const void *)b->q4.qabsmax : b->q4.absmax,
                               b->q4.nested_absmax, b->q4.nested_code};
        for (int k = 0; k < 4; k++) {
            if (bytes[4 * i + k] > 0) { cudaCheck(cudaMemcpy(at[k], from[k], bytes[4 * i + k], cudaMemcpyHostToDevice)); }
        }
        DeviceBand *d = &model->bands[i];
        d->type = b->type;
        d->rows = b->rows;
        d->blocksize = band_blocksize(b);
        d->codes = (const uint8_t *)at[0];
        d->absmax = b->type != QUANT_Q8_0 && b->q4.qabsmax == NULL ? (const float *)at[1] : NULL;
        d->qabsmax = b->type != QUANT_Q8_0 && b->q4.qabsmax != NULL ? (const uint8_t *)at[1] : NULL;
        d->nested_absmax = (const float *)at[2];
        d->nested_code = (const float *)at[3];
        d->offset = b->q4.offset;
        d->d = b->type == QUANT_Q8_0 ? (const uint16_t *)at[1] : NULL;
        band_free(&host[i]);
    }
    free(host);
    free(bytes);
    size_t scratch = largest * sizeof(floatX);
    model->dequantized = (floatX *)table_allocate(&model->dequantized_table, "dequantized weight", NULL, &scratch, 1, 256,
                                                  "the scratch weight that prefill dequantizes a layer into (-Q)");
    return total;
}

// The model from -m, the tensors its forward pass reads uploaded in floatX (each on 256
// bytes, a tied lm_head sharing wte's), or (-Q) its linear layers of the blocks in `blocks`'
// format and the head in `head`'s (quantize_linear_layers); no cache and no buffers yet.
void gpt2_build_quantized(GPT2 *model, const char *source, uint64_t seed, QuantSpec blocks, QuantSpec head) {
    memset(model, 0, sizeof(*model));
    for (int j = 0; j < NUM_LINEAR; j++) { model->quant[j] = j == LINEAR_HEAD ? head : blocks; }
    char a[96], b[96];
    quant_describe(a, sizeof(a), blocks, WEIGHTS_TYPE);
    quant_describe(b, sizeof(b), head, WEIGHTS_TYPE);
    gpu_acquire();
    model->gpu_held = 1;
    model_weights_build(model, source, seed);
    if (quant_from_file(model, &blocks, source)) { quant_describe(a, sizeof(a), blocks, WEIGHTS_TYPE); }
    snprintf(model->weights_type, sizeof(model->weights_type), strcmp(a, b) == 0 ? "%s" : "%s, the head in %s", a, b);
    const float *src[NUM_FORWARD_TENSORS];
    size_t sizes[NUM_FORWARD_TENSORS], bytes[NUM_FORWARD_TENSORS], largest = 1;
    forward_sources(model, src, sizes);
    int tied = src[16] != NULL && src[16] == src[0], any = 0;
    for (int j = 0; j < NUM_LINEAR; j++) {
        if (model->quant[j].type == QUANT_NONE) { continue; }
        sizes[LINEAR_SLOT[j]] = 0; // (quantized: not uploaded in floatX; a tied head's wte still is, for the embedding)
        any = 1;
    }
    for (int k = 0; k < NUM_FORWARD_TENSORS; k++) {
        bytes[k] = sizes[k] * sizeof(floatX);
        largest = sizes[k] > largest ? sizes[k] : largest;
    }
    char *memory = table_allocate(&model->params_table, "weight", FORWARD_TENSOR_NAMES, bytes, NUM_FORWARD_TENSORS, 256, "the weights");
    floatX *host = (floatX *)mallocCheck(largest * sizeof(floatX));
    floatX **slots = (floatX **)&model->params; // (ForwardTensors: NUM_FORWARD_TENSORS pointers, in that order)
    for (int k = 0; k < NUM_FORWARD_TENSORS; k++) {
        slots[k] = NULL;
        if (sizes[k] == 0) { continue; }
        for (size_t i = 0; i < sizes[k]; i++) { host[i] = from_float(src[k][i]); }
        slots[k] = (floatX *)(memory + model->params_table.begin[k]);
        cudaCheck(cudaMemcpy(slots[k], host, bytes[k], cudaMemcpyHostToDevice));
    }
    free(host);
    if (tied && model->quant[LINEAR_HEAD].type == QUANT_NONE) { model->params.lm_head = model->params.wte; }
    size_t quantized = any ? quantize_linear_layers(model, src) : 0;
    model->weight_bytes = quantized;
    for (int k = 0; k < NUM_FORWARD_TENSORS; k++) { model->weight_bytes += bytes[k]; }
    int head_is_wte = tied && model->quant[LINEAR_HEAD].type == QUANT_NONE;
    model->step_bytes = model->weight_bytes - bytes[1] - (head_is_wte ? 0 : bytes[0]);
    gpt2_weights_free(&model->w); // (the host's fp32 copy is not needed any more: model->config says the rest)
    llama_free(&model->lw);
    model->use_graphs = 1;
}

void gpt2_build(GPT2 *model, const char *source, uint64_t seed) {
    QuantSpec none = {QUANT_NONE, 64, 1};
    gpt2_build_quantized(model, source, seed, none, none);
}

void gpt2_free(GPT2 *model) {
    gpt2_drop_graphs(model);
    gpt2_free_rows(model);
    if (model->lora_sites != NULL) { table_free(&model->lora_table); }
    free(model->lora_sites);
    table_free(&model->cache_table);
    table_free(&model->params_table);
    if (model->bands != NULL) { table_free(&model->quant_table); table_free(&model->dequantized_table); }
    free(model->bands);
    gpt2_weights_free(&model->w);
    llama_free(&model->lw);
    free(model->rope_host);
    if (model->rope_table != NULL) { cudaCheck(cudaFree(model->rope_table)); }
    if (model->gpu_held) { gpu_release(); }
    memset(model, 0, sizeof(*model));
}

// ----------------------------------------------------------------------------
// an adapter's files (-L): PEFT's LoRA layout

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
// the adapter on the model (-L): its modules stacked by site

// --- begin shared-copy: infer-lora-build ---
// lora's modules stacked per site (LoraSite) into one new fp32 buffer, returned, its floats
// in *count; model->lora_sites point into it, config.lora_rank is the widest site's R
static float *lora_sites_build(GPT2 *model, const Lora *lora, size_t *count) {
    ModelConfig c = model->config;
    int L = c.num_layers, C = c.channels, Q = c.num_heads * c.head_size, KV = c.num_kv_heads * c.head_size, H = c.hidden;
    int ins[NUM_SITES] = {C, Q, C, H}, outs[NUM_SITES] = {Q + 2 * KV, C, c.llama ? 2 * H : H, C}, r = lora->r;
    LoraSite *sites = (LoraSite *)calloc((size_t)L * NUM_SITES, sizeof(LoraSite));
    int *filled = (int *)calloc((size_t)L * NUM_SITES, sizeof(int));
    if (sites == NULL || filled == NULL) { fprintf(stderr, "Error: out of memory for the adapter\n"); exit(EXIT_FAILURE); }
    for (int k = 0; k < lora->num_modules; k++) { sites[lora->modules[k].layer * NUM_SITES + lora->modules[k].site].R += r; }
    size_t total = 0;
    c.lora_rank = 0;
    for (int i = 0; i < L * NUM_SITES; i++) {
        total += (size_t)sites[i].R * (ins[i % NUM_SITES] + outs[i % NUM_SITES]);
        c.lora_rank = sites[i].R > c.lora_rank ? sites[i].R : c.lora_rank;
    }
    float *memory = (float *)calloc(total > 0 ? total : 1, sizeof(float)), *at = memory;
    if (memory == NULL) { fprintf(stderr, "Error: out of memory for the adapter\n"); exit(EXIT_FAILURE); }
    for (int i = 0; i < L * NUM_SITES; i++) {
        sites[i].A = at; at += (size_t)sites[i].R * ins[i % NUM_SITES];
        sites[i].B = at; at += (size_t)sites[i].R * outs[i % NUM_SITES];
    }
    for (int k = 0; k < lora->num_modules; k++) {
        const LoraModule *m = &lora->modules[k];
        int i = m->layer * NUM_SITES + m->site, R = sites[i].R, j0 = filled[i]; // its columns j0 .. j0 + r of the site
        float *A = (float *)sites[i].A + (size_t)j0 * m->in, *B = (float *)sites[i].B;
        for (size_t e = 0; e < (size_t)r * m->in; e++) { A[e] = lora->scale * m->A[e]; }
        for (int o = 0; o < m->out; o++) {
            for (int j = 0; j < r; j++) { B[(size_t)(m->offset + o) * R + j0 + j] = m->B[(size_t)o * r + j]; }
        }
        filled[i] += r;
    }
    free(filled);
    model->lora_sites = sites;
    model->config = c;
    *count = total;
    return memory;
}

// the shape an adapter must have to fit model
static LoraShape model_lora_shape(const GPT2 *model) {
    ModelConfig c = model->config;
    return (LoraShape){.llama = c.llama, .L = c.num_layers, .C = c.channels, .Q = c.num_heads * c.head_size,
                       .KV = c.num_kv_heads * c.head_size, .H = c.hidden};
}

// -L: reads the adapter in dir (lora_load checks that it fits the model), stacks it per site
// and turns it on. Row buffers already allocated are allocated again, with lora_h.
static void adapter_placed(GPT2 *model, float *memory, size_t count); // infer.c: kept where it is; infer.cu: to the GPU
void model_adapter_load(GPT2 *model, const char *dir) {
    Lora lora;
    LoraShape shape = model_lora_shape(model);
    lora_load(&lora, &shape, dir, 0);
    size_t count;
    float *memory = lora_sites_build(model, &lora, &count);
    adapter_placed(model, memory, count);
    model->lora_on = 1;
    model->weight_bytes += count * sizeof(float);
    model->step_bytes += count * sizeof(float);
    format_path(model->lora_source, sizeof(model->lora_source), "%s (r=%d, alpha=%g%s, %d modules, %.2fM parameters)", dir,
                lora.r, lora.alpha, lora.rslora ? ", rsLoRA" : "", lora.num_modules, (double)lora.num_params / 1e6);
    lora_free(&lora);
    if (model->max_rows > 0) { gpt2_allocate_rows(model, model->max_rows, model->max_logit_rows); }
}
// --- end shared-copy: infer-lora-build ---

// the stacked adapter to the GPU, into a table of its own (a guard band after it), and the
// sites' pointers moved there
static const char *const ADAPTER_NAMES[1] = {"A and B"};
static void adapter_placed(GPT2 *model, float *memory, size_t count) {
    size_t bytes = count * sizeof(float);
    float *device = (float *)table_allocate(&model->lora_table, "adapter", ADAPTER_NAMES, &bytes, 1, 256, "the adapter (-L)");
    cudaCheck(cudaMemcpy(device, memory, bytes, cudaMemcpyHostToDevice));
    for (int i = 0; i < model->config.num_layers * NUM_SITES; i++) {
        LoraSite *s = &model->lora_sites[i];
        s->A = device + (s->A - memory);
        s->B = device + (s->B - memory);
    }
    free(memory);
    model->lora_memory = device;
}

// the adapter (-L) on or off: the tuned model or the base model (the decode steps' graphs,
// captured with or without it, are dropped)
static void gpt2_drop_graphs(GPT2 *model);
void model_adapter_on(GPT2 *model, int on) {
    model->lora_on = on && model->lora_sites != NULL;
    gpt2_drop_graphs(model);
}

// ----------------------------------------------------------------------------
// the forward pass with a KV cache

// --- begin shared-copy: infer-forward ---
// A pass's rows must fit its buffers and the cache, its logit rows be among its rows.
// (Their tokens are not checked here: the loader and the sampler keep them below V.)
static void gpt2_check_rows(const GPT2 *model, const int *seq, const int *pos, int N, const int *logit_rows, int NL) {
    if (N < 0 || NL < 0 || N > model->max_rows || NL > model->max_logit_rows || NL > N) {
        fprintf(stderr, "Error: gpt2_forward: %d rows (%d with logits), buffers hold %d (%d)\n", N, NL, model->max_rows,
                model->max_logit_rows);
        exit(EXIT_FAILURE);
    }
    for (int n = 0; n < N; n++) {
        if (seq[n] < 0 || seq[n] >= model->cache_batch || pos[n] < 0 || pos[n] >= model->cache_len) {
            fprintf(stderr, "Error: gpt2_forward: row %d (sequence %d, position %d) is outside B=%d, S=%d\n",
                    n, seq[n], pos[n], model->cache_batch, model->cache_len);
            exit(EXIT_FAILURE);
        }
    }
    for (int j = 0; j < NL; j++) {
        if (logit_rows[j] < 0 || logit_rows[j] >= N) {
            fprintf(stderr, "Error: gpt2_forward: logit row %d is row %d of a pass of %d rows\n", j, logit_rows[j], N);
            exit(EXIT_FAILURE);
        }
    }
}

// The adapter's part of layer l's linear layer `site` (-L), if that layer has one and the
// adapter is on: its A, B and R, and where x A^T goes (rows.lora_h)
static Epilogue epilogue_lora(Epilogue e, const GPT2 *model, int l, int site) {
    if (model->lora_sites == NULL || !model->lora_on || model->lora_sites[l * NUM_SITES + site].R == 0) { return e; }
    const LoraSite *s = &model->lora_sites[l * NUM_SITES + site];
    e.lora_A = s->A;
    e.lora_B = s->B;
    e.lora_R = s->R;
    e.lora_h = model->rows.lora_h;
    return e;
}

// The layers of one forward pass over the N rows already in model->rows (tokens, seq, pos,
// logit_rows): every row's keys and values go into the cache; the logits of the NL logit
// rows into rows.logits (NL, Vp), and with argmax their most probable tokens into
// rows.argmax. Each linear layer ends in its epilogue (the bias, then: queries to q and
// keys and values into the cache; the residual add; GELU). What the Llama family changes
// is here, at `c.llama`: no learned positions (RoPE rotates the queries and keys instead),
// RMSNorm for LayerNorm, SwiGLU for GELU, and fewer key/value heads than query heads.
static void gpt2_forward_layers(GPT2 *model, int N, int NL, int argmax) {
    ModelConfig c = model->config;
    int C = c.channels, NH = c.num_heads, NKV = c.num_kv_heads, HS = c.head_size, H = c.hidden, L = c.num_layers;
    int Q = NH * HS, KV = NKV * HS, S = model->cache_len, MLP = c.llama ? 2 * H : H; // (GPT-2: Q = KV = C, H = 4C)
    float eps = c.norm_eps;
    ForwardTensors p = model->params;
    RowBuffers r = model->rows;
    encoder_forward(r.residual, r.tokens, r.pos, p.wte, p.wpe, N, C); // (the Llama family has no wpe)
    for (int l = 0; l < L; l++) {
        floatX *key_cache = model->key_cache + l * model->cache_layer, *value_cache = model->value_cache + l * model->cache_layer;
        Epilogue qkv = epilogue_qkv(p.qkvb != NULL ? p.qkvb + (size_t)l * (Q + 2 * KV) : NULL, r.q, key_cache, value_cache,
                                    r.seq, r.pos, S, Q, KV);
        Epilogue proj = epilogue_residual(p.attprojb != NULL ? p.attprojb + (size_t)l * C : NULL, r.residual);
        Epilogue fc = c.llama ? epilogue_logits(r.scratch) : epilogue_gelu(p.fcb + (size_t)l * H, r.fch); // SwiGLU: gate and up as they are
        Epilogue fcproj = epilogue_residual(p.fcprojb != NULL ? p.fcprojb + (size_t)l * C : NULL, r.residual);
        qkv = epilogue_lora(qkv, model, l, SITE_QKV); // (an adapter's update, -L, where it has one)
        proj = epilogue_lora(proj, model, l, SITE_ATTPROJ);
        fc = epilogue_lora(fc, model, l, SITE_FC);
        fcproj = epilogue_lora(fcproj, model, l, SITE_FCPROJ);
        layernorm_forward(r.ln, r.residual, NULL, p.ln1w + (size_t)l * C, p.ln1b != NULL ? p.ln1b + (size_t)l * C : NULL, N, C, eps, c.llama);
        linear_forward(r.ln, model_linear(model, SITE_QKV, l), qkv, r.scratch, N, C, Q + 2 * KV);
        if (c.llama) { rope_forward(r.q, key_cache, model->rope_table, r.seq, r.pos, N, S, NH, NKV, HS); }
        attention_forward(r.atty, r.att, r.q, key_cache, value_cache, r.seq, r.pos, N, S, NH, NKV, HS);
        linear_forward(r.atty, model_linear(model, SITE_ATTPROJ, l), proj, r.scratch, N, Q, C);
        layernorm_forward(r.ln, r.residual, NULL, p.ln2w + (size_t)l * C, p.ln2b != NULL ? p.ln2b + (size_t)l * C : NULL, N, C, eps, c.llama);
        linear_forward(r.ln, model_linear(model, SITE_FC, l), fc, r.scratch, N, C, MLP);
        if (c.llama) { swiglu_forward(r.fch, r.scratch, N, H); }
        linear_forward(r.fch, model_linear(model, SITE_FCPROJ, l), fcproj, r.scratch, N, H, C);
    }
    if (NL == 0) { return; } // (a prefill chunk in which no prompt ends)
    // logits only where asked: the final norm of those rows, then the output head (GPT-2's
    // is the tied wte). (The biggest matmul of decode: Vp x C = 39M weights at GPT-2 124M.)
    layernorm_forward(r.ln, r.residual, r.logit_rows, p.lnfw, p.lnfb, NL, C, eps, c.llama);
    linear_forward(r.ln, model_linear(model, LINEAR_HEAD, 0), epilogue_logits(r.logits), r.scratch, NL, C, c.padded_vocab_size);
    if (argmax) { argmax_forward(r.argmax, r.logits, NL, c.vocab_size, c.padded_vocab_size); }
}
// --- end shared-copy: infer-forward ---

// One forward pass, as infer.c's: rows (tokens, seq, pos) in host memory; every row's keys
// and values into the cache; the logits of the NL rows listed in logit_rows copied back to
// model->logits (NL, Vp), or if greedy only their most probable tokens (the argmax kernel)
// to model->argmax (NL): one int per sequence instead of 200 KB. A decode step (every row
// a logit row, rows 0..N-1) replays the graph captured for N rows, capturing it the first
// time.
void gpt2_forward(GPT2 *model, const int *tokens, const int *seq, const int *pos, int N, const int *logit_rows, int NL,
                  int greedy) {
    gpt2_check_rows(model, seq, pos, N, logit_rows, NL);
    if (N == 0) { return; } // (nothing to do; on a GPU, a grid of 0 blocks is an error)
    RowBuffers r = model->rows;
    cudaCheck(cudaMemcpyAsync(r.tokens, tokens, N * sizeof(int), cudaMemcpyHostToDevice, main_stream));
    cudaCheck(cudaMemcpyAsync(r.seq, seq, N * sizeof(int), cudaMemcpyHostToDevice, main_stream));
    cudaCheck(cudaMemcpyAsync(r.pos, pos, N * sizeof(int), cudaMemcpyHostToDevice, main_stream));
    if (NL > 0) { cudaCheck(cudaMemcpyAsync(r.logit_rows, logit_rows, NL * sizeof(int), cudaMemcpyHostToDevice, main_stream)); }
    int decode = NL == N && N < MAX_GRAPHS && model->use_graphs;
    for (int j = 0; j < NL && decode; j++) { decode = logit_rows[j] == j; }
    if (decode && (model->graphs[N] == NULL || model->graph_argmax[N] != greedy)) {
        if (model->graphs[N] != NULL) { cudaCheck(cudaGraphExecDestroy(model->graphs[N])); }
        cudaGraph_t graph;
        cudaCheck(cudaStreamBeginCapture(main_stream, cudaStreamCaptureModeGlobal));
        gpt2_forward_layers(model, N, NL, greedy);
        cudaCheck(cudaStreamEndCapture(main_stream, &graph));
        cudaCheck(cudaGraphInstantiate(&model->graphs[N], graph, 0));
        cudaCheck(cudaGraphDestroy(graph));
        model->graph_argmax[N] = greedy;
    }
    if (decode) {
        cudaCheck(cudaGraphLaunch(model->graphs[N], main_stream));
    } else {
        gpt2_forward_layers(model, N, NL, greedy);
    }
    if (greedy) {
        cudaCheck(cudaMemcpyAsync(model->argmax, r.argmax, NL * sizeof(int), cudaMemcpyDeviceToHost, main_stream));
    } else {
        cudaCheck(cudaMemcpyAsync(model->logits, r.logits, (size_t)NL * model->config.padded_vocab_size * sizeof(float),
                                  cudaMemcpyDeviceToHost, main_stream));
    }
    cudaCheck(cudaStreamSynchronize(main_stream));
    if (GUARD_BYTES > 0) { // debug builds: did a kernel of this pass write past the end of a tensor?
        guard_check(&model->params_table);
        guard_check(&model->cache_table);
        guard_check(&model->rows_table);
        if (model->lora_sites != NULL) { guard_check(&model->lora_table); }
        if (model->bands != NULL) { guard_check(&model->quant_table); guard_check(&model->dequantized_table); }
    }
}

// --- begin shared-copy: infer-sampling ---
// ----------------------------------------------------------------------------
// sampling: temperature, top-k, top-p

typedef struct {
    float temperature; // 0: greedy (always the most probable token)
    int top_k;         // keep the k most probable tokens; 0: all
    float top_p;       // then the fewest most probable tokens whose probabilities sum to >= p; 1: all
    float min_p;       // then those at least min_p times as probable as the most probable; 0: all
    float repetition_penalty; // first, the logit of every token in history: / penalty if > 0, x penalty if not; 1: none
    const int *history;       // the tokens so far (the prompt's and the generated), for the penalty
    int num_history;
    float *probs;      // (V) scratch
} Sampler;

typedef struct {
    float prob;
    int id;
} Candidate;

// more probable first; equal probabilities by id, so the order (and the draw) is fixed
static int candidate_better(Candidate a, Candidate b) { return a.prob > b.prob || (a.prob == b.prob && a.id < b.id); }
static int candidate_compare(const void *a, const void *b) {
    Candidate x = *(const Candidate *)a, y = *(const Candidate *)b;
    return candidate_better(x, y) ? -1 : candidate_better(y, x) ? 1 : 0;
}

// The tokens a draw chooses from, with their renormalised probabilities, into out (room
// for V); returns how many. The order of the steps is transformers' (its repetition penalty,
// then the logits warpers: temperature, top-k, top-p, min-p), so -r/-t/-k/-p/-M mean what
// they mean in generate().
// The repetition penalty (Keskar et al. 2019, CTRL) makes every token already in the text
// less likely: its logit divided by the penalty if positive, multiplied if not (once per
// token, however often it appears). Top-p (Holtzman et al. 2019, "nucleus sampling") keeps
// the smallest set of most probable tokens whose probabilities sum to at least p. Min-p
// (Nguyen et al. 2024) keeps the tokens at least min_p times as probable as the most
// probable one: a cut that follows the model's confidence.
int sample_candidates(const float *logits, int V, Sampler *s, Candidate *out) {
    if (s->repetition_penalty != 1.0f && s->num_history > 0) { // the penalized logits, in probs for now
        memcpy(s->probs, logits, (size_t)V * sizeof(float));
        for (int i = 0; i < s->num_history; i++) {
            int id = s->history[i];
            if (id >= 0 && id < V) { s->probs[id] = logits[id] > 0.0f ? logits[id] / s->repetition_penalty : logits[id] * s->repetition_penalty; }
        }
        logits = s->probs;
    }
    int argmax = 0;
    for (int i = 1; i < V; i++) {
        if (logits[i] > logits[argmax]) { argmax = i; }
    }
    if (s->temperature == 0.0f) {
        out[0] = (Candidate){1.0f, argmax};
        return 1;
    }
    double sum = 0.0; // softmax(logits / temperature), shifted by the max for stability
    float max = logits[argmax];
    for (int i = 0; i < V; i++) { // (logits may be probs itself: each element is read, then written)
        s->probs[i] = expf((logits[i] - max) / s->temperature);
        sum += s->probs[i];
    }
    for (int i = 0; i < V; i++) { s->probs[i] = (float)(s->probs[i] / sum); }
    int n = 0;
    if (s->top_k > 0 && s->top_k < V) {
        // the k best through a min-heap of size k: out[0] is the worst kept so far
        int k = s->top_k;
        for (int i = 0; i < V; i++) {
            Candidate c = {s->probs[i], i};
            if (n < k) { // sift up
                int at = n++;
                while (at > 0 && candidate_better(out[(at - 1) / 2], c)) { out[at] = out[(at - 1) / 2]; at = (at - 1) / 2; }
                out[at] = c;
            } else if (candidate_better(c, out[0])) { // replace the worst, sift down
                int at = 0;
                for (;;) {
                    int child = 2 * at + 1;
                    if (child >= k) { break; }
                    if (child + 1 < k && candidate_better(out[child], out[child + 1])) { child++; }
                    if (!candidate_better(c, out[child])) { break; }
                    out[at] = out[child];
                    at = child;
                }
                out[at] = c;
            }
        }
    } else if (s->top_p < 1.0f) {
        // no token below (1 - p) / (V - 1) can be in the nucleus (all of them together hold
        // less than 1 - p), so only the others need sorting: a few hundred, not 50257
        float threshold = (1.0f - s->top_p) / (float)(V > 1 ? V - 1 : 1);
        for (int i = 0; i < V; i++) {
            if (s->probs[i] >= threshold) { out[n++] = (Candidate){s->probs[i], i}; }
        }
        if (n == 0) { // can only happen when p < 1/V: then the nucleus is the best token
            out[n++] = (Candidate){s->probs[argmax], argmax};
        }
    } else {
        // the whole distribution, in id order (no sort needed), but for what min-p cuts: the
        // most probable token has probability probs[argmax]
        float cut = s->min_p * s->probs[argmax];
        double kept = 0.0;
        for (int i = 0; i < V; i++) {
            if (s->probs[i] >= cut) { out[n++] = (Candidate){s->probs[i], i}; kept += s->probs[i]; }
        }
        if (n < V) {
            for (int i = 0; i < n; i++) { out[i].prob = (float)(out[i].prob / kept); }
        }
        return n;
    }
    qsort(out, (size_t)n, sizeof(Candidate), candidate_compare);
    // the mass top-p takes its share of: what top-k kept, or all of it (1, whatever the
    // prefilter above dropped)
    double total = 1.0;
    if (s->top_k > 0 && s->top_k < V) {
        total = 0.0;
        for (int i = 0; i < n; i++) { total += out[i].prob; }
    }
    if (s->top_p < 1.0f) {
        double cumulative = 0.0;
        int m = 0;
        while (m < n) {
            cumulative += out[m++].prob;
            if (cumulative >= s->top_p * total) { break; }
        }
        n = m;
        total = cumulative;
    }
    if (s->min_p > 0.0f) { // (out[0] is the most probable: the list is sorted)
        float cut = s->min_p * out[0].prob;
        int m = 1;
        while (m < n && out[m].prob >= cut) { m++; }
        if (m < n) {
            total = 0.0;
            for (int i = 0; i < m; i++) { total += out[i].prob; }
            n = m;
        }
    }
    for (int i = 0; i < n; i++) { out[i].prob = (float)(out[i].prob / total); }
    return n;
}

// One token: the candidates, then the first whose cumulative probability passes the coin
// (uniform in [0, 1)).
int sample_token(const float *logits, int V, Sampler *s, Candidate *scratch, float coin) {
    int n = sample_candidates(logits, V, s, scratch);
    float cdf = 0.0f;
    for (int i = 0; i < n; i++) {
        cdf += scratch[i].prob;
        if (coin < cdf) { return scratch[i].id; }
    }
    return scratch[n - 1].id; // rounding left the cdf a hair below 1
}

// --- end shared-copy: infer-sampling ---

// --- begin shared-copy: infer-sequences ---
// ----------------------------------------------------------------------------
// generation: prefill, then decode, for a batch of sequences

// infer.c's random streams (rng_key(seed, stream)): 0..15 the weights of a d<N> model
// (gpt2-init), then:
#define STREAM_SAMPLING 16 // subkey: the sequence's index; index: the generated token's
#define STREAM_BENCH 17    // the benchmark's random prompts
#define STREAM_CHAT 18     // subkey: a conversation's turn: its own seed for the turn's draws

typedef struct {
    const char *prompt;  // its text (NULL with token ids)
    int *tokens;         // (max_tokens) the prompt, then what we generate
    int num_prompt, num_tokens, max_tokens;
    int cached;          // the prompt's first tokens already in the cache (a conversation's earlier turns)
    int fed;             // the tokens whose keys and values are in the cache now
    int context_full;    // max_tokens is the model's context, not the length asked for
    int done;
    const char *stop;    // why it stopped
    char *text;          // the generated text so far (stop strings, output)
    size_t text_len, text_cap, printed;
} Sequence;

typedef struct {
    int max_new;             // tokens to generate at most
    const char *stop_string; // "" for none
    int eot_token;           // stop when it is sampled; -1 never
    const char *eot_name;    // how the report names it (NULL: <|endoftext|>)
    const int *more_end;     // more tokens to stop at (a model's generation settings may list several)
    int num_more_end;
    uint64_t seed;
    Sampler sampler;
    const Tokenizer *tok;    // NULL: token ids in and out
    FILE *stream;            // print as we go (one sequence), or NULL
} GenerateOptions;

typedef struct {
    size_t prompt_tokens, decoded_tokens, steps;
    double prefill_seconds, first_token_seconds, decode_seconds;
} GenerateStats;

// prefill: rows per forward pass. Long prompts (and batches of them) go through in chunks,
// each attending to the cache the chunks before it wrote: same result, bounded memory.
#define PREFILL_CHUNK 256

void sequence_init(Sequence *s, const char *prompt, const int *tokens, int n, int max_new, int maxT) {
    memset(s, 0, sizeof(*s));
    s->prompt = prompt;
    s->num_prompt = s->num_tokens = n;
    s->max_tokens = (long)n + max_new < maxT ? n + max_new : maxT; // (long: -n may be up to 2^31 - 1)
    s->context_full = (long)n + max_new > maxT;
    s->tokens = (int *)mallocCheck((size_t)s->max_tokens * sizeof(int));
    memcpy(s->tokens, tokens, (size_t)n * sizeof(int));
    s->text_cap = 256;
    s->text = (char *)mallocCheck(s->text_cap);
    if (s->max_tokens == n) { s->done = 1; s->stop = "no room in the context"; }
}

void sequence_free(Sequence *s) {
    free(s->tokens);
    free(s->text);
}

// how many bytes at the end of text could still grow into the stop string
static size_t stop_prefix_at_end(const char *text, size_t len, const char *stop) {
    size_t n = strlen(stop);
    if (n == 0) { return 0; }
    for (size_t k = n > len + 1 ? len : n - 1; k > 0; k--) {
        if (memcmp(text + len - k, stop, k) == 0) { return k; }
    }
    return 0;
}

// A sampled token joins its sequence: check the stops, keep the text, stream what is safe
// to print (never part of what may turn out to be the stop string, which is not printed).
static void sequence_add(Sequence *s, int token, const GenerateOptions *o) {
    if (token == o->eot_token) { s->done = 1; s->stop = o->eot_name != NULL ? o->eot_name : "<|endoftext|>"; }
    for (int i = 0; i < o->num_more_end && !s->done; i++) {
        if (token == o->more_end[i]) { s->done = 1; s->stop = "an end token of the model's generation settings"; }
    }
    if (!s->done) {
        s->tokens[s->num_tokens++] = token;
        char ids[16];
        size_t len;
        const uint8_t *bytes = (const uint8_t *)ids;
        if (o->tok != NULL) { bytes = tokenizer_token(o->tok, token, &len); }
        else { len = (size_t)snprintf(ids, sizeof(ids), " %d", token); }
        if (s->text_len + len + 1 > s->text_cap) {
            s->text_cap = 2 * (s->text_len + len + 1);
            s->text = (char *)realloc(s->text, s->text_cap);
            if (s->text == NULL) { fprintf(stderr, "Error: out of memory for the generated text\n"); exit(EXIT_FAILURE); }
        }
        size_t before = s->text_len;
        memcpy(s->text + s->text_len, bytes, len);
        s->text_len += len;
        s->text[s->text_len] = '\0';
        size_t n = strlen(o->stop_string);
        if (n > 0) { // search only where the new bytes could complete a match
            for (size_t at = before >= n - 1 ? before - (n - 1) : 0; at + n <= s->text_len; at++) {
                if (memcmp(s->text + at, o->stop_string, n) == 0) {
                    s->text_len = at;
                    s->text[at] = '\0';
                    s->done = 1;
                    s->stop = "the stop string";
                    break;
                }
            }
        }
        if (!s->done && s->num_tokens == s->max_tokens) {
            s->done = 1;
            s->stop = s->context_full ? "the end of the model's context" : "the length limit";
        }
    }
    if (o->stream != NULL) {
        size_t safe = s->done ? s->text_len : s->text_len - stop_prefix_at_end(s->text, s->text_len, o->stop_string);
        if (safe > s->printed) {
            fwrite(s->text + s->printed, 1, safe - s->printed, o->stream);
            s->printed = safe;
        }
        fflush(o->stream);
    }
}

// The token for sequence b (index b in the batch) from logit row j of the last forward
// pass: greedy's argmax, or a draw from the sampler with the sequence's next random number.
static void sample_into(GPT2 *model, Sequence *s, int b, int j, const GenerateOptions *o, Candidate *scratch) {
    if (o->sampler.temperature == 0.0f && o->sampler.repetition_penalty == 1.0f) {
        sequence_add(s, model->argmax[j], o);
        return;
    }
    Sampler sampler = o->sampler;
    sampler.history = s->tokens;
    sampler.num_history = s->num_tokens;
    const float *logits = model->logits + (size_t)j * model->config.padded_vocab_size;
    float coin = (float)rng_uniform_at(rng_subkey(o->seed, STREAM_SAMPLING, (uint64_t)b), (uint64_t)(s->num_tokens - s->num_prompt));
    sequence_add(s, sample_token(logits, model->config.vocab_size, &sampler, scratch, coin), o);
}

// Generates for B sequences at once until each has stopped. The cache and the buffers are
// (re)allocated as needed. Timing: prefill ends when every sequence has its first token
// (time to first token); decode is the rest, one forward pass per step for all
// sequences still going. Greedy asks the forward pass for its argmax (infer.cu computes
// it on the GPU and copies back one int per sequence, not the logits).
void generate(GPT2 *model, Sequence *seqs, int B, const GenerateOptions *o, GenerateStats *stats) {
    ModelConfig c = model->config;
    int S = 1;
    size_t total_prompt = 0;
    for (int b = 0; b < B; b++) {
        if (seqs[b].max_tokens > S) { S = seqs[b].max_tokens; }
        total_prompt += (size_t)seqs[b].num_prompt;
    }
    if (model->cache_batch < B || model->cache_len < S) { gpt2_allocate_cache(model, B, S); }
    int rows = PREFILL_CHUNK > B ? PREFILL_CHUNK : B;
    if (model->max_rows < rows || model->max_logit_rows < B) { gpt2_allocate_rows(model, rows, B); }
    int *tokens = (int *)mallocCheck(3 * (size_t)rows * sizeof(int)), *seq = tokens + rows, *pos = tokens + 2 * rows;
    int *logit_rows = (int *)mallocCheck((size_t)B * sizeof(int)), *logit_seq = (int *)mallocCheck((size_t)B * sizeof(int));
    int greedy = o->sampler.temperature == 0.0f && o->sampler.repetition_penalty == 1.0f; // (the forward pass's argmax will do)
    Candidate *scratch = (Candidate *)mallocCheck((size_t)c.vocab_size * sizeof(Candidate));
    GenerateOptions opts = *o;
    opts.sampler.probs = (float *)mallocCheck((size_t)c.vocab_size * sizeof(float));
    memset(stats, 0, sizeof(*stats));
    for (int b = 0; b < B; b++) { // (the last prompt token goes through again at least: its logits give the first new token)
        if (seqs[b].cached > seqs[b].num_prompt - 1) { seqs[b].cached = seqs[b].num_prompt - 1; }
        total_prompt -= (size_t)seqs[b].cached;
    }
    stats->prompt_tokens = total_prompt;
    for (int b = 0; b < B; b++) { seqs[b].printed = seqs[b].text_len; }

    // prefill: every prompt position not already in the cache, in chunks of rows; logits only
    // at each prompt's end
    double t0 = wall_seconds();
    int n = 0, nl = 0;
    for (int b = 0; b < B; b++) {
        for (int t = seqs[b].cached; t < seqs[b].num_prompt; t++) {
            seqs[b].fed = t + 1;
            tokens[n] = seqs[b].tokens[t];
            seq[n] = b;
            pos[n] = t;
            if (t == seqs[b].num_prompt - 1 && !seqs[b].done) { logit_rows[nl] = n; logit_seq[nl++] = b; }
            n++;
            int last = b == B - 1 && t == seqs[b].num_prompt - 1;
            if (n == rows || last) {
                gpt2_forward(model, tokens, seq, pos, n, logit_rows, nl, greedy);
                for (int j = 0; j < nl; j++) { sample_into(model, &seqs[logit_seq[j]], logit_seq[j], j, &opts, scratch); }
                n = nl = 0;
            }
        }
    }
    double t1 = wall_seconds();
    stats->prefill_seconds = stats->first_token_seconds = t1 - t0;

    // decode: one row per unfinished sequence: its newest token, at its newest position
    for (;;) {
        n = 0;
        for (int b = 0; b < B; b++) {
            if (seqs[b].done) { continue; }
            tokens[n] = seqs[b].tokens[seqs[b].num_tokens - 1];
            seq[n] = b;
            pos[n] = seqs[b].num_tokens - 1;
            seqs[b].fed = seqs[b].num_tokens;
            logit_rows[n] = n;
            n++;
        }
        if (n == 0) { break; }
        gpt2_forward(model, tokens, seq, pos, n, logit_rows, n, greedy);
        for (int j = 0; j < n; j++) { sample_into(model, &seqs[seq[j]], seq[j], j, &opts, scratch); }
        stats->decoded_tokens += (size_t)n;
        stats->steps++;
    }
    stats->decode_seconds = wall_seconds() - t1;
    free(tokens);
    free(logit_rows);
    free(logit_seq);
    free(scratch);
    free(opts.sampler.probs);
}
// --- end shared-copy: infer-sequences ---

// --- begin shared-copy: infer-reports ---
// ----------------------------------------------------------------------------
// reports and the benchmark

void print_model(const GPT2 *model) {
    ModelConfig c = model->config;
    char kv[64] = "";
    if (c.llama) { snprintf(kv, sizeof(kv), " NKV=%d HS=%d H=%d", c.num_kv_heads, c.head_size, c.hidden); }
    fprintf(stderr, "model: %s: %s L=%d C=%d NH=%d%s V=%d maxT=%d, %.1fM parameters (%.0f MiB; linear layers in %s)\n",
            model->source, c.llama ? "Llama family" : "GPT-2", c.num_layers, c.channels, c.num_heads, kv, c.vocab_size,
            c.max_seq_len, (double)model->num_parameters / 1e6, (double)model->weight_bytes / (1 << 20), model->weights_type);
    if (model->lora_sites != NULL) { fprintf(stderr, "adapter: %s, unmerged, fp32\n", model->lora_source); }
    fprintf(stderr, "KV cache: %.1f KiB per token (2 x L x NKV x HS x %zu bytes), %.1f MiB for one full %d-token sequence\n",
            (double)kv_bytes_per_token(c) / 1024, (size_t)KV_ELEMENT_BYTES, (double)kv_bytes_per_token(c) * c.max_seq_len / (1 << 20), c.max_seq_len);
}

void print_stats(const GPT2 *model, const Sequence *seqs, int B, const GenerateStats *s) {
    size_t in_use = 0;
    for (int b = 0; b < B; b++) { in_use += (size_t)seqs[b].num_tokens; }
    double per = (double)kv_bytes_per_token(model->config);
    fprintf(stderr, "prefill: %zu prompt tokens in %.1f ms (%.0f tokens/s); time to first token %.1f ms\n",
            s->prompt_tokens, 1e3 * s->prefill_seconds, s->prompt_tokens / s->prefill_seconds, 1e3 * s->first_token_seconds);
    if (s->steps > 0) {
        fprintf(stderr, "decode: %zu tokens in %zu steps, %.1f ms (%.1f tokens/s, %.2f ms per step)\n", s->decoded_tokens,
                s->steps, 1e3 * s->decode_seconds, s->decoded_tokens / s->decode_seconds, 1e3 * s->decode_seconds / s->steps);
    }
    fprintf(stderr, "KV cache: %zu tokens in use = %.2f MiB, %d x %d allocated = %.2f MiB\n", in_use, in_use * per / (1 << 20),
            model->cache_batch, model->cache_len, (double)model->cache_batch * model->cache_len * per / (1 << 20));
}

// How prefill and decode scale with the prompt length, the generation length and the
// batch size, and how the cache grows. Random prompts, greedy, no early stops; each row
// is one generate() call (after one warm-up call), so TTFT includes the first sampling.
void bench(GPT2 *model, const int *batches, int nb, const int *prompts, int np, const int *gens, int ng, uint64_t seed) {
    ModelConfig c = model->config;
    fprintf(stderr, "benchmark on %s; decode is bound by reading the weights (%.0f MiB per step at any batch size)\n",
            hardware_name(), (double)model->step_bytes / (1 << 20));
    printf("| batch | prompt | generated | TTFT ms | prefill tok/s | decode tok/s | ms/step | KV cache MiB |\n");
    printf("|------:|-------:|----------:|--------:|--------------:|-------------:|--------:|-------------:|\n");
    GenerateOptions o = {.max_new = 0, .stop_string = "", .eot_token = -1, .eot_name = NULL, .more_end = NULL, .num_more_end = 0, .seed = seed,
                         .sampler = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .repetition_penalty = 1.0f, .history = NULL, .num_history = 0, .probs = NULL}, .tok = NULL, .stream = NULL};
    uint64_t key = rng_key(seed, STREAM_BENCH);
    int warmed_up = 0;
    for (int ib = 0; ib < nb; ib++) {
        for (int ip = 0; ip < np; ip++) {
            for (int ig = 0; ig < ng; ig++) {
                int B = batches[ib], P = prompts[ip], G = gens[ig];
                if (P + G > c.max_seq_len) {
                    fprintf(stderr, "skipped: prompt %d + %d generated is beyond the context (%d)\n", P, G, c.max_seq_len);
                    continue;
                }
                int *prompt = (int *)mallocCheck((size_t)P * sizeof(int));
                Sequence *seqs = (Sequence *)mallocCheck((size_t)B * sizeof(Sequence));
                GenerateStats s;
                for (int rep = warmed_up; rep < 2; rep++) { // the very first run warms caches and pages up
                    for (int b = 0; b < B; b++) {
                        for (int t = 0; t < P; t++) {
                            prompt[t] = (int)(rng_uniform_at(key, (uint64_t)b * P + t) * c.vocab_size);
                        }
                        sequence_init(&seqs[b], NULL, prompt, P, G, c.max_seq_len);
                    }
                    o.max_new = G;
                    generate(model, seqs, B, &o, &s);
                    size_t in_use = 0;
                    for (int b = 0; b < B; b++) { in_use += (size_t)seqs[b].num_tokens; sequence_free(&seqs[b]); }
                    if (rep == 1) {
                        printf("| %5d | %6d | %9d | %7.1f | %13.0f | %12.1f | %7.2f | %12.2f |\n", B, P, G,
                               1e3 * s.first_token_seconds, s.prompt_tokens / s.prefill_seconds,
                               s.steps > 0 ? s.decoded_tokens / s.decode_seconds : 0.0,
                               s.steps > 0 ? 1e3 * s.decode_seconds / s.steps : 0.0,
                               (double)in_use * kv_bytes_per_token(c) / (1 << 20));
                        fflush(stdout);
                    }
                }
                warmed_up = 1;
                free(prompt);
                free(seqs);
            }
        }
    }
}
// --- end shared-copy: infer-reports ---

// ----------------------------------------------------------------------------
// prompts from the command line or a file

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

// --- begin shared-copy: infer-prompts ---
// messages with their own role and content strings (json_messages', the chat's), let go
void chat_free(ChatMessage *m, int n) {
    for (int i = 0; m != NULL && i < n; i++) { free((char *)m[i].role); free((char *)m[i].content); }
    free(m);
}

// A conversation from JSON, {"messages": [{"role": ..., "content": ...}, ...]} (the layout of
// transformers' chat pipeline and of OpenAI's chat API): its messages into *out, malloc'ed,
// each role and content a string of its own (chat_free lets them go). Returns how many, or
// -1 with what is wrong in err: no "messages", an empty list, a message that is not an
// object with a string "role" and a string "content", a role other than "system", "user" and
// "assistant" (a tool's turn: each template lays those out its own way, which ours do not).
int json_messages(const Json *j, int object, ChatMessage **out, char *err, size_t err_size) {
    int list = json_get(j, object, "messages");
    *out = NULL;
    if (list < 0 || j->tokens[list].type != JSON_ARRAY) { snprintf(err, err_size, "no list \"messages\""); return -1; }
    int n = j->tokens[list].size;
    if (n == 0) { snprintf(err, err_size, "\"messages\" is empty"); return -1; }
    ChatMessage *m = (ChatMessage *)mallocCheck((size_t)n * sizeof(ChatMessage));
    memset(m, 0, (size_t)n * sizeof(ChatMessage));
    int item = list + 1;
    for (int i = 0; i < n; i++, item = j->tokens[item].next) {
        int role = json_get(j, item, "role"), content = json_get(j, item, "content");
        size_t cap = j->tokens[item].end - j->tokens[item].start + 1; // (decoding never makes a string longer)
        char *r = (char *)mallocCheck(cap), *c = (char *)mallocCheck(cap);
        m[i].role = r;
        m[i].content = c;
        if (role < 0 || json_string(j, role, r, cap) < 0 || r[0] == '\0' || content < 0 || json_string(j, content, c, cap) < 0) {
            snprintf(err, err_size, "message %d is not {\"role\": \"...\", \"content\": \"...\"}", i + 1);
            chat_free(m, i + 1);
            return -1;
        }
        if (strcmp(r, "system") != 0 && strcmp(r, "user") != 0 && strcmp(r, "assistant") != 0) { // (tools' turns: each template has its own layout)
            snprintf(err, err_size, "message %d: role \"%.32s\": we lay out system, user and assistant messages", i + 1, r);
            chat_free(m, i + 1);
            return -1;
        }
    }
    *out = m;
    return n;
}

// -f: one prompt per line. A line that starts with '{' is a JSON object: {"prompt": ...},
// or for -a 1 {"instruction": ..., "input": ...} (Alpaca's fields; "input" optional) or
// {"messages": [...]} (a conversation, answered as its next assistant turn); JSON is also
// how a prompt holds a newline. Blank lines are skipped. Returns the number of prompts;
// *texts are malloc'ed (already in the template with -a 1: tok's chat template after the
// system message, or Alpaca's; see instruct_prompt and conversation_prompt).
int read_prompts(const char *path, int instruct, const Tokenizer *tok, const char *system, char ***texts) {
    size_t len;
    uint8_t *data = read_whole_file(path, &len, "-f takes a text file with one prompt per line");
    int cap = 16, n = 0, line_no = 0;
    *texts = (char **)mallocCheck((size_t)cap * sizeof(char *));
    for (size_t start = 0; start < len;) {
        size_t end = start;
        while (end < len && data[end] != '\n') { end++; }
        size_t next = end + 1, stop = end;
        line_no++;
        if (stop > start && data[stop - 1] == '\r') { stop--; }
        data[stop] = '\0';
        const char *line = (const char *)data + start;
        start = next;
        if (stop == (size_t)(line - (const char *)data)) { continue; } // blank
        if (n == cap) { cap *= 2; *texts = (char **)realloc(*texts, (size_t)cap * sizeof(char *)); }
        if (*texts == NULL) { die_file(path, NULL, "out of memory"); }
        if (line[0] != '{') {
            (*texts)[n++] = instruct ? instruct_prompt(tok, system, line, NULL) : strdup(line);
            continue;
        }
        Json j;
        char err[256];
        if (json_parse(&j, line, strlen(line), err, sizeof(err)) != 0 || j.tokens[0].type != JSON_OBJECT) {
            die_file(path, NULL, "line %d starts with '{' but is not a JSON object: %s", line_no, err);
        }
        if (instruct && json_get(&j, 0, "messages") >= 0) {
            ChatMessage *m;
            int count = json_messages(&j, 0, &m, err, sizeof(err));
            if (count < 0) { die_file(path, NULL, "line %d: %s", line_no, err); }
            if (system != NULL && strcmp(m[0].role, "system") != 0) { // -y: the system message of a conversation without one
                m = (ChatMessage *)realloc(m, (size_t)(count + 1) * sizeof(ChatMessage));
                if (m == NULL) { die_file(path, NULL, "out of memory"); }
                memmove(m + 1, m, (size_t)count * sizeof(ChatMessage));
                m[0].role = strdup("system");
                m[0].content = strdup(system);
                count++;
            }
            (*texts)[n++] = conversation_prompt(tok, m, count);
            chat_free(m, count);
            json_free(&j);
            continue;
        }
        size_t cap_text = strlen(line) + 1; // decoding never makes a string longer
        char *first = (char *)mallocCheck(cap_text), *second = (char *)mallocCheck(cap_text);
        int a = json_get(&j, 0, instruct ? "instruction" : "prompt"), b = instruct ? json_get(&j, 0, "input") : -1;
        if (a < 0 || json_string(&j, a, first, cap_text) < 0) {
            die_file(path, NULL, "line %d: no string \"%s\"%s", line_no, instruct ? "instruction" : "prompt", instruct ? " and no \"messages\"" : "");
        }
        second[0] = '\0';
        if (b >= 0 && json_string(&j, b, second, cap_text) < 0) { die_file(path, NULL, "line %d: \"input\" is not a string", line_no); }
        (*texts)[n++] = instruct ? instruct_prompt(tok, system, first, second) : strdup(first);
        free(first);
        free(second);
        json_free(&j);
    }
    free(data);
    if (n == 0) { die_file(path, "-f takes a text file with one prompt per line", "holds no prompt"); }
    return n;
}

// "15496, 995" -> ids, for -z 1 (models without GPT-2's vocabulary)
int parse_ids(const char *s, int V, int *out, const char *what) {
    int n = 0;
    while (*s != '\0') {
        while (*s == ' ' || *s == ',') { s++; }
        if (*s == '\0') { break; }
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v >= V) {
            fprintf(stderr, "Error: %s: '%.20s' is not a token id in [0, %d)\n", what, s, V);
            exit(EXIT_FAILURE);
        }
        out[n++] = (int)v;
        s = end;
    }
    return n;
}

// --- end shared-copy: infer-prompts ---
// --- begin shared-copy: infer-eval ---
// ----------------------------------------------------------------------------
// -E: an evaluation, the same questions to the base model and (with -L) the tuned one

// A question of the evaluation file: a JSON line {"instruction": ..., "input": ... (optional),
// "answer": "DE", "partial": ["DEU"] (optional)}, as data/instructions writes eval.jsonl
typedef struct {
    char *question; // the instruction (and its input): no word of it counts as an answer
    char *prompt;   // the question in the model's chat template (or Alpaca's)
    char *answer;   // the expected answer, short: a code, a number, a name
    char **partial; // answers that are the same fact in another form (Germany's DEU for DE)
    int num_partial;
} EvalQuestion;

static int read_eval(const char *path, const Tokenizer *tok, const char *system, EvalQuestion **out) {
    size_t len;
    const char *hint = "-E takes JSON lines {\"instruction\": ..., \"input\": ..., \"answer\": ..., \"partial\": [...]} "
                       "(make data/iso/train.jsonl writes data/iso/eval.jsonl)";
    char *data = (char *)read_whole_file(path, &len, hint);
    int n = 0, cap = 16, line_no = 0;
    EvalQuestion *qs = (EvalQuestion *)mallocCheck((size_t)cap * sizeof(EvalQuestion));
    for (size_t start = 0; start < len;) {
        size_t end = start;
        while (end < len && data[end] != '\n') { end++; }
        line_no++;
        char *line = data + start;
        size_t line_len = end - start;
        start = end + 1;
        while (line_len > 0 && (line[line_len - 1] == '\r' || line[line_len - 1] == ' ')) { line_len--; }
        if (line_len == 0) { continue; }
        Json j;
        char err[256] = "";
        if (json_parse(&j, line, line_len, err, sizeof(err)) != 0) { die_file(path, hint, "line %d: %s", line_no, err); }
        if (j.tokens[0].type != JSON_OBJECT) { die_file(path, hint, "line %d is not a JSON object", line_no); }
        if (n == cap) { cap *= 2; qs = (EvalQuestion *)realloc(qs, (size_t)cap * sizeof(EvalQuestion)); }
        if (qs == NULL) { die_file(path, NULL, "out of memory"); }
        EvalQuestion *q = &qs[n++];
        memset(q, 0, sizeof(*q));
        char *instruction = (char *)mallocCheck(line_len + 1), *input = (char *)mallocCheck(line_len + 1);
        q->answer = (char *)mallocCheck(line_len + 1);
        int a = json_get(&j, 0, "instruction"), b = json_get(&j, 0, "input"), c = json_get(&j, 0, "answer");
        if (a < 0 || json_string(&j, a, instruction, line_len + 1) < 0 || instruction[0] == '\0') {
            die_file(path, hint, "line %d: no \"instruction\" string", line_no);
        }
        input[0] = '\0';
        if (b >= 0 && json_string(&j, b, input, line_len + 1) < 0) { die_file(path, hint, "line %d: \"input\" is not a string", line_no); }
        if (c < 0 || json_string(&j, c, q->answer, line_len + 1) < 0 || q->answer[0] == '\0') {
            die_file(path, hint, "line %d: no \"answer\" string: the evaluation needs the expected answer", line_no);
        }
        int p = json_get(&j, 0, "partial");
        if (p >= 0) {
            if (j.tokens[p].type != JSON_ARRAY) { die_file(path, hint, "line %d: \"partial\" is not an array of strings", line_no); }
            q->partial = (char **)mallocCheck(((size_t)j.tokens[p].size + 1) * sizeof(char *));
            for (int k = 0, at = p + 1; k < j.tokens[p].size; k++, at = j.tokens[at].next) {
                q->partial[k] = (char *)mallocCheck(line_len + 1);
                if (json_string(&j, at, q->partial[k], line_len + 1) < 0 || q->partial[k][0] == '\0') {
                    die_file(path, hint, "line %d: \"partial\" holds something other than a non-empty string", line_no);
                }
                q->num_partial++;
            }
        }
        q->prompt = instruct_prompt(tok, system, instruction, input);
        size_t qn = strlen(instruction) + strlen(input) + 3;
        q->question = (char *)mallocCheck(qn);
        snprintf(q->question, qn, "%s%s%s", instruction, input[0] != '\0' ? "\n\n" : "", input);
        free(instruction);
        free(input);
        json_free(&j);
    }
    free(data);
    if (n == 0) { die_file(path, hint, "holds no question"); }
    *out = qs;
    return n;
}

static void eval_free(EvalQuestion *qs, int n) {
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < qs[i].num_partial; k++) { free(qs[i].partial[k]); }
        free(qs[i].partial); free(qs[i].question); free(qs[i].prompt); free(qs[i].answer);
    }
    free(qs);
}

// How an answer is judged. The rules are for short factual answers (a code, a number, a
// name of one or a few words), the "answer" of each question. The reply is searched for the
// answer, exactly, as whole words ("DE" not inside "DEU"; "New York" as it is written); for
// it in other capitals ("de", "new york"); and for the question's "partial" answers (the
// same fact in another form: Germany's "DEU" when "DE" was asked). Then its other words
// (maximal runs of ASCII letters and digits, outside what matched) are looked at: a word is
// "answer-like" when it has the form of the answer's first word, the same kinds of
// character in the same order of runs (capitals "DE", "DEU" and "CAR" alike; digits
// "3166"; a capital then small letters "Berlin"), at least 2 characters long (or the
// answer's length, if shorter), no word of the question in any capitals (the question's
// "ISO" answers nothing), and, for a form that starts with a capital and goes on in small
// letters, not the first word of a sentence ("The", "It": grammar, not an answer). Then, in
// this order:
//   correct            the answer is there, exactly, with no answer-like word beside it,
//                      and the reply ended (its end token or the stop string; not cut off
//                      at -n tokens)
//   partially correct  the answer is there, but with other answer-like words (a hedge,
//                      a list) or in a reply that was cut off; or it is not, but the answer
//                      in other capitals or one of the "partial" answers is, with no
//                      answer-like word beside it
//   hallucination      answer-like words, none of them right: a wrong answer stated
//   format error       no answer-like word at all: digits for a code, a sentence
//                      without an answer, an empty reply
enum { EVAL_CORRECT, EVAL_PARTIAL, EVAL_FORMAT, EVAL_HALLUCINATION, EVAL_CLASSES };
static const char *const EVAL_CLASS_NAMES[EVAL_CLASSES] = {"correct", "partially correct", "format error", "hallucination"};

static int word_char(char ch) { return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9'); }
static char char_kind(char ch) { return ch >= 'A' && ch <= 'Z' ? 'A' : ch >= 'a' && ch <= 'z' ? 'a' : ch >= '0' && ch <= '9' ? '9' : '?'; }

// whether a and b (n bytes each) are the same, in ASCII capitals or small letters alike if fold
static int same_word(const char *a, const char *b, size_t n, int fold) {
    for (size_t i = 0; i < n; i++) {
        char x = a[i], y = b[i];
        if (fold && x >= 'a' && x <= 'z') { x = (char)(x - 'a' + 'A'); }
        if (fold && y >= 'a' && y <= 'z') { y = (char)(y - 'a' + 'A'); }
        if (x != y) { return 0; }
    }
    return 1;
}

// a word's form: its runs of character kinds, "DEU" -> "A", "Berlin" -> "Aa" (at most 15)
static void word_form(const char *w, size_t n, char form[16]) {
    size_t k = 0;
    for (size_t i = 0; i < n && k < 15; i++) {
        char kind = word_char(w[i]) ? char_kind(w[i]) : '?';
        if (k == 0 || form[k - 1] != kind) { form[k++] = kind; }
    }
    form[k] = '\0';
}

// whether the word w (n bytes) is one of the words of text (case ignored if fold)
static int has_word(const char *text, const char *w, size_t n, int fold) {
    for (const char *p = text; *p != '\0';) {
        while (*p != '\0' && !word_char(*p)) { p++; }
        const char *s = p;
        while (*p != '\0' && word_char(*p)) { p++; }
        if ((size_t)(p - s) == n && same_word(s, w, n, fold)) { return 1; }
    }
    return 0;
}

// Marks in covered[] the bytes of every occurrence of phrase in reply that starts and ends
// at word boundaries (case ignored if fold); returns how many there were
static int mark_phrase(const char *reply, size_t len, const char *phrase, int fold, unsigned char *covered) {
    size_t n = strlen(phrase);
    int found = 0;
    for (size_t at = 0; n > 0 && at + n <= len; at++) {
        if (!same_word(reply + at, phrase, n, fold)) { continue; }
        if ((at > 0 && word_char(reply[at - 1]) && word_char(phrase[0])) || (at + n < len && word_char(reply[at + n]) && word_char(phrase[n - 1]))) {
            continue;
        }
        memset(covered + at, 1, n);
        found++;
    }
    return found;
}

int eval_classify(const EvalQuestion *q, const char *reply, int ended) {
    size_t len = strlen(reply);
    unsigned char *covered = (unsigned char *)calloc(len + 1, 1);
    if (covered == NULL) { fprintf(stderr, "Error: out of memory\n"); exit(EXIT_FAILURE); }
    int exact = mark_phrase(reply, len, q->answer, 0, covered) > 0, near = 0;
    near |= mark_phrase(reply, len, q->answer, 1, covered) > 0 && !exact;
    for (int k = 0; k < q->num_partial; k++) { near |= mark_phrase(reply, len, q->partial[k], 0, covered) > 0; }
    // the answer's form: that of its first word
    const char *a = q->answer;
    while (*a != '\0' && !word_char(*a)) { a++; }
    size_t first = 0;
    while (word_char(a[first])) { first++; }
    char answer_form[16], form[16];
    word_form(a, first, answer_form);
    size_t min_len = first < 2 ? first : 2;
    int other = 0, sentence_start = 1;
    for (size_t i = 0; i < len && !other;) {
        if (!word_char(reply[i])) {
            if (reply[i] == '.' || reply[i] == '!' || reply[i] == '?' || reply[i] == ':' || reply[i] == '\n') { sentence_start = 1; }
            i++;
            continue;
        }
        size_t s = i;
        while (i < len && word_char(reply[i])) { i++; }
        size_t n = i - s;
        int inside = 0;
        for (size_t j = s; j < i && !inside; j++) { inside = covered[j]; }
        word_form(reply + s, n, form);
        int grammar = sentence_start && form[0] == 'A' && form[1] == 'a'; // (a sentence's capital)
        if (!inside && first > 0 && n >= min_len && strcmp(form, answer_form) == 0 && !grammar && !has_word(q->question, reply + s, n, 1)) {
            other = 1;
        }
        sentence_start = 0;
    }
    free(covered);
    if (exact) { return !other && ended ? EVAL_CORRECT : EVAL_PARTIAL; }
    if (near && !other) { return EVAL_PARTIAL; }
    return other ? EVAL_HALLUCINATION : EVAL_FORMAT;
}
// --- end shared-copy: infer-eval ---

// ----------------------------------------------------------------------------
// main: the flags, the model, the prompts, generation

#ifndef TESTING
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

// --- begin shared-copy: infer-options ---
// the chat's commands (run_chat), and the chat's sampling defaults (sampling_settings)
#define CHAT_HELP "/new starts a new conversation, /quit (or the end of the input) ends it; a line that ends in \\ goes on"
#define CHAT_DEFAULTS_TEXT "greedy with a repetition penalty of 1.1"
typedef struct {
    const char *model, *tokenizer, *adapter, *prompt, *prompts_file, *eval_file, *input, *system, *stop;
    int instruct, max_new, top_k, ids, bench, ignore_eos, verbose, drop_oldest, context;
    float temperature, top_p, min_p, repetition_penalty; // (NAN, and top_k -1: not given; see sampling_settings)
    long seed;
    const char *batches, *prompt_lengths, *gen_lengths;
    const char *quant_text; // -Q as given ...
    QuantSpec quant, quant_head; // ... and what it says: the blocks' linear layers, the head
} Options;

static void print_usage(const Options *d) {
    printf("Usage: %s [options]      GPT-2 and Llama-family text generation and chat on %s (prefill, KV-cache decode, sampling)\n", PROGRAM, hardware_name());
    printf("  -m <model>    a checkpoint (.bin, fp32 or bf16; ./convert makes one from a Hugging Face folder),\n"
           "                d<N>: a random GPT-2 of N layers; llama:smollm2-135m, llama:llama3.2-1b or\n"
           "                llama:qwen2.5-0.5b: a random model of that shape [newest log_gpt2/model_*.bin; d12 with -B 1]\n");
    printf("  -g <path>     the tokenizer: a tokenizer file (./convert writes NAME_tokenizer.bin beside a\n"
           "                model NAME.bin), or the folder of GPT-2's encoder.json and vocab.bpe\n"
           "                [%s]\n", d->tokenizer ? d->tokenizer : "the model's NAME_tokenizer.bin, else data/gpt2");
    printf("  -L <dir>      a LoRA adapter, applied unmerged: a PEFT folder (adapter_config.json,\n"
           "                adapter_model.safetensors), as ./finetune_lora writes [none]\n");
    printf("  -Q <spec>     the linear layers' weights quantized at load: nf4 or fp4 (bitsandbytes' 4 bits,\n"
           "                :BLOCKSIZE [64] and :0 or :1 double quantization [1]: QLoRA's base) or q8_0\n"
           "                (llama.cpp's 8 bits); ,SPEC for the output head too (-Q nf4,q8_0) [%s]\n", d->quant_text);
    printf("  -i <text>     the prompt; \"\" starts from the start token (GPT-2: <|endoftext|>) [\"%s\"]\n", d->prompt);
    printf("  -f <file>     a batch: one prompt per line (a line starting with { is JSON: {\"prompt\": ...})\n");
    printf("  -E <file>     an evaluation: JSON lines {\"instruction\", \"input\", \"answer\", \"partial\"} asked\n"
           "                to the base model and, with -L, the tuned one (greedy unless -t); each answer\n"
           "                classified (correct, partially correct, format error, hallucination), a\n"
           "                Markdown table of both to stdout\n");
    printf("  -a <0|1>      chat / instruction mode: messages laid out in the model's chat template (ChatML,\n"
           "                Llama 3), or else in the Alpaca template. Without -i and -f: a conversation,\n"
           "                a message per line of standard input (/new, /quit; see below); with -i: one\n"
           "                user message; -f lines may be {\"instruction\": ..., \"input\": ...} or\n"
           "                {\"messages\": [{\"role\": ..., \"content\": ...}, ...]} [%d]\n", d->instruct);
    printf("  -c <text>     the instruction's input, for -a 1 with -i [\"%s\"]\n", d->input);
    printf("  -y <text>     the system message, for -a 1 (Alpaca's: in place of its opening sentence); with\n"
           "                -f, for the conversations that have none [the template's own]\n");
    printf("  -C <int>      a conversation's context: the tokens its KV cache holds, at most the model's [%d]\n", d->context);
    printf("  -O <0|1>      a conversation that outgrows it: 1 drops its oldest turns, 0 ends the chat [%d]\n", d->drop_oldest);
    printf("  -n <int>      tokens to generate at most (fewer if the context fills up) [%d]\n", d->max_new);
    printf("  Sampling: each setting from its flag, else from the model file (./convert keeps a Hugging Face\n"
           "  folder's generation_config.json), else, in chat mode (-a 1), %s,\n"
           "  else transformers' generate() defaults (temperature 1, top-k 50); the start-up line says which\n", CHAT_DEFAULTS_TEXT);
    printf("  -t <float>    temperature; 0 = greedy\n");
    printf("  -k <int>      top-k: sample among the k most probable tokens; 0 = all\n");
    printf("  -p <float>    top-p: ... the fewest whose probabilities sum to p; 1 = all\n");
    printf("  -M <float>    min-p: ... those at least min-p times as probable as the most probable; 0 = all\n");
    printf("  -r <float>    repetition penalty: tokens already in the text less likely (1.1 is mild); 1 = none\n");
    printf("  -s <int>      random seed [%ld]\n", d->seed);
    printf("  -x <text>     stop string: stop when it appears (it is not printed) [\"%s\"]\n", d->stop);
    printf("  -e <0|1>      1: go on past the end token (only -n, -x or the context stop) [%d]\n", d->ignore_eos);
    printf("  -v <0|1>      1: print the prompt's tokens, id:text each, to stderr [%d]\n", d->verbose);
    printf("  -z <0|1>      token ids instead of text: -i takes ids (\"15496,995\"), ids are printed [%d]\n", d->ids);
    printf("  -B <0|1>      benchmark: sweep batch sizes -b, prompt lengths -l, generation lengths -N [%d]\n", d->bench);
    printf("  -b <list>     [%s]   -l <list> [%s]   -N <list> [%s]\n", d->batches, d->prompt_lengths, d->gen_lengths);
    printf("  -h            this help\n");
    printf("A conversation: %s.\n", CHAT_HELP);
    printf("Generated text goes to stdout; the model, timing and memory reports to stderr.\n");
}

// --- end shared-copy: infer-options ---

// --- begin shared-copy: infer-chat ---
// ----------------------------------------------------------------------------
// a conversation: -a 1 without -i, on standard input

// The messages so far: the system message (-y) first if there is one, then user and
// assistant turns in order
typedef struct {
    ChatMessage *m;
    int n, cap;
} Conversation;

static void conversation_add(Conversation *c, const char *role, const char *content) {
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 16;
        c->m = (ChatMessage *)realloc(c->m, (size_t)c->cap * sizeof(ChatMessage));
        if (c->m == NULL) { fprintf(stderr, "Error: out of memory for the conversation\n"); exit(EXIT_FAILURE); }
    }
    c->m[c->n].role = strdup(role);
    c->m[c->n].content = strdup(content);
    if (c->m[c->n].role == NULL || c->m[c->n].content == NULL) { fprintf(stderr, "Error: out of memory for the conversation\n"); exit(EXIT_FAILURE); }
    c->n++;
}

// drops messages first..first+count-1
static void conversation_drop(Conversation *c, int first, int count) {
    for (int i = first; i < first + count; i++) { free((char *)c->m[i].role); free((char *)c->m[i].content); }
    memmove(c->m + first, c->m + first + count, (size_t)(c->n - first - count) * sizeof(ChatMessage));
    c->n -= count;
}

// One message from standard input: a line, or several when a line ends in a backslash
// (the backslash goes, the line break stays). NULL at the end of the input. Malloc'ed.
static char *read_message(FILE *in) {
    char *text = NULL, *line = NULL;
    size_t len = 0, cap = 0;
    ssize_t got;
    while ((got = getline(&line, &cap, in)) >= 0) {
        size_t n = (size_t)got;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) { n--; }
        int more = n > 0 && line[n - 1] == '\\';
        if (more) { line[n - 1] = '\n'; } // (joined to the next line with the line break)
        char *grown = (char *)realloc(text, len + n + 1);
        if (grown == NULL) { fprintf(stderr, "Error: out of memory for a message\n"); exit(EXIT_FAILURE); }
        text = grown;
        memcpy(text + len, line, n);
        len += n;
        text[len] = '\0';
        if (!more) { break; }
    }
    free(line);
    if (got < 0 && text == NULL) { return NULL; }
    return text;
}

// the ids of the conversation's first n messages (the chat template writes its start token
// itself; the Alpaca template gets it from the tokenizer, as a prompt does); returns how many,
// or -1 (with *bad, and no ids) if a token is outside the model's vocabulary
static int conversation_ids(Tokenizer *tok, const Conversation *conv, int n_messages, int V, int **ids, int *bad) {
    char *text = conversation_prompt(tok, conv->m, n_messages);
    size_t len = strlen(text);
    *ids = (int *)mallocCheck((tokenizer_max_ids(tok, len) + 2) * sizeof(int));
    int n = 0;
    if (tok->add_bos && tok->chat == CHAT_NONE) { (*ids)[n++] = tok->bos_token; }
    n += (int)tokenizer_encode(tok, (const uint8_t *)text, len, 1, (int32_t *)*ids + n);
    free(text);
    for (int i = 0; i < n; i++) {
        if ((*ids)[i] >= V) { *bad = (*ids)[i]; free(*ids); *ids = NULL; return -1; }
    }
    return n;
}

// -v 1: a prompt's tokens, id and text each, from token `from` on (the ones before it in
// the cache already), to stderr
static void print_prompt_tokens(const Tokenizer *tok, const int *ids, int n, int from) {
    fprintf(stderr, "prompt: %d tokens (%d in the cache from earlier turns):", n, from);
    for (int i = 0; i < n; i++) {
        size_t len;
        const uint8_t *bytes = tok != NULL ? tokenizer_token(tok, ids[i], &len) : NULL;
        fprintf(stderr, "%s %d", i == from && from > 0 ? " |" : "", ids[i]);
        if (bytes == NULL) { continue; }
        fputc(':', stderr);
        for (size_t k = 0; k < len; k++) { // the piece's bytes, control characters escaped
            if (bytes[k] == '\n') { fputs("\\n", stderr); }
            else if (bytes[k] < 0x20 || bytes[k] == 0x7F) { fprintf(stderr, "\\x%02X", bytes[k]); }
            else { fputc(bytes[k], stderr); }
        }
    }
    fputc('\n', stderr);
}

// The chat: each message from standard input joins the conversation, which is rendered
// whole in the model's chat template (or Alpaca's) and tokenized; the tokens it shares
// from the start with what the KV cache holds from the turns before (the earlier turns'
// prompts and replies) are not computed again, only the new ones are prefilled, and the
// reply streams. (The reply's tokens as the model made them and as the template's text
// re-tokenizes may differ; the cache is used up to the first difference.) When a turn does
// not fit the context with room for -n tokens, the oldest turns are dropped, with a line
// that says so (-O 0: the chat ends instead, and says so). A message that is empty or not
// UTF-8, or a command we do not know, gets a line on stderr, and the chat goes on.
static void run_chat(GPT2 *model, Tokenizer *tok, const Options *o, const GenerateOptions *g) {
    ModelConfig c = model->config;
    int S = o->context < c.max_seq_len ? o->context : c.max_seq_len, interactive = isatty(fileno(stdin));
    gpt2_allocate_cache(model, 1, S); // (once, for the whole conversation: generate() then keeps it)
    int *cached = (int *)mallocCheck((size_t)S * sizeof(int)), num_cached = 0, turn = 0, answered = 0;
    Conversation conv = {NULL, 0, 0};
    if (o->system != NULL) { conversation_add(&conv, "system", o->system); }
    int first_turn = conv.n; // (the first message a drop may take)
    fprintf(stderr, "chat: %s\n", CHAT_HELP);
    for (;;) {
        if (interactive) { printf("> "); fflush(stdout); }
        char *text = read_message(stdin);
        if (text == NULL) { break; }
        turn++;
        if (!interactive) { printf("> %s\n", text); fflush(stdout); } // (piped: the transcript shows what was said)
        size_t len = strlen(text), bad = 0, step;
        uint32_t cp;
        while (bad < len && (step = utf8_decode((const uint8_t *)text + bad, len - bad, &cp)) > 0) { bad += step; }
        if (bad < len) {
            fprintf(stderr, "message %d: not valid UTF-8 (byte %zu): not sent\n", turn, bad + 1);
            free(text);
            continue;
        }
        if (strcmp(text, "/quit") == 0 || strcmp(text, "/exit") == 0) { free(text); break; }
        if (strcmp(text, "/new") == 0) {
            conversation_drop(&conv, first_turn, conv.n - first_turn);
            fprintf(stderr, "a new conversation\n");
            free(text);
            continue;
        }
        if (text[0] == '/') {
            fprintf(stderr, "message %d: %s is no command (%s): not sent\n", turn, text, CHAT_HELP);
            free(text);
            continue;
        }
        if (strspn(text, " \t\n") == len) {
            fprintf(stderr, "message %d: empty: not sent\n", turn);
            free(text);
            continue;
        }
        conversation_add(&conv, "user", text);
        free(text);
        // The message with the system message alone must fit, or it is not sent (and nothing
        // is dropped for it); then the oldest turns go while the conversation leaves no room
        // for -n tokens (at most half the context: the rest keeps the turns before)
        int room = o->max_new < S / 2 ? o->max_new : S / 2, bad_id = -1, *ids = NULL, n;
        ChatMessage pair[2] = {conv.m[0], conv.m[conv.n - 1]}; // (the system message, if there is one: first_turn is 1)
        Conversation alone = {first_turn ? pair : conv.m + conv.n - 1, first_turn + 1, 0};
        n = conversation_ids(tok, &alone, alone.n, c.vocab_size, &ids, &bad_id);
        free(ids);
        if (n < 0 || n >= S) {
            if (n < 0) { fprintf(stderr, "message %d: token %d is outside the model's vocabulary of %d: not sent\n", turn, bad_id, c.vocab_size); }
            else { fprintf(stderr, "message %d: %d tokens with the template: no room in the context of %d (-C): not sent\n", turn, n, S); }
            conversation_drop(&conv, conv.n - 1, 1);
            continue;
        }
        n = conversation_ids(tok, &conv, conv.n, c.vocab_size, &ids, &bad_id);
        while (n > 0 && n + room > S && conv.n - first_turn > 1) {
            if (!o->drop_oldest) {
                fprintf(stderr, "Error: the conversation (%d tokens) and -n %d no longer fit the context of %d "
                        "tokens (-C); -O 1 drops the oldest turns instead\n", n, o->max_new, S);
                exit(EXIT_FAILURE);
            }
            int drop = 1; // the oldest user message and the replies after it, up to the next user message
            while (first_turn + drop < conv.n - 1 && strcmp(conv.m[first_turn + drop].role, "user") != 0) { drop++; }
            conversation_drop(&conv, first_turn, drop);
            free(ids);
            int before = n;
            n = conversation_ids(tok, &conv, conv.n, c.vocab_size, &ids, &bad_id);
            fprintf(stderr, "the context is full: the oldest turn goes (%d messages, %d tokens; %d of %d now)\n", drop,
                    before - n, n, S);
        }
        if (n < 0) { // (a reply re-tokenized into a token the model does not have: GPT-2's tokenizer on a smaller model)
            fprintf(stderr, "message %d: the conversation holds token %d, outside the model's vocabulary of %d: not sent\n", turn,
                    bad_id, c.vocab_size);
            conversation_drop(&conv, conv.n - 1, 1);
            continue;
        }
        int same = 0;
        while (same < n && same < num_cached && ids[same] == cached[same]) { same++; }
        if (o->verbose) { print_prompt_tokens(tok, ids, n, same < n ? same : n - 1); }
        Sequence s;
        sequence_init(&s, NULL, ids, n, o->max_new, S);
        s.cached = same;
        GenerateStats stats;
        GenerateOptions turn_opts = *g; // (each turn draws its own random numbers)
        turn_opts.seed = rng_subkey(g->seed, STREAM_CHAT, (uint64_t)answered);
        generate(model, &s, 1, &turn_opts, &stats);
        printf("\n");
        fflush(stdout);
        conversation_add(&conv, "assistant", s.text);
        memcpy(cached, s.tokens, (size_t)s.fed * sizeof(int));
        num_cached = s.fed;
        fprintf(stderr, "[turn %d: %d prompt tokens, %d of them from the cache, %zu prefilled; %d generated, %.1f tokens/s; "
                "stopped at %s]\n", ++answered, n, s.cached, stats.prompt_tokens, s.num_tokens - s.num_prompt,
                stats.decode_seconds > 0 ? stats.decoded_tokens / stats.decode_seconds : 0.0, s.stop);
        sequence_free(&s);
        free(ids);
    }
    conversation_drop(&conv, 0, conv.n);
    free(conv.m);
    free(cached);
}
// --- end shared-copy: infer-chat ---

// --- begin shared-copy: infer-main ---
// parses "1,4,16" into up to max positive integers; returns how many, -1 if malformed
static int parse_list(const char *s, int *out, int max) {
    int n = 0;
    while (*s != '\0') {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v <= 0 || v > (1 << 20) || n == max || (*end != ',' && *end != '\0')) { return -1; }
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

// The flags, checked. Defaults: transformers' generate() sampling defaults (temperature 1,
// top-k 50, top-p 1).
static Options parse_args(int argc, char **argv) {
    Options o = {.model = NULL, .tokenizer = NULL, .adapter = NULL, .prompt = NULL, .prompts_file = NULL, .eval_file = NULL, .input = "", .system = NULL,
                 .stop = "", .instruct = 0, .max_new = 128, .top_k = -1, .ids = 0, .bench = 0, .ignore_eos = 0, .verbose = 0,
                 .drop_oldest = 1, .context = 8192, .temperature = NAN, .top_p = NAN, .min_p = NAN, .repetition_penalty = NAN, .seed = 1337,
                 .batches = "1,4,16", .prompt_lengths = "16,128", .gen_lengths = "16,64", .quant_text = "none",
                 .quant = {QUANT_NONE, 64, 1}, .quant_head = {QUANT_NONE, 64, 1}};
    Options defaults = o;
    defaults.prompt = "";
    for (int i = 1; i < argc; i += 2) {
        const char *flag = argv[i];
        if (strcmp(flag, "-h") == 0) { print_usage(&defaults); exit(0); }
        if (flag[0] != '-' || strlen(flag) != 2) { usage_error("unknown argument '%s'", flag); }
        if (i + 1 >= argc) { usage_error("flag %s needs a value", flag); }
        const char *v = argv[i + 1];
        switch (flag[1]) {
        case 'm': o.model = v; break;
        case 'g': o.tokenizer = v; break;
        case 'L': o.adapter = v; break;
        case 'i': o.prompt = v; break;
        case 'f': o.prompts_file = v; break;
        case 'E': o.eval_file = v; break;
        case 'a': o.instruct = (int)parse_int(flag, v, 0); break;
        case 'c': o.input = v; break;
        case 'y': o.system = v; break;
        case 'n': o.max_new = (int)parse_int(flag, v, 1); break;
        case 't': o.temperature = parse_float(flag, v); break;
        case 'k': o.top_k = (int)parse_int(flag, v, 0); break;
        case 'p': o.top_p = parse_float(flag, v); break;
        case 'M': o.min_p = parse_float(flag, v); break;
        case 'r': o.repetition_penalty = parse_float(flag, v); break;
        case 'e': o.ignore_eos = (int)parse_int(flag, v, 0); break;
        case 'v': o.verbose = (int)parse_int(flag, v, 0); break;
        case 'O': o.drop_oldest = (int)parse_int(flag, v, 0); break;
        case 'C': o.context = (int)parse_int(flag, v, 2); break;
        case 's': o.seed = parse_int(flag, v, 0); break;
        case 'x': o.stop = v; break;
        case 'z': o.ids = (int)parse_int(flag, v, 0); break;
        case 'B': o.bench = (int)parse_int(flag, v, 0); break;
        case 'b': o.batches = v; break;
        case 'l': o.prompt_lengths = v; break;
        case 'N': o.gen_lengths = v; break;
        case 'Q': {
            char err[256];
            if (parse_quant(v, &o.quant, &o.quant_head, err, sizeof(err)) != 0) { usage_error("-Q %s", err); }
            o.quant_text = v;
            break;
        }
        default: usage_error("unknown flag %s", flag);
        }
    }
    if (o.instruct > 1 || o.ids > 1 || o.bench > 1 || o.ignore_eos > 1 || o.verbose > 1 || o.drop_oldest > 1) {
        usage_error("flags -a, -z, -B, -e, -v and -O take 0 or 1%s", "");
    }
    if (!isnan(o.top_p) && !(o.top_p > 0.0f && o.top_p <= 1.0f)) { usage_error("-p (top-p) must be in (0, 1]%s", ""); }
    if (!isnan(o.min_p) && !(o.min_p >= 0.0f && o.min_p <= 1.0f)) { usage_error("-M (min-p) must be in [0, 1]%s", ""); }
    if (!isnan(o.repetition_penalty) && !(o.repetition_penalty > 0.0f && o.repetition_penalty <= 100.0f)) {
        usage_error("-r (the repetition penalty) must be in (0, 100]%s", "");
    }
    if (!isnan(o.temperature) && !(o.temperature >= 0.0f && o.temperature <= 100.0f)) { usage_error("-t (the temperature) must be in [0, 100]%s", ""); }
    if (o.ids && (o.instruct || o.stop[0] != '\0')) { usage_error("-z 1 (token ids) works without -a and -x%s", ""); }
    if (o.eval_file != NULL && (o.prompts_file != NULL || o.prompt != NULL || o.ids || o.bench)) {
        usage_error("-E (an evaluation) asks its own questions: without -i, -f, -z 1 and -B 1%s", "");
    }
    if (o.instruct && o.prompt != NULL && o.prompt[0] == '\0') { usage_error("-a 1 -i needs a message (without -i: a conversation)%s", ""); }
    if (o.input[0] != '\0' && !(o.instruct && o.prompt != NULL)) { usage_error("-c (the instruction's input) goes with -a 1 -i%s", ""); }
    if (o.eval_file != NULL) { o.instruct = 1; } // (its questions go in the chat template)
    if (o.prompt == NULL && !(o.instruct && o.prompts_file == NULL && o.eval_file == NULL && !o.bench)) { o.prompt = ""; }
    if (o.system != NULL && !o.instruct) { usage_error("-y (a system message) goes with -a 1%s", ""); }
    // no -m: the newest checkpoint of ./train_gpt2 (or GPT-2 124M's shapes for the benchmark)
    if (o.model == NULL && o.bench) { o.model = "d12"; }
    if (o.model == NULL) {
        static char latest[4096];
        int step = find_latest_checkpoint("log_gpt2");
        if (step < 0) {
            fprintf(stderr, "Error: no -m given and no checkpoint in log_gpt2/\n");
            fprintf(stderr, "HINT: train one (./train_gpt2 -n 100 writes log_gpt2/model_*.bin), or -m a checkpoint (./convert "
                    "makes one from a Hugging Face GPT-2 folder)\n");
            exit(EXIT_FAILURE);
        }
        format_path(latest, sizeof(latest), "log_gpt2/model_%08d.bin", step);
        o.model = latest;
    }
    return o;
}

// The sampling settings: each from its flag, else from the model file's notes (a Hugging Face
// folder's generation_config.json, kept by ./convert), else in chat mode, for a model whose
// file says nothing of sampling (a GGUF's), CHAT_DEFAULTS_TEXT's, else transformers' generate()
// defaults. A file's do_sample false means greedy, and so does -E (an evaluation) without -t.
// *about says which, for the start-up line.
static Sampler sampling_settings(const Options *o, const ModelNotes *n, char *about, size_t cap) {
    int chat = o->instruct && o->eval_file == NULL && (n->has & (NOTE_ALL & ~NOTE_END_TOKENS)) == 0;
    const char *from[5];
    Sampler s = {.temperature = 1.0f, .top_k = 50, .top_p = 1.0f, .min_p = 0.0f, .repetition_penalty = 1.0f, .history = NULL, .num_history = 0, .probs = NULL};
    for (int i = 0; i < 5; i++) { from[i] = "default"; }
    // Chat's defaults, for a small model: SmolLM2-135M at its model card's temperature 0.2 and
    // top-p 0.9 answers "What is the capital of France?" with "The" 60% of the time and "L"
    // (for "L'Étoile, la Marseillaise, ...") 40%; greedy answers "The capital of France is
    // Paris.", and a mild penalty keeps longer answers out of loops.
    if (chat) { s.temperature = 0.0f; s.repetition_penalty = 1.1f; from[0] = from[4] = "chat default"; }
#define SETTING(k, field, flag_value, flag_given, bit, note_value)                      \
    if (flag_given) { s.field = flag_value; from[k] = "flag"; }                          \
    else if (n->has & (bit)) { s.field = note_value; from[k] = "the model file"; }
    SETTING(0, temperature, o->temperature, !isnan(o->temperature), NOTE_TEMPERATURE, n->temperature)
    SETTING(1, top_k, o->top_k, o->top_k >= 0, NOTE_TOP_K, n->top_k)
    SETTING(2, top_p, o->top_p, !isnan(o->top_p), NOTE_TOP_P, n->top_p)
    SETTING(3, min_p, o->min_p, !isnan(o->min_p), NOTE_MIN_P, n->min_p)
    SETTING(4, repetition_penalty, o->repetition_penalty, !isnan(o->repetition_penalty), NOTE_REPETITION_PENALTY, n->repetition_penalty)
#undef SETTING
    if (isnan(o->temperature) && (n->has & NOTE_DO_SAMPLE) && !n->do_sample) { s.temperature = 0.0f; from[0] = "the model file: do_sample false"; }
    if (isnan(o->temperature) && o->eval_file != NULL) { s.temperature = 0.0f; from[0] = "-E's default"; } // (an evaluation: greedy unless -t)
    if (s.temperature == 0.0f) {
        snprintf(about, cap, "greedy (%s), repetition penalty %g (%s)", from[0], s.repetition_penalty, from[4]);
    } else {
        snprintf(about, cap, "temperature %g (%s), top-k %d (%s), top-p %g (%s), min-p %g (%s), repetition penalty %g (%s)",
                 s.temperature, from[0], s.top_k, from[1], s.top_p, from[2], s.min_p, from[3], s.repetition_penalty, from[4]);
    }
    return s;
}

// -B 1: the benchmark sweep
static void run_bench(GPT2 *model, const Options *o) {
    int batches[32], prompts[32], gens[32];
    int nb = parse_list(o->batches, batches, 32), np = parse_list(o->prompt_lengths, prompts, 32);
    int ng = parse_list(o->gen_lengths, gens, 32);
    if (nb <= 0 || np <= 0 || ng <= 0) { usage_error("-b, -l and -N take lists of positive integers like 1,4,16%s", ""); }
    bench(model, batches, nb, prompts, np, gens, ng, (uint64_t)o->seed);
}

// The prompts (-i, or each line of -f; wrapped in the template with -a 1) as sequences of
// token ids, checked against the model's vocabulary and context. Returns B; *texts holds
// each prompt's text (what streaming and the batch report print before the generation).
// (texts[b] is the prompt's text, or with -z 1 its ids; source: the file they came from, or
// NULL; first: the number of the file's prompts before texts[0], for messages)
static Sequence *sequences_from_texts(const Options *o, const ModelConfig *c, Tokenizer *tok, int start, char **texts, int B,
                                      const char *source, int first) {
    Sequence *seqs = (Sequence *)mallocCheck((size_t)B * sizeof(Sequence));
    for (int b = 0; b < B; b++) {
        size_t len = strlen(texts[b]);
        int *ids = (int *)mallocCheck(((o->ids ? len : tokenizer_max_ids(tok, len)) + 2) * sizeof(int));
        int n = 0;
        char what[64];
        snprintf(what, sizeof(what), "prompt %d", first + b + 1);
        if (o->ids) { n = parse_ids(texts[b], c->vocab_size, ids, what); }
        else if (len > 0) { // the start token first where the model's tokenizer puts it (Llama 3; a chat template writes its own)
            if (tok->add_bos && !(o->instruct && tok->chat != CHAT_NONE)) { ids[n++] = tok->bos_token; }
            n += (int)tokenizer_encode(tok, (const uint8_t *)texts[b], len, 1, (int32_t *)ids + n);
        }
        if (n == 0) { // an empty prompt: start a new document, from the start token (GPT-2: <|endoftext|>; 0 without one)
            ids[n++] = start >= 0 ? start : 0;
            fprintf(stderr, "%s is empty: the model starts from token %d%s\n", what, ids[0],
                    start < 0 ? "" : c->llama ? " (its start token)" : " (<|endoftext|>)");
            if (o->ids) { // in ids, print the id it starts from where the prompt would be
                free(texts[b]);
                texts[b] = (char *)mallocCheck(16);
                snprintf(texts[b], 16, "%d", ids[0]);
            }
        }
        for (int t = 0; t < n; t++) {
            if (ids[t] >= c->vocab_size) {
                fprintf(stderr, "Error: %s: token %d is outside the model's vocabulary (%d tokens)\n", what, ids[t], c->vocab_size);
                exit(EXIT_FAILURE);
            }
        }
        if (n >= c->max_seq_len) {
            fprintf(stderr, "Error: %s%s%s is %d tokens long; the model's context is %d tokens, which leaves no room to generate\n",
                    what, source ? " of " : "", source ? source : "", n, c->max_seq_len);
            exit(EXIT_FAILURE);
        }
        sequence_init(&seqs[b], texts[b], ids, n, o->max_new, c->max_seq_len);
        free(ids);
    }
    return seqs;
}

static int read_sequences(const Options *o, const ModelConfig *c, Tokenizer *tok, int start, char ***texts_out,
                          Sequence **seqs_out) {
    char **texts;
    int B = 1;
    if (o->prompts_file != NULL) {
        B = read_prompts(o->prompts_file, o->instruct, tok, o->system, &texts);
    } else {
        texts = (char **)mallocCheck(sizeof(char *));
        texts[0] = o->instruct ? instruct_prompt(tok, o->system, o->prompt, o->input) : strdup(o->prompt);
    }
    *seqs_out = sequences_from_texts(o, c, tok, start, texts, B, o->prompts_file, 0);
    *texts_out = texts;
    return B;
}

// After generation: one sequence was streamed as it went; a batch is printed now, each
// sequence under a line that says how it ended.
static void print_sequences(const Options *o, char **texts, const Sequence *seqs, int B) {
    for (int b = 0; b < B; b++) {
        if (B > 1) {
            printf("--- %d of %d (%d prompt tokens, %d generated, stopped at %s) ---\n", b + 1, B, seqs[b].num_prompt,
                   seqs[b].num_tokens - seqs[b].num_prompt, seqs[b].stop);
            if (!o->instruct) { fputs(texts[b], stdout); }
            fwrite(seqs[b].text, 1, seqs[b].text_len, stdout);
        }
        printf("\n");
    }
    fflush(stdout); // (before stderr's report: a pipe holds stdout's last line back otherwise)
    if (B == 1) {
        fprintf(stderr, "stopped at %s: %d prompt tokens, %d generated\n", seqs[0].stop, seqs[0].num_prompt,
                seqs[0].num_tokens - seqs[0].num_prompt);
    }
}

// -E: the evaluation's run (its questions and rules: infer-eval, above)

// a reply in a Markdown table cell: one line, '|' escaped, at most max bytes (cut between
// UTF-8 characters, "..." after); bytes that are no UTF-8 character (a reply cut off inside
// one, or a model's stray byte) as U+FFFD, so that the table is valid text
static void print_cell(const char *text, size_t max) {
    const unsigned char *s = (const unsigned char *)text;
    size_t n = strlen(text), i = 0;
    while (i < n && i < max) {
        unsigned char c = s[i];
        uint32_t cp;
        size_t len = utf8_decode(s + i, n - i, &cp); // (0: no character: overlong, a surrogate, cut off, a stray byte)
        if (len == 0) { fputs("\xEF\xBF\xBD", stdout); i++; continue; }
        if (i + len > max) { break; }
        if (c == '|') { fputs("\\|", stdout); }
        else if (c < 0x20 || c == 0x7f) { fputc(' ', stdout); } // (new lines, tabs, escapes: one line of text)
        else { fwrite(s + i, 1, len, stdout); }
        i += len;
    }
    if (i < n) { fputs("...", stdout); }
}

#define EVAL_BATCH 8 // questions generated together (the progress line comes after each batch)

// Generates every question's reply with the model as it is (adapter on or off), in batches,
// printing progress and an ETA to stderr; replies[i] malloc'ed, ended[i] as eval_classify takes
static void eval_generate(GPT2 *model, Tokenizer *tok, const Options *o, const GenerateOptions *g, EvalQuestion *qs, int n,
                          const char *label, char **replies, int *ended) {
    double t0 = wall_seconds();
    Options one = *o;
    one.instruct = 1;
    one.ids = 0;
    for (int first = 0; first < n; first += EVAL_BATCH) {
        int B = n - first < EVAL_BATCH ? n - first : EVAL_BATCH, start = tok->bos_token >= 0 ? tok->bos_token : tok->eot_token;
        char *texts[EVAL_BATCH];
        for (int b = 0; b < B; b++) { texts[b] = qs[first + b].prompt; }
        Sequence *seqs = sequences_from_texts(&one, &model->config, tok, start, texts, B, o->eval_file, first);
        GenerateStats stats;
        generate(model, seqs, B, g, &stats);
        for (int b = 0; b < B; b++) {
            replies[first + b] = (char *)mallocCheck(seqs[b].text_len + 1);
            memcpy(replies[first + b], seqs[b].text, seqs[b].text_len);
            replies[first + b][seqs[b].text_len] = '\0';
            ended[first + b] = strcmp(seqs[b].stop, g->eot_name) == 0 || strcmp(seqs[b].stop, "the stop string") == 0;
            sequence_free(&seqs[b]);
        }
        free(seqs);
        char eta[32];
        double seconds = wall_seconds() - t0;
        format_eta(eta, sizeof(eta), seconds, first + B, n);
        fprintf(stderr, "evaluation, %s: %d/%d questions, %.1f s, %s\n", label, first + B, n, seconds, eta);
    }
}

// -E: each question to the base model and, with -L, to the tuned one (the adapter on), with
// the same generation settings; each reply classified (eval_classify's rules); a table of
// every question, then the counts, in Markdown on stdout
static void run_eval(GPT2 *model, Tokenizer *tok, const Options *o, const GenerateOptions *g) {
    EvalQuestion *qs;
    int n = read_eval(o->eval_file, tok, o->system, &qs), columns = model->lora_sites != NULL ? 2 : 1;
    char **replies[2];
    int *ended[2], counts[2][EVAL_CLASSES] = {{0}}, *classes[2];
    const char *labels[2] = {"base model", "with the adapter"};
    for (int col = 0; col < columns; col++) {
        replies[col] = (char **)mallocCheck((size_t)n * sizeof(char *));
        ended[col] = (int *)mallocCheck((size_t)n * sizeof(int));
        classes[col] = (int *)mallocCheck((size_t)n * sizeof(int));
        model_adapter_on(model, col == 1);
        eval_generate(model, tok, o, g, qs, n, labels[col], replies[col], ended[col]);
        for (int i = 0; i < n; i++) {
            classes[col][i] = eval_classify(&qs[i], replies[col][i], ended[col][i]);
            counts[col][classes[col][i]]++;
        }
    }
    model_adapter_on(model, 1);
    printf("# Evaluation: %s, %d questions\n\n", o->eval_file, n);
    printf("model: %s%s%s; %s, at most %d tokens\n\n", model->source, columns == 2 ? "; adapter: " : "",
           columns == 2 ? model->lora_source : "", g->sampler.temperature == 0.0f ? "greedy" : "sampled (-t, -k, -p, -s)", g->max_new);
    printf("| # | question | answer | %s | |%s\n|---:|---|---|---|---|%s\n", labels[0], columns == 2 ? " with the adapter | |" : "",
           columns == 2 ? "---|---|" : "");
    for (int i = 0; i < n; i++) {
        printf("| %d | ", i + 1);
        print_cell(qs[i].question, 80);
        printf(" | ");
        print_cell(qs[i].answer, 80);
        printf(" |");
        for (int col = 0; col < columns; col++) {
            printf(" ");
            print_cell(replies[col][i], 100);
            printf("%s | %s |", ended[col][i] ? "" : " (cut off)", EVAL_CLASS_NAMES[classes[col][i]]);
        }
        printf("\n");
    }
    printf("\n| | correct | partially correct | format error | hallucination |\n|---|---:|---:|---:|---:|\n");
    for (int col = 0; col < columns; col++) {
        printf("| %s | %d | %d | %d | %d |\n", labels[col], counts[col][EVAL_CORRECT], counts[col][EVAL_PARTIAL],
               counts[col][EVAL_FORMAT], counts[col][EVAL_HALLUCINATION]);
    }
    for (int col = 0; col < columns; col++) {
        for (int i = 0; i < n; i++) { free(replies[col][i]); }
        free(replies[col]); free(ended[col]); free(classes[col]);
    }
    eval_free(qs, n);
}

int main(int argc, char **argv) {
    set_omp_wait_policy(argv); // first of all: it may start the program over
    Options o = parse_args(argc, argv);
    GPT2 model;
    gpt2_build_quantized(&model, o.model, (uint64_t)o.seed, o.quant, o.quant_head);
    if (o.adapter != NULL) { model_adapter_load(&model, o.adapter); }
    print_model(&model);
    ModelConfig c = model.config;
    if (o.bench) {
        run_bench(&model, &o);
        gpt2_free(&model);
        return 0;
    }
    // the tokenizer (not with -z 1: ids in, ids out): -g, else the one ./convert wrote beside
    // the model, else GPT-2's
    Tokenizer tok;
    char beside[4096] = "NAME_tokenizer.bin beside it", eot_name[64] = "the end token";
    const char *tok_path = o.tokenizer;
    size_t model_len = strlen(o.model);
    if (!o.ids && tok_path == NULL && model_len > 4 && strcmp(o.model + model_len - 4, ".bin") == 0) {
        format_path(beside, sizeof(beside), "%.*s_tokenizer.bin", (int)(model_len - 4), o.model);
        FILE *fp = fopen(beside, "rb"); // (only ./convert's: llm.c's decode-only tokenizer.bin may have such a name)
        int magic = 0;
        if (fp != NULL && fread(&magic, sizeof(magic), 1, fp) == 1 && magic == TOKENIZER_FILE_MAGIC) { tok_path = beside; }
        if (fp != NULL) { fclose(fp); }
    }
    if (!o.ids && tok_path == NULL && c.llama) {
        fprintf(stderr, "Error: %s: a Llama-family model without its tokenizer (no %s)\n", o.model, beside);
        fprintf(stderr, "HINT: ./convert writes it beside the model when the GGUF file or Hugging Face folder has one; "
                "-g names another; -z 1 works in token ids\n");
        return EXIT_FAILURE;
    }
    if (!o.ids) {
        tokenizer_init(&tok, tok_path != NULL ? tok_path : "data/gpt2");
        // the model may have more rows than tokens (padding), never fewer
        if (tok_path == NULL ? c.vocab_size > tok.vocab_size : tok.vocab_size > c.vocab_size) {
            fprintf(stderr, "Error: %s: the model has %d tokens, the tokenizer (%s) %d: they do not belong together\n",
                    o.model, c.vocab_size, tok_path != NULL ? tok_path : "data/gpt2", tok.vocab_size);
            fprintf(stderr, "HINT: -g names the model's tokenizer; -z 1 works in token ids\n");
            return EXIT_FAILURE;
        }
        size_t len;
        const uint8_t *name = tokenizer_token(&tok, tok.eot_token, &len);
        if (len < sizeof(eot_name)) { memcpy(eot_name, name, len); eot_name[len] = '\0'; }
    }
    int eot = o.ids ? c.eos_token : tok.eot_token;
    int start = o.ids ? c.bos_token : tok.bos_token >= 0 ? tok.bos_token : eot;
    // how to sample, and where to stop: the flags, else what the model file says
    ModelNotes notes;
    model_notes_read(o.model, c.vocab_size, &notes);
    char about[512];
    GenerateOptions g = {.max_new = o.max_new, .stop_string = o.stop, .eot_token = o.ignore_eos ? -1 : eot, .eot_name = eot_name,
                         .more_end = notes.end_tokens, .num_more_end = o.ignore_eos || !(notes.has & NOTE_END_TOKENS) ? 0 : notes.num_end,
                         .seed = (uint64_t)o.seed, .sampler = sampling_settings(&o, &notes, about, sizeof(about)),
                         .tok = o.ids ? NULL : &tok, .stream = NULL};
    fprintf(stderr, "sampling: %s\n", about);
    if (g.num_more_end > 0 || o.ignore_eos) {
        fprintf(stderr, "stops at: %s\n", o.ignore_eos ? "-n tokens, -x or the end of the context (-e 1: not the end token)" : "the end token, or one the model file lists");
    }
    if (o.eval_file != NULL) {
        run_eval(&model, &tok, &o, &g);
        tokenizer_free(&tok);
        gpt2_free(&model);
        return 0;
    }
    if (o.instruct && o.prompt == NULL && o.prompts_file == NULL) { // a conversation on standard input
        g.stream = stdout;
        run_chat(&model, &tok, &o, &g);
        tokenizer_free(&tok);
        gpt2_free(&model);
        return 0;
    }
    char **texts;
    Sequence *seqs;
    int B = read_sequences(&o, &c, o.ids ? NULL : &tok, start, &texts, &seqs);
    g.stream = B == 1 ? stdout : NULL;
    if (o.verbose) {
        for (int b = 0; b < B; b++) { print_prompt_tokens(o.ids ? NULL : &tok, seqs[b].tokens, seqs[b].num_prompt, 0); }
    }
    // one sequence streams: first the prompt as given (not in instruction mode), then tokens
    if (B == 1 && !o.instruct) { fputs(o.ids ? texts[0] : seqs[0].prompt, stdout); fflush(stdout); }
    GenerateStats stats;
    generate(&model, seqs, B, &g, &stats);
    print_sequences(&o, texts, seqs, B);
    print_stats(&model, seqs, B, &stats);
    for (int b = 0; b < B; b++) { sequence_free(&seqs[b]); free(texts[b]); }
    free(seqs);
    free(texts);
    if (!o.ids) { tokenizer_free(&tok); }
    gpt2_free(&model);
    return 0;
}
// --- end shared-copy: infer-main ---
#endif
