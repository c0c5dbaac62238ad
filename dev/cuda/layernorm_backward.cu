/*
layernorm_backward.cu: the kernel ladder for LayerNorm's backward pass as train_gpt2.cu
computes it (its layernorm_backward launcher, all of it). For N = B*T rows of C channels,
with xhat = (x - mean) * rstd the normalised input and g = dout * weight:
    dinp[r,:] += rstd (g - mean(g) - xhat mean(g xhat))     (the means over the row),
    dweight   += sum over the rows of dout * xhat,
    dbias     += sum over the rows of dout,
where mean and rstd (N, fp32) were saved by the forward pass; dout, x, weight, dinp,
dweight and dbias are floatX (bf16 by default, fp32 with -DENABLE_FP32), the arithmetic
fp32. dinp is the residual stream's running gradient: it is added to, not written. The
two column sums over N rows are done without atomics, as in the trainer: each block sums
a chunk of 128 rows into a scratch row of partial sums (chunks, 2C), then
reduce_partials_kernel adds the chunks in order. So every variant is deterministic.
The op is bound by memory: ~10 flops per element against 8 bytes (dout and x read,
dinp read and written, in bf16).

    1: the trainer's three kernels: dinp a warp per row, reading the row
       twice; the partial sums a thread per column; the chunks added         — ./dev/cuda/layernorm_backward 1
    2: the same kernels with 16-byte packs (8 bf16 a load), dinp's row held
       in registers between its two passes                                  — ./dev/cuda/layernorm_backward 2
    3: fused: a block per chunk of 128 rows computes dinp and keeps the
       dweight and dbias sums of its lanes' columns in registers; dout and x
       leave memory once, not twice (then the trainer's reduce)              — ./dev/cuda/layernorm_backward 3
(In fp32 the pack holds 4 values.) 2 and 3 need C % PACK == 0, and hold a lane's part of
a row (2) or of the column sums (3) in registers: C <= 2048. Bytes that move in bf16, per
element: 1 reads dout and x twice (once for dinp, once for the sums: 100 MB per tensor at
GPT-2 small's B*T*C, far more than the 50 MB of L2, so from memory twice), 12 bytes in
all; 3 reads them once, 8 bytes, plus the scratch (2% of that).

main checks every variant at 5 block sizes (64 to 1024 threads; a size is skipped where
the kernel has too many registers to launch that many) against a CPU reference in
double, on fresh random inputs, at N x C = 8192 x 768, 8191 x 1600, 8192 x 67 and 37 x 256
(a last chunk of 127 or 37 rows); every 8th row of x is nearly constant (rstd ~300, as
the forward pass gives it). dinp, dweight and dbias start with random values, since the
kernels add to them. Then it times each variant and block size at N = 64K, C = 768 and
C = 1600 (warm-up, CUDA events, median of 20 calls) and prints ms, GB/s and % of the
H200's 4.8 TB/s. It ends with "N passed, M failed" and exits non-zero if a check failed.
TODO: the H200 timings. Written on a machine without a GPU; so far only the emulator has
run its checks.

    nvcc -O3 -DENABLE_BF16 -gencode arch=compute_90,code=sm_90 dev/cuda/layernorm_backward.cu -o dev/cuda/layernorm_backward
    ./dev/cuda/layernorm_backward        (N: one variant, -c checks only, -s SEED, -h all flags)
Without a GPU, the CPU emulator runs the checks of all three variants at small sizes
(-DENABLE_FP32 instead for fp32):
    bash dev/emu/emu_build.sh dev/cuda/layernorm_backward.cu dev/emu/layernorm_backward_cpu -DENABLE_BF16
    ./dev/emu/layernorm_backward_cpu -c

Left out, for later: keeping weight in registers across a chunk's rows (3 reads it from
L1 for every row), a last-block-done reduction in place of the separate reduce kernels,
and fusing the residual stream's add (what llm.c did next).
*/
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>
#include "common.h"    // cudaCheck, rng_uniform, ceil_div, warp_sum, parse_args, require_gpu, time_median_ms
#include "precision.h" // floatX (bf16 unless -DENABLE_FP32), to_float, from_float, Pack of PACK floatX

// ----------------------------------------------------------------------------
// the CPU reference, in double, from the same floatX inputs and fp32 mean and rstd.
// Writes the increments only (dx (N, C), dw and db (C)), and for the tolerances the
// row sums of |g| and |g xhat| (N) and the column sums of |dout xhat| and |dout| (C).

