/*
causal_softmax.cu: the attention softmax of train_gpt2.cu (forward), four ways.

att is (rows, T) with rows = B*NH*T, holding the scaled scores q k^T / sqrt(HS);
row r is query position t = r % T. In place, entries 0..t become the softmax over
0..t, and entries t+1..T-1 become exactly 0 (the next matmul reads them).

    1: the trainer's kernel: a warp per row, three passes (max, sum, write)  — ./dev/cuda/causal_softmax 1
    2: online softmax: max and sum in one pass, so two reads of the row     — ./dev/cuda/causal_softmax 2
    3: the row in registers (T/32 values a lane): one read, one write      — ./dev/cuda/causal_softmax 3
    4: as 3, with 128-bit loads and stores (8 bf16 or 4 fp32 at a time)    — ./dev/cuda/causal_softmax 4

Variants 3 and 4 keep a row in registers, so they take T <= 1024 (GPT-2's longest
sequence). All are deterministic: a row is one warp, reduced by shuffles in a fixed
order. floatX is bf16, as in the trainer's default build; -DENABLE_FP32 makes it fp32.
The arithmetic is fp32 either way.

main checks every variant at 32, 64, 128, 256 and 512 threads per block (a warp per
row) against a softmax in double on the CPU, from the same floatX scores the GPU
reads (fresh random numbers, seed -s): at T = 67, 129, 136 and 1024, rows = B*NH*T
for B*NH = 2 or 3. Entries on and below the diagonal must be within a relative
tolerance (2^-8, bf16's rounding, plus a bound on fp32's error: see tolerance());
entries above it must be exactly 0. Then it times each variant at every block size at
B*NH = 96 (8 x 12 heads; the trainer's default B = 64 is 8x that) and T = 1024, and
prints ms, GB/s and % of the H200's 4.8 TB/s. It ends with "N passed, M failed" (a
check is one variant at one T, all block sizes) and exits non-zero if one failed.
TODO: the H200 numbers go here once measured (written on a machine without a GPU).

    nvcc -O3 -DENABLE_BF16 -gencode arch=compute_90,code=sm_90 dev/cuda/causal_softmax.cu -o dev/cuda/causal_softmax
    ./dev/cuda/causal_softmax          (N: one variant, -c checks only, -s SEED, -h all flags)
Without a GPU, the CPU emulator runs the checks of all four variants at small sizes:
    bash dev/emu/emu_build.sh dev/cuda/causal_softmax.cu /tmp/causal_softmax_cpu && /tmp/causal_softmax_cpu -c

Left out: the backward pass; not storing att at all (flash attention computes the
softmax tile by tile next to the two matmuls, which is what cuDNN does); rows longer
than 1024 in variants 3-4 (they would go through shared memory, or a block per row).
*/
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>
#include "common.h"    // cudaCheck, rng_uniform, ceil_div, warp_sum, warp_max, parse_args, require_gpu, time_median_ms
#include "precision.h" // floatX (bf16 unless -DENABLE_FP32), to_float, from_float, Pack of PACK floatX

// ----------------------------------------------------------------------------
// the CPU reference

// ref gets the probabilities of the entries on and below the diagonal, in double
// from the same floatX scores the GPU reads; entries above it are left alone (they
// must be exactly 0, which check_softmax tests on its own).
static void causal_softmax_cpu(double *ref, const floatX *att, size_t rows, int T) {
    for (size_t r = 0; r < rows; r++) {
        int t = (int)(r % T);
        const floatX *a = att + r * T;
        double m = -INFINITY, sum = 0.0;
        for (int i = 0; i <= t; i++) { m = fmax(m, (double)to_float(a[i])); }
        for (int i = 0; i <= t; i++) { sum += exp((double)to_float(a[i]) - m); }
        for (int i = 0; i <= t; i++) { ref[r * T + i] = exp((double)to_float(a[i]) - m) / sum; }
    }
}

// ----------------------------------------------------------------------------
// the kernels. All four: a warp per row, blockDim.x / 32 rows per block, reduced by
// train_gpt2.cu's warp_max and warp_sum (in common.h).

