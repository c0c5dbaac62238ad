/*
layernorm_forward.cu: the kernel ladder for LayerNorm's forward pass as train_gpt2.cu
uses it. Each of the N rows of C channels (N = B*T positions) is normalised:
    out = (x - mean) * rstd * weight + bias,   rstd = 1 / sqrt(var + 1e-5),
with the biased variance (divided by C), found in two passes (the mean first, then
the squared deviations from it) as in train_gpt2.c. x, weight, bias and out are
floatX (bf16 by default, fp32 with -DENABLE_FP32), mean and rstd (N) fp32, and all
arithmetic is fp32. LayerNorm does about 8 flops per element, 4 bytes moved in bf16,
where an H200 needs ~14 flops per byte to run out of arithmetic before bandwidth: it is
limited by memory, and every rung is about moving fewer bytes, or moving them better.

    1: the trainer's kernel: a warp per row, reading the row three times       — ./dev/cuda/layernorm_forward 1
    2: a warp per row, the row read once into registers and reused              — ./dev/cuda/layernorm_forward 2
    3: as 2 with 16-byte loads and stores (8 bf16 at once; C % 8 == 0)          — ./dev/cuda/layernorm_forward 3
    4: a block per row, 16-byte loads, block-wide sums (for wide rows, C % 8)   — ./dev/cuda/layernorm_forward 4
(In fp32 the 16-byte pack holds 4 values, and 3 and 4 need C % 4 == 0.) Variants 2-4
keep the row in registers, so they take C <= 2048 (GPT-2 XL has 1600).

main checks every variant at 5 block sizes (64 to 1024 threads; a size is skipped
where the kernel has too many registers to launch that many) against a CPU reference
in double, on fresh random inputs, with N x C = 8192 x 768, 8191 x 1600, 8192 x 67 and
37 x 256; every 8th row is nearly constant, so that its variance is far below eps and a
wrong eps shows. Then it times each variant and block size at N = 64K, C = 768 and
C = 1600 (warm-up, CUDA events, median of 20 calls) and prints ms, GB/s and % of the
H200's 4.8 TB/s. It ends with "N passed, M failed" and exits non-zero if a check
failed. No variant uses atomics: every run gives the same bits.
TODO: the H200 timings. This file was written on a machine without a GPU; so far only
the emulator has run its checks.

    nvcc -O3 -DENABLE_BF16 -gencode arch=compute_90,code=sm_90 dev/cuda/layernorm_forward.cu -o dev/cuda/layernorm_forward
    ./dev/cuda/layernorm_forward        (N: one variant, -c checks only, -s SEED, -h all flags)
Without a GPU, the CPU emulator runs the checks of all four variants at small sizes:
    bash dev/emu/emu_build.sh dev/cuda/layernorm_forward.cu /tmp/lnf_cpu && /tmp/lnf_cpu -c

Left out, for later: cache hints for the streamed x and out (__ldcs/__stcs), keeping
weight and bias in shared memory across several rows per block, fusing the residual
add in front of LayerNorm (what llm.c did next).
*/
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>
#include "common.h"    // cudaCheck, rng_uniform, ceil_div, warp_sum, block_sum, parse_args, require_gpu, time_median_ms
#include "precision.h" // floatX (bf16 unless -DENABLE_FP32), to_float, from_float, Pack of PACK floatX

// ----------------------------------------------------------------------------
// the CPU reference: two passes in double, as train_gpt2.c does them in float

static void layernorm_forward_cpu(double *out, double *mean, double *rstd, const floatX *inp, const floatX *weight,
                                  const floatX *bias, int N, int C) {
    for (size_t r = 0; r < (size_t)N; r++) {
        const floatX *x = inp + r * C;
        double m = 0.0, v = 0.0;
        for (int i = 0; i < C; i++) { m += to_float(x[i]); }
        m /= C;
        for (int i = 0; i < C; i++) { v += (to_float(x[i]) - m) * (to_float(x[i]) - m); }
        double s = 1.0 / sqrt(v / C + 1e-5);
        for (int i = 0; i < C; i++) { out[r * C + i] = (to_float(x[i]) - m) * s * to_float(weight[i]) + to_float(bias[i]); }
        mean[r] = m;
        rstd[r] = s;
    }
}

// ----------------------------------------------------------------------------
// the kernels, slowest first (the reductions warp_sum and block_sum are train_gpt2.cu's,
// in common.h)

#define MAX_C 2048 // widest row variants 2-4 hold in registers