static void layernorm_backward_cpu(double *dx, double *dw, double *db, double *g_abs, double *gx_abs, double *dw_abs,
                                   double *db_abs, const floatX *dout, const floatX *inp, const floatX *weight,
                                   const float *mean, const float *rstd, int N, int C) {
    for (size_t r = 0; r < (size_t)N; r++) {
        const floatX *dy = dout + r * C, *x = inp + r * C;
        double m = mean[r], s = rstd[r], g_mean = 0.0, gx_mean = 0.0;
        g_abs[r] = gx_abs[r] = 0.0;
        for (int i = 0; i < C; i++) {
            double d = to_float(dy[i]), xhat = (to_float(x[i]) - m) * s, g = d * to_float(weight[i]);
            g_mean += g / C;
            gx_mean += g * xhat / C;
            g_abs[r] += fabs(g);
            gx_abs[r] += fabs(g * xhat);
            dw[i] += d * xhat;
            db[i] += d;
            dw_abs[i] += fabs(d * xhat);
            db_abs[i] += fabs(d);
        }
        for (int i = 0; i < C; i++) {
            double xhat = (to_float(x[i]) - m) * s;
            dx[r * C + i] = s * (to_float(dy[i]) * to_float(weight[i]) - g_mean - xhat * gx_mean);
        }
    }
}

// ----------------------------------------------------------------------------
// the kernels, slowest first (warp_sum is train_gpt2.cu's, in common.h)

// --- shared-copy of train_gpt2.cu: ROWS_PER_CHUNK ---
#define ROWS_PER_CHUNK 128 // rows summed by one block into one row of partial sums, as in the trainer
#define MAX_C 2048         // widest row variants 2 and 3 hold in registers

// 1: train_gpt2.cu's layernorm_backward_kernel, layernorm_param_partials_kernel and
// reduce_partials_kernel, verbatim but for the names of the first two (their comments:)
// dinp += rstd (g - mean(g) - xhat mean(g xhat)), g = dout * weight; a warp per position
// Each lane reads 2 bytes at a time (bf16), and reads its part of dout, x and weight
// twice: once for the two sums, once for dinp (the second time mostly from L1).
// --- shared-copy of train_gpt2.cu: layernorm_backward_kernel (as layernorm_backward_kernel1) ---
__global__ void layernorm_backward_kernel1(floatX *dinp, const floatX *dout, const floatX *inp, const floatX *weight,
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
// (the chunks run along grid.x, which has room for 2^31 of them; grid.y only 65535)
// A thread per column walks 128 rows: a warp reads 64 contiguous bytes of a row each
// step, and dout and x come from memory a second time (the dinp kernel read them).
// --- shared-copy of train_gpt2.cu: layernorm_param_partials_kernel (as layernorm_param_partials_kernel1) ---
__global__ void layernorm_param_partials_kernel1(float *partial, const floatX *dout, const floatX *inp, const float *mean,
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

// out[c] += sum over chunks of partial[chunk * stride + c], in chunk order
// --- shared-copy of train_gpt2.cu: reduce_partials_kernel ---
__global__ void reduce_partials_kernel(floatX *out, const float *partial, int chunks, int cols, int stride) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) { return; }
    float sum = 0.0f;
    for (int k = 0; k < chunks; k++) { sum += partial[(size_t)k * stride + c]; }
    out[c] = from_float(to_float(out[c]) + sum);
}

// PACK fp32 sums, stored 16 bytes at a time (rows of partial are 16-byte aligned: C % PACK == 0)
struct alignas(16) Float4 {
    float v[4];
};
__device__ inline void store_floats(float *dst, const float *src) {
    for (int h = 0; h < PACK / 4; h++) {
        Float4 f;
        for (int j = 0; j < 4; j++) { f.v[j] = src[4 * h + j]; }
        ((Float4 *)dst)[h] = f;
    }
}