// 1: train_gpt2.cu's causal_softmax_kernel, verbatim. Three passes along the row,
// each a lane-strided loop: the max (subtracted so that exp cannot overflow), the
// sum of exponentials, and the write, which recomputes each exponential. The first
// t+1 entries are read three times; L1 and L2 catch most repeats of a 2 KB row, so
// the cost is less in DRAM traffic than in a long dependent chain per row: each
// pass waits on the one before, with only a few loads in flight per lane.
// --- shared-copy of train_gpt2.cu: causal_softmax_kernel (as causal_softmax_kernel1) ---
__global__ void causal_softmax_kernel1(floatX *att, int rows, int T) {
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

// 2: online softmax (Milakov & Gimelshein 2018, "Online normalizer calculation for
// softmax"). Each lane keeps a running max m and the sum s of exp(x - m) over its
// entries; when a larger x arrives, s is rescaled by exp(m_old - m_new). Then the
// lanes' pairs are merged: every s rescaled to the warp's max M before the sum.
// One pass fewer than variant 1; the second pass still reads the row again.
__global__ void causal_softmax_kernel2(floatX *att, int rows, int T) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) { return; }
    int t = row % T;
    floatX *a = att + (size_t)row * T;
    float m = -INFINITY, s = 0.0f;
    for (int i = lane; i <= t; i += 32) {
        float x = to_float(a[i]);
        if (x > m) { // a new max: one exp to rescale the sum, none for x itself
            s = s * expf(m - x) + 1.0f;
            m = x;
        } else {
            s += expf(x - m);
        }
    }
    float M = warp_max(m);
    // lanes past t saw nothing (m = -inf, s = 0); lane 0 always has entry 0, so M is finite
    float inv = 1.0f / warp_sum(m == -INFINITY ? 0.0f : s * expf(m - M));
    for (int i = lane; i < T; i += 32) { a[i] = from_float(i <= t ? expf(to_float(a[i]) - M) * inv : 0.0f); }
}

// 3: the row in registers. Lane l holds entries l, l + 32, ..., all its loads issued
// at once (32 in flight per lane, where the loops above have a few), then max, exp
// and sum, and the write happen on registers: the row is read once and written once,
// the least traffic the operation allows. The loops must unroll completely, so that
// x[k] is a register and not local memory: MAX_T is a compile-time constant, and
// the checks against t and T are predicates. A chunk of 32 columns wholly above the
// diagonal is skipped by the whole warp at once (the test is the same for all lanes).
#define MAX_T 1024
__global__ void causal_softmax_kernel3(floatX *att, int rows, int T) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) { return; }
    int t = row % T;
    floatX *a = att + (size_t)row * T;
    float x[MAX_T / 32];
    float m = -INFINITY;
    #pragma unroll
    for (int k = 0; k < MAX_T / 32; k++) {
        int i = lane + 32 * k;
        x[k] = i <= t ? to_float(a[i]) : -INFINITY;
        m = fmaxf(m, x[k]);
    }
    m = warp_max(m);
    float sum = 0.0f;
    #pragma unroll
    for (int k = 0; k < MAX_T / 32; k++) {
        if (32 * k > t) { break; } // the rest of the row is above the diagonal: x stays -inf
        x[k] = expf(x[k] - m);     // exp(-inf) = 0 for this chunk's entries past t
        sum += x[k];
    }
    float inv = 1.0f / warp_sum(sum);
    #pragma unroll
    for (int k = 0; k < MAX_T / 32; k++) {
        int i = lane + 32 * k;
        if (i < T) { a[i] = from_float(i <= t ? x[k] * inv : 0.0f); }
    }
}