// 1: train_gpt2.cu's layernorm_forward_kernel, verbatim. Each lane reads 2 bytes (bf16) at a
// time, 32 lanes 64 contiguous bytes: coalesced, but small requests, and three passes
// over x in global memory (the 2nd and 3rd mostly hit L1, at a cost in instructions).
// The loops' trip count is known only at run time, so few loads are in flight per lane.
// One warp per position: mean and variance over its C channels (two passes, as
// train_gpt2.c), then the normalised, scaled and shifted output.
// --- shared-copy of train_gpt2.cu: layernorm_forward_kernel (as layernorm_forward_kernel1) ---
__global__ void layernorm_forward_kernel1(floatX *out, float *mean, float *rstd, const floatX *inp, const floatX *weight,
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

// 2: the same warp per row, but each lane keeps its VPT values of the row (channels
// lane, lane + 32, ...) in registers: x leaves global memory once, and the variance and
// output passes read registers. With VPT a compile-time constant the first loop
// unrolls, so a lane issues all VPT loads before its first add waits on one: many more
// bytes in flight per SM, which is what a bandwidth-bound kernel needs (Little's law:
// ~4.8 TB/s times ~0.6 us of latency is ~3 MB that must be in flight across the GPU).
// The price is registers: at C = 768 (VPT = 24) ptxas reports 68 a thread, so 28 of an
// SM's 64 warps fit (1 needs 32, all 64 fit). Extra slots (VPT > C / 32) cost registers only.
template <int VPT>
__global__ void layernorm_forward_kernel2(floatX *out, float *mean, float *rstd, const floatX *inp, const floatX *weight,
                                          const floatX *bias, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) { return; } // a whole warp leaves together
    const floatX *x = inp + (size_t)row * C;
    float v[VPT]; // indices known at compile time after unrolling: these stay in registers
    float m = 0.0f;
#pragma unroll
    for (int k = 0; k < VPT; k++) {
        int i = lane + 32 * k;
        v[k] = i < C ? to_float(x[i]) : 0.0f; // the zeros add nothing to the mean
        m += v[k];
    }
    m = warp_sum(m) / C;
    float var = 0.0f;
#pragma unroll
    for (int k = 0; k < VPT; k++) {
        float d = lane + 32 * k < C ? v[k] - m : 0.0f; // but would add m^2 here
        var += d * d;
    }
    float s = 1.0f / sqrtf(warp_sum(var) / C + 1e-5f);
    floatX *o = out + (size_t)row * C;
#pragma unroll
    for (int k = 0; k < VPT; k++) {
        int i = lane + 32 * k;
        if (i < C) { o[i] = from_float((v[k] - m) * s * to_float(weight[i]) + to_float(bias[i])); }
    }
    if (lane == 0) { mean[row] = m; rstd[row] = s; }
}

// 3: as 2, but lane l moves whole 16-byte packs (pack l, l + 32, ...): one instruction
// loads 8 bf16 where 2 issued 8, and a warp's load covers 512 contiguous bytes. So 8x
// fewer load and store instructions, and requests, for the same bytes: less work for the
// load/store units and the memory pipeline, more bytes in flight per request. Holding a
// pack as 8 floats also needs fewer registers than 2's scalar bookkeeping (48 a thread
// at C = 768). Needs C % PACK == 0, so that every row starts 16-byte aligned (cudaMalloc
// aligns the start to 256 bytes).
template <int PPL>
__global__ void layernorm_forward_kernel3(floatX *out, float *mean, float *rstd, const floatX *inp, const floatX *weight,
                                          const floatX *bias, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) { return; }
    int P = C / PACK; // packs per row
    const Pack *x = (const Pack *)(inp + (size_t)row * C);
    float v[PPL][PACK];
    float m = 0.0f;
#pragma unroll
    for (int k = 0; k < PPL; k++) {
        Pack xp = {};
        if (lane + 32 * k < P) { xp = x[lane + 32 * k]; }
        for (int j = 0; j < PACK; j++) { v[k][j] = to_float(xp.v[j]); m += v[k][j]; }
    }
    m = warp_sum(m) / C;
    float var = 0.0f;
#pragma unroll
    for (int k = 0; k < PPL; k++) {
        if (lane + 32 * k >= P) { continue; } // padding: not part of the row
        for (int j = 0; j < PACK; j++) { float d = v[k][j] - m; var += d * d; }
    }
    float s = 1.0f / sqrtf(warp_sum(var) / C + 1e-5f);
    Pack *o = (Pack *)(out + (size_t)row * C);
    // weight and bias are the same for every row: these loads hit L1 or L2, not memory
    const Pack *w = (const Pack *)weight, *b = (const Pack *)bias;