// 2: dinp a warp per row as in 1, but lane l moves whole 16-byte packs (l, l + 32, ...)
// and keeps g and xhat of its packs in registers: dout, x and weight are read once per
// row, with 8x fewer load instructions, and a lane issues all its loads (PPL packs of
// each, a compile-time count) before the first sum waits on one. Padding packs (past
// the row) load as zeros, so g = 0 there and they add nothing to either sum.
template <int PPL>
__global__ void layernorm_backward_kernel2(floatX *dinp, const floatX *dout, const floatX *inp, const floatX *weight,
                                           const float *mean, const float *rstd, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32, P = C / PACK;
    if (row >= N) { return; } // a whole warp leaves together
    const Pack *dy = (const Pack *)(dout + (size_t)row * C), *x = (const Pack *)(inp + (size_t)row * C);
    const Pack *w = (const Pack *)weight;
    float m = mean[row], s = rstd[row], g[PPL][PACK], xhat[PPL][PACK], g_sum = 0.0f, gx_sum = 0.0f;
#pragma unroll
    for (int k = 0; k < PPL; k++) {
        Pack dyp = {}, xp = {}, wp = {};
        if (lane + 32 * k < P) { dyp = dy[lane + 32 * k]; xp = x[lane + 32 * k]; wp = w[lane + 32 * k]; }
        for (int j = 0; j < PACK; j++) {
            g[k][j] = to_float(dyp.v[j]) * to_float(wp.v[j]);
            xhat[k][j] = (to_float(xp.v[j]) - m) * s;
            g_sum += g[k][j];
            gx_sum += g[k][j] * xhat[k][j];
        }
    }
    float g_mean = warp_sum(g_sum) / C, gx_mean = warp_sum(gx_sum) / C;
    Pack *dx = (Pack *)(dinp + (size_t)row * C);
#pragma unroll
    for (int k = 0; k < PPL; k++) {
        int p = lane + 32 * k;
        if (p >= P) { continue; }
        Pack d = dx[p];
        for (int j = 0; j < PACK; j++) {
            d.v[j] = from_float(to_float(d.v[j]) + s * (g[k][j] - g_mean - xhat[k][j] * gx_mean));
        }
        dx[p] = d;
    }
}

// 2's partial sums: a thread per 16-byte pack of columns, 128 rows, 4 rows' loads in
// flight (the loop unrolled 4 times; each column's sum still runs in row order). At C =
// 768 in bf16 a row is 96 packs: grid.y is ceil(96 / block), blocks over 96 threads idle.
__global__ void layernorm_param_partials_kernel2(float *partial, const floatX *dout, const floatX *inp, const float *mean,
                                                 const float *rstd, int N, int C) {
    int p = blockIdx.y * blockDim.x + threadIdx.x, chunk = blockIdx.x;
    if (p >= C / PACK) { return; }
    float dw[PACK] = {}, db[PACK] = {};
    int end = min(N, (chunk + 1) * ROWS_PER_CHUNK);
#pragma unroll 4
    for (int r = chunk * ROWS_PER_CHUNK; r < end; r++) {
        Pack dy = ((const Pack *)(dout + (size_t)r * C))[p], x = ((const Pack *)(inp + (size_t)r * C))[p];
        float m = mean[r], s = rstd[r];
        for (int j = 0; j < PACK; j++) {
            float d = to_float(dy.v[j]);
            dw[j] += d * (to_float(x.v[j]) - m) * s;
            db[j] += d;
        }
    }
    store_floats(partial + (size_t)chunk * 2 * C + (size_t)p * PACK, dw);
    store_floats(partial + (size_t)chunk * 2 * C + C + (size_t)p * PACK, db);
}