// 4: variant 3 with 16-byte accesses. In bf16 a lane's load in variant 3 moves 2
// bytes, and a warp's 64: keeping ~5 TB/s of HBM busy takes many load instructions
// in flight. Here a lane moves 16 bytes at once (a Pack of precision.h: 8 bf16 or 4 fp32; the
// alignas(16) struct copy compiles to ld.global.v4 / st.global.v4), a warp 512
// contiguous bytes: 4 loads and 4 stores a lane per 1024-entry bf16 row instead of
// 32 each. Lane l holds the packs l, l + 32, ... A pack needs its address 16-byte
// aligned: att is (cudaMalloc's are 256-byte aligned) and then every row is when T
// is a multiple of PACK. For other T (ragged sizes) the same code goes entry by
// entry; on the GPU that branch is taken by the whole grid alike.
__global__ void causal_softmax_kernel4(floatX *att, int rows, int T) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) { return; }
    int t = row % T;
    floatX *a = att + (size_t)row * T;
    const bool aligned = T % PACK == 0;
    const int packs = MAX_T / PACK / 32; // per lane: 4 in bf16, 8 in fp32
    float x[packs][PACK];
    float m = -INFINITY;
    #pragma unroll
    for (int k = 0; k < packs; k++) {
        int i0 = (lane + 32 * k) * PACK; // this pack's first column
        Pack p;
        if (aligned && i0 <= t) {
            p = *(const Pack *)(a + i0); // T % PACK == 0: the whole pack lies inside the row
        } else {
            #pragma unroll
            for (int e = 0; e < PACK; e++) { p.v[e] = i0 + e <= t ? a[i0 + e] : from_float(0.0f); }
        }
        #pragma unroll
        for (int e = 0; e < PACK; e++) {
            x[k][e] = i0 + e <= t ? to_float(p.v[e]) : -INFINITY;
            m = fmaxf(m, x[k][e]);
        }
    }
    m = warp_max(m);
    float sum = 0.0f;
    #pragma unroll
    for (int k = 0; k < packs; k++) {
        if (32 * k * PACK > t) { break; } // all of the warp's packs k.. are above the diagonal
        #pragma unroll
        for (int e = 0; e < PACK; e++) {
            x[k][e] = expf(x[k][e] - m);
            sum += x[k][e];
        }
    }
    float inv = 1.0f / warp_sum(sum);
    #pragma unroll
    for (int k = 0; k < packs; k++) {
        int i0 = (lane + 32 * k) * PACK;
        Pack p;
        #pragma unroll
        for (int e = 0; e < PACK; e++) { p.v[e] = from_float(i0 + e <= t ? x[k][e] * inv : 0.0f); }
        if (aligned) {
            if (i0 < T) { *(Pack *)(a + i0) = p; }
        } else {
            #pragma unroll
            for (int e = 0; e < PACK; e++) {
                if (i0 + e < T) { a[i0 + e] = p.v[e]; }
            }
        }
    }
}

// ----------------------------------------------------------------------------
// the launcher

static const char *variant_names[5] = {"", "1 three passes", "2 online", "3 registers", "4 registers+128b"};