#pragma unroll
    for (int k = 0; k < PPL; k++) {
        int p = lane + 32 * k;
        if (p >= P) { continue; }
        Pack wp = w[p], bp = b[p], op;
        for (int j = 0; j < PACK; j++) { op.v[j] = from_float((v[k][j] - m) * s * to_float(wp.v[j]) + to_float(bp.v[j])); }
        o[p] = op;
    }
    if (lane == 0) { mean[row] = m; rstd[row] = s; }
}

// 4: a block per row, 16-byte packs spread over all its threads (pack t, t + blockDim,
// ...), the sums through block_sum (shuffles, then one value per warp in shared memory).
// In 3 a lane of a wide row holds many packs: 7 at C = 1600 in bf16, 93 registers a
// thread, so at most 21 warps fit on an SM; here each thread holds 1 or 2 packs (32-40
// registers) and the whole block loads the row at once. The costs: four __syncthreads
// per row, and threads sit idle unless the block is sized to the row (C / PACK threads).
// It is also the shape for few rows (inference), where a warp per row leaves SMs empty.
template <int PPT>
__global__ void layernorm_forward_kernel4(floatX *out, float *mean, float *rstd, const floatX *inp, const floatX *weight,
                                          const floatX *bias, int N, int C) {
    int row = blockIdx.x, tid = threadIdx.x, P = C / PACK;
    if (row >= N) { return; } // the whole block leaves together, before any barrier
    const Pack *x = (const Pack *)(inp + (size_t)row * C);
    float v[PPT][PACK];
    float m = 0.0f;
#pragma unroll
    for (int k = 0; k < PPT; k++) {
        Pack xp = {};
        if (tid + (int)blockDim.x * k < P) { xp = x[tid + blockDim.x * k]; }
        for (int j = 0; j < PACK; j++) { v[k][j] = to_float(xp.v[j]); m += v[k][j]; }
    }
    m = block_sum(m) / C; // every thread calls it, also those with no pack: it has barriers
    float var = 0.0f;
#pragma unroll
    for (int k = 0; k < PPT; k++) {
        if (tid + (int)blockDim.x * k >= P) { continue; }
        for (int j = 0; j < PACK; j++) { float d = v[k][j] - m; var += d * d; }
    }
    float s = 1.0f / sqrtf(block_sum(var) / C + 1e-5f);
    Pack *o = (Pack *)(out + (size_t)row * C);
    const Pack *w = (const Pack *)weight, *b = (const Pack *)bias;
#pragma unroll
    for (int k = 0; k < PPT; k++) {
        int p = tid + blockDim.x * k;
        if (p >= P) { continue; }
        Pack wp = w[p], bp = b[p], op;
        for (int j = 0; j < PACK; j++) { op.v[j] = from_float((v[k][j] - m) * s * to_float(wp.v[j]) + to_float(bp.v[j])); }
        o[p] = op;
    }
    if (tid == 0) { mean[row] = m; rstd[row] = s; }
}

// ----------------------------------------------------------------------------
// the launcher: variant and block size first, then layernorm_forward's own arguments

static const char *variant_names[5] = {"", "1 trainer (warp/row)", "2 warp/row, registers", "3 warp/row, 16-byte",
                                       "4 block/row, 16-byte"};
typedef void (*layernorm_kernel)(floatX *, float *, float *, const floatX *, const floatX *, const floatX *, int, int);

// Why variant v cannot take rows of C channels, or NULL if it can
static const char *unsupported(int variant, int C) {
    if (variant >= 2 && C > MAX_C) { return "C > 2048 does not fit in registers"; }
    if (variant >= 3 && C % PACK != 0) { return PACK == 8 ? "needs C % 8 == 0" : "needs C % 4 == 0"; }
    return NULL;
}