// 3: dinp and the partial sums in one kernel, a block per chunk of 128 rows. Warp w takes
// the rows w, w + W, ... of the chunk (W warps a block), a row at a time as in 2 (packs,
// two warp sums), and on the way adds dout xhat and dout into the sums of its lanes'
// columns, held in registers across the rows: 2 PPL PACK floats a lane, 48 at C = 768
// in bf16, 112 at C = 1600 (ptxas, sm_90: 95 and 163 registers a thread in all, so at
// most 512 and 256 threads a block). So dout and x leave memory once in all; the dinp
// pass reads them again from L1, where this warp has just put them. At the end the
// warps' sums meet in shared memory, added in warp order (W barriers, once per 128
// rows), and the block writes its chunk's row of partial. The order of every sum is
// fixed by the block size: the same bits every run.
template <int PPL>
__global__ void layernorm_backward_kernel3(floatX *dinp, float *partial, const floatX *dout, const floatX *inp,
                                           const floatX *weight, const float *mean, const float *rstd, int N, int C) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, W = blockDim.x / 32, P = C / PACK, chunk = blockIdx.x;
    int end = min(N, (chunk + 1) * ROWS_PER_CHUNK);
    const Pack *w = (const Pack *)weight;
    float dw[PPL][PACK] = {}, db[PPL][PACK] = {};
    for (int row = chunk * ROWS_PER_CHUNK + warp; row < end; row += W) { // the same row for the whole warp
        const Pack *dy = (const Pack *)(dout + (size_t)row * C), *x = (const Pack *)(inp + (size_t)row * C);
        float m = mean[row], s = rstd[row], g_sum = 0.0f, gx_sum = 0.0f;
#pragma unroll
        for (int k = 0; k < PPL; k++) {
            int p = lane + 32 * k;
            if (p >= P) { continue; }
            Pack dyp = dy[p], xp = x[p], wp = w[p];
            for (int j = 0; j < PACK; j++) {
                float d = to_float(dyp.v[j]), xhat = (to_float(xp.v[j]) - m) * s, g = d * to_float(wp.v[j]);
                g_sum += g;
                gx_sum += g * xhat;
                dw[k][j] += d * xhat;
                db[k][j] += d;
            }
        }
        float g_mean = warp_sum(g_sum) / C, gx_mean = warp_sum(gx_sum) / C;
        Pack *dx = (Pack *)(dinp + (size_t)row * C);
#pragma unroll
        for (int k = 0; k < PPL; k++) {
            int p = lane + 32 * k;
            if (p >= P) { continue; }
            Pack dyp = dy[p], xp = x[p], wp = w[p], d = dx[p]; // dy, x and w again: L1 hits
            for (int j = 0; j < PACK; j++) {
                float xhat = (to_float(xp.v[j]) - m) * s, g = to_float(dyp.v[j]) * to_float(wp.v[j]);
                d.v[j] = from_float(to_float(d.v[j]) + s * (g - g_mean - xhat * gx_mean));
            }
            dx[p] = d;
        }
    }
    // the warps' column sums, added in warp order: warp 0 writes, then 1 adds, ...
    __shared__ float acc[2][PPL * 32 * PACK];
    for (int v = 0; v < W; v++) {
        if (warp == v) {
#pragma unroll
            for (int k = 0; k < PPL; k++) {
                int c0 = (lane + 32 * k) * PACK;
                if (c0 >= C) { continue; }
                for (int j = 0; j < PACK; j++) {
                    acc[0][c0 + j] = (v == 0 ? 0.0f : acc[0][c0 + j]) + dw[k][j];
                    acc[1][c0 + j] = (v == 0 ? 0.0f : acc[1][c0 + j]) + db[k][j];
                }
            }
        }
        __syncthreads();
    }
    float *out = partial + (size_t)chunk * 2 * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        out[c] = acc[0][c];
        out[C + c] = acc[1][c];
    }
}

// ----------------------------------------------------------------------------
// the launcher: variant and block size first, then layernorm_backward's own arguments;
// every kernel of a variant runs with `block` threads, as the trainer's all use BLOCK

static const char *variant_names[4] = {"", "1 trainer (3 kernels)", "2 16-byte packs", "3 fused, sums in regs"};
typedef void (*dinp_kernel)(floatX *, const floatX *, const floatX *, const floatX *, const float *, const float *, int,
                            int);
typedef void (*fused_kernel)(floatX *, float *, const floatX *, const floatX *, const floatX *, const float *,
                             const float *, int, int);

// Why variant v cannot take rows of C channels, or NULL if it can
static const char *unsupported(int variant, int C) {
    if (variant >= 2 && C % PACK != 0) { return PACK == 8 ? "needs C % 8 == 0" : "needs C % 4 == 0"; }
    if (variant >= 2 && C > MAX_C) { return "C > 2048 does not fit in registers"; }
    return NULL;
}

// The fewest packs a lane that hold a row of C channels, from the sizes compiled: 3, 6, 7
// and 13 fit GPT-2 small (C = 768) and XL (1600) exactly in bf16 and in fp32. Only sizes up
// to MAX_C's are compiled: 8 packs a lane in bf16, 16 in fp32 (a bf16 instance of 16 would
// never run, and spills: the build refuses kernels that spill). Kernels are picked as
// pointers, so that one launch line serves all template instances.
constexpr int MAX_PPL = MAX_C / PACK / 32;
static int packs_per_lane(int C) {
    int need = (int)ceil_div(C / PACK, 32);
    const int sizes[] = {1, 2, 3, 4, 6, 7, 8, 13, 16};
    for (int s : sizes) {
        if (need <= s) { return s; }
    }
    return 16;
}
template <int PPL> static dinp_kernel kernel2_of() {
    if constexpr (PPL <= MAX_PPL) { return layernorm_backward_kernel2<PPL>; } else { return nullptr; }
}
template <int PPL> static fused_kernel kernel3_of() {
    if constexpr (PPL <= MAX_PPL) { return layernorm_backward_kernel3<PPL>; } else { return nullptr; }
}
#define PICK(of, ppl)                                                                                                  \
    ((ppl) == 1 ? of<1>() : (ppl) == 2 ? of<2>() : (ppl) == 3 ? of<3>() : (ppl) == 4 ? of<4>() : (ppl) == 6 ? of<6>() \
     : (ppl) == 7 ? of<7>() : (ppl) == 8 ? of<8>() : (ppl) == 13 ? of<13>() : of<16>())