// the softmax of att (rows, T) in place, with variant 1-4 and `block` threads (a
// multiple of 32) per block, a warp per row
static void causal_softmax_forward(int variant, floatX *att, size_t rows, int T, int block) {
    if (variant >= 3 && T > MAX_T) {
        fprintf(stderr, "Error: variant %d keeps a row in registers and takes T <= %d, got T = %d\n", variant, MAX_T, T);
        exit(EXIT_FAILURE);
    }
    unsigned grid = ceil_div(rows, block / 32);
    switch (variant) {
    case 1: causal_softmax_kernel1<<<grid, block>>>(att, (int)rows, T); break;
    case 2: causal_softmax_kernel2<<<grid, block>>>(att, (int)rows, T); break;
    case 3: causal_softmax_kernel3<<<grid, block>>>(att, (int)rows, T); break;
    case 4: causal_softmax_kernel4<<<grid, block>>>(att, (int)rows, T); break;
    default: fprintf(stderr, "Error: no variant %d\n", variant); exit(EXIT_FAILURE);
    }
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// the checks and the timing

static const int block_sizes[] = {32, 64, 128, 256, 512}; // threads, = warps (rows) per block x 32
static int num_passed = 0, num_failed = 0;

// Scores: uniform in [-8, 8) around a per-row offset uniform in [-100, 100). The
// offset is there so that a kernel which forgets to subtract the max fails: exp
// overflows past 88 and underflows to 0 (and 0/0) below -103.
static void fill_scores(std::vector<floatX> &att, int T) {
    for (size_t r = 0; r < att.size() / T; r++) {
        float offset = 100.0f * rng_uniform();
        for (int i = 0; i < T; i++) { att[r * T + i] = from_float(offset + 8.0f * rng_uniform()); }
    }
}

// Tolerance, relative, entry by entry; how it was chosen: in fp32 the sum of n <= T
// positive terms is off by at most (n-1) u relative, u = 2^-24 (Higham, Accuracy and
// Stability of Numerical Algorithms, 2nd ed., section 4.2); the online rescalings of
// variant 2 can add up to ~3u each, and expf (2 ulp, CUDA's math documentation), x - m,
// the division and the product a few u more: (4T + 32) u in all, a bound that actual
// errors stay far below. A bf16 output adds its own rounding, at most 2^-8 relative.
// Bugs fail by far: an entry left out is off by 100%, and a term missed in a sum moves
// its whole row by that term's probability, large in the short rows (small t) that
// every T includes.
static double tolerance(int T) {
    double fp32 = (4.0 * T + 32.0) * 0x1p-24;
    return sizeof(floatX) == 2 ? fp32 + 0x1p-8 * (1.0 + fp32) : fp32;
}

// Runs `variant` at every block size, each time on a fresh copy of the scores, and
// compares all entries: on and below the diagonal with the reference, above it with
// exactly 0. One line: the largest relative error over the block sizes, OK or NOT OK;
// on failure a second line with the worst entry of the first block size that failed.
static void check_softmax(int variant, floatX *d_att, const std::vector<floatX> &scores, const double *ref, int T) {
    size_t rows = scores.size() / T;
    printf("T %4d rows %5zu  %-17s ", T, rows, variant_names[variant]);
    std::vector<floatX> out(scores.size());
    double tol = tolerance(T), max_err = 0.0;
    char where[256] = "";
    for (int block : block_sizes) {
        cudaCheck(cudaMemcpy(d_att, scores.data(), scores.size() * sizeof(floatX), cudaMemcpyHostToDevice));
        causal_softmax_forward(variant, d_att, rows, T, block);
        cudaCheck(cudaMemcpy(out.data(), d_att, out.size() * sizeof(floatX), cudaMemcpyDeviceToHost));
        double worst = 0.0;
        size_t worst_at = 0, nonzero_above = 0, first_nonzero = 0;
        for (size_t r = 0; r < rows; r++) {
            int t = (int)(r % T);
            for (int i = 0; i < T; i++) {
                size_t j = r * T + i;
                float y = to_float(out[j]);
                if (i > t) { // above the diagonal: exactly 0, nothing else
                    if (y != 0.0f && nonzero_above++ == 0) { first_nonzero = j; }
                    continue;
                }
                double err = fabs((double)y - ref[j]) / ref[j]; // ref > 0: the scores are finite
                if (std::isnan(err)) { err = INFINITY; }        // a NaN, e.g. from 0/0, is wrong
                if (err > worst) { worst = err; worst_at = j; }
            }
        }
        max_err = fmax(max_err, worst);
        if ((worst > tol || nonzero_above > 0) && where[0] == '\0') {
            int n = snprintf(where, sizeof(where), "%d threads: row %zu column %zu = %.7g, expected %.7g; ", block,
                             worst_at / T, worst_at % T, to_float(out[worst_at]), ref[worst_at]);
            if (nonzero_above > 0) {
                snprintf(where + n, sizeof(where) - n, "%zu entries above the diagonal not 0, the first row %zu column %zu",
                         nonzero_above, first_nonzero / T, first_nonzero % T);
            } else {
                snprintf(where + n, sizeof(where) - n, "all entries above the diagonal 0");
            }
        }
    }
    int ok = where[0] == '\0';
    printf("threads 32-512: max rel err %.2e (tolerance %.1e)  %s\n", max_err, tol, ok ? "OK" : "NOT OK");
    if (!ok) { printf("    worst at %s\n", where); }
    if (ok) { num_passed++; } else { num_failed++; }
}

#ifndef CUDA_EMU_H
// Median GPU time of one call in ms: one warm-up call, then 20 timed ones. The
// softmax is in place, so after the first call the kernels work on probabilities
// rather than scores. That changes no byte moved, and since softmax keeps the order
// of a row, variant 2's new-max branches go as before (up to ties from rounding).
static float time_softmax(int variant, floatX *d_att, size_t rows, int T, int block) {
    return time_median_ms([&] { causal_softmax_forward(variant, d_att, rows, T, block); });
}
#endif

// ----------------------------------------------------------------------------

static void usage(void) {
    printf("usage: causal_softmax [N] [-v N] [-c] [-s SEED] [-h]\n"
           "  N, -v N  only variant N, checked and then timed (default: all of 1-4)\n"
           "           1 three passes (the trainer's), 2 online softmax, 3 row in registers, 4 registers + 128-bit\n"
           "  -c       check only, no timing (default: check, then time)\n"
           "  -s SEED  seed of the random scores (default: 1337)\n"
           "  -h       this help\n");
}

int main(int argc, char **argv) {
    LadderArgs args = parse_args(argc, argv, 4, 1, usage); // variants 1-4, also as a plain N
    rng_state = args.seed;
    int first = args.only ? args.only : 1, last = args.only ? args.only : 4;
    // the checks' sizes, {B*NH, T}: rows = B*NH*T; ragged T, one of them a multiple of
    // 8 (variant 4's 128-bit path) but not of 32, and GPT-2's T = 1024
#ifdef CUDA_EMU_H
    // every thread a fiber on the CPU: small sizes, and nothing to time
    const int sizes[][2] = {{2, 67}, {2, 130}, {1, 136}, {1, 1024}};
    printf("CPU emulation (dev/emu): checks only, at small sizes; %s; seed %llu\n", PRECISION_NAME, args.seed);
#else
    const int sizes[][2] = {{3, 67}, {3, 129}, {3, 136}, {2, 1024}};
    require_gpu("checks all variants: bash dev/emu/emu_build.sh dev/cuda/causal_softmax.cu /tmp/causal_softmax_cpu && "
                "/tmp/causal_softmax_cpu -c", PRECISION_NAME, args.seed);
#endif

    // 1. correctness: every variant, every block size, every size, before any timing
    for (const int *s : sizes) {
        int T = s[1];
        size_t rows = (size_t)s[0] * T;
        std::vector<floatX> scores(rows * T);
        fill_scores(scores, T);
        std::vector<double> ref(rows * T);
        causal_softmax_cpu(ref.data(), scores.data(), rows, T);
        floatX *d_att;
        cudaCheck(cudaMalloc(&d_att, scores.size() * sizeof(floatX)));
        for (int v = first; v <= last; v++) { check_softmax(v, d_att, scores, ref.data(), T); }
        cudaCheck(cudaFree(d_att));
    }

#ifndef CUDA_EMU_H
    // 2. timing at B*NH = 8 * 12, T = 1024. Bytes counted: the least any kernel must
    // move, the t+1 scores of each row read once and all T entries written once; so
    // GB/s is comparable across variants (variant 1 reads more, mostly from cache).
    if (!args.check_only) {
        const int BNH = 8 * 12, T = 1024;
        size_t rows = (size_t)BNH * T;
        std::vector<floatX> scores(rows * T);
        fill_scores(scores, T);
        floatX *d_att;
        cudaCheck(cudaMalloc(&d_att, scores.size() * sizeof(floatX)));
        cudaCheck(cudaMemcpy(d_att, scores.data(), scores.size() * sizeof(floatX), cudaMemcpyHostToDevice));
        double bytes = (double)BNH * ((double)T * (T + 1) / 2 + (double)T * T) * sizeof(floatX);
        const double peak = 4.8e12; // the H200's HBM3e, bytes/s (NVIDIA's data sheet); other GPUs too are held to it
        printf("\nB*NH %d, T %d, %s, %.1f MB a call; ms by threads per block: median of 20 calls after a warm-up;\n"
               "GB/s and %% of the H200's 4.8 TB/s at the best block size\n", BNH, T, PRECISION_NAME, bytes / 1e6);
        printf("%-17s %8s %8s %8s %8s %8s %8s %8s\n", "variant", "32", "64", "128", "256", "512", "GB/s", "% peak");
        for (int v = first; v <= last; v++) {
            printf("%-17s ", variant_names[v]);
            float best = INFINITY;
            for (int block : block_sizes) {
                float ms = time_softmax(v, d_att, rows, T, block);
                best = fminf(best, ms);
                printf("%8.4f ", ms);
            }
            double gbs = bytes / (best * 1e-3) / 1e9;
            printf("%8.0f %7.1f%%\n", gbs, 100.0 * gbs * 1e9 / peak);
        }
        cudaCheck(cudaFree(d_att));
    }
#endif
    printf("%d passed, %d failed\n", num_passed, num_failed);
    return num_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