// The kernel of variant v for rows of C channels and blocks of `block` threads. Kernels
// are picked as pointers, so that one launch line serves all template instances. Each variant takes the smallest register array that
// holds its part of the row; 24 values and 3 packs a lane fit GPT-2 small's C = 768
// exactly, where the next size up would cost 15-20% more registers.
static layernorm_kernel layernorm_kernel_for(int variant, int block, int C) {
    int need = 0;
    switch (variant) {
    case 1: return layernorm_forward_kernel1;
    case 2:
        need = ceil_div(C, 32); // values per lane
        return need <= 8 ? layernorm_forward_kernel2<8> : need <= 16 ? layernorm_forward_kernel2<16>
             : need <= 24 ? layernorm_forward_kernel2<24> : need <= 32 ? layernorm_forward_kernel2<32>
             : layernorm_forward_kernel2<64>;
    case 3:
        need = ceil_div(C / PACK, 32); // packs per lane
        return need <= 1 ? layernorm_forward_kernel3<1> : need <= 2 ? layernorm_forward_kernel3<2>
             : need <= 3 ? layernorm_forward_kernel3<3> : need <= 4 ? layernorm_forward_kernel3<4>
             : need <= 8 ? layernorm_forward_kernel3<8> : layernorm_forward_kernel3<16>;
    case 4:
        need = ceil_div(C / PACK, block); // packs per thread
        return need <= 1 ? layernorm_forward_kernel4<1> : need <= 2 ? layernorm_forward_kernel4<2>
             : need <= 4 ? layernorm_forward_kernel4<4> : layernorm_forward_kernel4<8>;
    default: fprintf(stderr, "Error: no variant %d\n", variant); exit(EXIT_FAILURE);
    }
}

// Whether a block of `block` threads can run that kernel at all. An SM has 64K registers,
// so a 1024-thread block allows 64 a thread; a kernel that holds more of the row (variant
// 2 at C = 768 needs 68, at C = 1600 about 146) fails to launch at the larger block sizes,
// and those are skipped. The emulator has no register file: there every size fits.
static int block_fits(int variant, int block, int C) {
#ifdef CUDA_EMU_H
    (void)variant, (void)block, (void)C;
    return 1;
#else
    cudaFuncAttributes attr;
    cudaCheck(cudaFuncGetAttributes(&attr, layernorm_kernel_for(variant, block, C)));
    return block <= attr.maxThreadsPerBlock;
#endif
}