static dinp_kernel kernel2_for(int C) { return PICK(kernel2_of, packs_per_lane(C)); }
static fused_kernel kernel3_for(int C) { return PICK(kernel3_of, packs_per_lane(C)); }

// Whether a block of `block` threads can run variant v's register-hungry kernel. An SM
// has 64K registers, so a 1024-thread block allows 64 a thread; in bf16 at C = 768 both 2
// and 3 need more (71 and 95), at C = 1600 over 150, and run at 256 threads at most. The
// emulator has no register file: there every size fits.
static int block_fits(int variant, int block, int C) {
#ifdef CUDA_EMU_H
    (void)variant, (void)block, (void)C;
    return 1;
#else
    cudaFuncAttributes attr;
    if (variant == 1) { return 1; }
    if (variant == 2) { cudaCheck(cudaFuncGetAttributes(&attr, kernel2_for(C))); }
    if (variant == 3) { cudaCheck(cudaFuncGetAttributes(&attr, kernel3_for(C))); }
    return block <= attr.maxThreadsPerBlock;
#endif
}

// partial: (ceil(N / 128), 2C) floats of scratch, as the trainer's reduce_scratch
static void layernorm_backward(int variant, int block, floatX *dinp, floatX *dweight, floatX *dbias, float *partial,
                               const floatX *dout, const floatX *inp, const floatX *weight, const float *mean,
                               const float *rstd, int N, int C) {
    int chunks = (int)ceil_div(N, ROWS_PER_CHUNK);
    dinp_kernel k2 = kernel2_for(C);
    fused_kernel k3 = kernel3_for(C);
    switch (variant) {
    case 1:
        layernorm_backward_kernel1<<<ceil_div(N, block / 32), block>>>(dinp, dout, inp, weight, mean, rstd, N, C);
        cudaCheck(cudaGetLastError());
        layernorm_param_partials_kernel1<<<dim3(chunks, ceil_div(C, block)), block>>>(partial, dout, inp, mean, rstd, N, C);
        break;
    case 2:
        k2<<<ceil_div(N, block / 32), block>>>(dinp, dout, inp, weight, mean, rstd, N, C);
        cudaCheck(cudaGetLastError());
        layernorm_param_partials_kernel2<<<dim3(chunks, ceil_div(C / PACK, block)), block>>>(partial, dout, inp, mean,
                                                                                             rstd, N, C);
        break;
    case 3: k3<<<chunks, block>>>(dinp, partial, dout, inp, weight, mean, rstd, N, C); break;
    default: fprintf(stderr, "Error: no variant %d\n", variant); exit(EXIT_FAILURE);
    }
    cudaCheck(cudaGetLastError());
    reduce_partials_kernel<<<ceil_div(C, block), block>>>(dweight, partial, chunks, C, 2 * C);
    cudaCheck(cudaGetLastError());
    reduce_partials_kernel<<<ceil_div(C, block), block>>>(dbias, partial + C, chunks, C, 2 * C);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// one problem on the device, the checks, the timing

static const int block_sizes[5] = {64, 128, 256, 512, 1024};
static floatX *d_dout, *d_x, *d_w, *d_dinp, *d_dw, *d_db; // (N, C) x 2, (C), (N, C), (C), (C)
static float *d_mean, *d_rstd, *d_partial;                // (N), (N), (chunks, 2C)

struct Problem {
    std::vector<floatX> dout, x, w, dinp, dw, db; // dinp, dw, db: the values before the call
    std::vector<float> mean, rstd;
};

// Fresh random inputs, never zeros. Row r of x is offset + scale * uniform, offset in
// [-1, 1), scale in [0.5, 2.5), but every 8th row has scale 1e-3: its rstd is ~300,
// set by eps, as the forward pass gives it. mean and rstd are the forward pass's, in
// double and rounded to fp32. dout and the old dinp, dweight and dbias are uniform in
// [-1, 1), weight in [0.5, 1.5).
static void problem_make(Problem &pb, int N, int C) {
    size_t n = (size_t)N * C;
    pb.dout.resize(n);
    pb.x.resize(n);
    pb.dinp.resize(n);
    pb.w.resize(C);
    pb.dw.resize(C);
    pb.db.resize(C);
    pb.mean.resize(N);
    pb.rstd.resize(N);
    for (size_t r = 0; r < (size_t)N; r++) {
        float offset = rng_uniform(), scale = r % 8 == 7 ? 1e-3f : 1.5f + rng_uniform();
        double m = 0.0, v = 0.0;
        for (int i = 0; i < C; i++) {
            pb.x[r * C + i] = from_float(offset + scale * rng_uniform());
            m += to_float(pb.x[r * C + i]);
        }
        m /= C;
        for (int i = 0; i < C; i++) { v += (to_float(pb.x[r * C + i]) - m) * (to_float(pb.x[r * C + i]) - m); }
        pb.mean[r] = (float)m;
        pb.rstd[r] = (float)(1.0 / sqrt(v / C + 1e-5));
    }
    for (size_t i = 0; i < n; i++) { pb.dout[i] = from_float(rng_uniform()); pb.dinp[i] = from_float(rng_uniform()); }
    for (int i = 0; i < C; i++) {
        pb.w[i] = from_float(1.0f + 0.5f * rng_uniform());
        pb.dw[i] = from_float(rng_uniform());
        pb.db[i] = from_float(rng_uniform());
    }
    for (floatX **p : {&d_dout, &d_x, &d_dinp}) { cudaCheck(cudaMalloc(p, n * sizeof(floatX))); }
    for (floatX **p : {&d_w, &d_dw, &d_db}) { cudaCheck(cudaMalloc(p, C * sizeof(floatX))); }
    cudaCheck(cudaMalloc(&d_mean, N * sizeof(float)));
    cudaCheck(cudaMalloc(&d_rstd, N * sizeof(float)));
    cudaCheck(cudaMalloc(&d_partial, (size_t)ceil_div(N, ROWS_PER_CHUNK) * 2 * C * sizeof(float)));
    cudaCheck(cudaMemcpy(d_dout, pb.dout.data(), n * sizeof(floatX), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_x, pb.x.data(), n * sizeof(floatX), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_w, pb.w.data(), C * sizeof(floatX), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_mean, pb.mean.data(), N * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_rstd, pb.rstd.data(), N * sizeof(float), cudaMemcpyHostToDevice));
}

// the old values of the outputs, before each call (the kernels add to them)
static void outputs_reset(const Problem &pb, int N, int C) {
    cudaCheck(cudaMemcpy(d_dinp, pb.dinp.data(), (size_t)N * C * sizeof(floatX), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_dw, pb.dw.data(), C * sizeof(floatX), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_db, pb.db.data(), C * sizeof(floatX), cudaMemcpyHostToDevice));
}

static void problem_free(void) {
    for (void *p : {(void *)d_dout, (void *)d_x, (void *)d_w, (void *)d_dinp, (void *)d_dw, (void *)d_db, (void *)d_mean,
                    (void *)d_rstd, (void *)d_partial}) {
        cudaCheck(cudaFree(p));
    }
}

// Tolerances, all in one place. A sum in fp32 is within (longest chain of additions)
// u sum|x_i| of the exact one, u = 2^-24 (Higham, Accuracy and Stability of Numerical
// Algorithms, 2nd ed., chapter 4); we use U = FLT_EPSILON = 2^-23, twice u.
//   dinp: the row sums run in chains of at most C / 32 per lane (PPL PACK in 2 and 3, the
//     same count), then 5 levels of shuffles: K = C / 32 + 16. So mean(g) is off by up
//     to K U sum|g| / C, mean(g xhat) by (K + 3) U sum|g xhat| / C (xhat itself is two
//     roundings off), and the increment by rstd (err_g + |xhat| err_gx) plus 4 U of its
//     terms rstd (|g| + |mean(g)| + |xhat mean(g xhat)|); the add to the old value 2 U
//     of |old| + |increment|.
//   dweight, dbias: a chain per chunk of at most 128 rows (in 3: a warp's rows, then up
//     to 32 warps), then one over the chunks: K = 128 + 32 + chunks + 2, and 4 U more
//     per term of dweight for the products; U |old| for the final add.
//   Then, for all three, OUT_ROUND of the value for the rounding to floatX: bf16 keeps
//     8 significant bits, so rounding to nearest moves a value by at most 2^-8 of itself;
//     we allow twice that, so that rounding alone reads as at most ~0.5 of the tolerance.
// A bug (a row or a column missed, a wrong rstd, the old value overwritten) is off by
// far more: the increments are ~1, and their sums over rows ~sqrt(N).
#ifdef ENABLE_FP32
#define OUT_ROUND 0.0
#else
#define OUT_ROUND 0x1p-7
#endif
static int num_passed = 0, num_failed = 0;

struct Reference {
    std::vector<double> dx, dw, db, g_abs, gx_abs, dw_abs, db_abs;
};

// Runs variant v at every block size it fits, the outputs reset to their old values
// and the scratch to NaN before each run, and compares dinp, dweight and dbias whole.
// One line: the largest absolute errors, the worst error as a fraction of its tolerance
// (<= 1 passes; NaN fails), OK or NOT OK.
static void check_variant(int v, const Problem &pb, const Reference &ref, int N, int C) {
    printf("%5d x %4d  %-22s ", N, C, variant_names[v]);
    if (unsupported(v, C)) { printf("skipped: %s\n", unsupported(v, C)); return; }
    size_t n = (size_t)N * C;
    int chunks = (int)ceil_div(N, ROWS_PER_CHUNK);
    std::vector<floatX> dinp(n), dw(C), db(C);
    double max_err[3] = {0.0, 0.0, 0.0}, worst = 0.0;
    char where[200] = "", blocks[40] = "";
    for (int block : block_sizes) {
        if (!block_fits(v, block, C)) { continue; }
        snprintf(blocks + strlen(blocks), sizeof(blocks) - strlen(blocks), "%s%d", blocks[0] ? "," : "", block);
        outputs_reset(pb, N, C);
        cudaCheck(cudaMemset(d_partial, 0xFF, (size_t)chunks * 2 * C * sizeof(float))); // NaN: an unwritten sum shows
        layernorm_backward(v, block, d_dinp, d_dw, d_db, d_partial, d_dout, d_x, d_w, d_mean, d_rstd, N, C);
        cudaCheck(cudaMemcpy(dinp.data(), d_dinp, n * sizeof(floatX), cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(dw.data(), d_dw, C * sizeof(floatX), cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(db.data(), d_db, C * sizeof(floatX), cudaMemcpyDeviceToHost));
        // one (got, old, increment, fp32 tolerance) per output element
        auto look = [&](const char *name, size_t i, floatX got, floatX old, double inc, double tol32, int which) {
            double want = to_float(old) + inc, tol = (1 + OUT_ROUND) * tol32 + OUT_ROUND * fabs(want);
            double err = fabs(to_float(got) - want), ratio = std::isnan(err) ? INFINITY : err == 0.0 ? 0.0 : err / tol;
            max_err[which] = std::isnan(err) ? INFINITY : fmax(max_err[which], err);
            if (ratio > worst) {
                worst = ratio;
                snprintf(where, sizeof(where), "block %d: %s[%zu] = %.7g, expected %.7g (old %.7g), tolerance %.2g", block,
                         name, i, to_float(got), want, to_float(old), tol);
            }
        };
        double K = C / 32.0 + 16, U = FLT_EPSILON;
        for (size_t r = 0; r < (size_t)N; r++) {
            double m = pb.mean[r], s = pb.rstd[r], g_mean = 0.0, gx_mean = 0.0;
            for (int i = 0; i < C; i++) { // the row's means again, for the tolerance's terms
                double xhat = (to_float(pb.x[r * C + i]) - m) * s, g = to_float(pb.dout[r * C + i]) * to_float(pb.w[i]);
                g_mean += g / C;
                gx_mean += g * xhat / C;
            }
            double err_g = K * U * ref.g_abs[r] / C, err_gx = (K + 3) * U * ref.gx_abs[r] / C;
            for (int i = 0; i < C; i++) {
                size_t e = r * C + i;
                double xhat = (to_float(pb.x[e]) - m) * s, g = to_float(pb.dout[e]) * to_float(pb.w[i]);
                double tol32 = s * (err_g + fabs(xhat) * err_gx)
                             + 4 * U * s * (fabs(g) + fabs(g_mean) + fabs(xhat * gx_mean))
                             + 2 * U * (fabs(to_float(pb.dinp[e])) + fabs(ref.dx[e]));
                look("dinp", e, dinp[e], pb.dinp[e], ref.dx[e], tol32, 0);
            }
        }
        double Kw = ROWS_PER_CHUNK + 32 + chunks + 2;
        for (int i = 0; i < C; i++) {
            look("dweight", i, dw[i], pb.dw[i], ref.dw[i], (Kw + 4) * U * ref.dw_abs[i] + U * fabs(to_float(pb.dw[i])), 1);
            look("dbias", i, db[i], pb.db[i], ref.db[i], Kw * U * ref.db_abs[i] + U * fabs(to_float(pb.db[i])), 2);
        }
    }
    int ok = worst <= 1.0;
    printf("blocks %-19s max err dinp %.1e dw %.1e db %.1e, worst %.2f of tol  %s\n", blocks, max_err[0], max_err[1],
           max_err[2], worst, ok ? "OK" : "NOT OK");
    if (!ok) { printf("    worst at %s\n", where); }
    if (ok) { num_passed++; } else { num_failed++; }
}

#ifndef CUDA_EMU_H
#define PEAK_GBS 4800.0 // H200 (HBM3e), NVIDIA's figure; on another GPU the % is still of this
#endif

// ----------------------------------------------------------------------------

static void usage(void) {
    printf("usage: layernorm_backward [N] [-v N] [-c] [-s SEED] [-h]\n"
           "  N, -v N  only variant N, checked and then timed (default: all of 1-3)\n"
           "           1 trainer's kernels, 2 16-byte packs, 3 fused dinp and column sums\n"
           LADDER_COMMON_FLAGS);
}

int main(int argc, char **argv) {
    LadderArgs args = parse_args(argc, argv, 3, 1, usage); // variants 1-3, also as a plain N
    rng_state = args.seed;
    int first = args.only ? args.only : 1, last = args.only ? args.only : 3;
#ifdef CUDA_EMU_H
    // On the CPU every thread of a block is a fiber: small sizes only (but several
    // chunks, the last one partial), and no timing
    const int shapes[][2] = {{300, 768}, {130, 1600}, {37, 67}, {37, 256}};
    printf("CPU emulation (dev/emu), %s: checks at small sizes, no timing; seed %llu\n", PRECISION_NAME, args.seed);
#else
    const int shapes[][2] = {{8192, 768}, {8191, 1600}, {8192, 67}, {37, 256}};
    require_gpu("runs the checks: bash dev/emu/emu_build.sh dev/cuda/layernorm_backward.cu /tmp/lnb_cpu && "
                "/tmp/lnb_cpu -c", PRECISION_NAME, args.seed);
#endif

    // 1. correctness, every variant at every shape and block size, before any timing
    for (const int *shape : shapes) {
        int N = shape[0], C = shape[1];
        Problem pb;
        problem_make(pb, N, C);
        Reference ref;
        ref.dx.assign((size_t)N * C, 0.0);
        ref.g_abs.assign(N, 0.0);
        ref.gx_abs.assign(N, 0.0);
        for (std::vector<double> *col : {&ref.dw, &ref.db, &ref.dw_abs, &ref.db_abs}) { col->assign(C, 0.0); }
        layernorm_backward_cpu(ref.dx.data(), ref.dw.data(), ref.db.data(), ref.g_abs.data(), ref.gx_abs.data(),
                               ref.dw_abs.data(), ref.db_abs.data(), pb.dout.data(), pb.x.data(), pb.w.data(),
                               pb.mean.data(), pb.rstd.data(), N, C);
        for (int v = first; v <= last; v++) { check_variant(v, pb, ref, N, C); }
        problem_free();
    }

#ifndef CUDA_EMU_H
    // 2. timing. The bytes that must move: dout and x read once, dinp read and written,
    // mean and rstd read; weight and the parameter gradients are C-sized, and the scratch
    // (2% of the rest) is not counted. Variants 1 and 2 read dout and x a second time,
    // which the count leaves out: GB/s compares the variants' times, and is 3's true rate.
    if (!args.check_only) {
        const int N = 64 * 1024;
        printf("\nN = %d rows; ms at each block size: median of 20 calls after a warm-up (-: too many registers\n"
               "for a block that size); GB/s and %% of the H200's 4.8 TB/s at the best block size\n", N);
        printf("%4s  %-22s %8s %8s %8s %8s %8s %8s %8s\n", "C", "variant", "64", "128", "256", "512", "1024", "GB/s", "% peak");
        for (int C : {768, 1600}) {
            Problem pb;
            problem_make(pb, N, C);
            outputs_reset(pb, N, C);
            double bytes = 4.0 * N * C * sizeof(floatX) + 2.0 * N * sizeof(float);
            for (int v = first; v <= last; v++) {
                printf("%4d  %-22s ", C, variant_names[v]);
                if (unsupported(v, C)) { printf("skipped: %s\n", unsupported(v, C)); continue; }
                float best = INFINITY;
                for (int block : block_sizes) {
                    if (!block_fits(v, block, C)) { printf("%8s ", "-"); continue; }
                    float ms = time_median_ms([&] {
                        layernorm_backward(v, block, d_dinp, d_dw, d_db, d_partial, d_dout, d_x, d_w, d_mean, d_rstd, N, C);
                    });
                    best = std::min(best, ms);
                    printf("%8.4f ", ms);
                }
                double gbs = bytes / (best * 1e-3) / 1e9;
                printf("%8.0f %7.1f%%\n", gbs, 100.0 * gbs / PEAK_GBS);
            }
            problem_free();
        }
    }
#endif
    printf("%d passed, %d failed\n", num_passed, num_failed);
    return num_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