static void layernorm_forward(int variant, int block, floatX *out, float *mean, float *rstd, const floatX *inp,
                              const floatX *weight, const floatX *bias, int N, int C) {
    layernorm_kernel kernel = layernorm_kernel_for(variant, block, C);
    unsigned grid = variant == 4 ? (unsigned)N : ceil_div(N, block / 32); // a block per row, or a warp
    kernel<<<grid, block>>>(out, mean, rstd, inp, weight, bias, N, C);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// one problem on the device, the checks, the timing

static const int block_sizes[5] = {64, 128, 256, 512, 1024};
static floatX *d_x, *d_w, *d_b, *d_out; // (N, C), (C), (C), (N, C)
static float *d_mean, *d_rstd;          // (N), (N)

// Fresh random inputs, never zero: row r is offset + scale * uniform, offset in [-1, 1),
// scale in [0.5, 2.5), except every 8th row, whose scale is 1e-3: its variance (~3e-7)
// is far below eps, so eps sets rstd there and any mistake in eps is plain to see.
static void problem_make(std::vector<floatX> &x, std::vector<floatX> &w, std::vector<floatX> &b, int N, int C) {
    x.resize((size_t)N * C);
    w.resize(C);
    b.resize(C);
    for (size_t r = 0; r < (size_t)N; r++) {
        float offset = rng_uniform(), scale = r % 8 == 7 ? 1e-3f : 1.5f + rng_uniform();
        for (int i = 0; i < C; i++) { x[r * C + i] = from_float(offset + scale * rng_uniform()); }
    }
    for (int i = 0; i < C; i++) { w[i] = from_float(1.0f + 0.5f * rng_uniform()); b[i] = from_float(0.5f * rng_uniform()); }
    cudaCheck(cudaMalloc(&d_x, x.size() * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_out, x.size() * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_w, C * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_b, C * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_mean, N * sizeof(float)));
    cudaCheck(cudaMalloc(&d_rstd, N * sizeof(float)));
    cudaCheck(cudaMemcpy(d_x, x.data(), x.size() * sizeof(floatX), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_w, w.data(), C * sizeof(floatX), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_b, b.data(), C * sizeof(floatX), cudaMemcpyHostToDevice));
}

static void problem_free(void) {
    for (void *p : {(void *)d_x, (void *)d_out, (void *)d_w, (void *)d_b, (void *)d_mean, (void *)d_rstd}) { cudaCheck(cudaFree(p)); }
}

// Tolerances, all in one place. Every variant sums a row in two stages: each thread adds
// its own values one after another (at most C / 32 of them in 1-3, at most C / 64 + 8 in
// 4), then the partial sums meet in a tree of at most 10 levels (32 lanes, 32 warps). A
// sum in fp32 is within (longest chain of additions) u sum|x_i| of the exact one, u =
// 2^-24 (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., chapter 4).
// We take K = C / 32 + 16 for the chain and U = FLT_EPSILON = 2^-23, twice u, so:
//   mean: K U mean|x|;
//   rstd: K U rstd, relative (the sum of squares has no cancellation, so its relative
//         error obeys the same bound, and sqrt and 1/x add a rounding or two);
//   out:  what those two errors do to (x - mean) rstd weight, plus 4 U of the terms for
//         the fp32 arithmetic, plus OUT_ROUND of the value for the rounding to floatX:
//         bf16 keeps 8 significant bits, so rounding to nearest moves a value by at most
//         2^-8 of itself; we allow twice that, like U, so that the rounding alone reads
//         as at most ~0.5 of the tolerance (fp32's own rounding is inside the 4 U).
// Real errors are far smaller (~1e-7 relative in mean and rstd); a bug (wrong index,
// a missed barrier, a wrong eps on the nearly constant rows) is off by 1e-2 or more.
#ifdef ENABLE_FP32
#define OUT_ROUND 0.0
#else
#define OUT_ROUND 0x1p-7
#endif
static int num_passed = 0, num_failed = 0;

// Runs variant v at every block size and compares all three outputs with the reference.
// Prints one line: the largest absolute errors, the worst error as a fraction of its
// tolerance (<= 1 passes; NaN, e.g. an output never written, fails), OK or NOT OK.
static void check_variant(int v, const std::vector<floatX> &x, const std::vector<floatX> &w, const std::vector<floatX> &b,
                          const double *ref_out, const double *ref_mean, const double *ref_rstd, int N, int C) {
    printf("%5d x %4d  %-22s ", N, C, variant_names[v]);
    if (unsupported(v, C)) { printf("skipped: %s\n", unsupported(v, C)); return; }
    size_t n = (size_t)N * C;
    std::vector<floatX> out(n);
    std::vector<float> mean(N), rstd(N);
    double max_err[3] = {0.0, 0.0, 0.0}, worst = 0.0;
    char where[200] = "", blocks[40] = "";
    for (int block : block_sizes) {
        if (!block_fits(v, block, C)) { continue; }
        snprintf(blocks + strlen(blocks), sizeof(blocks) - strlen(blocks), "%s%d", blocks[0] ? "," : "", block);
        cudaCheck(cudaMemset(d_out, 0xFF, n * sizeof(floatX))); // all NaN: unwritten outputs fail
        cudaCheck(cudaMemset(d_mean, 0xFF, N * sizeof(float)));
        cudaCheck(cudaMemset(d_rstd, 0xFF, N * sizeof(float)));
        layernorm_forward(v, block, d_out, d_mean, d_rstd, d_x, d_w, d_b, N, C);
        cudaCheck(cudaMemcpy(out.data(), d_out, n * sizeof(floatX), cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(mean.data(), d_mean, N * sizeof(float), cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(rstd.data(), d_rstd, N * sizeof(float), cudaMemcpyDeviceToHost));
        for (size_t r = 0; r < (size_t)N; r++) {
            double abs_mean = 0.0;
            for (int i = 0; i < C; i++) { abs_mean += fabs(to_float(x[r * C + i])) / C; }
            double s = ref_rstd[r], K = C / 32.0 + 16, tol_m = K * FLT_EPSILON * abs_mean, tol_s = K * FLT_EPSILON;
            // one (got, expected, tolerance) per output of this row: rstd, mean, then out
            auto look = [&](const char *name, size_t i, double got, double want, double tol, int which) {
                double err = fabs(got - want), ratio = std::isnan(err) ? INFINITY : err / tol;
                max_err[which] = std::isnan(err) ? INFINITY : fmax(max_err[which], err);
                if (ratio > worst) {
                    worst = ratio;
                    snprintf(where, sizeof(where), "block %d: %s[%zu] = %.7g, expected %.7g, tolerance %.2g", block,
                             name, i, got, want, tol);
                }
            };
            look("rstd", r, rstd[r], s, tol_s * s, 2);
            look("mean", r, mean[r], ref_mean[r], tol_m, 1);
            for (int i = 0; i < C; i++) {
                size_t e = r * C + i;
                double xm = to_float(x[e]) - ref_mean[r], wi = to_float(w[i]);
                double tol32 = fabs(wi) * s * (tol_m + tol_s * fabs(xm)) + 4 * FLT_EPSILON * (fabs(xm * s * wi) + fabs(to_float(b[i])));
                look("out", e, to_float(out[e]), ref_out[e], (1 + OUT_ROUND) * tol32 + OUT_ROUND * fabs(ref_out[e]), 0);
            }
        }
    }
    int ok = worst <= 1.0;
    printf("blocks %-19s max err out %.1e mean %.1e rstd %.1e, worst %.2f of tol  %s\n", blocks, max_err[0],
           max_err[1], max_err[2], worst, ok ? "OK" : "NOT OK");
    if (!ok) { printf("    worst at %s\n", where); }
    if (ok) { num_passed++; } else { num_failed++; }
}

#ifndef CUDA_EMU_H
// Median GPU time of one call in ms: one warm-up call, then 20 timed ones
static float time_variant(int v, int block, int N, int C) {
    return time_median_ms([&] { layernorm_forward(v, block, d_out, d_mean, d_rstd, d_x, d_w, d_b, N, C); });
}
#define PEAK_GBS 4800.0 // H200 (HBM3e), NVIDIA's figure; on another GPU the % is still of this
#endif

// ----------------------------------------------------------------------------

static void usage(void) {
    printf("usage: layernorm_forward [N] [-v N] [-c] [-s SEED] [-h]\n"
           "  N, -v N  only variant N, checked and then timed (default: all of 1-4)\n"
           "           1 trainer's kernel, 2 row in registers, 3 16-byte loads, 4 block per row\n"
           LADDER_COMMON_FLAGS);
}

int main(int argc, char **argv) {
    LadderArgs args = parse_args(argc, argv, 4, 1, usage); // variants 1-4, also as a plain N
    rng_state = args.seed;
    int first = args.only ? args.only : 1, last = args.only ? args.only : 4;
#ifdef CUDA_EMU_H
    // On the CPU every thread of a block is a fiber: small sizes only, and no timing
    const int shapes[][2] = {{37, 67}, {16, 256}, {8, 768}, {8, 1600}};
    printf("CPU emulation (dev/emu), %s: checks at small sizes, no timing; seed %llu\n", PRECISION_NAME, args.seed);
#else
    const int shapes[][2] = {{8192, 768}, {8191, 1600}, {8192, 67}, {37, 256}};
    require_gpu("runs the checks: bash dev/emu/emu_build.sh dev/cuda/layernorm_forward.cu /tmp/lnf_cpu && "
                "/tmp/lnf_cpu -c", PRECISION_NAME, args.seed);
#endif

    // 1. correctness, every variant at every shape and block size, before any timing
    for (const int *shape : shapes) {
        int N = shape[0], C = shape[1];
        std::vector<floatX> x, w, b;
        problem_make(x, w, b, N, C);
        std::vector<double> ref_out((size_t)N * C), ref_mean(N), ref_rstd(N);
        layernorm_forward_cpu(ref_out.data(), ref_mean.data(), ref_rstd.data(), x.data(), w.data(), b.data(), N, C);
        for (int v = first; v <= last; v++) { check_variant(v, x, w, b, ref_out.data(), ref_mean.data(), ref_rstd.data(), N, C); }
        problem_free();
    }

#ifndef CUDA_EMU_H
    // 2. timing. The bytes that must move: x read and out written once, weight and bias
    // read once, mean and rstd written; what the caches save on re-reads is not counted.
    if (!args.check_only) {
        const int N = 64 * 1024;
        printf("\nN = %d rows; ms at each block size: median of 20 calls after a warm-up (-: too many registers\n"
               "for a block that size); GB/s and %% of the H200's 4.8 TB/s at the best block size\n", N);
        printf("%4s  %-22s %8s %8s %8s %8s %8s %8s %8s\n", "C", "variant", "64", "128", "256", "512", "1024", "GB/s", "% peak");
        for (int C : {768, 1600}) {
            std::vector<floatX> x, w, b;
            problem_make(x, w, b, N, C);
            double bytes = (2.0 * N * C + 2.0 * C) * sizeof(floatX) + 2.0 * N * sizeof(float);
            for (int v = first; v <= last; v++) {
                printf("%4d  %-22s ", C, variant_names[v]);
                if (unsupported(v, C)) { printf("skipped: %s\n", unsupported(v, C)); continue; }
                float best = INFINITY;
                for (int block : block_sizes) {
                    if (!block_fits(v, block, C)) { printf("%8s ", "-"); continue; }
                    float ms = time_variant(v, block, N, C);
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
